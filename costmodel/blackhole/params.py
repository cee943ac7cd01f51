"""The fitted (unknown) parameters of the Blackhole op models: efficiencies, latencies, overheads.

Everything the public specs give is in ``costmodel.hardware``; what they do not give is here, one
named float per physical effect, shared by every op that has that effect (no per-op free constant
except the per-op-class device-kernel fixed time; the host/dispatch part of a launch, which a traced
per-op table includes and a kernel-only profiler row does not, is shared: ``dispatch_us`` +
``dispatch_core_us`` per core). Each field carries its unit, meaning, the source of its
bound or prior, and how the fit parameterises it (``fit_field`` metadata): this is the one place
those are written down. ``costmodel.blackhole.fit`` fits them to the measured rows in
``costmodel/data``; the result (with its covariance) is stored in ``data/calibration.json``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from costmodel._pytree import pytree_dataclass
from jaxref.validation import check_choice

DATA_DIR = pathlib.Path(__file__).resolve().parents[1] / "data"
CALIBRATION_PATH = DATA_DIR / "calibration.json"

# Bound of dram_eff: the best measured DRAM read on a p150 (one bank-adjacent reader per bank, 16 KB
# packets, double-buffered) reaches 500 of 512 GB/s. Source: tenstorrent/tt-metal
# tech_reports/Saturating_DRAM_bandwidth/Saturating_DRAM_bandwidth_Blackhole.md @ 7ffb007c.
DRAM_EFF_MAX = 500.0 / 512.0


def fit_field(*, unit: str, meaning: str, prior: float, transform: str = "log", source: str = "fitted"):
    """A FitParams field: unit, meaning, prior value (the fit's start and the centre of its weak
    prior), transform to the unconstrained space ('log', 'log1m' = log(q - 1), 'logit_dram' =
    logit(x / DRAM_EFF_MAX)) and the source of any bound or prior."""
    return dataclasses.field(metadata={"unit": unit, "meaning": meaning, "prior": prior, "transform": transform,
                                       "source": source})


@pytree_dataclass
class FitParams:
    """Unknown parameters of the Blackhole model (all > 0; ``dram_eff`` in (0, DRAM_EFF_MAX);
    ``overlap_exponent`` > 1). Priors are orders of magnitude, not measurements."""

    dram_eff: float = fit_field(
        unit="1", meaning="achievable fraction of peak DRAM bandwidth with all cores streaming", prior=0.6,
        transform="logit_dram",
        source="bounded by 500/512 (Saturating_DRAM_bandwidth_Blackhole.md @ 7ffb007c); prior: Wormhole 82-92% "
               "large reads, ~50% for M=64 matmuls (REFERENCE §2)")
    core_read_tiles_per_s: float = fit_field(unit="tiles/s", meaning="one core's sustained DRAM page (tile) reads",
                                             prior=1e7,
                                             source="prior: an order of magnitude (~20 GB/s of 2 KB pages per core); "
                                                    "from 5e6 the fit stopped in a poorer local optimum (rms log "
                                                    "error 0.16 vs 0.058)")
    dram_latency_us: float = fit_field(unit="us", meaning="round trip of one blocking DRAM read", prior=0.4,
                                       source="prior ~500 cycles at 1.35 GHz")
    overlap_exponent: float = fit_field(unit="1", meaning="q-norm exponent of concurrent pipeline stages "
                                        "(1 serial, inf max)", prior=2.0, transform="log1m")
    mm_block_sync_us: float = fit_field(unit="us", meaning="per K-block in0 multicast handshake of the 1D matmul",
                                        prior=0.5)
    eltwise_cycles_per_tile: float = fit_field(unit="cycles", meaning="one elementwise pass over a 32x32 tile",
                                               prior=64.0)
    launch_matmul_us: float = fit_field(unit="us", meaning="device-kernel fixed time of a matmul op", prior=2.0)
    launch_norm_us: float = fit_field(unit="us", meaning="device-kernel fixed time of a row op (rms_norm, layer_norm, "
                                      "softmax)", prior=1.5)
    launch_rope_us: float = fit_field(unit="us", meaning="device-kernel fixed time of a rotary_embedding_hf op",
                                      prior=1.5)
    launch_heads_us: float = fit_field(unit="us", meaning="device-kernel fixed time of a data-movement op "
                                       "(nlp_create_qkv_heads / nlp_concat_heads, reshape, transpose, concat, slice)",
                                       prior=1.5)
    launch_fill_cache_us: float = fit_field(unit="us", meaning="device-kernel fixed time of a fill_cache op", prior=1.0)
    launch_eltwise_us: float = fit_field(
        unit="us", meaning="device-kernel fixed time of a binary eltwise op", prior=1.0,
        source="prior: 24-tile BinaryNg adds take 1.6-2.4 us kernel time (tt-perf-report tests/data/"
               "bh_64_clip_encoder_1.csv @ 00b7324a)")
    dispatch_us: float = fit_field(
        unit="us", meaning="per-op host/dispatch time a traced per-op table includes and a kernel-only profiler row "
                           "does not (command-queue dispatch, go signal, op-to-op gap)", prior=3.0)
    dispatch_core_us: float = fit_field(
        unit="us", meaning="per-core part of an op's dispatch: runtime arguments and launch message per core the "
                           "program is sent to (traced per-op table only)", prior=0.02,
        source="kernel-only rows show the in-kernel start skew is small (DEVICE KERNEL FIRST TO LAST START "
               "0.15-0.4 us over 64-110 cores, shared/data/profiler_reports), so the per-core cost is dispatch")
    launch_sdpa_us: float = fit_field(unit="us", meaning="device-kernel fixed time of an SDPA op (decode or standard)",
                                      prior=5.0)
    trace_overlap_us: float = fit_field(unit="us", meaning="per-op time hidden by back-to-back trace replay",
                                        prior=1.0)
    host_bytes_per_s: float = fit_field(unit="B/s", meaning="host<->device rate of small uploads incl. conversion",
                                        prior=1e9)
    host_proj_us: float = fit_field(unit="us", meaning="host action_in_proj + action_out_proj per step",
                                    prior=1000.0)


PARAM_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(FitParams))


def param_info(name: str) -> dict:
    """Unit, meaning, prior, transform and source of one parameter."""
    fields = {f.name: f for f in dataclasses.fields(FitParams)}
    check_choice("parameter", name, PARAM_NAMES)
    return dict(fields[name].metadata)


def initial_params() -> FitParams:
    """The prior: physically plausible orders of magnitude (the fit's starting point)."""
    return FitParams(**{n: float(param_info(n)["prior"]) for n in PARAM_NAMES})


def params_to_dict(p: FitParams) -> dict[str, float]:
    """Plain floats, for JSON and reports."""
    return {n: float(getattr(p, n)) for n in PARAM_NAMES}


def params_from_dict(d: dict[str, float]) -> FitParams:
    """Inverse of ``params_to_dict``; raises ValueError on a missing or unknown name."""
    if set(d) != set(PARAM_NAMES):
        raise ValueError(f"fit params keys {sorted(set(d) ^ set(PARAM_NAMES))} missing or unknown; "
                         f"expected {sorted(PARAM_NAMES)}")
    return FitParams(**{k: float(d[k]) for k in PARAM_NAMES})


def load_fitted(path: str | pathlib.Path = CALIBRATION_PATH) -> FitParams:
    """The fitted parameters of a calibration JSON (default: the stored one)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"calibration file {path} missing; run `python -m costmodel.blackhole calibrate --write`")
    return params_from_dict(json.loads(path.read_text())["params"])
