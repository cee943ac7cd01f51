"""``python -m costmodel.blackhole predict`` on real reports: every timed device-op row once, the floor
below the prediction and above the operands' bytes at the DRAM peak, the ranking, CSV / plot / JSON
outputs, and bad input refused."""

import csv
import json

import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole import report_predict as rp
from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.holdout import row_intervals
from costmodel.blackhole.opspecs import MatmulSpec
from costmodel.blackhole.report_reader import read_report
from costmodel.hardware import tile_bytes

DATA = profiler_reports_dir()
REPORTS = sorted(DATA.glob("bh_*.csv")) if DATA.is_dir() else []
DEEPSEEK = DATA / "bh_8xp150_deepseek_v3_d_p.csv"
pytestmark = pytest.mark.skipif(not REPORTS, reason=f"real reports not found at {DATA}")


def _device0_timed_rows(path) -> int:
    """Device ops of the lowest DEVICE ID whose duration tt-perf-report itself counts as valid (and > 0)."""
    perf = pytest.importorskip("tt_perf_report.perf_report")
    with path.open(newline="", encoding="utf-8-sig") as f:
        recs = [r for r in csv.DictReader(f) if r["OP TYPE"] == "tt_dnn_device"]
    first = min(float(r["DEVICE ID"]) for r in recs)
    return sum(1 for r in recs if float(r["DEVICE ID"]) == first and not perf.is_invalid_device_duration(r)
               and float(r["DEVICE KERNEL DURATION [ns]"]) > 0)


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_predict_runs_on_every_real_report(path, tmp_path, capsys):
    out_csv, plot = tmp_path / "rows.csv", tmp_path / "top.png"
    assert main(["predict", "--ops-csv", str(path), "--csv", str(out_csv), "--plot", str(plot), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert len(doc["rows"]) == _device0_timed_rows(path)
    with out_csv.open() as f:
        assert len(list(csv.DictReader(f))) == len(doc["rows"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    above = [r["above_floor_us"] for r in doc["rows"] if r["floor_us"] is not None]
    assert above == sorted(above, reverse=True)


def test_floor_is_below_the_prediction_and_above_the_bytes_at_peak():
    rep, cal = read_report(DEEPSEEK), load_calibration()
    rows = [r for r in rp.predict_report(rep, cal) if r.predicted_us is not None]
    assert len(rows) >= 4
    for r in rows:
        assert 0 < r.floor_us <= r.predicted_us and r.lo_us <= r.predicted_us <= r.hi_us
    by_line = {r.line: r for r in rows}
    matmuls = [x for x in rep.rows if isinstance(x.spec, MatmulSpec)]
    assert matmuls
    for x in matmuls:  # DRAM-interleaved operands: all of them cross the DRAM interface at least once
        s = x.spec
        nbytes = (s.M * s.K + s.M * s.N) // 1024 * tile_bytes(s.act_dtype) + s.K * s.N // 1024 * tile_bytes(
            s.weight_dtype)
        assert by_line[x.line].floor_us >= nbytes / rep.hw.dram_peak_bytes_per_s * 1e6


def test_the_stored_discrepancy_only_widens_row_intervals():
    rep, cal = read_report(DEEPSEEK), load_calibration()
    rows = rep.measured_rows()
    plain, full = row_intervals(cal, rows, hw=rep.hw), row_intervals(cal, rows, hw=rep.hw, discrepancy="stored")
    for a, b in zip(plain, full, strict=True):
        assert a["predicted"] == pytest.approx(b["predicted"])
        assert b["lo"] <= a["lo"] * (1 + 1e-9) and b["hi"] >= a["hi"] * (1 - 1e-9)
    assert any(b["hi"] > a["hi"] * 1.01 for a, b in zip(plain, full))


@pytest.mark.parametrize("argv, message", [
    ([], "the following arguments are required: --ops-csv"),
    (["--ops-csv", "/nonexistent.csv"], "no such file"),
    (["--ops-csv", str(DEEPSEEK), "--csv", "/"], "is a folder; expected a file name"),
    (["--ops-csv", str(DEEPSEEK), "--device-id", "x"], "--device-id='x'"),
    (["--ops-csv", str(DEEPSEEK), "--top", "0"], "expected an integer >= 1"),
])
def test_predict_refuses_bad_input(argv, message, capsys):
    assert main(["predict", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
