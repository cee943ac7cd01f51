"""The one way the benchmarks and the report time a call: wall and process-CPU seconds around the call
and ``jax.block_until_ready`` of its result (JAX dispatches asynchronously: without it a timer measures
the dispatch, not the work); medians of interleaved repeats.

Timings belong in benchmark scripts and the report's performance section, never in tests.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax


@dataclasses.dataclass(frozen=True)
class Timing:
    """Kept repeats of one call: wall and process-CPU seconds (CPU time sums every thread of the process)."""

    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def min_s(self) -> float:
        return min(self.wall_s)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(self.cpu_s)


def time_call(fn: Callable[..., Any], *args, **kwargs) -> tuple[Any, float, float]:
    """(result, wall s, CPU s) of one call ``fn(*args, **kwargs)``, its result blocked on before the clocks stop."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = jax.block_until_ready(fn(*args, **kwargs))
    return out, time.perf_counter() - w0, time.process_time() - c0


def time_repeats(fns: Mapping[str, Callable[[], Any]], *, reps: int, warmup: int = 1) -> dict[str, Timing]:
    """Time each zero-argument call ``reps`` times after ``warmup`` untimed calls (compilation, caches).

    The calls are interleaved (a, b, a, b, ...), so load drifting on a shared machine hits every side
    alike. Returns name -> ``Timing``.
    """
    if reps < 1:
        raise ValueError(f"reps={reps}: expected >= 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup}: expected >= 0")
    for _ in range(warmup):
        for fn in fns.values():
            jax.block_until_ready(fn())
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            _, w, c = time_call(fn)
            wall[name].append(w)
            cpu[name].append(c)
    return {name: Timing(tuple(wall[name]), tuple(cpu[name])) for name in fns}



class PhaseClock:
    """Wall and process-CPU seconds of named phases of one run (``with clock("golden"): ...``; a phase
    entered again adds up). ``phases``: name -> (wall s, CPU s), in first-entered order; CPU is the
    process's (every thread's), so phases run in threads side by side count each other's. The
    phase's code must end on host values (numpy), or the clock stops at the dispatch, not the work."""

    def __init__(self):
        self.phases: dict[str, tuple[float, float]] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            w, c = self.phases.get(name, (0.0, 0.0))
            self.phases[name] = (w + time.perf_counter() - w0, c + time.process_time() - c0)
