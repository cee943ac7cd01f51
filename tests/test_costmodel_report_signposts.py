"""``--start-signpost`` / ``--end-signpost`` on the commands that read one op report (``predict``,
``plan --ops-csv``, ``calibrate --ops-csv``; ``diff``'s are in test_costmodel_report_pairs.py), and
the exit status of the report subcommands run as a module.

The report is a real one: the functional North-mini decode excerpt (tests/data/profiler_pairs,
one replay between the signposts PERF_DECODE / PERF_DECODE_END) padded out the way a full tracy file
looks, with the same rows also before the window and after it. Oracles: tt-perf-report run with the
same signpost options, the file read with the csv module, and each command on the excerpt itself."""

import csv
import json
import pathlib
import re
import subprocess
import sys

import pytest
from _report_util import padded, tt_perf_report

from costmodel.blackhole.cli import main

DATA = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
EXCERPT = DATA / "bh_north_mini_functional_decode_b1.csv"
WINDOW = ("--start-signpost", "PERF_DECODE", "--end-signpost", "PERF_DECODE_END")
DURATION = "DEVICE KERNEL DURATION [ns]"


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> pathlib.Path:
    return padded(EXCERPT, tmp_path_factory.mktemp("full") / EXCERPT.name)


def lines_of(path: pathlib.Path) -> dict[int, dict]:
    """{file line: csv record} of every row, signposts included (the header is line 1)."""
    with path.open(newline="") as f:
        return dict(enumerate(csv.DictReader(f), start=2))


def window_lines(path: pathlib.Path) -> list[int]:
    """The data lines strictly between the first PERF_DECODE and the first PERF_DECODE_END after it."""
    recs = lines_of(path)
    start = min(i for i, r in recs.items() if r["OP CODE"] == "PERF_DECODE")
    end = min(i for i, r in recs.items() if r["OP CODE"] == "PERF_DECODE_END" and i > start)
    return [i for i in range(start + 1, end) if recs[i]["OP TYPE"] != "signpost"]


def shift() -> int:
    """Lines the padded file holds before its window, beyond the excerpt's: the warm-up copy of its rows."""
    return sum(r["OP TYPE"] != "signpost" for r in lines_of(EXCERPT).values())


def run_json(capsys, argv) -> dict:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out, parse_constant=pytest.fail)


def test_predict_reads_the_window_tt_perf_report_reads(full, tmp_path, capsys):
    doc = run_json(capsys, ["predict", "--ops-csv", str(full), *WINDOW, "--json"])
    rows = {r["line"]: r for r in doc["rows"]}
    theirs = tt_perf_report(full, tmp_path, *WINDOW)
    assert sorted(rows) == sorted(int(r["ID"]) for r in theirs) == window_lines(full)
    for r in theirs:
        assert rows[int(r["ID"])]["measured_us"] == pytest.approx(float(r["Device Time"]), abs=1e-3)
    recs = lines_of(full)
    for line, r in rows.items():
        assert r["measured_us"] == pytest.approx(float(recs[line][DURATION]) / 1e3)
    # the window is priced as the excerpt is, line for line
    alone = {r["line"] + shift(): r for r in run_json(capsys, ["predict", "--ops-csv", str(EXCERPT), "--json"])["rows"]}
    assert {k: {**v, "line": k} for k, v in alone.items()} == rows
    # without the options: every data row of the file
    everything = run_json(capsys, ["predict", "--ops-csv", str(full), "--json"])["rows"]
    assert len(everything) == sum(r["OP TYPE"] != "signpost" for r in recs.values()) > len(rows)


def test_plan_searches_the_window_only(full, tmp_path, capsys):
    doc = run_json(capsys, ["plan", "--ops-csv", str(full), *WINDOW, "--json"])
    theirs = tt_perf_report(full, tmp_path, *WINDOW)
    assert doc["measured_total_us"] == pytest.approx(sum(float(r["Device Time"]) for r in theirs), abs=1e-2)
    assert doc["rows"] and {r["line"] for r in doc["rows"]} <= set(window_lines(full))
    alone = run_json(capsys, ["plan", "--ops-csv", str(EXCERPT), "--json"])
    assert [{**r, "line": r["line"] + shift(), "lines": [n + shift() for n in r["lines"]]}
            for r in alone["rows"]] == doc["rows"]
    everything = run_json(capsys, ["plan", "--ops-csv", str(full), "--json"])
    recs = lines_of(full).values()
    assert everything["measured_total_us"] == pytest.approx(
        sum(float(r[DURATION]) for r in recs if r["OP TYPE"] != "signpost") / 1e3)


def test_calibrate_fits_the_window_as_the_excerpt(full, capsys):
    fits = []
    for argv in (["--ops-csv", str(full), *WINDOW], ["--ops-csv", str(EXCERPT)], ["--ops-csv", str(full)]):
        capsys.readouterr()
        main(["calibrate", *argv, "--steps", "10", "--json"])
        fits.append(json.loads(capsys.readouterr().out, parse_constant=pytest.fail))
    window, alone, everything = fits
    assert window["info"]["n_rows"] == alone["info"]["n_rows"] < everything["info"]["n_rows"]
    assert window["params"] == pytest.approx(alone["params"], rel=1e-9)


@pytest.mark.parametrize("command", [["predict", "--ops-csv"], ["plan", "--ops-csv"], ["calibrate", "--ops-csv"]],
                         ids=lambda c: c[0])
@pytest.mark.parametrize("extra, message", [
    (["--start-signpost", "NOPE"], "start-signpost='NOPE': no such signpost"),
    (["--start-signpost", "PERF_DECODE_END", "--end-signpost", "PERF_DECODE"], "end-signpost='PERF_DECODE': no such"),
], ids=["start", "end-before-start"])
def test_unknown_signposts_are_refused(command, extra, message, capsys):
    try:
        status = main([*command, str(EXCERPT), *extra])
    except SystemExit as e:  # calibrate raises its status (its Python callers get the calibration)
        status = e.code
    assert status == 2
    err = capsys.readouterr().err
    assert message in err and "['PERF_DECODE', 'PERF_DECODE_END']" in err and "Traceback" not in err


def test_calibrate_signposts_need_a_report(capsys):
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--start-signpost", "PERF_DECODE"])
    assert e.value.code == 2
    assert "--start-signpost / --end-signpost need --ops-csv" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    ["predict", "--ops-csv", "/nonexistent.csv"],
    ["diff", "/nonexistent.csv", str(EXCERPT)],
    ["plan", "--ops-csv", "/nonexistent.csv"],
    ["whatif", "--ops-csv", "/nonexistent.csv", "--line", "3", "--change", "in0_block_w=2"],
    ["coverage", "/nonexistent.csv"],
], ids=lambda a: a[0])
def test_report_subcommands_exit_2_on_bad_input_as_a_module(argv):
    """The report subcommands return their status to ``main``; the module entry point exits with it."""
    r = subprocess.run([sys.executable, "-m", "costmodel.blackhole", *argv], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 2, r.stderr
    assert "error: ops-csv='/nonexistent.csv': no such file" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [[], ["predict"], ["diff"], ["plan", "--ops-csv", "REPORT.csv"], ["whatif"],
                                     ["coverage"], ["calibrate"], ["validate"], ["tune"], ["plan"]],
                         ids=lambda c: " ".join(c[:1]) + (" --ops-csv" if len(c) > 1 else "") or "what-if")
def test_every_command_help_has_an_example(command, capsys):
    """Each ``--help`` ends with a runnable example; a description's percent sign prints as one (argparse
    does not %-format descriptions, so '90%%' once printed as such)."""
    try:
        status = main([*command, "--help"])
    except SystemExit as e:
        status = e.code
    out = capsys.readouterr().out
    assert status == 0
    assert re.search(r"example[^:]*: python -m costmodel\.blackhole", " ".join(out.split())), out
    assert "%%" not in out


def test_calibrate_json_carries_the_guards(full, capsys):
    """``calibrate --json`` holds the guards' verdict for scripts: the port's step under the fitted and the
    stored calibration (their ratio is the guard's), and the guard warnings, empty for the real decode
    window; the document still loads as a calibration."""
    from costmodel.blackhole.cli import GUARD_PORT_STEP
    from costmodel.blackhole.fit import Calibration

    capsys.readouterr()
    main(["calibrate", "--ops-csv", str(full), *WINDOW, "--steps", "10", "--json"])
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    steps = doc["port_step_ms"]
    assert abs(steps["fitted"] / steps["stored"] - 1) < GUARD_PORT_STEP and doc["guards"] == []
    assert Calibration.from_json(doc).params == Calibration.from_json({k: doc[k] for k in
                                                                        ("params", "theta", "cov", "sigma", "dof")}).params


def test_calibrate_json_reports_a_guard_that_fires(tmp_path, capsys):
    """The port's own matmuls (the model's emitted op report) measured 4x slower, fitted as independent
    rows (``--independent-rows``), refit the port's step by more than the guard allows: the JSON says so,
    with the two steps it compared. (Every op 3x slower moves nothing: no parameter set explains it, so
    the refit's residual sd swamps the rows and every parameter is held at the stored calibration; so
    do the matmuls alone with the rows of a kind sharing the stored discrepancy's model-form error.)"""
    from costmodel.blackhole.cli import GUARD_PORT_STEP

    path = tmp_path / "slow.csv"
    main(["--emit-csv", str(path), "--json"])
    with open(path, newline="") as f:
        recs = list(csv.DictReader(f))
    for r in recs:
        if r["OP CODE"] == "MatmulDeviceOperation":
            r["DEVICE KERNEL DURATION [ns]"] = str(4.0 * float(r["DEVICE KERNEL DURATION [ns]"]))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    capsys.readouterr()
    main(["calibrate", "--ops-csv", str(path), "--steps", "30", "--json", "--independent-rows"])
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    steps = doc["port_step_ms"]
    assert abs(steps["fitted"] / steps["stored"] - 1) > GUARD_PORT_STEP
    assert any("the port's predicted step moved" in g for g in doc["guards"]), doc["guards"]
