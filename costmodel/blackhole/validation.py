"""Leave-one-group-out validation: refit without a group of measured rows, predict them with intervals.

Groups (``rows.Row.group``): each op class of the port's per-op table, the default and the tuned
matmul columns, the standard and the decode SDPA rows, the step rows, each public data set. A
validation-only group (the DRAM microbenchmark) is never fitted; it is predicted by the full fit.
Coverage is the fraction of measured values inside their 90% prediction interval.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.fit import Calibration, fit, residuals_and_jacobian
from costmodel.blackhole.intervals import LEVEL, quantile
from costmodel.blackhole.rows import Row
from costmodel.hardware import Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig


def row_intervals(cal: Calibration, rows: list[Row], *, hw: Blackhole | None = None, cfg: ExpertConfig | None = None,
                  level: float = LEVEL) -> list[dict]:
    """Prediction and ``level`` prediction interval of every row under ``cal``: parameter
    uncertainty (Jacobian of log prediction) plus the per-row model error sigma."""
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    targets = jnp.asarray([r.target for r in rows], jnp.float32)
    r, J = residuals_and_jacobian(jnp.asarray(cal.theta, jnp.float32), hw, targets, specs=tuple(x.spec for x in rows),
                                  cfg=cfg)
    r, J = np.asarray(r, np.float64), np.asarray(J, np.float64)
    z = quantile(cal, level)
    out = []
    for row, ri, gi in zip(rows, r, J):
        pred = row.target * math.exp(ri)
        sd = math.sqrt(float(gi @ cal.cov @ gi) + cal.sigma**2)
        lo, hi = pred * math.exp(-z * sd), pred * math.exp(z * sd)
        out.append({"table": row.table, "name": row.name, "group": row.group, "role": row.role, "measured_lo": row.lo,
                    "measured_hi": row.hi, "predicted": pred, "lo": lo, "hi": hi, "error": row.error(pred),
                    "inside": bool(lo <= row.hi and row.lo <= hi)})
    return out


def leave_one_group_out(rows: list[Row], full: Calibration, *, hw: Blackhole | None = None,
                        cfg: ExpertConfig | None = None, steps: int = 40) -> dict:
    """Refit without each calibration group (warm start: ``full``) and predict that group.

    Returns {"rows": [row_intervals entries of every held-out prediction, with "fold"], "coverage":
    fraction inside over the calibration groups, "validation_coverage": the same for validation-only
    rows under ``full``, "groups": {group: {"n", "inside", "rms_log_error"}}}.
    """
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    groups = sorted({r.group for r in rows if r.role == "calibration"})
    preds = []
    for g in groups:
        cal = fit(rows, hw=hw, cfg=cfg, init=full.params, hold_out=frozenset({g}), steps=steps)
        for p in row_intervals(cal, rows, hw=hw, cfg=cfg):
            if p["group"] == g:
                preds.append({**p, "fold": g})
    val = [{**p, "fold": "validation (full fit)"} for p in row_intervals(full, rows, hw=hw, cfg=cfg)
           if p["role"] == "validation"]
    summary = {}
    for g in groups + sorted({p["group"] for p in val}):
        ps = [p for p in preds + val if p["group"] == g]
        summary[g] = {"n": len(ps), "inside": sum(p["inside"] for p in ps),
                      "rms_log_error": float(np.sqrt(np.mean([math.log(p["predicted"] / (0.5 * (p["measured_lo"]
                                                              + p["measured_hi"]))) ** 2 for p in ps])))}
    return {"rows": preds + val, "coverage": float(np.mean([p["inside"] for p in preds])),
            "validation_coverage": float(np.mean([p["inside"] for p in val])) if val else float("nan"),
            "groups": summary}
