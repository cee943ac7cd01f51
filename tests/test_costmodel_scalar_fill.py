"""binary_ng's scalar operand: its writer fills one tile in L1 before the compute may start
(writer_interleaved_scalar.cpp, fill_tile_utils.hpp), priced as a rolled store loop. Oracles: the
real CLIP scalar-multiply rows (DEVICE KERNEL DURATION, and the writer thread's own time, DEVICE BRISC
KERNEL DURATION) and the same report's tensor-tensor adds of the same shape."""

import dataclasses
import statistics

import pytest
from _report_util import records
from _shared_data import profiler_reports_dir

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.eltwise import scalar_tile_fill_us
from costmodel.blackhole.ops import RISC_STORE_LOOP_CYCLES
from costmodel.blackhole.opspecs import EltwiseSpec, KernelSpec
from costmodel.blackhole.report_reader import MODELLED, read_report
from costmodel.hardware import TILE, blackhole_p150a

CLIP = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
needs_clip = pytest.mark.skipif(not CLIP.is_file(), reason=f"real report not found: {CLIP}")


def test_the_fill_is_one_store_per_32_bits_of_the_tile():
    """bf16: two values per 32-bit store (512 for a 32 x 32 tile); Float32: one each (1024); at 3
    cycles per store; a tensor-tensor op fills nothing and a scalar one costs exactly the fill's excess
    over the DRAM round trip it overlaps, less the second operand's read."""
    hw, fit = blackhole_p150a(), load_calibration().params
    for dtype, bytes_per_value in (("bf16", 2), ("fp32", 4)):
        stores = TILE * TILE * bytes_per_value // 4
        assert float(scalar_tile_fill_us(hw, dtype)) == pytest.approx(
            RISC_STORE_LOOP_CYCLES * stores / hw.clock_hz * 1e6, rel=1e-9)
    one_tile = EltwiseSpec("mul", 32, 32, "bf16", n_inputs=1)
    fill = float(scalar_tile_fill_us(hw, "bf16"))
    assert fill > fit.dram_latency_us  # so the start is the fill's
    no_fill = float(one_tile.us(hw, fit)) - fill + fit.dram_latency_us
    assert no_fill < float(dataclasses.replace(one_tile, n_inputs=2).us(hw, fit))  # one read fewer


@needs_clip
def test_clip_scalar_multiplies_are_priced_with_the_fill():
    """CLIP's 48 scalar multiplies ([32[19], 768] x 0.125, one tile per core) measure 1.9-2.9 us, more
    than the same report's tensor-tensor adds of that shape (which read two tiles): the fill is the
    difference. With it, their median is within 10% (without it: -36%); the fill is shorter than the
    writer thread's measured time (it runs there); and the adds, which fill nothing, are unchanged."""
    rep = read_report(CLIP)
    fit = load_calibration().params
    brisc = {i: float(r["DEVICE BRISC KERNEL DURATION [ns]"]) / 1e3 for i, r in enumerate(records(CLIP), start=2)}
    rows = [r for r in rep.rows if r.status == MODELLED and isinstance(r.spec.inner, EltwiseSpec)
            and r.spec.inner.kind == "mul" and r.spec.inner.n_inputs == 1]
    assert len(rows) == 48
    fill = float(scalar_tile_fill_us(rep.hw, "bf16"))
    measured = statistics.median(r.duration_us for r in rows)
    predicted = float(KernelSpec(rows[0].spec).us(rep.hw, fit))
    assert predicted == pytest.approx(measured, rel=0.10)
    assert (predicted - fill + fit.dram_latency_us) / measured - 1 < -0.3  # the old price
    assert all(fill < brisc[r.line] for r in rows)
    adds = [r for r in rep.rows if r.status == MODELLED and isinstance(r.spec.inner, EltwiseSpec)
            and r.spec.inner.kind == "add" and r.spec.inner.width == 768]
    assert len(adds) >= 24 and statistics.median(r.duration_us for r in adds) < measured
