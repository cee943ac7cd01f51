"""Command line: ``python -m costmodel.ahbm eval|tune --case ... --seq-len ... [--json]``.

eval: attention latency (us, one attention layer; and x the model's layers: attention only, no
projections / FFN), its bound (HBM, GEMM, MATH, CPU
issue or links), each resource's roofline and the breakdown of one config; ``--simulate`` adds
the SimPy event simulation's latency (refused past a size it can hold). tune: the gradient
tuner's best config, latency, bound, rooflines and discrete evaluations next to the exhaustive
search's.
"""

from __future__ import annotations

import argparse
import sys

from costmodel.ahbm.config import (
    CASES,
    IGNORED_DEFAULTS,
    MESHES,
    MODELS,
    PIPELINES,
    PLACEMENTS,
    REDUCES,
    AhbmConfig,
)
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.tune import METHODS
from costmodel.hardware import ahbm_sip
from costmodel.overrides import add_set_argument, apply_overrides, parse_overrides, settable_fields
from jaxref.validation import cli_main, dumps_strict, positive_int


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m costmodel.ahbm", description=__doc__.splitlines()[0],
                                allow_abbrev=False)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("eval", "tune"):
        s = sub.add_parser(name, allow_abbrev=False)
        s.add_argument("--case", required=True, choices=CASES)
        s.add_argument("--seq-len", type=positive_int, required=True)
        s.add_argument("--batch", type=positive_int, default=1)
        s.add_argument("--model", default="llama3_70b", choices=tuple(MODELS))
        s.add_argument("--reduce", default=None, choices=REDUCES, help="decode_sp only (default tree)")
        add_set_argument(s, hw="ahbm")
        s.add_argument("--hw", dest="hw_deprecated", action="append", default=[], metavar="FIELD=VALUE",
                       help=f"deprecated spelling of --set ahbm.FIELD=VALUE ({', '.join(settable_fields('ahbm'))})")
        s.add_argument("--json", action="store_true")
        s.add_argument("--placement", default=None, choices=PLACEMENTS,
                       help="decode_sp key placement (default round_robin; contiguous blocks are sized by --capacity)")
        s.add_argument("--capacity", type=positive_int, default=None,
                       help="decode_sp only: max context of the KV buffers (default S)")
        s.add_argument("--cube-mesh", default=None, choices=MESHES,
                       help="CUBE Group sub-mesh orientation (default wide; decode_sp and prefill_sp)")
        if name == "eval":
            s.add_argument("--tile", type=positive_int, default=128)
            s.add_argument("--cubes", type=positive_int, default=1)
            s.add_argument("--pes", type=positive_int, default=1)
            s.add_argument("--pipeline", default="opt3", choices=PIPELINES)
            s.add_argument("--queries", type=positive_int, default=1,
                           help="decode: query tokens per step (speculative / multi-token decode; default 1)")
            s.add_argument("--simulate", action="store_true", help="also run the SimPy event simulation")
        else:
            s.add_argument("--method", default="auto", choices=METHODS,
                           help="auto: exhaustive where the knob space is small (every case today), else descent")
    return p


def _hw(args: argparse.Namespace):
    if args.hw_deprecated:
        print("warning: --hw FIELD=VALUE is deprecated; use --set ahbm.FIELD=VALUE", file=sys.stderr)
    items = [*args.overrides, *args.hw_deprecated]
    return apply_overrides(ahbm_sip(), parse_overrides(items, default_hw="ahbm", hw="ahbm"))


def run(args: argparse.Namespace) -> dict:
    """The result of ``eval`` / ``tune`` for parsed arguments; raises ValueError on bad input."""
    hw = _hw(args)
    given = {"reduce": args.reduce, "placement": args.placement, "capacity": args.capacity,
             "cube_mesh": args.cube_mesh}
    # options the case has no use for are refused, even at their default value (they would do nothing)
    allowed = {"decode_sp": set(given), "prefill_sp": {"cube_mesh"}}.get(args.case, set())
    unused = [f"--{k.replace('_', '-')}" for k, v in given.items() if v is not None and k not in allowed]
    if unused:
        raise ValueError(f"{', '.join(unused)} has no effect on --case {args.case} (only decode_sp has a reduce, "
                         "a key placement and a KV capacity; decode and prefill run on one PE); drop it")
    prob = {"batch": args.batch, "model": args.model,
            **{k: (IGNORED_DEFAULTS[k] if v is None else v) for k, v in given.items()}}
    if args.command == "eval":
        cfg = AhbmConfig(case=args.case, seq_len=args.seq_len, tile=args.tile, cubes=args.cubes, pes=args.pes,
                         pipeline=args.pipeline, queries=args.queries, **prob)
        out = {"config": cfg.__dict__, "layers": cfg.layers, **evaluate(cfg, hw)}
        if args.simulate:
            from costmodel.ahbm.simulate import simulate
            try:
                out["simulated_latency_us"] = simulate(cfg, hw)["latency_us"]
            except ValueError as e:  # the simulation's own size limit (sim.MAX_PLAN_CELLS), named by its flag
                raise ValueError(f"--simulate: {e}") from None
        return out
    from costmodel.ahbm.tune import exhaustive, tune

    res = tune(args.case, args.seq_len, hw=hw, method=args.method, **prob)
    best, lat, n = (res.best, res.latency_us, res.evaluations) if res.method == "exhaustive" else \
        exhaustive(args.case, args.seq_len, hw=hw, **prob)
    ev = evaluate(res.best, hw)
    return {"best": res.best.__dict__, "latency_us": res.latency_us, "bound": ev["bound"],
            "rooflines_us": ev["rooflines_us"], "evaluations": res.evaluations,
            "gradient_steps": res.gradient_steps, "relaxed": res.relaxed, "method": res.method,
            "exhaustive": {"best": best.__dict__, "latency_us": lat, "evaluations": n}}


def _print(args: argparse.Namespace) -> int:
    out = run(args)
    text = dumps_strict(out, indent=2)  # also refuses a non-finite number in the text output
    if args.json:
        print(text)
    elif "exhaustive" in out:
        b, e = out["best"], out["exhaustive"]
        print(f"tuner ({out['method']}): tile={b['tile']} cubes={b['cubes']} pes={b['pes']} {b['pipeline']}  "
              f"{out['latency_us']:.3f} us  ({out['evaluations']} evaluations, {out['gradient_steps']} gradient steps)")
        print(f"  bound: {out['bound']}; rooflines (us): "
              + ", ".join(f"{k} {v:.4g}" for k, v in out["rooflines_us"].items()))
        eb = e["best"]
        print(f"exhaustive: tile={eb['tile']} cubes={eb['cubes']} pes={eb['pes']} {eb['pipeline']}  "
              f"{e['latency_us']:.3f} us  ({e['evaluations']} evaluations)")
    else:
        print(f"attention latency {out['latency_us']:.3f} us per layer, {out['model_us'] / 1e3:.3f} ms of attention "
              f"over the model's {out['layers']} layers (attention only: no projections, FFN or UCIe)")
        print(f"bound: {out['bound']} ({out['bound_fraction']:.0%} of the latency); rooflines (us): "
              + ", ".join(f"{k} {v:.4g}" for k, v in out["rooflines_us"].items()))
        for k, v in out["breakdown"].items():
            print(f"  {k:14s} {v:.4g}")
        if "simulated_latency_us" in out:
            print(f"simulated {out['simulated_latency_us']:.3f} us")
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 on success, 2 (``error: ...`` on stderr) on bad input."""
    return cli_main(_parser(), argv, _print)
