"""The one online-softmax attention core: partial state, fold, merge, finalize, the GQA fold.

Every tiled / distributed algorithm (``flash``, ``split_kv``, ``ring``, their ``jax.shard_map``
forms) and the expert's attention over its head-major VLM cache (``jaxref.cache_attention``) fold
key tiles through ``fold`` and normalise through ``finalize``; partials over disjoint key sets
combine with ``merge``. Only the dense oracle (``reference.attention_reference``) computes attention
otherwise.

Query layout: q [T, N, H] is grouped to [K, T, G, H] (``group_queries``: q head n = kv head n // G,
HF ``repeat_kv`` order) and its rows folded into the matmul M dimension, M = T * G: one K/V tile
serves the whole GQA group (no repeat_kv). Key layouts (``kv_layout``): ``'SKH'`` = [S, K, H]
(the ADR algorithms, sequence-major) or ``'KSH'`` = [K, S, H] (head-major, as HF and the device
store the cache), so a cache is never transposed.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxref.attention.reference import MASK_LSE, MASK_VALUE

KV_LAYOUTS = ("SKH", "KSH")
# The running max starts at FLOOR: above every excluded score (MASK_VALUE) and far below any real
# one (even with the device's -1e9 bias), so exp(s - m) is exactly 0 on excluded keys even before
# a valid key was seen, and no separate keep-mask is needed on the probabilities.
FLOOR = 0.5 * MASK_VALUE
# The golden never lets XLA pick a reduced-precision matmul (TF32 / bf16 passes on GPU / TPU).
_HI = lax.Precision.HIGHEST
_EINSUM_QK = {"SKH": "KMH,SKH->KMS", "KSH": "KMH,KSH->KMS"}
_EINSUM_PV = {"SKH": "KMS,SKH->KMH", "KSH": "KMS,KSH->KMH"}


class Partial(NamedTuple):
    """Unnormalised online-softmax state (a pytree), any leading shape ``rows``.

    m: running row max of the scaled scores (no gradient: results are invariant to it), [*rows]
    l: running sum of exp(s - m), [*rows];  o: running sum of exp(s - m) * v, [*rows, H]
    A row that has seen no valid key holds (FLOOR, 0, 0): the neutral element of ``merge``.
    """

    m: jnp.ndarray
    l: jnp.ndarray
    o: jnp.ndarray


def init_partial(rows: tuple[int, ...], head_dim: int) -> Partial:
    """Neutral state for rows of shape ``rows`` (e.g. (K, M))."""
    return Partial(jnp.full(rows, FLOOR, jnp.float32), jnp.zeros(rows, jnp.float32),
                   jnp.zeros((*rows, head_dim), jnp.float32))


def scores(q_m: jnp.ndarray, k: jnp.ndarray, *, kv_layout: str) -> jnp.ndarray:
    """q_m [K, M, H] (pre-scaled) . k [S, K, H] or [K, S, H] -> [K, M, S] float32 (operands keep
    their dtype, fp32 accumulation)."""
    return jnp.einsum(_EINSUM_QK[kv_layout], q_m, k, precision=_HI, preferred_element_type=jnp.float32)


def fold(state: Partial, s: jnp.ndarray, v: jnp.ndarray, *, kv_layout: str) -> Partial:
    """Fold one key tile into the running state (ADR section 3 inner tile).

    Args:
      state: m, l [K, M], o [K, M, H].
      s: [K, M, S] scaled scores, excluded keys set to ``MASK_VALUE``.
      v: [S, K, H] or [K, S, H] values of the tile (``kv_layout``).
    """
    m1 = lax.stop_gradient(jnp.maximum(state.m, s.max(-1)))
    p = jnp.exp(s - m1[..., None])
    corr = jnp.exp(state.m - m1)
    # P is rounded to V's storage type before the second GEMM, as a bf16 FlashAttention kernel does.
    pv = jnp.einsum(_EINSUM_PV[kv_layout], p.astype(v.dtype), v, precision=_HI,
                    preferred_element_type=jnp.float32)
    return Partial(m1, state.l * corr + p.sum(-1), state.o * corr[..., None] + pv)


def merge(a: Partial, b: Partial) -> Partial:
    """Log-sum-exp merge of two partials over disjoint key sets (ADR section 4; associative, commutative).

    A partial that saw no valid key (l = 0) is neutral: its weight is 0 or multiplies l = 0.
    """
    m = lax.stop_gradient(jnp.maximum(a.m, b.m))
    sa, sb = jnp.exp(a.m - m), jnp.exp(b.m - m)
    return Partial(m, a.l * sa + b.l * sb, a.o * sa[..., None] + b.o * sb[..., None])


def merge_all(p: Partial, *, max_fn, sum_fn) -> Partial:
    """Merge partials spread over ranks in one shot (Tree Attention): rescale each to the global
    max ``max_fn(m)`` and sum the rescaled (O, l), packed into one array, with ``sum_fn``.
    With ``lax.pmax`` / ``lax.psum`` over mesh axes this is the decode all-reduce (two collectives);
    every rank ends with the same merged state."""
    m = lax.stop_gradient(max_fn(p.m))
    w = jnp.exp(p.m - m)
    ol = sum_fn(jnp.concatenate([p.o, p.l[..., None]], -1) * w[..., None])  # [..., H + 1]
    return Partial(m, ol[..., -1], ol[..., :-1])


def finalize(p: Partial) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Normalise once: out = o / l, lse = m + log l; rows without a valid key give (0, MASK_LSE).

    "Without a valid key" is l == 0 exactly: a NaN l (a NaN / +Inf score or value was folded in)
    propagates to out and lse as through the dense reference, never mistaken for a masked row.
    """
    valid = p.l != 0
    l_safe = jnp.where(valid, p.l, 1.0)
    out = jnp.where(valid[..., None], p.o / l_safe[..., None], 0.0)
    lse = jnp.where(valid, p.m + jnp.log(l_safe), MASK_LSE)
    return out, lse


def group_queries(q: jnp.ndarray, num_kv_heads: int) -> jnp.ndarray:
    """The GQA fold: [T, N, H] -> [K, T, G, H] (q head n = kv head n // G)."""
    T, N, H = q.shape
    return jnp.transpose(q.reshape(T, num_kv_heads, N // num_kv_heads, H), (1, 0, 2, 3))


def to_heads(x: jnp.ndarray, num_heads: int) -> jnp.ndarray:
    """Inverse of ``group_queries`` for results: [K, T, G, ...] -> [T, N, ...]."""
    _K, T, _G = x.shape[:3]
    return jnp.moveaxis(x, 1, 0).reshape(T, num_heads, *x.shape[3:])


def lse_to_heads(lse: jnp.ndarray) -> jnp.ndarray:
    """[K, T, G] -> [N, T]."""
    K, T, G = lse.shape
    return jnp.transpose(lse, (0, 2, 1)).reshape(K * G, T)


def attend_chunks(q_m: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, add: jnp.ndarray | None, *,
                  kv_chunk: int | None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Online softmax of folded queries over head-major keys, one kv head at a time.

    Evaluated per kv head (``lax.map``): the [M, chunk] scores of one head stay in the last-level
    cache, measured faster on XLA:CPU than one batched [K, M, S] evaluation.

    Args:
      q_m: [K, M, H] pre-scaled folded queries; k, v: [K, S, H] (upcast to float32).
      add: optional float32 [S] added to the scores (``MASK_VALUE`` excludes a key exactly, even
        a NaN one; its value row still enters P.V with weight 0, so it must be finite).
      kv_chunk: keys per ``lax.scan`` chunk (static); None = one chunk.
    Returns:
      out [K, M, H] float32 and lse [K, M] (rows seeing nothing: out 0, lse ``MASK_LSE``).
    """
    S, H = k.shape[1:]
    C = S if kv_chunk is None else min(kv_chunk, S)
    n_chunks = -(-S // C)
    pad = n_chunks * C - S
    k, v = k.astype(jnp.float32), v.astype(jnp.float32)
    if pad:  # padded keys are excluded
        add = jnp.pad(jnp.zeros(S, jnp.float32) if add is None else add, (0, pad), constant_values=MASK_VALUE)
        k, v = (jnp.pad(a, ((0, 0), (0, pad), (0, 0))) for a in (k, v))

    def one_head(args):
        qh, kh, vh = args  # [M, H], [S, H], [S, H]

        def chunk(state, j):
            kc, vc = (lax.dynamic_slice_in_dim(a, j * C, C)[None] for a in (kh, vh))  # [1, C, H]
            if add is not None:
                a = lax.dynamic_slice_in_dim(add, j * C, C)
                # An excluded key is excluded whatever it holds (a NaN in a row >= S must not leak,
                # as in the reference's where): its key row is zeroed, so its score is exactly
                # MASK_VALUE. On the [C, H] keys, not the [M, C] scores: shared by every query row.
                kc = jnp.where((a == MASK_VALUE)[None, :, None], 0.0, kc)
            s = scores(qh[None], kc, kv_layout="KSH")  # [1, M, C]
            if add is not None:
                s = s + a  # a finite additive bias (the device's -1e9) adds
            return fold(state, s, vc, kv_layout="KSH"), None

        init = init_partial((1, qh.shape[0]), H)
        if n_chunks == 1:
            state, _ = chunk(init, 0)
        else:
            state, _ = lax.scan(chunk, init, jnp.arange(n_chunks))
        out, lse = finalize(state)
        return out[0], lse[0]

    return jax.lax.map(one_head, (q_m, k, v))
