"""Custom ``jax.vmap`` rules and the XLA:CPU GEMM-layout choice of the golden's hot paths.

Both exist for speed only; results equal the plain forms (the tests check every transformation).

* ``linear_rows``: ``x @ w.T`` for a weight stored [out, in] (HF's layout). With few rows (T = 64
  tokens) it is computed as ``(w @ x.T).T``: with the weight as the left operand in its stored
  row-major layout XLA:CPU's GEMM runs ~20% faster than ``x @ W`` (alpamayo_tt shapes, 2 cores,
  ms: rows 64: ``(W @ x.T).T`` 6.6 vs ``x @ W.T`` 8.6, weight streaming dominates; rows 512: 65 vs
  47, compute dominates). Under ``vmap`` the batch joins the rows, so the rows of all
  trajectories decide the form.
* ``shared_kv_rows(fn)``: an attention ``fn(q_m [K, M, H], k, v, keep, bias)`` whose vmap over queries
  sharing the keys (trajectories sharing one cache) folds the batch into M, so each kv head's keys
  are read once for all (8 trajectories: 152-161 ms vs 165-172 ms looping over them, 172-245 ms as
  plain batched evaluation).

Derivatives (forward and reverse, also under vmap) are those of the plain implementation.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

# Up to this many rows the weight goes on the left of the GEMM (see the module docstring).
WEIGHT_LEFT_MAX_ROWS = 64
# The golden never lets XLA pick a reduced-precision matmul (TF32 / bf16 passes on GPU / TPU).
_HI = jax.lax.Precision.HIGHEST


def with_vmap_rule(impl, rule):
    """``impl`` with a custom vmap rule ``rule(f, impl, axis_size, in_batched, *args)`` (``f``: the
    result, to recurse with; ``impl``: to fall back to plain batching); derivatives, forward and
    reverse mode, are those of ``impl`` itself (custom_vmap alone has no transpose rule)."""
    batchable = jax.custom_batching.custom_vmap(impl)
    f = jax.custom_jvp(lambda *args: batchable(*args))
    batchable.def_vmap(functools.partial(rule, f, impl))
    f.defjvp(lambda primals, tangents: jax.jvp(impl, primals, tangents))
    return f


def _linear_impl(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [..., I] @ w.T for w [O, I], the GEMM form picked by the number of rows."""
    lead, rows = x.shape[:-1], math.prod(x.shape[:-1])
    if rows > WEIGHT_LEFT_MAX_ROWS:
        return jnp.einsum("...I,OI->...O", x, w, precision=_HI)
    y = jnp.einsum("OI,MI->OM", w, x.reshape(rows, x.shape[-1]), precision=_HI)  # [O, M]
    # The barrier keeps XLA from folding the transpose into the dot, which would turn it back into
    # the x @ W.T call (XLA:CPU picks the GEMM kernel from the dot's operand / output layouts).
    return jax.lax.optimization_barrier(y).T.reshape(*lead, w.shape[0])


def _linear_vmap(f, impl, axis_size, in_batched, x, w):
    x_batched, w_batched = in_batched
    if w_batched:  # a weight per example (rare): plain batching
        return jax.vmap(impl, in_axes=(0 if x_batched else None, 0))(x, w), True
    return f(x, w), True  # the batch axis joins the rows (nests under more vmaps)


linear_rows = with_vmap_rule(_linear_impl, _linear_vmap)


def _shared_kv_vmap(f, impl, axis_size, in_batched, q_m, *keys):
    q_b, key_b = in_batched[0], in_batched[1:]
    if any(key_b) or not q_b:  # per-example keys (e.g. the own K/V): plain batching
        axes = tuple(0 if b else None for b in in_batched)
        res = jax.vmap(impl, in_axes=axes)(q_m, *keys)
        return res, jax.tree.map(lambda _: True, res)
    B, K, M, H = q_m.shape  # shared keys: the batch joins the query rows
    res = f(q_m.transpose(1, 0, 2, 3).reshape(K, B * M, H), *keys)
    # every result leaf is [K, B * M, ...]: unfold it to [B, K, M, ...]
    res = jax.tree.map(lambda x: jnp.moveaxis(x.reshape(K, B, M, *x.shape[2:]), 1, 0), res)
    return res, jax.tree.map(lambda _: True, res)


def shared_kv_rows(fn):
    """``fn(q_m [K, M, H], k, v, *key_side_args) -> pytree of [K, M, ...] arrays`` with a vmap rule
    that folds a batch of queries over shared keys into M (nests under more vmaps)."""
    return with_vmap_rule(fn, _shared_kv_vmap)
