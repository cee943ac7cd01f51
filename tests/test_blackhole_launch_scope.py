"""Launch scope: kernel-only profiler rows vs the port's dispatch-inclusive per-op table.

Oracles are the real op reports in shared/data/profiler_reports, read with the csv module (not the
project's reader): the durations a row quotes and the CORE COUNT each op was sent to.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re

import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole import BlackholeConfig, layer_op_specs, rows
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.opspecs import ChipSpec, EltwiseSpec, KernelSpec, NormSpec
from costmodel.blackhole.params import DATA_DIR, load_fitted
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()
FIT = load_fitted()


REPORTS = profiler_reports_dir()
needs_reports = pytest.mark.skipif(not REPORTS.is_dir(), reason=f"shared profiler reports not found at {REPORTS}")


def _csv_lines(name: str) -> dict[int, dict]:
    path = REPORTS / name
    with path.open(newline="") as f:
        return {i + 2: r for i, r in enumerate(csv.DictReader(f))}


@needs_reports
def test_kernel_scope_rows_quote_the_real_report():
    """Every kernel-scope public row copied from a shared report carries that line's DEVICE KERNEL
    DURATION, and its kind is the line's op (BinaryOpType, LayerNorm)."""
    doc = json.loads((DATA_DIR / "public_ops.json").read_text())
    checked = 0
    for g in doc["groups"]:
        m = re.match(r"tests/data/(\S+\.csv)", g["file"])
        if not m or g["scope"] != "kernel":
            continue
        lines = _csv_lines(m.group(1))
        for r in g["rows"]:
            line = int(re.match(r"csv line (\d+):", r["quote"]).group(1))
            rec = lines[line]
            if rec.get("DEVICE ID", "0") not in ("0", ""):
                continue  # the dsv3 report repeats ops per device; the rows quote device 0's
            assert float(rec["DEVICE KERNEL DURATION [ns]"]) / 1e3 == pytest.approx(r["us"], abs=1e-3), r["name"]
            if g["kind"].startswith("eltwise_"):
                assert f"BinaryOpType::{g['kind'].removeprefix('eltwise_').upper()}" in rec["ATTRIBUTES"]
                assert int(rec["AVAILABLE WORKER CORE COUNT"]) == g["grid"][0] * g["grid"][1]
            checked += 1
    assert checked >= 18


@needs_reports
@pytest.mark.parametrize("report,line,spec", [
    ("bh_64_clip_encoder_1.csv", 6, ChipSpec(EltwiseSpec("add", 32, 768), "p150a", (8, 8))),
    ("bh_64_clip_encoder_1.csv", 31, ChipSpec(EltwiseSpec("mul", 32, 3072), "p150a", (8, 8))),
    ("bh_8xp150_deepseek_v3_d_p.csv", 28, NormSpec(3200, 1536)),
    ("bh_8xp150_deepseek_v3_d_p.csv", 132, NormSpec(3200, 512)),
])
def test_dispatch_is_priced_on_the_cores_the_report_says_the_op_ran_on(report, line, spec):
    """op scope - kernel scope = dispatch_us + dispatch_core_us x CORE COUNT of the real report
    (binary_ng: the whole grid even for 24 tiles; rms_norm: one core per tile row)."""
    cores = int(_csv_lines(report)[line]["CORE COUNT"])
    gap = float(spec.us(HW, FIT)) - float(KernelSpec(spec).us(HW, FIT))
    assert gap == pytest.approx(FIT.dispatch_us + FIT.dispatch_core_us * cores, rel=1e-4)


def test_kernel_only_drops_exactly_the_dispatch_from_every_port_op():
    """Every op of the port's layer: positive kernel time, and the dispatch it drops lies between
    dispatch_us (one core) and dispatch_us + dispatch_core_us x the grid."""
    lo, hi = FIT.dispatch_us, FIT.dispatch_us + FIT.dispatch_core_us * HW.grid_cores
    for name, spec in layer_op_specs(BlackholeConfig.for_expert(CFG), cfg=CFG).items():
        op, kern = float(spec.us(HW, FIT)), float(spec.us(HW, kernel_only(FIT)))
        assert kern > 0 and lo * (1 - 1e-5) <= op - kern <= hi * (1 + 1e-5), name


def test_short_kernel_rows_are_predicted_within_their_spread():
    """The 24-tile CLIP adds (1.55-2.58 us kernel time, validation rows never fitted) are predicted
    inside 0.6x-1.6x of every measured value; the old single launch constant predicted 5.3 us."""
    adds = [r for r in rows.load_rows() if r.group == "public/eltwise_add_clip"]
    assert len(adds) == 6 and all(r.role == "validation" for r in adds)
    for r in adds:
        pred = float(r.spec.us(HW, FIT))
        assert 0.6 < pred / r.target < 1.6, (r.name, pred, r.target)


def test_chip_grid_must_fit_the_board():
    spec = ChipSpec(EltwiseSpec("add", 32, 768), "p150a", (12, 10))
    with pytest.raises(ValueError, match=r"grid=\(12, 10\): expected a worker grid within p150a's 11x10"):
        spec.us(HW, FIT)
    small = ChipSpec(EltwiseSpec("add", 32, 768), "p150a", (8, 8))
    assert small.board().grid_cores == 64


@pytest.mark.parametrize("field,value,match", [
    ("scope", "device", r"scope='device'; expected 'op'"),
    ("role", "fitted", r"role='fitted'; expected 'calibration', 'validation' or 'scope_gap'"),
])
def test_public_ops_rejects_a_bad_scope_or_role(tmp_path, field, value, match):
    for f in (*rows.NOTES_FILES, *rows.PUBLIC_FILES):
        (tmp_path / f).write_text((DATA_DIR / f).read_text())
    doc = json.loads((tmp_path / "public_ops.json").read_text())
    doc["groups"][0][field] = value
    (tmp_path / "public_ops.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=match):
        rows.load_rows(tmp_path)


def test_kernel_only_keeps_every_other_parameter():
    k = kernel_only(FIT)
    assert k.dispatch_us == 0.0 and k.dispatch_core_us == 0.0
    for f in dataclasses.fields(FIT):
        if f.name not in ("dispatch_us", "dispatch_core_us"):
            assert math.isclose(float(getattr(k, f.name)), float(getattr(FIT, f.name))), f.name
