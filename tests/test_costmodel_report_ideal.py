"""``predict``'s ``tt_perf_report_ideal_us`` column: tt-perf-report's ideal time of a matmul row (the
roofline its DRAM % and FLOPs % divide by), checked against tt-perf-report itself run on real
reports: for every row it analyses, its Device Time x max(DRAM %, FLOPs %) / 100 is our ideal, and a
row it gives neither percentage has none."""

import csv
import json
import pathlib

import pytest
from _report_util import tt_perf_report
from _shared_data import profiler_reports_dir

from costmodel.blackhole.cli import main

PAIRS = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
REPORTS = [*sorted(p for p in PAIRS.glob("bh_north_mini_*.csv") if not p.stem.endswith("_perf_report")),
           profiler_reports_dir() / "bh_64_clip_encoder_1.csv"]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.stem)
def test_ideal_is_tt_perf_reports(path, tmp_path, capsys):
    if not path.is_file():
        pytest.skip(f"real report not found at {path}")
    out_csv = tmp_path / "rows.csv"
    capsys.readouterr()
    assert main(["predict", "--ops-csv", str(path), "--csv", str(out_csv), "--json"]) == 0
    rows = {r["line"]: r for r in json.loads(capsys.readouterr().out, parse_constant=pytest.fail)["rows"]}
    theirs = {int(r["ID"]): r for r in tt_perf_report(path, tmp_path, "--ignore-signposts")}
    checked = 0
    for line, r in rows.items():
        pct = [float(theirs[line][k]) for k in ("DRAM %", "FLOPs %") if theirs[line][k]]
        if not pct:
            assert r["ideal_us"] is None, (line, r["op_code"])
            continue
        assert r["ideal_us"] == pytest.approx(float(theirs[line]["Device Time"]) * max(pct) / 100, rel=1e-6), line
        checked += 1
    assert checked == sum("Matmul" in r["op_code"] for r in rows.values()) > 0
    with out_csv.open(newline="") as f:
        written = {int(r["line"]): r["tt_perf_report_ideal_us"] for r in csv.DictReader(f)}
    assert all((written[k] == "") == (r["ideal_us"] is None) for k, r in rows.items())
