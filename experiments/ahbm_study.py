"""AHBM attention-kernel study (ADR-0060): model vs event simulation, tuner vs exhaustive search,
optimal TILE / C vs context, pipelining options vs CPU issue cost, reduce kinds, elasticities,
and the ring's communication-hiding crossover.

    python -m experiments.ahbm_study [--quick] [--out DIR]

``report_section(out_dir, quick=..., overrides=...)`` is the main report's entry point.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import statistics
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from costmodel.ahbm.config import PIPELINES, AhbmConfig
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.sensitivity import elasticities
from costmodel.ahbm.simulate import simulate
from costmodel.ahbm.tune import exhaustive, stack_knobs, sweep_latency, tune
from costmodel.hardware import ahbm_sip
from costmodel.overrides import apply_overrides
from experiments.report import plots
from experiments.report.tables import md_table
from jaxref.validation import output_dir

K = 1024


def sim_grid(quick: bool) -> list[AhbmConfig]:
    """(case, S, C, P, TILE, pipelining) points simulated event by event. Prefill points stop at
    S = 8k: its schedule lists every (q block, tile) pair (S^2 / TILE^2 / 2 of them)."""
    dec_S = (K, 64 * K) if quick else (K, 16 * K, 256 * K, 1024 * K)
    out = []
    for S in dec_S:
        for tile in ((128,) if quick else (64, 256)):
            out += [AhbmConfig("decode", S, tile=tile, pipeline=p) for p in PIPELINES]
        for C, P in (((4, 8),) if quick else ((2, 2), (4, 8), (16, 8))):
            out += [AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, pipeline=p) for p in PIPELINES]
    for S in ((K,) if quick else (K, 4 * K)):
        for tile in ((64,) if quick else (32, 64)):
            out += [AhbmConfig("prefill", S, tile=tile, pipeline=p) for p in PIPELINES]
    for S in ((K,) if quick else (K, 4 * K, 8 * K)):
        for P in ((4,) if quick else (2, 8)):
            out += [AhbmConfig("prefill_sp", S, tile=64, cubes=8, pes=P, pipeline=p) for p in PIPELINES]
    return out


def model_vs_sim(hw, quick):
    rows = []
    for cfg in sim_grid(quick):
        a = evaluate(cfg, hw)["latency_us"]
        s = simulate(cfg, hw)["latency_us"]
        rows.append((cfg, a, s, abs(a - s) / s))
    return rows


def tuner_table(hw, quick):
    rows = []
    grid = {"decode": (K, 32 * K, 1024 * K), "decode_sp": (K, 8 * K, 64 * K, 1024 * K),
            "prefill": (K, 32 * K, 1024 * K), "prefill_sp": (K, 8 * K, 128 * K, 1024 * K)}
    if quick:
        grid = {"decode_sp": (K, 1024 * K)}
    for case, Ss in grid.items():
        for S in Ss:
            r = tune(case, S, hw=hw)
            best, lat, n = exhaustive(case, S, hw=hw)
            rows.append((case, S, r, best, lat, n))
    return rows


def optimum_vs_s(hw, quick):
    Ss = [K * 4**k for k in range(6)] if not quick else [K, 32 * K, 1024 * K]
    out = {}
    for case in ("decode_sp", "prefill_sp"):
        out[case] = [(S, *exhaustive(case, S, hw=hw)) for S in Ss]
    return out


def issue_cost_table(hw, S=128 * K):
    costs = (0.0, 2e-9, 5e-9, 10e-9, 20e-9, 50e-9)
    return costs, {p: [evaluate(AhbmConfig("decode_sp", S, tile=64, cubes=4, pes=8, pipeline=p),
                                dataclasses.replace(hw, cpu_issue_s=c))["latency_us"] for c in costs]
                   for p in PIPELINES}


def reduce_table(hw):
    combos = ((1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (16, 4))
    return combos, {r: [evaluate(AhbmConfig("decode_sp", 1024, tile=128, cubes=C, pes=P, reduce=r), hw)
                        ["breakdown"]["reduce_us"] for C, P in combos] for r in ("tree", "all_to_all", "all_reduce")}


def ring_crossover(hw, P=8, tile=32):
    """Ring communication hiding. Per step a CUBE folds its query rows against a block of B = S / C
    keys while the next block (4 B d bytes) crosses the link (BW). Under causal masking the
    lightest non-empty step folds about B rows (4 B^2 d FLOP at rate F), so the ring hides its
    transfers iff B >= F / BW. The model's crossover: the smallest S whose latency is within 1%
    of the same ring with an unlimited link, for three link bandwidths; F is the CUBE's achieved
    GEMM rate in the model (causal FLOP of one head / latency with the unlimited link)."""
    C = AhbmConfig("prefill_sp", 8 * tile, tile=tile, cubes=8).cubes
    S = np.arange(1, 257) * C * tile
    knobs = stack_knobs([AhbmConfig("prefill_sp", int(s), tile=tile, cubes=C, pes=P) for s in S])
    free, _ = sweep_latency(dataclasses.replace(hw, ucie_bytes_per_s=1e18), knobs, case="prefill_sp")
    free = np.asarray(free)
    d = AhbmConfig("prefill_sp", int(S[0]), tile=tile, cubes=C).geometry.head_dim
    rows = []
    for bw in (hw.ucie_bytes_per_s / 64, hw.ucie_bytes_per_s / 16, hw.ucie_bytes_per_s / 8):
        lat, _ = sweep_latency(dataclasses.replace(hw, ucie_bytes_per_s=bw), knobs, case="prefill_sp")
        hidden = np.asarray(lat) <= 1.01 * free
        idx = next((i for i in range(len(S)) if hidden[i:].all()), None)
        found = int(S[idx]) if idx is not None else None
        i = idx if idx is not None else len(S) - 1
        f_eff = 4 * S[i] * (S[i] + 1) / 2 * d / (free[i] * 1e-6)  # FLOP/s, causal, one head
        rows.append((float(bw), float(f_eff) / float(bw), found))
    return rows


def elasticity_table(hw, quick):
    pts = [AhbmConfig("decode", 32 * K, tile=128, pipeline="opt3"),
           AhbmConfig("decode_sp", K, tile=64, cubes=4, pes=8), AhbmConfig("decode_sp", 1024 * K, tile=64, cubes=16, pes=8),
           AhbmConfig("prefill", 8 * K, tile=64), AhbmConfig("prefill_sp", 8 * K, tile=64, cubes=8, pes=8)]
    if not quick:
        pts += [AhbmConfig("decode", K, tile=128), AhbmConfig("decode_sp", 32 * K, tile=64, cubes=16, pes=8),
                AhbmConfig("prefill_sp", 128 * K, tile=128, cubes=8, pes=8)]
    return [(cfg, elasticities(cfg, hw)) for cfg in pts]


def _fmt_cfg(c: AhbmConfig) -> str:
    return f"TILE {c.tile}, C {c.cubes}, P {c.pes}, {c.pipeline}"


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> dict:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hw = apply_overrides(ahbm_sip(), overrides)
    md, res, figs = [], {}, []

    sims = model_vs_sim(hw, quick)
    errs = [e for *_, e in sims]
    worst = max(sims, key=lambda r: r[3])
    res["sim_points"] = len(sims)
    res["sim_median_rel_diff"] = statistics.median(errs)
    res["sim_worst_rel_diff"] = max(errs)
    md.append("### Analytic model vs SimPy event simulation\n")
    md.append(f"{len(sims)} points (decode S 1k..1M, prefill S <= 8k): median relative difference "
              f"{statistics.median(errs):.3%}, worst {max(errs):.3%} ({worst[0].case}, S {worst[0].seq_len}, "
              f"{_fmt_cfg(worst[0])}); opt1 / opt3 are exact closed forms of the simulated rules, opt2's steady "
              "period is a max of cycles.\n")
    fig, ax = plt.subplots(figsize=(5, 4))
    for p, m in zip(PIPELINES, "os^"):
        xs = [s for c, a, s, _ in sims if c.pipeline == p]
        ys = [a for c, a, s, _ in sims if c.pipeline == p]
        ax.loglog(xs, ys, m, label=p, alpha=0.7)
    lo, hi = min(s for _, _, s, _ in sims), max(s for _, _, s, _ in sims)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.5)
    ax.set_xlabel("event simulation (us)")
    ax.set_ylabel("analytic model (us)")
    ax.legend()
    figs.append(plots.save(fig, out_dir, "ahbm_model_vs_sim.png"))
    md.append("![model vs simulation](ahbm_model_vs_sim.png)\n")

    md.append("### Gradient tuner vs exhaustive search\n")
    gaps, ratios, rows = [], [], []
    for case, S, r, best, lat, n in tuner_table(hw, quick):
        gap = r.latency_us / lat - 1
        gaps.append(gap)
        ratios.append(n / r.evaluations)
        rows.append([case, S, _fmt_cfg(r.best), f"{r.latency_us:.4g}", r.evaluations, _fmt_cfg(best), f"{lat:.4g}",
                     n, f"{gap:+.2%}"])
    md.append(md_table(["case", "S", "tuner config", "tuner us", "evals", "exhaustive config", "exhaustive us",
                        "evals", "gap"], rows))
    res["tuner_worst_gap"] = max(gaps)
    res["tuner_min_eval_ratio"] = min(ratios)
    md.append(f"\nWorst gap {max(gaps):+.2%}; the tuner uses at least {min(ratios):.0f}x fewer discrete evaluations "
              "(plus its relaxed gradient steps).\n")

    opt = optimum_vs_s(hw, quick)
    md.append("### Optimal configuration vs context S (exhaustive)\n")
    md.append(md_table(["S", "decode-SP optimum", "us", "prefill-SP optimum", "us"],
                       [[S, _fmt_cfg(bd), f"{ld:.4g}", _fmt_cfg(bp), f"{lp:.4g}"]
                        for (S, bd, ld, _), (_, bp, lp, _) in zip(opt["decode_sp"], opt["prefill_sp"])]))
    G = AhbmConfig("decode", 1024).geometry.group
    cross = next((S for S, b, _, _ in opt["decode_sp"] if b.cubes >= G), None)
    res["decode_c_reaches_prefill_c_at_S"] = cross
    md.append(f"\nPrefill-SP's C is G = {G} (head-parallel); decode-SP's optimal C reaches it at S = {cross}.\n")
    fig, ax = plt.subplots(figsize=(5, 3.5))
    Ss = [S for S, *_ in opt["decode_sp"]]
    ax.semilogx(Ss, [b.cubes * b.pes for _, b, _, _ in opt["decode_sp"]], "o-", label="decode-SP ranks C*P")
    ax.semilogx(Ss, [b.tile for _, b, _, _ in opt["decode_sp"]], "s--", label="decode-SP TILE")
    ax.semilogx(Ss, [b.tile for _, b, _, _ in opt["prefill_sp"]], "^:", label="prefill-SP TILE")
    ax.set_xlabel("context S")
    ax.legend()
    figs.append(plots.save(fig, out_dir, "ahbm_optimum_vs_s.png"))
    md.append("![optimum vs S](ahbm_optimum_vs_s.png)\n")

    costs, tab = issue_cost_table(hw)
    md.append("### Pipelining options vs per-op CPU issue cost (decode-SP, S 128k, TILE 64, C 4, P 8)\n")
    md.append(md_table(["issue cost (ns)", *PIPELINES],
                       [[f"{c * 1e9:g}", *(f"{tab[p][i]:.3f}" for p in PIPELINES)] for i, c in enumerate(costs)]))
    res["opt2_over_opt3_at_max_issue"] = tab["opt2"][-1] / tab["opt3"][-1]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for p in PIPELINES:
        ax.plot([c * 1e9 for c in costs], tab[p], "o-", label=p)
    ax.set_xlabel("CPU issue cost per op (ns)")
    ax.set_ylabel("latency (us)")
    ax.legend()
    figs.append(plots.save(fig, out_dir, "ahbm_pipelining.png"))
    md.append("\n![pipelining](ahbm_pipelining.png)\n")

    combos, red = reduce_table(hw)
    md.append("### Decode-SP reduce: reduce-to-root vs fan-out vs all-reduce (us, S 1k)\n")
    kinds = ("tree", "all_to_all", "all_reduce")
    md.append(md_table(["C x P", *kinds],
                       [[f"{C} x {P}", *(f"{red[k][i]:.3f}" for k in kinds)] for i, (C, P) in enumerate(combos)]))

    md.append("\n### Ring communication hiding (prefill-SP, P 8, TILE 32)\n")
    md.append("Hiding condition: block tokens S/C >= F / BW (F: the CUBE's achieved GEMM FLOP rate, BW: the "
              "link). Model crossover: smallest S within 1% of the same ring with an unlimited link.\n")
    cr = ring_crossover(hw)
    md.append(md_table(["link B/s", "formula F/BW (tokens)", "model crossover S", "model block tokens S/C"],
                       [[f"{bw:.3g}", f"{f:.0f}", S, S // 8 if S else None] for bw, f, S in cr]))
    res["ring_crossover"] = [{"link_bytes_per_s": bw, "formula_tokens": f, "model_S": S} for bw, f, S in cr]

    md.append("\n### Hardware elasticities d log(latency) / d log(parameter)\n")
    el = elasticity_table(hw, quick)
    names = list(el[0][1])
    keep = [n for n in names if max(abs(e[n]) for _, e in el) > 1e-3]
    md.append(md_table(["config", *keep],
                       [[f"{cfg.case} S {cfg.seq_len}", *(f"{e[n]:+.2f}" for n in keep)] for cfg, e in el]))
    res["elasticities"] = [{"case": c.case, "S": c.seq_len, **e} for c, e in el]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    mat = np.array([[e[n] for n in keep] for _, e in el])
    im = ax.imshow(mat, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(keep)), keep, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(el)), [f"{c.case} {c.seq_len}" for c, _ in el], fontsize=7)
    fig.colorbar(im)
    figs.append(plots.save(fig, out_dir, "ahbm_elasticities.png"))
    md.append("\n![elasticities](ahbm_elasticities.png)\n")
    return {"markdown": "\n".join(md), "results": res, "figures": figs}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=output_dir, default="results/ahbm_study")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    sec = report_section(pathlib.Path(args.out), quick=args.quick, overrides={})
    print(sec["markdown"])
    print(f"\n(figures in {args.out}: {', '.join(sec['figures'])}; {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
