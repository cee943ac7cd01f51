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
