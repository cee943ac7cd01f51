"""Dense softmax attention with GQA: the oracle every tiled / distributed algorithm is checked against.

Layout (no batch axis; ``jax.vmap`` adds one): q [T, N, H], k and v [S, K, H], N = K * G.
Query head n uses kv head n // G (HF ``repeat_kv`` order: q heads of one kv head are contiguous).

Fully masked rows (every key excluded by ``mask`` / ``causal``) return ``out = 0`` and
``lse = MASK_LSE`` (a finite, very negative number): finite, NaN-free, and the neutral element of
a log-sum-exp merge, so split / ring partials that saw no valid key combine correctly.
An *additive* ``bias`` never fully masks a row: -1e9 is a large number, not an exclusion.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxref.attention.problem import AttentionProblem

# Finite stand-in for -inf (jax.nn uses -0.7 * finfo.max): exp(MASK_VALUE - m) underflows to 0
# without producing inf - inf = NaN in an online softmax.
MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)
MASK_LSE = MASK_VALUE
# An oracle never lets XLA pick a reduced-precision matmul (TF32 / bf16 passes on GPU / TPU).
_HI = jax.lax.Precision.HIGHEST


def causal_mask(num_queries: int, num_keys: int) -> jnp.ndarray:
    """Bottom-right aligned causal mask [T, S]: query t sees keys s <= t + (S - T).

    With T == S this is the usual lower triangle; with T < S (decode / chunked prefill) the last
    query sees every key, as in a KV cache.
    """
    if num_queries > num_keys:
        raise ValueError(f"causal attention needs T <= S, got T={num_queries}, S={num_keys}")
    t = jnp.arange(num_queries)[:, None]
    s = jnp.arange(num_keys)[None, :]
    return s <= t + (num_keys - num_queries)


def attention_reference(q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
    """Dense GQA attention in float32.

    Args:
      q: [T, N, H] queries.
      k: [S, K, H] keys; v: [S, K, H] values. N must be a multiple of K.
      bias: optional additive float bias broadcastable to [N, T, S] (e.g. [T, S] or [1, T, S]).
      mask: optional boolean keep-mask broadcastable to [N, T, S]; False excludes a key.
      causal: bottom-right aligned causal mask (see ``causal_mask``); needs T <= S.
      scale: score scale, default H ** -0.5.
    Returns:
      out [T, N, H] float32 and lse [N, T] float32 (natural-log sum of exp of scaled, biased scores).
    """
    pr = AttentionProblem.from_inputs(q, k, v, causal=causal, scale=scale)
    T, S, N, K, G, H = pr.T, pr.S, pr.N, pr.K, pr.G, pr.H
    qg = q.astype(jnp.float32).reshape(T, K, G, H)
    s = jnp.einsum("TKGH,SKH->KGTS", qg, k.astype(jnp.float32), precision=_HI) * pr.scale
    s = s.reshape(N, T, S)
    if bias is not None:
        s = s + jnp.asarray(bias, jnp.float32)
    keep = jnp.ones((N, T, S), bool)
    if mask is not None:
        keep = keep & jnp.broadcast_to(mask, (N, T, S))
    if causal:
        keep = keep & causal_mask(T, S)[None]
    s = jnp.where(keep, s, MASK_VALUE)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.where(keep, jnp.exp(s - m), 0.0)
    l = jnp.sum(p, axis=-1, keepdims=True)
    # l == 0 exactly only when every key is excluded; a NaN l (a NaN / Inf score) is not "no key".
    any_valid = l != 0
    out = jnp.einsum("KGTS,SKH->TKGH", (p / jnp.where(any_valid, l, 1.0)).reshape(K, G, T, S),
                     v.astype(jnp.float32), precision=_HI).reshape(T, N, H)
    lse = jnp.where(any_valid, m + jnp.log(jnp.where(any_valid, l, 1.0)), MASK_LSE)[..., 0]
    return out, lse



@dataclasses.dataclass(frozen=True)
class Reference:
    """The dense oracle as an algorithm config (no knobs): ``Reference()(q, k, v, causal=True)``."""

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """``attention_reference``: out [T, N, H], lse [N, T] float32."""
        return attention_reference(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
