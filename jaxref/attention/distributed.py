"""Split-KV decode-SP on a real device mesh: ``jax.shard_map`` over axes ('cube', 'pe'), plus the
mesh helpers the sharded ring shares.

The same pieces as the single-device emulation (``split_kv.py``): each device sweeps its KV shard
with ``sweep.run_sweep`` and the partials merge along the same ``ReducePlan``: one
``lax.ppermute`` of the packed (m, l, O) per batch of messages (``tree``, ``all_to_all``), or one
``pmax`` + one ``psum`` (``all_reduce``). Under SPMD every device runs one program, so the tile
plan is the union over ranks: a tile some rank must compute is computed (masked by that rank's
own valid length / positions) by all; a tile every rank skips is skipped. Varying-manual-axes
checks are on (``check_vma``): state that starts replicated is cast with ``lax.pcast``.
Testable on fake CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``); unchanged
on GPUs and multi-host (``jax.distributed.initialize()`` then a mesh over ``jax.devices()``).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as PS

from jaxref.attention.core import Partial, finalize, group_queries, lse_to_heads, merge, merge_all, to_heads
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.reduce import permute_batches
from jaxref.attention.split_kv import SplitKV
from jaxref.attention.sweep import SweepPlan, init_sweep_state, run_sweep

MESH_AXES = ("cube", "pe")


def fake_cpu_env(devices: int) -> dict[str, str]:
    """``os.environ`` for a subprocess with ``devices`` fake CPU devices: the flag is appended to the
    caller's ``XLA_FLAGS`` (kept, not replaced) and JAX is pinned to the CPU."""
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={int(devices)}".strip()
    return {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}


def mesh_shape(mesh: jax.sharding.Mesh) -> tuple[int, int]:
    """(C, P) of a ('cube', 'pe') mesh; ValueError for other axis names."""
    if tuple(mesh.axis_names) != MESH_AXES:
        raise ValueError(f"mesh.axis_names={tuple(mesh.axis_names)} must be {MESH_AXES}")
    return mesh.shape["cube"], mesh.shape["pe"]


def union_plan(plans: tuple[SweepPlan, ...]) -> SweepPlan:
    """One-lane plan computing every (q block, tile) that any lane of any plan computes; ``past``
    (unmasked) only where it is past on every lane. The plans share their q blocks and tiles."""
    lanes = sum(p.num_lanes for p in plans)
    computed = {(qi, kj) for p in plans for _, qi, kj in p.computed}
    past_lanes: dict[tuple[int, int], int] = {}
    for p in plans:
        for _, qi, kj in p.past:
            past_lanes[(qi, kj)] = past_lanes.get((qi, kj), 0) + 1
    past = {key for key, n in past_lanes.items() if n == lanes}
    future = {(qi, kj) for p in plans for _, qi, kj in p.future} - computed
    first = plans[0]
    return dataclasses.replace(
        first, num_lanes=1, past=tuple((0, *key) for key in sorted(past)),
        partial=tuple((0, *key) for key in sorted(computed - past)),
        future=tuple((0, *key) for key in sorted(future)),
        num_empty=first.num_q_blocks * first.num_tiles - len(computed) - len(future),
        tile_keys=(tuple(max(lane[j] for p in plans for lane in p.tile_keys) for j in range(first.num_tiles)),))


def varying(tree, axes=MESH_AXES):
    """Cast replicated values (e.g. a neutral accumulator) to device-varying for ``check_vma``."""
    return jax.tree.map(lambda x: lax.pcast(x, axes, to="varying"), tree)


def call_on_mesh(per_device, mesh, args, in_specs, *, root: tuple[int, int] | None = None):
    """``jax.shard_map(per_device)(*args)`` (vma checks on): ``per_device`` returns (out, lse) of one
    device; returns them stacked over the mesh, [C, P, ...], or only device ``root``'s (cube, pe).

    The two travel packed in one array and every device's result is gathered inside the map by one
    ``psum`` of per-device slots (``root=None``), so leaving the mesh is one collective after the
    others: XLA:CPU may run independent collectives in a different order on each fake device and
    stall. On an explicit-sharding mesh the inputs are placed as the specs say."""
    C, P = mesh_shape(mesh)

    def packed(*xs):
        out, lse = per_device(*xs)
        res = jnp.concatenate([out, lse[..., None]], -1)
        if root is not None:
            return res[None, None]
        slots = jnp.zeros((C * P, *res.shape), res.dtype).at[lax.axis_index(MESH_AXES)].set(res)
        return lax.psum(slots, MESH_AXES).reshape(C, P, *res.shape)  # the gather as one all-reduce

    out_specs = PS(*MESH_AXES) if root is not None else PS()
    fn = jax.shard_map(packed, mesh=mesh, in_specs=in_specs, out_specs=out_specs)
    if any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):
        args = tuple(jax.sharding.reshard(x, jax.sharding.NamedSharding(mesh, sp)) for x, sp in zip(args, in_specs))
    res = fn(*args)
    if root is not None:
        if any(t == jax.sharding.AxisType.Explicit for t in mesh.axis_types):  # read off the mesh explicitly
            res = jax.sharding.reshard(res, jax.sharding.NamedSharding(mesh, PS()))
        res = res[root]
    return res[..., :-1], res[..., -1]


def _pack(p: Partial) -> jnp.ndarray:
    """(m, l, O) [..., rows] -> one [..., rows, H + 2] message (one permute carries it all)."""
    return jnp.concatenate([p.o, p.m[..., None], p.l[..., None]], -1)


def _unpack(x: jnp.ndarray) -> Partial:
    return Partial(x[..., -2], x[..., -1], x[..., :-2])


class OnMesh:
    """What the sharded configs share: a ``mesh`` field whose ('cube', 'pe') sizes are the config's
    (num_cubes, pes_per_cube), set by ``on`` / ``with_mesh``; no user bias / mask (they would need
    sharding per rank)."""

    def check_mesh(self) -> None:
        """For ``__post_init__``: a given mesh must have the config's (C, P)."""
        if self.mesh is not None and mesh_shape(self.mesh) != (self.num_cubes, self.pes_per_cube):
            raise ValueError(f"mesh shape {mesh_shape(self.mesh)} must equal (num_cubes, pes_per_cube)="
                             f"{(self.num_cubes, self.pes_per_cube)}")

    @classmethod
    def on(cls, mesh: jax.sharding.Mesh, **knobs):
        """The config on ``mesh``: num_cubes, pes_per_cube = the mesh's ('cube', 'pe') sizes."""
        C, P = mesh_shape(mesh)
        return cls(num_cubes=C, pes_per_cube=P, mesh=mesh, **knobs)

    def with_mesh(self, mesh: jax.sharding.Mesh):
        """This config bound to ``mesh`` (a registry template has mesh None)."""
        C, P = mesh_shape(mesh)
        return dataclasses.replace(self, num_cubes=C, pes_per_cube=P, mesh=mesh)

    def bound_mesh(self, bias, mask) -> tuple[jax.sharding.Mesh, int, int]:
        """(mesh, C, P) for a call; ValueError when unbound or given a bias / mask."""
        name = type(self).__name__
        if bias is not None or mask is not None:
            raise ValueError(f"{name} takes no bias / mask (got bias={'set' if bias is not None else None}, "
                             f"mask={'set' if mask is not None else None}); use the single-device form")
        if self.mesh is None:
            raise ValueError(f"{name}.mesh=None: bind a ('cube', 'pe') mesh with .with_mesh(mesh)")
        return (self.mesh, *mesh_shape(self.mesh))


@dataclasses.dataclass(frozen=True)
class SplitKVSharded(OnMesh, SplitKV):
    """``SplitKV`` with one rank per device of ``mesh`` (axes ('cube', 'pe') = (C, P)).

    q is replicated; k, v are laid out by the placement into per-rank shards (host-side gather,
    standing in for the KV cache already resident per PE). ``reduce``: 'tree' (``lax.ppermute``
    rounds), 'all_to_all' (fan-out) or 'all_reduce' (one ``pmax`` + one ``psum``; every rank holds
    the result). Build it with ``SplitKVSharded.on(mesh, tile=..., ...)`` (C, P from the mesh).
    """

    mesh: jax.sharding.Mesh | None = None  # None: a registry template, bound with ``on`` / ``with_mesh``

    def __post_init__(self):
        super().__post_init__()
        self.check_mesh()

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """q [T, N, H]; k, v [S, K, H]; causal / scale as ``attention_reference`` (no bias / mask).

        Returns the root rank's (out [T, N, H], lse [N, T]) float32.
        """
        pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
        mesh, C, P = self.bound_mesh(bias, mask)
        T, N, K, G, H = pr.T, pr.N, pr.K, pr.G, pr.H
        rplan = self.reduce_plan
        plan, tokens, valid = self.plan(T, pr.S, causal=causal)
        uplan = union_plan((plan,))
        slots = tokens.shape[1]
        qpos = pr.query_positions

        def per_rank(qg, k_r, v_r, kpos_r, valid_r):
            state = run_sweep(varying(init_sweep_state(uplan, K, G, H)), uplan, qg[None],
                              k_r.reshape(1, slots, K, H), v_r.reshape(1, slots, K, H), qpos,
                              kpos_r.reshape(1, slots), valid_r.reshape(1, slots), scale=pr.scale, causal=causal)
            state = local = Partial(*(x[:, :, :T] for x in state))  # real rows only: what the reduce moves
            if rplan.sends == "exchange":
                state = merge_all(state, max_fn=lambda x: lax.pmax(x, MESH_AXES),
                                  sum_fn=lambda x: lax.psum(x, MESH_AXES), total_bound=C * P * slots)
            else:
                src, recv, round_of = permute_batches(rplan)
                me = lax.axis_index(MESH_AXES)  # cube * P + pe
                for r in np.unique(round_of):
                    sent = _pack(local if rplan.sends == "local" else state)  # a round's batches run together
                    for b in np.flatnonzero(round_of == r):
                        perm = [(int(src[b, d]), d) for d in range(C * P) if recv[b, d]]
                        merged = merge(state, _unpack(lax.ppermute(sent, MESH_AXES, perm)))
                        take = jnp.asarray(recv[b])[me]
                        state = Partial(*(jnp.where(take, y, x) for x, y in zip(state, merged)))
            return finalize(state)

        shard = PS(*MESH_AXES)
        args = (group_queries(q, K), k[tokens].reshape(C, P, slots, K, H), v[tokens].reshape(C, P, slots, K, H),
                jnp.asarray(tokens, jnp.int32).reshape(C, P, slots), jnp.asarray(valid).reshape(C, P, slots))
        out, lse = call_on_mesh(per_rank, mesh, args, (PS(), shard, shard, shard, shard),
                                root=divmod(rplan.root, P))
        return to_heads(out[0], N), lse_to_heads(lse[0])
