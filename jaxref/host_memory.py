"""Host memory reuse for long JAX CPU runs: glibc's malloc set to keep freed buffers for the next call.

XLA:CPU allocates the temporaries of every execution with malloc and frees them when it ends (one
decoder layer of the port's width holds a few hundred MB of them: the layer's weights, its cache in
float32, the attention scores). glibc serves a block above its mmap threshold (at most 32 MiB) with
a fresh ``mmap`` and unmaps it on ``free``, and XLA's worker threads allocate from arenas of their
own, which map large blocks the same way; so each call faults its temporaries in again, page by
page, and the kernel zeroes every page (system time, and most of a run's page faults). With one
arena, no ``mmap`` and a high trim threshold, freed blocks stay in the process and are reused: the
arithmetic is untouched (the same programs on the same values), the resident size holds the largest
set of blocks alive at once.

The settings are glibc tunables (``GLIBC_TUNABLES``), read once when a process starts: ``mallopt``
from Python comes too late, after the threads that allocate have their arenas.
``reexec_with_memory_reuse`` therefore runs the current command line again, in the same process
(``os.execve``), with the tunables set; command-line entry points call it first.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

# (tunable, value): one arena for every thread, no mmap'd blocks, return freed memory to the kernel only
# above 1 GiB of free space at the top of the heap
TUNABLES = (("glibc.malloc.arena_max", "1"), ("glibc.malloc.mmap_max", "0"),
            ("glibc.malloc.trim_threshold", str(1 << 30)))


def with_memory_reuse(environ: Mapping[str, str]) -> dict[str, str] | None:
    """``environ`` with ``TUNABLES`` added to ``GLIBC_TUNABLES`` (kept: the other tunables set there), or
    None when every one of them is already set there (to any value: a user's choice wins)."""
    current = environ.get("GLIBC_TUNABLES", "")
    names = {item.split("=", 1)[0] for item in current.split(":") if item}
    missing = [f"{name}={value}" for name, value in TUNABLES if name not in names]
    if not missing:
        return None
    return {**environ, "GLIBC_TUNABLES": ":".join([*(current.split(":") if current else []), *missing])}


def reexec_with_memory_reuse() -> None:
    """Replace this process by the same command line (``sys.orig_argv``) with glibc's malloc set to reuse
    freed memory (module docstring). Returns without doing anything when the tunables are already set
    (the re-executed process, or a user's own ``GLIBC_TUNABLES``) or the C library is not glibc."""
    if platform.libc_ver()[0] != "glibc":
        return
    env = with_memory_reuse(os.environ)
    if env is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
