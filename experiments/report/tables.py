"""Plain-text and Markdown tables for the report and the benchmark scripts."""

from __future__ import annotations


def format_table(header: list[str], rows: list[list[object]]) -> str:
    """Left-aligned plain-text table; floats formatted by the caller."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


def md_table(header: list[str], rows: list[list[object]]) -> str:
    """GitHub Markdown table; floats formatted by the caller, '|' in cells escaped."""
    esc = lambda c: str(c).replace("|", "\\|")
    lines = ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if len(r) != len(header):
            raise ValueError(f"row {r!r} has {len(r)} cells, expected {len(header)} (header {header!r})")
        lines.append("| " + " | ".join(esc(c) for c in r) + " |")
    return "\n".join(lines)
