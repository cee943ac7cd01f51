"""Analytic AHBM model vs the event simulation on a grid of ragged S, placements, contention-heavy
reduces, every case and pipelining option: prints each point and the median / worst relative
difference per case and overall.

    python -m experiments.ahbm_sim_check [--quick] [--json PATH]

``compare(points)`` returns the rows (the study calls it); ``grid(quick)`` is the grid: S includes
non-powers of two (129, 1000, 3000, 8193, 12288), decode-SP round-robin and contiguous placement
(capacity S and 2 S), tree / all-to-all / all-reduce reduces up to C = 8, P = 8, wide and tall
sub-meshes, prefill to S = 32k, and three hardware points (the ADR defaults, an issue-bound CPU,
a slow CUBE NOC). opt2 is evaluated on a spec that has the ex_composite command.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time

from costmodel.ahbm.config import PIPELINES, AhbmConfig
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.simulate import simulate
from costmodel.hardware import ahbm_sip

RAGGED = (129, 1000, 3000, 8193, 12288)


def hardware() -> dict:
    """Named hardware points of the grid (all with the ex_composite command, so opt2 is legal)."""
    base = dataclasses.replace(ahbm_sip(), commands=("composite", "ex_composite"))
    return {"adr": base,
            "issue": dataclasses.replace(base, cpu_issue_s=5e-9, cpu_issue_composite_s=40e-9),
            "slow_noc": dataclasses.replace(base, cube_noc_bytes_per_s=8e9, ipcq_bytes_per_s=16e9)}


def grid(quick: bool = False) -> list[tuple[str, AhbmConfig]]:
    """(hardware name, config) points."""
    pts = []
    dec_S = (129, 3000, 8193) if quick else RAGGED + (65536, 1 << 20)
    for S in dec_S:
        for tile in ((128,) if quick else (64, 256)):
            pts += [("adr", AhbmConfig("decode", S, tile=tile, pipeline=p)) for p in PIPELINES]
    sp_S = (1000, 12288) if quick else (1000, 3000, 8193, 12288, 131072)
    combos = ((4, 8, "tree"), (8, 8, "all_reduce")) if quick else \
        ((2, 2, "tree"), (4, 8, "tree"), (8, 8, "tree"), (8, 4, "tree"), (4, 2, "all_to_all"),
         (4, 8, "all_reduce"), (8, 8, "all_reduce"))  # C <= 8: 8 kv heads x C fit the 4-SIP budget
    for S in sp_S:
        for C, P, red in combos:
            for p in (("opt3",) if quick else PIPELINES):
                pts.append(("adr", AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, pipeline=p, reduce=red)))
            pts.append(("adr", AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, reduce=red,
                                          placement="contiguous", capacity=2 * S)))
            if not quick:
                pts.append(("adr", AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, reduce=red,
                                              placement="contiguous")))
                pts.append(("slow_noc", AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, reduce=red)))
                if C == 8:
                    pts.append(("adr", AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, reduce=red,
                                                  cube_mesh="tall")))
    pre_S = (129, 1000) if quick else (129, 1000, 3000, 8193, 12288, 32768)
    for S in pre_S:
        for tile in ((32,) if quick else (32, 64)):
            pts += [("adr", AhbmConfig("prefill", S, tile=tile, pipeline=p)) for p in PIPELINES]
    ring_S = (1000, 8193) if quick else (1000, 3000, 8193, 12288, 32768)
    for S in ring_S:
        for P in ((4,) if quick else (2, 8)):
            pts += [("adr", AhbmConfig("prefill_sp", S, tile=64, cubes=8, pes=P, pipeline=p)) for p in PIPELINES]
            if not quick:
                pts.append(("slow_noc", AhbmConfig("prefill_sp", S, tile=64, cubes=8, pes=P)))
    if not quick:  # an issue-bound CPU: composites vs primitive ops
        for p in PIPELINES:
            pts += [("issue", AhbmConfig("decode", 8193, tile=64, pipeline=p)),
                    ("issue", AhbmConfig("decode_sp", 131072, tile=64, cubes=4, pes=8, pipeline=p)),
                    ("issue", AhbmConfig("prefill", 3000, tile=64, pipeline=p))]
    return pts


def compare(points, skipped: list | None = None, *, issue_order: bool = False) -> list[dict]:
    """One row per (hardware, config): analytic and simulated latency (us), relative difference
    (analytic - sim) / sim, simulation seconds, and the simulation's bounds where it has them.
    ``issue_order`` also simulates with the GEMM engine serving composites in issue order
    (``sim_issue_us``, ``rel_diff_issue``; the spec leaves that arbitration open).
    Points the model rejects as infeasible (TCM, SIP budget) go to ``skipped`` with the reason."""
    hws = hardware()
    rows = []
    for name, cfg in points:
        hw = hws[name]
        try:
            a = evaluate(cfg, hw)["latency_us"]
        except ValueError as e:
            if skipped is not None:
                skipped.append((name, cfg, str(e)))
            continue
        t0 = time.perf_counter()
        s = simulate(cfg, hw)
        row = {"hw": name, "config": cfg, "analytic_us": a, "sim_us": s["latency_us"],
               "sim_lower_us": s.get("latency_lower_us", s["latency_us"]),
               "rel_diff": (a - s["latency_us"]) / s["latency_us"], "sim_s": time.perf_counter() - t0}
        if issue_order:
            si = simulate(cfg, hw, gemm_order="issue")["latency_us"]
            row.update(sim_issue_us=si, rel_diff_issue=(a - si) / si)
        rows.append(row)
    return rows


def describe(cfg: AhbmConfig) -> str:
    out = f"{cfg.case} S={cfg.seq_len} tile={cfg.tile} {cfg.pipeline}"
    if cfg.case == "decode_sp":
        out += f" C={cfg.cubes} P={cfg.pes} {cfg.reduce} {cfg.placement}"
        out += f" cap={cfg.capacity}" if cfg.capacity else ""
        out += " tall" if cfg.cube_mesh == "tall" else ""
    elif cfg.case == "prefill_sp":
        out += f" C={cfg.cubes} P={cfg.pes}"
    return out


def summary(rows: list[dict], key: str = "rel_diff") -> dict:
    """Median and worst |relative difference| (``key``), overall and per case."""
    def stats(rs):
        errs = [abs(r[key]) for r in rs]
        worst = max(rs, key=lambda r: abs(r[key]))
        return {"points": len(rs), "median": statistics.median(errs), "worst": max(errs),
                "worst_point": f"[{worst['hw']}] {describe(worst['config'])}"}

    out = {"all": stats(rows)}
    for case in sorted({r["config"].case for r in rows}):
        out[case] = stats([r for r in rows if r["config"].case == case])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small grid (seconds)")
    ap.add_argument("--json", help="write the rows and the summary to this file")
    ap.add_argument("--issue-order", action="store_true",
                    help="also simulate with the GEMM engine serving composites in issue order")
    args = ap.parse_args(argv)
    skipped = []
    rows = compare(grid(args.quick), skipped, issue_order=args.issue_order)
    extra = f" {'sim_issue_us':>12s} {'diff':>8s}" if args.issue_order else ""
    print(f"{'hw':8s} {'point':64s} {'analytic_us':>12s} {'sim_us':>12s} {'diff':>8s}{extra}")
    for r in rows:
        extra = f" {r['sim_issue_us']:12.3f} {r['rel_diff_issue']:+8.2%}" if args.issue_order else ""
        print(f"{r['hw']:8s} {describe(r['config']):64s} {r['analytic_us']:12.3f} {r['sim_us']:12.3f} "
              f"{r['rel_diff']:+8.2%}{extra}")
    summ = summary(rows)
    for title, key in (("GEMM sub-tiles served as operands land (the simulation's default)", "rel_diff"),
                       ("GEMM engine in composite issue order", "rel_diff_issue"))[:2 if args.issue_order else 1]:
        print(f"\nanalytic vs simulation, {title}:")
        for k, v in summary(rows, key).items():
            print(f"{k:10s} {v['points']:4d} points  median |diff| {v['median']:.2%}  worst {v['worst']:.2%}  "
                  f"({v['worst_point']})")
    print(f"simulation time: {sum(r['sim_s'] for r in rows):.1f} s; {len(skipped)} points infeasible in the "
          "model, skipped:")
    for name, cfg, why in skipped:
        print(f"  [{name}] {describe(cfg)}: {why[:100]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summ, "rows": [{**r, "config": dataclasses.asdict(r["config"])} for r in rows]},
                      f, indent=1)


if __name__ == "__main__":
    main()
