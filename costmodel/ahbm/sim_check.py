"""The analytic AHBM model against its event simulation: a grid at named hardware points and random
hardware across regimes (what ``experiments.ahbm_sim_check``, the study and the tests compare).

* ``grid(quick)``: ragged S (129, 1000, 3000, 8193, 12288), decode-SP round-robin and contiguous
  placement (capacity S and 2 S), tree / all-to-all / all-reduce reduces up to C = 8, P = 8, wide
  and tall sub-meshes, prefill to S = 32k, at ``hardware()``'s points (the ADR defaults, an
  issue-bound CPU, a slow CUBE NOC).
* ``random_points(n, seed)``: ``n`` random (hardware, config) pairs, each drawn to stress one
  regime of ``REGIMES``: that resource's rate 0.25-1x of the default (issue: 1-20 ns per primitive
  op) and the other rates (GEMM, MATH, HBM, links) 1-16x, with a config of a case it can bind.
* ``random_link_points(n, seed)``: ``n`` random (hardware, layer config) pairs for the decoder
  layer's collectives (issue 28): UCIe bandwidth 0.25-4x, UCIe transaction 1-100 ns, CUBE NOC (and
  IPCQ) bandwidth 0.25-4x of the defaults; ``compare_collectives(points)``: one row per collective
  part of each point's layer plan (``costmodel.ahbm.layer`` vs ``costmodel.ahbm.sim.layer``);
  ``collective_summary(rows)``: median / worst per collective shape.
* ``compare(points)``: one row per point (model, simulation, relative difference, the model's bound
  and rooflines); ``summary(rows, by=...)``: median / worst |difference| per case or per regime
  and the points whose model or simulated latency is below a resource's roofline.

Every hardware point has the ex_composite command, so opt2 is legal.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import TYPE_CHECKING

import numpy as np

from costmodel.ahbm.config import PIPELINES, AhbmConfig
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.simulate import simulate
from costmodel.hardware import AHBM, ahbm_sip

if TYPE_CHECKING:
    from costmodel.ahbm.layer_plan import LayerConfig

RAGGED = (129, 1000, 3000, 8193, 12288)
REGIMES = ("hbm", "gemm", "math", "links", "cpu_issue")
# how each regime's rate is moved (multipliers of the default fields)
RATE_FIELDS = {"hbm": ("pe_controller_bytes_per_s", "pseudo_channel_bytes_per_s"),
               "gemm": ("gemm_flops_per_cycle_per_pe",), "math": ("math_elems_per_cycle_per_pe",),
               "links": ("cube_noc_bytes_per_s", "ipcq_bytes_per_s")}
ROOF_TOL = 1e-6  # relative: a latency this far below a roofline counts as below it


def base_hardware() -> AHBM:
    """The ADR spec with the ex_composite command (opt2 legal)."""
    return dataclasses.replace(ahbm_sip(), commands=("composite", "ex_composite"))


def hardware() -> dict[str, AHBM]:
    """Named hardware points of the grid."""
    base = base_hardware()
    return {"adr": base,
            "issue": dataclasses.replace(base, cpu_issue_s=5e-9, cpu_issue_composite_s=40e-9),
            "slow_noc": dataclasses.replace(base, cube_noc_bytes_per_s=8e9, ipcq_bytes_per_s=16e9)}


def scaled(hw: AHBM, mult: dict[str, float], issue_s: float = 0.0) -> AHBM:
    """``hw`` with each ``RATE_FIELDS`` group multiplied by ``mult[group]`` and a primitive issue
    cost of ``issue_s`` (a composite push 4x that)."""
    kw = {f: float(getattr(hw, f)) * mult.get(g, 1.0) for g, fs in RATE_FIELDS.items() for f in fs}
    return dataclasses.replace(hw, **kw, cpu_issue_s=issue_s, cpu_issue_composite_s=4.0 * issue_s)


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
    # S = 348, 1160: ring blocks shorter than / ragged against the tile (q blocks keep TILE rows, 8 in the last one)
    ring_S = (348, 1000, 8193) if quick else (348, 1000, 1160, 3000, 8193, 12288, 32768)
    for S in ring_S:
        for P in ((4,) if quick else (2, 8)):
            tile = 128 if S == 1160 else 64
            pts += [("adr", AhbmConfig("prefill_sp", S, tile=tile, cubes=8, pes=P, pipeline=p)) for p in PIPELINES]
            if not quick:
                pts.append(("slow_noc", AhbmConfig("prefill_sp", S, tile=64, cubes=8, pes=P)))
    if not quick:  # an issue-bound CPU: composites vs primitive ops
        for p in PIPELINES:
            pts += [("issue", AhbmConfig("decode", 8193, tile=64, pipeline=p)),
                    ("issue", AhbmConfig("decode_sp", 131072, tile=64, cubes=4, pes=8, pipeline=p)),
                    ("issue", AhbmConfig("prefill", 3000, tile=64, pipeline=p))]
    return pts


def _random_config(rng: np.random.Generator, regime: str) -> AhbmConfig:
    """A config that the regime's resource can bind (links: a decode-SP reduce or the ring)."""
    pipe = PIPELINES[int(rng.integers(len(PIPELINES)))]
    S = int(np.exp(rng.uniform(np.log(100), np.log(20000))))
    cases = ("decode_sp", "prefill_sp") if regime == "links" else ("decode", "decode_sp", "prefill", "prefill_sp")
    case = cases[int(rng.integers(len(cases)))]
    if case == "decode":
        return AhbmConfig("decode", S, tile=int(rng.choice([64, 128, 256, 512])), pipeline=pipe)
    if case == "decode_sp":
        C, P = int(rng.choice([2, 4, 8])), int(rng.choice([2, 4, 8]))
        red = str(rng.choice(["tree", "all_to_all", "all_reduce"])) if regime == "links" else "tree"
        S = S * 4 if regime == "links" else S
        return AhbmConfig("decode_sp", S, tile=int(rng.choice([64, 128, 256])), cubes=C, pes=P, pipeline=pipe,
                          reduce=red, batch=int(rng.choice([1, 2, 4])))
    if case == "prefill":
        return AhbmConfig("prefill", min(S, 6000), tile=32, pipeline=pipe)  # larger q blocks overflow TCM
    return AhbmConfig("prefill_sp", max(min(S * 2, 16384), 256), tile=int(rng.choice([64, 128])), cubes=8,
                      pes=int(rng.choice([2, 4, 8])), pipeline=pipe)


def random_points(n: int, seed: int = 0) -> tuple[dict[str, AhbmConfig], list[tuple[str, AhbmConfig]]]:
    """({name: hardware}, [(name, config)]): ``n`` random points cycling over ``REGIMES``; point i
    stresses regime i mod 5 (see the module docstring). Names are ``<regime>-<i>``."""
    rng = np.random.default_rng(seed)
    base = base_hardware()
    hws, pts = {}, []
    for i in range(n):
        regime = REGIMES[i % len(REGIMES)]
        # the other resources 1-16x faster, the stressed one 0.25-1x (issue: 1-20 ns per primitive op)
        mult = {g: float(np.exp(rng.uniform(0.0, np.log(16.0)))) for g in RATE_FIELDS}
        issue = 0.0
        if regime == "cpu_issue":
            issue = float(np.exp(rng.uniform(np.log(1e-9), np.log(20e-9))))
        else:
            mult[regime] = float(np.exp(rng.uniform(np.log(0.25), 0.0)))
        name = f"{regime}-{i}"
        hws[name] = scaled(base, mult, issue)
        pts.append((name, _random_config(rng, regime)))
    return hws, pts


LINK_CONFIGS = ([("decode", 8192, b, s) for b in (1, 4) for s in (1, 2, 4)] + [("prefill", 1024, 1, s) for s in (1, 2, 4)]
                + [("prefill", 8192, 1, s) for s in (2, 4)])  # (phase, S, batch, SIPs) of the layer draws


def random_link_points(n: int, seed: int = 0) -> list[tuple[str, AHBM, LayerConfig]]:
    """[(name, hardware, layer config)]: ``n`` random link-rate points (see the module docstring);
    the attention TILE is fixed (the collectives do not depend on it). Names are ``links-<i>``."""
    from costmodel.ahbm.layer_plan import LayerConfig

    rng = np.random.default_rng(seed)
    base = ahbm_sip()
    out = []
    for i in range(n):
        m_u, m_n = np.exp(rng.uniform(np.log(0.25), np.log(4.0), 2))
        t_u = float(np.exp(rng.uniform(np.log(1e-9), np.log(100e-9))))
        hw = dataclasses.replace(base, ucie_bytes_per_s=base.ucie_bytes_per_s * float(m_u),
                                 cube_noc_bytes_per_s=base.cube_noc_bytes_per_s * float(m_n),
                                 ipcq_bytes_per_s=base.ipcq_bytes_per_s * float(m_n), ucie_transaction_s=t_u)
        phase, S, B, sips = LINK_CONFIGS[int(rng.integers(len(LINK_CONFIGS)))]
        out.append((f"links-{i}", hw, LayerConfig(phase, S, batch=B, sips=sips, attn_tile=512 if phase == "decode" else 64)))
    return out


def compare_collectives(points, mesh=None) -> list[dict]:
    """One row per collective part of each (name, hardware, layer config): model and simulated us and
    the relative difference (model - sim) / sim."""
    from costmodel.ahbm.layer import collective_times
    from costmodel.ahbm.layer_plan import Collective, MeshSpec, plan
    from costmodel.ahbm.sim.layer import collective as sim_collective

    mesh = MeshSpec() if mesh is None else mesh
    rows = []
    for name, hw, cfg in points:
        for part in plan(cfg, hw, mesh).parts:
            if isinstance(part, Collective):
                m = float(collective_times(hw, part, mesh)["total"])
                s = sim_collective(part, hw, mesh)
                rows.append({"hw": name, "config": cfg, "part": part.name, "lines": part.lines, "model_us": m,
                             "sim_us": s, "rel_diff": (m - s) / s})
    return rows


def collective_summary(rows: list[dict]) -> dict[str, dict]:
    """``compare_collectives`` rows per collective shape ('all' first; a shape is the kind and its
    rings, e.g. 'all_reduce row 4 x col 4 x sip 2'): parts, median and worst |difference| (signed
    worst), the worst row's point and part, and how many are 10% off or more."""
    def shape(r):
        return f"{r['part'].rsplit('_', 1)[0] if r['part'].startswith('all_reduce') else r['part']} " + \
            " x ".join(f"{a} {n}" for a, n in r["lines"])

    out = {}
    groups = [("all", rows)] + [(k, [r for r in rows if shape(r) == k]) for k in sorted({shape(r) for r in rows})]
    for key, rs in groups:
        worst = max(rs, key=lambda r: abs(r["rel_diff"]))
        out[key] = {"parts": len(rs), "median": statistics.median(abs(r["rel_diff"]) for r in rs),
                    "worst": worst["rel_diff"], "worst_point": f"{worst['hw']} {worst['part']}",
                    "off_10_percent": sum(abs(r["rel_diff"]) >= 0.10 for r in rs)}
    return out


def compare(points, skipped: list | None = None, *, issue_order: bool = False,
            hws: dict[str, AHBM] | None = None) -> list[dict]:
    """One row per (hardware name, config): analytic and simulated latency (us), relative
    difference (analytic - sim) / sim, the model's bound and rooflines, simulation seconds and
    the simulation's bounds where it has them. ``hws`` names the hardware (default
    ``hardware()``). ``issue_order`` also simulates with the GEMM engine serving composites in
    issue order (``sim_issue_us``, ``rel_diff_issue``; the spec leaves that arbitration open).
    Points the model rejects (TCM, SIP budget) go to ``skipped`` with the reason."""
    hws = hardware() if hws is None else hws
    rows = []
    for name, cfg in points:
        hw = hws[name]
        try:
            ev = evaluate(cfg, hw)
        except ValueError as e:
            if skipped is not None:
                skipped.append((name, cfg, str(e)))
            continue
        a = ev["latency_us"]
        t0 = time.perf_counter()
        s = simulate(cfg, hw)
        roof = max(ev["rooflines_us"].values())
        row = {"hw": name, "config": cfg, "analytic_us": a, "sim_us": s["latency_us"],
               "sim_lower_us": s.get("latency_lower_us", s["latency_us"]),
               "rel_diff": (a - s["latency_us"]) / s["latency_us"], "sim_s": time.perf_counter() - t0,
               "bound": ev["bound"], "roofline_us": roof, "rooflines_us": ev["rooflines_us"],
               "model_below_roofline": a < roof * (1 - ROOF_TOL),
               "sim_below_roofline": s["latency_us"] < roof * (1 - ROOF_TOL)}
        if issue_order:
            si = simulate(cfg, hw, gemm_order="issue")["latency_us"]
            row.update(sim_issue_us=si, rel_diff_issue=(a - si) / si)
        rows.append(row)
    return rows


def describe(cfg: AhbmConfig) -> str:
    out = f"{cfg.case} S={cfg.seq_len} tile={cfg.tile} {cfg.pipeline}"
    if cfg.batch > 1:
        out += f" B={cfg.batch}"
    if cfg.case == "decode_sp":
        out += f" C={cfg.cubes} P={cfg.pes} {cfg.reduce} {cfg.placement}"
        out += f" cap={cfg.capacity}" if cfg.capacity else ""
        out += " tall" if cfg.cube_mesh == "tall" else ""
    elif cfg.case == "prefill_sp":
        out += f" C={cfg.cubes} P={cfg.pes}"
    return out


def summary(rows: list[dict], key: str = "rel_diff", by: str = "case") -> dict:
    """Median and worst |relative difference| (``key``), overall and per ``by`` ('case' or 'bound':
    the model's binding resource), with the points below a roofline (model / simulation)."""
    def stats(rs):
        errs = [abs(r[key]) for r in rs]
        worst = max(rs, key=lambda r: abs(r[key]))
        return {"points": len(rs), "median": statistics.median(errs), "worst": max(errs),
                "worst_point": f"[{worst['hw']}] {describe(worst['config'])}",
                "model_below_roofline": sum(r["model_below_roofline"] for r in rs),
                "sim_below_roofline": sum(r["sim_below_roofline"] for r in rs)}

    group = (lambda r: r["config"].case) if by == "case" else (lambda r: r["bound"])
    out = {"all": stats(rows)}
    for g in sorted({group(r) for r in rows}):
        out[g] = stats([r for r in rows if group(r) == g])
    return out
