"""Decode-SP: split-KV attention over a CUBE Group with a 2-level reduce-to-root (ADR sections 4, 5.3).

Q is replicated on every rank (all G q heads M-folded); one kv head's sequence is statically
sharded over R = C * P ranks by a ``KVPlacement``; every rank sweeps only its shard with the flash
tile loop, producing an unnormalised (m, l, O); the partials merge by log-sum-exp along a static
``ReducePlan`` and the root normalises once. On one device the ranks are a stacked axis; the
per-rank pieces (``sweep.run_sweep`` on one lane, ``sweep.merge``) are what a ``jax.shard_map``
over a ('cube', 'pe') mesh would run per device, with ``lax.ppermute`` per reduce round.

The same kernel serves chunked prefill (T > 1) with causal masking per rank: a rank's slots map
to known global positions, so its tiles are classified past / partial / future like flash's.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention.core import Partial, finalize, group_queries, lse_to_heads, to_heads
from jaxref.attention.geometry import (
    AttentionGeometry,
    check_inputs,
    check_positive,
    check_schedule_args,
)
from jaxref.attention.placement import KVPlacement
from jaxref.attention.reduce import check_mesh, reduce_partials, reduce_plan
from jaxref.attention.schedule import SplitKVSchedule, problem_counts
from jaxref.attention.sweep import (
    SweepPlan,
    TileConfig,
    init_sweep_state,
    plan_sweep,
    run_sweep,
    user_bias_mask,
)


def kv_placement(num_keys: int, *, num_cubes: int, pes_per_cube: int, placement: str = "round_robin",
                 start_cube: int = 0, start_pe: int = 0, capacity: int | None = None) -> KVPlacement:
    """The validated ``KVPlacement`` of S = num_keys keys (capacity default S, must be >= S)."""
    capacity = num_keys if capacity is None else capacity
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < num_keys:
        raise ValueError(f"capacity={capacity!r} must be an int >= the number of keys S={num_keys}")
    return KVPlacement(num_cubes=num_cubes, pes_per_cube=pes_per_cube, capacity=capacity, layout=placement,
                       start_cube=start_cube, start_pe=start_pe)


@functools.lru_cache(maxsize=256)
def split_kv_plan(num_queries: int, num_keys: int, *, tiles: TileConfig, placement: KVPlacement,
                  causal: bool) -> tuple[SweepPlan, np.ndarray, np.ndarray]:
    """Per-rank sweep plan (one lane per rank) and the shard table (token ids, valid) [R, slots]."""
    tokens, valid = placement.shard_table(num_keys)
    tokens.setflags(write=False)
    valid.setflags(write=False)
    qpos = np.arange(num_queries) + (num_keys - num_queries)
    return plan_sweep(qpos, tokens, valid, tiles=tiles, causal=causal), tokens, valid


def split_kv_partials(q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None,
                      tile: int = 128, q_block: int | None = None, num_cubes: int = 1, pes_per_cube: int = 1,
                      cube_mesh: tuple[int, int] | None = None, placement: str = "round_robin",
                      start_cube: int = 0, start_pe: int = 0, capacity: int | None = None) -> Partial:
    """Every rank's unnormalised partial after its local sweep.

    Returns Partial with m, l [R, K, T, G] and o [R, K, T, G, H] (rank = cube * P + pe). A rank
    with no valid key holds the neutral (FLOOR, 0, 0).
    """
    check_mesh(num_cubes, pes_per_cube, cube_mesh)
    pl = kv_placement(k.shape[0], num_cubes=num_cubes, pes_per_cube=pes_per_cube, placement=placement,
                      start_cube=start_cube, start_pe=start_pe, capacity=capacity)
    return rank_partials(q, k, v, tiles=TileConfig(tile, q_block), placement=pl, bias=bias, mask=mask,
                         causal=causal, scale=scale)


def rank_partials(q, k, v, *, tiles: TileConfig, placement: KVPlacement, bias=None, mask=None,
                  causal: bool = False, scale: float | None = None) -> Partial:
    """``split_kv_partials`` on validated knob objects (what the public entry points call)."""
    T, S, N, K, G, H = check_inputs(q, k, v, causal=causal)
    scale = H**-0.5 if scale is None else scale
    plan, tokens, valid = split_kv_plan(T, S, tiles=tiles, placement=placement, causal=causal)
    b, m = user_bias_mask(bias, mask, N, K, T, S)  # [K, T, G, S]

    def shard_cols(x):  # [K, T, G, S] -> [R, K, T, G, slots]: the columns each rank holds
        return None if x is None else jnp.moveaxis(x[..., tokens], 3, 0)

    state = init_sweep_state(plan, K, G, H)
    state = run_sweep(state, plan, group_queries(q, K)[None], k[tokens], v[tokens],
                      np.arange(T) + (S - T), tokens, valid, bias=shard_cols(b), mask=shard_cols(m),
                      scale=scale, causal=causal)
    return Partial(state.m[:, :, :T], state.l[:, :, :T], state.o[:, :, :T])


def split_kv_attention(q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None,
                       tile: int = 128, q_block: int | None = None, num_cubes: int = 1, pes_per_cube: int = 1,
                       cube_mesh: tuple[int, int] | None = None, placement: str = "round_robin",
                       start_cube: int = 0, start_pe: int = 0, capacity: int | None = None,
                       reduce: str = "tree"):
    """Split-KV (FlashDecoding) attention emulating C x P ranks, equal to ``attention_reference``.

    Args:
      q: [T, N, H]; k, v: [S, K, H]; bias / mask / causal / scale as ``attention_reference``.
      tile, q_block: the per-rank flash sweep (see ``flash_attention``).
      num_cubes (C), pes_per_cube (P <= 8): ranks R = C * P; cube_mesh: (rows, cols) of the CUBE
        Group's sub-mesh inside the 4x4 SIP (default: most square).
      placement: 'round_robin' | 'contiguous'; start_cube, start_pe: rotations (see KVPlacement).
      capacity: KV slots the layout is sized for (default S; larger leaves rear ranks empty under
        'contiguous').
      reduce: 'tree' (2-level reduce-to-root) | 'all_to_all' (baseline fan-out) | 'all_reduce'
        (one-shot max + sum over ranks, Tree Attention).
    Returns:
      out [T, N, H] float32 and lse [N, T] float32 at the root rank.
    """
    rplan = reduce_plan(num_cubes, pes_per_cube, kind=reduce, cube_mesh=cube_mesh)
    pl = kv_placement(k.shape[0], num_cubes=num_cubes, pes_per_cube=pes_per_cube, placement=placement,
                      start_cube=start_cube, start_pe=start_pe, capacity=capacity)
    parts = rank_partials(q, k, v, tiles=TileConfig(tile, q_block), placement=pl, bias=bias, mask=mask,
                          causal=causal, scale=scale)
    reduced = reduce_partials(parts, rplan)
    out, lse = finalize(Partial(*(x[rplan.root] for x in reduced)))
    return to_heads(out, q.shape[1]), lse_to_heads(lse)


split_kv_attention_jit = jax.jit(split_kv_attention, static_argnames=(
    "causal", "scale", "tile", "q_block", "num_cubes", "pes_per_cube", "cube_mesh", "placement", "start_cube",
    "start_pe", "capacity", "reduce"))


def split_kv_schedule(num_queries: int, num_keys: int, geometry: AttentionGeometry | None = None, *,
                      causal: bool = False, tile: int = 128, q_block: int | None = None, num_cubes: int = 1,
                      pes_per_cube: int = 1, cube_mesh: tuple[int, int] | None = None,
                      placement: str = "round_robin", start_cube: int = 0, start_pe: int = 0,
                      capacity: int | None = None, reduce: str = "tree", dtype_bytes: int = 2,
                      acc_bytes: int = 4) -> SplitKVSchedule:
    """Plain-data schedule of ``split_kv_attention`` (geometry defaults to Llama3-70B)."""
    g = AttentionGeometry.llama3_70b() if geometry is None else geometry
    check_schedule_args(num_queries, num_keys, causal=causal, dtype_bytes=dtype_bytes)
    check_positive("acc_bytes", acc_bytes)
    rplan = reduce_plan(num_cubes, pes_per_cube, kind=reduce, cube_mesh=cube_mesh)
    pl = kv_placement(num_keys, num_cubes=num_cubes, pes_per_cube=pes_per_cube, placement=placement,
                      start_cube=start_cube, start_pe=start_pe, capacity=capacity)
    plan, _, valid = split_kv_plan(num_queries, num_keys, tiles=TileConfig(tile, q_block), placement=pl,
                                   causal=causal)
    rank_tiles = plan.lane_tiles_computed()
    payload = g.num_kv_heads * num_queries * g.group * (g.head_dim + 2) * acc_bytes
    msgs = rplan.messages()
    return SplitKVSchedule(
        **problem_counts((plan,), g, num_queries=num_queries, num_keys=num_keys, causal=causal,
                         heads_per_lane=g.group, dtype_bytes=dtype_bytes),
        acc_bytes=acc_bytes, num_cubes=num_cubes, pes_per_cube=pes_per_cube, placement=placement,
        start_cube=start_cube, start_pe=start_pe, capacity=pl.capacity,
        rank_tokens=tuple(int(x) for x in valid.sum(1)), rank_tiles=rank_tiles,
        critical_path_tiles=max(rank_tiles), reduce=rplan, reduce_rounds=rplan.num_rounds,
        level2_rounds=rplan.level2_rounds, level1_rounds=rplan.level1_rounds, reduce_messages=msgs,
        level2_messages=rplan.messages(2), level1_messages=rplan.messages(1), payload_bytes=payload,
        reduce_bytes=msgs * payload)
