"""``device.parity_checks``: parity rows fail closed on NaN / Inf and stay strict JSON.

Oracle: numpy's own ``corrcoef`` for the finite case; the non-finite counts are set by hand.
"""

from __future__ import annotations

import json

import numpy as np

from device.parity_checks import describe, failures, metric


def test_finite_row_carries_the_pcc_and_passes_on_target():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(64, 32)).astype(np.float32)
    c = g + 0.01 * rng.normal(size=g.shape).astype(np.float32)
    row = metric(g, c, 0.999)
    assert row["pass"] is True and row["nonfinite_golden"] == row["nonfinite_graph"] == 0
    assert abs(row["pcc"] - np.corrcoef(g.ravel(), c.ravel())[0, 1]) < 1e-6
    assert metric(g, c, 0.99999)["pass"] is False


def test_nan_on_both_sides_is_a_failure_with_counts_not_agreement():
    g = np.full((4, 4), np.nan, np.float32)
    row = metric(g, g.copy(), 0.9999)
    assert row["pass"] is False and row["pcc"] is None and row["max_abs"] is None
    assert (row["nonfinite_golden"], row["nonfinite_graph"]) == (16, 16)
    assert "NON-FINITE: 16 in graph, 16 in golden" in describe(row)


def test_one_inf_in_the_graph_fails_even_without_a_target():
    g = np.ones((8,), np.float32) * np.arange(8)
    c = g.copy()
    c[3] = np.inf
    row = metric(g, c, None)
    assert row["pass"] is False and row["nonfinite_graph"] == 1 and row["nonfinite_golden"] == 0


def test_failures_lists_failing_rows_and_results_stay_strict_json():
    g = np.arange(8, dtype=np.float32)
    bad = g.copy()
    bad[0] = np.nan
    res = {"layers": [{"layer": 0, "vs_fp32": metric(g, g, 0.9)}, {"layer": 1, "vs_fp32": metric(g, bad, 0.9)}],
           "sample": {"steps": [{"free_running": metric(g, -g, None)}]}}
    assert failures(res) == ["layers[1].vs_fp32: NON-FINITE: 1 in graph, 0 in golden"]
    json.dumps(res, allow_nan=False)  # raises on a NaN / Inf anywhere
