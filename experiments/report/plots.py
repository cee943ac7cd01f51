"""matplotlib (Agg backend) helpers shared by the report's sections."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI machines
import matplotlib.pyplot as plt


def figure(ncols: int = 1, *, width: float = 6.0, height: float = 3.6):
    """A new figure with ``ncols`` side-by-side axes (a list)."""
    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, list(axes[0])


def save(fig, out_dir: pathlib.Path, name: str) -> str:
    """Write ``fig`` as ``out_dir/name`` (PNG), close it and return ``name``."""
    if not name.endswith(".png"):
        raise ValueError(f"name={name!r} must end with .png")
    fig.tight_layout()
    fig.savefig(pathlib.Path(out_dir) / name, dpi=110)
    plt.close(fig)
    return name
