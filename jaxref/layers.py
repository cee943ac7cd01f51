"""Building blocks of the action expert's decoder layer (HF ``Qwen3VLTextDecoderLayer`` semantics).

Pure functions on arrays and on the ``LayerParams`` pytree; no batch axis (``jax.vmap`` adds one).
Dimension vocabulary: T expert tokens, S valid VLM cache rows, Smax cache capacity, N q heads,
K kv heads, G = N // K, H head_dim, D model width, F MLP width.

Parameter layout is HF's ``nn.Linear`` one: every matmul weight is stored ``[out, in]``, with the
head axes split out (``wq [N, H, D]``, ``wo [D, N, H]``), so HF import/export is a reshape
(``jaxref.weights``). Every projection is ``linear`` (``x @ w.T``; its XLA:CPU GEMM layout and
vmap rule live in ``jaxref.batching``). The device stores weights transposed, [in, out]; its
block formats group 16 consecutive values along the output axis, which is what
``precision.weight(W, axis=0)`` rounds here (H is a multiple of 16, so the groups of
``wq [N*H, D]``'s axis 0 are those of the device's fused ``wqkv [D, (N + 2K) H]``). The attention
over the VLM cache is ``jaxref.cache_attention`` (a caller of the one attention core).

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

"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxref.batching import linear_rows
from jaxref.cache_attention import attend_exact, attend_tail_slot
from jaxref.config import ExpertConfig
from jaxref.options import DEFAULT_OPTIONS, ExpertOptions
from jaxref.param_table import LAYER_PARAMS
from jaxref.precision import FP32, Precision


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


# ---- the layer -----------------------------------------------------------------------------
def linear(x: jax.Array, w: jax.Array, *, precision: Precision = FP32) -> jax.Array:
    """``x @ w.T`` for a weight in HF's [out, in] layout.

    The GEMM form is picked by the rows (``jaxref.batching.linear_rows``); jit-, vmap- and
    differentiable (forward and reverse mode).

    Args:
      x: [..., I] activations.
      w: [O, I] weight; ``precision.weight`` rounds it with block formats grouped along O.
    Returns:
      [..., O] float32.
    """
    if w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"linear wants w [O, I] with I = x.shape[-1] = {x.shape[-1]}; got w {w.shape}")
    return linear_rows(x.astype(jnp.float32), precision.weight(w, axis=0))


def project_qkv(
    params: LayerParams,
    h: jax.Array,
    cos: jax.Array,
    sin: jax.Array,
    *,
    cfg: ExpertConfig,
    precision: Precision = FP32,
    tap=None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """q/k/v projections, per-head q/k RMSNorm (before RoPE), RoPE on q and k.

    Args:
      h: [T, D] the input-normed residual stream.
      cos, sin: [T, H] RoPE tables.
      tap: optional ``(name, value)`` callback at each op boundary (see ``decoder_layer``).
    Returns:
      q [T, N, H], k [T, K, H] (roped; what the device writes to the cache tail), v [T, K, H].
    """
    T, D = h.shape
    q, k, v = (
        precision.act(linear(h, w.reshape(-1, D), precision=precision)).reshape(T, *w.shape[:2])
        for w in (params.wq, params.wk, params.wv)
    )
    tap = _no_tap if tap is None else tap
    tap("qkv", (q, k, v))
    q = tap("q_norm", rms_norm(q, params.q_norm, eps=cfg.rms_eps, precision=precision))
    k = tap("k_norm", rms_norm(k, params.k_norm, eps=cfg.rms_eps, precision=precision))
    return (tap("rope_q", apply_rope(q, cos, sin, precision=precision)),
            tap("rope_k", apply_rope(k, cos, sin, precision=precision)), v)


def _no_tap(name: str, value):
    return value


def mlp(params: LayerParams, n: jax.Array, *, precision: Precision = FP32, tap=None) -> jax.Array:
    """SwiGLU: ``down(silu(gate(n)) * up(n))``; n [T, D] -> [T, D]. ``tap``: as ``decoder_layer``."""
    tap = _no_tap if tap is None else tap
    g = precision.act(linear(n, params.w_gate, precision=precision))
    u = precision.act(linear(n, params.w_up, precision=precision))
    s = tap("silu_gate", precision.act(jax.nn.silu(g)))
    m = tap("mul", precision.act(s * tap("up", u)))
    return tap("down", precision.act(linear(m, params.w_down, precision=precision)))


def decoder_layer(params: LayerParams, x: jax.Array, kv: tuple[jax.Array, jax.Array], seq_len,
                  rope: tuple[jax.Array, jax.Array], *, cfg: ExpertConfig,
                  options: ExpertOptions = DEFAULT_OPTIONS, tap=None) -> jax.Array:
    """One pre-norm decoder layer attending non-causally to one VLM cache layer plus its own tokens.

    ``h = x + wo(attn(rms_norm(x)))``; ``out = h + down(silu(gate(n)) * up(n))``, ``n = rms_norm(h)``.

    Args:
      params: one layer's ``LayerParams`` (unstacked).
      x: [T, D] residual stream.
      kv: (cache_k, cache_v), each [K, Smax, H] (head-major, the HF / device layout): this layer's
        VLM cache, rows [0, S) valid, roped.
      seq_len: S (python int or traced int32 scalar).
      rope: (cos, sin), each [T, H], for positions ``i + rope_delta + S`` (see ``rope_tables``).
      options: attention form ('exact' / 'tail_slot'), ``precision`` (the layer's policy) and
        ``kv_chunk`` (``ExpertOptions``; ``proj_precision`` is not used here).
      tap: optional callback ``(name, value) -> value`` called (eagerly: not under a trace) with the
        value at each op boundary: input_norm, qkv ((q, k, v) projections), q_norm, k_norm, rope_q,
        rope_k, attention, wo, add, post_norm, silu_gate, up, mul, down, out (``device.divergence``).
    Returns:
      [T, D] float32.
    """
    if x.shape != (cfg.num_tokens, cfg.hidden):
        raise ValueError(f"x must be [T, D] = {(cfg.num_tokens, cfg.hidden)}, got {x.shape}")
    cache_k, cache_v = kv
    if cache_k.ndim != 3 or (cache_k.shape[0], cache_k.shape[2]) != (cfg.num_kv_heads, cfg.head_dim):
        raise ValueError(
            f"cache_k must be [K, Smax, H] = [{cfg.num_kv_heads}, Smax, {cfg.head_dim}], got {cache_k.shape}"
        )
    # (the tail-slot bound S <= Smax - T is checked by ``attend_tail_slot`` when S is concrete)
    precision = options.precision
    cos, sin = rope
    tap = _no_tap if tap is None else tap
    h = tap("input_norm", rms_norm(x, params.input_norm, eps=cfg.rms_eps, precision=precision))
    q, k, v = project_qkv(params, h, cos, sin, cfg=cfg, precision=precision, tap=tap)
    attend = attend_exact if options.attention == "exact" else attend_tail_slot
    a = tap("attention", attend(q, k, v, cache_k, cache_v, seq_len, precision=precision,
                                kv_chunk=options.kv_chunk))  # [T, N, H]
    o = tap("wo", precision.act(linear(a.reshape(a.shape[0], -1), params.wo.reshape(cfg.hidden, -1),
                                       precision=precision)))
    x = tap("add", precision.act(x + o))
    n = tap("post_norm", rms_norm(x, params.post_norm, eps=cfg.rms_eps, precision=precision))
    return tap("out", precision.act(x + mlp(params, n, precision=precision, tap=tap)))
