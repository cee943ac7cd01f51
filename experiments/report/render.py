"""The one table type, the one figure helper and the one section result of every report: the report's
sections (``experiments.report.sections``), the benchmark scripts and ``python -m device.parity``.

* ``md_table`` (GitHub Markdown) and ``format_table`` (aligned plain text): a header and rows of cells,
  floats formatted by the caller;
* ``figure`` / ``save``: matplotlib's object API (``matplotlib.figure.Figure``, rendered by Agg when
  saved as PNG): no pyplot, so no global figure state or display backend. matplotlib is imported on
  first use, so importing this module needs no plotting library;
* ``SectionResult``: what a report section's ``report_section`` returns (compute -> this typed result ->
  the runner writes it), checked once by ``experiments.report.runner.check_result``.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping
from typing import Any


@dataclasses.dataclass(frozen=True)
class SectionResult:
    """One report section, rendered: ``markdown`` (its text, showing each figure), ``results`` (JSON-able
    numbers under string keys, for results.json) and ``figures`` (PNG file names in the section's output
    folder, as ``save`` returns them)."""

    markdown: str
    results: Mapping[str, Any]
    figures: tuple[str, ...] = ()

    def __post_init__(self):
        if not isinstance(self.markdown, str):
            raise TypeError(f"markdown must be a str, got {type(self.markdown).__name__}")
        if not isinstance(self.results, Mapping):
            raise TypeError(f"results must be a mapping, got {type(self.results).__name__}")
        if isinstance(self.figures, str):
            raise TypeError(f"figures={self.figures!r}: expected a sequence of file names, not one str")
        object.__setattr__(self, "figures", tuple(self.figures))


def format_table(header: list[str], rows: list[list[object]]) -> str:
    """Left-aligned plain-text table; floats formatted by the caller."""
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in _checked(header, rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def md_table(header: list[str], rows: list[list[object]]) -> str:
    """GitHub Markdown table; floats formatted by the caller, '|' in cells escaped."""
    esc = lambda c: str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in _checked(header, rows)]
    return "\n".join(lines)


def _checked(header: list[str], rows: list[list[object]]) -> list[list[object]]:
    for r in rows:
        if len(r) != len(header):
            raise ValueError(f"row {r!r} has {len(r)} cells, expected {len(header)} (header {header!r})")
    return rows


def figure(ncols: int = 1, *, nrows: int = 1, width: float = 6.0, height: float = 3.6):
    """A new figure with ``nrows`` x ``ncols`` axes, each ``width`` x ``height`` inches; returns
    (figure, flat list of axes, row by row)."""
    from matplotlib.figure import Figure

    if ncols < 1 or nrows < 1:
        raise ValueError(f"ncols={ncols}, nrows={nrows}: expected >= 1 each")
    fig = Figure(figsize=(width * ncols, height * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig, out_dir: pathlib.Path | str, name: str, *, dpi: int = 110) -> str:
    """Write ``fig`` as ``out_dir/name`` (PNG, tight layout) and return ``name`` (the report lists file names)."""
    if not name.endswith(".png"):
        raise ValueError(f"name={name!r} must end with .png")
    fig.tight_layout()
    fig.savefig(pathlib.Path(out_dir) / name, dpi=dpi)
    if getattr(fig.canvas, "manager", None) is not None:  # a pyplot figure: release it from pyplot's registry
        import matplotlib.pyplot as plt

        plt.close(fig)
    return name
