"""Analytic AHBM model vs the event simulation: the grid of ``costmodel.ahbm.sim_check`` (ragged S,
placements, contention-heavy reduces, every case and option) and random hardware across regimes;
prints each point, the median / worst difference per case and per regime, and the points below a
roofline.

    python -m experiments.ahbm_sim_check --quick                 # the quick grid (seconds)
    python -m experiments.ahbm_sim_check --random 200 --json r.json   # 200 random hardware points too
    python -m experiments.ahbm_sim_check --quick --links 200 --seed 4  # + the layer's collectives at 200 link rates
"""

from __future__ import annotations

import argparse
import dataclasses

from costmodel.ahbm.sim_check import (
    collective_summary,
    compare,
    compare_collectives,
    describe,
    grid,
    random_link_points,
    random_points,
    summary,
)
from jaxref.validation import atomic_write_text, cli_main, dumps_strict, nonnegative_int, output_file


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.ahbm_sim_check", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    ap.add_argument("--quick", action="store_true", help="a small grid (seconds)")
    ap.add_argument("--random", type=nonnegative_int, default=0, metavar="N",
                    help="also N random hardware points across regimes (default 0)")
    ap.add_argument("--links", type=nonnegative_int, default=0, metavar="N",
                    help="also the decoder layer's collectives at N random link-rate points (UCIe 0.25-4x and "
                         "1-100 ns, CUBE NOC 0.25-4x; default 0)")
    ap.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the random points")
    ap.add_argument("--json", type=output_file, metavar="FILE",
                    help="write the rows and the summaries to this file (strict JSON)")
    ap.add_argument("--issue-order", action="store_true",
                    help="also simulate with the GEMM engine serving composites in issue order")
    return ap


def _print_summary(title: str, summ: dict) -> None:
    print(f"\n{title}:")
    for k, v in summ.items():
        print(f"{k:10s} {v['points']:4d} points  median |diff| {v['median']:.2%}  worst {v['worst']:.2%}  "
              f"below roofline: model {v['model_below_roofline']}, sim {v['sim_below_roofline']}  "
              f"({v['worst_point']})")


def _row_json(r: dict) -> dict:
    return {**r, "config": dataclasses.asdict(r["config"])}


def run(args: argparse.Namespace) -> int:
    skipped = []
    rows = compare(grid(args.quick), skipped, issue_order=args.issue_order)
    extra = f" {'sim_issue_us':>12s} {'diff':>8s}" if args.issue_order else ""
    print(f"{'hw':12s} {'point':64s} {'analytic_us':>12s} {'sim_us':>12s} {'diff':>8s}{extra}")
    for r in rows:
        extra = f" {r['sim_issue_us']:12.3f} {r['rel_diff_issue']:+8.2%}" if args.issue_order else ""
        print(f"{r['hw']:12s} {describe(r['config']):64s} {r['analytic_us']:12.3f} {r['sim_us']:12.3f} "
              f"{r['rel_diff']:+8.2%}{extra}")
    out = {"grid": summary(rows)}
    _print_summary("analytic vs simulation on the grid, per case", out["grid"])
    if args.issue_order:
        _print_summary("GEMM engine in composite issue order", summary(rows, "rel_diff_issue"))
    rnd = []
    if args.random:
        hws, pts = random_points(args.random, args.seed)
        rnd = compare(pts, skipped, hws=hws)
        for r in rnd:
            print(f"{r['hw']:12s} {describe(r['config']):64s} {r['analytic_us']:12.3f} {r['sim_us']:12.3f} "
                  f"{r['rel_diff']:+8.2%} {r['bound']}")
        out["random_by_bound"] = summary(rnd, by="bound")
        _print_summary(f"{len(rnd)} random hardware points, per bound (the model's binding resource)",
                       out["random_by_bound"])
    coll = []
    if args.links:
        coll = compare_collectives(random_link_points(args.links, args.seed))
        out["links_by_collective"] = collective_summary(coll)
        print(f"\nthe layer's collectives at {args.links} random link-rate points (seed {args.seed}), model vs "
              "simulation:")
        for k, v in out["links_by_collective"].items():
            print(f"{k:44s} {v['parts']:4d} parts  median |diff| {v['median']:.2%}  worst {v['worst']:+.2%}  "
                  f">= 10% off: {v['off_10_percent']}  ({v['worst_point']})")
    print(f"\nsimulation time: {sum(r['sim_s'] for r in rows + rnd):.1f} s; {len(skipped)} points infeasible "
          "in the model, skipped:")
    for name, cfg, why in skipped:
        print(f"  [{name}] {describe(cfg)}: {why[:100]}")
    if args.json:
        atomic_write_text(args.json, dumps_strict({"summary": out, "rows": [_row_json(r) for r in rows],
                                                   "random_rows": [_row_json(r) for r in rnd],
                                                   "link_rows": [_row_json(r) for r in coll]}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry point: 0 on success, 2 (``error: ...`` on stderr) on bad input."""
    return cli_main(_parser(), argv, run)


if __name__ == "__main__":
    raise SystemExit(main())
