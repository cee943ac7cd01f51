"""The Blackhole report section's override parsing. (Its contract, honoured overrides and numbers against
the model are checked on one command-line run in ``tests/test_report.py``.)"""

import pytest

from costmodel.hardware import blackhole_p150a
from experiments.report.sections.blackhole import hardware_with


def test_unknown_override_is_rejected():
    with pytest.raises(ValueError, match="'dram_gbps' is not a field of costmodel.hardware.Blackhole"):
        hardware_with({"blackhole.dram_gbps": 1.0})
    assert hardware_with({"ahbm.pe_clock_hz": 2e9}) == blackhole_p150a()


def test_the_real_pair_diff_tables_are_the_diff():
    """The section's tables of the real before / after pairs: per phase one row per changed priced
    delta of ``diff_reports`` with its numbers, and the totals line with the priced total and the share."""
    from costmodel.blackhole.fit import load_calibration
    from experiments.report.sections.blackhole import REAL_PAIRS, diff_lines

    results = {}
    lines = diff_lines(results, load_calibration())
    tables = [t for t in lines if t.startswith("| op |")]
    assert len(tables) == len(REAL_PAIRS)
    for (phase, (_, after)), table in zip(REAL_PAIRS.items(), tables, strict=True):
        doc = results[f"diff_{phase}_" + after.stem]
        changed = [p for p in doc["pairs"] + doc["only_a"] + doc["only_b"] if p["predicted"] is not None
                   and not p["unchanged"]]
        assert len(table.splitlines()[2:]) == len(changed) > 0  # the table less header and rule
        for p in changed:
            assert f"| {p['measured']:+.1f} | {p['predicted']:+.1f} | [{p['lo']:+.1f}, {p['hi']:+.1f}] |" in table
        t = doc["total"]
        totals = lines[lines.index(table) + 2]
        assert f"predicted {t['predicted_us']:+.1f} us" in totals
        assert f"{100 * t['share_inside']:.0f}% of the changed" in totals


def test_the_predict_table_carries_the_rows_it_ranks(tmp_path):
    """The section's ranked table of a real report: one line per modelled row of ``predict`` with its
    measured time, floor, tt-perf-report's ideal (matmul rows) and prediction, and the plot beside it."""
    from costmodel.blackhole.fit import load_calibration
    from experiments.report.sections.blackhole import PREDICT_REPORT, REAL_REPORTS, predict_lines

    if not (REAL_REPORTS / PREDICT_REPORT).is_file():
        pytest.skip(f"real report not found at {REAL_REPORTS / PREDICT_REPORT}")
    results, figures = {}, []
    lines = predict_lines(tmp_path, results, figures, load_calibration())
    (table,) = [t for t in lines if t.startswith("| line |")]
    assert "| tt-perf-report ideal us |" in table.splitlines()[0]
    ranked = [r for r in results["predict_" + PREDICT_REPORT.removesuffix(".csv")]["rows"] if r["floor_us"] is not None]
    for r, text in zip(ranked, table.splitlines()[2:], strict=False):
        ideal = "" if r["ideal_us"] is None else f"{r['ideal_us']:.1f}"
        assert text.startswith(f"| {r['line']} | {r['op_code']} | {r['measured_us']:.1f} | {r['floor_us']:.1f} | "
                               f"{ideal} | {r['predicted_us']:.1f} |"), text
    assert any(r["ideal_us"] is not None for r in ranked[:10])
    assert (tmp_path / figures[0]).read_bytes().startswith(b"\x89PNG")


def test_the_worst_held_out_rows_list_a_repeated_miss_once_with_its_copies():
    """``worst_distinct_rows``: the rows of one source and op kind priced the same (a layer's repeats, a
    trace's replays) stand as one, their worst member, counted; the list is by |log error|, largest first;
    the same price in another source or kind stays apart."""
    import math

    from costmodel.blackhole.holdout import worst_distinct_rows

    def row(source, kind, target, predicted):
        return {"source": source, "kind": kind, "target": target, "predicted": predicted,
                "residual": math.log(predicted / target)}

    replays = [row("llama", "mm", t, 56.28) for t in (67.4, 67.8, 67.6)]
    others = [row("phi", "mm", 92.9, 56.28), row("llama", "norm", 10.0, 9.0), row("gemma", "add", 1.0, 2.5)]
    out = worst_distinct_rows(replays + others, top=3)
    assert [(e["source"], e["kind"], n) for e, n in out] == [("gemma", "add", 1), ("phi", "mm", 1), ("llama", "mm", 3)]
    assert out[2][0]["target"] == 67.8  # the replay furthest off
    assert len(worst_distinct_rows(replays + others)) == 4
