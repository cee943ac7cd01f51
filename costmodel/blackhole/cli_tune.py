"""``python -m costmodel.blackhole tune``: the model's tuner from any what-if setting, per op.

    python -m costmodel.blackhole tune --matmuls default [--kv-dtype bfp8] [--attn-mode standard] [--steps 300]

``tune`` takes the what-if flags (``python -m costmodel.blackhole --help``) for its starting setting,
runs gradient descent on the relaxed knobs (in0_block_w, per_core_N per matmul; k_chunk; q_chunk),
projects to valid configs and compares with the exhaustive per-op search over every valid config.
The report's Blackhole section (``python -m experiments.report --sections blackhole``) shows the
summary; this prints every op. (The held-out check of every row is ``... validate``:
``costmodel.blackhole.holdout.validate_main``.)
"""

from __future__ import annotations

import argparse

from costmodel.blackhole import fit as fitting
from costmodel.blackhole import knob_search as tuning
from costmodel.blackhole.graph import evaluate
from costmodel.blackhole.params import CALIBRATION_PATH
from costmodel.blackhole.port import MATMULS
from experiments.timing import time_call
from jaxref.validation import cli_run, positive_int


def tune(argv: list[str], p: argparse.ArgumentParser, config_from_args) -> dict:
    """``tune`` subcommand: gradient tuning from the setting the what-if flags give vs exhaustive search.

    ``p`` is the what-if parser and ``config_from_args`` its (hardware, geometry, setting) builder
    (``costmodel.blackhole.cli``), so the start setting takes exactly the what-if flags.
    """
    p.prog = "python -m costmodel.blackhole tune"
    p.description = ("Gradient tuning of the matmul / SDPA knobs from the setting given by the what-if flags "
                     "(e.g. --matmuls default: ttnn's heuristic) vs exhaustive per-op search over valid configs.")
    p.epilog = "example: python -m costmodel.blackhole tune --matmuls default --kv-dtype bfp8"
    p.add_argument("--steps", type=positive_int, default=300, help="gradient steps on the relaxed knobs")
    return cli_run(p, argv, lambda args: _tune(args, p, config_from_args))


def _tune(args: argparse.Namespace, p: argparse.ArgumentParser, config_from_args) -> dict:
    unused = [flag for flag, v in (("--vs", args.vs is not None), ("--draws", args.draws), ("--emit-csv", args.emit_csv),
                                   ("--json", args.json)) if v]
    if unused:
        p.error(f"{', '.join(unused)}: what-if output flags, not used by tune (expected setting flags only)")
    fit = fitting.load_calibration(CALIBRATION_PATH if args.calibration is None else args.calibration).params
    try:
        hw, cfg, start = config_from_args(args)
        evaluate(hw, fit, start, cfg=cfg)  # the discrete evaluator validates the start setting
    except ValueError as e:
        p.error(str(e))
    ex, t_ex, _ = time_call(tuning.exhaustive, hw, fit, start, cfg=cfg)
    gr, t_gr, _ = time_call(tuning.gradient_tune, hw, fit, start, cfg=cfg, steps=args.steps)
    step = {k: evaluate(hw, fit, bc, cfg=cfg)["step_ms"] for k, bc in
            (("start", start), ("gradient", tuning.apply_configs(start, gr["per_op"])),
             ("exhaustive", tuning.apply_configs(start, ex["per_op"])))}
    print(f"  {'op':10s} {'start':>12s} {'relaxed (grad)':>18s} {'projected':>12s} {'us':>8s} "
          f"{'exhaustive':>12s} {'us':>8s} {'valid':>6s}")
    for op in (*MATMULS, "attention"):
        g, e = gr["per_op"][op], ex["per_op"][op]
        rel = f"({g['relaxed'][0]:.1f}, {g['relaxed'][1]:.2f})"
        print(f"  {op:10s} {tuple(int(v) for v in g['start'])!s:>12s} {rel:>18s} {g['config']!s:>12s} "
              f"{g['us']:8.1f} {e['config']!s:>12s} {e['us']:8.1f} {e['n_valid']:6d}")
    print(f"  step: start {step['start']:.2f} ms -> gradient {step['gradient']:.3f} ms, exhaustive "
          f"{step['exhaustive']:.3f} ms (gradient within {100 * (step['gradient'] / step['exhaustive'] - 1):.2f}% "
          "of exhaustive)")
    print(f"  evaluations: gradient {gr['gradient_steps']} relaxed value+grad steps + "
          f"{gr['evaluations'] - gr['gradient_steps']} discrete candidates = {gr['evaluations']}; "
          f"exhaustive {ex['evaluations']} discrete (joint space {ex['joint_configs']:.3g} configs)")
    print(f"  wall: gradient {t_gr:.1f} s, exhaustive {t_ex:.1f} s (both incl. jit compile)")
    return {"step_ms": step, "gradient": gr, "exhaustive": ex}
