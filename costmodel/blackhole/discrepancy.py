"""Model discrepancy: the error of an op model's *form*, estimated from held-out predictions.

The fit's intervals know two things: parameter uncertainty (Laplace covariance) and the scatter
``sigma`` of the rows it was fitted to. Neither sees a mechanism the model lacks: a held-out group
of rows (leave-one-group-out) or another model's ops can be off by much more. This module adds a
per-row model-discrepancy sd ``tau`` (log space) on top:

  var(log t) = param_var + sigma^2 + tau^2,
  tau = tau_class             for a row inside the fitted rows,
        tau_extrap[family]    for a row outside them

(an extrapolating row's param_var without the weak prior's share, ``intervals.param_var``: its
tau_extrap measures what that share only assumed)

* ``tau_class`` (one per op class: matmul, attention, norm, ...) is the maximum-likelihood sd of
  the held-out log residuals r_i ~ N(0, v_i + tau^2) of that class's interpolating rows (v_i =
  param_var + sigma^2), shrunk towards the pooled estimate with ``SHRINK_ROWS`` pseudo-rows
  (a class with two rows says little on its own).
* ``tau_extrap`` is the same estimate over the rows that *extrapolate* (an op kind, ``op_kind``:
  spec type, storage formats, flags, chip, that no fitted row has, or a time outside
  ``RANGE_FACTOR`` x the range of the fitted rows of its class), per config family
  (``op_family``: the op and its program-config kind, ``MatmulSpec[mcast_1d_in0]``), shrunk towards
  its class's, shrunk towards the pooled one. It is how far off the model is where it prices what
  no fitted row showed it, measured on held-out rows that were likewise unseen: a family whose
  mechanism carries to new formats and shapes (the 1D matmul) keeps narrow intervals, one that
  does not (the unary ops' fixed time) gets wide ones, and a family never held out gets its
  class's or the pooled term. It replaces the class term, which is measured on rows of fitted
  kinds only.
* ``tau_kind`` (per op kind, ``op_kind``: the finest tier) is the same estimate over every held-out
  row of one kind, interpolating or not, and ``kind_sources`` the number of sources those rows come
  from. A row of a kind so seen gets it shrunk towards the term above (its class's or its family's)
  with ``SHRINK_ROWS`` pseudo-sources: the rows of one source repeat a few shapes per layer and share
  one build and one run, so it is the sources, not the rows, that are independent. A kind seen in
  one source moves the term a quarter of the way; a kind no held-out row had keeps the term above.

  var(log t) = param_var + sigma^2 + tau^2,
  tau^2 = (n tau_kind^2 + SHRINK_ROWS tau_above^2) / (n + SHRINK_ROWS),  n = kind_sources[kind]
* **Signed taus.** sigma is the scatter of every fitted row pooled; a tier whose held-out rows scatter
  less (a well-priced op kind) would keep sigma's width whatever it measured, its intervals wider than
  its errors. So a tau may be negative, down to -sqrt(``floor_var``), floor_var the fits' sigma^2: the
  tier's variance is then param_var + sigma^2 - tau^2, never below the parameter variance (``tau_mle``,
  ``signed_var``); the shrinkage above averages the signed variances.
* ``repeat_sd_us``: a report runs the same op (the same spec: shapes, formats, config) once per layer,
  and its kernel time still differs between the repeats by a few tenths of a us: the cores' start skew
  (the reports' DEVICE KERNEL FIRST TO LAST START: ~0.2 us after a host gap, ~1.1 us when the op follows
  the previous one back to back) and other run-to-run effects. No op model can price that, whatever its
  mechanisms: it is an additive error of every kernel-only row (a report's DEVICE KERNEL DURATION,
  ``opspecs.KernelSpec``), (repeat_sd_us / predicted us)^2 in log space (``repeat_var``): large for a
  1-2 us op, nothing for a matmul. It is measured, not fitted: the pooled within-spec sd of the
  repeats of ops of at most ``REPEAT_MAX_US`` in the real reports (``repeat_sd``, from each source's
  ``repeat_stats``), and it is added to the base variance of the held-out rows before the taus above
  are estimated, so the taus keep only what the repeats do not explain.

The estimates are stored in ``data/discrepancy.json`` (``python -m costmodel.blackhole validate
--write``) with the kinds and ranges they were judged against; ``intervals`` reads them. Held-out
coverage is reported honestly by ``validation.validate_rows``: the taus used for a group's rows are
estimated without that group (nested leave-one-group-out).
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import numpy as np

from costmodel.blackhole.params import DATA_DIR
from jaxref.validation import atomic_write_text, dumps_strict

DISCREPANCY_PATH = DATA_DIR / "discrepancy.json"
REPEATS_PATH = DATA_DIR / "repeat_spreads.json"  # per real report source: its ops' repeat spread
REPEAT_MAX_US = 5.0  # ops up to this long give the additive spread (``repeat_stats``)
SHRINK_ROWS = 3.0  # pseudo-rows of the pooled tau in each class estimate
RANGE_FACTOR = 2.0  # a time this far outside its class's fitted range counts as extrapolation
TAU_GRID = np.linspace(0.0, 3.0, 3001)  # log-space sd candidates of the 1-D likelihood search


def op_kind(spec) -> str:
    """What an op spec is, for "has the model seen this": its type, every ``*_dtype`` / ``kind`` /
    ``fidelity`` field, every flag that is set, and the board of a ``ChipSpec``.

    >>> op_kind(NormSpec(64, 1536))  # doctest: +SKIP
    'NormSpec[act_dtype=bf16]'
    """
    inner = getattr(spec, "inner", None)
    if inner is not None and not hasattr(spec, "chip"):
        # a KernelSpec: its kernel/dispatch split is tested only where a kernel-only row of the same
        # kind was fitted, so a kernel-only row is a kind of its own
        return f"kernel:{op_kind(inner)}"
    if inner is not None:  # a ChipSpec: the board (and its grid, where the report ran a smaller one)
        grid = getattr(spec, "grid", None)
        return f"{spec.chip}{'' if grid is None else f'/{grid[0]}x{grid[1]}'}:{op_kind(inner)}"
    if not dataclasses.is_dataclass(spec):
        return type(spec).__name__
    parts = []
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if f.name.endswith("_dtype") or f.name in ("kind", "fidelity", "attn_mode"):
            parts.append(f"{f.name}={v}")
        elif isinstance(v, bool) and v:
            parts.append(f.name)
        elif f.name == "batch" and v != 1:  # a batched matmul: its K loop runs once per batch
            parts.append("batched")
        elif f.name == "pairs_per_core" and v != 1:  # a decode core running several pairs one after another
            parts.append("pairs")
        elif isinstance(getattr(v, "kind", None), str):  # a program config: its kind (1D, 2D, ...)
            parts.append(f"{f.name}.kind={v.kind}")
    return f"{type(spec).__name__}[{','.join(parts)}]"


def op_family(spec) -> str:
    """The config family an extrapolation term is pooled in: the innermost spec's type with its
    ``kind`` and its program config's kind, without formats, flags, chip or the kernel-only split
    (those are what an unseen op of the family varies).

    >>> op_family(KernelSpec(MatmulSpec(...)))  # doctest: +SKIP
    'MatmulSpec[mcast_1d_in0]'
    """
    while getattr(spec, "inner", None) is not None:
        spec = spec.inner
    if not dataclasses.is_dataclass(spec):
        return type(spec).__name__
    parts = []
    for f in dataclasses.fields(spec):
        v = getattr(spec, f.name)
        if f.name == "kind":
            parts.append(str(v))
        elif isinstance(getattr(v, "kind", None), str):  # a program config: its kind (1D, 2D, ...)
            parts.append(v.kind)
    return f"{type(spec).__name__}[{','.join(parts)}]"


def op_class(spec) -> str:
    """The op class a spec's discrepancy is pooled in ('matmul', 'attention', 'norm', ..., 'step')."""
    return str(spec.op_class)


@dataclasses.dataclass(frozen=True)
class Domain:
    """What the fitted rows cover: their op kinds and, per op class, the [lo, hi] measured us."""

    kinds: frozenset[str]
    ranges: dict[str, tuple[float, float]]

    @classmethod
    def of(cls, specs_and_us) -> Domain:
        """From (spec, measured us) pairs of the fitted rows."""
        kinds, ranges = set(), {}
        for spec, us in specs_and_us:
            kinds.add(op_kind(spec))
            c = op_class(spec)
            lo, hi = ranges.get(c, (math.inf, 0.0))
            ranges[c] = (min(lo, us), max(hi, us))
        return cls(frozenset(kinds), ranges)

    def has_kind(self, spec) -> bool:
        """Whether a fitted row has ``spec``'s op kind (``op_kind``)."""
        return op_kind(spec) in self.kinds

    def extrapolates(self, spec, us: float) -> str | None:
        """Why ``spec`` (predicted ``us``) lies outside the fitted rows, or None."""
        if not self.has_kind(spec):
            return f"op kind {op_kind(spec)} not fitted"
        lo, hi = self.ranges.get(op_class(spec), (math.inf, 0.0))
        if not lo / RANGE_FACTOR <= us <= hi * RANGE_FACTOR:
            return f"{us:.1f} us outside {RANGE_FACTOR:g}x the fitted {op_class(spec)} range [{lo:.1f}, {hi:.1f}] us"
        return None

    def to_json(self) -> dict:
        return {"kinds": sorted(self.kinds), "ranges_us": {k: list(v) for k, v in sorted(self.ranges.items())}}

    @classmethod
    def from_json(cls, doc: dict) -> Domain:
        return cls(frozenset(doc["kinds"]), {k: (float(a), float(b)) for k, (a, b) in doc["ranges_us"].items()})


def is_kernel_only(spec) -> bool:
    """Whether ``spec`` prices a report's DEVICE KERNEL DURATION (an ``opspecs.KernelSpec`` in its chain)."""
    while spec is not None:
        if getattr(spec, "scope", None) == "kernel":
            return True
        spec = getattr(spec, "inner", None)
    return False


def repeat_var(repeat_sd_us: float, kernel_only: bool, us: float) -> float:
    """Log-space variance of the repeats' spread on a row predicted at ``us`` (0 unless ``kernel_only``):
    (repeat_sd_us / us)^2, the delta method's for an additive error."""
    if not kernel_only or repeat_sd_us == 0:
        return 0.0
    if not (math.isfinite(us) and us > 0):
        raise ValueError(f"us={us!r}: a kernel-only row's predicted time must be finite and > 0")
    return (repeat_sd_us / us) ** 2


def repeat_stats(groups) -> dict:
    """{"df", "ss_us2"} of one source: the degrees of freedom and the within-group sum of squares (us^2)
    of its groups of repeats (each group: the kernel times, us, of one op spec run several times) whose
    mean is at most ``REPEAT_MAX_US`` (larger ops' spread is a share of their time, not additive)."""
    df, ss = 0, 0.0
    for g in groups:
        v = np.asarray(g, np.float64)
        if not np.all(np.isfinite(v) & (v > 0)):
            raise ValueError("repeat times must be finite and > 0 (us)")
        if v.size >= 2 and v.mean() <= REPEAT_MAX_US:
            df, ss = df + v.size - 1, ss + float(((v - v.mean()) ** 2).sum())
    return {"df": df, "ss_us2": ss}


def repeat_sd(stats_by_source: dict[str, dict], exclude: str | None = None) -> float:
    """Pooled within-spec sd (us) of the repeats of every source but ``exclude`` (``repeat_stats``; 0
    without any)."""
    df = sum(st["df"] for src, st in stats_by_source.items() if src != exclude)
    ss = sum(st["ss_us2"] for src, st in stats_by_source.items() if src != exclude)
    return math.sqrt(ss / df) if df else 0.0


def load_repeat_stats(path: str | pathlib.Path | None = None) -> dict[str, dict]:
    """The stored per-source repeat statistics (``REPEATS_PATH``: {source: ``repeat_stats``}, written by
    ``holdout.write_repeat_stats`` from the real reports the project holds)."""
    doc = json.loads(pathlib.Path(REPEATS_PATH if path is None else path).read_text())
    out = {}
    for src, st in doc["sources"].items():
        if set(st) - {"reports"} != {"df", "ss_us2"}:
            raise ValueError(f"{REPEATS_PATH.name}: source {src!r} needs df and ss_us2")
        out[src] = {"df": int(st["df"]), "ss_us2": float(st["ss_us2"])}
    return out


def signed_var(tau: float) -> float:
    """The variance a (signed) tau adds: tau^2, or -tau^2 for a negative tau (``tau_mle`` with a floor)."""
    return math.copysign(tau * tau, tau)


def capped_form_var(form_var: float, sigma2: float) -> float:
    """A (signed) model-form variance as an interval adds it on top of a fit's ``sigma2``: a negative one
    takes back at most that sigma^2, never the parameter variance."""
    return max(form_var, -sigma2)


def signed_sd(var: float) -> float:
    """The signed tau of a variance adjustment ``var`` (``signed_var``'s inverse)."""
    return math.copysign(math.sqrt(abs(var)), var)


def tau_mle(residuals, base_var, floor_var: float = 0.0) -> float:
    """Maximum-likelihood tau of r_i ~ N(0, base_var_i + signed_var(tau)) (grid search; 0 without rows).

    With ``floor_var`` = 0, tau >= 0: the rows' error is at least ``base_var``. With ``floor_var`` > 0 (the
    fit's sigma^2, which ``base_var`` carries), tau may be negative down to -sqrt(floor_var): rows that
    scatter less than sigma, a pooled scatter of every fitted row, take back up to sigma^2 of their
    variance, never their parameter variance.

    Args:
      residuals: [n] log(predicted / measured).
      base_var: [n] variance the intervals already carry (parameters + sigma^2).
      floor_var: the most variance a negative tau may take back (>= 0, each base_var_i above it).
    """
    r, v = np.asarray(residuals, np.float64), np.asarray(base_var, np.float64)
    if r.shape != v.shape:
        raise ValueError(f"residuals shape {r.shape} != base_var shape {v.shape}")
    if not (np.all(np.isfinite(r)) and np.all(np.isfinite(v)) and np.all(v >= 0)):
        raise ValueError("residuals and base_var must be finite, base_var >= 0")
    if not (math.isfinite(floor_var) and floor_var >= 0):
        raise ValueError(f"floor_var={floor_var!r} must be finite and >= 0 (a variance the rows may give back)")
    if r.size == 0:
        return 0.0
    if not np.all(v >= floor_var):
        raise ValueError(f"floor_var={floor_var!r} must not exceed any base_var (min {float(v.min())!r}): a row "
                         "keeps its parameter variance")
    # variance adjustments: -floor_var .. 0 on an even grid of negative taus, then the positive taus' squares
    below = -np.linspace(math.sqrt(floor_var), 0.0, TAU_GRID.size // 3, endpoint=False) ** 2 if floor_var else []
    grid = np.concatenate([below, TAU_GRID**2])
    tot = v[None, :] + grid[:, None]
    ll = -0.5 * np.sum(np.log(np.maximum(tot, 1e-300)) + r[None, :] ** 2 / np.maximum(tot, 1e-300), axis=1)
    return signed_sd(float(grid[int(np.argmax(ll))]))


@dataclasses.dataclass(frozen=True)
class Discrepancy:
    """Per-class and extrapolation discrepancy sds (log space), and the domain they refer to.

    Attributes:
      tau_class: op class -> tau of its interpolating held-out rows (shrunk to ``tau_pooled``).
      tau_pooled: tau of all interpolating held-out rows (a class without rows gets this).
      tau_extrap: tau of all extrapolating held-out rows.
      tau_extrap_class: op class -> tau of its extrapolating rows (shrunk to ``tau_extrap``).
      tau_extrap_family: config family (``op_family``) -> tau of its extrapolating rows (shrunk to
        its class's).
      domain: the fitted rows' kinds and ranges (what "extrapolating" is judged against).
      tau_kind: op kind (``op_kind``) -> tau of all its held-out rows (not shrunk: ``sd`` shrinks it).
      kind_sources: op kind -> the number of sources (validation units) its held-out rows come from.
      repeat_sd_us: the pooled sd of one op's kernel time over its repeats in the real reports
        (``repeat_sd``): the additive error of a kernel-only row (``repeat_var``).
      floor_var: the most variance a negative tau takes back (``tau_mle``): the sigma^2 of the fits the
        held-out rows came from (their smallest), so sigma^2 + ``var`` stays >= 0 under those fits.
      info: counts and method, for the report.

    Every tau is signed (``signed_var``): a negative one is a tier whose held-out rows scatter less
    than the fit's pooled sigma, and takes that much variance back.
    """

    tau_class: dict[str, float]
    tau_pooled: float
    tau_extrap: float
    domain: Domain
    tau_extrap_class: dict[str, float] = dataclasses.field(default_factory=dict)
    tau_extrap_family: dict[str, float] = dataclasses.field(default_factory=dict)
    tau_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    kind_sources: dict[str, int] = dataclasses.field(default_factory=dict)
    repeat_sd_us: float = 0.0
    floor_var: float = 0.0
    info: dict = dataclasses.field(default_factory=dict)

    def sd(self, cls: str, family: str, extrap: bool, kind: str | None = None) -> float:
        """tau of a row of op class ``cls``, config family ``family`` and op kind ``kind``, inside the
        fitted rows or not (``extrap``): the interpolation term of its class, or the extrapolation term
        of its family, else of its class, else the pooled one; then, where held-out rows of ``kind``
        were seen, their tau shrunk towards that term by ``SHRINK_ROWS`` pseudo-sources (in variance,
        ``signed_var``: the result is signed as the taus are)."""
        if extrap:
            above = self.tau_extrap_family.get(family, self.tau_extrap_class.get(cls, self.tau_extrap))
        else:
            above = self.tau_class.get(cls, self.tau_pooled)
        if kind is None or kind not in self.tau_kind:
            return above
        n = self.kind_sources[kind]
        return signed_sd((n * signed_var(self.tau_kind[kind]) + SHRINK_ROWS * signed_var(above)) / (n + SHRINK_ROWS))

    def form_var(self, spec, us: float) -> float:
        """The model-form part of ``var``: signed_var(tau) (``sd``), an error the rows of one op kind share
        (negative, at least -``floor_var``, where the kind's tiers scatter less than sigma)."""
        extrap = self.domain.extrapolates(spec, us) is not None
        return signed_var(self.sd(op_class(spec), op_family(spec), extrap, op_kind(spec)))

    def var(self, spec, us: float, sigma2: float | None = None) -> float:
        """Discrepancy variance (log space) of one op spec predicted at ``us``: its signed tau^2 (``form_var``;
        with ``sigma2``, the sigma^2 the interval adds it to, capped below by ``capped_form_var``) and, for a
        kernel-only spec, the repeats' spread (``repeat_var``), each row's own."""
        form = self.form_var(spec, us)
        if sigma2 is not None:
            form = capped_form_var(form, sigma2)
        return form + repeat_var(self.repeat_sd_us, is_kernel_only(spec), us)

    def to_json(self) -> dict:
        return {"tau_class": self.tau_class, "tau_pooled": self.tau_pooled, "tau_extrap": self.tau_extrap,
                "tau_extrap_class": self.tau_extrap_class, "tau_extrap_family": self.tau_extrap_family,
                "tau_kind": self.tau_kind, "kind_sources": self.kind_sources,
                "repeat_sd_us": self.repeat_sd_us, "floor_var": self.floor_var, "domain": self.domain.to_json(),
                "info": self.info}

    @classmethod
    def from_json(cls, doc: dict) -> Discrepancy:
        for key in ("tau_class", "tau_pooled", "tau_extrap", "tau_extrap_class", "tau_extrap_family", "tau_kind",
                    "kind_sources", "repeat_sd_us", "floor_var", "domain"):
            if key not in doc:
                raise ValueError(f"discrepancy JSON lacks key {key!r}; write it with "
                                 "`python -m costmodel.blackhole validate --write`")
        floats = lambda d: {k: float(v) for k, v in d.items()}
        if set(doc["tau_kind"]) != set(doc["kind_sources"]):
            raise ValueError("discrepancy JSON: tau_kind and kind_sources name different op kinds")
        return cls(floats(doc["tau_class"]), float(doc["tau_pooled"]), float(doc["tau_extrap"]),
                   Domain.from_json(doc["domain"]), floats(doc["tau_extrap_class"]),
                   floats(doc["tau_extrap_family"]), floats(doc["tau_kind"]),
                   {k: int(v) for k, v in doc["kind_sources"].items()}, float(doc["repeat_sd_us"]),
                   float(doc["floor_var"]), doc.get("info", {}))


def _tau(rows: list[dict], floor_var: float) -> float:
    return tau_mle([h["residual"] for h in rows], [h["base_var"] for h in rows], floor_var)


def _tiers(rows: list[dict], key: str, prior: float | None, floor_var: float) -> tuple[float, dict[str, float]]:
    """(pooled tau of ``rows``, {value of ``key``: its rows' tau shrunk towards ``prior``, default the
    pooled tau}) with ``SHRINK_ROWS`` pseudo-rows (in variance: signed taus, ``signed_var``)."""
    pooled = _tau(rows, floor_var)
    centre = pooled if prior is None else prior
    out = {}
    for k in sorted({h[key] for h in rows}):
        hs = [h for h in rows if h[key] == k]
        v = (len(hs) * signed_var(_tau(hs, floor_var)) + SHRINK_ROWS * signed_var(centre)) / (len(hs) + SHRINK_ROWS)
        out[k] = signed_sd(v)
    return pooled, out


def estimate(held_out: list[dict], domain: Domain, repeat_sd_us: float = 0.0,
             floor_var: float = 0.0) -> Discrepancy | None:
    """Discrepancy from held-out predictions: dicts with "class", "family" (``op_family``),
    "residual" (log pred / measured), "base_var" (param var + sigma^2: ``intervals.param_var``, so an
    extrapolating row's without the weak prior's share) and "extrap" (reason or None, judged against
    the fold's own fitted rows), and optionally "kind" (``op_kind``) with "unit" (the source it was
    held out with) for the kind tier, and "kernel_only" with "predicted" (us) for the repeats' spread
    (``repeat_var`` with ``repeat_sd_us``), added to "base_var" before any tau is estimated;
    ``domain`` is stored with it (what later predictions are judged against). ``floor_var``: the most
    variance a tier may take back (``tau_mle``; the smallest sigma^2 of the fits the rows were predicted
    by, 0: every tau >= 0). Returns None for an empty list."""
    if not held_out:
        return None
    held_out = [dict(h, base_var=h["base_var"] + repeat_var(repeat_sd_us, h.get("kernel_only", False),
                                                            h.get("predicted", math.nan)))
                for h in held_out]
    interp = [h for h in held_out if not h["extrap"]]
    extrap = [h for h in held_out if h["extrap"]]
    pooled, per_class = _tiers(interp, "class", None, floor_var)
    tau_x, x_class = _tiers(extrap, "class", None, floor_var)
    x_family = {}
    for c, t_c in x_class.items():  # a family's rows are of one class (its spec type's)
        x_family.update(_tiers([h for h in extrap if h["class"] == c], "family", t_c, floor_var)[1])
    kinds: dict[str, list[dict]] = {}  # the finest tier: every held-out row of a kind, by source
    for h in held_out:
        if h.get("kind") is not None:
            if "unit" not in h:
                raise ValueError(f"held-out row of kind {h['kind']!r} has no 'unit': the kind tier counts sources")
            kinds.setdefault(h["kind"], []).append(h)
    info = {"n_interpolating": len(interp), "n_extrapolating": len(extrap),
            "n_per_class": {c: sum(h["class"] == c for h in interp) for c in per_class},
            "n_extrapolating_per_family": {f: sum(h["family"] == f for h in extrap) for f in x_family},
            "n_per_kind": {k: len(hs) for k, hs in kinds.items()},
            "method": "maximum likelihood on held-out log residuals (leave-one-group-out refits for "
                      f"calibration groups, the full fit for validation rows); classes shrunk with {SHRINK_ROWS:g} "
                      "pseudo-rows of the pooled tau, extrapolation families with as many of their class's; "
                      "op kinds (all their rows) with as many pseudo-sources of the term above them; taus signed, "
                      f"a negative one taking back at most floor_var = {floor_var:.6f} (sigma^2)"}
    return Discrepancy(per_class, pooled, tau_x, domain, x_class, x_family,
                       {k: _tau(hs, floor_var) for k, hs in kinds.items()},
                       {k: len({h["unit"] for h in hs}) for k, hs in kinds.items()}, repeat_sd_us, floor_var, info)


def load_discrepancy(path: str | pathlib.Path = DISCREPANCY_PATH) -> Discrepancy | None:
    """The stored discrepancy, or None when the file does not exist (intervals then carry sigma only)."""
    path = pathlib.Path(path)
    if not path.exists():
        return None
    return Discrepancy.from_json(json.loads(path.read_text()))


def write_discrepancy(d: Discrepancy, path: str | pathlib.Path = DISCREPANCY_PATH) -> None:
    doc = {"description": "Model-discrepancy sds (log space) of the Blackhole op models, estimated from "
                          "held-out predictions (costmodel.blackhole.discrepancy); written by "
                          "`python -m costmodel.blackhole validate --write`", **d.to_json()}
    # strict JSON (no NaN / Infinity), replaced atomically: a failed write leaves the stored file as it was
    atomic_write_text(path, dumps_strict(doc, indent=1) + "\n")
