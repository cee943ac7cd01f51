"""``jaxref.host_memory``: the glibc tunables added once, a user's own kept, the re-executed process
running the same command line with them set."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from jaxref.host_memory import TUNABLES, with_memory_reuse

OURS = ":".join(f"{name}={value}" for name, value in TUNABLES)


def test_tunables_added_to_an_empty_environment():
    assert with_memory_reuse({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": OURS}


def test_other_tunables_kept_and_set_ones_never_overridden():
    env = with_memory_reuse({"GLIBC_TUNABLES": "glibc.malloc.arena_max=4:glibc.cpu.x86_shstk=off"})
    items = env["GLIBC_TUNABLES"].split(":")
    assert items[:2] == ["glibc.malloc.arena_max=4", "glibc.cpu.x86_shstk=off"]  # the user's, first and unchanged
    assert [i.split("=")[0] for i in items[2:]] == [name for name, _ in TUNABLES if name != "glibc.malloc.arena_max"]


def test_nothing_to_do_when_every_tunable_is_set():
    assert with_memory_reuse({"GLIBC_TUNABLES": OURS}) is None


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the re-execution happens on glibc only")
def test_reexec_runs_the_same_command_once_with_the_tunables():
    code = ("import os, sys; print('start', flush=True); from jaxref.host_memory import reexec_with_memory_reuse; "
            "reexec_with_memory_reuse(); print(os.environ['GLIBC_TUNABLES'], sys.argv[1:])")
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", code, "a", "--b"], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.splitlines() == ["start", "start", f"{OURS} ['a', '--b']"]
