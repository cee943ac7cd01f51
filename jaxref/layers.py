"""Building blocks of the action expert's decoder layer (HF ``Qwen3VLTextDecoderLayer`` semantics).

Pure functions on arrays and on the ``LayerParams`` pytree; no batch axis (``jax.vmap`` adds one).
Dimension vocabulary: T expert tokens, S valid VLM cache rows, Smax cache capacity, N q heads,
K kv heads, G = N // K, H head_dim, D model width, F MLP width.

Parameter layout is HF's ``nn.Linear`` one: every matmul weight is stored ``[out, in]``, with the
head axes split out (``wq [N, H, D]``, ``wo [D, N, H]``), so HF import/export is a reshape
(``jaxref.weights``). With few rows (T = 64 tokens) each projection is computed as ``(W @ x.T).T``
(``linear``): with the weight as the left operand in its stored row-major layout, XLA:CPU's GEMM
runs ~20% faster than ``x @ W`` with W stored [in, out] (measured at alpamayo_tt shapes: the MLP
23.3 -> 19.3 ms, wo 3.9 -> 2.2 ms). The device stores weights transposed, [in, out]; its block
formats group 16 consecutive values along the output axis, which is what
``precision.weight(W, axis=0)`` rounds here (H is a multiple of 16, so the groups of ``wq [N*H, D]``'s axis 0 are those of the device's
fused ``wqkv [D, (N + 2K) H]``).

Precision hooks (``jaxref.precision.Precision``), one per rounding point of the device graph
(``seeds/EXPERT_NOTES.md``, 19 ttnn ops per layer). All are the identity under ``Precision.fp32()``:

  ==========================  ===========================================================
  hook                        where
  ==========================  ===========================================================
  ``p.weight(W, axis=0)``     every matmul weight [out, in], *inside* the layer (so under
                              ``lax.scan`` only one layer's rounded copy exists at a time)
  ``p.norm_weight(g)``        every RMSNorm gamma (input, post-attention, q_norm, k_norm)
  ``p.act(.)``                rms_norm (after the normalisation *and* after the gamma
                              multiply: HF casts back to the input dtype in between), the
                              q/k/v matmul outputs, q/k norm, RoPE (each product and the sum,
                              and the cos/sin tables), attention output, wo output, both
                              residual adds, gate/up matmul outputs, silu, silu*up, down
  ``p.kv(.)``                 the K/V rows attention reads: VLM cache rows and own K/V
  ``p.mask_(.)``              the additive tail-slot mask
  ==========================  ===========================================================

Inside the attention op (scores, softmax) the math is float32, as in HF's eager attention
(``softmax(dtype=float32)``) and the device's SDPA accumulators.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from jaxref.attention.reference import MASK_LSE, MASK_VALUE
from jaxref.config import ExpertConfig
from jaxref.param_table import LAYER_PARAMS
from jaxref.precision import Precision

FP32 = Precision.fp32()
# The golden never lets XLA pick a reduced-precision matmul (TF32 / bf16 passes on GPU / TPU).
_HI = jax.lax.Precision.HIGHEST
# The device's additive mask value for hidden cache rows (seeds/EXPERT_NOTES.md: 0 / -1e9).
TAIL_MASK_VALUE = -1e9
ATTENTION_MODES = ("exact", "tail_slot")
# Key rows per online-softmax chunk of the cache attention (``attention_folded``), measured on 2 CPU
# cores at alpamayo_tt shapes, S = 4700, head-major cache (one decoder layer, median ms):
#   1 trajectory:           unchunked 74, 2400: 84, 1024: 87, 512: 94  -> KV_CHUNK = None (dense)
#   vmap over 8 sharing it: the batch folds into M a kv head at a time (``attention_folded``), and
#                           dense stays fastest: a whole layer 359 ms dense vs 437 ms in chunks of 512.
KV_CHUNK = None
KV_CHUNK = None
KV_CHUNK_BATCHED = 512


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LayerParams:
    """One decoder layer (a leading L axis when stacked for ``lax.scan``).

    float32, or a narrower float storage dtype (e.g. bf16 random weights to halve host memory):
    the precision hooks upcast each weight inside the layer, and all math is float32.

    Attributes (HF name in ``Qwen3VLTextModel`` -> shape here):
      input_norm: ``input_layernorm.weight`` -> [D]
      wq: ``self_attn.q_proj.weight`` [N*H, D] -> [N, H, D]
      wk: ``self_attn.k_proj.weight`` [K*H, D] -> [K, H, D]
      wv: ``self_attn.v_proj.weight`` [K*H, D] -> [K, H, D]
      q_norm: ``self_attn.q_norm.weight`` -> [H]
      k_norm: ``self_attn.k_norm.weight`` -> [H]
      wo: ``self_attn.o_proj.weight`` [D, N*H] -> [D, N, H]
      post_norm: ``post_attention_layernorm.weight`` -> [D]
      w_gate: ``mlp.gate_proj.weight`` -> [F, D]
      w_up: ``mlp.up_proj.weight`` -> [F, D]
      w_down: ``mlp.down_proj.weight`` -> [D, F]
    """

    input_norm: jax.Array
    wq: jax.Array
    wk: jax.Array
    wv: jax.Array
    q_norm: jax.Array
    k_norm: jax.Array
    wo: jax.Array
    post_norm: jax.Array
    w_gate: jax.Array
    w_up: jax.Array
    w_down: jax.Array


def layer_param_shapes(cfg: ExpertConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every ``LayerParams`` field for one layer of ``cfg`` (from ``jaxref.param_table``)."""
    return {s.field: s.golden_shape(cfg) for s in LAYER_PARAMS}


def check_layer_params(params: LayerParams, cfg: ExpertConfig, *, stacked: int | None = None) -> None:
    """Raise ValueError naming the field whose shape does not match ``cfg`` (``stacked``: leading L)."""
    lead = () if stacked is None else (stacked,)
    for name, shape in layer_param_shapes(cfg).items():
        got = tuple(getattr(params, name).shape)
        if got != lead + shape:
            raise ValueError(f"LayerParams.{name} has shape {got}, expected {lead + shape}")


# ---- normalisation -------------------------------------------------------------------------
def rms_norm(x: jax.Array, weight: jax.Array, *, eps: float, precision: Precision = FP32) -> jax.Array:
    """HF ``Qwen3VLTextRMSNorm`` over the last axis.

    HF casts the input to fp32, normalises, casts back to the input dtype and only then multiplies
    by the weight; ``precision.act`` models both casts (identity in fp32).

    Args:
      x: [..., W] activations (float32 holding values of the activation format).
      weight: [W] gamma.
      eps: added to the mean square.
    Returns:
      [..., W] float32.
    """
    if weight.shape != x.shape[-1:]:
        raise ValueError(
            f"rms_norm weight has shape {weight.shape}, expected ({x.shape[-1]},) for x {x.shape}"
        )
    x32 = x.astype(jnp.float32)
    var = jnp.mean(x32 * x32, axis=-1, keepdims=True)
    y = precision.act(x32 * jax.lax.rsqrt(var + eps))
    return precision.act(precision.norm_weight(weight) * y)


# ---- rotary position embedding -------------------------------------------------------------
def rope_positions(seq_len, rope_delta, num_tokens: int) -> jax.Array:
    """Expert token positions ``i + rope_delta + S`` for i in [0, T): int32 [T] (S, delta may be traced)."""
    return (
        jnp.arange(num_tokens, dtype=jnp.int32)
        + jnp.asarray(rope_delta, jnp.int32)
        + jnp.asarray(seq_len, jnp.int32)
    )


def rope_tables(
    positions: jax.Array, *, head_dim: int, theta: float, precision: Precision = FP32
) -> tuple[jax.Array, jax.Array]:
    """HF rotate_half RoPE tables for integer positions, computed in float32 exactly as HF does.

    ``inv_freq = 1 / theta ** (arange(0, H, 2) / H)``, ``emb = cat(freqs, freqs)``. Qwen3-VL's
    interleaved M-RoPE reduces to this 1-D RoPE because the expert's three position rows are equal.

    Args:
      positions: [T] integer positions.
    Returns:
      cos, sin: [T, H] float32, rounded by ``precision.act`` (HF casts them to the activation dtype).
    """
    if head_dim % 2:
        raise ValueError(f"head_dim={head_dim} must be even for RoPE")
    if positions.ndim != 1:
        raise ValueError(f"positions must be [T], got shape {positions.shape}")
    inv_freq = 1.0 / (jnp.float32(theta) ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    freqs = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]  # [T, H/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)  # [T, H]
    return precision.act(jnp.cos(emb)), precision.act(jnp.sin(emb))


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array, *, precision: Precision = FP32) -> jax.Array:
    """``x * cos + rotate_half(x) * sin`` with ``rotate_half(x) = cat(-x2, x1)``.

    Args:
      x: [T, heads, H]; cos, sin: [T, H].
    Returns:
      [T, heads, H] float32 (each product and the sum rounded by ``precision.act``, as HF does).
    """
    T, _, H = x.shape
    if cos.shape != (T, H) or sin.shape != (T, H):
        raise ValueError(f"cos/sin must be [T, H] = {(T, H)}, got {cos.shape} / {sin.shape}")
    x1, x2 = x[..., : H // 2], x[..., H // 2 :]
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return precision.act(precision.act(x * cos[:, None, :]) + precision.act(rot * sin[:, None, :]))


# ---- attention over the VLM cache ----------------------------------------------------------
def _concrete_int(x) -> int | None:
    """``int(x)`` when ``x`` is known at trace time, else None (a traced S skips the static checks)."""
    if isinstance(x, jax.core.Tracer):
        return None
    return int(x)


def _check_attention_args(q, k_own, v_own, cache_k, cache_v):
    T, N, H = q.shape
    if k_own.shape != v_own.shape or k_own.ndim != 3 or k_own.shape[0] != T or k_own.shape[2] != H:
        raise ValueError(
            f"k_own / v_own must be [T, K, H] with T={T}, H={H}; got {k_own.shape} / {v_own.shape}"
        )
    K = k_own.shape[1]
    if cache_k.shape != cache_v.shape or cache_k.ndim != 3 or (cache_k.shape[0], cache_k.shape[2]) != (K, H):
        raise ValueError(
            f"cache_k / cache_v must be [K, Smax, H] = [{K}, Smax, {H}] (head-major); "
            f"got {cache_k.shape} / {cache_v.shape}"
        )
    if N % K:
        raise ValueError(f"q heads N={N} not divisible by kv heads K={K}")


def _check_rows_args(q, k, v) -> tuple[int, int, int, int, int, int]:
    """Validate q [T, N, H] and head-major k, v [K, R, H]; return (T, R, N, K, G, H)."""
    if q.ndim != 3:
        raise ValueError(f"q must be [T, N, H], got shape {q.shape}")
    if k.ndim != 3 or k.shape != v.shape:
        raise ValueError(f"k and v must be [K, R, H] of equal shape, got k {k.shape}, v {v.shape}")
    T, N, H = q.shape
    K, R, Hk = k.shape
    if Hk != H:
        raise ValueError(f"head_dim mismatch: q has H={H}, k has H={Hk}")
    if N % K:
        raise ValueError(f"q heads N={N} not divisible by kv heads K={K}")
    return T, R, N, K, N // K, H


def fold_gqa(q: jax.Array, num_kv_heads: int) -> jax.Array:
    """[T, N, H] -> [K, G*T, H], scaled by H**-0.5: the G q heads of kv head k and the T tokens
    form the M = G*T rows of one matmul against that kv head's keys (row ``g*T + t`` is q head
    ``k*G + g``, token t). float32."""
    T, N, H = q.shape
    K = num_kv_heads
    G = N // K
    return (q.astype(jnp.float32) * H**-0.5).reshape(T, K, G, H).transpose(1, 2, 0, 3).reshape(K, G * T, H)


def unfold_gqa(out: jax.Array, lse: jax.Array, num_tokens: int) -> tuple[jax.Array, jax.Array]:
    """Inverse of ``fold_gqa`` for the results: out [K, G*T, H] -> [T, N, H], lse [K, G*T] -> [N, T]."""
    K, M, H = out.shape
    T = num_tokens
    G = M // T
    return out.reshape(K, G, T, H).transpose(2, 0, 1, 3).reshape(T, K * G, H), lse.reshape(K * G, T)


def attention_folded(
    qm: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    add: jax.Array | None = None,
    kv_chunk: int | None = KV_CHUNK,
) -> tuple[jax.Array, jax.Array]:
    """Online-softmax attention of GQA-folded queries over head-major key rows (no transposes).

    Evaluated one kv head at a time (``lax.map``): the [M, R] scores of one head stay in the
    last-level cache, measured faster than one batched [K, M, R] evaluation (one trajectory at
    alpamayo_tt shapes, S = 4700, 2 cores: 18.6-19.5 ms vs 21-29 ms). Under ``jax.vmap`` over
    queries sharing the keys (trajectories sharing one cache) the batch is folded into M, so each
    head's keys are read once for all (8 trajectories: 152-161 ms vs 165-172 ms looping over them,
    172-245 ms as plain batched evaluation). Derivatives (forward and reverse, also under vmap)
    come from the plain batched evaluation.

    Args:
      qm: [K, M, H] pre-scaled folded queries (``fold_gqa``).
      k, v: [K, R, H] key / value rows (any float dtype; upcast to float32).
      add: optional float32 [R] added to the scores; ``MASK_VALUE`` excludes a row exactly.
      kv_chunk: key rows per chunk (static); None = one chunk (dense).
    Returns:
      out [K, M, H] float32 (normalised) and lse [K, M] (rows seeing nothing: out 0, lse ``MASK_LSE``).
    """
    return _attention_folded_fn(kv_chunk)(qm, k, v, add)


def _with_vmap_rule(impl, rule):
    """``impl`` with a custom vmap rule ``rule(f, impl, axis_size, in_batched, *args)`` (``f``: the
    result, to recurse with; ``impl``: to fall back to plain batching); derivatives, forward and
    reverse mode, are those of ``impl`` itself (custom_vmap alone has no transpose rule)."""
    batchable = jax.custom_batching.custom_vmap(impl)
    f = jax.custom_jvp(lambda *args: batchable(*args))
    batchable.def_vmap(functools.partial(rule, f, impl))
    f.defjvp(lambda primals, tangents: jax.jvp(impl, primals, tangents))
    return f


@functools.cache
def _attention_folded_fn(kv_chunk):
    """``_attention_folded_impl`` at a static ``kv_chunk`` with ``_attention_folded_vmap``."""
    return _with_vmap_rule(functools.partial(_attention_folded_impl, kv_chunk=kv_chunk), _attention_folded_vmap)


def _attention_folded_vmap(f, impl, axis_size, in_batched, qm, k, v, add):
    q_b, k_b, v_b, add_b = in_batched
    if k_b or v_b or add_b or not q_b:  # per-example keys (e.g. the own K/V): plain batching
        axes = tuple(0 if b else None for b in (q_b, k_b, v_b, add_b))
        return jax.vmap(impl, in_axes=axes)(qm, k, v, add), (True, True)
    B, K, M, H = qm.shape  # shared keys: the batch joins the query rows
    out, lse = f(qm.transpose(1, 0, 2, 3).reshape(K, B * M, H), k, v, add)
    return (out.reshape(K, B, M, H).transpose(1, 0, 2, 3), lse.reshape(K, B, M).transpose(1, 0, 2)), (True, True)


def _attention_folded_impl(qm, k, v, add, *, kv_chunk):
    """[K, M, H] x [K, R, H] -> out [K, M, H], lse [K, M]: ``_attention_one_head`` over K."""
    return jax.lax.map(lambda a: _attention_one_head(*a, add, kv_chunk=kv_chunk), (qm, k, v))


def _attention_one_head(q, k, v, add, *, kv_chunk):
    """Online softmax of q [M, H] over k, v [R, H] (+ add [R]) in chunks: out [M, H], lse [M]."""
    M, H = q.shape
    R = k.shape[0]
    C = R if kv_chunk is None else min(kv_chunk, R)
    n_chunks = -(-R // C)
    pad = n_chunks * C - R
    k, v = k.astype(jnp.float32), v.astype(jnp.float32)
    if pad:  # padded rows are excluded
        add = jnp.zeros(R, jnp.float32) if add is None else add
        add = jnp.pad(add, (0, pad), constant_values=MASK_VALUE)
        k, v = (jnp.pad(a, ((0, pad), (0, 0))) for a in (k, v))
    # The running max starts at FLOOR = MASK_VALUE / 2, above every excluded score and far below
    # any real one (even with the -1e9 device bias), so exp(s - m) is exactly 0 on excluded rows
    # even before a valid row was seen.

    def chunk(carry, j):
        m, l, acc = carry  # running max [M], sum [M], unnormalised output [M, H]
        kc, vc = (jax.lax.dynamic_slice_in_dim(a, j * C, C, axis=0) for a in (k, v))
        s = jnp.einsum("MH,SH->MS", q, kc, precision=_HI)  # [M, C]
        if add is not None:
            s = s + jax.lax.dynamic_slice_in_dim(add, j * C, C)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.exp(s - m_new[..., None])
        corr = jnp.exp(m - m_new)
        acc = acc * corr[..., None] + jnp.einsum("MS,SH->MH", p, vc, precision=_HI)
        return (m_new, l * corr + jnp.sum(p, axis=-1), acc), None

    init = (
        jnp.full((M,), 0.5 * MASK_VALUE, jnp.float32),
        jnp.zeros((M,), jnp.float32),
        jnp.zeros((M, H), jnp.float32),
    )
    if n_chunks == 1:
        (m, l, acc), _ = chunk(init, 0)
    else:
        (m, l, acc), _ = jax.lax.scan(chunk, init, jnp.arange(n_chunks))
    valid = l > 0
    out = acc / jnp.where(valid, l, 1.0)[..., None]
    lse = jnp.where(valid, m + jnp.log(jnp.where(valid, l, 1.0)), MASK_LSE)
    return out, lse


def _row_add(keep, bias):
    """The additive score term of ``attention_over_rows``: bias, and ``MASK_VALUE`` where not kept."""
    if keep is not None:
        return jnp.where(keep, 0.0 if bias is None else bias.astype(jnp.float32), MASK_VALUE)
    return None if bias is None else bias.astype(jnp.float32)


def attention_over_rows(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    *,
    keep: jax.Array | None = None,
    bias: jax.Array | None = None,
    kv_chunk: int | None = KV_CHUNK,
) -> tuple[jax.Array, jax.Array]:
    """Non-causal GQA attention over head-major key rows with a per-row keep-mask / additive bias.

    Same math and residuals as ``jaxref.attention.attention_reference`` (its oracle in the tests,
    called there with k, v transposed to its [S, K, H] layout), restricted to masks and biases that
    depend on the key row only (all the expert needs). The keys are read in the head-major
    [K, R, H] layout of HF's and the device's cache (no transpose of the cache), the G q heads of a
    kv head folded into the M = G*T rows of one matmul per kv head (no K/V repeat), evaluated a kv
    head at a time as an online softmax over chunks of ``kv_chunk`` key rows (``lax.scan``), so the
    scores never exceed [M, kv_chunk]. Under ``vmap`` over B trajectories sharing the keys, M grows
    to B*G*T (``attention_folded``).

    Args:
      q: [T, N, H]; k, v: [K, R, H] (N a multiple of K; q head n uses kv head n // G).
      keep: optional bool [R]; False excludes a row exactly (it contributes 0 whatever finite
        values it holds).
      bias: optional float [R] added to the scaled scores (e.g. the device's 0 / -1e9 mask).
      kv_chunk: key rows per chunk (static); None = one chunk.
    Returns:
      out [T, N, H] float32 and lse [N, T] (fully excluded rows: out 0, lse ``MASK_LSE``).
    """
    T, R, _, K, _, _ = _check_rows_args(q, k, v)
    if kv_chunk is not None and kv_chunk <= 0:
        raise ValueError(f"kv_chunk={kv_chunk} must be > 0 (or None)")
    for name, a in (("keep", keep), ("bias", bias)):
        if a is not None and a.shape != (R,):
            raise ValueError(f"{name} must be [R] = ({R},), got shape {a.shape}")
    out, lse = attention_folded(fold_gqa(q, K), k, v, add=_row_add(keep, bias), kv_chunk=kv_chunk)
    return unfold_gqa(out, lse, T)


def attend_exact(
    q: jax.Array,
    k_own: jax.Array,
    v_own: jax.Array,
    cache_k: jax.Array,
    cache_v: jax.Array,
    seq_len,
    *,
    precision: Precision = FP32,
    kv_chunk: int | None = KV_CHUNK,
) -> jax.Array:
    """Non-causal GQA attention over VLM cache rows ``[0, S)`` plus the T own keys (the exact form).

    The cache part (``attention_folded`` over the head-major cache, rows ``>= S`` excluded by the
    mask value, so they contribute nothing whatever finite values they hold) and the own part
    (the T own keys, one dense chunk) are merged by their log-sum-exp, in the GQA-folded layout:
    the single softmax over ``cat(cache[:, :S], own)`` without copying or transposing the cache -
    and, under ``vmap`` over trajectories, with one cache read for all of them.

    Args:
      q: [T, N, H] roped queries.
      k_own, v_own: [T, K, H] the expert tokens' roped keys / values.
      cache_k, cache_v: [K, Smax, H] one layer of the VLM cache, head-major as HF and the device
        store it (roped keys).
      seq_len: S, valid cache rows, 0 <= S <= Smax (python int or traced int32).
      kv_chunk: cache rows per online-softmax chunk (see ``attention_over_rows``).
    Returns:
      [T, N, H] float32 (rounded by ``precision.act``).
    """
    _check_attention_args(q, k_own, v_own, cache_k, cache_v)
    if kv_chunk is not None and kv_chunk <= 0:
        raise ValueError(f"kv_chunk={kv_chunk} must be > 0 (or None)")
    K, smax = cache_k.shape[:2]
    s = _concrete_int(seq_len)
    if s is not None and not 0 <= s <= smax:
        raise ValueError(f"seq_len={s} must satisfy 0 <= seq_len <= Smax={smax} (cache rows)")
    # Rows >= S excluded by the mask value (one graph for a python-int or a traced S; evaluated a kv
    # head at a time, the mask add costs nothing measurable: 19.8 vs 19.5 ms at alpamayo_tt shapes).
    add = jnp.where(jnp.arange(smax) < jnp.asarray(seq_len, jnp.int32), 0.0, MASK_VALUE)
    qm = fold_gqa(q, K)
    out_c, lse_c = attention_folded(
        qm, precision.kv(cache_k), precision.kv(cache_v), add=add, kv_chunk=kv_chunk
    )
    own_k, own_v = (precision.kv(a).astype(jnp.float32).transpose(1, 0, 2) for a in (k_own, v_own))
    out_o, lse_o = attention_folded(qm, own_k, own_v, kv_chunk=None)  # [K, M, H], [K, M]
    lse = jnp.logaddexp(lse_c, lse_o)  # with S = 0, lse_c = MASK_LSE and its weight is exp(-huge) = 0
    out = out_c * jnp.exp(lse_c - lse)[..., None] + out_o * jnp.exp(lse_o - lse)[..., None]
    return precision.act(unfold_gqa(out, lse, q.shape[0])[0])


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


def attend_tail_slot(
    q: jax.Array,
    k_own: jax.Array,
    v_own: jax.Array,
    cache_k: jax.Array,
    cache_v: jax.Array,
    seq_len,
    *,
    precision: Precision = FP32,
    kv_chunk: int | None = KV_CHUNK,
) -> jax.Array:
    """The device port's formulation: own K/V written into cache rows ``[Smax-T, Smax)``, one
    attention over all Smax rows with the additive ``tail_slot_mask`` hiding ``[S, Smax-T)``.

    Exact because attention is permutation invariant over keys. Rows ``[S, Smax-T)`` may hold any
    finite garbage (the mask adds -1e9 to their scores, as on device; a NaN/Inf there would poison
    the row exactly as it would on device). The traced graph does not depend on S: one compile
    serves every S. Under ``vmap`` over trajectories the write makes one cache copy per trajectory
    (as one device buffer per trajectory would); prefer ``attend_exact`` for batches.

    Args: as ``attend_exact`` (cache_k, cache_v [K, Smax, H]); requires ``S <= Smax - T`` (checked
      when S is concrete).
    Returns:
      [T, N, H] float32 (rounded by ``precision.act``).
    """
    _check_attention_args(q, k_own, v_own, cache_k, cache_v)
    smax, T = cache_k.shape[1], q.shape[0]
    s = _concrete_int(seq_len)
    if s is not None and not 0 <= s <= smax - T:
        raise ValueError(
            f"seq_len={s} must satisfy 0 <= seq_len <= Smax - T = {smax} - {T} = {smax - T}: "
            "the last T cache rows hold the expert's own K/V"
        )
    # Upcast first: a cache stored in a narrower dtype must not round the own K/V written into it.
    k_all = precision.kv(write_tail_slot(cache_k.astype(jnp.float32), k_own))
    v_all = precision.kv(write_tail_slot(cache_v.astype(jnp.float32), v_own))
    # The device's mask is [rows, Smax] with identical rows; a block format groups along Smax either way.
    bias = precision.mask_(tail_slot_mask(seq_len, max_seq_len=smax, num_tokens=T)[None, :])[0]  # [Smax]
    out, _ = attention_over_rows(q, k_all, v_all, bias=bias, kv_chunk=kv_chunk)
    return precision.act(out)


# ---- the layer -----------------------------------------------------------------------------
# XLA:CPU GEMM kernel choice for ``x @ W.T`` with W [O, I] (alpamayo_tt shapes, 2 cores, ms):
#   rows M = 64:  (W @ x.T).T 6.6   x @ W.T 8.6   (weight streaming dominates; W on the left wins)
#   rows M = 512: (W @ x.T).T 65    x @ W.T 47    (1536 -> 6144; compute dominates)
# so up to this many rows the weight goes on the left. Under ``vmap`` the rows of all trajectories
# count (``_linear``'s batching rule folds the batch into the rows).
WEIGHT_LEFT_MAX_ROWS = 64


def _linear_rows(x: jax.Array, w: jax.Array) -> jax.Array:
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


_linear = _with_vmap_rule(_linear_rows, _linear_vmap)


def linear(x: jax.Array, w: jax.Array, *, precision: Precision = FP32) -> jax.Array:
    """``x @ w.T`` for a weight in HF's [out, in] layout.

    Computed as ``(w @ x.T).T`` for at most ``WEIGHT_LEFT_MAX_ROWS`` rows (faster on XLA:CPU with
    few rows), else as ``x @ w.T``; under ``jax.vmap`` the rows of the whole batch decide. jit-,
    vmap- and differentiable (forward and reverse mode).

    Args:
      x: [..., I] activations.
      w: [O, I] weight; ``precision.weight`` rounds it with block formats grouped along O.
    Returns:
      [..., O] float32.
    """
    if w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear wants w [O, I] with I = x.shape[-1] = {x.shape[-1]}; got w {w.shape}")
    return _linear(x.astype(jnp.float32), precision.weight(w, axis=0))


def project_qkv(
    params: LayerParams,
    h: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: ExpertConfig,
    precision: Precision = FP32,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q/k/v projections, per-head q/k RMSNorm (before RoPE), RoPE on q and k.

    Args:
      h: [T, D] the input-normed residual stream.
      cos, sin: [T, H] RoPE tables.
    Returns:
      q [T, N, H], k [T, K, H] (roped; what the device writes to the cache tail), v [T, K, H].
    """
    T, D = h.shape
    q, k, v = (
        precision.act(linear(h, w.reshape(-1, D), precision=precision)).reshape(T, *w.shape[:2])
        for w in (params.wq, params.wk, params.wv)
    )
    q = rms_norm(q, params.q_norm, eps=cfg.rms_eps, precision=precision)
    k = rms_norm(k, params.k_norm, eps=cfg.rms_eps, precision=precision)
    return apply_rope(q, cos, sin, precision=precision), apply_rope(k, cos, sin, precision=precision), v


def mlp(params: LayerParams, n: jax.Array, *, precision: Precision = FP32) -> jax.Array:
    """SwiGLU: ``down(silu(gate(n)) * up(n))``; n [T, D] -> [T, D]."""
    g = precision.act(linear(n, params.w_gate, precision=precision))
    u = precision.act(linear(n, params.w_up, precision=precision))
    m = precision.act(precision.act(jax.nn.silu(g)) * u)
    return precision.act(linear(m, params.w_down, precision=precision))


def decoder_layer(
    params: LayerParams,
    x: jax.Array,
    kv: tuple[jax.Array, jax.Array],
    seq_len,
    rope: tuple[jax.Array, jax.Array],
    *,
    cfg: ExpertConfig,
    attention: str = "exact",
    precision: Precision = FP32,
    kv_chunk: int | None = KV_CHUNK,
) -> jax.Array:
    """One pre-norm decoder layer attending non-causally to one VLM cache layer plus its own tokens.

    ``h = x + wo(attn(rms_norm(x)))``; ``out = h + down(silu(gate(n)) * up(n))``, ``n = rms_norm(h)``.

    Args:
      params: one layer's ``LayerParams`` (unstacked).
      x: [T, D] residual stream.
      kv: (cache_k, cache_v), each [K, Smax, H] (head-major, the HF / device layout): this layer's
        VLM cache, rows [0, S) valid, roped.
      seq_len: S (python int or traced int32 scalar).
      rope: (cos, sin), each [T, H], for positions ``i + rope_delta + S`` (see ``rope_tables``).
      attention: 'exact' (``attend_exact``) or 'tail_slot' (``attend_tail_slot``, the device's form).
      kv_chunk: cache rows per online-softmax chunk (``attention_over_rows``; None = one chunk).
    Returns:
      [T, D] float32.
    """
    if attention not in ATTENTION_MODES:
        raise ValueError(f"attention={attention!r} unknown; expected one of {ATTENTION_MODES}")
    if x.shape != (cfg.num_tokens, cfg.hidden):
        raise ValueError(f"x must be [T, D] = {(cfg.num_tokens, cfg.hidden)}, got {x.shape}")
    cache_k, cache_v = kv
    if cache_k.ndim != 3 or (cache_k.shape[0], cache_k.shape[2]) != (cfg.num_kv_heads, cfg.head_dim):
        raise ValueError(
            f"cache_k must be [K, Smax, H] = [{cfg.num_kv_heads}, Smax, {cfg.head_dim}], got {cache_k.shape}"
        )
    if attention == "tail_slot":
        s = _concrete_int(seq_len)
        if s is not None:
            cfg.check_seq_len(s, max_seq_len=cache_k.shape[1])
    cos, sin = rope
    h = rms_norm(x, params.input_norm, eps=cfg.rms_eps, precision=precision)
    q, k, v = project_qkv(params, h, cos, sin, cfg=cfg, precision=precision)
    attend = attend_exact if attention == "exact" else attend_tail_slot
    a = attend(q, k, v, cache_k, cache_v, seq_len, precision=precision, kv_chunk=kv_chunk)  # [T, N, H]
    o = precision.act(linear(a.reshape(a.shape[0], -1), params.wo.reshape(cfg.hidden, -1), precision=precision))
    x = precision.act(x + o)
    n = rms_norm(x, params.post_norm, eps=cfg.rms_eps, precision=precision)
    return precision.act(x + mlp(params, n, precision=precision))
