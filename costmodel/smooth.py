"""Roofline primitives: exact (the discrete evaluator) or relaxed with a temperature (gradients).

A ``Relax`` object (frozen, hashable: a jit static argument) selects the relaxation; ``relax=None``
gives the exact max / min / ceil, which is what the discrete evaluator reports. The relaxations:

* ``smax(a, b)`` = tau_us * logaddexp(a/tau_us, b/tau_us): smooth, >= max(a, b), at most
  tau_us * ln(n) above it; ``smin`` is its mirror.
* ``sceil(x)`` = floor(x) + s(frac(x)) with s(f) = (1 - exp(-f/tau_int)) / (1 - exp(-1/tau_int)):
  continuous, non-decreasing, x <= sceil(x) <= ceil(x), equal to ceil at integers, and tending to
  ceil everywhere as tau_int -> 0. Its slope is positive everywhere, so a gradient step on a relaxed
  integer knob (cores = ceil(N/per_core_N)) sees the staircase coming.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class Relax:
    """Temperatures of the differentiable path.

    Attributes:
      tau_us: temperature of max/min between times, in microseconds (the over-estimate of a
        two-way max is at most tau_us * ln 2).
      tau_int: temperature of ceil over counts (dimensionless, > 0).
    """

    tau_us: float = 0.25
    tau_int: float = 0.2

    def __post_init__(self):
        if not self.tau_us > 0:
            raise ValueError(f"tau_us={self.tau_us} must be > 0 (use relax=None for the exact evaluator)")
        if not self.tau_int > 0:
            raise ValueError(f"tau_int={self.tau_int} must be > 0 (use relax=None for the exact evaluator)")


def smax(*xs, relax: Relax | None):
    """Max of times (us), element-wise; log-sum-exp with temperature ``relax.tau_us`` if relaxed."""
    if len(xs) < 2:
        raise ValueError(f"smax needs >= 2 arguments, got {len(xs)}")
    if relax is None:
        out = xs[0]
        for x in xs[1:]:
            out = jnp.maximum(out, x)
        return out
    t = relax.tau_us
    stacked = jnp.stack(jnp.broadcast_arrays(*[jnp.asarray(x) / t for x in xs]))
    m = jax.lax.stop_gradient(jnp.max(stacked, axis=0))  # shift for a stable log-sum-exp
    return t * (m + jnp.log(jnp.sum(jnp.exp(stacked - m), axis=0)))


def smin(*xs, relax: Relax | None):
    """Min, mirror of ``smax`` (relaxed result <= exact min)."""
    return -smax(*[-jnp.asarray(x) for x in xs], relax=relax)


def sceil(x, *, relax: Relax | None):
    """Ceil of a count; relaxed: continuous, non-decreasing, x <= result <= ceil(x)."""
    x = jnp.asarray(x)
    if relax is None:
        return jnp.ceil(x)
    t = relax.tau_int
    n = jnp.floor(x)
    f = x - n
    return n + (1.0 - jnp.exp(-f / t)) / (1.0 - jnp.exp(-1.0 / t))
