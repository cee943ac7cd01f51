"""Softmax's SFPU work (the exp of every tile, the reciprocal of each row sum) and the unary streaming
programs' fixed time (transpose_wh, slice) against real Blackhole op reports: the rows' DEVICE KERNEL
DURATION and the math thread's measured time (DEVICE TRISC1 KERNEL DURATION) are the oracles."""

import csv
import dataclasses
import pathlib

import numpy as np
import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec, SoftmaxSpec
from costmodel.blackhole.report_reader import MODELLED, read_report
from costmodel.hardware import blackhole_p150a

DATA = profiler_reports_dir()
CLIP = DATA / "bh_64_clip_encoder_1.csv"
DEEPSEEK = DATA / "bh_8xp150_deepseek_v3_d_p.csv"
PAIRS = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
NORTH = [PAIRS / f"bh_north_mini_{v}.csv" for v in ("functional_decode_b1", "fused_decode_b1", "fused_prefill_s128")]
needs_reports = pytest.mark.skipif(not (CLIP.is_file() and DEEPSEEK.is_file()), reason=f"real reports not found at {DATA}")


def _rows(path, predicate):
    """(report, row) of the modelled rows of a report whose spec (its inner op) satisfies ``predicate``."""
    rep = read_report(path)
    return rep, [r for r in rep.rows if r.status == MODELLED and predicate(getattr(r.spec, "inner", r.spec))]


def _is_softmax(spec):
    return isinstance(spec, SoftmaxSpec)


def _dm_kind(spec):
    return getattr(spec, "kind", None) if type(spec).__name__ == "DataMovementSpec" else None


@needs_reports
def test_clip_softmax_rows_are_priced_with_the_sfpu_exp():
    """CLIP's 24 softmax rows ([12 x 32, 32], Float32 Dest, HiFi4, math_approx_mode=0; one tile row
    per core): the price lies within 45% below the measured kernel duration (the model is short: the
    one-tile stages of a row run one after another, which the pass throughput does not price); with
    the SFPU costs at zero (the exp priced as nothing) it would be 60% short; and the SFPU time the
    model adds is less than the math thread's measured time."""
    rep, rows = _rows(CLIP, _is_softmax)
    assert len(rows) == 24
    fit = load_calibration().params
    with CLIP.open(newline="") as f:
        trisc1_us = min(float(line["DEVICE TRISC1 KERNEL DURATION [ns]"]) / 1e3 for line in csv.DictReader(f)
                        if line["OP CODE"] == "SoftmaxDeviceOperation")
    for r in rows:
        assert r.spec.inner.fp32_dest_acc
        us = float(KernelSpec(r.spec).us(rep.hw, fit))
        no_sfpu = dataclasses.replace(r.spec.board(), sfpu_exp_cycles_per_tile=0.0, sfpu_recip_cycles_per_tile=0.0)
        us0 = float(KernelSpec(r.spec.inner).us(no_sfpu, fit))
        assert 0.55 < us / r.duration_us < 1.0, (r.line, us, r.duration_us)
        assert us0 / r.duration_us < 0.4, (r.line, us0, r.duration_us)
        assert 0.0 < us - us0 < trisc1_us


@pytest.mark.parametrize("rows, width", [(384, 32), (64, 1536), (3200, 256)], ids=lambda v: str(v))
def test_softmax_costs_more_with_a_float32_dest_and_grows_with_the_row(rows, width):
    """A Float32 Dest runs the accurate fp32 exp (2548 vs 672 cycles per tile) and moves tiles of
    twice the bytes: dearer than a bfloat16 Dest; wider rows cost more; and each SFPU cost moves it."""
    hw, fit = blackhole_p150a(), load_calibration().params
    price = {acc: float(SoftmaxSpec(rows, width, "bf16", acc).us(hw, fit)) for acc in (False, True)}
    assert price[True] > price[False]
    assert float(SoftmaxSpec(rows, 2 * width, "bf16", True).us(hw, fit)) > price[True]
    for field in ("sfpu_exp_cycles_per_tile", "sfpu_recip_cycles_per_tile"):
        dearer = dataclasses.replace(hw, **{field: 2 * getattr(hw, field)})
        assert float(SoftmaxSpec(rows, width, "bf16", True).us(dearer, fit)) > price[True], field


@needs_reports
def test_transpose_wh_and_slice_rows_within_35_percent_with_the_unary_program_launch():
    """Every CLIP transpose_wh row and every slice row of the DeepSeek and North-mini reports within
    35% of its kernel duration; priced with the heads class's fixed time instead (0.47 us more since
    kernel-only slices and transposes pin it: report_calibration.json), the short ones (under 3.5 us:
    one page per core) are more than 15% too slow."""
    fit = load_calibration().params
    heads_fit = dataclasses.replace(fit, launch_eltwise_us=fit.launch_heads_us)
    seen = {"transpose_wh": 0, "slice": 0}
    short_errs0 = []
    for path in [CLIP, DEEPSEEK, *[p for p in NORTH if p.is_file()]]:
        rep, rows = _rows(path, lambda s: _dm_kind(s) in seen)
        for r in rows:
            seen[getattr(r.spec, "inner", r.spec).kind] += 1
            us = float(KernelSpec(r.spec).us(rep.hw, fit))
            assert abs(us / r.duration_us - 1) < 0.35, (path.name, r.line, us, r.duration_us)
            if r.duration_us < 3.5:
                short_errs0.append(float(KernelSpec(r.spec).us(rep.hw, heads_fit)) / r.duration_us - 1)
    assert seen["transpose_wh"] == 24 and seen["slice"] >= 4
    assert len(short_errs0) >= 25 and np.min(short_errs0) > 0.15, short_errs0
