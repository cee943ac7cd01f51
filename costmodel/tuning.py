"""One tuning framework for the cost models: relax, descend, project onto legal neighbours, score.

A tuner (``costmodel.ahbm.tune``, ``costmodel.blackhole.knob_search``) supplies

* a relaxed loss over continuous coordinates (log of each integer knob) that ``descend`` runs
  optax Adam on (inside the caller's ``jax.jit``),
* the discrete ``Axis`` values of every knob (what the hardware / schedule can take: powers of
  two where the hardware needs them, multiples where a schedule needs them),
* ``legal(candidate) -> None | reason``: the one feasibility check (config validation and the
  model's ``constraints``), and
* ``score(candidates) -> latencies``: the exact evaluator.

``project`` enumerates only legal neighbours of the relaxed optimum (the values just below and
above it on every axis), widens the neighbourhood when none is legal, falls back to the legal
candidate nearest in log space, and otherwise raises a ``ValueError`` naming the constraint
that excluded every candidate. ``exhaustive`` scores every legal candidate beside it.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import itertools
import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax

Candidate = dict  # axis name -> discrete value


@dataclasses.dataclass(frozen=True)
class Axis:
    """One discrete knob: its legal values, ascending and positive (relaxed as log(value))."""

    name: str
    values: tuple

    def __post_init__(self):
        if not self.values:
            raise ValueError(f"axis {self.name!r}: values must not be empty")
        if any(not v > 0 for v in self.values) or list(self.values) != sorted(set(self.values)):
            raise ValueError(f"axis {self.name!r}: values={self.values!r} must be positive, distinct, ascending")

    def around(self, x: float, radius: int) -> list:
        """The ``radius`` legal values just below and just above the relaxed value ``x``."""
        i = bisect.bisect_left(self.values, x * (1 - 1e-6))  # first value >= x
        exact = i < len(self.values) and abs(self.values[i] - x) <= 1e-6 * x
        lo = max(0, i - radius + (1 if exact else 0))  # an exact hit counts as its own below / above
        hi = min(len(self.values), i + radius)
        return list(self.values[lo:hi]) or [self.values[min(i, len(self.values) - 1)]]


def value_and_grad_forward(loss: Callable) -> Callable:
    """``jax.value_and_grad(loss)`` by forward mode (``jax.jacfwd``: one JVP per flattened param,
    vmapped). A tuner has a handful of relaxed knobs, and the cost models' reverse pass (every
    smooth max and ceiling's cotangent fanned back into shared subexpressions) makes XLA:CPU's
    fusion pass superlinear: the AHBM ring's reverse gradient compiles several times slower, to
    the same numbers (``tests/test_costmodel_tuning.py``)."""

    def both(params):
        val = loss(params)
        return val, val  # the value rides along as jacfwd's aux: one forward pass

    def vg(params):
        g, val = jax.jacfwd(both, has_aux=True)(params)
        return val, g

    return vg


def descend(loss: Callable, params0, *, steps: int, lr: float, clip: Callable | None = None):
    """Adam on ``loss(params)`` (any pytree of a few scalars: the gradient is forward mode,
    ``value_and_grad_forward``) for ``steps`` steps; non-finite gradients count as 0 and ``clip``
    maps params back into their box after each step. Returns (params, losses)."""
    opt = optax.adam(lr)
    grad = value_and_grad_forward(loss)

    def body(carry, _):
        params, state = carry
        val, g = grad(params)
        g = jax.tree.map(lambda v: jnp.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0), g)
        upd, state = opt.update(g, state, params)
        params = optax.apply_updates(params, upd)
        return ((clip(params) if clip is not None else params), state), val

    (params, _), vals = jax.lax.scan(body, (params0, opt.init(params0)), None, length=steps)
    return params, vals


def neighbours(point: dict[str, float], axes: Sequence[Axis], radius: int) -> list[Candidate]:
    """Every combination of each axis' ``radius`` values below / above ``point`` (relaxed values)."""
    opts = [ax.around(point[ax.name], radius) for ax in axes]
    return [dict(zip((ax.name for ax in axes), combo)) for combo in itertools.product(*opts)]


def _log_dist(c: Candidate, point: dict[str, float]) -> float:
    return sum(math.log(c[k] / point[k]) ** 2 for k in point)


def _keep_legal(cands: Sequence[Candidate], legal: Callable[[Candidate], str | None],
                reasons: collections.Counter) -> list[Candidate]:
    """The legal ones of ``cands``; each illegal one counts its reason into ``reasons``."""
    out = []
    for c in cands:
        why = legal(c)
        if why is None:
            out.append(c)
        else:
            reasons[why] += 1
    return out


def project(point: dict[str, float], axes: Sequence[Axis], legal: Callable[[Candidate], str | None], *,
            radii: Sequence[int] = (1, 2), everything: Callable[[], list[Candidate]] | None = None,
            what: str = "config") -> list[Candidate]:
    """Legal discrete candidates next to the relaxed ``point``: the legal neighbours at the first
    radius that has any; else the legal candidate of ``everything()`` nearest in log space; else
    ``ValueError`` naming the reasons ``legal`` gave (the most frequent first)."""
    reasons: collections.Counter = collections.Counter()
    seen: list[Candidate] = []
    for r in radii:
        fresh = [c for c in neighbours(point, axes, r) if c not in seen]
        seen += fresh
        out = _keep_legal(fresh, legal, reasons)
        if out:
            return out
    if everything is not None:
        pool = _keep_legal(everything(), legal, reasons)
        if pool:
            return [min(pool, key=lambda c: _log_dist(c, point))]
    if not reasons:
        raise ValueError(f"no {what} to consider near {point}")
    top = "; ".join(f"{why} ({n}x)" for why, n in reasons.most_common(3))
    raise ValueError(f"no legal {what}: every candidate is excluded, by {top}")


def best_of(cands: list[Candidate], score: Callable[[list[Candidate]], np.ndarray]) -> tuple[Candidate, float, int]:
    """(best candidate, its exact score, number scored) of ``cands`` (score is lower-is-better)."""
    t = np.asarray(score(cands), dtype=np.float64)
    t = np.where(np.isfinite(t), t, np.inf)
    i = int(np.argmin(t))
    return cands[i], float(t[i]), len(cands)


def exhaustive(cands: list[Candidate], legal: Callable[[Candidate], str | None],
               score: Callable[[list[Candidate]], np.ndarray], *, what: str = "config") -> tuple[Candidate, float, int]:
    """(best, score, evaluations) over every legal candidate of ``cands``."""
    pool = [c for c in cands if legal(c) is None]
    if not pool:
        raise ValueError(f"no legal {what} in the whole space")
    return best_of(pool, score)


__all__ = ["Axis", "Candidate", "best_of", "descend", "exhaustive", "neighbours", "project"]
