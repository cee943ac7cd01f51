"""The expert's attention over one VLM cache layer: thin callers of ``jaxref.attention.core``.

The cache is head-major [K, Smax, H] (HF's and the device's layout) and is never transposed or
copied: the core folds it with ``kv_layout='KSH'``, the G q heads of a kv head folded into the
M = T*G rows of one matmul, evaluated a kv head at a time (``core.attend_chunks``); under
``jax.vmap`` over trajectories sharing the cache the batch joins M (``batching.shared_kv_rows``).

Two formulations of the same non-causal attention over cache rows [0, S) plus the T own keys:

* ``attend_exact``: the cache part (rows >= S excluded exactly) and the own part merged by their
  log-sum-exp (``core.merge``);
* ``attend_tail_slot``: the device port's form, own K/V written into rows [Smax - T, Smax) and one
  attention over all Smax rows with the additive 0 / -1e9 ``tail_slot_mask``.

Inside the attention the math is float32, as in HF's eager attention (``softmax(dtype=float32)``)
and the device's SDPA accumulators.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention.core import (
    attend_chunks,
    finalize,
    group_queries,
    lse_to_heads,
    merge,
    to_heads,
)
from jaxref.attention.problem import AttentionProblem
from jaxref.batching import shared_kv_rows
from jaxref.config import check_tail_slot_seq_len
from jaxref.numerics.formats import TAIL_MASK_VALUE
from jaxref.precision import FP32, Precision


def concrete_int(x, name: str = "seq_len") -> int | None:
    """``x`` as a python int when it is known at trace time, else None (a traced integer scalar).

    Only integers are integers: a float (100.7, -0.5, even 100.0), a bool, a non-scalar or a traced
    non-integer raises TypeError naming ``name`` (never truncated)."""
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"{name}={x!r} must be an integer, not a bool")
    dtype = getattr(x, "dtype", None)
    if dtype is None and not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name}={x!r} must be an integer (got {type(x).__name__})")
    if dtype is not None and (not jnp.issubdtype(dtype, jnp.integer) or jnp.ndim(x) != 0):
        shown = "a traced value" if isinstance(x, jax.core.Tracer) else repr(x)
        raise TypeError(f"{name}={shown} (dtype {dtype}, shape {jnp.shape(x)}) must be an integer scalar")
    if isinstance(x, jax.core.Tracer):
        return None
    return int(x)


def traced_in_range(x, lo, hi) -> jax.Array:
    """lo <= x <= hi as a traced bool (x an integer scalar, python or traced): what a traced bound
    poisons the result with (NaN) where it cannot raise."""
    x = jnp.asarray(x, jnp.int32)
    return (x >= lo) & (x <= hi)


@functools.cache
def _attend_folded(kv_chunk: int | None):
    """``core.attend_chunks`` at a static ``kv_chunk`` with the shared-keys vmap rule."""
    return shared_kv_rows(functools.partial(attend_chunks, kv_chunk=kv_chunk))


def _fold(q: jax.Array, num_kv_heads: int) -> jax.Array:
    """q [T, N, H] -> pre-scaled float32 [K, M = T*G, H] (the core's GQA fold)."""
    H = q.shape[2]
    return (group_queries(q.astype(jnp.float32), num_kv_heads) * H**-0.5).reshape(num_kv_heads, -1, H)


def _unfold(out: jax.Array, lse: jax.Array, num_tokens: int) -> tuple[jax.Array, jax.Array]:
    """out [K, T*G, H] -> [T, N, H], lse [K, T*G] -> [N, T]."""
    K, M, H = out.shape
    G = M // num_tokens
    return to_heads(out.reshape(K, num_tokens, G, H), K * G), lse_to_heads(lse.reshape(K, num_tokens, G))


def attention_over_rows(q, k, v, *, keep=None, bias=None, kv_chunk: int | None = None):
    """Non-causal GQA attention over head-major key rows with a per-row keep-mask / additive bias.

    Same math and residuals as ``jaxref.attention.attention_reference`` (its oracle in the tests),
    restricted to masks and biases that depend on the key row only (all the expert needs).

    Args:
      q: [T, N, H]; k, v: [K, R, H] (N a multiple of K; q head n uses kv head n // G).
      keep: optional bool [R]; False excludes a row exactly (whatever its K and V rows hold).
      bias: optional float [R] added to the scaled scores (e.g. the device's 0 / -1e9 mask).
      A float / int ``keep`` or a bool ``bias`` is a TypeError (one meaning for masks everywhere).
      kv_chunk: key rows per online-softmax chunk (static); None = one chunk.
    Returns:
      out [T, N, H] float32 and lse [N, T] (fully excluded rows: out 0, lse ``MASK_LSE``).
    """
    R = k.shape[1] if k.ndim == 3 else None
    for name, a in (("keep", keep), ("bias", bias)):
        if R is not None and a is not None and np.shape(a) != (R,):
            raise ValueError(f"{name} must be [R] = ({R},), got shape {np.shape(a)}")
    pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=keep, kv_layout="KSH", mask_name="keep")
    T, K = pr.T, pr.K
    if kv_chunk is not None and kv_chunk <= 0:
        raise ValueError(f"kv_chunk={kv_chunk} must be > 0 (or None)")
    keep = None if keep is None else jnp.asarray(keep)
    bias = None if bias is None else jnp.asarray(bias, jnp.float32)
    state = _attend_folded(kv_chunk)(_fold(q, K), k, v, keep, bias)
    out, lse = finalize(state, True if keep is None else keep.any())
    return _unfold(out, lse, T)


def _check_own_and_cache(q, k_own, v_own, cache_k, cache_v) -> None:
    own = AttentionProblem.from_inputs(q, k_own, v_own)
    T, K = own.T, own.K
    if k_own.shape[0] != T:
        raise ValueError(f"k_own.shape={tuple(k_own.shape)} must be [T, K, H] with T = q.shape[0] = {T}")
    AttentionProblem.from_inputs(q, cache_k, cache_v, kv_layout="KSH")
    if cache_k.shape[0] != K:
        raise ValueError(f"cache_k.shape={tuple(cache_k.shape)} must be [K, Smax, H] (head-major) with "
                         f"K = k_own.shape[1] = {K}")


def attend_exact(q, k_own, v_own, cache_k, cache_v, seq_len, *, precision: Precision = FP32,
                 kv_chunk: int | None = None) -> jax.Array:
    """Non-causal GQA attention over VLM cache rows ``[0, S)`` plus the T own keys (the exact form).

    The cache part (rows ``>= S`` excluded by the mask value) and the own part (the T own keys,
    one dense chunk) are merged by their log-sum-exp: the single softmax over
    ``cat(cache[:, :S], own)`` without copying or transposing the cache - and, under ``vmap`` over
    trajectories, with one cache read for all of them.

    Args:
      q: [T, N, H] roped queries; k_own, v_own: [T, K, H] the expert tokens' roped keys / values.
      cache_k, cache_v: [K, Smax, H] one layer of the VLM cache (head-major, roped keys).
      seq_len: S, valid cache rows, 0 <= S <= Smax (python int or traced int32).
      kv_chunk: cache rows per online-softmax chunk (None = dense).
    Returns:
      [T, N, H] float32 (rounded by ``precision.act``).
    """
    _check_own_and_cache(q, k_own, v_own, cache_k, cache_v)
    if kv_chunk is not None and kv_chunk <= 0:
        raise ValueError(f"kv_chunk={kv_chunk} must be > 0 (or None)")
    K, smax = cache_k.shape[:2]
    s = concrete_int(seq_len)
    if s is not None and not 0 <= s <= smax:
        raise ValueError(f"seq_len={s} must satisfy 0 <= seq_len <= Smax={smax} (cache rows)")
    # Rows >= S excluded exactly (their K and V rows selected away): one graph for a python-int or a traced S.
    keep = jnp.arange(smax) < jnp.asarray(seq_len, jnp.int32)
    qm = _fold(q, K)
    cache_part = _attend_folded(kv_chunk)(qm, precision.kv(cache_k), precision.kv(cache_v), keep, None)
    own_k, own_v = (precision.kv(a).astype(jnp.float32).transpose(1, 0, 2) for a in (k_own, v_own))
    own_part = _attend_folded(None)(qm, own_k, own_v, None, None)  # every row sees its T own keys
    out, lse = finalize(merge(cache_part, own_part))  # S = 0: the cache part is the neutral (-inf, 0, 0)
    out = _unfold(out, lse, q.shape[0])[0]
    if s is None:  # a traced S out of [0, Smax] cannot raise here: it poisons the result instead
        out = jnp.where(traced_in_range(seq_len, 0, smax), out, jnp.nan)
    return precision.act(out)


def tail_slot_mask(seq_len, *, max_seq_len: int, num_tokens: int) -> jax.Array:
    """The device's additive mask over the cache: 0 on ``[0, S)`` and on the own-token tail
    ``[Smax - T, Smax)``, ``-1e9`` on ``[S, Smax - T)``. float32 [Smax]; S may be traced."""
    rows = jnp.arange(max_seq_len)
    visible = (rows < jnp.asarray(seq_len, jnp.int32)) | (rows >= max_seq_len - num_tokens)
    return jnp.where(visible, 0.0, TAIL_MASK_VALUE).astype(jnp.float32)


def write_tail_slot(cache: jax.Array, own: jax.Array) -> jax.Array:
    """Write the own K or V [T, K, H] into rows ``[Smax - T, Smax)`` of a head-major cache layer
    [K, Smax, H] (the device's ``fill_cache``); returns [K, Smax, H] in the cache's dtype."""
    T = own.shape[0]
    own_hm = own.astype(cache.dtype).transpose(1, 0, 2)  # [K, T, H] (small: the cache is not transposed)
    return jax.lax.dynamic_update_slice(cache, own_hm, (0, cache.shape[1] - T, 0))


def attend_tail_slot(q, k_own, v_own, cache_k, cache_v, seq_len, *, precision: Precision = FP32,
                     kv_chunk: int | None = None) -> jax.Array:
    """The device port's formulation: own K/V written into cache rows ``[Smax-T, Smax)``, one
    attention over all Smax rows with the additive ``tail_slot_mask`` hiding ``[S, Smax-T)``.

    Exact because attention is permutation invariant over keys. Rows ``[S, Smax-T)`` may hold any
    finite garbage (the mask adds -1e9 to their scores, as on device). The traced graph does not
    depend on S: one compile serves every S. Under ``vmap`` over trajectories the write makes one
    cache copy per trajectory (as one device buffer per trajectory would); prefer ``attend_exact``
    for batches.

    Args: as ``attend_exact``; requires ``S <= Smax - T`` (checked when S is concrete).
    Returns:
      [T, N, H] float32 (rounded by ``precision.act``).
    """
    _check_own_and_cache(q, k_own, v_own, cache_k, cache_v)
    smax, T = cache_k.shape[1], q.shape[0]
    s = concrete_int(seq_len)
    if s is not None:
        check_tail_slot_seq_len(s, max_seq_len=smax, num_tokens=T)
    # Upcast first: a cache stored in a narrower dtype must not round the own K/V written into it.
    k_all = precision.kv(write_tail_slot(cache_k.astype(jnp.float32), k_own))
    v_all = precision.kv(write_tail_slot(cache_v.astype(jnp.float32), v_own))
    # The device's mask is [rows, Smax] with identical rows; a block format groups along Smax either way.
    bias = precision.mask_(tail_slot_mask(seq_len, max_seq_len=smax, num_tokens=T)[None, :])[0]  # [Smax]
    out, _ = attention_over_rows(q, k_all, v_all, bias=bias, kv_chunk=kv_chunk)
    if s is None:  # a traced S beyond Smax - T cannot raise here: it poisons the result instead
        out = jnp.where(traced_in_range(seq_len, 0, smax - T), out, jnp.nan)
    return precision.act(out)
