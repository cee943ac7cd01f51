"""Schedules of the ADR-0060 algorithms as plain data: the single source the cost model consumes.

Each algorithm config's ``schedule`` method (``Flash``, ``SplitKV``, ``Ring``; the sharded forms
inherit theirs) takes only static shapes and returns one of the frozen dataclasses below (ints,
strings and tuples), computed from the config's ``plan`` (the static tables the numeric code
executes: ``SweepPlan`` tile lists, shard tables, a ``ReducePlan``'s rounds); tests check both against
hand-derived formulas from the ADR's verification plan (section 11) and count executed GEMMs.

Conventions: *tiles* are (q block, kv tile) work items of one lane (rank / CUBE), summed over
lanes; each computed tile issues two GEMMs per kv head (Q.K^T and P.V) and reads one K and one V
tile per kv head, shared by all G q heads of the group (the GQA M-fold). Bytes are bytes, with
``dtype_bytes`` the storage size of q / k / v / out elements (2 = bf16, the ADR's storage) and
``acc_bytes`` = 4 for the fp32 (m, l, O) accumulators that a reduction moves.
"""

from __future__ import annotations

import dataclasses

from jaxref.attention.sweep import SweepPlan

Message = tuple[int, int, int]  # (source rank, destination rank, level: 1 = CUBE NOC, 2 = PE IPCQ)


@dataclasses.dataclass(frozen=True)
class SweepCounts:
    """Tile-loop work of a sweep, summed over lanes and kv heads."""

    tiles_past: int  # computed without a mask
    tiles_partial: int  # computed with the boundary / causal mask
    tiles_skipped: int  # wholly future: never computed
    tiles_empty: int  # no valid key (beyond a rank's valid length): never visited
    kv_tile_loads: int  # K and V tile reads: 2 * num_kv_heads * tiles_computed (independent of G)
    kv_bytes: int  # bytes of those reads: real keys per tile * head_dim * dtype_bytes
    gemm_flops: int  # 2 GEMMs per computed tile and kv head: 4 * (rows * heads_per_lane) * keys * head_dim

    @property
    def tiles_computed(self) -> int:
        return self.tiles_past + self.tiles_partial


def sweep_counts(plans: tuple[SweepPlan, ...], *, num_kv_heads: int, heads_per_lane: int, head_dim: int,
                 dtype_bytes: int) -> dict:
    """SweepCounts fields of one or several sweeps (e.g. the C steps of a ring)."""
    past = partial = skipped = empty = keys = flops = 0
    for plan in plans:
        past += len(plan.past)
        partial += len(plan.partial)
        skipped += len(plan.future)
        empty += plan.num_empty
        for lane, qi, kj in plan.computed:
            n_keys = plan.tile_keys[lane][kj]
            keys += n_keys
            flops += 4 * plan.block_rows[qi] * heads_per_lane * n_keys * head_dim
    computed = past + partial
    return {"tiles_past": past, "tiles_partial": partial, "tiles_skipped": skipped, "tiles_empty": empty,
                "kv_tile_loads": 2 * num_kv_heads * computed,
                "kv_bytes": 2 * num_kv_heads * keys * head_dim * dtype_bytes,
                "gemm_flops": num_kv_heads * flops}


@dataclasses.dataclass(frozen=True)
class ProblemCounts(SweepCounts):
    """The problem every schedule describes (shared fields), plus its tile-loop work."""

    num_queries: int  # T
    num_keys: int  # S
    num_heads: int  # N
    num_kv_heads: int  # K
    head_dim: int  # H
    tile: int  # effective KV tile (keys)
    q_block: int  # effective query block (rows)
    causal: bool
    dtype_bytes: int  # bytes per K / V / q element


def problem_counts(plans: tuple[SweepPlan, ...], geometry, *, num_queries: int, num_keys: int, causal: bool,
                   heads_per_lane: int, dtype_bytes: int) -> dict:
    """ProblemCounts fields of one or several sweeps over the same problem (``geometry``: an
    ``AttentionGeometry``; ``heads_per_lane``: q heads sharing a lane's K/V tile, G or 1)."""
    g = geometry
    return dict(
        **sweep_counts(plans, num_kv_heads=g.num_kv_heads, heads_per_lane=heads_per_lane, head_dim=g.head_dim,
                       dtype_bytes=dtype_bytes),
        num_queries=num_queries, num_keys=num_keys, num_heads=g.num_heads, num_kv_heads=g.num_kv_heads,
        head_dim=g.head_dim, tile=plans[0].tile, q_block=plans[0].q_block, causal=causal, dtype_bytes=dtype_bytes)


@dataclasses.dataclass(frozen=True)
class FlashSchedule(ProblemCounts):
    """Single-device tiled flash attention (ADR sections 3, 5.2, 5.4)."""

    causal_skip: bool
    num_q_blocks: int
    num_kv_tiles: int
    q_bytes: int  # q read once per q block: T * N * H * dtype_bytes
    out_bytes: int  # out written once: T * N * H * dtype_bytes
    tiles: tuple[tuple[int, int, str], ...]  # (q block, kv tile, 'past' | 'partial' | 'future')


@dataclasses.dataclass(frozen=True)
class ReducePlan:
    """Static reduce-to-root of per-rank (m, l, O) partials (ADR section 4).

    ``rounds[i]`` holds the messages sent simultaneously in round i; a message carries the
    sender's accumulated partial (``sends='accumulated'``, the tree), its own local partial
    (``sends='local'``, the all-to-all fan-out baseline where every rank merges all R partials) or
    is one side of a pairwise exchange of accumulated partials (``sends='exchange'``, the
    recursive-doubling model of the one-shot ``all_reduce``).
    Rank r is CUBE r // P, PE r % P (physical ids; the mesh axes are ('cube', 'pe')).
    """

    kind: str  # 'tree' | 'all_to_all' | 'all_reduce'
    num_cubes: int  # C
    pes_per_cube: int  # P
    cube_mesh: tuple[int, int]  # (rows, cols) of the CUBE Group's rectangular sub-mesh, rows * cols = C
    root: int  # rank that writes O (the CUBE-Group root: PE 0 of the center CUBE)
    holders: tuple[int, ...]  # ranks that end with the full result
    sends: str  # 'accumulated' | 'local' | 'exchange'
    rounds: tuple[tuple[Message, ...], ...]
    level2_rounds: int  # rounds whose messages stay inside a CUBE (PE IPCQ)
    level1_rounds: int  # rounds with a message between CUBEs (CUBE NOC)

    @property
    def num_rounds(self) -> int:
        return len(self.rounds)

    def messages(self, level: int | None = None) -> int:
        return sum(1 for rnd in self.rounds for msg in rnd if level is None or msg[2] == level)

    def sends_per_rank(self) -> tuple[int, ...]:
        """Messages each rank sends over the whole plan (bytes sent = this x the payload)."""
        counts = [0] * (self.num_cubes * self.pes_per_cube)
        for rnd in self.rounds:
            for src, _, _ in rnd:
                counts[src] += 1
        return tuple(counts)


@dataclasses.dataclass(frozen=True)
class SplitKVSchedule(ProblemCounts):
    """Decode-SP: per-rank flash sweep of a static KV shard + reduce-to-root (ADR sections 4, 5.3)."""

    acc_bytes: int
    num_cubes: int
    pes_per_cube: int
    placement: str  # 'round_robin' | 'contiguous'
    start_cube: int
    start_pe: int
    capacity: int  # KV slots the placement was laid out for (>= num_keys)
    rank_tokens: tuple[int, ...]  # valid keys per rank (physical rank order)
    rank_tiles: tuple[int, ...]  # computed tiles per rank
    critical_path_tiles: int  # max over ranks (the ranks sweep in parallel)
    reduce: ReducePlan
    reduce_rounds: int
    level2_rounds: int
    level1_rounds: int
    reduce_messages: int
    level2_messages: int
    level1_messages: int
    payload_bytes: int  # one (m, l, O) message, all kv heads: K * T * G * (H + 2) * acc_bytes
    reduce_bytes: int  # reduce_messages * payload_bytes


@dataclasses.dataclass(frozen=True)
class RingSchedule(ProblemCounts):
    """Prefill-SP: head-parallel ring KV (ADR section 5.5). G / C q heads per CUBE (ADR: C = G, one)."""

    num_cubes: int  # C, divides G
    ordering: str  # 'contiguous' | 'zigzag' | 'striped'
    block_tokens: tuple[int, ...]  # keys in each KV block (block j starts on CUBE j)
    steps: int  # ring steps: C
    block_steps_run: int  # (q block, CUBE, step) triples whose KV block is not wholly future / empty
    block_steps_skipped: int  # triples skipped: the held block is wholly future for the q block
    block_steps_empty: int  # triples whose held block holds no key (S < C blocks' worth)
    step_cube_tiles: tuple[tuple[int, ...], ...]  # [step][cube] computed tiles
    critical_path_tiles: int  # sum over steps of the busiest CUBE's tiles (lock-step ring)
    step_cube_flops: tuple[tuple[int, ...], ...]  # [step][cube] GEMM flops (all kv heads)
    critical_path_flops: int  # sum over steps of the busiest CUBE's flops: what load balance cuts
    kv_rotations: int  # C - 1 block hand-offs per CUBE
    ring_messages: int  # K and V block sends: 2 * C * (C - 1) per kv head, summed over kv heads
    ring_bytes: int  # bytes of those sends (real keys of each block sent)
