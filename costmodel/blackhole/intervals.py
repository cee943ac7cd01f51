"""90% prediction intervals of the Blackhole model: per op, layer, step, sample, and deltas.

Two error sources, both from the fit (``fit.Calibration``):
  * parameter uncertainty: the Laplace covariance of theta pushed through the model's Jacobian
    (``jax.jacfwd``), var = g^T Cov g with g = d log(value) / d theta (for a delta between two
    settings, g is taken of the difference, so parameters both settings share cancel);
  * model error: each op's prediction is off by a relative error of sd ``sigma`` (the fit's
    per-row error), the same in every layer and in every setting (it belongs to the op's model,
    not to a run). A total over ops adds them per op: var = sigma^2 sum_op (m t_op)^2 with m the
    op's multiplicity (layers, steps); a delta carries sigma^2 sum_op (m (t_a,op - t_b,op))^2, so
    ops a change leaves alone contribute nothing.
Intervals use the Student-t quantile with the fit's degrees of freedom; positive quantities are
intervals in log space (value x exp(+-z sd)), deltas are symmetric.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from costmodel.blackhole.fit import FAST_COMPILE, Calibration, from_unconstrained
from costmodel.blackhole.graph import BlackholeConfig, layer_op_specs, step_breakdown, validate
from costmodel.hardware import Blackhole
from jaxref.config import ExpertConfig

LEVEL = 0.90
TOTALS = ("layer_us", "step_us", "step_full_us", "sample_us")


def quantile(cal: Calibration, level: float = LEVEL) -> float:
    """Two-sided Student-t quantile for ``level`` with the calibration's degrees of freedom."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must lie in (0, 1)")
    return float(stats.t.ppf(0.5 + level / 2.0, cal.dof))


@functools.partial(jax.jit, static_argnames=("cfg",), compiler_options=FAST_COMPILE)
def _values_and_jacobian(theta, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig):
    def f(th):
        out = step_breakdown(hw, from_unconstrained(th), bc, cfg=cfg)
        return {"ops": out["ops"], **{k: out[k] for k in TOTALS}}

    return f(theta), jax.jacfwd(f)(theta)


def _multiplicity(cfg: ExpertConfig) -> dict[str, float]:
    return {"layer_us": 1.0, "step_us": float(cfg.num_layers), "step_full_us": float(cfg.num_layers),
            "sample_us": float(cfg.num_layers * cfg.num_steps)}


def model_values(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig) -> dict:
    """Values (us) and theta-gradients of every op and total at ``bc`` (validated):
    {"ops": {op: (value, grad [P])}, "kinds": {op: spec class name}, "layer_us" | ...: (value, grad)}."""
    validate(hw, bc, cfg=cfg)
    vals, jac = jax.device_get(_values_and_jacobian(jnp.asarray(cal.theta, jnp.float32), hw, bc, cfg=cfg))
    specs = layer_op_specs(bc, cfg=cfg)  # graph order (pytree dicts come back key-sorted)
    out = {"ops": {k: (float(vals["ops"][k]), np.asarray(jac["ops"][k], np.float64)) for k in specs},
           "kinds": {k: type(s).__name__ for k, s in specs.items()}}
    for k in TOTALS:
        out[k] = (float(vals[k]), np.asarray(jac[k], np.float64))
    return out


def _log_interval(value: float, grad: np.ndarray, model_var_log: float, cal: Calibration, z: float):
    g = grad / value
    sd = math.sqrt(float(g @ cal.cov @ g) + model_var_log)
    return value * math.exp(-z * sd), value * math.exp(z * sd)


def intervals(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig,
              level: float = LEVEL) -> dict:
    """Predictions with intervals at one setting.

    Returns {"ops": {op: (value, lo, hi)}, "layer_us" | "step_us" | "step_full_us" | "sample_us":
    (value, lo, hi)}, all in us.
    """
    z = quantile(cal, level)
    mv = model_values(cal, hw, bc, cfg=cfg)
    s2 = cal.sigma**2
    out = {"ops": {k: (v, *_log_interval(v, g, s2, cal, z)) for k, (v, g) in mv["ops"].items()}}
    for k, m in _multiplicity(cfg).items():
        v, g = mv[k]
        model_var = s2 * sum((m * t / v) ** 2 for t, _ in mv["ops"].values())
        out[k] = (v, *_log_interval(v, g, model_var, cal, z))
    return out


def delta_intervals(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, base: BlackholeConfig, *,
                    cfg: ExpertConfig, hw_base: Blackhole | None = None, level: float = LEVEL) -> dict:
    """``bc`` minus ``base``, with correlated intervals (shared parameters and shared op-model errors cancel).

    Returns {"ops": {op: (delta, lo, hi)}, "layer_us" | ...: (delta, lo, hi)} in us; an op present
    in only one setting (fused add+norm) counts as 0 in the other.
    """
    z = quantile(cal, level)
    a = model_values(cal, hw, bc, cfg=cfg)
    b = model_values(cal, hw if hw_base is None else hw_base, base, cfg=cfg)
    zero = (0.0, np.zeros_like(cal.theta))
    names = list(a["ops"]) + [k for k in b["ops"] if k not in a["ops"]]
    s2 = cal.sigma**2

    def interval(va, ga, vb, gb, model_var):
        g = ga - gb
        sd = math.sqrt(float(g @ cal.cov @ g) + model_var)
        return va - vb, va - vb - z * sd, va - vb + z * sd

    def op_model_var(n, m):
        ta, tb = a["ops"].get(n, zero)[0], b["ops"].get(n, zero)[0]
        if a["kinds"].get(n) == b["kinds"].get(n):  # same op model: its relative error is shared
            return s2 * (m * (ta - tb)) ** 2
        return s2 * m**2 * (ta**2 + tb**2)  # different kernels (decode vs standard SDPA): independent

    out = {"ops": {}}
    for k in names:
        (va, ga), (vb, gb) = a["ops"].get(k, zero), b["ops"].get(k, zero)
        out["ops"][k] = interval(va, ga, vb, gb, op_model_var(k, 1.0))
    for k, m in _multiplicity(cfg).items():
        out[k] = interval(*a[k], *b[k], sum(op_model_var(n, m) for n in names))
    return out
