"""Split-KV decode-SP on a real device mesh: ``jax.shard_map`` over axes ('cube', 'pe').

The same pieces as the single-device emulation (``split_kv.py``): each device sweeps its KV shard
with ``sweep.run_sweep`` and the partials merge along the same ``ReducePlan``, one
``lax.ppermute`` per batch of messages. Under SPMD every device runs one program, so the tile
plan is the union over ranks: a tile some rank must compute is computed (masked by that rank's
own valid length / positions) by all; a tile every rank skips is skipped. Testable on fake CPU
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``); unchanged on GPUs.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as PS

from jaxref.attention.core import Partial, finalize, group_queries, lse_to_heads, merge, to_heads
from jaxref.attention.geometry import check_inputs
from jaxref.attention.reduce import permute_batches, reduce_plan
from jaxref.attention.split_kv import split_kv_plan
from jaxref.attention.sweep import SweepPlan, init_sweep_state, run_sweep

MESH_AXES = ("cube", "pe")


def union_plan(plan: SweepPlan) -> SweepPlan:
    """One-lane plan computing every (q block, tile) that any lane computes; ``past`` (unmasked)
    only where it is past on every lane."""
    computed = {(qi, kj) for _, qi, kj in plan.computed}
    past_lanes: dict[tuple[int, int], int] = {}
    for _, qi, kj in plan.past:
        past_lanes[(qi, kj)] = past_lanes.get((qi, kj), 0) + 1
    past = {key for key, n in past_lanes.items() if n == plan.num_lanes}
    future = {(qi, kj) for _, qi, kj in plan.future} - computed
    return dataclasses.replace(
        plan, num_lanes=1, past=tuple((0, *key) for key in sorted(past)),
        partial=tuple((0, *key) for key in sorted(computed - past)),
        future=tuple((0, *key) for key in sorted(future)),
        num_empty=plan.num_q_blocks * plan.num_tiles - len(computed) - len(future),
        tile_keys=(tuple(max(lane[j] for lane in plan.tile_keys) for j in range(plan.num_tiles)),))


def split_kv_attention_sharded(q, k, v, *, mesh: jax.sharding.Mesh, causal: bool = False,
                               scale: float | None = None, tile: int = 128, q_block: int | None = None,
                               cube_mesh: tuple[int, int] | None = None, placement: str = "round_robin",
                               start_cube: int = 0, start_pe: int = 0, capacity: int | None = None,
                               reduce: str = "tree"):
    """``split_kv_attention`` with one rank per device of ``mesh`` (axes ('cube', 'pe') = (C, P)).

    q [T, N, H] is replicated; k, v [S, K, H] are laid out by the placement into per-rank shards
    (host-side gather, standing in for the KV cache already resident per PE). Returns the root
    rank's (out [T, N, H], lse [N, T]) float32.
    """
    if tuple(mesh.axis_names) != MESH_AXES:
        raise ValueError(f"mesh.axis_names={tuple(mesh.axis_names)} must be {MESH_AXES}")
    C, P = mesh.shape["cube"], mesh.shape["pe"]
    T, S, N, K, G, H = check_inputs(q, k, v, causal=causal)
    scale = H**-0.5 if scale is None else scale
    _, plan, tokens, valid = split_kv_plan(T, S, tile=tile, q_block=q_block, causal=causal, num_cubes=C,
                                           pes_per_cube=P, cube_mesh=cube_mesh, placement=placement,
                                           start_cube=start_cube, start_pe=start_pe, capacity=capacity)
    uplan = union_plan(plan)
    rplan = reduce_plan(C, P, kind=reduce, cube_mesh=cube_mesh)
    src, recv = permute_batches(rplan)
    slots = tokens.shape[1]
    qpos = np.arange(T) + (S - T)

    def per_rank(qg, k_r, v_r, kpos_r, valid_r):
        state = init_sweep_state(uplan, K, G, H)
        state = run_sweep(state, uplan, qg[None], k_r.reshape(1, slots, K, H), v_r.reshape(1, slots, K, H),
                          qpos, kpos_r.reshape(1, slots), valid_r.reshape(1, slots), scale=scale, causal=causal)
        local = state
        me = lax.axis_index(MESH_AXES)  # cube * P + pe
        for b in range(src.shape[0]):
            perm = [(int(src[b, d]), d) for d in range(C * P) if recv[b, d]]
            sent = local if rplan.sends == "local" else state
            incoming = Partial(*(lax.ppermute(x, MESH_AXES, perm) for x in sent))
            merged = merge(state, incoming)
            take = jnp.asarray(recv[b])[me]
            state = Partial(*(jnp.where(take, y, x) for x, y in zip(state, merged)))
        out, lse = finalize(state)
        return out[None, None, :, :, :T], lse[None, None, :, :, :T]

    shard = PS(*MESH_AXES)
    # check_vma=False: the sweep's scan starts from a replicated neutral state and folds in the
    # device-varying shard; the reduce makes the per-device states explicit with ppermute.
    fn = jax.shard_map(per_rank, mesh=mesh, in_specs=(PS(), shard, shard, shard, shard),
                       out_specs=(shard, shard), check_vma=False)
    args = (group_queries(q, K), k[tokens].reshape(C, P, slots, K, H), v[tokens].reshape(C, P, slots, K, H),
            jnp.asarray(tokens, jnp.int32).reshape(C, P, slots), jnp.asarray(valid).reshape(C, P, slots))
    specs = (PS(), shard, shard, shard, shard)
    explicit = any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types)
    if explicit:  # explicit-sharding meshes: place the inputs as the specs say
        args = tuple(jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, sp)) for x, sp in zip(args, specs))
    out, lse = fn(*args)
    if explicit:  # the caller reads the root's rows: gather them off the mesh (not part of the schedule)
        out, lse = (jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, PS())) for x in (out, lse))
    cube, pe = divmod(rplan.root, P)
    return to_heads(out[cube, pe, 0], N), lse_to_heads(lse[cube, pe, 0])
