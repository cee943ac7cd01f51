"""Calibration against the notes' measured tables (the oracle is the measurement itself)."""

import json

import pytest

from costmodel import calibrate
from costmodel.fitted import CALIBRATION_PATH, DATA_DIR, DESCRIPTIONS, load_fitted, params_to_dict


@pytest.fixture(scope="module")
def stored_report():
    return calibrate.report(load_fitted())


def _rows(table, name):
    return [r for r in table if r["table"] == name]


def test_data_rows_have_sources():
    rows = calibrate.load_rows()
    assert len(rows) == 37
    assert all("EXPERT_NOTES.md" in r.source and len(r.source) > 60 for r in rows)
    for f in calibrate.DATA_FILES:
        doc = json.loads((DATA_DIR / f).read_text())
        assert "EXPERT_NOTES.md" in doc["source"]


def test_per_op_table_within_10_percent(stored_report):
    rows = _rows(stored_report, "op_times")
    assert len(rows) == 19
    bad = {r["name"]: round(100 * r["error"], 1) for r in rows if abs(r["error"]) > 0.10}
    assert not bad, bad


def test_matmul_table_within_10_percent(stored_report):
    rows = _rows(stored_report, "matmul_table")
    assert {r["name"] for r in rows} >= {"wqkv/tuned", "wo/tuned", "w1/tuned", "w3/tuned", "w2/tuned"}
    bad = {r["name"]: round(100 * r["error"], 1) for r in rows if abs(r["error"]) > 0.10}
    assert not bad, bad


def test_attention_table_within_10_percent(stored_report):
    bad = {r["name"]: r["error"] for r in _rows(stored_report, "attention_table") if abs(r["error"]) > 0.10}
    assert not bad, bad


def test_step_within_3_percent(stored_report):
    by_name = {r["name"]: r for r in _rows(stored_report, "step_times")}
    assert by_name["step_us"]["lo"] == 32500
    assert abs(by_name["step_us"]["error"]) < 0.03
    assert abs(by_name["sample_us"]["error"]) < 0.03


def test_far_fewer_parameters_than_rows():
    doc = json.loads(CALIBRATION_PATH.read_text())
    n_params, n_rows = doc["fit"]["n_params"], doc["fit"]["n_rows"]
    assert n_params == len(DESCRIPTIONS) and n_rows == len(calibrate.load_rows())
    assert 2 * n_params < n_rows
    assert [r["name"] for r in doc["fitted_to"]] == [r.name for r in calibrate.load_rows()]


def test_fitted_parameters_are_physical():
    p = params_to_dict(load_fitted())
    assert 0.3 < p["dram_eff"] < 0.95  # REFERENCE: 82-92% large reads, ~50% at M=64
    assert 0.1 < p["dram_latency_us"] < 2.0  # a DRAM round trip is hundreds of cycles
    assert p["core_read_tiles_per_s"] * 2048 < 86.4e9  # one core cannot beat its NoC link
    assert all(0 < p[k] < 20 for k in p if k.startswith("launch_"))
    assert 1.0 < p["overlap_exponent"] < 10.0


@pytest.mark.slow
def test_refit_from_prior_reproduces_the_tables():
    params, info = calibrate.fit(steps=800)
    table = calibrate.report(params)
    assert info["loss"] < 0.05 * info["loss_init"]
    assert max(abs(r["error"]) for r in table if r["table"] != "step_times") < 0.10
    step = next(r for r in table if r["name"] == "step_us")
    assert abs(step["error"]) < 0.03
