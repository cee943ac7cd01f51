"""AHBM attention-kernel study (ADR-0060): the open decisions answered by the model, the model vs
the event simulation, tuner vs
exhaustive search at ragged S, optimal TILE / C vs context, pipelining options vs CPU issue cost,
reduce kinds, elasticities, the ring's communication-hiding crossover, and the whole decoder stack's
token latency on the mesh (``experiments.ahbm_token``'s table: Llama-3-70B decode B 1 / 4 at S 8k /
128k / 1M and prefill on 1 / 2 / 4 SIPs, model and simulation per part; quick: a smoke subset without the
8-CUBE ring's rows).

    python -m experiments.report --sections ahbm [--quick] [--set ahbm.FIELD=VALUE]

``report_section(out_dir, quick=..., overrides=...)`` is the main report's entry point.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib

import numpy as np

from costmodel.ahbm import counts, robustness, sim_check
from costmodel.ahbm.config import PIPELINES, AhbmConfig, knob_space
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.sensitivity import elasticities
from costmodel.ahbm.tune import TIE_REL, exhaustive, stack_knobs, sweep_latency, tune
from costmodel.hardware import ahbm_sip
from costmodel.overrides import apply_overrides
from experiments import ahbm_token
from experiments.report.render import SectionResult, figure, md_table, save

K = 1024


def _lat(cfg, hw):
    return evaluate(cfg, hw)["latency_us"]


def _margin(best: float, other: float) -> str:
    return f"{other / best - 1:+.1%}"


def decisions(hw, quick: bool) -> tuple[list[list], list[dict]]:
    """ADR-0060's open decisions, each answered by the model: (table rows, records)."""
    rows, rec = [], []

    def add(decision, options, choice, margin, **extra):
        rows.append([decision, options, choice, margin])
        rec.append({"decision": decision, "recommendation": choice, "margin": margin, **extra})

    built = dataclasses.replace(hw, commands=("composite", "ex_composite"))
    S = 128 * K
    dec = lambda p, h: _lat(AhbmConfig("decode_sp", S, tile=512, cubes=8, pes=8, pipeline=p), h)
    # 1. decode variant vs CPU issue cost (primitive ops; a composite push assumed 4x a primitive)
    costs = [0.0, 1e-9, 2e-9, 5e-9, 10e-9, 20e-9, 50e-9, 100e-9] if not quick else [0.0, 5e-9, 20e-9, 100e-9]
    tab = {c: {p: dec(p, dataclasses.replace(built, cpu_issue_s=c, cpu_issue_composite_s=4 * c)) for p in PIPELINES}
           for c in costs}
    cross = next((c for c in costs if tab[c]["opt2"] < 0.95 * tab[c]["opt3"]), None)
    t0 = tab[0.0]
    add("decode variant (section 5.6), decode-SP S 128k, C 8 P 8, TILE 512",
        f"issue 0: opt1 {t0['opt1']:.4g}, opt3 {t0['opt3']:.4g}, opt2 {t0['opt2']:.4g}; issue 20 ns: "
        + ", ".join(f"{p} {tab[20e-9][p]:.4g}" for p in PIPELINES),
        "opt3 (no new command)" + (f"; opt2 pays >= 5% once a primitive issue costs >= {cross * 1e9:g} ns"
                                   if cross is not None else "; opt2 never gains 5% up to 100 ns"),
        f"opt3 vs opt1 {_margin(t0['opt3'], t0['opt1'])} at 0 ns", crossover_issue_s=cross)
    # 2. reduce topology (section 4.4)
    red = {r: evaluate(AhbmConfig("decode_sp", 32 * K, tile=512, cubes=8, pes=8, reduce=r), hw)["breakdown"]
           ["reduce_us"] for r in ("tree", "all_to_all", "all_reduce")}
    best = min(red, key=red.get)
    nxt = min((v for k, v in red.items() if k != best))
    add("reduce topology (section 4.4), C 8 P 8", ", ".join(f"{k} {v:.3g}" for k, v in red.items()),
        f"{best} (Level-2 binomial tree + Level-1 center-root mesh)", f"next {_margin(red[best], nxt)}")
    # 3. CUBE-Group sub-mesh 4x2 vs 2x4
    hops = {m: int(counts.reduce_paths(8, 8, "tree", m)[:, counts.PATH_COLUMNS.index("hops")].max())
            for m in ("wide", "tall")}
    sub = {m: evaluate(AhbmConfig("decode_sp", 32 * K, tile=512, cubes=8, pes=8, cube_mesh=m), hw)["breakdown"]
           ["reduce_us"] for m in ("wide", "tall")}
    add("CUBE-Group sub-mesh at C 8 (section B)", f"2x4: {hops['wide']} hops, {sub['wide']:.3g}; "
        f"4x2: {hops['tall']} hops, {sub['tall']:.3g}",
        "either (center-root depth cols//2 + rows//2 = 3 both ways); 2x4 stacks two groups in the 4x4 SIP",
        _margin(min(sub.values()), max(sub.values())))
    # 4. contiguous vs round-robin placement (capacity 128k)
    pl = {}
    for Sx in (3000, 32 * K, 128 * K):
        pl[Sx] = {p: _lat(AhbmConfig("decode_sp", Sx, tile=512, cubes=8, pes=8, placement=p, capacity=128 * K), hw)
                  for p in ("round_robin", "contiguous")}
    add("KV placement (section 2.1), decode-SP C 8 P 8, capacity 128k",
        "; ".join(f"S {Sx}: rr {v['round_robin']:.3g}, contiguous {v['contiguous']:.3g}" for Sx, v in pl.items()),
        "contiguous (shared with prefill's causal skip) for long context; round-robin only for short decode",
        f"contiguous costs {_margin(pl[128 * K]['round_robin'], pl[128 * K]['contiguous'])} at S = capacity, "
        f"{_margin(pl[3000]['round_robin'], pl[3000]['contiguous'])} at S 3000")
    # 5. one-shot vs tiled crossover (section 9.5), decode on one PE
    lanes = (128, 256, 512, 1000, 2000, 4000, 8000, 16000) if not quick else (256, 1000, 4000, 16000)
    cross5, detail = None, []
    for L in lanes:
        shot_tile = next(t for t in knob_space("decode")["tile"] if t >= L) if L <= 4096 else 4096
        try:
            one = min(_lat(AhbmConfig("decode", L, tile=shot_tile, pipeline=p), hw) for p in ("opt1", "opt3")) \
                if L <= 4096 else float("inf")
        except ValueError:
            one = float("inf")
        tiled = min(_lat(AhbmConfig("decode", L, tile=t, pipeline=p), hw) for t in (64, 128, 256, 512, 1024)
                    if t < L for p in ("opt1", "opt3")) if L > 64 else float("inf")
        detail.append(f"S_rank {L}: one-shot {one:.3g}, tiled {tiled:.3g}")
        if cross5 is None and tiled < one:
            cross5 = L
    add("one-shot vs tiled (section 9.5), decode one PE", "; ".join(detail[::2]),
        f"tile once S_rank >= {cross5}" if cross5 else "one-shot wherever TCM allows", "see options",
        crossover_keys=cross5)
    # 6. ring ping-pong vs receive depth (section 9.4); quick: left out (the 8-CUBE ring's graph is the
    # costliest to build, op by op as compiled; the ring's tests cover it)
    if not quick:
        ring = {dp: _lat(AhbmConfig("prefill_sp", 32 * K, tile=64, cubes=8, pes=8),
                         dataclasses.replace(hw, ring_recv_depth=dp)) for dp in (2, 3, 4)}
        add("ring receive depth (section 9.4), prefill-SP S 32k",
            ", ".join(f"depth {k}: {v:.4g}" for k, v in ring.items()),
            "ping-pong (2)" if ring[3] > 0.99 * ring[2] else "depth 3", f"depth 3 {_margin(ring[2], ring[3])}")
    # 7. run-ahead depth (section 9.1)
    ra = {dp: _lat(AhbmConfig("decode_sp", S, tile=512, cubes=8, pes=8), dataclasses.replace(
        hw, composite_runahead_subtiles=dp)) for dp in (1, 2, 4, 8)}
    pick = min(dp for dp in ra if ra[dp] <= 1.01 * min(ra.values()))
    add("composite run-ahead depth (section 9.1), decode-SP S 128k", ", ".join(f"{k}: {v:.4g}" for k, v in ra.items()),
        f"{pick} sub-tiles", f"depth 1 {_margin(ra[pick], ra[1])}")
    # 8. C per operating point under the 4-SIP budget
    ops = (K, 32 * K, 1024 * K) if not quick else (K, 1024 * K)
    cs = []
    for Sx in ops:
        by_c = {}
        for C in (1, 2, 4, 8):
            by_c[C] = min(_lat(AhbmConfig("decode_sp", Sx, tile=t, cubes=C, pes=8, pipeline="opt3"), hw)
                          for t in ((64, 256, 1024, 4096) if not quick else (256, 4096)))
        bc = min(by_c, key=by_c.get)
        second = min(v for k, v in by_c.items() if k != bc)
        cs.append((Sx, bc, _margin(by_c[bc], second)))
    add(f"C per operating point ({hw.sips} SIPs: C <= {hw.sips * hw.cubes // 8})",
        "; ".join(f"decode S {Sx}: C {c}" for Sx, c, _ in cs) + "; prefill: C = G = 8 (head-parallel)",
        ", ".join(f"S {Sx}: C {c}" for Sx, c, _ in cs), ", ".join(m for *_, m in cs))
    # 9. the GEMM rate at which long decode becomes HBM-bound
    long_cfg = AhbmConfig("decode_sp", 1024 * K, tile=512, cubes=8, pes=8)
    flip = None
    for mult in (1, 1.5, 2, 3, 4, 6, 8, 12, 16):
        if evaluate(long_cfg, dataclasses.replace(hw, gemm_flops_per_cycle_per_pe=mult * hw.gemm_flops_per_cycle_per_pe))[
                "bound"] == "hbm":
            flip = mult
            break
    r = evaluate(long_cfg, hw)
    m8 = evaluate(long_cfg, dataclasses.replace(hw, gemm_tile_m=8))
    add("long decode bound (decode-SP S 1M, C 8 P 8)",
        f"default: {r['bound']} ({r['rooflines_us']['gemm'] / r['rooflines_us']['hbm']:.2f}x the HBM roofline); "
        f"engine tile height 8: {m8['bound']}",
        f"HBM-bound from {flip}x the assumed GEMM rate ({flip * float(hw.gemm_flops_per_cycle_per_pe):.0f} FLOP/cycle)"
        if flip else "GEMM-bound up to 16x", "GEMM tile rows: G = 8 of 32 used", gemm_rate_multiplier=flip)
    return rows, rec


def decision_robustness(hw, quick: bool) -> list[dict]:
    """Each decision re-evaluated over two uncertain rates (0.5-2x of the assumed GEMM / MATH / link
    rates, 0-100 ns of CPU issue): one record per decision with the options' latency grid and
    ``robustness.verdict`` (robust, or a crossover with the share each option wins)."""
    mult = [0.5, 1.0, 2.0] if quick else [0.5, 0.59, 0.71, 0.84, 1.0, 1.19, 1.41, 1.68, 2.0]
    issue = [0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
    built = dataclasses.replace(hw, commands=("composite", "ex_composite"))
    dsp = lambda **kw: AhbmConfig("decode_sp", kw.pop("S", 128 * K), **{"tile": 512, "cubes": 8, "pes": 8, **kw})
    dec = [
        ("decode variant: opt2 worth building (>= 5% over opt3), decode-SP S 128k", ("gemm", mult), ("issue", issue),
         [(p, dsp(pipeline=p), built) for p in ("opt3", "opt2")], {"opt2": 0.05}),
        ("reduce topology, decode-SP S 32k C 8 P 8", ("gemm", mult), ("links", mult),
         [(r, dsp(S=32 * K, reduce=r), hw) for r in ("tree", "all_to_all", "all_reduce")], None),
        ("KV placement, decode-SP S 32k, capacity 128k", ("gemm", mult), ("links", mult),
         [(p, dsp(S=32 * K, placement=p, capacity=128 * K), hw) for p in ("round_robin", "contiguous")], None),
        ("one-shot vs tiled, decode one PE, S 2000", ("gemm", mult), ("math", mult),
         [("one-shot", AhbmConfig("decode", 2000, tile=2048, pipeline=p), hw) for p in ("opt1", "opt3")]
         + [("tiled", AhbmConfig("decode", 2000, tile=t, pipeline=p), hw) for t in (64, 128, 256, 512, 1024)
            for p in ("opt1", "opt3")], None),
        ("C at S 1k (decode-SP, P 8, best TILE)", ("gemm", mult), ("math", mult),
         [(f"C {c}", AhbmConfig("decode_sp", K, tile=t, cubes=c, pes=8), hw) for c in (1, 2, 4, 8)
          for t in (64, 256, 1024)], None),
        ("C at S 1M (decode-SP, P 8, best TILE)", ("gemm", mult), ("math", mult),
         [(f"C {c}", AhbmConfig("decode_sp", 1024 * K, tile=t, cubes=c, pes=8), hw) for c in (2, 4, 8)
          for t in (256, 1024, 4096)], None),
    ]
    if quick:  # a smoke subset: three decisions on two graphs (decode, decode-SP) and three maps
        dec = dec[3:]
    else:  # the hardware-structure decisions: one graph per depth (the ring's compiles slowest)
        dec += [
            ("composite run-ahead depth, decode-SP S 128k", ("gemm", mult), ("math", mult),
             [(f"depth {k}", dsp(), dataclasses.replace(hw, composite_runahead_subtiles=k)) for k in (1, 2, 4)], None),
            ("ring receive depth, prefill-SP S 32k", ("gemm", mult), ("links", mult),
             [(f"depth {k}", AhbmConfig("prefill_sp", 32 * K, tile=64, cubes=8, pes=8),
               dataclasses.replace(hw, ring_recv_depth=k)) for k in (2, 3)], {"depth 3": TIE_COST}),
        ]
    out = []
    for name, x, y, options, handicap in dec:
        lat = robustness.rate_grid(options, x, y)
        v = robustness.verdict(lat, [lab for lab, *_ in options], handicap)
        out.append({"decision": name, "x": x, "y": y, **v})
    return out


TIE_COST = 0.01  # a deeper ring buffer must gain 1% to be worth its TCM


def robustness_spot_checks(hw) -> list[dict]:
    """The variant decision at the corners where the issue saw model and simulation disagree
    (2x GEMM): opt2 / opt3 in the model and in the event simulation."""
    from costmodel.ahbm.simulate import simulate

    built = dataclasses.replace(hw, commands=("composite", "ex_composite"))
    rows = []
    for g, ns in ((2.0, 0.0), (2.0, 10.0), (0.5, 10.0), (1.0, 50.0)):
        h = robustness.at_rates(robustness.at_rates(built, "gemm", g), "issue", ns)
        cfg = AhbmConfig("decode_sp", 128 * K, tile=512, cubes=8, pes=8)
        m = {p: _lat(cfg.replace(pipeline=p), h) for p in ("opt2", "opt3")}
        sm = {p: simulate(cfg.replace(pipeline=p), h)["latency_us"] for p in ("opt2", "opt3")}
        rows.append({"gemm": g, "issue_ns": ns, "model_opt2_over_opt3": m["opt2"] / m["opt3"],
                     "sim_opt2_over_opt3": sm["opt2"] / sm["opt3"]})
    return rows


def _rates(rec: dict) -> str:
    (xa, xv), (ya, yv) = rec["x"], rec["y"]
    return f"{xa} {min(xv):g}-{max(xv):g} x {ya} {min(yv):g}-{max(yv):g}"


def _crossover_figure(out_dir: pathlib.Path, name: str, rec: dict) -> str:
    """The winner map of one decision over its two rate axes (one colour per option)."""
    from matplotlib.colors import ListedColormap

    (xa, xv), (ya, yv) = rec["x"], rec["y"]
    labels = rec["labels"]
    fig, (ax,) = figure(width=5, height=3.5)
    cmap = ListedColormap(["#4C72B0", "#DD8452", "#55A868", "#C44E52"][: len(labels)])
    ax.imshow(rec["winner"], origin="lower", cmap=cmap, vmin=-0.5, vmax=len(labels) - 0.5, aspect="auto")
    ax.set_xticks(range(len(xv)), [f"{v:g}" for v in xv], fontsize=7)
    ax.set_yticks(range(len(yv)), [f"{v:g}" for v in yv], fontsize=7)
    ax.set_xlabel(robustness.AXIS_LABELS[xa])
    ax.set_ylabel(robustness.AXIS_LABELS[ya])
    ax.set_title(rec["decision"], fontsize=8)
    for i, lab in enumerate(labels):
        ax.plot([], [], "s", color=cmap(i), label=lab)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return save(fig, out_dir, name)


def tuner_table(hw, quick):
    rows = []
    ragged = (1000, 3000, 50000, 777777)  # real context lengths are not powers of two
    grid = {case: ragged for case in ("decode", "decode_sp", "prefill", "prefill_sp")}
    if quick:  # one row: decode-SP at S 1000, the graphs the tuner's tests compile too (one compile cache)
        grid = {"decode_sp": (1000,)}
    for case, Ss in grid.items():
        for S in Ss:
            rows.append(_tuner_row(hw, case, S, {}))
    # plateaus: contiguous placement with capacity >> S is flat in C and P
    plateaus = () if quick else ((3000, 1 << 17), (3000, 1 << 20), (4097, 1 << 20), (65537, 1 << 20))
    for S, cap in plateaus:
        rows.append(_tuner_row(hw, "decode_sp", S, {"placement": "contiguous", "capacity": cap}))
    return rows


def _tuner_row(hw, case, S, prob):
    """(case, S, problem options, tune (auto), descent, exhaustive best, its latency, evaluations)."""
    auto = tune(case, S, hw=hw, **prob)
    descent = tune(case, S, hw=hw, method="descent", **prob)
    best, lat, n = exhaustive(case, S, hw=hw, **prob)
    return case, S, prob, auto, descent, best, lat, n


def optimum_vs_s(hw, quick):
    """{case: [(S, best config, its latency us, evaluations)]}; quick: decode-SP only (the ring's
    sweep is the slowest graph to compile), prefill-SP's list empty."""
    Ss = [K * 4**k for k in range(6)] if not quick else [K, 1024 * K]
    return {case: [(S, *exhaustive(case, S, hw=hw)) for S in Ss] if case == "decode_sp" or not quick else []
            for case in ("decode_sp", "prefill_sp")}


def issue_cost_table(hw, S=128 * K):
    costs = (0.0, 2e-9, 5e-9, 10e-9, 20e-9, 50e-9)
    built = dataclasses.replace(hw, commands=("composite", "ex_composite"))  # opt2 assumed built
    return costs, {p: [evaluate(AhbmConfig("decode_sp", S, tile=64, cubes=4, pes=8, pipeline=p),
                                dataclasses.replace(built, cpu_issue_s=c))["latency_us"] for c in costs]
                   for p in PIPELINES}


def reduce_table(hw, quick=False):
    # quick: C 16 left out (its all-to-all replay is the costliest by far)
    combos = ((1, 8), (2, 8), (4, 8), (8, 8), (16, 8), (16, 4)) if not quick else ((2, 8), (8, 8))
    wide = dataclasses.replace(hw, sips=2 * hw.sips)  # C = 16 needs 8 SIPs for the 8 kv heads
    return combos, {r: [evaluate(AhbmConfig("decode_sp", 1024, tile=128, cubes=C, pes=P, reduce=r), wide)
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
    free, _ = sweep_latency(dataclasses.replace(hw, cube_noc_bytes_per_s=1e18), knobs, case="prefill_sp", once=True)
    free = np.asarray(free)
    d = AhbmConfig("prefill_sp", int(S[0]), tile=tile, cubes=C).geometry.head_dim
    rows = []
    for bw in (hw.cube_noc_bytes_per_s / 64, hw.cube_noc_bytes_per_s / 16, hw.cube_noc_bytes_per_s / 8):
        lat, _ = sweep_latency(dataclasses.replace(hw, cube_noc_bytes_per_s=bw), knobs, case="prefill_sp", once=True)
        hidden = np.asarray(lat) <= 1.01 * free
        idx = next((i for i in range(len(S)) if hidden[i:].all()), None)
        found = int(S[idx]) if idx is not None else None
        i = idx if idx is not None else len(S) - 1
        f_eff = 4 * S[i] * (S[i] + 1) / 2 * d / (free[i] * 1e-6)  # FLOP/s, causal, one head
        rows.append((float(bw), float(f_eff) / float(bw), found))
    return rows


def elasticity_table(hw, quick):
    pts = [AhbmConfig("decode", 32 * K, tile=128, pipeline="opt3")]
    if not quick:  # the ring's gradient graph is the slowest to build
        pts += [AhbmConfig("decode_sp", K, tile=64, cubes=4, pes=8),
                AhbmConfig("decode_sp", 1024 * K, tile=64, cubes=8, pes=8), AhbmConfig("prefill", 8 * K, tile=32),
                AhbmConfig("prefill_sp", 8 * K, tile=64, cubes=8, pes=8), AhbmConfig("decode", K, tile=128),
                AhbmConfig("decode_sp", 32 * K, tile=64, cubes=8, pes=8),
                AhbmConfig("prefill_sp", 128 * K, tile=128, cubes=8, pes=8)]
    return [(cfg, elasticities(cfg, hw)) for cfg in pts]


def _fmt_cfg(c: AhbmConfig) -> str:
    return f"TILE {c.tile}, C {c.cubes}, P {c.pes}, {c.pipeline}"


def _line_figure(out_dir: pathlib.Path, name: str, x: list[float], series: list[tuple[str, str, list[float]]], *,
                 xlabel: str, ylabel: str | None = None, logx: bool = False) -> str:
    """One 5 x 3.5 in axes of (label, style, y) lines over ``x``, with a legend; saved as ``name``."""
    fig, (ax,) = figure(width=5, height=3.5)
    for label, style, y in series:
        (ax.semilogx if logx else ax.plot)(x, y, style, label=label)
    ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    ax.legend()
    return save(fig, out_dir, name)


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    hw = apply_overrides(ahbm_sip(), overrides)
    md, res, figs = [], {}, []

    md.append("### ADR-0060 open decisions\n")
    rows, dec = decisions(hw, quick)
    md.append(md_table(["decision", "options (us or as stated)", "recommendation", "margin"], rows))
    res["decisions"] = dec
    md.append("")

    md.append("### Decisions over the uncertain rates (robust or crossover)\n")
    rob = decision_robustness(hw, quick)
    md.append(md_table(["decision", "rates swept", "verdict", "choice", "choice's worst loss", "share of the grid won"],
                       [[r["decision"], _rates(r), r["kind"], r["choice"], f"{r['worst_regret']:+.1%}",
                         ", ".join(f"{k} {v:.0%}" for k, v in r["share"].items())] for r in rob]))
    res["robustness"] = [{"decision": r["decision"], "kind": r["kind"], "choice": r["choice"],
                          "worst_regret": r["worst_regret"], "share": r["share"]} for r in rob]
    md.append(f"\nA decision is robust when one option is within {robustness.TIE:.1%} of the best at every grid "
              "point (the model's vmapped graph over the rates); a crossover otherwise. Crossover maps:\n")
    crossed = [r for r in rob if r["kind"] == "crossover"]
    for i, r in enumerate((crossed + [r for r in rob if r["kind"] == "robust"])[: max(3, len(crossed))]):
        name = f"ahbm_crossover_{i}.png"
        figs.append(_crossover_figure(out_dir, name, r))
        md.append(f"![{r['decision']}]({name})\n")
    spot = robustness_spot_checks(hw)
    md.append("Spot check of the variant decision against the event simulation (opt2 / opt3 latency):\n")
    md.append(md_table(["GEMM x", "issue ns", "model opt2/opt3", "simulation opt2/opt3"],
                       [[f"{r['gemm']:g}", f"{r['issue_ns']:g}", f"{r['model_opt2_over_opt3']:.3f}",
                         f"{r['sim_opt2_over_opt3']:.3f}"] for r in spot]))
    res["robustness_spot_checks"] = spot
    md.append("")

    md.append("### Analytic model vs event simulation (``costmodel.ahbm.sim_check``)\n")
    sim_rows = sim_check.compare(sim_check.grid(quick))
    summ = sim_check.summary(sim_rows)
    md.append(md_table(["case", "points", "median |diff|", "worst |diff|", "worst point"],
                       [[k, v["points"], f"{v['median']:.2%}", f"{v['worst']:.2%}", v["worst_point"]]
                        for k, v in summ.items()]))
    md.append("\nThe simulation (issue-18b) runs sub-tile DMA / GEMM / write-back processes, per-link queues and "
              "HBM channels on the spec of ``costmodel.ahbm`` alone; the target is worst <= 10%.\n")
    res["sim_median_rel_diff"] = summ["all"]["median"]
    res["sim_worst_rel_diff"] = summ["all"]["worst"]
    n_random = 10 if quick else 200
    hws, pts = sim_check.random_points(n_random)
    by_bound = sim_check.summary(sim_check.compare(pts, hws=hws), by="bound")
    md.append(f"Random hardware across regimes ({n_random} points: each stresses one resource at 0.25-1x of its "
              "assumed rate, or 1-20 ns of CPU issue, the others 1-16x; per the model's bound):\n")
    md.append(md_table(["bound", "points", "median |diff|", "worst |diff|", "model below a roofline",
                        "simulation below the model's roofline", "worst point"],
                       [[k, v["points"], f"{v['median']:.2%}", f"{v['worst']:.2%}", v["model_below_roofline"],
                         v["sim_below_roofline"], v["worst_point"]] for k, v in by_bound.items()]))
    md.append("")
    res["random_hw_by_bound"] = {k: {kk: v[kk] for kk in ("points", "median", "worst", "model_below_roofline",
                                                          "sim_below_roofline")} for k, v in by_bound.items()}

    md.append("### Gradient tuner vs exhaustive search\n")
    gaps, dgaps, rows = [], [], []
    for case, S, prob, r, d, best, lat, n in tuner_table(hw, quick):
        gap, dgap = r.latency_us / lat - 1, d.latency_us / lat - 1
        gaps.append(gap)
        dgaps.append(dgap)
        where = f" contiguous, capacity {prob['capacity']}" if prob else ""
        rows.append([f"{case}{where}", S, r.method, _fmt_cfg(r.best), f"{r.latency_us:.4g}", f"{gap:+.2%}",
                     _fmt_cfg(d.best), f"{d.latency_us:.4g}", d.evaluations, f"{dgap:+.2%}", _fmt_cfg(best), n])
    md.append(md_table(["case", "S", "tuner", "tuner config", "us", "gap", "descent config", "descent us",
                        "descent evals", "descent gap", "exhaustive config", "evals"], rows))
    res["tuner_worst_gap"] = max(gaps)
    res["descent_worst_gap"] = max(dgaps)
    md.append(f"\nThe tuner ('auto') searches exhaustively wherever the knob space is small (every case here: one "
              f"vmapped sweep), so its worst gap is {max(gaps):+.2%}; ties within "
              f"{TIE_REL:.1%} go to the fewest ranks. Gradient descent alone (the fallback for large spaces) has a "
              f"worst gap of {max(dgaps):+.2%} (plateaus: flat in C and P when capacity >> S).\n")

    opt = optimum_vs_s(hw, quick)
    md.append("### Optimal configuration vs context S (exhaustive)\n")
    md.append(md_table(["S", "decode-SP optimum", "us", "prefill-SP optimum", "us"],
                       [[S, _fmt_cfg(bd), f"{ld:.4g}", *((_fmt_cfg(p[1]), f"{p[2]:.4g}") if p else ("-", "-"))]
                        for (S, bd, ld, _), p in itertools.zip_longest(opt["decode_sp"], opt["prefill_sp"])]))
    G = AhbmConfig("decode", 1024).geometry.group
    cross = next((S for S, b, _, _ in opt["decode_sp"] if b.cubes >= G), None)
    res["decode_c_reaches_prefill_c_at_S"] = cross
    md.append(f"\nPrefill-SP's C is G = {G} (head-parallel); decode-SP's optimal C reaches it at S = {cross}.\n")
    Ss = [S for S, *_ in opt["decode_sp"]]
    figs.append(_line_figure(out_dir, "ahbm_optimum_vs_s.png", Ss, [
        ("decode-SP ranks C*P", "o-", [b.cubes * b.pes for _, b, _, _ in opt["decode_sp"]]),
        ("decode-SP TILE", "s--", [b.tile for _, b, _, _ in opt["decode_sp"]]),
        *([("prefill-SP TILE", "^:", [b.tile for _, b, _, _ in opt["prefill_sp"]])] if opt["prefill_sp"] else [])],
        xlabel="context S", logx=True))
    md.append("![optimum vs S](ahbm_optimum_vs_s.png)\n")

    costs, tab = issue_cost_table(hw)
    md.append("### Pipelining options vs per-op CPU issue cost (decode-SP, S 128k, TILE 64, C 4, P 8)\n")
    md.append(md_table(["issue cost (ns)", *PIPELINES],
                       [[f"{c * 1e9:g}", *(f"{tab[p][i]:.3f}" for p in PIPELINES)] for i, c in enumerate(costs)]))
    res["opt2_over_opt3_at_max_issue"] = tab["opt2"][-1] / tab["opt3"][-1]
    figs.append(_line_figure(out_dir, "ahbm_pipelining.png", [c * 1e9 for c in costs],
                             [(p, "o-", tab[p]) for p in PIPELINES], xlabel="CPU issue cost per op (ns)",
                             ylabel="latency (us)"))
    md.append("\n![pipelining](ahbm_pipelining.png)\n")

    combos, red = reduce_table(hw, quick)
    md.append("### Decode-SP reduce: reduce-to-root vs fan-out vs all-reduce (us, S 1k)\n")
    kinds = ("tree", "all_to_all", "all_reduce")
    md.append(md_table(["C x P", *kinds],
                       [[f"{C} x {P}", *(f"{red[k][i]:.3f}" for k in kinds)] for i, (C, P) in enumerate(combos)]))

    md.append("\n### Ring communication hiding (prefill-SP, P 8, TILE 32)\n")
    if quick:  # the 8-CUBE ring's sweep compiles for longer than the rest of a quick section together
        md.append("Full report only (`--quick` leaves out the 8-CUBE ring's sweep).\n")
    else:
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
    fig, (ax,) = figure(width=8, height=3.5)
    mat = np.array([[e[n] for n in keep] for _, e in el])
    im = ax.imshow(mat, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    ax.set_xticks(range(len(keep)), keep, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(range(len(el)), [f"{c.case} {c.seq_len}" for c, _ in el], fontsize=7)
    fig.colorbar(im)
    figs.append(save(fig, out_dir, "ahbm_elasticities.png"))
    md.append("\n![elasticities](ahbm_elasticities.png)\n")

    tok = ahbm_token.report_section(out_dir, quick=quick, overrides=overrides)  # the whole decoder stack
    md.append(tok.markdown)
    res["token_latency"] = dict(tok.results)
    figs.extend(tok.figures)
    return SectionResult("\n".join(md), res, tuple(figs))
