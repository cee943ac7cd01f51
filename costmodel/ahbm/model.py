"""The discrete evaluator and the one ``constraints`` function (evaluator errors, tuner penalty)."""

from __future__ import annotations

import jax.numpy as jnp

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import PIPELINES, AhbmConfig
from costmodel.hardware import AHBM, ahbm_sip
from costmodel.smooth import Relax


def knobs_of(cfg: AhbmConfig) -> dict:
    """The array knobs of a discrete config (one-hot pipelining weights)."""
    f = lambda x: jnp.asarray(float(x), jnp.float32)
    return {"seq_len": f(cfg.seq_len), "batch": f(cfg.batch), "tile": f(cfg.tile), "cubes": f(cfg.cubes),
            "pes": f(cfg.pes), "w": jnp.eye(len(PIPELINES))[PIPELINES.index(cfg.pipeline)]}


def constraints(hw: AHBM, times: dict) -> dict:
    """Margins (<= 0 feasible) of a configuration from its ``case_latency`` output: the PE's
    TCM must hold the Q rows, (m, l, O), double-buffered K / V tiles and the score buffers."""
    return {"tcm": times["tcm_bytes"] / hw.tcm_bytes_per_pe - 1.0}


def latency(hw: AHBM, knobs: dict, *, case: str, model: str = "llama3_70b", reduce: str = "tree",
            relax: Relax | None = None, causal_skip: bool = True):
    """Total latency (us) of one attention layer (one kv head's CUBE Group; all heads in parallel)."""
    return case_latency(hw, knobs, case=case, model=model, reduce=reduce, relax=relax,
                        causal_skip=causal_skip)["total"]


def evaluate(cfg: AhbmConfig, hw: AHBM | None = None) -> dict:
    """Exact latency of a discrete config: latency_us (one layer), model_us (x layers) and the
    breakdown (us; prefill-SP reports the ring's mean exposed wait per CUBE as ring_wait_us).
    Raises ValueError when a constraint is violated."""
    hw = ahbm_sip() if hw is None else hw
    out = case_latency(hw, knobs_of(cfg), case=cfg.case, model=cfg.model, reduce=cfg.reduce,
                       causal_skip=cfg.causal_skip)
    margins = constraints(hw, out)
    if float(margins["tcm"]) > 0:
        raise ValueError(f"tile={cfg.tile} infeasible for case={cfg.case!r}, pipeline={cfg.pipeline!r}: the PE "
                         f"needs {float(out['tcm_bytes']):.0f} B of TCM, more than tcm_bytes_per_pe="
                         f"{float(hw.tcm_bytes_per_pe):.0f} (Q rows, (m, l, O), double-buffered K/V tiles, "
                         "score buffers); use a smaller tile")
    b = {k: float(v) for k, v in out.items()}
    return {"latency_us": b["total"], "model_us": b["total"] * cfg.layers,
            "breakdown": {"sweep_us": b["sweep"], ("ring_wait_us" if cfg.case == "prefill_sp" else "reduce_us"):
                          b["reduce"], "io_us": b["io"],
                          "gemm_busy_us": b["gemm_busy"], "hbm_busy_us": b["hbm_busy"],
                          "math_busy_us": b["math_busy"], "cpu_issue_us": b["cpu_issue"],
                          "tiles": b["tiles"], "tcm_bytes": b["tcm_bytes"]}}
