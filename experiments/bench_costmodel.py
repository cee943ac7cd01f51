"""Throughput of the vmapped Blackhole cost model: configurations evaluated per second.

    python -m experiments.bench_costmodel [--sizes 65536 262144 1048576] [--reps 5]

Each configuration is a full 64-layer step (19 ops per layer, step + I/O) under the exact model,
with random valid knobs: (in0_block_w, per_core_N) of the five matmuls drawn from their valid
sets, k_chunk in {128, 256, 512}, Smax in {5120, 6144, 8192}. One jit-compiled ``vmap`` per
batch size; the median of ``reps`` timed runs after one warm-up. For scale, the same model
through the per-config discrete evaluator (validation + one jitted call per config).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.blackhole import MATMULS, AttnConfig, BlackholeConfig, evaluate, load_fitted, sweep_step_us
from costmodel.blackhole.tune import valid_matmul_configs
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.validation import positive_int

CFG = ExpertConfig.alpamayo_tt()


def random_batch(n: int, rng: np.random.Generator, *, kv_dtype: str = "bf16") -> BlackholeConfig:
    """A BlackholeConfig whose leaves are [n] arrays of random valid settings."""
    hw = blackhole_p150a()
    bc = BlackholeConfig.port(CFG, kv_dtype=kv_dtype)
    changes = {}
    for name in MATMULS:
        valid = np.asarray(valid_matmul_configs(name, hw, bc, cfg=CFG), np.float32)
        pick = valid[rng.integers(0, len(valid), n)]
        changes[name] = dataclasses.replace(getattr(bc, name), in0_block_w=jnp.asarray(pick[:, 0]),
                                            per_core_N=jnp.asarray(pick[:, 1]), per_core_M=jnp.full(n, 2.0))
    k = np.asarray([128.0, 256.0, 512.0], np.float32)[rng.integers(0, 3, n)]
    smax = np.asarray([5120.0, 6144.0, 8192.0], np.float32)[rng.integers(0, 3, n)]
    return bc.replace(smax=jnp.asarray(smax), seq_len=jnp.full(n, 4700.0),
                      attn=AttnConfig(jnp.asarray(k), jnp.full(n, 32.0), jnp.full(n, 16.0)), **changes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[65536, 262144, 1048576])
    ap.add_argument("--reps", type=positive_int, default=5)
    args = ap.parse_args(argv)
    hw, fit = blackhole_p150a(), load_fitted()
    rng = np.random.default_rng(0)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}, {len(jax.devices())} device(s)")
    print(f"{'configs':>9s} {'compile s':>10s} {'median s':>9s} {'configs/s':>12s}")
    best = 0.0
    for n in args.sizes:
        batch = random_batch(n, rng)
        t0 = time.perf_counter()
        out = sweep_step_us(hw, fit, batch, cfg=CFG).block_until_ready()
        compile_s = time.perf_counter() - t0
        assert out.shape == (n,) and bool(jnp.all(jnp.isfinite(out)))
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            sweep_step_us(hw, fit, batch, cfg=CFG).block_until_ready()
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        best = max(best, n / med)
        print(f"{n:9d} {compile_s:10.2f} {med:9.4f} {n / med:12.3g}")
    # the same model one config at a time through the validating discrete evaluator
    bc = BlackholeConfig.port(CFG)
    evaluate(hw, fit, bc, cfg=CFG)
    m = 200
    t0 = time.perf_counter()
    for i in range(m):
        evaluate(hw, fit, bc.replace(smax=float(5120 + 1024 * (i % 3))), cfg=CFG)
    per_call = (time.perf_counter() - t0) / m
    print(f"\nper-config discrete evaluator: {1 / per_call:.0f} configs/s ({1e3 * per_call:.2f} ms each); "
          f"vmapped sweep is {best * per_call:.0f}x faster")
    print(f"best vmapped throughput: {best:.3g} configs/s (target >= 1e5): {'PASS' if best >= 1e5 else 'FAIL'}")


if __name__ == "__main__":
    main()
