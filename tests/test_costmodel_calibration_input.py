"""Bad calibration input is a clear error (exit 2, ``error: ...`` naming the file, key, value and
what was expected), never a traceback or a NaN: ``--calibration`` JSON files, ``calibrate``'s
``--ops-csv`` / ``--out`` paths (checked before the fit) and a report with an ``inf`` duration."""

import csv
import json
import math
import re

import pytest

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
    assert "is a directory; expected a calibration JSON file" in _exit2(["--calibration", str(tmp_path)], capsys)
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
    assert "is a directory; expected an ops_perf_results CSV file" in _exit2(
        ["calibrate", "--ops-csv", str(tmp_path)], capsys)


def test_out_is_checked_before_the_fit(port_report, tmp_path, capsys, monkeypatch):
    def no_fit(*a, **k):
        raise AssertionError("the fit ran before --out was checked")
    monkeypatch.setattr(fit, "fit", no_fit)
    err = _exit2(["calibrate", "--ops-csv", str(port_report), "--out", str(tmp_path)], capsys)
    assert f"--out={str(tmp_path)!r} is a directory" in err
    err = _exit2(["calibrate", "--ops-csv", str(port_report), "--out", str(tmp_path / "no" / "cal.json")], capsys)
    assert "does not exist" in err


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
