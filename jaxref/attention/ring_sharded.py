"""Prefill-SP ring attention on a real device mesh: ``jax.shard_map`` over axes ('cube', 'pe').

The ADR section 5.5 kernel with one device per (CUBE, PE): CUBE c owns the q heads
[c Gc, (c + 1) Gc) of every kv group (Gc = G / C, head-parallel: one head per CUBE at C = G) and
KV block c (``ring.ring_blocks``: contiguous / zigzag / striped); the P PEs of a CUBE split the
query rows (T / P each, the ADR's query-axis split inside a CUBE) and hold the same KV block.
Each of the C steps folds the held block into the running (m, l, O) with ``sweep.run_sweep``,
then ``lax.ppermute`` hands K and V (one stacked message) to the next CUBE (ring+, c -> c + 1).

Causal skip, planned statically (``RingSharded.sharded_plan``) from the same tile plans as
``ring.ring_attention``: a device whose held block is wholly future (or empty) for its query rows
skips the step with ``lax.cond`` on its own entry of the static skip table (a step every device
runs has no cond, a step no device runs has nothing). Inside a step the devices run the union of
their tile plans, each masked by its own positions. Every hand-off is sent: each CUBE holds the
last query rows of its heads, which see every block.

No (m, l, O) reduce: each device normalises its own heads and rows. Differentiable (ppermute's
transpose is the inverse permute; cond and scan have their usual rules).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as PS

from jaxref.attention.core import finalize
from jaxref.attention.distributed import (
    MESH_AXES,
    OnMesh,
    call_on_mesh,
    union_plan,
    varying,
)
from jaxref.attention.geometry import check_positive
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.ring import Ring, check_ring_cubes, lanes_to_heads, ring_blocks
from jaxref.attention.sweep import SweepPlan, TileConfig, init_sweep_state, plan_sweep, run_sweep


@functools.lru_cache(maxsize=256)
def _sharded_plan(num_queries: int, num_keys: int, num_cubes: int, pes_per_cube: int, tiles: TileConfig,
                  causal: bool, ordering: str):
    C, P, T = num_cubes, pes_per_cube, num_queries
    tokens, valid = ring_blocks(num_keys, C, ordering)
    tokens.setflags(write=False)
    valid.setflags(write=False)
    rows = T // P
    step_plans, compute = [], np.zeros((C, C, P), bool)
    for s in range(C):
        held = (np.arange(C) - s) % C
        plans = []
        for p in range(P):
            qpos = np.arange(p * rows, (p + 1) * rows) + (num_keys - T)
            plan = plan_sweep(qpos, tokens[held], valid[held], tiles=tiles, causal=causal)
            compute[s, :, p] = np.asarray(plan.lane_tiles_computed()) > 0
            plans.append(plan)
        step_plans.append(union_plan(tuple(plans)) if compute[s].any() else None)
    return tokens, valid, tuple(step_plans), compute


@dataclasses.dataclass(frozen=True)
class RingSharded(OnMesh, Ring):
    """``Ring`` with one device per (CUBE, PE) of ``mesh`` (axes ('cube', 'pe') = (C, P)): C must
    divide G = N // K (G / C q heads per CUBE), P must divide T (T / P query rows per PE). Equal
    to ``attention_reference`` and to the one-device ``Ring``; its ``schedule`` is ``Ring``'s.
    Build it with ``RingSharded.on(mesh, tile=..., ordering=...)``."""

    pes_per_cube: int = 1  # P: PEs per CUBE, splitting the query rows
    mesh: jax.sharding.Mesh | None = None  # None: a registry template, bound with ``on`` / ``with_mesh``

    def __post_init__(self):
        super().__post_init__()
        check_positive("pes_per_cube", self.pes_per_cube)
        self.check_mesh()

    def sharded_plan(self, num_queries: int, num_keys: int, *, causal: bool):
        """Static plan on the (C, P) mesh: (tokens [C, Lb], valid [C, Lb], step_plans, compute);
        step_plans[s]: one-lane union ``SweepPlan`` of step s (None when no device computes);
        compute: bool [C steps, C cubes, P pes], device (c, p) folds its held block at step s."""
        if self.num_cubes is None:
            raise ValueError("RingSharded.num_cubes=None: bind a mesh with .with_mesh(mesh)")
        return _sharded_plan(num_queries, num_keys, self.num_cubes, self.pes_per_cube, self.tiles, causal,
                             self.ordering)

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """q [T, N, H]; k, v [S, K, H]; causal / scale as ``attention_reference`` (no bias / mask).

        Returns out [T, N, H] float32, lse [N, T] float32.
        """
        pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
        mesh, C, P = self.bound_mesh(bias, mask)
        T, S, K, G, H = pr.T, pr.S, pr.K, pr.G, pr.H
        check_ring_cubes(C, G)
        if T % P:
            raise ValueError(f"q.shape[0]={T} query rows must divide evenly over the mesh's pe axis of size {P}")
        Gc, rows = G // C, T // P
        scale = pr.scale
        tokens, valid, step_plans, compute = self.sharded_plan(T, S, causal=causal)
        some: SweepPlan = next(p for p in step_plans if p is not None)

        def per_device(q_d, kv_d):  # [1, 1, K, rows, Gc, H], [1, 1, 2, Lb, K, H]
            c, p = lax.axis_index("cube"), lax.axis_index("pe")
            qpos = p * rows + jnp.arange(rows) + (S - T)
            kv = kv_d[0, 0]
            state = varying(init_sweep_state(some, K, Gc, H))
            for s, plan in enumerate(step_plans):
                if s:  # ring+ hand-off of the stacked K and V block
                    kv = lax.ppermute(kv, "cube", [(i, (i + 1) % C) for i in range(C)])
                if plan is None:
                    continue
                held = (c - s) % C
                kpos = jnp.asarray(tokens, jnp.int32)[held][None]
                kvalid = jnp.asarray(valid)[held][None]

                def run(st, plan=plan, kv=kv, kpos=kpos, kvalid=kvalid):
                    return run_sweep(st, plan, q_d[0], kv[0][None], kv[1][None], qpos, kpos, kvalid,
                                     scale=scale, causal=causal)

                if compute[s].all():
                    state = run(state)
                else:  # this device skips a wholly-future / empty block
                    state = lax.cond(jnp.asarray(compute[s])[c, p], run, lambda st: st, state)
            out, lse = finalize(state)  # [1, K, rows_padded, Gc, H], [1, K, rows_padded, Gc]
            return out[:, :, :rows], lse[:, :, :rows]

        # q [T, N, H] -> [C, P, K, rows, Gc, H]: device (c, p) holds its heads' query rows.
        q_dev = jnp.transpose(q.reshape(P, rows, K, C, Gc, H), (3, 0, 2, 1, 4, 5))
        # [C, P, 2, Lb, K, H]: block c starts on CUBE c, each of its PEs holding it. A per-device copy
        # rather than a block replicated over 'pe': the backward pass then has no psum over 'pe' of the
        # block cotangents, which beside the per-device conds stalled XLA:CPU's fake devices.
        kv_blocks = jnp.broadcast_to(jnp.stack([k[tokens], v[tokens]], 1)[:, None], (C, P, 2, tokens.shape[1], K, H))
        shard = PS(*MESH_AXES)
        out, lse = call_on_mesh(per_device, mesh, (q_dev, kv_blocks), (shard, shard))
        out = jnp.transpose(out[:, :, 0], (0, 2, 1, 3, 4, 5)).reshape(C, K, T, Gc, H)  # [C, P, K, rows, Gc, H]
        lse = jnp.transpose(lse[:, :, 0], (0, 2, 1, 3, 4)).reshape(C, K, T, Gc)
        return lanes_to_heads(out, lse)
