"""Where the project's shared data lies: ``shared/`` next to the checkout (CI and the main checkout lay it
there), or next to the folder that holds a worktree. Real ttnn device-profiler op reports nobody here
wrote are in ``shared/data/profiler_reports`` (their sources in its SOURCES.md)."""

from __future__ import annotations

import pathlib

_ROOT = pathlib.Path(__file__).resolve().parents[1]


def profiler_reports_dir() -> pathlib.Path:
    """The first ``shared/data/profiler_reports`` beside the checkout or its parent (else the first
    candidate, which does not exist: the tests that need it skip with the path in their reason)."""
    candidates = [d / "shared" / "data" / "profiler_reports" for d in (_ROOT.parent, _ROOT.parent.parent)]
    return next((c for c in candidates if c.is_dir()), candidates[0])


def need_file(path: pathlib.Path) -> None:
    """Skip the calling test, with the path in the reason, when the real data file is absent."""
    import pytest

    if not path.is_file():
        pytest.skip(f"real report not found at {path}")
