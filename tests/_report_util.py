"""tt-perf-report (the PyPI tool of tt-metal users, dev extra) run on an op report, the checks
every matmul row of its output must pass, one-line reports cut from real ones, a real signpost
excerpt padded out to look like a full file, and the op-to-op gaps of real traced windows."""

from __future__ import annotations

import csv
import pathlib
import statistics
import subprocess
import sys

import pytest

from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_reader import read_report
from costmodel.hardware import FIDELITY_PASSES


def op_rows(path, code: str, **kwargs):
    """``read_report``'s rows (``kwargs`` to it) of op code ``code`` that carry a device time (a trace
    capture's have none)."""
    return [r for r in read_report(path, **kwargs).rows if r.op_code == code and r.status != "invalid device duration"]


def records(path) -> list[dict]:
    """A report's rows as csv.DictReader records (BOM stripped)."""
    with path.open(newline="", encoding="utf-8-sig") as f:
        return list(csv.DictReader(f))


def inner(spec):
    """A spec without its measurement wrappers (a read line's ``ChipSpec``, a stored row's ``KernelSpec``),
    as the op models price it."""
    while getattr(spec, "inner", None) is not None:
        spec = spec.inner
    return spec


PAIRS_DIR = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
# The two traced batch-1 decode windows (tt-metal trace replays; SOURCES.md there)
TRACED_DECODE = (PAIRS_DIR / "bh_north_mini_functional_decode_b1.csv", PAIRS_DIR / "bh_north_mini_fused_decode_b1.csv")


def traced_gaps_ns(path) -> list[float]:
    """OP TO OP LATENCY [ns] of the device rows of a signpost window that a trace replay ran (METAL
    TRACE ID set), the window's first op left out: its gap runs from the previous replay's last op,
    host time between replays included."""
    rows = [r for r in records(path) if r["OP TYPE"] == "tt_dnn_device"]
    assert rows and all(r["METAL TRACE ID"] for r in rows), path
    return [float(r["OP TO OP LATENCY [ns]"]) for r in rows[1:]]


def traced_gap_median_ns() -> float:
    """The median gap between consecutive ops over the real traced decode windows."""
    return statistics.median(g for path in TRACED_DECODE for g in traced_gaps_ns(path))


def one_line(src, dst, pick, edit=lambda r: None, **kwargs):
    """A report (written to ``dst``) of the first line of ``src`` that ``pick`` accepts, edited by
    ``edit``; returns (the line as ``read_report`` reads it, ``kwargs`` to it; the edited record)."""
    recs = records(src)
    rec = next(r for r in recs if pick(r))
    edit(rec)
    with dst.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerow(rec)
    (line,) = read_report(dst, **kwargs).rows
    return line, rec


def padded(path: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """``path`` as a full tracy file looks: its window's data rows also before the start signpost (a
    warm-up replay) and after the end one (a later replay), the window itself in the middle."""
    with path.open(newline="") as f:
        lines = f.read().splitlines()
    header, start, rows, end = lines[0], lines[1], lines[2:-1], lines[-1]
    out.write_text("\n".join([header, *rows, start, *rows, end, *rows[:5]]) + "\n")
    return out


def tt_perf_report(path, tmp_path, *options: str) -> list[dict]:
    """Run tt-perf-report (the PyPI tool, dev extra) on ``path`` (with ``options``, e.g. signposts);
    its per-op CSV rows."""
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is in the dev extra")
    out = tmp_path / f"{path.stem}_tt_perf_report.csv"
    r = subprocess.run([sys.executable, "-m", "tt_perf_report.perf_report", str(path), "--csv", str(out),
                        "--no-summary", "--no-color", "--no-advice", *options], capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "Traceback" not in r.stderr
    return list(csv.DictReader(out.open()))


def check_matmul_rows(rows_out, hw, specs_us) -> None:
    """Every matmul row has DRAM % and FLOPs %; the peak DRAM bandwidth and per-core FLOP rate the
    tool divides by are the model's hardware numbers; its FLOP rate is 2MKN / the row's time."""
    mm = [r for r in rows_out if r["OP Code"].startswith("MatmulDeviceOperation")]
    assert len(mm) == len(specs_us) > 0
    for r, (spec, us) in zip(mm, specs_us):
        assert "unknown shape" not in r["OP Code"] and r["DRAM %"] and r["FLOPs %"], r
        assert f"{spec.M} x {spec.K} x {spec.N}" in r["OP Code"]
        dram_peak = float(r["DRAM"]) / (float(r["DRAM %"]) / 100) * 1e9
        assert dram_peak == pytest.approx(hw.dram_peak_bytes_per_s, rel=1e-9)
        per_core = float(r["FLOPs"]) * 1e12 / (float(r["FLOPs %"]) / 100) / int(r["Cores"])
        model = hw.matmul_flops_per_cycle_per_core * hw.clock_hz / FIDELITY_PASSES[spec.fidelity]
        assert per_core == pytest.approx(model, rel=1e-9)
        assert int(r["Cores"]) == spec.N // 32 // int(spec.cfg.per_core_N)
        assert float(r["FLOPs"]) * 1e12 == pytest.approx(2 * spec.M * spec.K * spec.N / (us * 1e-6), rel=1e-6)


def ideal_fit(**kw) -> FitParams:
    """No latency, no launch, no compute cost, ideal overlap (q-norm ~ max), unlimited core rate."""
    base = {"dram_eff": 1.0, "core_read_tiles_per_s": 1e30, "dram_latency_us": 0.0, "overlap_exponent": 400.0,
                "mm_block_sync_us": 0.0, "eltwise_cycles_per_tile": 0.0, "dispatch_us": 0.0, "dispatch_core_us": 0.0,
                "launch_matmul_us": 0.0, "launch_norm_us": 0.0, "launch_rope_us": 0.0, "launch_heads_us": 0.0,
                "launch_fill_cache_us": 0.0, "launch_eltwise_us": 0.0, "launch_sdpa_us": 0.0, "trace_overlap_us": 0.0,
                "host_bytes_per_s": 1e30, "host_proj_us": 0.0}
    return FitParams(**{**base, **kw})
