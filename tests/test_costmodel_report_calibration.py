"""The real reports fitted with the port's tables (``costmodel/data/report_calibration.json``): the
excerpts are the windows' own lines, every report of a model is one held-out source, and a binary op
on the SFPU path is priced apart from the FPU one."""

from __future__ import annotations

import json
import pathlib

import pytest
from _report_util import one_line

from costmodel.blackhole.holdout import report_rows, unit_of
from costmodel.blackhole.params import DATA_DIR
from costmodel.blackhole.report_reader import MODELLED, read_report
from costmodel.blackhole.rows import load_rows, report_calibration_rows
from costmodel.hardware import blackhole_p150a

PAIRS = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
DOC = json.loads((DATA_DIR / "report_calibration.json").read_text())
FILES = [(src, f) for src in DOC["sources"] for f in src["files"]]


@pytest.mark.parametrize("src, f", FILES, ids=[f["report"] for _, f in FILES])
def test_each_excerpt_holds_every_modelled_line_of_its_classes_verbatim(src, f):
    """An excerpt is the window's header and exactly its modelled lines of the listed classes, byte for
    byte: no line of those classes left out, none edited."""
    window = PAIRS / f"{f['report']}.csv"
    lines = window.read_bytes().decode().splitlines(keepends=True)
    rep = read_report(window, hw=blackhole_p150a())
    want = [lines[0]] + [lines[r.line - 1] for r in rep.rows
                         if r.status == MODELLED and r.spec.op_class in src["classes"]]
    got = (DATA_DIR / "reports" / f"{f['report']}.csv").read_bytes().decode().splitlines(keepends=True)
    assert got == want and len(got) > 1


def test_the_fitted_report_rows_are_calibration_rows_of_their_model():
    rows = report_calibration_rows()
    assert len(rows) == 16 and {r.role for r in rows} == {"calibration"}
    assert {r.table for r in rows} == {"report:north_mini"}
    assert {r.spec.op_class for r in rows} == {"eltwise", "data_movement"}
    assert all("tenstorrent/tt-metal models/autoports/coherelabs_north_mini_code_1_0/doc/" in r.source for r in rows)
    assert set(rows) <= set(load_rows())


def test_a_models_reports_are_held_out_together():
    """By source, the four North-mini windows and their fitted rows are one unit: a fold that holds one
    out holds out the other three (the same ops measured in another window would leak into it)."""
    windows = [str(PAIRS / f"{f['report']}.csv") for _, f in FILES]
    held = report_rows(windows) + report_calibration_rows()
    assert {unit_of(r, "source") for r in held} == {"report:north_mini"}
    others = [r for r in load_rows() if r.table != "report:north_mini"]
    assert "report:north_mini" not in {unit_of(r, "source") for r in others}


def test_a_binary_op_on_the_sfpu_path_is_priced_apart_from_the_fpu_eltwise(tmp_path):
    """The North-mini prefill's bf16 multiply runs binary_ng's SFPU kernel (``is_sfpu: true``,
    eltwise_binary_sfpu_no_bcast.cpp): priced as the SFPU path (op class 'eltwise_sfpu', so not one of the
    fitted eltwise rows of the excerpts); the same line on the FPU path is the FPU eltwise."""
    src = PAIRS / "bh_north_mini_functional_prefill_s128.csv"

    def pick(r):
        return r["OP CODE"] == "BinaryNgDeviceOperation" and "BinaryOpType::MUL" in r["ATTRIBUTES"]

    line, rec = one_line(src, tmp_path / "sfpu.csv", pick)
    assert "'is_sfpu': 'true'" in rec["ATTRIBUTES"]
    assert line.status == MODELLED and line.spec.sfpu and line.spec.op_class == "eltwise_sfpu", line.status

    def fpu(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("'is_sfpu': 'true'", "'is_sfpu': 'false'")
    line, _ = one_line(src, tmp_path / "fpu.csv", pick, fpu)
    assert line.status == MODELLED and line.spec.op_class == "eltwise" and not line.spec.sfpu
