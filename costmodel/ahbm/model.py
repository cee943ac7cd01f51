"""The discrete evaluator and the one ``constraints`` function (evaluator errors, tuner legality and
penalty), with each result's bound and per-resource rooflines."""

from __future__ import annotations

import jax.numpy as jnp

from costmodel.ahbm.cases import RESOURCES, case_latency
from costmodel.ahbm.config import PIPELINES, AhbmConfig, allowed_pipelines
from costmodel.hardware import AHBM, ahbm_sip
from costmodel.smooth import Relax

# what each resource's roofline is, for the bound's explanation
RESOURCE_NAMES = {"hbm": "HBM (the critical PE's controller)", "gemm": "GEMM engine", "math": "MATH engine",
                  "tcm": "TCM port (write-backs, TCM-held operands)",
                  "cpu_issue": "CPU issue", "links": "links (CUBE NOC)"}


def knobs_of(cfg: AhbmConfig) -> dict:
    """The array knobs of a discrete config (one-hot pipelining weights)."""
    f = lambda x: jnp.asarray(float(x), jnp.float32)
    return {"seq_len": f(cfg.seq_len), "batch": f(cfg.batch), "tile": f(cfg.tile), "cubes": f(cfg.cubes),
            "pes": f(cfg.pes), "capacity": f(cfg.kv_capacity),
            "w": jnp.eye(len(PIPELINES))[PIPELINES.index(cfg.pipeline)]}


def static_of(cfg: AhbmConfig) -> dict:
    """The static (jit) arguments of ``case_latency`` for a config (every option that shapes its
    graph: the evaluator, the elasticities and the sweeps all read them from here)."""
    return {"case": cfg.case, "model": cfg.model, "reduce": cfg.reduce, "placement": cfg.placement,
            "mesh": cfg.cube_mesh, "causal_skip": cfg.causal_skip, "queries": cfg.queries}


def constraints(hw: AHBM, times: dict) -> dict:
    """Margins (<= 0 feasible) of a configuration from its ``case_latency`` output:

    * ``tcm``: the PE's TCM holds the Q rows, (m, l, O), the composites' streaming operand
      buffers, the score buffers (and the ring's blocks when they are kept in TCM);
    * ``hbm_pe`` / ``hbm_total``: one layer's KV buffers fit the fullest PE's share of its CUBE's
      HBM, and every layer's KV plus the weights (where known) fit the ``sips`` SIPs' HBM;
    * ``sips``: the K kv heads' CUBE Groups (K x C CUBEs) fit the ``sips`` budget;
    * ``commands``: opt2 needs the ex_composite command in ``hw.commands``;
    * ``ring_depth``: the ring needs >= 2 receive buffers (with one it deadlocks: every CUBE
      waits for its successor's buffer before it can free its own).
    """
    return {"tcm": times["tcm_bytes"] / hw.tcm_bytes_per_pe - 1.0,
            "hbm_pe": times["kv_pe_bytes"] / (hw.hbm_bytes_per_cube / hw.pes_per_cube) - 1.0,
            "hbm_total": times["model_hbm_bytes"] / (hw.sips * hw.cubes * hw.hbm_bytes_per_cube) - 1.0,
            "sips": times["cubes_used"] / (hw.sips * hw.cubes) - 1.0,
            "commands": times["opt2_weight"] * (0.0 if "opt2" in allowed_pipelines(hw) else 1.0) - 0.5,
            "ring_depth": times["ring_depth_margin"]}


def violations(hw: AHBM, times: dict, cfg: AhbmConfig) -> list[str]:
    """The violated constraints of ``cfg`` as sentences naming the constraint and the numbers."""
    m = {k: float(v) for k, v in constraints(hw, times).items()}
    out = []
    if m["tcm"] > 0:
        out.append(f"tcm: tile={cfg.tile} infeasible for case={cfg.case!r}, pipeline={cfg.pipeline!r}: the PE needs "
                   f"{float(times['tcm_bytes']):.0f} B of TCM, more than tcm_bytes_per_pe={float(hw.tcm_bytes_per_pe):.0f} "
                   "(Q rows, (m, l, O), streaming operand buffers, score buffers); use a smaller tile")
    if m["hbm_pe"] > 0:
        out.append(f"hbm_capacity: seq_len={cfg.seq_len} (capacity {cfg.kv_capacity}, batch {cfg.batch}) needs "
                   f"{float(times['kv_pe_bytes']):.4g} B of KV per PE for one layer, more than its share "
                   f"hbm_bytes_per_cube / pes_per_cube = {float(hw.hbm_bytes_per_cube) / hw.pes_per_cube:.4g} B; "
                   "use more ranks, a shorter context or a smaller batch")
    if m["hbm_total"] > 0:
        out.append(f"hbm_capacity: seq_len={cfg.seq_len} (capacity {cfg.kv_capacity}, batch {cfg.batch}) needs "
                   f"{float(times['model_hbm_bytes']):.4g} B of HBM for {cfg.layers} layers' KV and the weights, "
                   f"more than sips={hw.sips} x {hw.cubes} CUBEs x hbm_bytes_per_cube="
                   f"{float(hw.hbm_bytes_per_cube):.4g} B")
    if m["sips"] > 0:
        out.append(f"sips: {cfg.geometry.num_kv_heads} kv heads x cubes={cfg.cubes} need "
                   f"{float(times['cubes_used']):.0f} CUBEs, more than sips={hw.sips} x {hw.cubes} CUBEs")
    if m["commands"] > 0:
        out.append(f"commands: pipeline='opt2' needs the ex_composite command, not in AHBM.commands={hw.commands}")
    if m["ring_depth"] > 0:
        out.append(f"ring_depth: ring_recv_depth={hw.ring_recv_depth} deadlocks the ring; it needs >= 2 buffers")
    return out


def latency(hw: AHBM, knobs: dict, *, case: str, model: str = "llama3_70b", reduce: str = "tree",
            relax: Relax | None = None, causal_skip: bool = True, placement: str = "round_robin", mesh: str = "wide",
            queries: int = 1):
    """Total latency (us) of one attention layer (one kv head's CUBE Group; all heads in parallel)."""
    return case_latency(hw, knobs, case=case, model=model, reduce=reduce, relax=relax, causal_skip=causal_skip,
                        placement=placement, mesh=mesh, queries=queries)["total"]


def bound_of(times: dict) -> tuple[str, dict]:
    """(the resource with the largest roofline, {resource: roofline us}) of a ``case_latency`` output."""
    roof = {r: float(times[f"{r}_busy"]) for r in RESOURCES}
    return max(roof, key=roof.get), roof


def evaluate(cfg: AhbmConfig, hw: AHBM | None = None) -> dict:
    """Exact latency of a discrete config: latency_us (one layer), model_us (x layers), the
    breakdown (us; prefill-SP reports the ring's mean exposed wait per CUBE as ring_wait_us),
    ``bound`` (the resource with the largest roofline) and ``rooflines_us`` (each resource's busy
    time on the critical PE / link: HBM, GEMM, MATH, TCM port, CPU issue, links). Raises ValueError naming
    the violated constraint."""
    hw = ahbm_sip() if hw is None else hw
    out = case_latency(hw, knobs_of(cfg), **static_of(cfg))
    bad = violations(hw, out, cfg)
    if bad:
        raise ValueError("; ".join(bad))
    b = {k: float(v) for k, v in out.items()}
    bound, roof = bound_of(out)
    breakdown = {"sweep_us": b["sweep"], ("ring_wait_us" if cfg.case == "prefill_sp" else "reduce_us"): b["reduce"],
                 "io_us": b["io"], "tiles": b["tiles"], "tcm_bytes": b["tcm_bytes"]}
    if cfg.case == "prefill_sp":
        breakdown["ring_blocks_in_tcm"] = bool(b["ring_in_tcm"] > 0.5)
    return {"latency_us": b["total"], "model_us": b["total"] * cfg.layers, "bound": bound,
            "bound_fraction": roof[bound] / b["total"], "rooflines_us": roof, "breakdown": breakdown}
