"""Batched equivalence checks of two attention functions over random problems.

``equivalence_check(fn_a, fn_b, num_problems=N, ...)`` draws N random (q, k, v) problems and
evaluates both functions on all of them in ONE jitted, vmapped call, returning per-problem max
absolute error, error relative to the output scale, and PCC (Pearson r, as tt-metal's comp_pcc).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention.geometry import AttentionGeometry, check_positive


def pcc_traced(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """Pearson correlation of the flattened arrays, traceable (jit / vmap-able; the host-side
    float64 ``jaxref.numerics.pcc`` is not).

    NaN / Inf are set to 0 (as tt-metal's comp_pcc), identical arrays give 1.0, and a
    zero-variance input that differs from the other gives 0.0 (comp_pcc's other special cases are
    host-side: see ``jaxref.numerics.pcc``).
    """
    a = jnp.nan_to_num(a.astype(jnp.float32).ravel(), nan=0.0, posinf=0.0, neginf=0.0)
    b = jnp.nan_to_num(b.astype(jnp.float32).ravel(), nan=0.0, posinf=0.0, neginf=0.0)
    da, db = a - a.mean(), b - b.mean()
    va, vb = (da * da).sum(), (db * db).sum()
    r = (da * db).sum() / jnp.sqrt(jnp.where((va > 0) & (vb > 0), va * vb, 1.0))
    r = jnp.where((va > 0) & (vb > 0), r, 0.0)
    return jnp.where(jnp.all(a == b), 1.0, r)


@dataclasses.dataclass(frozen=True)
class EquivalenceReport:
    """Per-problem comparison of fn_a against fn_b (the reference); arrays of length num_problems."""

    max_abs_error: np.ndarray  # max |a - b| over the output
    scale: np.ndarray  # max |b| (output scale of the reference)
    pcc: np.ndarray  # Pearson r of a vs b

    @property
    def max_rel_error(self) -> np.ndarray:
        """max |a - b| / max |b| per problem."""
        return self.max_abs_error / np.maximum(self.scale, np.finfo(np.float32).tiny)

    def worst(self) -> tuple[float, float]:
        """(largest relative error, smallest PCC) over all problems."""
        return float(self.max_rel_error.max()), float(self.pcc.min())


def _first(x):
    return x[0] if isinstance(x, (tuple, list)) else x


def equivalence_check(fn_a: Callable, fn_b: Callable, *, num_problems: int, num_queries: int, num_keys: int,
                      geometry: AttentionGeometry | None = None, key: jax.Array,
                      dtype=jnp.float32, dtype_b=None) -> EquivalenceReport:
    """Compare two attention functions on ``num_problems`` random problems in one jit(vmap) call.

    Args:
      fn_a, fn_b: ``fn(q, k, v)`` -> out [T, N, H] or (out, ...); fn_b is the reference (its output
        sets the scale). Close over static knobs (causal, tile, ...) with a lambda / partial.
      num_problems: N independent problems; num_queries T, num_keys S.
      geometry: head counts (default Llama3-70B: 64 q heads, 8 kv heads, d 128).
      key: PRNG key seeding the draws; q, k, v are standard normal.
      dtype: input dtype for fn_a (e.g. jnp.bfloat16); dtype_b: for fn_b (default float32 on the
        same, un-rounded draws, so low-precision error is measured against the fp32 problem).
    Returns an EquivalenceReport of numpy arrays [num_problems].
    """
    g = AttentionGeometry.llama3_70b() if geometry is None else geometry
    check_positive("num_problems", num_problems)
    check_positive("num_queries", num_queries)
    check_positive("num_keys", num_keys)
    dtype_b = jnp.float32 if dtype_b is None else dtype_b

    # Problems are drawn on the host (numpy, seeded from ``key``): no RNG kernel to compile.
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel().tolist())
    draw = [rng.standard_normal((num_problems, *shape), np.float32)
            for shape in (g.q_shape(num_queries), g.kv_shape(num_keys), g.kv_shape(num_keys))]

    def one(q, k, v):
        a = _first(fn_a(q.astype(dtype), k.astype(dtype), v.astype(dtype))).astype(jnp.float32)
        b = _first(fn_b(q.astype(dtype_b), k.astype(dtype_b), v.astype(dtype_b))).astype(jnp.float32)
        return jnp.abs(a - b).max(), jnp.abs(b).max(), pcc_traced(a, b)

    err, scale, r = jax.jit(jax.vmap(one))(*draw)
    return EquivalenceReport(np.asarray(err), np.asarray(scale), np.asarray(r))
