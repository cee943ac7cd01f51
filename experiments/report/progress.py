"""Progress over the report's stages: a tqdm bar on a terminal, one plain line per stage in a log."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

_T0 = time.perf_counter()


def note(message: str) -> None:
    """One progress line from inside a section (a long sub-stage starting), bar-safe, stamped with the
    wall and process CPU seconds since the report started (CPU time is what a shared machine can't inflate)."""
    tqdm.write(f"    [{time.perf_counter() - _T0:6.1f} s, cpu {time.process_time():6.1f} s] {message}", file=sys.stderr)


class Progress:
    """Section-level progress: ``start`` / ``done`` per stage.

    On a TTY a tqdm bar shows the running section and its elapsed time; otherwise (CI, a piped
    log) every start and every end is one plain line, so a log shows where a run spends its time.
    """

    def __init__(self, titles: list[str], *, stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.n = len(titles)
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.bar = tqdm(total=self.n, file=self.stream, unit="section", disable=not self.tty,
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}]")
        self.t0 = time.perf_counter()

    def start(self, i: int, title: str) -> None:
        if self.tty:
            self.bar.set_description(f"{i + 1}/{self.n} {title}")
        else:
            print(f"[{i + 1}/{self.n}] {title} ...", file=self.stream, flush=True)

    def done(self, i: int, title: str, status: str, wall_s: float) -> None:
        line = f"[{i + 1}/{self.n}] {title}: {status} in {wall_s:.1f} s"
        if self.tty:
            self.bar.update(1)
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream, flush=True)

    def close(self) -> float:
        """Close the bar; returns the total wall time in seconds."""
        self.bar.close()
        return time.perf_counter() - self.t0
