"""90% prediction intervals of the Blackhole model: per op, layer, step, sample, and deltas.

Two error sources, both from the fit (``fit.Calibration``):
  * parameter uncertainty: the Laplace covariance of theta pushed through the model's Jacobian
    (``jax.jacfwd``), var = g^T Cov g with g = d log(value) / d theta (for a delta between two
    settings, g is taken of the difference, so parameters both settings share cancel); where an op
    lies outside the fitted rows, less the weak prior's share of it (``param_var``): there the
    tau_extrap below, measured on held-out rows that extrapolated, stands in for that share;
  * model error: each op's prediction is off by a relative error of sd s_op, the same in every
    layer and in every setting (it belongs to the op's model, not to a run), with
    s_op^2 = sigma^2 (the fit's per-row error) + tau^2, the model discrepancy estimated from
    held-out rows (``discrepancy``, ``data/discrepancy.json``; without that file s_op = sigma):
    tau_class, or tau_extrap of the op's config family where the op lies outside the fitted rows
    (an unseen op kind, format, flag or time range). A total over ops adds them per op: var =
    sum_op s_op^2 (m t_op)^2 with m the op's multiplicity (layers, steps); a delta of one op model
    carries the larger s^2 of its two sides times (m (t_a,op - t_b,op))^2 (an unseen variant of a
    fitted op extends its mechanism), so ops a change leaves alone contribute nothing.
Intervals use the Student-t quantile with the fit's degrees of freedom; positive quantities are
intervals in log space (value x exp(+-z sd)), deltas are symmetric. The linearisation is exact
for a linear model; the model has max / q-norm kinks, so ``draws=N`` propagates the same Laplace
posterior by Monte Carlo instead (N parameter draws, one vmapped evaluation per setting).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from costmodel.blackhole.discrepancy import Discrepancy, load_discrepancy
from costmodel.blackhole.fit import Calibration, from_unconstrained
from costmodel.blackhole.graph import BlackholeConfig, layer_op_specs, step_breakdown, validate
from costmodel.compile_options import jit
from costmodel.hardware import Blackhole
from jaxref.config import ExpertConfig

LEVEL = 0.90
TOTALS = ("layer_us", "step_us", "step_full_us", "sample_us")


def quantile(cal: Calibration, level: float = LEVEL) -> float:
    """Two-sided Student-t quantile for ``level`` with the calibration's degrees of freedom."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level={level} must lie in (0, 1)")
    return float(stats.t.ppf(0.5 + level / 2.0, cal.dof))


def _outputs(theta, hw: Blackhole, bc: BlackholeConfig, cfg: ExpertConfig) -> dict:
    out = step_breakdown(hw, from_unconstrained(theta), bc, cfg=cfg)
    return {"ops": out["ops"], **{k: out[k] for k in TOTALS}}


@functools.partial(jit, fast=True, static_argnames=("cfg",))
def _values_and_jacobian(theta, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig):
    f = functools.partial(_outputs, hw=hw, bc=bc, cfg=cfg)
    return f(theta), jax.jacfwd(f)(theta)


@functools.partial(jit, fast=True, static_argnames=("cfg",))
def _value_samples(thetas, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig):
    return jax.vmap(lambda th: _outputs(th, hw, bc, cfg))(thetas)


def _multiplicity(cfg: ExpertConfig) -> dict[str, float]:
    return {"layer_us": 1.0, "step_us": float(cfg.num_layers), "step_full_us": float(cfg.num_layers),
            "sample_us": float(cfg.num_layers * cfg.num_steps)}


def theta_draws(cal: Calibration, draws: int, *, seed: int = 0, prior_share: bool = True) -> np.ndarray:
    """[draws, P] samples of theta ~ N(theta_hat, Cov) (the Laplace posterior), drawn as theta_hat + a
    + b with a ~ N(0, Cov - S) (the rows' share) and b ~ N(0, S) (the weak prior's share S,
    ``Calibration.prior_share``); ``prior_share=False``: theta_hat + a, the same a for the same
    ``seed`` (what an op outside the fitted rows is evaluated at: ``param_var``)."""
    if draws < 2:
        raise ValueError(f"draws={draws} must be >= 2 for Monte Carlo propagation")
    rng, share = np.random.default_rng(seed), cal.prior_share()
    zero = np.zeros_like(cal.theta)
    a = rng.multivariate_normal(zero, cal.cov - share, size=draws, method="eigh")
    b = rng.multivariate_normal(zero, share, size=draws, method="eigh")
    return cal.theta + a + (b if prior_share else 0.0)


def model_values(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig,
                 thetas: np.ndarray | None = None) -> dict:
    """Values (us) and parameter sensitivity of every op and total at ``bc`` (validated):
    {"ops": {op: (value, grad [P], samples [D] or None)}, "kinds": {op: spec class name},
    "specs": {op: spec}, "layer_us" | ...: (value, grad, samples)}; samples are the values at
    ``thetas`` [D, P] if given."""
    validate(hw, bc, cfg=cfg)
    vals, jac = jax.device_get(_values_and_jacobian(jnp.asarray(cal.theta, jnp.float32), hw, bc, cfg=cfg))
    smp = None if thetas is None else jax.device_get(
        _value_samples(jnp.asarray(thetas, jnp.float32), hw, bc, cfg=cfg))

    def entry(v, g, s):
        return float(v), np.asarray(g, np.float64), None if s is None else np.asarray(s, np.float64)

    specs = layer_op_specs(bc, cfg=cfg)  # graph order (pytree dicts come back key-sorted)
    out = {"ops": {k: entry(vals["ops"][k], jac["ops"][k], None if smp is None else smp["ops"][k]) for k in specs},
           "kinds": {k: type(s).__name__ for k, s in specs.items()}, "specs": specs}
    for k in TOTALS:
        out[k] = entry(vals[k], jac[k], None if smp is None else smp[k])
    return out


def value_samples(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig,
                  thetas: np.ndarray) -> dict:
    """Values (us) at parameter draws ``thetas`` [D, P]: {"ops": {op: [D]}, "layer_us" | "step_us" |
    "step_full_us" | "sample_us": [D]} (no validation: the caller validates ``bc``)."""
    out = jax.device_get(_value_samples(jnp.asarray(thetas, jnp.float32), hw, bc, cfg=cfg))
    return {"ops": {k: np.asarray(v, np.float64) for k, v in out["ops"].items()},
            **{k: np.asarray(out[k], np.float64) for k in TOTALS}}


def param_var(cal: Calibration, g: np.ndarray, kept: np.ndarray | None = None,
              samples: np.ndarray | None = None) -> float:
    """Variance from parameter uncertainty of a quantity with gradient ``g`` [P] (d quantity / d
    theta): g^T Cov g (linearised) or the variance of its Monte Carlo ``samples`` [D], with the weak
    prior's share (``Calibration.prior_share``) counted through ``kept`` [P] (default ``g``) only:
    the gradient of the part of the quantity from ops inside the fitted rows.

    Why: along a direction the fitted rows do not pin (a kernel-only fixed time that only traced
    rows, dispatch included, constrain) the Laplace variance is the prior's factor-10 width, not a
    measured spread; an op kind no row was fitted to then gets a prior-width interval. Such an op
    carries the discrepancy's tau_extrap instead (``op_error_var``), estimated from held-out
    extrapolating rows whose parameter variance is this one (``holdout.validate_rows``), so the
    extrapolation term is measured, not assumed. Callers pass ``kept`` = 0 for an op that
    extrapolates (``extrapolates``) and the interpolating ops' gradients for a sum of ops."""
    share = cal.prior_share()
    kept = g if kept is None else kept
    total = float(g @ cal.cov @ g) if samples is None else float(np.var(samples))
    return max(total - float(g @ share @ g), 0.0) + float(kept @ share @ kept)


def extrapolates(disc: Discrepancy | None, spec, value: float) -> bool:
    """The op lies outside the rows ``disc`` was judged against (never without a discrepancy: then
    nothing stands in for the prior's share of its parameter variance)."""
    return disc is not None and disc.domain.extrapolates(spec, value) is not None


def kept_grad(disc: Discrepancy | None, g: np.ndarray, *ops) -> np.ndarray:
    """``g`` if no op of ``ops`` ((spec, value us) pairs) extrapolates, else 0: the gradient through
    which ``param_var`` counts the weak prior's share of one op's (or one change's) parameter variance."""
    return np.zeros_like(g) if any(extrapolates(disc, spec, v) for spec, v in ops) else g


def _log_interval(cal: Calibration, z: float, value: float, grad, samples, model_var_log: float, kept):
    pv = param_var(cal, grad / value, kept / value, None if samples is None else np.log(samples))
    sd = math.sqrt(pv + model_var_log)
    return value * math.exp(-z * sd), value * math.exp(z * sd)


_STORED = object()  # sentinel: read data/discrepancy.json


def _discrepancy(d):
    return load_discrepancy() if d is _STORED else d


def op_error_var(cal: Calibration, disc: Discrepancy | None, spec, value: float) -> float:
    """Model-error variance of one op (log space): sigma^2 + the discrepancy's tau^2 (its class's
    interpolation term, or its config family's extrapolation term where the op lies outside the
    fitted rows, shrunk towards its op kind's where held-out rows of that kind were seen:
    ``Discrepancy.var``). A negative tau (an op kind whose held-out rows scatter less than sigma) takes
    back at most sigma^2: a calibration with a smaller sigma than the fits the discrepancy was estimated
    against (``Discrepancy.floor_var``) keeps a model error of at least 0 plus the repeats' spread."""
    return cal.sigma**2 + (0.0 if disc is None else disc.var(spec, value, sigma2=cal.sigma**2))


def _innermost(spec):
    while hasattr(spec, "inner"):
        spec = spec.inner
    return spec


def own_model_var(cal: Calibration, disc: Discrepancy | None, spec, t: float) -> float:
    """Model-error variance (us^2) of an op present on one side of a delta only (a fusion removes or
    adds it): its own error, nothing cancels."""
    return op_error_var(cal, disc, spec, t) * t**2


def delta_model_var(cal: Calibration, disc: Discrepancy | None, spec_a, ta: float, spec_b, tb: float) -> float:
    """Model-error variance (us^2) of ``tb - ta``, the times of two ops. Different kernels (decode vs
    standard SDPA): independent errors. The same op model: its relative error is shared, and so is
    the mechanism an unseen variant (another format or flag) extends, so its error scales with what
    the change moves."""
    va, vb = op_error_var(cal, disc, spec_a, ta), op_error_var(cal, disc, spec_b, tb)
    if type(_innermost(spec_a)) is not type(_innermost(spec_b)):
        return va * ta**2 + vb * tb**2
    return max(va, vb) * (ta - tb) ** 2


def intervals(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig,
              level: float = LEVEL, draws: int = 0, discrepancy=_STORED) -> dict:
    """Predictions with intervals at one setting (``draws`` > 0: parameter uncertainty propagated
    by Monte Carlo over the Laplace posterior instead of linearised; ``discrepancy``: a
    ``Discrepancy``, None for sigma only, default the stored one).

    Returns {"ops": {op: (value, lo, hi)}, "layer_us" | "step_us" | "step_full_us" | "sample_us":
    (value, lo, hi), "extrapolating": {op: reason}}, times in us.
    """
    disc = _discrepancy(discrepancy)
    z = quantile(cal, level)
    mv = model_values(cal, hw, bc, cfg=cfg, thetas=theta_draws(cal, draws) if draws else None)
    s2 = {k: op_error_var(cal, disc, mv["specs"][k], v) for k, (v, _, _) in mv["ops"].items()}
    extrap = {k for k, (v, _, _) in mv["ops"].items() if extrapolates(disc, mv["specs"][k], v)}
    out = {"ops": {k: (v, *_log_interval(cal, z, v, g, smp, s2[k], kept_grad(disc, g, (mv["specs"][k], v))))
                   for k, (v, g, smp) in mv["ops"].items()}}
    for k, m in _multiplicity(cfg).items():
        v, g, smp = mv[k]
        model_var = sum(s2[n] * (m * t / v) ** 2 for n, (t, _, _) in mv["ops"].items())
        kept = g - m * sum((mv["ops"][n][1] for n in extrap), np.zeros_like(g))
        out[k] = (v, *_log_interval(cal, z, v, g, smp, model_var, kept))
    out["extrapolating"] = {} if disc is None else {
        k: r for k, (v, _, _) in mv["ops"].items() if (r := disc.domain.extrapolates(mv["specs"][k], v))}
    return out


def delta_intervals(cal: Calibration, hw: Blackhole, bc: BlackholeConfig, base: BlackholeConfig, *,
                    cfg: ExpertConfig, hw_base: Blackhole | None = None, level: float = LEVEL,
                    draws: int = 0, discrepancy=_STORED) -> dict:
    """``bc`` minus ``base``, with correlated intervals (shared parameters and shared op-model errors
    cancel; ``draws`` > 0: both settings evaluated at the same Monte Carlo parameter draws).

    Returns {"ops": {op: (delta, lo, hi)}, "layer_us" | ...: (delta, lo, hi)} in us; an op present
    in only one setting (fused add+norm) counts as 0 in the other.
    """
    z = quantile(cal, level)
    thetas = theta_draws(cal, draws) if draws else None
    a = model_values(cal, hw, bc, cfg=cfg, thetas=thetas)
    b = model_values(cal, hw if hw_base is None else hw_base, base, cfg=cfg, thetas=thetas)
    zero = (0.0, np.zeros_like(cal.theta), None if thetas is None else np.zeros(len(thetas)))
    names = list(a["ops"]) + [k for k in b["ops"] if k not in a["ops"]]
    disc = _discrepancy(discrepancy)

    def interval(ea, eb, model_var, moved_out=None):
        # moved_out: the part of the delta's gradient from ops that extrapolate on either side
        (va, ga, sa), (vb, gb, sb) = ea, eb
        g = ga - gb
        kept = g if moved_out is None else g - moved_out
        sd = math.sqrt(param_var(cal, g, kept, None if sa is None else sa - sb) + model_var)
        return va - vb, va - vb - z * sd, va - vb + z * sd

    def extrap(n):
        return any(n in s["ops"] and extrapolates(disc, s["specs"][n], s["ops"][n][0]) for s in (a, b))

    def op_grad(n):
        return a["ops"].get(n, zero)[1] - b["ops"].get(n, zero)[1]

    def op_model_var(n, m):
        ta, tb = a["ops"].get(n, zero)[0], b["ops"].get(n, zero)[0]
        if n in a["ops"] and n in b["ops"]:
            return m**2 * delta_model_var(cal, disc, b["specs"][n], tb, a["specs"][n], ta)
        # an op of one setting only (fused add+norm): its own error
        spec, t = (a["specs"][n], ta) if n in a["ops"] else (b["specs"][n], tb)
        return m**2 * own_model_var(cal, disc, spec, t)

    out = {"ops": {k: interval(a["ops"].get(k, zero), b["ops"].get(k, zero), op_model_var(k, 1.0),
                               op_grad(k) if extrap(k) else None) for k in names}}
    for k, m in _multiplicity(cfg).items():
        moved_out = m * sum((op_grad(n) for n in names if extrap(n)), np.zeros_like(cal.theta))
        out[k] = interval(a[k], b[k], sum(op_model_var(n, m) for n in names), moved_out)
    return out
