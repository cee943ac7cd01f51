"""Dense softmax attention with GQA: the oracle every tiled / distributed algorithm is checked against.

Layout (no batch axis; ``jax.vmap`` adds one): q [T, N, H], k and v [S, K, H], N = K * G.
Query head n uses kv head n // G (HF ``repeat_kv`` order: q heads of one kv head are contiguous).

Fully masked rows (every key excluded by ``mask`` / ``causal``) return ``out = 0`` and
``lse = MASK_LSE`` (a finite, very negative number): finite and NaN-free. Only the mask decides it:
an *additive* ``bias`` never masks a key (-1e9, or -inf, is a number, not an exclusion).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxref.attention.problem import AttentionProblem

# A very negative finite number (jax.nn's -0.7 * finfo.max): the lse of a row without a valid key,
# and the stand-in for an excluded score where a finite one is needed (tests' naive oracles).
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
      bias: optional additive *float* bias broadcastable to [N, T, S] (e.g. [T, S] or [1, T, S]).
      mask: optional *bool* keep-mask broadcastable to [N, T, S]; False excludes a key. Any other dtype
        (a 0 / -inf float mask, an int mask, a bool bias) is a TypeError (``AttentionProblem.from_inputs``).
      causal: bottom-right aligned causal mask (see ``causal_mask``); needs T <= S.
      scale: score scale, default H ** -0.5.
    Returns:
      out [T, N, H] float32 and lse [N, T] float32 (natural-log sum of exp of scaled, biased scores).

    Semantics every algorithm keeps (a row = one query of one head):
      * a row with no valid key (by mask / causality) gives out 0, lse ``MASK_LSE``: decided by the
        mask alone, never by a score's value;
      * an excluded key is excluded whatever its K and V rows hold (selected, not weighted by 0);
      * any score is a score: every valid score -inf gives out NaN (0 / 0) and lse -inf; a NaN or
        +Inf score gives NaN; finite scores of any size (below -1e38 too) give their softmax;
      * a NaN / Inf in the V row of a key the row attends makes the row's output NaN (every feature).
    """
    pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
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
    any_key = keep.any(-1, keepdims=True)  # [N, T, 1]
    s = jnp.where(keep, s, -jnp.inf)
    m = jnp.max(s, axis=-1, keepdims=True)
    shift = jnp.where(m == -jnp.inf, 0.0, m)  # never -inf - -inf
    p = jnp.exp(s - shift)  # excluded keys: exactly 0
    l = jnp.sum(p, axis=-1, keepdims=True)
    seen = l != 0  # False with a valid key only when every valid score is -inf (then out 0 / 0 = NaN)
    vf = v.astype(jnp.float32)
    bad = ~jnp.isfinite(vf).all(-1)  # [S, K]: keys whose value row holds a NaN / Inf
    w = (p / jnp.where(seen, l, 1.0)).reshape(K, G, T, S)
    out = jnp.einsum("KGTS,SKH->TKGH", w, jnp.where(bad[..., None], 0.0, vf), precision=_HI).reshape(T, N, H)
    hit = (keep.reshape(K, G, T, S) & bad.T[:, None, None, :]).any(-1)  # [K, G, T]: attends a bad V row
    bad_row = jnp.transpose(hit.reshape(N, T) | (any_key & ~seen)[..., 0])  # [T, N]
    out = jnp.where(bad_row[..., None], jnp.nan, out)
    out = jnp.where(jnp.transpose(any_key[..., 0])[..., None], out, 0.0)
    lse = jnp.where(seen, shift + jnp.log(jnp.where(seen, l, 1.0)), -jnp.inf)
    lse = jnp.where(any_key, lse, MASK_LSE)[..., 0]
    return out, lse


@dataclasses.dataclass(frozen=True)
class Reference:
    """The dense oracle as an algorithm config (no knobs): ``Reference()(q, k, v, causal=True)``."""

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """``attention_reference``: out [T, N, H], lse [N, T] float32."""
        return attention_reference(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
