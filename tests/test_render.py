"""``experiments.report.render``: the one table type (Markdown and plain text) and the one figure helper of the reports."""

import matplotlib.image
import pytest

from experiments.report.render import figure, format_table, md_table, save


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
