"""Throughput of the vmapped AHBM kernel model: configurations evaluated per second.

    python -m experiments.bench_ahbm [--n 1048576] [--repeats 5]

Each case evaluates n random configurations (S in 1k..1M, TILE, C, P, pipelining option) in one
jitted ``vmap`` call at its own size (``costmodel.ahbm.tune.sweep_batch``, latency and TCM margin); the median
of ``repeats`` timed calls after a warm-up call is reported.
"""

from __future__ import annotations

import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.ahbm.config import MODELS, PIPELINES
from costmodel.ahbm.tune import sweep_batch
from costmodel.hardware import ahbm_sip
from experiments.timing import time_repeats
from jaxref.validation import cli_main, positive_int


def random_knobs(case: str, n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    G = MODELS["llama3_70b"][0].group
    tile = 2.0 ** rng.integers(5, 13, n)
    S = 2.0 ** rng.integers(10, 21, n)
    if case == "decode_sp":
        C, P = 2.0 ** rng.integers(0, 5, n), 2.0 ** rng.integers(0, 4, n)
    elif case == "prefill_sp":
        C, P = np.full(n, float(G)), 2.0 ** rng.integers(0, 4, n)
        tile = np.minimum(tile, S / G)
    else:
        C = P = np.ones(n)
    w = np.eye(len(PIPELINES))[rng.integers(0, len(PIPELINES), n)]
    f = lambda a: jnp.asarray(a, jnp.float32)
    return {"seq_len": f(S), "batch": f(np.ones(n)), "tile": f(tile), "cubes": f(C), "pes": f(P), "w": f(w)}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_ahbm", description=__doc__.splitlines()[0],
                                 epilog="example: python -m experiments.bench_ahbm --n 65536 --repeats 3")
    ap.add_argument("--n", type=positive_int, default=1 << 20, help="configurations per vmapped call")
    ap.add_argument("--repeats", type=positive_int, default=5, help="timed calls after the warm-up")
    return ap


def run_cli(args: argparse.Namespace) -> None:
    hw = ahbm_sip()
    print(f"{args.n} configurations per call, median of {args.repeats} calls ({jax.devices()[0].platform})")
    print(f"{'case':12s} {'median s':>10s} {'configs/s':>14s}")
    for case in ("decode", "decode_sp", "prefill", "prefill_sp"):
        knobs = random_knobs(case, args.n)
        call = lambda knobs=knobs, case=case: sweep_batch(hw, knobs, case=case)
        med = time_repeats({case: call}, reps=args.repeats)[case].median_s
        print(f"{case:12s} {med:10.4f} {args.n / med:14.3e}")


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input is ``error: ...``, status 2."""
    return cli_main(build_parser(), argv, run_cli)


if __name__ == "__main__":
    sys.exit(main())
