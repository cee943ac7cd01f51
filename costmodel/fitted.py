"""The fitted (unknown) parameters of the Blackhole op models: efficiencies, latencies, overheads.

Everything the public specs give is in ``costmodel.hardware``; what they do not give is here, one
named float per physical effect, shared by every op that has that effect (no per-op free constant
except the per-op-class launch overhead). ``costmodel.calibrate`` fits them to the measured tables
in ``costmodel/data``; the result is stored in ``data/calibration.json`` together with the data it
was fitted to, and loaded by ``load_fitted()``.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

from costmodel._pytree import pytree_dataclass

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
CALIBRATION_PATH = DATA_DIR / "calibration.json"


@pytree_dataclass
class FitParams:
    """Unknown parameters of the Blackhole model (all > 0; ``dram_eff`` in (0, 1); ``overlap_exponent`` > 1)."""

    dram_eff: float  # achievable fraction of peak DRAM bandwidth, all cores streaming
    core_read_tiles_per_s: float  # one core's sustained DRAM page (tile) requests per second
    dram_latency_us: float  # round trip of one blocking DRAM read (tile or block), us
    overlap_exponent: float  # q of the q-norm combining concurrent pipeline stages (1 serial, inf max)
    mm_block_sync_us: float  # per K-block of the 1D-multicast matmul: in0 multicast + semaphores, us
    eltwise_cycles_per_tile: float  # one elementwise FPU/SFPU pass over a 32x32 tile incl. unpack/pack
    softmax_cycles_per_tile: float  # online softmax per 32x32 score tile (max, sub, exp, sum, rescale)
    launch_matmul_us: float  # fixed per-op time (program launch, kernel init, teardown), per op class
    launch_norm_us: float
    launch_rope_us: float
    launch_heads_us: float  # nlp_create_qkv_heads / nlp_concat_heads
    launch_fill_cache_us: float
    launch_eltwise_us: float
    launch_sdpa_us: float  # flash-decode and standard SDPA
    trace_overlap_us: float  # per-op time hidden when a trace replays ops back to back, us
    host_bytes_per_s: float  # effective host<->device rate for small tensors incl. host-side conversion
    host_proj_us: float  # host action_in_proj + action_out_proj (torch fp32) per Euler step, us


# unit and meaning of each parameter, for reports
DESCRIPTIONS: dict[str, tuple[str, str]] = {
    "dram_eff": ("1", "achievable fraction of peak DRAM bandwidth with all cores streaming"),
    "core_read_tiles_per_s": ("tiles/s", "one core's sustained DRAM page (tile) read requests"),
    "dram_latency_us": ("us", "round trip of one blocking DRAM read"),
    "overlap_exponent": ("1", "q-norm exponent of concurrent pipeline stages (1 = serial, inf = max)"),
    "mm_block_sync_us": ("us", "per K-block in0 multicast handshake of the 1D matmul"),
    "eltwise_cycles_per_tile": ("cycles", "one elementwise pass over a tile"),
    "softmax_cycles_per_tile": ("cycles", "online-softmax work per score tile"),
    "launch_matmul_us": ("us", "fixed time per matmul op"),
    "launch_norm_us": ("us", "fixed time per rms_norm op"),
    "launch_rope_us": ("us", "fixed time per rotary_embedding_hf op"),
    "launch_heads_us": ("us", "fixed time per nlp_create_qkv_heads / nlp_concat_heads op"),
    "launch_fill_cache_us": ("us", "fixed time per fill_cache op"),
    "launch_eltwise_us": ("us", "fixed time per binary eltwise op"),
    "launch_sdpa_us": ("us", "fixed time per SDPA op (decode or standard)"),
    "trace_overlap_us": ("us", "per-op time hidden by back-to-back trace replay"),
    "host_bytes_per_s": ("B/s", "host<->device rate of small uploads/downloads incl. conversion"),
    "host_proj_us": ("us", "host action_in_proj + action_out_proj per step"),
}


def initial_params() -> FitParams:
    """Physically plausible starting point of the fit (not fitted; orders of magnitude only)."""
    return FitParams(
        dram_eff=0.6,  # Wormhole practice 82-92% for large reads; M=64 matmuls see ~50% (REFERENCE §2)
        core_read_tiles_per_s=5e6,
        dram_latency_us=0.4,  # ~500 cycles at 1.35 GHz
        overlap_exponent=2.0,
        mm_block_sync_us=0.5,
        eltwise_cycles_per_tile=64.0,
        softmax_cycles_per_tile=300.0,
        launch_matmul_us=2.0, launch_norm_us=3.0, launch_rope_us=3.0, launch_heads_us=3.0,
        launch_fill_cache_us=2.0, launch_eltwise_us=3.0, launch_sdpa_us=5.0,
        trace_overlap_us=1.0,
        host_bytes_per_s=1e9,
        host_proj_us=1000.0,
    )


def params_to_dict(p: FitParams) -> dict[str, float]:
    """Plain floats, for JSON and reports."""
    return {f.name: float(getattr(p, f.name)) for f in dataclasses.fields(p)}


def params_from_dict(d: dict[str, float]) -> FitParams:
    """Inverse of ``params_to_dict``; raises ValueError on a missing or unknown name."""
    names = {f.name for f in dataclasses.fields(FitParams)}
    if set(d) != names:
        raise ValueError(f"fit params keys {sorted(set(d) ^ names)} missing or unknown; expected {sorted(names)}")
    return FitParams(**{k: float(v) for k, v in d.items()})


def load_fitted(path: str | pathlib.Path = CALIBRATION_PATH) -> FitParams:
    """The stored calibration (written by ``python -m costmodel.calibrate --write``)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"calibration file {path} missing; run `python -m costmodel.calibrate --write`")
    return params_from_dict(json.loads(path.read_text())["params"])
