"""Decode-SP: split-KV attention over a CUBE Group with a 2-level reduce-to-root (ADR sections 4, 5.3).

Q is replicated on every rank (all G q heads M-folded); one kv head's sequence is statically
sharded over R = C * P ranks by a ``KVPlacement``; every rank sweeps only its shard with the flash
tile loop, producing an unnormalised (m, l, O); the partials merge by log-sum-exp along a static
``ReducePlan`` and the root normalises once. On one device the ranks are a stacked axis; the
per-rank pieces (``sweep.run_sweep`` on one lane, ``reduce.reduce_partials``) are what the
``jax.shard_map`` form (``distributed.SplitKVSharded``) runs per device.

The same kernel serves chunked prefill (T > 1) with causal masking per rank: a rank's slots map
to known global positions, so its tiles are classified past / partial / future like flash's.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np

from jaxref.attention.core import Partial, finalize, group_queries, lse_to_heads, to_heads
from jaxref.attention.geometry import AttentionGeometry, check_positive, schedule_problem
from jaxref.attention.placement import LAYOUTS, KVPlacement
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.reduce import reduce_partials, reduce_plan
from jaxref.attention.schedule import ReducePlan, SplitKVSchedule, problem_counts
from jaxref.attention.sweep import (
    SweepPlan,
    TileConfig,
    init_sweep_state,
    plan_sweep,
    rows_with_a_key,
    run_sweep,
    user_bias_mask,
)
from jaxref.validation import check_choice


@functools.lru_cache(maxsize=256)
def _plan(num_queries: int, num_keys: int, tiles: TileConfig, placement: KVPlacement,
          causal: bool) -> tuple[SweepPlan, np.ndarray, np.ndarray]:
    tokens, valid = placement.shard_table(num_keys)
    tokens.setflags(write=False)
    valid.setflags(write=False)
    qpos = np.arange(num_queries) + (num_keys - num_queries)
    return plan_sweep(qpos, tokens, valid, tiles=tiles, causal=causal), tokens, valid


@dataclasses.dataclass(frozen=True)
class SplitKV:
    """Split-KV (FlashDecoding) attention emulating C x P ranks on one device, equal to
    ``attention_reference``; its ``KVPlacement`` and ``ReducePlan`` are built here only."""

    tile: int = 128  # keys per KV tile of every rank's flash sweep
    q_block: int | None = None  # query rows per block (None = all T)
    num_cubes: int = 1  # C: CUBEs of the CUBE Group (Level-1 SP)
    pes_per_cube: int = 1  # P <= 8: PEs per CUBE (Level-2 SP); ranks R = C * P
    cube_mesh: tuple[int, int] | None = None  # (rows, cols) of the C CUBEs in the 4x4 SIP (None: most square)
    placement: str = "round_robin"  # KV layout: 'round_robin' | 'contiguous' (see KVPlacement)
    start_cube: int = 0  # Level-1 rotation, in [0, C)
    start_pe: int = 0  # Level-2 rotation, in [0, P)
    capacity: int | None = None  # KV slots the layout is sized for (None = S; larger leaves rear ranks empty)
    reduce: str = "tree"  # 'tree' (2-level to root) | 'all_to_all' (fan-out) | 'all_reduce' (max + sum)

    def __post_init__(self):
        TileConfig(self.tile, self.q_block)  # validates tile / q_block
        reduce_plan(self.num_cubes, self.pes_per_cube, kind=self.reduce, cube_mesh=self.cube_mesh)  # validates
        check_positive("capacity", self.capacity, allow_none=True)
        check_choice("placement", self.placement, LAYOUTS)  # (named 'layout' in KVPlacement)
        self.kv_placement(1 if self.capacity is None else self.capacity)  # validates the rotations

    @property
    def tiles(self) -> TileConfig:
        return TileConfig(self.tile, self.q_block)

    @functools.cached_property
    def reduce_plan(self) -> ReducePlan:
        """The static reduce over the C x P ranks (rank = cube * P + pe)."""
        return reduce_plan(self.num_cubes, self.pes_per_cube, kind=self.reduce, cube_mesh=self.cube_mesh)

    def kv_placement(self, num_keys: int) -> KVPlacement:
        """The ``KVPlacement`` of S = num_keys keys (capacity default S, must be >= S)."""
        capacity = num_keys if self.capacity is None else self.capacity
        if capacity < num_keys:
            raise ValueError(f"capacity={capacity!r} must be an int >= the number of keys S={num_keys}")
        return KVPlacement(num_cubes=self.num_cubes, pes_per_cube=self.pes_per_cube, capacity=capacity,
                           layout=self.placement, start_cube=self.start_cube, start_pe=self.start_pe)

    def plan(self, num_queries: int, num_keys: int, *,
             causal: bool) -> tuple[SweepPlan, np.ndarray, np.ndarray]:
        """Per-rank sweep plan (one lane per rank) and the shard table (token ids, valid) [R, slots]."""
        return _plan(num_queries, num_keys, self.tiles, self.kv_placement(num_keys), causal)

    def partials(self, q, k, v, *, bias=None, mask=None, causal: bool = False,
                 scale: float | None = None) -> Partial:
        """Every rank's unnormalised partial after its local sweep: m, l [R, K, T, G], o [R, K, T, G, H]
        (rank = cube * P + pe). A rank with no valid key holds the neutral (-inf, 0, 0)."""
        pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
        plan, tokens, valid = self.plan(pr.T, pr.S, causal=causal)
        b, m = user_bias_mask(bias, mask, pr.N, pr.K, pr.T, pr.S)  # [K, T, G, S]

        def shard_cols(x):  # [K, T, G, S] -> [R, K, T, G, slots]: the columns each rank holds
            return None if x is None else jnp.moveaxis(x[..., tokens], 3, 0)

        state = init_sweep_state(plan, pr.K, pr.G, pr.H)
        state = run_sweep(state, plan, group_queries(q, pr.K)[None], k[tokens], v[tokens], pr.query_positions,
                          tokens, valid, bias=shard_cols(b), mask=shard_cols(m), scale=pr.scale, causal=causal)
        return Partial(state.m[:, :, :pr.T], state.l[:, :, :pr.T], state.o[:, :, :pr.T])

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """q [T, N, H]; k, v [S, K, H]; bias / mask / causal / scale as ``attention_reference``.

        Returns out [T, N, H] float32 and lse [N, T] float32 at the root rank.
        """
        rplan = self.reduce_plan
        reduced = reduce_partials(self.partials(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale), rplan)
        T, S, N, K = q.shape[0], k.shape[0], q.shape[1], k.shape[1]
        _, m = user_bias_mask(None, mask, N, K, T, S)
        out, lse = finalize(Partial(*(x[rplan.root] for x in reduced)), rows_with_a_key(m, causal=causal, T=T, S=S))
        return to_heads(out, q.shape[1]), lse_to_heads(lse)

    def schedule(self, num_queries: int, num_keys: int, geometry: AttentionGeometry | None = None, *,
                 causal: bool = False, dtype_bytes: int = 2, acc_bytes: int = 4) -> SplitKVSchedule:
        """Plain-data schedule (geometry default Llama3-70B); ``acc_bytes``: (m, l, O) element bytes."""
        g = schedule_problem(num_queries, num_keys, geometry, causal=causal, dtype_bytes=dtype_bytes)
        check_positive("acc_bytes", acc_bytes)
        rplan = self.reduce_plan
        plan, _, valid = self.plan(num_queries, num_keys, causal=causal)
        rank_tiles = plan.lane_tiles_computed()
        payload = g.num_kv_heads * num_queries * g.group * (g.head_dim + 2) * acc_bytes
        msgs = rplan.messages()
        return SplitKVSchedule(
            **problem_counts((plan,), g, num_queries=num_queries, num_keys=num_keys, causal=causal,
                             heads_per_lane=g.group, dtype_bytes=dtype_bytes),
            acc_bytes=acc_bytes, num_cubes=self.num_cubes, pes_per_cube=self.pes_per_cube,
            placement=self.placement, start_cube=self.start_cube, start_pe=self.start_pe,
            capacity=self.kv_placement(num_keys).capacity,
            rank_tokens=tuple(int(x) for x in valid.sum(1)), rank_tiles=rank_tiles,
            critical_path_tiles=max(rank_tiles), reduce=rplan, reduce_rounds=rplan.num_rounds,
            level2_rounds=rplan.level2_rounds, level1_rounds=rplan.level1_rounds, reduce_messages=msgs,
            level2_messages=rplan.messages(2), level1_messages=rplan.messages(1), payload_bytes=payload,
            reduce_bytes=msgs * payload)
