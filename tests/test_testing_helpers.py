"""The shared helpers outside the model: ``jaxref.testing`` and ``experiments.report.render`` import no
torch, transformers or matplotlib until used; ``experiments.timing`` warms up, interleaves and blocks."""

import subprocess
import sys

import jax.numpy as jnp
import pytest

from experiments.timing import Timing, time_call, time_repeats


def test_helpers_import_without_the_oracle_or_plotting_libraries():
    code = ("import sys, jaxref.testing, jaxref.testing.hf_oracle, jaxref.testing.collectives, "
            "experiments.report.render, experiments.timing; print(sorted(m for m in ('torch', 'transformers', 'matplotlib') if m in sys.modules))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_time_repeats_warms_up_then_interleaves():
    calls = []
    fns = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    got = time_repeats(fns, reps=3, warmup=2)
    assert calls == ["a", "b"] * 5  # 2 warm-up rounds, then 3 timed rounds, a and b alternating
    assert set(got) == {"a", "b"} and all(len(t.wall_s) == len(t.cpu_s) == 3 for t in got.values())
    assert all(t.min_s <= t.median_s for t in got.values())


def test_time_call_returns_the_blocked_result_and_rejects_bad_repeats():
    out, wall_s, cpu_s = time_call(lambda x: x * 2, jnp.arange(5.0))
    assert out.tolist() == [0.0, 2.0, 4.0, 6.0, 8.0] and wall_s >= 0 and cpu_s >= 0
    assert Timing((3.0, 1.0, 2.0), (1.0, 1.0, 5.0)).median_s == 2.0
    with pytest.raises(ValueError, match="reps=0: expected >= 1"):
        time_repeats({"a": lambda: None}, reps=0)
    with pytest.raises(ValueError, match="warmup=-1: expected >= 0"):
        time_repeats({"a": lambda: None}, reps=1, warmup=-1)
