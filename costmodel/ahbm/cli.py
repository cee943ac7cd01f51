"""Command line: ``python -m costmodel.ahbm eval|tune --case ... --seq-len ... [--json]``.

eval: latency (us, one attention layer and the model's layers), its bound (HBM, GEMM, MATH, CPU
issue or links), each resource's roofline and the breakdown of one config; ``--simulate`` adds
the SimPy event simulation's latency (refused past a size it can hold). tune: the gradient
tuner's best config, latency, bound, rooflines and discrete evaluations next to the exhaustive
search's.
"""

from __future__ import annotations

import argparse
import json
import sys

from costmodel.ahbm.config import CASES, MESHES, MODELS, PIPELINES, PLACEMENTS, REDUCES, AhbmConfig
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.sensitivity import with_overrides
from costmodel.hardware import ahbm_sip, float_fields

SIMULATE_MAX_TILES = 2e6  # event-simulated tiles (a SimPy process step each)
SIMULATE_MAX_KEYS = 1 << 22  # the plans hold per-key arrays


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m costmodel.ahbm", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("eval", "tune"):
        s = sub.add_parser(name)
        s.add_argument("--case", required=True, choices=CASES)
        s.add_argument("--seq-len", type=int, required=True)
        s.add_argument("--batch", type=int, default=1)
        s.add_argument("--model", default="llama3_70b", choices=tuple(MODELS))
        s.add_argument("--reduce", default="tree", choices=REDUCES)
        s.add_argument("--hw", action="append", default=[], metavar="FIELD=VALUE",
                       help=f"override an AHBM field ({', '.join(float_fields(ahbm_sip()))})")
        s.add_argument("--json", action="store_true")
        s.add_argument("--placement", default="round_robin", choices=PLACEMENTS,
                       help="decode_sp key placement (contiguous blocks are sized by --capacity)")
        s.add_argument("--capacity", type=int, default=None, help="max context of the KV buffers (default S)")
        s.add_argument("--cube-mesh", default="wide", choices=MESHES, help="CUBE Group sub-mesh orientation")
        if name == "eval":
            s.add_argument("--tile", type=int, default=128)
            s.add_argument("--cubes", type=int, default=1)
            s.add_argument("--pes", type=int, default=1)
            s.add_argument("--pipeline", default="opt3", choices=PIPELINES)
            s.add_argument("--simulate", action="store_true", help="also run the SimPy event simulation")
    return p


def _hw(items: list[str]):
    over = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--hw {item!r} must be FIELD=VALUE")
        try:
            over["ahbm." + name] = float(value)
        except ValueError:
            raise ValueError(f"--hw {item!r}: value {value!r} is not a number") from None
    return with_overrides(ahbm_sip(), over)


def run(argv: list[str]) -> dict:
    args = _parser().parse_args(argv)
    hw = _hw(args.hw)
    prob = {"batch": args.batch, "model": args.model, "reduce": args.reduce, "placement": args.placement,
            "capacity": args.capacity, "cube_mesh": args.cube_mesh}
    if args.command == "eval":
        cfg = AhbmConfig(case=args.case, seq_len=args.seq_len, tile=args.tile, cubes=args.cubes, pes=args.pes,
                         pipeline=args.pipeline, **prob)
        out = {"config": cfg.__dict__, **evaluate(cfg, hw)}
        if args.simulate:
            lanes = cfg.ranks if cfg.case == "decode_sp" else (cfg.cubes * cfg.pes if cfg.case == "prefill_sp" else 1)
            n = out["breakdown"]["tiles"] * lanes
            if n > SIMULATE_MAX_TILES or cfg.seq_len > SIMULATE_MAX_KEYS:
                raise ValueError(f"--simulate: seq_len={cfg.seq_len} means about {n:.3g} simulated tiles; the event "
                                 f"simulation takes at most {SIMULATE_MAX_TILES:.0e} tiles and "
                                 f"{SIMULATE_MAX_KEYS} keys (its plans hold every key); drop --simulate or use a "
                                 "smaller seq_len")
            from costmodel.ahbm.simulate import simulate
            out["simulated_latency_us"] = simulate(cfg, hw)["latency_us"]
        return out
    from costmodel.ahbm.tune import exhaustive, tune
    res = tune(args.case, args.seq_len, hw=hw, **prob)
    best, lat, n = exhaustive(args.case, args.seq_len, hw=hw, **prob)
    ev = evaluate(res.best, hw)
    return {"best": res.best.__dict__, "latency_us": res.latency_us, "bound": ev["bound"],
            "rooflines_us": ev["rooflines_us"], "evaluations": res.evaluations,
            "gradient_steps": res.gradient_steps, "relaxed": res.relaxed,
            "exhaustive": {"best": best.__dict__, "latency_us": lat, "evaluations": n}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        out = run(argv)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if "--json" in argv:
        print(json.dumps(out, indent=2))
    elif "exhaustive" in out:
        b, e = out["best"], out["exhaustive"]
        print(f"tuner: tile={b['tile']} cubes={b['cubes']} pes={b['pes']} {b['pipeline']}  "
              f"{out['latency_us']:.3f} us  ({out['evaluations']} evaluations, {out['gradient_steps']} gradient steps)")
        print(f"  bound: {out['bound']}; rooflines (us): "
              + ", ".join(f"{k} {v:.4g}" for k, v in out["rooflines_us"].items()))
        eb = e["best"]
        print(f"exhaustive: tile={eb['tile']} cubes={eb['cubes']} pes={eb['pes']} {eb['pipeline']}  "
              f"{e['latency_us']:.3f} us  ({e['evaluations']} evaluations)")
    else:
        print(f"latency {out['latency_us']:.3f} us per layer, {out['model_us'] / 1e3:.3f} ms for the model's layers")
        print(f"bound: {out['bound']} ({out['bound_fraction']:.0%} of the latency); rooflines (us): "
              + ", ".join(f"{k} {v:.4g}" for k, v in out["rooflines_us"].items()))
        for k, v in out["breakdown"].items():
            print(f"  {k:14s} {v:.4g}")
        if "simulated_latency_us" in out:
            print(f"simulated {out['simulated_latency_us']:.3f} us")
    return 0
