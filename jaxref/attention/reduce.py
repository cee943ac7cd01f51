"""Reduce-to-root of per-rank (m, l, O) partials over a CUBE Group (ADR section 4).

* Level-2 (intra-CUBE, PE IPCQ): binomial tree over the P PEs of every CUBE toward PE 0,
  ceil(log2 P) rounds; in round k the PE p with p mod 2^(k+1) = 2^k sends to p - 2^k.
* Level-1 (intra-CUBE-Group, CUBE NOC): center-root reduce over the C CUBEs laid out as a
  rectangular rows x cols sub-mesh of the 4x4 SIP (cube id = row * cols + col): first along each
  row toward the center column, then along the center column toward the center row; a node at
  hop distance d sends one hop inward in round (depth - d), so both sides converge together
  (bidirectional) and every message crosses one mesh link. Depth = max column distance + max
  row distance = cols // 2 + rows // 2 (lrab_hierarchical_allreduce phases 1-2, reduce only).
* Baseline ``all_to_all`` (the kernbench fan-out): R - 1 rounds, in round k every rank sends its
  own local partial to rank (r + k) mod R, so every rank ends with the full answer.
* ``all_reduce`` (Tree Attention's one-shot decode): every rank rescales its partial to the global
  max (``pmax``) and the rescaled (l, O) are summed (``psum``), so every rank ends with the full
  answer. Its ``rounds`` model the collective as recursive doubling (rank r exchanges its
  accumulated partial with r XOR 2^k; for R not a power of two the R - 2^m extra ranks first fold
  into partners and get the result back after: 2 more rounds): log2 R rounds for R = 2^m.

The numeric executor ``reduce_partials`` iterates exactly ``plan.rounds`` for ``tree`` and
``all_to_all``; ``all_reduce`` runs ``core.merge_all`` (the max and the sum over ranks), the math
the ``pmax`` / ``psum`` pair computes on a mesh.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxref.attention.core import Partial, merge, merge_all
from jaxref.attention.geometry import PES_PER_CUBE_MAX, SIP_MESH_SHAPE, check_positive
from jaxref.attention.schedule import Message, ReducePlan
from jaxref.validation import check_choice, choices_of
from jaxref.vocabulary import ReduceKind

REDUCES = choices_of(ReduceKind)  # declared once, in jaxref.vocabulary


def cube_mesh_shape(num_cubes: int, cube_mesh: tuple[int, int] | None = None) -> tuple[int, int]:
    """Rows x cols of the CUBE Group's sub-mesh: the given one (validated) or the most square
    rectangle with rows <= cols that fits the 4x4 SIP."""
    check_positive("num_cubes", num_cubes)
    max_r, max_c = SIP_MESH_SHAPE
    if cube_mesh is not None:
        if (not isinstance(cube_mesh, tuple) or len(cube_mesh) != 2
                or not all(isinstance(x, int) and x > 0 for x in cube_mesh)):
            raise ValueError(f"cube_mesh={cube_mesh!r} must be a (rows, cols) tuple of positive ints")
        rows, cols = cube_mesh
        if rows * cols != num_cubes:
            raise ValueError(f"cube_mesh={cube_mesh} holds {rows * cols} CUBEs, expected num_cubes={num_cubes}")
        if rows > max_r or cols > max_c:
            raise ValueError(f"cube_mesh={cube_mesh} does not fit the {max_r}x{max_c} SIP CUBE mesh")
        return cube_mesh
    for rows in range(math.isqrt(num_cubes), 0, -1):
        if num_cubes % rows == 0 and rows <= max_r and num_cubes // rows <= max_c:
            return rows, num_cubes // rows
    raise ValueError(f"num_cubes={num_cubes} cannot be laid out as a rectangular sub-mesh of the "
                     f"{max_r}x{max_c} SIP (a CUBE Group stays inside one SIP)")


def check_mesh(num_cubes: int, pes_per_cube: int, cube_mesh: tuple[int, int] | None) -> tuple[int, int]:
    check_positive("pes_per_cube", pes_per_cube)
    if pes_per_cube > PES_PER_CUBE_MAX:
        raise ValueError(f"pes_per_cube={pes_per_cube} exceeds the {PES_PER_CUBE_MAX} PEs of a CUBE")
    return cube_mesh_shape(num_cubes, cube_mesh)


def center_cube(cube_mesh: tuple[int, int]) -> int:
    rows, cols = cube_mesh
    return ((rows - 1) // 2) * cols + (cols - 1) // 2


def _chain_rounds(length: int, center: int) -> list[list[tuple[int, int]]]:
    """Center-root reduce along a line of ``length`` nodes: rounds of (src index, dst index)."""
    depth = max(center, length - 1 - center)
    rounds = []
    for t in range(depth):
        d = depth - t  # nodes at distance d send one hop inward
        msgs = []
        if center - d >= 0:
            msgs.append((center - d, center - d + 1))
        if center + d < length:
            msgs.append((center + d, center + d - 1))
        rounds.append(msgs)
    return rounds


def _doubling_rounds(R: int, P: int) -> tuple[tuple[Message, ...], ...]:
    """Recursive-doubling all-reduce over R ranks: messages (src, dst, level) per round."""
    m = 1 << (R.bit_length() - 1)  # largest power of two <= R

    def msg(a, b):
        return (a, b, 2 if a // P == b // P else 1)

    fold_in = tuple(msg(m + i, i) for i in range(R - m))
    rounds = [fold_in] if fold_in else []
    for k in range(m.bit_length() - 1):
        rounds.append(tuple(msg(r, r ^ (1 << k)) for r in range(m)))
    if fold_in:
        rounds.append(tuple(msg(i, m + i) for i in range(R - m)))
    return tuple(rounds)


@functools.lru_cache(maxsize=256)
def reduce_plan(num_cubes: int, pes_per_cube: int, *, kind: str = "tree",
                cube_mesh: tuple[int, int] | None = None) -> ReducePlan:
    """Static reduce plan over C x P ranks (rank = cube * P + pe)."""
    check_choice("reduce", kind, REDUCES)
    mesh = check_mesh(num_cubes, pes_per_cube, cube_mesh)
    C, P = num_cubes, pes_per_cube
    R = C * P
    root = center_cube(mesh) * P
    if kind in ("all_reduce", "all_to_all"):  # every rank ends with the answer
        if kind == "all_reduce":
            rounds, sends = _doubling_rounds(R, P), "exchange"
        else:
            rounds = tuple(tuple((r, (r + k) % R, 2 if r // P == ((r + k) % R) // P else 1) for r in range(R))
                           for k in range(1, R))
            sends = "local"
        return ReducePlan(kind=kind, num_cubes=C, pes_per_cube=P, cube_mesh=mesh, root=root,
                          holders=tuple(range(R)), sends=sends, rounds=rounds,
                          level2_rounds=sum(all(m[2] == 2 for m in rnd) for rnd in rounds),
                          level1_rounds=sum(any(m[2] == 1 for m in rnd) for rnd in rounds))
    rounds: list[tuple[Message, ...]] = []
    for k in range(math.ceil(math.log2(P)) if P > 1 else 0):  # Level-2: every CUBE in parallel
        step = 1 << k
        rounds.append(tuple((c * P + p, c * P + p - step, 2)
                            for c in range(C) for p in range(P) if p % (2 * step) == step))
    level2 = len(rounds)
    rows, cols = mesh
    cr, cc = (rows - 1) // 2, (cols - 1) // 2
    for rnd in _chain_rounds(cols, cc):  # Level-1 phase 1: every row toward the center column
        rounds.append(tuple(((r * cols + a) * P, (r * cols + b) * P, 1) for r in range(rows) for a, b in rnd))
    for rnd in _chain_rounds(rows, cr):  # Level-1 phase 2: the center column toward the center row
        rounds.append(tuple(((a * cols + cc) * P, (b * cols + cc) * P, 1) for a, b in rnd))
    return ReducePlan(kind=kind, num_cubes=C, pes_per_cube=P, cube_mesh=mesh, root=root, holders=(root,),
                      sends="accumulated", rounds=tuple(rounds), level2_rounds=level2,
                      level1_rounds=len(rounds) - level2)


def _unique_dst_batches(messages: tuple[Message, ...]) -> list[list[Message]]:
    """Split one round into batches in which every rank receives at most once (one permute each:
    the center of a line receives from both sides in the same round over two links)."""
    batches: list[list[Message]] = []
    for msg in messages:
        for batch in batches:
            if all(m[1] != msg[1] for m in batch):
                batch.append(msg)
                break
        else:
            batches.append([msg])
    return batches


def permute_batches(plan: ReducePlan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plan as permutes: for batch b, receiver d takes rank src[b, d] where recv[b, d];
    round_of[b] is the plan round batch b belongs to.

    Batches follow ``plan.rounds`` in order; a round splits into batches whose receivers are
    distinct (the center of a line hears from both sides in one round, over two links).
    """
    if plan.sends == "exchange":
        raise ValueError(f"reduce={plan.kind!r} is a collective (pmax / psum), not a sequence of permutes")
    R = plan.num_cubes * plan.pes_per_cube
    srcs, recvs, round_of = [], [], []
    for i, rnd in enumerate(plan.rounds):
        # Every rank sends or receives at most once per role in a round and never both, so running
        # a round's batches one after another equals running them simultaneously.
        assert not {m[0] for m in rnd} & {m[1] for m in rnd} or plan.sends == "local", rnd
        for batch in _unique_dst_batches(rnd):
            src, recv = np.arange(R), np.zeros(R, bool)
            for s, d, _ in batch:
                src[d], recv[d] = s, True
            srcs.append(src)
            recvs.append(recv)
            round_of.append(i)
    if not srcs:
        return np.zeros((0, R), np.int32), np.zeros((0, R), bool), np.zeros(0, np.int32)
    return np.stack(srcs).astype(np.int32), np.stack(recvs), np.asarray(round_of, np.int32)


def reduce_partials(partials: Partial, plan: ReducePlan) -> Partial:
    """Run ``plan`` on stacked per-rank partials [R, ...]; returns every rank's state afterwards.

    The root's state (``plan.root``) is the merge over all ranks. Each batch is one permute of the
    rank axis and a merge on the receivers (``lax.ppermute`` + ``where(receiver, merge, keep)``
    under ``jax.shard_map``); the batches run as one ``lax.scan`` over the plan's tables.
    """
    R = plan.num_cubes * plan.pes_per_cube
    if partials.m.shape[0] != R:
        raise ValueError(f"partials have {partials.m.shape[0]} ranks, expected C*P={R}")
    if plan.sends == "exchange":  # every rank ends with the merge over all ranks
        def over_ranks(f):
            return lambda x: jnp.broadcast_to(f(x, axis=0, keepdims=True), x.shape)

        bound = R * jnp.maximum(lax.stop_gradient(partials.l.max()), 1.0)  # >= the sum of the ranks' l
        return merge_all(partials, max_fn=over_ranks(jnp.max), sum_fn=over_ranks(jnp.sum), total_bound=bound)
    src, recv, _ = permute_batches(plan)
    if src.shape[0] == 0:
        return partials

    def step(acc, batch):
        src_b, recv_b = batch
        sent = partials if plan.sends == "local" else acc
        merged = merge(acc, Partial(*(jnp.take(x, src_b, axis=0) for x in sent)))
        keep = [recv_b.reshape((R,) + (1,) * (x.ndim - 1)) for x in acc]
        return Partial(*(jnp.where(r, y, x) for r, x, y in zip(keep, acc, merged))), None

    acc, _ = lax.scan(step, partials, (jnp.asarray(src), jnp.asarray(recv)))
    return acc
