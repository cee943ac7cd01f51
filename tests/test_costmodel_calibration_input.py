"""Bad calibration input is a clear error (exit 2, ``error: ...`` naming the file, key, value and
what was expected), never a traceback or a NaN: ``--calibration`` JSON files, ``calibrate``'s
``--ops-csv`` / ``--out`` paths (checked before the fit) and a report with an ``inf`` duration."""

import csv
import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.blackhole import fit
from costmodel.blackhole.cli import main
from costmodel.blackhole.params import CALIBRATION_PATH, PARAM_NAMES


def _exit2(argv, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error:" in err and "Traceback" not in err, err
    return err


def _stored() -> dict:
    return json.loads(CALIBRATION_PATH.read_text())


def _doc(edit):
    doc = _stored()
    edit(doc)
    return json.dumps(doc)


CALIBRATIONS = [
    ("json_number", "3.5", r"a JSON float; expected an object"),
    ("json_string", '"calibration"', r"a JSON str; expected an object"),
    ("params_null", _doc(lambda d: d.update(params=None)), r"params=None: expected an object"),
    ("cov_bad", _doc(lambda d: d.update(cov="bad")),
     rf"cov='bad': expected numbers of shape \[{len(PARAM_NAMES)}, {len(PARAM_NAMES)}\]"),
    ("dram_eff_nan", _doc(lambda d: d["params"].update(dram_eff=float("nan"))),
     r"params.dram_eff=nan: expected a finite number"),
    ("dram_eff_negative", _doc(lambda d: d["params"].update(dram_eff=-0.7)),
     r"params.dram_eff=-0.7: expected a value in \[0.001, 0.9765"),
    ("sigma_negative", _doc(lambda d: d.update(sigma=-0.05)), r"sigma=-0.05: expected a finite number > 0"),
    ("theta_mismatch", _doc(lambda d: d["params"].update(dram_eff=0.5)),
     r"theta: entry of dram_eff does not match params.dram_eff=0.5"),
    ("missing_key", _doc(lambda d: d.pop("cov")), r"lacks key 'cov'"),
    ("bad_json", '{"params": {', r"invalid JSON at line 1, column 13"),
    # extremes: huge integers, overflowing covariances, deep nesting (each was an OverflowError /
    # RecursionError traceback)
    ("huge_int_param", _doc(lambda d: d["params"].update(dram_eff=10**400)), r"params.dram_eff=inf: expected a finite"),
    ("huge_int_cov", _doc(lambda d: d["cov"][0].__setitem__(0, 10**400)), r"cov: non-finite entries"),
    ("digits_5000", _doc(lambda d: d.update(dof=1)).replace('"dof": 1', '"dof": ' + "9" * 5000),
     r"dof=inf: expected a finite number > 0"),
    ("cov_1e300", _doc(lambda d: d["cov"][0].__setitem__(0, 1e300)),
     r"cov: variance of dram_eff is 1e\+300; expected <= the prior's 5.3"),
    ("sigma_1e300", _doc(lambda d: d.update(sigma=1e300)), r"sigma=1e\+300: expected a log-error sd in \(0, 20\]"),
    ("dof_tiny", _doc(lambda d: d.update(dof=1e-300)), r"dof=1e-300: expected a finite number >= 1"),
    ("deep_nesting", "[" * 100_000 + "]" * 100_000, r"JSON nested deeper than Python's reader allows"),
    ("deep_info", _doc(lambda d: d.update(info=None)).replace('"info": null', '"info": ' + "[" * 50_000 + "]" * 50_000),
     r"JSON nested deeper"),
    ("info_not_object", _doc(lambda d: d.update(info=[1])), r"info='\[1\]': expected an object"),
]


@pytest.mark.parametrize("name,text,message", CALIBRATIONS, ids=[c[0] for c in CALIBRATIONS])
def test_bad_calibration_json_is_exit_2_naming_file_key_value(tmp_path, capsys, name, text, message):
    path = tmp_path / f"{name}.json"
    path.write_text(text)
    err = _exit2(["--calibration", str(path), "--json"], capsys)
    assert f"calibration={str(path)!r}" in err
    assert re.search(message, err), err


def test_calibration_binary_directory_and_missing(tmp_path, capsys):
    binary = tmp_path / "cal.json"
    binary.write_bytes(b"\xff\xfe\x00\x01garbage")
    assert "expected JSON" in _exit2(["--calibration", str(binary)], capsys)
    assert "is a folder; expected a calibration JSON file" in _exit2(["--calibration", str(tmp_path)], capsys)
    assert "'/dev/null' is a character device; expected a calibration JSON file" in _exit2(
        ["--calibration", "/dev/null"], capsys)
    missing = tmp_path / "missing.json"
    assert f"calibration={str(missing)!r}: no such file" in _exit2(["--calibration", str(missing)], capsys)


def test_stored_calibration_still_loads():
    cal = fit.load_calibration()
    assert math.isfinite(cal.sigma) and cal.params.dram_eff > 0


# ---- calibrate's paths -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def port_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("port") / "port.csv"
    main(["--emit-csv", str(path), "--json"])
    return path


def test_ops_csv_missing_or_directory(tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    assert f"ops-csv={str(missing)!r}: no such file" in _exit2(["calibrate", "--ops-csv", str(missing)], capsys)
    assert "is a folder; expected an ops_perf_results CSV file" in _exit2(
        ["calibrate", "--ops-csv", str(tmp_path)], capsys)
    assert "'/dev/null' is a character device; expected an ops_perf_results CSV file" in _exit2(
        ["calibrate", "--ops-csv", "/dev/null"], capsys)


def test_out_is_checked_before_the_fit(port_report, tmp_path, capsys, monkeypatch):
    def no_fit(*a, **k):
        raise AssertionError("the fit ran before --out was checked")
    monkeypatch.setattr(fit, "fit", no_fit)
    err = _exit2(["calibrate", "--ops-csv", str(port_report), "--out", str(tmp_path)], capsys)
    assert f"--out={str(tmp_path)!r} is a folder; expected a file name" in err
    err = _exit2(["calibrate", "--ops-csv", str(port_report), "--out", str(tmp_path / "no" / "cal.json")], capsys)
    assert "does not exist" in err
    (tmp_path / "dangling.json").symlink_to(tmp_path / "gone.json")
    err = _exit2(["calibrate", "--ops-csv", str(port_report), "--out", str(tmp_path / "dangling.json")], capsys)
    assert "is a symlink to a missing target" in err
    # two outputs named: refused, not resolved silently (which one would be written?)
    err = _exit2(["calibrate", "--write", "--out", str(tmp_path / "cal.json")], capsys)
    assert "--write (writes" in err and "name two outputs; give one" in err


def test_bad_device_id_and_steps(port_report, capsys):
    assert "--device-id='x'" in _exit2(["calibrate", "--ops-csv", str(port_report), "--device-id", "x"], capsys)
    assert "--steps=0 must be >= 1" in _exit2(["calibrate", "--steps", "0"], capsys)


def test_inf_duration_is_dropped_and_never_writes_nan(port_report, tmp_path, capsys):
    recs = list(csv.DictReader(port_report.open()))
    recs[1]["DEVICE KERNEL DURATION [ns]"] = "inf"
    bad = tmp_path / "inf.csv"
    with bad.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    out = tmp_path / "cal.json"
    main(["calibrate", "--ops-csv", str(bad), "--out", str(out), "--steps", "20"])
    text = capsys.readouterr()
    assert "1 rows had invalid device durations" in text.err and "lines 3" in text.err
    doc = json.loads(out.read_text())  # strict JSON: a NaN would not parse back as a finite number
    assert all(math.isfinite(v) for v in doc["params"].values()) and math.isfinite(doc["sigma"])
    assert doc["info"]["n_rows"] == len(recs) - 1
    fit.load_calibration(out)  # and it loads as a valid calibration


EXTREME = st.one_of(st.sampled_from([10**400, -(10**400), 1e300, -1e300, 1e-300, 0, -0.0, True, None, "1e3", [], {},
                                     [[[[1.0]]]]]),
                    st.floats(allow_nan=False, allow_infinity=False), st.integers())


def _leaves(doc, path=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, (*path, i))
    else:
        yield path


UNCERTAINTY_LEAVES = [p for p in _leaves(_stored()) if p[0] in ("params", "theta", "cov", "sigma", "dof")]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(leaf=st.sampled_from(UNCERTAINTY_LEAVES), value=EXTREME)
def test_any_extreme_value_in_a_calibration_is_refused_or_gives_finite_intervals(leaf, value, tmp_path):
    """Any one leaf of the stored calibration set to an extreme value: a ValueError naming the file,
    or a calibration whose every 90% band factor exp(1.645 sd) is finite; never another exception."""
    doc = _stored()
    at = doc
    for k in leaf[:-1]:
        at = at[k]
    at[leaf[-1]] = value
    path = tmp_path / "extreme.json"
    path.write_text(json.dumps(doc))
    try:
        cal = fit.load_calibration(path)
    except ValueError as e:
        assert f"calibration={str(path)!r}" in str(e)
        return
    band = np.exp(1.645 * np.sqrt(np.diag(cal.cov)) + 1.645 * cal.sigma)
    assert np.all(np.isfinite(band)) and cal.dof >= 1
