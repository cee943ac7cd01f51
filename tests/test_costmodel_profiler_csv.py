"""Profiler op-report CSVs: the notes' tables round-trip through the CSV and refit to the same
parameters; malformed files fail naming the line and column; the CLI's calibrate / --emit-csv."""

import csv
import json

import numpy as np
import pytest

from costmodel.blackhole import BlackholeConfig, fit, layer_op_specs, rows
from costmodel.blackhole.cli import main
from costmodel.blackhole.params import PARAM_NAMES
from costmodel.blackhole.profiler_csv import DURATION, read_rows, write_csv
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
OP_TABLES = ("op_times", "matmul_table", "attention_table")


@pytest.fixture(scope="module")
def notes_csv(tmp_path_factory):
    """The notes' op tables (per-op, matmul default/tuned, attention) written as an op report."""
    ops = [r for r in rows.load_rows() if r.table in OP_TABLES]
    path = tmp_path_factory.mktemp("csv") / "ops_perf_results_notes.csv"
    write_csv(path, [(r.spec, r.target) for r in ops])
    return path, ops


def test_csv_reads_back_the_same_ops(notes_csv):
    path, ops = notes_csv
    back = read_rows(path)
    assert [r.spec for r in back] == [r.spec for r in ops]
    assert [r.target for r in back] == pytest.approx([r.target for r in ops], rel=1e-9)
    header = next(csv.reader(path.open()))
    assert {"OP CODE", DURATION, "CORE COUNT", "ATTRIBUTES", "INPUT_0_Y_PAD[LOGICAL]"} <= set(header)


@pytest.mark.slow  # compiles the residual Jacobian of every measured row (~10-20 s)
def test_csv_refits_to_the_json_parameters(notes_csv):
    path, ops = notes_csv
    from_json = fit.fit(ops, steps=30)
    from_csv = fit.fit(read_rows(path), steps=30)
    a, b = from_json.theta, from_csv.theta
    assert np.max(np.abs(a - b)) < 1e-3, dict(zip(PARAM_NAMES, a - b))
    assert from_csv.sigma == pytest.approx(from_json.sigma, rel=1e-3)


def _rewrite(src, dst, edit):
    recs = list(csv.DictReader(src.open()))
    fields = list(recs[0])
    fields, recs = edit(fields, recs)
    with dst.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(recs)
    return dst


def _drop(column):
    return lambda fields, recs: ([f for f in fields if f != column],
                                 [{k: v for k, v in r.items() if k != column} for r in recs])


def _set(i, column, value):
    def edit(fields, recs):
        recs[i][column] = value
        return fields, recs
    return edit


@pytest.mark.parametrize("edit,message", [
    (_drop(DURATION), r"line 1 \(header\): missing column\(s\) \['DEVICE KERNEL DURATION \[ns\]'\]"),
    (_drop("INPUT_0_DATATYPE"), r"missing column\(s\) \['INPUT_0_DATATYPE'\]"),
    (_set(2, "OP CODE", "TilizeWithValPadding"), r"line 4, column 'OP CODE': unknown op code 'TilizeWithValPadding'"),
    (_set(4, DURATION, "fast"), r"line 6, column 'DEVICE KERNEL DURATION \[ns\]': 'fast' is not a number"),
    (_set(0, DURATION, "-5"), r"line 2, column 'DEVICE KERNEL DURATION \[ns\]': -5.0 ns must be > 0"),
    (_set(1, "INPUT_0_X_PAD[LOGICAL]", "wide"), r"line 3, column 'INPUT_0_X_PAD\[LOGICAL\]': 'wide' is not a padded"),
    (_set(1, "INPUT_1_DATATYPE", "INT8"), r"line 3, column 'INPUT_1_DATATYPE': data type 'INT8' unknown"),
    (_set(9, "INPUT_3_DATATYPE", ""), r"line 11, column 'INPUT_3_DATATYPE': empty"),
])
def test_malformed_csv_names_line_and_column(notes_csv, tmp_path, edit, message):
    bad = _rewrite(notes_csv[0], tmp_path / "bad.csv", edit)
    with pytest.raises(ValueError, match=message):
        read_rows(bad)


def test_cli_calibrate_and_use_calibration(notes_csv, tmp_path, capsys):
    out = tmp_path / "cal.json"
    main(["calibrate", "--ops-csv", str(notes_csv[0]), "--out", str(out), "--steps", "30"])
    doc = json.loads(out.read_text())
    assert doc["info"]["n_rows"] == 32 and len(doc["cov"]) == len(PARAM_NAMES)
    capsys.readouterr()
    result = main(["--calibration", str(out), "--json"])
    stored = main(["--json"])
    assert result["per_op_us"] != stored["per_op_us"]  # a different calibration gives different numbers
    # without step rows, the host parameters stay at their wide prior: the step interval widens
    w = lambda r: r["interval_ms"]["step_ms"][1] - r["interval_ms"]["step_ms"][0]
    assert w(result) > w(stored)
    with pytest.raises(SystemExit):
        main(["calibrate", "--with-stored"])
    assert "--with-stored needs --ops-csv" in capsys.readouterr().err


def test_emit_csv_writes_the_prediction(tmp_path, capsys):
    path = tmp_path / "pred.csv"
    result = main(["--smax", "5120", "--kv-dtype", "bfp8", "--emit-csv", str(path), "--json"])
    back = read_rows(path)
    specs = layer_op_specs(BlackholeConfig.port(CFG, smax=5120.0, kv_dtype="bfp8"), cfg=CFG)
    assert [r.spec for r in back] == list(specs.values())
    assert [r.target for r in back] == pytest.approx(list(result["per_op_us"].values()), rel=1e-6)
