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

Refitting on new rows (a profiler report) uses a stored calibration as the prior instead
(``fit(rows, prior=cal)``: centre its theta, precision its inverse covariance), so rows that say
little about a parameter cannot move it far. Every parameter stays inside ``PARAM_BOUNDS``
(closed physical ranges; a Levenberg-Marquardt step that leaves them is rejected); a parameter
whose posterior precision comes mostly from the prior (data share < ``PIN_SHARE``) is not pinned
by the rows and is held at its prior value in a second pass. Such a refit also takes the stored
model discrepancy (``fit(rows, prior=cal, discrepancy="stored")``): the rows of one op kind share
one model-form error (``kind_whitening``), so a kind the model misprices moves a shared parameter
no more than one observation of that error would, however many layers repeat the op. ``info``
lists rows used, parameters pinned, residual error and warnings when the fit is poor.
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

from costmodel.blackhole.discrepancy import Discrepancy, load_discrepancy, op_kind
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
from costmodel.blackhole.rows import Row, StepSpec, load_rows, predict
from costmodel.compile_options import SMALL_COMPILE, jit
from costmodel.hardware import Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.validation import atomic_write_text, dumps_strict, input_file

PRIOR_SD = math.log(10.0)  # sd of the prior per unconstrained coordinate
SIGMA_REF = 0.05  # log-space row error assumed while fitting (weighs the prior); re-estimated after


# Closed physical range of each parameter: (lo, hi, why). The fit never leaves them; a loaded
# calibration outside them is refused.
PARAM_BOUNDS = {
    "dram_eff": (1e-3, DRAM_EFF_MAX, "a fraction of peak, at most the best measured read (500/512 GB/s)"),
    "core_read_tiles_per_s": (1e5, 2e8, "one core's page requests: its 86.4 GB/s NoC link over a bfp4 tile"),
    "dram_latency_us": (0.05, 10.0, "a DRAM round trip: ~100 to ~10000 cycles at 1.35 GHz"),
    "overlap_exponent": (1.0 + 1e-6, 50.0, "q-norm between serial (1) and perfect overlap (large)"),
    "mm_block_sync_us": (1e-3, 50.0, "a multicast handshake: cycles to tens of us"),
    "eltwise_cycles_per_tile": (1.0, 1e4, "an elementwise pass over 1024 elements"),
    "launch_matmul_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "launch_norm_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "launch_rope_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "launch_heads_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "launch_fill_cache_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "launch_eltwise_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "dispatch_us": (0.05, 100.0, "an op's dispatch: under 100 us"),
    "dispatch_core_us": (1e-4, 1.0, "dispatch per core: at most 1 us (110 us for a full grid)"),
    "launch_sdpa_us": (0.05, 100.0, "a kernel's fixed time: under 100 us"),
    "trace_overlap_us": (1e-4, 100.0, "time hidden per replayed op: below a launch cost"),
    "host_bytes_per_s": (1e6, 64e9, "host transfers: at most PCIe 5.0 x16 (64 GB/s)"),
    "host_proj_us": (1.0, 1e6, "two small host matmuls per step: 1 us to 1 s"),
}
PIN_SHARE = 0.5  # a parameter is pinned when the rows give at least half of its posterior precision
POOR_RMS_LOG_ERROR = 0.25  # rms |log(pred / measured)| above this (~28%): the fit is poor
MIN_ROWS = 3


def check_params(p: FitParams | dict, *, where: str = "params") -> None:
    """Raise ValueError unless every parameter is a finite number inside ``PARAM_BOUNDS``."""
    d = p if isinstance(p, dict) else params_to_dict(p)
    for k in PARAM_NAMES:
        v = d[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ValueError(f"{where}.{k}={v!r}: expected a finite number")
        lo, hi, why = PARAM_BOUNDS[k]
        if not lo <= v <= hi:
            raise ValueError(f"{where}.{k}={v!r}: expected a value in [{lo:g}, {hi:g}] ({why})")


def _in_bounds(theta) -> bool:
    if not np.all(np.isfinite(theta)):
        return False
    p = params_to_dict(from_unconstrained(jnp.asarray(theta, jnp.float32)))
    return all(PARAM_BOUNDS[k][0] <= v <= PARAM_BOUNDS[k][1] for k, v in p.items())


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


# run a few dozen times per fit, compiled by the hundreds: SMALL_COMPILE. One program per op spec (and per
# step configuration), not one per row set: every fit, refit and validation of any rows holding a spec
# reuses its compilation (in the process, and across processes through JAX's persistent cache), where a
# program over a whole row set would be compiled again for each new set of rows.
@functools.partial(jit, options=SMALL_COMPILE, static_argnames=("specs", "cfg"))
def _log_us_and_grad(theta, hw: Blackhole, *, specs: tuple, cfg: ExpertConfig):
    """log modelled us [len(specs)] of op specs that share one program (one op spec, or the step rows
    of one configuration, which share its layer graph) and its Jacobian w.r.t. theta [len(specs), P]."""
    f = lambda th: jnp.log(predict(hw, from_unconstrained(th), specs, cfg=cfg))
    if len(specs) == 1:  # one output: reverse mode, whose graph compiles ~30% faster than jacfwd's P tangents
        v, g = jax.value_and_grad(lambda th: f(th)[0])(theta)
        return v[None], g[None]
    return f(theta), jax.jacfwd(f)(theta)


def residuals_and_jacobian(theta, hw: Blackhole, targets, *, specs: tuple, cfg: ExpertConfig):
    """Residuals [rows] and their Jacobian [rows, P] w.r.t. theta (numpy float32), assembled from one
    compiled program per distinct op spec (the step rows: one per configuration; ``_log_us_and_grad``). Held-out rows are
    weighted out by the caller, so every leave-one-group-out refit of the same rows reuses them."""
    groups: dict = {}
    for i, s in enumerate(specs):
        key = ("step", s.bc) if isinstance(s, StepSpec) else ("op", s)
        groups.setdefault(key, []).append(i)
    log_us, J = np.zeros(len(specs), np.float32), np.zeros((len(specs), len(PARAM_NAMES)), np.float32)
    for idx in groups.values():
        members = tuple(dict.fromkeys(specs[i] for i in idx))
        v, g = (np.asarray(a) for a in _log_us_and_grad(theta, hw, specs=members, cfg=cfg))
        at = [members.index(specs[i]) for i in idx]
        log_us[idx], J[idx] = v[at], g[at]
    return log_us - np.log(np.asarray(targets, np.float32)), J


def _levenberg_marquardt(theta, theta0, whiten, hw, targets, *, specs, cfg, steps: int, precision=None,
                         free=None):
    """Minimise |W r|^2 + SIGMA_REF^2 (theta - theta0)^T precision (theta - theta0) over the ``free``
    coordinates (default: all), W = ``whiten`` (``kind_whitening``: ``W @ x``), rejecting steps that
    leave ``PARAM_BOUNDS``; returns theta, r, J (all rows)."""
    P = len(theta0)
    prec = np.eye(P) / PRIOR_SD**2 if precision is None else np.asarray(precision, np.float64)
    lam = SIGMA_REF**2 * prec
    free = np.ones(P, bool) if free is None else np.asarray(free, bool)

    def evaluate(th):
        r, J = (np.asarray(a, np.float64) for a in residuals_and_jacobian(jnp.asarray(th, jnp.float32), hw, targets,
                                                                             specs=specs, cfg=cfg))
        d = np.asarray(th) - theta0
        return r, J, float(np.sum((whiten @ r) ** 2) + d @ lam @ d)

    theta = np.asarray(theta, np.float64)
    r, J, loss = evaluate(theta)
    mu = 1e-3
    for _ in range(steps):
        Jw = (whiten @ J)[:, free]
        A = Jw.T @ Jw + lam[np.ix_(free, free)]
        g = Jw.T @ (whiten @ r) + (lam @ (theta - theta0))[free]
        cand = theta.copy()
        cand[free] = theta[free] - np.linalg.solve(A + mu * np.diag(np.diag(A)), g)
        ok = _in_bounds(cand)
        r2, J2, loss2 = evaluate(cand) if ok else (None, None, math.inf)
        if ok and np.all(np.isfinite(r2)) and loss2 < loss:
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

    def prior_share(self) -> np.ndarray:
        """[P, P] the weak prior's share of ``cov``: Cov P0 Cov, P0 = I / PRIOR_SD^2.

        With D the rows' precision, cov = (D + P0)^-1 = Cov D Cov + Cov P0 Cov: the first term is what
        the rows' scatter leaves of theta, the second what only the prior's width (a factor 10 per
        coordinate, a regulariser, not a measured spread) sets; it dominates along directions the rows
        do not pin. A refit with a calibration as its prior has precision D' + D + P0 (that
        calibration's rows and the same weak prior), so P0 is its weak prior too."""
        return self.cov @ self.cov / PRIOR_SD**2

    def to_json(self) -> dict:
        return {"params": params_to_dict(self.params), "theta": [float(v) for v in self.theta],
                "cov": [[float(v) for v in row] for row in self.cov], "sigma": self.sigma, "dof": self.dof,
                "info": self.info}

    @classmethod
    def from_json(cls, doc) -> Calibration:
        """Validated calibration from its JSON document; ValueError names the key, value and expectation."""
        if not isinstance(doc, dict):
            raise ValueError(f"the document is a JSON {type(doc).__name__}; expected an object with keys "  # noqa: TRY004
                             "params, theta, cov, sigma, dof")
        for key in ("params", "theta", "cov", "sigma", "dof"):
            if key not in doc:
                raise ValueError(f"lacks key {key!r}; write it with `python -m costmodel.blackhole calibrate --write`")
        params, P = doc["params"], len(PARAM_NAMES)
        if not isinstance(params, dict):
            raise ValueError(f"params={params!r}: expected an object of {P} parameters")  # noqa: TRY004
        if set(params) != set(PARAM_NAMES):
            raise ValueError(f"params: keys {sorted(set(params) ^ set(PARAM_NAMES))} missing or unknown; expected "
                             f"{sorted(PARAM_NAMES)}")
        check_params(params)
        theta = _matrix("theta", doc["theta"], (P,))
        cov = _matrix("cov", doc["cov"], (P, P))
        for key in ("sigma", "dof"):
            v = doc[key]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{key}={v!r}: expected a finite number > 0")
        check_uncertainty(cov, float(doc["sigma"]), float(doc["dof"]))
        if not isinstance(doc.get("info", {}), dict):
            raise ValueError(f"info={str(doc['info'])[:60]!r}: expected an object (the fit summary)")  # noqa: TRY004
        p = params_from_dict(params)
        back = np.asarray(to_unconstrained(p), np.float64)
        if not np.allclose(back, theta, rtol=1e-4, atol=1e-3):
            k = PARAM_NAMES[int(np.argmax(np.abs(back - theta)))]
            raise ValueError(f"theta: entry of {k} does not match params.{k}={params[k]!r}; expected theta = the "
                             "unconstrained params (fit.to_unconstrained)")
        return cls(p, theta, cov, float(doc["sigma"]), float(doc["dof"]), doc.get("info", {}))


# A fit's sigma is a log-error sd: at e^20 per row a fit describes nothing (absurd durations give ~14),
# and far above it the intervals' exp(t sigma) overflows.
MAX_SIGMA = 20.0


def check_uncertainty(cov: np.ndarray, sigma: float, dof: float) -> None:
    """The bounds every fitted uncertainty obeys; ValueError names the entry that breaks one.

    ``cov`` = (J^T J / sigma^2 + prior precision)^-1 is symmetric positive-definite and, the prior
    being ``PRIOR_SD`` per coordinate (or a stored calibration, itself so bounded), no variance
    exceeds ``PRIOR_SD``^2; ``dof`` = max(rows - effective parameters, 1).
    """
    if not np.allclose(cov, cov.T, rtol=1e-6, atol=1e-12) or np.any(np.linalg.eigvalsh(0.5 * (cov + cov.T)) <= 0):
        raise ValueError("cov: expected a symmetric positive-definite matrix")
    worst = int(np.argmax(np.diag(cov)))
    if cov[worst, worst] > PRIOR_SD**2 * (1 + 1e-6):
        raise ValueError(f"cov: variance of {PARAM_NAMES[worst]} is {cov[worst, worst]:.3g}; expected <= the prior's "
                         f"{PRIOR_SD**2:.3g} (sd ln 10 per unconstrained coordinate): a fit never widens its prior")
    if not 0 < sigma <= MAX_SIGMA:
        raise ValueError(f"sigma={sigma!r}: expected a log-error sd in (0, {MAX_SIGMA:g}]")
    if not (math.isfinite(dof) and dof >= 1):
        raise ValueError(f"dof={dof!r}: expected a finite number >= 1 (rows - effective parameters, at least 1)")


def _json_int(text: str):
    """JSON integers as Python ints up to 18 digits, else as floats (1e400 -> inf): a huge integer then
    fails the finite checks with its key instead of overflowing (or exceeding Python's digit limit)."""
    return int(text) if len(text.lstrip("-")) <= 18 else float(text)


def _matrix(key: str, value, shape: tuple[int, ...]) -> np.ndarray:
    try:
        a = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{key}={str(value)[:60]!r}: expected numbers of shape {list(shape)}") from None
    if a.shape != shape:
        raise ValueError(f"{key}: shape {list(a.shape)}; expected {list(shape)}")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{key}: non-finite entries; expected finite numbers")
    return a


def load_calibration(path: str | pathlib.Path = CALIBRATION_PATH) -> Calibration:
    """A stored calibration (default: ``costmodel/data/calibration.json``); ValueError names the file."""
    path = input_file(path, name="calibration", expected="a calibration JSON file",
                      hint="run `python -m costmodel.blackhole calibrate --write` or pass a calibration JSON")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_int=_json_int)
    except UnicodeDecodeError as e:
        raise ValueError(f"calibration={str(path)!r}: not text ({e.reason} at byte {e.start}); expected JSON") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"calibration={str(path)!r}: invalid JSON at line {e.lineno}, column {e.colno} "
                         f"({e.msg})") from None
    except RecursionError:
        raise ValueError(f"calibration={str(path)!r}: JSON nested deeper than Python's reader allows; expected a "
                         "calibration object (params, theta, cov, sigma, dof, info)") from None
    try:
        return Calibration.from_json(doc)
    except ValueError as e:
        raise ValueError(f"calibration={str(path)!r}: {e}") from None


@dataclasses.dataclass(frozen=True, eq=False)
class KindWhitening:
    """The whitening W [rows, rows] of ``kind_whitening``, applied as ``W @ x`` (x [rows] or [rows, k])
    without forming it: diag(``weights``) less ``a`` on every (i, j) pair of one group's ``rows`` (a
    report's rows may number 10^5, where a dense W would take n^2 floats)."""

    weights: np.ndarray  # [rows]
    groups: tuple[tuple[np.ndarray, float], ...]  # (row indices, a) per op kind

    def __matmul__(self, x) -> np.ndarray:
        x = np.asarray(x, np.float64)
        out = self.weights.reshape((-1,) + (1,) * (x.ndim - 1)) * x
        for idx, a in self.groups:
            out[idx] -= a * x[idx].sum(0)
        return out


def kind_whitening(rows: list[Row], weights: np.ndarray, discrepancy: Discrepancy | None) -> KindWhitening:
    """Whitening W [rows, rows] of the log residuals: |W r|^2 is the fit's loss in units of SIGMA_REF^2.

    Without a ``discrepancy`` W = diag(``weights``): every fitted row an independent observation. With
    one, the fitted rows of one op kind (``discrepancy.op_kind``) share a model-form error b ~ N(0,
    tau^2), tau^2 the largest ``Discrepancy.form_var`` of the kind's rows (its class, plus the
    extrapolation term where the stored fit never saw the kind; not the start skew, which is each
    row's own): r_i = e_i + b, e_i ~ N(0, s^2), s =
    SIGMA_REF. Their covariance s^2 I + tau^2 11^T has the whitening s C^(-1/2) = I - c 11^T / n,
    c = 1 - s / sqrt(s^2 + n tau^2): the kind's mean residual weighs as one observation of sd
    ~tau however many rows repeat it (a report runs each op once per layer), the spread within the
    kind (its shapes) at full weight. ``weights`` [rows] is 1 for a fitted row, 0 otherwise.
    """
    weights = np.asarray(weights, np.float64)
    if discrepancy is None:
        return KindWhitening(weights, ())
    kinds: dict[str, list[int]] = {}
    for i, (row, w) in enumerate(zip(rows, weights)):
        if w > 0:
            kinds.setdefault(op_kind(row.spec), []).append(i)
    groups = []
    for idx in kinds.values():
        # a kind scattering less than sigma (a negative tau) shares no error beyond its rows' own
        tau2 = max(0.0, *(discrepancy.form_var(rows[i].spec, rows[i].target) for i in idx))
        c = 1.0 - SIGMA_REF / math.sqrt(SIGMA_REF**2 + len(idx) * tau2)
        groups.append((np.asarray(idx), c / len(idx)))
    return KindWhitening(weights, tuple(groups))


def fit(rows: list[Row] | None = None, *, hw: Blackhole | None = None, cfg: ExpertConfig | None = None,
        init: FitParams | None = None, hold_out: frozenset[str] = frozenset(), steps: int = 60,
        prior: Calibration | None = None, discrepancy: Discrepancy | str | None = None) -> Calibration:
    """Fit the 'calibration' rows of ``rows`` (default: every stored row) outside the groups in
    ``hold_out``, from ``init`` (default: the prior), with ``steps`` Levenberg-Marquardt iterations.

    ``prior``: a calibration to refit from (its theta the prior centre, its inverse covariance the
    prior precision; default: the weak prior around ``params.initial_params``); parameters the
    rows do not pin are then held at the prior's values. ``discrepancy`` ('stored':
    ``data/discrepancy.json``): the rows of one op kind share one model-form error of that sd
    (``kind_whitening``), so a kind's level counts as one observation however often a report
    repeats it. Every row (held out, validation or not)
    is evaluated, weighted 0 unless fitted, so all folds of one row set share one compiled
    Jacobian. Returns a ``Calibration`` whose ``info`` lists the rows fitted (``fitted_to``),
    ``pinned`` / ``held_at_prior`` parameters and ``warnings``; raises ValueError if the result is
    not finite.
    """
    rows = load_rows() if rows is None else rows
    weights = np.asarray([1.0 if (r.role == "calibration" and r.group not in hold_out) else 0.0 for r in rows])
    n = int(weights.sum())
    if n == 0:
        raise ValueError(f"rows: no 'calibration' row left to fit (hold_out={sorted(hold_out)})")
    bad = [f"{r.table}/{r.name}={r.target!r}" for r in rows if not (math.isfinite(r.target) and r.target > 0)]
    if bad:
        raise ValueError(f"rows: measured times must be finite and > 0 (us); got {bad[:3]}")
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    P = len(PARAM_NAMES)
    if prior is None:
        theta0, prec0 = np.asarray(to_unconstrained(initial_params()), np.float64), np.eye(P) / PRIOR_SD**2
    else:
        theta0, prec0 = np.asarray(prior.theta, np.float64), np.linalg.inv(prior.cov)
    start = theta0 if init is None else np.asarray(to_unconstrained(init), np.float64)
    specs = tuple(r.spec for r in rows)
    targets = jnp.asarray([r.target for r in rows], jnp.float32)
    disc = load_discrepancy() if discrepancy == "stored" else discrepancy
    whiten = kind_whitening(rows, weights, disc)
    lm = functools.partial(_levenberg_marquardt, whiten=whiten, hw=hw, targets=targets, specs=specs, cfg=cfg,
                           steps=steps, precision=prec0)
    theta, r, J = lm(start, theta0)
    keep = weights > 0

    def posterior(r, J):
        r, J = (whiten @ r)[keep], (whiten @ J)[keep]
        JtJ = J.T @ J
        # sigma depends on the effective parameter count and vice versa: a few fixed-point rounds
        sigma2, p_eff = float(r @ r) / max(n - P, 1), float(P)
        for _ in range(20):
            p_eff = float(np.trace(JtJ @ np.linalg.inv(JtJ + sigma2 * prec0)))
            sigma2 = max(float(r @ r) / max(n - p_eff, 1.0), 1e-12)
        cov = np.linalg.inv(JtJ / sigma2 + prec0)
        share = np.diag(cov @ (JtJ / sigma2))  # fraction of each parameter's posterior precision from the rows
        return r, sigma2, p_eff, cov, share

    _, sigma2, p_eff, cov, share = posterior(r, J)
    pinned = share >= PIN_SHARE
    if prior is not None and not pinned.all():  # hold what the rows do not pin at the prior
        start2 = np.where(pinned, theta, theta0)
        theta, r, J = lm(start2, theta0, free=pinned) if pinned.any() else (start2, *lm(start2, theta0, steps=0)[1:])
        _, sigma2, p_eff, cov, _ = posterior(r, J)
    r_fit = r[keep]
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(cov)) and math.isfinite(sigma2)):
        raise ValueError("rows: the fit produced non-finite parameters; check the measured times")
    params = params_from_dict({k: float(v) for k, v in params_to_dict(from_unconstrained(jnp.asarray(theta))).items()})
    check_params(params, where="fitted params")
    rms = float(np.sqrt(np.mean(r_fit**2)))
    warnings = []
    if rms > POOR_RMS_LOG_ERROR:
        warnings.append(f"poor fit: rms log error {rms:.3f} (x{math.exp(rms):.2f}) > {POOR_RMS_LOG_ERROR} "
                        f"(x{math.exp(POOR_RMS_LOG_ERROR):.2f})")
    if n < MIN_ROWS:
        warnings.append(f"only {n} rows fitted (< {MIN_ROWS}): the residual error is not an estimate")
    info = {"n_rows": n, "n_params": P, "effective_params": p_eff, "rms_log_error": rms,
            "max_abs_log_error": float(np.max(np.abs(r_fit))), "lm_steps": steps, "hold_out": sorted(hold_out),
            "prior": "weak (params.initial_params)" if prior is None else "calibration",
            "pinned": [k for k, pin in zip(PARAM_NAMES, pinned) if pin],
            "held_at_prior": [] if prior is None else [k for k, pin in zip(PARAM_NAMES, pinned) if not pin],
            "warnings": warnings,
            "fitted_to": [f"{x.table}/{x.name}" for x, w in zip(rows, weights) if w > 0]}
    cal = Calibration(params, theta, cov, math.sqrt(sigma2), max(n - p_eff, 1.0), info)
    check_uncertainty(cal.cov, cal.sigma, cal.dof)  # what load_calibration would refuse is not written
    return cal


def report(fit_params: FitParams, rows: list[Row] | None = None, *, hw: Blackhole | None = None,
           cfg: ExpertConfig | None = None) -> list[dict]:
    """Predicted vs measured per row: [{table, name, group, role, lo, hi, predicted, error, source}]."""
    rows = load_rows() if rows is None else rows
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    pred = jax.device_get(jit(predict, fast=True, static_argnames=("specs", "cfg"))(
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
    # strict JSON (no NaN / Infinity), replaced atomically: a failed write leaves the stored file as it was
    atomic_write_text(path, dumps_strict(doc, indent=1) + "\n")
