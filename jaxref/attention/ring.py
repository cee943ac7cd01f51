"""Prefill-SP: head-parallel ring attention over a CUBE Group (ADR section 5.5).

CUBE c owns q heads [c * Gc, (c + 1) * Gc) of every kv-head group (Gc = G / C: one head per CUBE
at the ADR's C = G, more when C < G, C dividing G) and, at step 0, KV block c. Each of the C
steps folds the held block into the CUBE's running (m, l, O) with the flash tile loop, then hands
the block to the next CUBE (ring+, c -> c + 1). No (m, l, O) reduce: each CUBE normalises its own
head. Causal: a (q block, held KV block) pair whose keys are all after the q block's queries is
skipped (never computed); under the ``contiguous`` ordering that is about half of all pairs.

Orderings of the KV blocks (load balance of the lock-step ring under causal masking):

* ``contiguous``: block j = positions [j * B, (j + 1) * B), B = ceil(S / C) (the ADR's shared
  layout; enables whole-step skips, but per step the CUBEs' work differs).
* ``zigzag``: 2C chunks of ceil(S / 2C); block j = chunk j + chunk 2C-1-j (one early, one late).
* ``striped``: block j = positions j, j + C, j + 2C, ... (round-robin over CUBEs).

Query rows are processed in blocks of ``q_block`` rows inside every step, so the KV blocks
rotate C - 1 times in total (the ADR's kernel launched once per q block would rotate per launch).
On one device the CUBEs are a stacked axis and the hand-off is ``jnp.roll`` (``lax.ppermute``
under ``jax.shard_map``); each step runs the shared ``sweep.run_sweep``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np

from jaxref.attention.core import Partial, finalize, lse_to_heads, to_heads
from jaxref.attention.geometry import AttentionGeometry, check_positive, schedule_problem
from jaxref.attention.placement import KVPlacement
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.schedule import RingSchedule, problem_counts
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

ORDERINGS = ("contiguous", "zigzag", "striped")


def ring_blocks(num_keys: int, num_cubes: int, ordering: str) -> tuple[np.ndarray, np.ndarray]:
    """KV block composition: token ids [C, Lb] (0 where invalid) and valid [C, Lb]; positions
    increase along each block, so tiles of a block can be classified and skipped."""
    check_choice("ordering", ordering, ORDERINGS)
    C = num_cubes
    if ordering in ("contiguous", "striped"):
        layout = "contiguous" if ordering == "contiguous" else "round_robin"
        return KVPlacement(num_cubes=C, pes_per_cube=1, capacity=num_keys, layout=layout).shard_table(num_keys)
    chunk = -(-num_keys // (2 * C))
    starts = np.stack([np.arange(C), 2 * C - 1 - np.arange(C)], 1) * chunk  # [C, 2]
    tokens = (starts[:, :, None] + np.arange(chunk)[None, None, :]).reshape(C, 2 * chunk)
    valid = tokens < num_keys
    return np.where(valid, tokens, 0), valid


def check_ring_cubes(num_cubes: int | None, group: int) -> int:
    """C (default G); raise unless C divides the group size G (head-parallel: G / C q heads per CUBE)."""
    C = group if num_cubes is None else num_cubes
    check_positive("num_cubes", C)
    if group % C:
        raise ValueError(f"num_cubes={C} must divide the group size G={group}: ring prefill is head-parallel "
                         "with G / C q heads of every kv group per CUBE (the ADR's C = G: one)")
    return C


@functools.lru_cache(maxsize=256)
def _plan(num_queries: int, num_keys: int, num_cubes: int, tiles: TileConfig, causal: bool,
          ordering: str) -> tuple[np.ndarray, np.ndarray, tuple[SweepPlan, ...]]:
    tokens, valid = ring_blocks(num_keys, num_cubes, ordering)
    tokens.setflags(write=False)
    valid.setflags(write=False)
    qpos = np.arange(num_queries) + (num_keys - num_queries)
    plans = []
    for step in range(num_cubes):
        held = (np.arange(num_cubes) - step) % num_cubes
        plans.append(plan_sweep(qpos, tokens[held], valid[held], tiles=tiles, causal=causal))
    return tokens, valid, tuple(plans)


@dataclasses.dataclass(frozen=True)
class Ring:
    """Head-parallel ring attention emulating C CUBEs on one device, equal to ``attention_reference``."""

    tile: int = 128  # keys per tile inside a KV block
    q_block: int | None = None  # query rows per block (None = all T: then no KV block is wholly future)
    num_cubes: int | None = None  # C, must divide G = N // K (None = G: one q head per CUBE)
    ordering: str = "contiguous"  # KV block composition: 'contiguous' | 'zigzag' | 'striped'

    def __post_init__(self):
        TileConfig(self.tile, self.q_block)  # validates tile / q_block
        check_positive("num_cubes", self.num_cubes, allow_none=True)
        check_choice("ordering", self.ordering, ORDERINGS)

    @property
    def tiles(self) -> TileConfig:
        return TileConfig(self.tile, self.q_block)

    def cubes(self, group: int) -> int:
        """C for a problem with G = ``group`` (default G); ValueError unless C divides G."""
        return check_ring_cubes(self.num_cubes, group)

    def plan(self, num_queries: int, num_keys: int, *, causal: bool,
             group: int | None = None) -> tuple[np.ndarray, np.ndarray, tuple[SweepPlan, ...]]:
        """Block table tokens / valid [C, Lb] and one sweep plan per ring step (lane c holds block
        (c - step) mod C). ``group`` (G) is needed only when ``num_cubes`` is None."""
        if self.num_cubes is None and group is None:
            raise ValueError("num_cubes=None means C = G: pass group=G to plan()")
        C = self.num_cubes if group is None else self.cubes(group)
        return _plan(num_queries, num_keys, C, self.tiles, causal, self.ordering)

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """q [T, N, H]; k, v [S, K, H]; bias / mask / causal / scale as ``attention_reference``.

        Returns out [T, N, H] float32, lse [N, T] float32.
        """
        pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
        T, S, N, K, H = pr.T, pr.S, pr.N, pr.K, pr.H
        C = self.cubes(pr.G)
        Gc = pr.G // C
        tokens, valid, plans = self.plan(T, S, causal=causal, group=pr.G)
        # Lane c = CUBE c holds q heads [c Gc, (c + 1) Gc) of every kv group: [C, K, T, Gc, H].
        q_lanes = jnp.transpose(q.reshape(T, K, C, Gc, H), (2, 1, 0, 3, 4))
        b, m = user_bias_mask(bias, mask, N, K, T, S)  # [K, T, G, S]
        cubes = np.arange(C)[:, None]

        def step_cols(x, step):  # user bias / mask columns of the block each CUBE holds, its own head
            if x is None:
                return None
            cols = tokens[(np.arange(C) - step) % C]  # [C, Lb]
            xh = jnp.moveaxis(x.reshape(K, T, C, Gc, S), 2, 0)  # [C, K, T, Gc, S]
            return jnp.moveaxis(xh[cubes, :, :, :, cols], 1, -1)  # [C, K, T, Gc, Lb]

        held = (k[tokens], v[tokens], jnp.asarray(tokens, jnp.int32), jnp.asarray(valid))  # block c on CUBE c
        state = init_sweep_state(plans[0], K, Gc, H)
        for step, plan in enumerate(plans):
            if step:  # ring+ hand-off: CUBE c receives the block CUBE c - 1 held
                held = tuple(jnp.roll(x, 1, axis=0) for x in held)
            state = run_sweep(state, plan, q_lanes, *held[:2], pr.query_positions, *held[2:],
                              bias=step_cols(b, step), mask=step_cols(m, step), scale=pr.scale, causal=causal)
        has_key = rows_with_a_key(m, causal=causal, T=T, S=S)  # [K, T, G] -> lanes [C, K, T, Gc]
        if has_key is not True:
            has_key = jnp.moveaxis(has_key.reshape(K, T, C, Gc), 2, 0)
        out, lse = finalize(Partial(*(x[:, :, :T] for x in state)), has_key)  # [C, K, T, Gc, H], [C, K, T, Gc]
        return lanes_to_heads(out, lse)

    def schedule(self, num_queries: int, num_keys: int, geometry: AttentionGeometry | None = None, *,
                 causal: bool = False, dtype_bytes: int = 2) -> RingSchedule:
        """Plain-data schedule of this ring and of its sharded form (geometry default Llama3-70B:
        C = G = 8)."""
        g = schedule_problem(num_queries, num_keys, geometry, causal=causal, dtype_bytes=dtype_bytes)
        C = self.cubes(g.group)
        Gc = g.group // C
        _tokens, valid, plans = self.plan(num_queries, num_keys, causal=causal, group=g.group)
        block_tokens = tuple(int(x) for x in valid.sum(1))
        step_cube, step_flops = [], []
        run = skipped = empty = 0
        for step, plan in enumerate(plans):
            per_cube, flops = [0] * C, [0] * C
            for lane, qi, kj in plan.computed:
                per_cube[lane] += 1
                flops[lane] += 4 * plan.block_rows[qi] * Gc * plan.tile_keys[lane][kj] * g.head_dim * g.num_kv_heads
            step_cube.append(tuple(per_cube))
            step_flops.append(tuple(flops))
            busy = {(lane, qi) for lane, qi, _ in plan.computed}
            future = {(lane, qi) for lane, qi, _ in plan.future}
            for lane in range(C):
                for qi in range(plan.num_q_blocks):
                    if (lane, qi) in busy:
                        run += 1
                    elif block_tokens[(lane - step) % C] == 0:
                        empty += 1
                    elif (lane, qi) in future:
                        skipped += 1
        sent_keys = sum(block_tokens[(c - s) % C] for s in range(C - 1) for c in range(C))
        return RingSchedule(
            **problem_counts(plans, g, num_queries=num_queries, num_keys=num_keys, causal=causal,
                             heads_per_lane=Gc, dtype_bytes=dtype_bytes),
            num_cubes=C, ordering=self.ordering, block_tokens=block_tokens, steps=C,
            block_steps_run=run, block_steps_skipped=skipped, block_steps_empty=empty,
            step_cube_tiles=tuple(step_cube), critical_path_tiles=sum(max(t) for t in step_cube),
            step_cube_flops=tuple(step_flops), critical_path_flops=sum(max(f) for f in step_flops),
            kv_rotations=C - 1, ring_messages=2 * C * (C - 1) * g.num_kv_heads,
            ring_bytes=2 * g.num_kv_heads * sent_keys * g.head_dim * dtype_bytes)


def lanes_to_heads(out, lse):
    """Head-parallel results out [C, K, T, Gc, H], lse [C, K, T, Gc] -> out [T, N, H], lse [N, T]."""
    C, K, T, Gc, H = out.shape
    out = jnp.transpose(out, (1, 2, 0, 3, 4)).reshape(K, T, C * Gc, H)  # [K, T, G, H]: head g = c Gc + j
    return to_heads(out, K * C * Gc), lse_to_heads(jnp.transpose(lse, (1, 2, 0, 3)).reshape(K, T, C * Gc))
