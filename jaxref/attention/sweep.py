"""The online-softmax tile sweep every ADR-0060 algorithm is built from (ADR section 3).

A sweep folds KV tiles into a running, unnormalised ``Partial(m, l, o)`` per query row. Work is
planned statically (``plan_sweep``) as (lane, q block, kv tile) items classified

* ``past``    - every key in the tile is valid and visible to every query of the block: no mask;
* ``partial`` - the tile straddles the causal diagonal, holds padding, or ends the buffer: masked;
* ``future``  - every valid key is after every query of the block: skipped, never computed;
* ``empty``   - the tile holds no valid key (beyond a rank's valid length): never visited.

A *lane* is one rank / CUBE of a distributed schedule, emulated on one device as a stacked axis.
The executor (``run_sweep``) iterates exactly the planned item list (one ``lax.scan`` per kind), so
the plan is the single source of truth for what is computed; tests count the executed GEMMs.

Internal layouts (one lane axis first): q [Lq, K, T, Gl, H] (Lq = 1 when q is replicated over
lanes), k / v [lanes, L, K, H] (L key slots per lane), positions qpos [T], kpos / kvalid
[lanes, L], optional bias / mask [lanes, K, T, Gl, L]. Gl = q heads per kv head held by a lane
(G for flash / split-KV, 1 for head-parallel ring). The Gl heads and the rows of a q block are
folded into the matmul M dimension (M = q_block * Gl): one K/V tile serves the whole GQA group.
"""

from __future__ import annotations

import dataclasses
import functools

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxref.attention.core import Partial, fold, init_partial, scores
from jaxref.attention.geometry import check_positive
from jaxref.attention.reference import causal_mask

PAST, PARTIAL, FUTURE, EMPTY = "past", "partial", "future", "empty"


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """Tile sizes of the online-softmax sweep (validated once; hashable, so plans cache on it).

    tile: keys per KV tile (the K/V streaming granularity; the last tile may be ragged).
    q_block: query rows per block (prefill); None = all T rows in one block (decode, one launch).
    """

    tile: int = 128
    q_block: int | None = None

    def __post_init__(self):
        check_positive("tile", self.tile)
        check_positive("q_block", self.q_block, allow_none=True)


# ---------------------------------------------------------------------------------------------
# Planning (pure numpy on static shapes)
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """Static tile plan of one sweep over ``num_lanes`` key buffers of ``buffer_len`` slots each.

    Items are (lane, q_block_index, kv_tile_index) triples. ``tile`` and ``q_block`` are the
    effective sizes (the requested ones capped at the buffer length / query count; the last tile
    or block may be ragged: ``tile_keys`` / ``block_rows`` hold the real sizes).
    """

    num_lanes: int
    num_queries: int
    q_block: int
    buffer_len: int
    tile: int
    past: tuple[tuple[int, int, int], ...]
    partial: tuple[tuple[int, int, int], ...]
    future: tuple[tuple[int, int, int], ...]
    num_empty: int
    tile_keys: tuple[tuple[int, ...], ...]  # [lane][tile]: valid keys in the tile (what a kernel loads)
    block_rows: tuple[int, ...]  # [q block]: real query rows

    @property
    def num_q_blocks(self) -> int:
        return len(self.block_rows)

    @property
    def num_tiles(self) -> int:
        return len(self.tile_keys[0])

    @property
    def computed(self) -> tuple[tuple[int, int, int], ...]:
        return self.past + self.partial

    def lane_tiles_computed(self) -> tuple[int, ...]:
        counts = [0] * self.num_lanes
        for lane, _, _ in self.computed:
            counts[lane] += 1
        return tuple(counts)


def plan_sweep(qpos, kpos, kvalid, *, tiles: TileConfig, causal: bool, causal_skip: bool = True) -> SweepPlan:
    """Classify every (lane, q block, kv tile) of a sweep.

    Args:
      qpos: [T] int positions of the query rows (bottom-right aligned: t + S - T).
      kpos: [lanes, L] int positions of the key slots; kvalid: [lanes, L] bool (False = padding).
      tiles: KV tile and query block sizes (q_block None = all T rows in one block).
      causal: query at position p sees keys at positions <= p.
      causal_skip: skip wholly-future tiles (False computes them under the mask, for benchmarks).
    """
    qpos = np.asarray(qpos, np.int64)
    kpos = np.asarray(kpos, np.int64)
    kvalid = np.asarray(kvalid, bool)
    lanes, L = kpos.shape
    T = qpos.shape[0]
    bq = T if tiles.q_block is None else min(tiles.q_block, T)
    tl = min(tiles.tile, L)
    nq, nt = -(-T // bq), -(-L // tl)
    pad = nq * bq - T
    qp = np.concatenate([qpos, np.full(pad, qpos[-1])]).reshape(nq, bq)
    qmin, qmax = qp.min(1), qp.max(1)  # padded rows repeat the last real row: no effect on min / max
    pad = nt * tl - L
    kv = np.concatenate([kvalid, np.zeros((lanes, pad), bool)], 1).reshape(lanes, nt, tl)
    kp = np.concatenate([kpos, np.zeros((lanes, pad), np.int64)], 1).reshape(lanes, nt, tl)
    nvalid = kv.sum(-1)
    big = np.iinfo(np.int64).max
    kmin = np.where(kv, kp, big).min(-1)
    kmax = np.where(kv, kp, -big).max(-1)
    full = nvalid == tl
    shape = (lanes, nq, nt)
    empty = np.broadcast_to((nvalid == 0)[:, None, :], shape)
    if causal:
        future = kmin[:, None, :] > qmax[None, :, None]
        past = full[:, None, :] & (kmax[:, None, :] <= qmin[None, :, None])
    else:
        future = np.zeros(shape, bool)
        past = np.broadcast_to(full[:, None, :], shape)
    future = future & ~empty
    past = past & ~empty & ~future
    if not causal_skip:  # compute wholly-future tiles too, under the mask
        partial = ~empty & ~past
        future = np.zeros(shape, bool)
    else:
        partial = ~empty & ~past & ~future

    def items(sel):
        return tuple(tuple(int(i) for i in row) for row in np.argwhere(sel))

    block_rows = tuple(int(min(bq, T - i * bq)) for i in range(nq))
    return SweepPlan(num_lanes=lanes, num_queries=T, q_block=bq, buffer_len=L, tile=tl,
                     past=items(past), partial=items(partial), future=items(future),
                     num_empty=int(empty.sum()),
                     tile_keys=tuple(tuple(int(x) for x in row) for row in nvalid), block_rows=block_rows)


# ---------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------
def padded_rows(plan: SweepPlan) -> int:
    return plan.num_q_blocks * plan.q_block


def init_sweep_state(plan: SweepPlan, num_kv_heads: int, heads_per_lane: int, head_dim: int) -> Partial:
    """Neutral state [lanes, K, T_padded, Gl] (+ [H] for o) for ``run_sweep``."""
    return init_partial((plan.num_lanes, num_kv_heads, padded_rows(plan), heads_per_lane), head_dim)


def _pad_axis(x, axis: int, size: int, value=0):
    if x is None or x.shape[axis] == size:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, size - x.shape[axis])
    return jnp.pad(x, widths, constant_values=value)


def _tile_step(state: Partial, item, *, arrays, masked: bool, causal: bool, scale: float, bq: int, tl: int,
               q_per_lane: bool):
    """Fold one KV tile into one q block of one lane (ADR section 3 inner tile)."""
    q, k, v, qpos, kpos, kvalid, bias, mask = arrays
    lane, qi, kj = item
    _, K, _, Gl, H = q.shape
    t0, s0 = qi * bq, kj * tl
    q_blk = lax.dynamic_slice(q, (lane if q_per_lane else 0, 0, t0, 0, 0), (1, K, bq, Gl, H))[0]
    k_tile = lax.dynamic_slice(k, (lane, s0, 0, 0), (1, tl, K, H))[0]  # [S=tl, K, H]
    v_tile = lax.dynamic_slice(v, (lane, s0, 0, 0), (1, tl, K, H))[0]
    # GQA M-fold: q block rows x the Gl heads of a kv head are the M rows of one GEMM per kv head.
    s = (scores(q_blk.reshape(K, bq * Gl, H), k_tile, kv_layout="SKH") * scale).reshape(K, bq, Gl, tl)
    if bias is not None:
        s = s + lax.dynamic_slice(bias, (lane, 0, t0, 0, s0), (1, K, bq, Gl, tl))[0].astype(jnp.float32)
    keep = None
    if masked:  # boundary tile: padding / ragged end / causal diagonal, built from positions
        keep = lax.dynamic_slice(kvalid, (lane, s0), (1, tl))[0][None, :]  # [1, tl]
        if causal:
            qp = lax.dynamic_slice(qpos, (t0,), (bq,))
            kp = lax.dynamic_slice(kpos, (lane, s0), (1, tl))[0]
            keep = keep & (kp[None, :] <= qp[:, None])  # [bq, tl]
        keep = keep[None, :, None, :]  # [1, bq, 1, tl]
    if mask is not None:
        user = lax.dynamic_slice(mask, (lane, 0, t0, 0, s0), (1, K, bq, Gl, tl))[0]
        keep = user if keep is None else keep & user
    if keep is not None:
        keep = jnp.broadcast_to(keep, (K, bq, Gl, tl)).reshape(K, bq * Gl, tl)
    at = (lane, 0, t0, 0)
    rows = (K, bq * Gl)
    old = Partial(lax.dynamic_slice(state.m, at, (1, K, bq, Gl)).reshape(rows),
                  lax.dynamic_slice(state.l, at, (1, K, bq, Gl)).reshape(rows),
                  lax.dynamic_slice(state.o, (*at, 0), (1, K, bq, Gl, H)).reshape(*rows, H))
    m1, l1, o1 = fold(old, s.reshape(*rows, tl), v_tile, kv_layout="SKH", keep=keep)
    new = Partial(lax.dynamic_update_slice(state.m, m1.reshape(1, K, bq, Gl), at),
                  lax.dynamic_update_slice(state.l, l1.reshape(1, K, bq, Gl), at),
                  lax.dynamic_update_slice(state.o, o1.reshape(1, K, bq, Gl, H), (*at, 0)))
    return new, None


def run_sweep(state: Partial, plan: SweepPlan, q, k, v, qpos, kpos, kvalid, *, bias=None, mask=None,
              scale: float, causal: bool) -> Partial:
    """Fold every planned ``past`` and ``partial`` item into ``state``; ``future`` items never run.

    Args:
      state: from ``init_sweep_state`` (or a previous sweep: ring steps continue the fold).
      q: [Lq, K, T, Gl, H] with Lq in {1, lanes}; k, v: [lanes, L, K, H]; qpos [T];
      kpos, kvalid: [lanes, L]; bias / mask: None or [lanes, K, T, Gl, L].
    Returns the updated state, [lanes, K, T_padded, Gl] (+ [H]).
    """
    Tp, Lp = padded_rows(plan), plan.num_tiles * plan.tile
    q = _pad_axis(q, 2, Tp)
    qpos = _pad_axis(jnp.asarray(qpos, jnp.int32), 0, Tp, value=int(np.iinfo(np.int32).max // 2))
    k, v = _pad_axis(k, 1, Lp), _pad_axis(v, 1, Lp)
    kpos = _pad_axis(jnp.asarray(kpos, jnp.int32), 1, Lp)
    kvalid = _pad_axis(jnp.asarray(kvalid, bool), 1, Lp, value=False)
    bias = _pad_axis(_pad_axis(bias, 2, Tp), 4, Lp)
    mask = _pad_axis(_pad_axis(mask, 2, Tp, value=True), 4, Lp, value=False)
    arrays = (q, k, v, qpos, kpos, kvalid, bias, mask)
    for masked, items in ((False, plan.past), (True, plan.partial)):
        if not items:
            continue
        xs = tuple(jnp.asarray(col, jnp.int32) for col in np.asarray(items, np.int32).T)
        step = functools.partial(_tile_step, arrays=arrays, masked=masked, causal=causal, scale=scale,
                                 bq=plan.q_block, tl=plan.tile, q_per_lane=q.shape[0] > 1)
        state, _ = lax.scan(step, state, xs)
    return state


def user_bias_mask(bias, mask, N: int, K: int, T: int, S: int):
    """Broadcast user bias / keep-mask (broadcastable to [N, T, S], types checked by
    ``AttentionProblem.from_inputs``) to [K, T, G, S]."""
    G = N // K

    def prep(x, dtype):
        if x is None:
            return None
        x = jnp.broadcast_to(jnp.asarray(x, dtype), (N, T, S))
        return jnp.transpose(x.reshape(K, G, T, S), (0, 2, 1, 3))

    return prep(bias, jnp.float32), prep(mask, bool)


def rows_with_a_key(mask, *, causal: bool, T: int, S: int):
    """Which query rows have at least one valid key, from the inputs alone (never from a score):
    ``True`` without a user mask (bottom-right causal always leaves key 0), else bool [K, T, G]
    for a [K, T, G, S] keep-mask (``user_bias_mask``), with the causal mask applied."""
    if mask is None:
        return True
    if causal:
        mask = mask & causal_mask(T, S)[None, :, None, :]
    return mask.any(-1)

