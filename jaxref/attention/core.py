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

from jaxref.attention.reference import MASK_LSE

KV_LAYOUTS = ("SKH", "KSH")
# The golden never lets XLA pick a reduced-precision matmul (TF32 / bf16 passes on GPU / TPU).
_HI = lax.Precision.HIGHEST
_EINSUM_QK = {"SKH": "KMH,SKH->KMS", "KSH": "KMH,KSH->KMS"}
_EINSUM_PV = {"SKH": "KMS,SKH->KMH", "KSH": "KMS,KSH->KMH"}


class Partial(NamedTuple):
    """Online-softmax state over the valid keys folded so far (a pytree), any leading shape ``rows``.

    m: running max of their scaled scores (-inf before any; no gradient: results are invariant to it), [*rows]
    l: sum of exp(s - m) over them, [*rows] (0 before any, and while every valid score is -inf)
    o: their exp(s - m)-weighted *mean* value row, [*rows, H] (0 while l = 0): a convex combination of
       finite values, so it stays within their range (3e38 values give 3e38, not an overflowed sum)
    The empty state (-inf, 0, 0) is the neutral element of ``merge``. Whether a row has a valid key at
    all is never read from these values (a score may be -inf, or below any floor): ``finalize`` is told.
    """

    m: jnp.ndarray
    l: jnp.ndarray
    o: jnp.ndarray


def init_partial(rows: tuple[int, ...], head_dim: int) -> Partial:
    """Neutral state for rows of shape ``rows`` (e.g. (K, M))."""
    return Partial(jnp.full(rows, -jnp.inf, jnp.float32), jnp.zeros(rows, jnp.float32),
                   jnp.zeros((*rows, head_dim), jnp.float32))


def _shift(m: jnp.ndarray) -> jnp.ndarray:
    """The max exponents are taken against: 0 where it is -inf (no key yet, or every valid score -inf),
    so that exp(s - shift) never computes -inf - -inf."""
    return jnp.where(m == -jnp.inf, 0.0, m)


def _safe(x: jnp.ndarray) -> jnp.ndarray:
    """x with exact zeros replaced by 1 (a divisor; the double-where keeps gradients NaN-free)."""
    return jnp.where(x == 0, 1.0, x)


def scores(q_m: jnp.ndarray, k: jnp.ndarray, *, kv_layout: str) -> jnp.ndarray:
    """q_m [K, M, H] (pre-scaled) . k [S, K, H] or [K, S, H] -> [K, M, S] float32 (operands keep
    their dtype, fp32 accumulation)."""
    return jnp.einsum(_EINSUM_QK[kv_layout], q_m, k, precision=_HI, preferred_element_type=jnp.float32)


def fold(state: Partial, s: jnp.ndarray, v: jnp.ndarray, *, kv_layout: str, keep=None) -> Partial:
    """Fold one key tile into the running state (ADR section 3 inner tile).

    Args:
      state: m, l [K, M], o [K, M, H].
      s: [K, M, S] scaled (and biased) scores; any value, -inf and NaN included, is a score.
      v: [S, K, H] or [K, S, H] values of the tile (``kv_layout``).
      keep: None (every key of the tile is valid for every row) or bool broadcastable to [K, M, S]:
        False excludes a key from a row whatever its K and V rows hold (selected, never multiplied by 0).
    A non-finite value in the V row of a key a row attends makes that row's output NaN (as in
    ``attention_reference``), whatever its weight.
    """
    s_valid = s if keep is None else jnp.where(keep, s, -jnp.inf)
    m1 = lax.stop_gradient(jnp.maximum(state.m, s_valid.max(-1)))
    shift = _shift(m1)
    p = jnp.exp(s_valid - shift[..., None])  # excluded keys: exp(-inf) = 0
    corr = jnp.exp(state.m - shift)
    lt = p.sum(-1)
    l1 = state.l * corr + lt
    bad = ~jnp.isfinite(v).all(-1)  # [S, K] or [K, S]: keys whose value row holds a NaN / Inf
    bad_ks = bad.T if kv_layout == "SKH" else bad  # [K, S]
    hit = bad_ks.any(-1)[:, None] if keep is None else (keep & bad_ks[:, None, :]).any(-1)  # [K, M]
    v_fin = jnp.where(bad[..., None], jnp.zeros((), v.dtype), v)
    # The tile's mean value row: P normalised in the tile, rounded to V's storage type before the second
    # GEMM (as a bf16 FlashAttention kernel rounds P); then a convex merge with the running mean.
    pv = jnp.einsum(_EINSUM_PV[kv_layout], (p / _safe(lt)[..., None]).astype(v.dtype), v_fin, precision=_HI,
                    preferred_element_type=jnp.float32)
    l1s = _safe(l1)
    o1 = state.o * (state.l * corr / l1s)[..., None] + pv * (lt / l1s)[..., None]
    return Partial(m1, l1, jnp.where(hit[..., None], jnp.nan, o1))


def merge(a: Partial, b: Partial) -> Partial:
    """Log-sum-exp merge of two partials over disjoint key sets (ADR section 4; associative, commutative).

    A partial that saw no valid key (l = 0) is neutral: its weight is 0.
    """
    m = lax.stop_gradient(jnp.maximum(a.m, b.m))
    shift = _shift(m)
    la, lb = a.l * jnp.exp(a.m - shift), b.l * jnp.exp(b.m - shift)
    l = la + lb
    ls = _safe(l)
    return Partial(m, l, a.o * (la / ls)[..., None] + b.o * (lb / ls)[..., None])


def merge_all(p: Partial, *, max_fn, sum_fn, total_bound) -> Partial:
    """Merge partials spread over ranks in one shot (Tree Attention): rescale each to the global max
    ``max_fn(m)``, weight its mean row by its l divided by ``total_bound`` (>= the sum of every rank's l,
    e.g. ranks x keys per rank) so the summed weighted rows stay within the values' range, and sum
    the weighted (O, l), packed into one array, with ``sum_fn``. With ``lax.pmax`` / ``lax.psum`` over
    mesh axes this is the decode all-reduce (two collectives); every rank ends with the same state."""
    m = lax.stop_gradient(max_fn(p.m))
    w = p.l * jnp.exp(p.m - _shift(m)) / total_bound
    ow = sum_fn(jnp.concatenate([p.o * w[..., None], w[..., None]], -1))  # [..., H + 1]
    total = ow[..., -1]
    return Partial(m, total * total_bound, ow[..., :-1] / _safe(total)[..., None])


def finalize(p: Partial, has_key=True) -> tuple[jnp.ndarray, jnp.ndarray]:
    """out = the weighted mean o, lse = m + log l; rows without a valid key give (0, MASK_LSE).

    ``has_key`` (bool, broadcastable to ``p.l``): which rows have at least one valid key by the mask,
    the causality and S - known from the inputs, never inferred from a score. A row that has one but
    whose every valid score is -inf (l = 0) gives out NaN (0 / 0) and lse -inf, as the reference; a
    NaN l (a NaN / +Inf score) propagates to both.
    """
    valid = p.l != 0
    out = jnp.where(valid[..., None], p.o, jnp.nan)
    lse = jnp.where(valid, p.m + jnp.log(_safe(p.l)), -jnp.inf)
    has_key = jnp.asarray(has_key, bool)
    return jnp.where(has_key[..., None], out, 0.0), jnp.where(has_key, lse, MASK_LSE)


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


def attend_chunks(q_m: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, keep: jnp.ndarray | None,
                  bias: jnp.ndarray | None, *, kv_chunk: int | None) -> Partial:
    """Online softmax of folded queries over head-major keys, one kv head at a time.

    Evaluated per kv head (``lax.map``): the [M, chunk] scores of one head stay in the last-level
    cache, measured faster on XLA:CPU than one batched [K, M, S] evaluation.

    Args:
      q_m: [K, M, H] pre-scaled folded queries; k, v: [K, S, H] (upcast to float32).
      keep: optional bool [S]; False excludes a key row exactly, whatever its K and V rows hold.
      bias: optional float32 [S] added to the scores (the device's 0 / -1e9 mask: a number, not an exclusion).
      kv_chunk: keys per ``lax.scan`` chunk (static); None = one chunk.
    Returns:
      the unnormalised ``Partial`` (m, l [K, M], o [K, M, H]); ``finalize`` it, or ``merge`` it first.
    """
    S, H = k.shape[1:]
    C = S if kv_chunk is None else min(kv_chunk, S)
    n_chunks = -(-S // C)
    pad = n_chunks * C - S
    k, v = k.astype(jnp.float32), v.astype(jnp.float32)
    if pad:  # padded keys are excluded
        keep = jnp.pad(jnp.ones(S, bool) if keep is None else keep, (0, pad), constant_values=False)
        bias = None if bias is None else jnp.pad(bias, (0, pad))
        k, v = (jnp.pad(a, ((0, 0), (0, pad), (0, 0))) for a in (k, v))

    def one_head(args):
        qh, kh, vh = args  # [M, H], [S, H], [S, H]

        def chunk(state, j):
            kc, vc = (lax.dynamic_slice_in_dim(a, j * C, C)[None] for a in (kh, vh))  # [1, C, H]
            kp = None if keep is None else lax.dynamic_slice_in_dim(keep, j * C, C)[None, None, :]  # [1, 1, C]
            if kp is not None:
                # An excluded key row is zeroed (on the [C, H] keys, shared by every query row): its
                # score is then finite, so no 0 * NaN reaches the gradient of q.
                kc = jnp.where(kp[0, 0][None, :, None], kc, 0.0)
            s = scores(qh[None], kc, kv_layout="KSH")  # [1, M, C]
            if bias is not None:
                s = s + lax.dynamic_slice_in_dim(bias, j * C, C)
            return fold(state, s, vc, kv_layout="KSH", keep=kp), None

        init = init_partial((1, qh.shape[0]), H)
        if n_chunks == 1:
            state, _ = chunk(init, 0)
        else:
            state, _ = lax.scan(chunk, init, jnp.arange(n_chunks))
        return Partial(*(x[0] for x in state))

    return jax.lax.map(one_head, (q_m, k, v))
