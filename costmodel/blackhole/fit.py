"""Fit ``FitParams`` to measured rows (least squares in log space) and its Laplace covariance.

Residuals are r_i = log(predicted_i / measured_i) of the exact model. Parameters live in an
unconstrained space theta (``params.fit_field`` transforms: log, log(q - 1), logit of dram_eff
over its measured bound) with a weak Gaussian prior around the physical prior (sd ``PRIOR_SD``
per coordinate, i.e. a factor 10 at one sd for a log parameter), so a parameter the data do not
pin stays near its prior with a wide spread instead of running off. Optimisation:
Levenberg-Marquardt from the prior on ``jax.jacfwd`` of the residuals.

Uncertainty (Gauss-Newton / Laplace at the optimum): sigma^2 = sum r^2 / (n - p_eff) is the
per-row model error in log space, and Cov(theta) = (J^T J / sigma^2 + I / PRIOR_SD^2)^-1 with J
the residual Jacobian; p_eff = tr(J^T J (J^T J + sigma^2/PRIOR_SD^2 I)^-1) counts the parameters
the data pin. ``intervals`` propagates it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.params import (
    CALIBRATION_PATH,
    DRAM_EFF_MAX,
    PARAM_NAMES,
    FitParams,
    initial_params,
    param_info,
    params_from_dict,
    params_to_dict,
)
from costmodel.blackhole.rows import Row, load_rows, predict
from costmodel.hardware import Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig

PRIOR_SD = math.log(10.0)  # sd of the prior per unconstrained coordinate
SIGMA_REF = 0.05  # log-space row error assumed while fitting (weighs the prior); re-estimated after
# The residual Jacobian is one large unrolled graph run a few dozen times: XLA's expensive backend
# passes cost more compile time than they save.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


# ---- unconstrained parameterisation ----------------------------------------------------------------
def to_unconstrained(p: FitParams) -> jax.Array:
    """theta [P] in ``PARAM_NAMES`` order (see ``params.fit_field`` for each transform)."""
    out = []
    for k in PARAM_NAMES:
        v, t = float(getattr(p, k)), param_info(k)["transform"]
        if t == "logit_dram":
            x = v / DRAM_EFF_MAX
            if not 0.0 < x < 1.0:
                raise ValueError(f"dram_eff={v} must lie in (0, {DRAM_EFF_MAX:.4f})")
            out.append(math.log(x / (1.0 - x)))
        elif t == "log1m":
            out.append(math.log(v - 1.0))
        else:
            out.append(math.log(v))
    return jnp.asarray(out, jnp.float32)


def from_unconstrained(theta: jax.Array) -> FitParams:
    """Inverse of ``to_unconstrained`` (differentiable in theta)."""
    vals = {}
    for i, k in enumerate(PARAM_NAMES):
        t = param_info(k)["transform"]
        vals[k] = (DRAM_EFF_MAX * jax.nn.sigmoid(theta[i]) if t == "logit_dram"
                   else 1.0 + jnp.exp(theta[i]) if t == "log1m" else jnp.exp(theta[i]))
    return FitParams(**vals)


def residuals(theta, hw: Blackhole, specs: tuple, targets, *, cfg: ExpertConfig) -> jax.Array:
    """log(predicted / measured) per row, [rows]."""
    return jnp.log(predict(hw, from_unconstrained(theta), specs, cfg=cfg) / targets)


@functools.partial(jax.jit, static_argnames=("specs", "cfg"), compiler_options=FAST_COMPILE)
def residuals_and_jacobian(theta, hw: Blackhole, targets, *, specs: tuple, cfg: ExpertConfig):
    """Residuals [rows] and their Jacobian [rows, P] w.r.t. theta (``jax.jacfwd``). Compiled once per
    row set: held-out rows are weighted out by the caller, so every leave-one-group-out refit of
    the same rows reuses this compilation."""
    f = functools.partial(residuals, hw=hw, specs=specs, targets=targets, cfg=cfg)
    return f(theta), jax.jacfwd(f)(theta)


def _levenberg_marquardt(theta, theta0, weights, hw, targets, *, specs, cfg, steps: int):
    """Minimise sum (w r)^2 + (SIGMA_REF / PRIOR_SD)^2 |theta - theta0|^2; returns theta, r, J (all rows)."""
    lam = (SIGMA_REF / PRIOR_SD) ** 2

    def evaluate(th):
        r, J = (np.asarray(a, np.float64) for a in residuals_and_jacobian(jnp.asarray(th, jnp.float32), hw, targets,
                                                                             specs=specs, cfg=cfg))
        d = np.asarray(th) - theta0
        return r, J, float(np.sum((weights * r) ** 2) + lam * d @ d)

    theta = np.asarray(theta, np.float64)
    r, J, loss = evaluate(theta)
    mu = 1e-3
    for _ in range(steps):
        Jw = J * weights[:, None]
        A = Jw.T @ Jw + lam * np.eye(len(theta))
        g = Jw.T @ (weights * r) + lam * (theta - theta0)
        cand = theta - np.linalg.solve(A + mu * np.diag(np.diag(A)), g)
        r2, J2, loss2 = evaluate(cand)
        if np.all(np.isfinite(r2)) and loss2 < loss:
            improved = loss - loss2
            theta, r, J, loss, mu = cand, r2, J2, loss2, mu / 3.0
            if improved < 1e-10 * max(loss, 1e-12):
                break
        else:
            mu *= 4.0
            if mu > 1e8:
                break
    return theta, r, J


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Fitted parameters with their Laplace covariance.

    Attributes:
      params: the fitted ``FitParams``.
      theta: [P] unconstrained parameters (``PARAM_NAMES`` order).
      cov: [P, P] covariance of theta.
      sigma: per-row model error (sd of log predicted / measured).
      dof: rows - effective parameters (Student-t degrees of freedom of the intervals).
      info: fit summary (rows, loss, effective parameters, per-row table).
    """

    params: FitParams
    theta: np.ndarray
    cov: np.ndarray
    sigma: float
    dof: float
    info: dict

    def to_json(self) -> dict:
        return {"params": params_to_dict(self.params), "theta": [float(v) for v in self.theta],
                "cov": [[float(v) for v in row] for row in self.cov], "sigma": self.sigma, "dof": self.dof,
                "info": self.info}

    @classmethod
    def from_json(cls, doc: dict) -> Calibration:
        for key in ("params", "theta", "cov", "sigma", "dof"):
            if key not in doc:
                raise ValueError(f"calibration JSON lacks key {key!r}; write it with "
                                 "`python -m costmodel.blackhole calibrate --write`")
        return cls(params_from_dict(doc["params"]), np.asarray(doc["theta"]), np.asarray(doc["cov"]),
                   float(doc["sigma"]), float(doc["dof"]), doc.get("info", {}))


def load_calibration(path: str | pathlib.Path = CALIBRATION_PATH) -> Calibration:
    """A stored calibration (default: ``costmodel/data/calibration.json``)."""
    path = pathlib.Path(path)
    if not path.exists():
        raise ValueError(f"calibration file {path} missing; run `python -m costmodel.blackhole calibrate --write`")
    return Calibration.from_json(json.loads(path.read_text()))


def fit(rows: list[Row] | None = None, *, hw: Blackhole | None = None, cfg: ExpertConfig | None = None,
        init: FitParams | None = None, hold_out: frozenset[str] = frozenset(), steps: int = 60) -> Calibration:
    """Fit the 'calibration' rows of ``rows`` (default: every stored row) outside the groups in
    ``hold_out``, from ``init`` (default: the prior), with ``steps`` Levenberg-Marquardt iterations.

    Every row (held out, validation or not) is evaluated, weighted 0 unless fitted, so all folds of
    one row set share one compiled Jacobian. Returns a ``Calibration`` whose ``info["fitted_to"]``
    lists the rows that were fitted.
    """
    rows = load_rows() if rows is None else rows
    weights = np.asarray([1.0 if (r.role == "calibration" and r.group not in hold_out) else 0.0 for r in rows])
    n = int(weights.sum())
    if n == 0:
        raise ValueError(f"rows: no 'calibration' row left to fit (hold_out={sorted(hold_out)})")
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    theta0 = np.asarray(to_unconstrained(initial_params()), np.float64)
    start = theta0 if init is None else np.asarray(to_unconstrained(init), np.float64)
    specs = tuple(r.spec for r in rows)
    targets = jnp.asarray([r.target for r in rows], jnp.float32)
    theta, r, J = _levenberg_marquardt(start, theta0, weights, hw, targets, specs=specs, cfg=cfg, steps=steps)
    keep = weights > 0
    r, J = r[keep], J[keep]
    P = len(PARAM_NAMES)
    JtJ = J.T @ J
    # sigma depends on the effective parameter count and vice versa: a few fixed-point rounds
    sigma2, p_eff = float(r @ r) / max(n - P, 1), float(P)
    for _ in range(20):
        p_eff = float(np.trace(JtJ @ np.linalg.inv(JtJ + sigma2 / PRIOR_SD**2 * np.eye(P))))
        sigma2 = float(r @ r) / max(n - p_eff, 1.0)
    cov = np.linalg.inv(JtJ / sigma2 + np.eye(P) / PRIOR_SD**2)
    params = params_from_dict({k: float(v) for k, v in params_to_dict(from_unconstrained(jnp.asarray(theta))).items()})
    info = {"n_rows": n, "n_params": P, "effective_params": p_eff, "rms_log_error": float(np.sqrt(np.mean(r**2))),
            "max_abs_log_error": float(np.max(np.abs(r))), "lm_steps": steps, "hold_out": sorted(hold_out),
            "fitted_to": [f"{x.table}/{x.name}" for x, w in zip(rows, weights) if w > 0]}
    return Calibration(params, theta, cov, math.sqrt(sigma2), max(n - p_eff, 1.0), info)


def report(fit_params: FitParams, rows: list[Row] | None = None, *, hw: Blackhole | None = None,
           cfg: ExpertConfig | None = None) -> list[dict]:
    """Predicted vs measured per row: [{table, name, group, role, lo, hi, predicted, error, source}]."""
    rows = load_rows() if rows is None else rows
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    pred = jax.device_get(jax.jit(predict, static_argnames=("specs", "cfg"))(
        hw, fit_params, tuple(r.spec for r in rows), cfg=cfg))
    return [{"table": r.table, "name": r.name, "group": r.group, "role": r.role, "lo": r.lo, "hi": r.hi,
             "predicted": float(p), "error": r.error(float(p)), "source": r.source} for r, p in zip(rows, pred)]


def format_report(table: list[dict]) -> str:
    """The fit table as text (per data table: measured, predicted, error)."""
    lines, current = [], None
    for r in table:
        if r["table"] != current:
            current = r["table"]
            lines.append(f"\n[{current}]")
            lines.append(f"  {'row':28s} {'measured':>16s} {'predicted':>10s} {'error':>8s}")
        scale, unit = (1e-3, "ms") if r["lo"] >= 5000 else (1.0, "us")
        meas = f"{r['lo'] * scale:.1f}" if r["lo"] == r["hi"] else f"{r['lo'] * scale:.1f}-{r['hi'] * scale:.1f}"
        tag = "" if r["role"] == "calibration" else "  (validation)"
        lines.append(f"  {r['name']:28s} {meas + ' ' + unit:>16s} {r['predicted'] * scale:10.2f} "
                     f"{100 * r['error']:+7.1f}%{tag}")
    return "\n".join(lines)


def write_calibration(cal: Calibration, table: list[dict], path: str | pathlib.Path = CALIBRATION_PATH) -> None:
    """Store the calibration with units, meanings and the per-row errors."""
    doc = {"description": "FitParams of the Blackhole cost model with their Laplace covariance "
                          "(costmodel.blackhole.fit), fitted to the calibration rows below",
           **cal.to_json(),
           "units": {k: param_info(k)["unit"] for k in PARAM_NAMES},
           "rows": [{"table": r["table"], "name": r["name"], "role": r["role"], "measured": [r["lo"], r["hi"]],
                     "predicted": round(r["predicted"], 3), "error": round(r["error"], 4)} for r in table]}
    pathlib.Path(path).write_text(json.dumps(doc, indent=1) + "\n")
