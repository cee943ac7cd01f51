"""Peak memory and time of flash vs dense causal prefill, side by side (issue 3 benchmark).

    python -m experiments.bench_flash [--sizes 4096 16384 32768] [--group 1] [--tile 512]
                                      [--q-block 512] [--reps 3]

One kv head group (K = 1, N = G q heads), d = 128, causal, T = S, float32 on this machine's CPU.

* Memory: XLA's compiled ``memory_analysis()`` of each jitted function, argument + output + temp
  bytes (deterministic; the buffers XLA allocates for one call). Dense is always compiled (that
  allocates nothing) but run only when those bytes fit ``--dense-max-gib`` (default 4 GiB, kind
  to a shared machine) and half of MemAvailable; otherwise its row says "not run".
* Time: median of ``reps`` runs after one warm-up (``experiments.timing.time_repeats``), flash with causal
  tile skip vs the same sweep computing the wholly-future tiles under the mask (``causal_skip=False``),
  interleaved. Dense
  (when run) is timed once, for scale; it is not a target.

Targets (issue 3): flash bytes linear in S and <= 1/8 of dense at 16k; skip speedup >= 1.6x.
"""

from __future__ import annotations

import argparse
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from experiments.report.render import format_table
from experiments.timing import time_call, time_repeats
from jaxref.attention import AttentionGeometry, Flash, attention_reference
from jaxref.validation import cli_main, positive_float, positive_int


def _mem_available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("MemAvailable not found in /proc/meminfo")


def _bytes(compiled) -> int:
    ma = compiled.memory_analysis()
    return int(ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes)


def measure(sizes, *, group: int = 1, head_dim: int = 128, tile: int = 512, q_block: int = 512, reps: int = 3,
            dense_max_gib: float = 4.0) -> list[dict]:
    """One dict per S: compiled bytes (dense, flash, flash without skip), median (wall s, CPU s) of
    flash / noskip (and dense's single run when it fits), tiles computed, max|flash - dense|."""
    G, H = group, head_dim
    geom = AttentionGeometry(G, 1, H)
    dense = jax.jit(functools.partial(attention_reference, causal=True))
    flash = jax.jit(functools.partial(Flash(tile, q_block), causal=True))
    flash_noskip = jax.jit(functools.partial(Flash(tile, q_block, causal_skip=False), causal=True))
    rows = []
    rng = np.random.default_rng(0)
    for S in sizes:
        q = jnp.asarray(rng.standard_normal((S, G, H)), jnp.float32)
        k = jnp.asarray(rng.standard_normal((S, 1, H)), jnp.float32)
        v = jnp.asarray(rng.standard_normal((S, 1, H)), jnp.float32)
        c_dense = dense.lower(q, k, v).compile()
        c_flash = flash.lower(q, k, v).compile()
        c_noskip = flash_noskip.lower(q, k, v).compile()
        sch = Flash(tile, q_block).schedule(S, S, geom, causal=True)
        sch_noskip = Flash(tile, q_block, causal_skip=False).schedule(S, S, geom, causal=True)
        t = {name: (tm.median_s, tm.median_cpu_s) for name, tm in time_repeats(
            {name: functools.partial(fn, q, k, v) for name, fn in (("flash", c_flash), ("noskip", c_noskip))},
            reps=reps).items()}
        row = {"S": S, "dense_bytes": _bytes(c_dense), "flash_bytes": _bytes(c_flash),
               "noskip_bytes": _bytes(c_noskip), "dense_s": None, "flash_s": t["flash"], "noskip_s": t["noskip"],
               "tiles": sch.tiles_computed, "tiles_noskip": sch_noskip.tiles_computed, "max_err": float("nan")}
        if row["dense_bytes"] <= min(dense_max_gib * 2**30, _mem_available_bytes() // 2):
            # timed apart (its big buffers would disturb the flash pair), once: it is slow
            out_dense, wall_s, cpu_s = time_call(c_dense, q, k, v)
            out_dense = out_dense[0]
            row["dense_s"] = (wall_s, cpu_s)
            row["max_err"] = float(jnp.abs(c_flash(q, k, v)[0] - out_dense).max())  # the same function
            del out_dense
        rows.append(row)
        del q, k, v, c_dense
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_flash", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="example: python -m experiments.bench_flash --sizes 1024 2048 --tile 128")
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[4096, 16384, 32768])
    ap.add_argument("--group", type=positive_int, default=1, help="q heads G of the one kv head")
    ap.add_argument("--head-dim", type=positive_int, default=128)
    ap.add_argument("--tile", type=positive_int, default=512)
    ap.add_argument("--q-block", type=positive_int, default=512)
    ap.add_argument("--reps", type=positive_int, default=3)
    ap.add_argument("--dense-max-gib", type=positive_float, default=4.0,
                    help="run dense only if its compiled buffers fit this (and half of MemAvailable); "
                         "dense at 32k needs ~8.7 GB and ~1-2 min on 2 cores")
    return ap


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input is ``error: ...``, status 2."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(args: argparse.Namespace) -> int:
    print(f"flash vs dense causal prefill: K=1 kv head, G={args.group} q heads, d={args.head_dim}, float32, "
          f"tile={args.tile}, q_block={args.q_block}, reps={args.reps} (median), backend={jax.default_backend()}, "
          f"devices={jax.device_count()}")
    measured = measure(args.sizes, group=args.group, head_dim=args.head_dim, tile=args.tile, q_block=args.q_block,
                       reps=args.reps, dense_max_gib=args.dense_max_gib)
    rows = [(r["S"], r["dense_bytes"], r["flash_bytes"], r["noskip_bytes"], r["dense_s"], r["flash_s"], r["noskip_s"],
             r["tiles"], r["tiles_noskip"], r["max_err"]) for r in measured]

    header = ["S", "dense bytes", "flash bytes", "noskip bytes", "dense/flash", "flash B/S", "t dense s", "t flash s",
              "t noskip s", "skip x", "cpu skip x", "tiles", "max|err|"]
    print("\n" + format_table(header, [
        [S, f"{bd:,}", f"{bf:,}", f"{bn:,}", f"{bd / bf:.1f}", f"{bf / S:.0f}",
         "not run" if td is None else f"{td[0]:.3f}", f"{tf[0]:.3f}", f"{tn[0]:.3f}", f"{tn[0] / tf[0]:.2f}",
         f"{tn[1] / tf[1]:.2f}", f"{tiles}/{tiles_ns}", f"{err:.2e}"]
        for S, bd, bf, bn, td, tf, tn, tiles, tiles_ns, err in rows]))
    if any(r[4] is None for r in rows):
        print("dense 'not run': its compiled buffers exceed --dense-max-gib or half of MemAvailable; its bytes "
              "are from memory_analysis().")
    print("bytes: argument + output + temp of the compiled call; times: "
          "median wall s (dense: one run); 'cpu skip x' = the same ratio of process CPU time (robust to a "
          "shared machine); max|err| = flash vs dense output.")

    # Verdicts against the targets.
    by_s = {r[0]: r for r in rows}
    sizes = sorted(by_s)
    # Linear (affine: a constant tile working set plus bytes per key): equal marginal bytes per key
    # between consecutive sizes. Dense's marginal bytes per key grow with S (quadratic).
    slopes = [(by_s[b][2] - by_s[a][2]) / (b - a) for a, b in itertools.pairwise(sizes)]
    dense_slopes = [(by_s[b][1] - by_s[a][1]) / (b - a) for a, b in itertools.pairwise(sizes)]
    linear = bool(slopes) and max(slopes) / min(slopes) < 1.1
    print(f"flash marginal bytes per key between sizes: {', '.join(f'{x:.0f}' for x in slopes)} -> "
          f"{'linear' if linear else 'NOT linear'} in S (dense: {', '.join(f'{x:.0f}' for x in dense_slopes)})")
    if 16384 in by_s:
        ratio = by_s[16384][1] / by_s[16384][2]
        print(f"dense / flash bytes at S=16384: {ratio:.1f}x (target >= 8x): {'PASS' if ratio >= 8 else 'FAIL'}")
    speedups = [r[6][0] / r[5][0] for r in rows]
    print(f"causal skip wall-time speedup: {', '.join(f'{x:.2f}x' for x in speedups)} (target >= 1.6x): "
          f"{'PASS' if min(speedups) >= 1.6 else 'FAIL'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
