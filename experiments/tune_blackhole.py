"""Gradient tuning of the Blackhole graph's integer knobs vs exhaustive enumeration.

    python -m experiments.tune_blackhole [--steps 300]

For each scenario (decode / standard SDPA, bf16 / bfp8 cache) it starts from ttnn's default
matmul heuristic and the port's attention chunks, runs gradient descent on the relaxed knobs
(in0_block_w, per_core_N per matmul; k_chunk; q_chunk), projects to valid configs, and compares
with the exhaustive per-op search over every valid config (exact model). Prints the chosen
configs, the predicted times, the number of model evaluations and wall time of each method.
"""

from __future__ import annotations

import argparse
import time

from costmodel.blackhole import MATMULS, BlackholeConfig, evaluate, load_fitted, tune
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.validation import positive_int

CFG = ExpertConfig.alpamayo_tt()


def scenarios():
    start = BlackholeConfig.port(CFG, matmuls="default")
    return [
        ("decode, bf16 cache", start),
        ("decode, bfp8 cache", start.replace(kv_dtype="bfp8")),
        ("standard GQA, bf16 cache", start.replace(attn_mode="standard", mask_dtype="bfp4")),
        ("standard folded, bf16 cache", start.replace(attn_mode="standard", fold_heads=True, mask_dtype="bf16")),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=positive_int, default=300)
    args = ap.parse_args(argv)
    hw, fit = blackhole_p150a(), load_fitted()
    port_tuned = evaluate(hw, fit, BlackholeConfig.port(CFG), cfg=CFG)["step_ms"]
    print(f"reference: the port's hand-tuned configs, decode bf16: step {port_tuned:.2f} ms\n")
    for label, start in scenarios():
        t0 = time.perf_counter()
        ex = tune.exhaustive(hw, fit, start, cfg=CFG)
        t_ex = time.perf_counter() - t0
        t0 = time.perf_counter()
        gr = tune.gradient_tune(hw, fit, start, cfg=CFG, steps=args.steps)
        t_gr = time.perf_counter() - t0
        s0 = evaluate(hw, fit, start, cfg=CFG)["step_ms"]
        s_ex = evaluate(hw, fit, tune.apply_configs(start, ex["per_op"]), cfg=CFG)["step_ms"]
        s_gr = evaluate(hw, fit, tune.apply_configs(start, gr["per_op"]), cfg=CFG)["step_ms"]
        print(f"== {label}")
        print(f"  {'op':10s} {'start':>12s} {'relaxed (grad)':>18s} {'projected':>12s} {'us':>8s} "
              f"{'exhaustive':>12s} {'us':>8s} {'valid':>6s}")
        for op in (*MATMULS, "attention"):
            g, e = gr["per_op"][op], ex["per_op"][op]
            rel = f"({g['relaxed'][0]:.1f}, {g['relaxed'][1]:.2f})"
            print(f"  {op:10s} {tuple(int(v) for v in g['start'])!s:>12s} {rel:>18s} {g['config']!s:>12s} "
                  f"{g['us']:8.1f} {e['config']!s:>12s} {e['us']:8.1f} {e['n_valid']:6d}")
        print(f"  step: start {s0:.2f} ms -> gradient {s_gr:.3f} ms, exhaustive {s_ex:.3f} ms "
              f"(gradient within {100 * (s_gr / s_ex - 1):.2f}% of exhaustive)")
        print(f"  evaluations: gradient {gr['gradient_steps']} relaxed value+grad steps + "
              f"{gr['evaluations'] - gr['gradient_steps']} discrete candidates = {gr['evaluations']}; "
              f"exhaustive {ex['evaluations']} discrete (joint space {ex['joint_configs']:.3g} configs)")
        print(f"  wall: gradient {t_gr:.1f} s, exhaustive {t_ex:.1f} s (both incl. jit compile)\n")


if __name__ == "__main__":
    main()
