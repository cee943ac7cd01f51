"""Single-device FlashAttention with GQA M-fold and causal tile classification (ADR sections 3, 5.2, 5.4).

``flash_attention`` has the signature and residuals of ``attention_reference``; ``flash_schedule``
returns the plan it executes as plain data.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from jaxref.attention.core import finalize, group_queries, lse_to_heads, to_heads
from jaxref.attention.geometry import AttentionGeometry, check_inputs, check_schedule_args
from jaxref.attention.schedule import FlashSchedule, problem_counts
from jaxref.attention.sweep import (
    FUTURE,
    PARTIAL,
    PAST,
    SweepPlan,
    TileConfig,
    init_sweep_state,
    plan_sweep,
    run_sweep,
    user_bias_mask,
)


@functools.lru_cache(maxsize=256)
def flash_plan(num_queries: int, num_keys: int, *, tiles: TileConfig, causal: bool,
               causal_skip: bool = True) -> SweepPlan:
    """The static tile plan of ``flash_attention`` (one lane)."""
    qpos = np.arange(num_queries) + (num_keys - num_queries)  # bottom-right aligned
    kpos = np.arange(num_keys)[None]
    return plan_sweep(qpos, kpos, np.ones_like(kpos, bool), tiles=tiles, causal=causal, causal_skip=causal_skip)


def flash_attention(q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None,
                    tile: int = 128, q_block: int | None = None, causal_skip: bool = True):
    """Tiled online-softmax attention, equal to ``attention_reference``.

    Args:
      q: [T, N, H]; k, v: [S, K, H] (any float dtype: GEMM operands stay in the input dtype with
        fp32 accumulation, P is rounded to v's dtype before P.V, softmax state is fp32).
      bias: optional additive float bias broadcastable to [N, T, S].
      mask: optional boolean keep-mask broadcastable to [N, T, S].
      causal: bottom-right aligned causal mask; needs T <= S.
      scale: score scale, default H ** -0.5.
      tile: keys per KV tile (any S: the last tile is ragged). q_block: query rows per block
        (None = one block). causal_skip: False computes wholly-future tiles under the mask
        (only to measure what the skip saves).
    Returns:
      out [T, N, H] float32, lse [N, T] float32; a fully masked row gives out 0, lse MASK_LSE.
    """
    T, S, N, K, G, H = check_inputs(q, k, v, causal=causal)
    scale = H**-0.5 if scale is None else scale
    plan = flash_plan(T, S, tiles=TileConfig(tile, q_block), causal=causal, causal_skip=causal_skip)
    b, m = user_bias_mask(bias, mask, N, K, T, S)  # [K, T, G, S]
    qpos = np.arange(T) + (S - T)
    state = init_sweep_state(plan, K, G, H)
    state = run_sweep(state, plan, group_queries(q, K)[None], k[None], v[None], qpos, np.arange(S)[None],
                      np.ones((1, S), bool), bias=None if b is None else b[None],
                      mask=None if m is None else m[None], scale=scale, causal=causal)
    out, lse = finalize(state)
    return to_heads(out[0, :, :T], N), lse_to_heads(lse[0, :, :T])


flash_attention_jit = jax.jit(flash_attention, static_argnames=("causal", "scale", "tile", "q_block",
                                                                 "causal_skip"))


def flash_schedule(num_queries: int, num_keys: int, geometry: AttentionGeometry | None = None, *,
                   causal: bool = False, tile: int = 128, q_block: int | None = None,
                   causal_skip: bool = True, dtype_bytes: int = 2) -> FlashSchedule:
    """Plain-data schedule of ``flash_attention`` for T = num_queries, S = num_keys.

    geometry defaults to Llama3-70B (64 q heads, 8 kv heads, d 128).
    """
    g = AttentionGeometry.llama3_70b() if geometry is None else geometry
    check_schedule_args(num_queries, num_keys, causal=causal, dtype_bytes=dtype_bytes)
    plan = flash_plan(num_queries, num_keys, tiles=TileConfig(tile, q_block), causal=causal,
                      causal_skip=causal_skip)
    kinds = [(qi, kj, PAST) for _, qi, kj in plan.past] + [(qi, kj, PARTIAL) for _, qi, kj in plan.partial]
    kinds += [(qi, kj, FUTURE) for _, qi, kj in plan.future]
    io_bytes = num_queries * g.num_heads * g.head_dim * dtype_bytes
    return FlashSchedule(
        **problem_counts((plan,), g, num_queries=num_queries, num_keys=num_keys, causal=causal,
                         heads_per_lane=g.group, dtype_bytes=dtype_bytes),
        causal_skip=causal_skip, num_q_blocks=plan.num_q_blocks, num_kv_tiles=plan.num_tiles,
        q_bytes=io_bytes, out_bytes=io_bytes, tiles=tuple(sorted(kinds)))
