"""Parts of the report's sections that need no full run: the one table type and figure helper
(``jaxref.render``), and section 1's decode-SP collectives table (the lowered program's rounds and bytes
read back and compared with the schedule)."""

import matplotlib.image
import pytest

from experiments.report.collectives import collectives_part
from jaxref.render import figure, format_table, md_table, save


def test_collectives_table_reads_the_schedule_back_from_the_lowered_program():
    """P = 8, C = 1, 2, 4, 8 (64 fake devices in its own process): the lowered program's rounds and bytes
    per device equal the schedule's for tree and fan-out; the all-reduce moves exactly one (m, l, O)
    payload per pass in two chained collectives."""
    text, res = collectives_part(quick=True)
    rows = res["rows"]
    assert [(r["C"], r["reduce"]) for r in rows] == [(c, k) for c in (1, 2, 4, 8)
                                                     for k in ("tree", "all_to_all", "all_reduce")]
    for r in rows:
        if r["reduce"] == "all_reduce":
            assert (r["program_all_reduces"], r["program_all_reduce_depth"]) == (2, 2)
            assert r["program_all_reduce_bytes"] == r["schedule_payload_bytes"] == 8 * 1 * 8 * 130 * 4
        else:
            assert r["program_rounds"] == r["schedule_rounds"] > 0
            assert r["program_bytes_per_device_max"] == r["schedule_bytes_per_device_max"]
    assert res["all_met"]
    assert "| 8 | 8 | tree | 6 / 6 |" in text  # ceil(log2 8) + 2x4 center-mesh depth 1 + 2


def test_format_table_aligns_columns():
    text = format_table(["a", "long header"], [[1, "x"], ["wide cell", 2.5]])
    lines = text.splitlines()
    assert lines[0] == "a          long header"
    assert lines[1] == "---------  -----------"
    assert lines[3] == "wide cell  2.5"


def test_md_table_escapes_pipes_and_checks_row_width():
    assert md_table(["a", "b"], [["x|y", 1]]).splitlines() == ["| a | b |", "|---|---|", "| x\\|y | 1 |"]
    with pytest.raises(ValueError, match="1 cells, expected 2"):
        md_table(["a", "b"], [[1]])


def test_figure_helper_writes_a_png_of_the_asked_size(tmp_path):
    fig, axes = figure(3, nrows=2, width=2.0, height=1.5)
    assert len(axes) == 6
    axes[4].plot([0, 1], [1, 0])
    assert save(fig, tmp_path, "f.png", dpi=50) == "f.png"
    assert matplotlib.image.imread(tmp_path / "f.png").shape[:2] == (2 * 1.5 * 50, 3 * 2.0 * 50)
    with pytest.raises(ValueError, match="name='f.svg' must end with .png"):
        save(fig, tmp_path, "f.svg")
    with pytest.raises(ValueError, match="ncols=0"):
        figure(0)
