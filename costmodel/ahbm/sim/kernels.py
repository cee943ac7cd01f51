"""The four ADR-0060 section-10 cases on simulated PEs, walking ``jaxref.attention``'s plans.

* decode (C = P = 1) / decode_sp: ``SplitKV.plan`` over its ``KVPlacement`` (round-robin or
  contiguous, with its capacity) gives every rank's real tiles (keys per tile); each rank sweeps
  the B requests one after another (a 'decode' visit each), then the ranks run
  ``reduce_plan``'s rounds data-driven: a rank sends its state when it reaches a round, each
  receive waits for the message and merges it on the rank's MATH engine; (m, l, O) travel as three
  messages (ADR section 4: separate tl.sends); the root normalises and stores O.
  Aggregation: ranks with the same tile list sweep in the same time (their engines are their
  own), so each distinct list is simulated once; the reduce itself is simulated message by
  message on the NOC (``noc``) for all R ranks.
* prefill (one PE): ``Flash.plan``'s q blocks (TILE rows x G heads M-folded) visit their
  computed tiles one q block after another ('flash' visits); B requests are independent: x B.
* prefill_sp (ring, C = G, one q head per CUBE): ``Ring.plan``'s per-step plans; q block i of a
  CUBE runs on PE i mod P (ADR section B, prefill item 3). A CUBE starts step s once its PEs all
  finished step s - 1 and it holds block s; then it forwards that block (K and V, one message)
  to the next CUBE and its PEs run their 'ring' visits on it. A received block takes one of the
  receiver's ``ring_recv_depth`` buffers (2 = ping-pong), freed when the CUBE's step on it is done
  and its forward transfer has left (a block finding no free buffer waits in the NOC interface).
  The ring's CUBEs follow a Hamiltonian cycle of the sub-mesh (``ring_cycle``): neighbours are one
  hop apart. Blocks are held in TCM when ``ring_recv_depth`` blocks and the visit's working set
  fit a PE's TCM (each PE first DMAs its own block there; tile operands are TCM reads), else
  staged in HBM (see ``_ring_events``: upper and lower bound of that staging's contention). After
  the last step every PE normalises and stores each of its q blocks ('final' visits).
"""

from __future__ import annotations

import math

import simpy

from costmodel.ahbm.sim.composite import BF16_BYTES, FP32_BYTES
from costmodel.ahbm.sim.engines import PE
from costmodel.ahbm.sim.noc import Noc
from costmodel.ahbm.sim.visits import VisitCache
from costmodel.hardware import ahbm_tcm_bytes
from jaxref.attention import Flash, Ring, SplitKV, reduce_plan
from jaxref.attention.reduce import cube_mesh_shape

MERGE_ROW_OPS = 8  # log-sum-exp merge (ADR section 4): maximum, 2 x (sub, exp), l_a sa, l_b sb, +
MERGE_OUT_OPS = 3  # O_a sa, O_b sb, +
MERGE_ISSUES = MERGE_ROW_OPS + MERGE_OUT_OPS


def lane_tiles(plan) -> dict:
    """{(lane, q block): ([keys per computed tile], [masked per tile])} in tile order."""
    acc: dict = {}
    for masked, items in ((False, plan.past), (True, plan.partial)):
        for lane, qi, kj in items:
            acc.setdefault((lane, qi), []).append((kj, masked))
    out = {}
    for key, tiles in acc.items():
        tiles.sort()
        keys = plan.tile_keys[key[0]]
        out[key] = (tuple(keys[kj] for kj, _ in tiles), tuple(m for _, m in tiles))
    return out


def sub_mesh(C: int, orientation: str) -> tuple[int, int]:
    """(rows, cols) of the CUBE Group's sub-mesh: jaxref's most square one ('wide', rows <= cols)
    or its transpose ('tall')."""
    rows, cols = cube_mesh_shape(C)
    if orientation not in ("wide", "tall"):
        raise ValueError(f"cube_mesh={orientation!r} unknown; expected 'wide' or 'tall'")
    return (rows, cols) if orientation == "wide" else (cols, rows)


def decode(cfg, rates) -> dict:
    G, d = cfg.geometry.group * cfg.queries, cfg.geometry.head_dim  # T query tokens x G heads: the M-folded rows
    sp = cfg.case == "decode_sp"
    C, P = (cfg.cubes, cfg.pes) if sp else (1, 1)
    plan, _, _ = SplitKV(tile=cfg.tile, num_cubes=C, pes_per_cube=P,
                         placement=cfg.placement if sp else "round_robin",
                         capacity=cfg.capacity if sp else None).plan(1, cfg.seq_len, causal=False)
    R = C * P
    by_lane = {lane: v for (lane, _), v in lane_tiles(plan).items()}
    cache = VisitCache(rates, d, cfg.pipeline)
    if not sp:  # one PE: each request sweeps, normalises and stores ('flash' visit)
        keys, masked = by_lane[0]
        total = cfg.batch * cache.duration(G, keys, masked, "flash")
        return {"latency_us": total, "sweep_us": total, "reduce_us": 0.0, "simulated_tiles": cache.simulated_tiles,
                "plan_tiles": cfg.batch * len(plan.computed), "link_busy_us": 0.0, "messages": 0}
    sweep = {}
    for r in range(R):
        keys, masked = by_lane.get(r, ((), ()))
        sweep[r] = cfg.batch * cache.duration(G, keys, masked, "decode") if keys else 0.0
    rows = cfg.batch * G
    env = simpy.Environment()
    pes = [PE(env, rates) for _ in range(R)]
    mesh = sub_mesh(C, cfg.cube_mesh)
    rplan = reduce_plan(C, P, kind=cfg.reduce, cube_mesh=mesh)
    noc = Noc(env, rates, cube_xy={c: divmod(c, mesh[1]) for c in range(C)}, pes_per_cube=P)
    parts = (rows * d * FP32_BYTES, rows * FP32_BYTES, rows * FP32_BYTES)  # O, m, l
    inbox = {}
    for k, rnd in enumerate(rplan.rounds if R > 1 else ()):
        for s, dst, _lv in rnd:
            inbox[(k, s, dst)] = [env.event() for _ in parts]
    ends = {}

    def rank(r):
        pe = pes[r]
        yield env.timeout(sweep[r])
        for k, rnd in enumerate(rplan.rounds if R > 1 else ()):
            for s, dst, _lv in rnd:
                if s == r:
                    for nbytes, ev in zip(parts, inbox[(k, s, dst)]):
                        if (c := pe.issue("send")) is not None:
                            yield c
                        env.process(noc.send(s, dst, nbytes, ev))
            for s, dst, _lv in rnd:
                if dst == r:
                    for ev in inbox[(k, s, dst)]:
                        if (c := pe.issue("recv")) is not None:
                            yield c
                        yield ev
                    for _ in range(MERGE_ISSUES):
                        if (c := pe.issue("primitive")) is not None:
                            yield c
                    end = pe.math_op(rows * (MERGE_ROW_OPS + MERGE_OUT_OPS * d))
                    yield env.timeout(end - env.now)
        if r == rplan.root or R == 1:
            for _ in range(2):  # O / l, tl.store
                if (c := pe.issue("primitive")) is not None:
                    yield c
            div = pe.math_op(rows * d)
            end = pe.hbm.transfer(rows * d * BF16_BYTES, earliest=div)
            yield env.timeout(end - env.now)
        ends[r] = env.now

    for r in range(R):
        env.process(rank(r))
    env.run()
    if len(ends) != R:
        raise RuntimeError(f"reduce did not finish: {R - len(ends)} ranks blocked ({cfg.reduce}, C={C}, P={P})")
    return {"latency_us": max(ends.values()), "sweep_us": max(sweep.values()),
            "reduce_us": max(ends.values()) - max(sweep.values()),
            "simulated_tiles": cache.simulated_tiles, "plan_tiles": cfg.batch * len(plan.computed),
            "link_busy_us": max(noc.link_busy_us.values(), default=0.0), "messages": noc.messages}


def prefill(cfg, rates) -> dict:
    G, d = cfg.geometry.group, cfg.geometry.head_dim
    plan = Flash(cfg.tile, cfg.tile, causal_skip=cfg.causal_skip).plan(cfg.seq_len, cfg.seq_len, causal=True)
    cache = VisitCache(rates, d, cfg.pipeline)
    tot = dict.fromkeys(("us", "gemm_busy_us", "math_busy_us", "hbm_bytes", "cpu_busy_us"), 0.0)
    for (_, qi), (keys, masked) in sorted(lane_tiles(plan).items()):
        for k, v in cache.stats(G * plan.block_rows[qi], keys, masked, "flash").items():
            tot[k] += v
    B = cfg.batch
    return {"latency_us": B * tot["us"], "sweep_us": B * tot["us"], "simulated_tiles": cache.simulated_tiles,
            "plan_tiles": B * len(plan.computed), "hbm_bytes": B * tot["hbm_bytes"],
            "gemm_busy_us": B * tot["gemm_busy_us"], "math_busy_us": B * tot["math_busy_us"]}


def ring_cycle(mesh: tuple[int, int]) -> list[int]:
    """CUBE ids (row-major on a rows x cols sub-mesh) in the order of a Hamiltonian cycle, so ring
    neighbours are one hop apart: along row 0, snake back through columns 1.. of the other rows,
    up column 0 (needs an even row count; a 1 x 2 line and the transpose otherwise)."""
    rows, cols = mesh
    if rows * cols <= 2:
        return list(range(rows * cols))
    if rows % 2:
        if cols % 2:
            raise ValueError(f"cube_mesh={mesh} has no Hamiltonian cycle (odd x odd): ring neighbours "
                             "cannot all be one hop apart")
        return [(i % rows) * cols + i // rows for i in ring_cycle((cols, rows))]
    order = [c for c in range(cols)]
    for r in range(1, rows):
        cs = range(cols - 1, 0, -1) if r % 2 else range(1, cols)
        order += [r * cols + c for c in cs]
    order += [r * cols for r in range(rows - 1, 0, -1)]
    return order


def ring(cfg, rates) -> dict:
    G, d = cfg.geometry.group, cfg.geometry.head_dim
    C, P, S = cfg.cubes, cfg.pes, cfg.seq_len
    Gc = G // C
    _, valid, plans = Ring(cfg.tile, cfg.tile, num_cubes=C).plan(S, S, causal=True)
    nq = plans[0].num_q_blocks
    block_bytes = [2 * int(n) * d * BF16_BYTES for n in valid.sum(1)]  # K and V of block b
    ws = ahbm_tcm_bytes(rates.hw, Gc * plans[0].q_block, plans[0].tile, d, cfg.pipeline)  # the spec's TCM rule
    in_tcm = rates.ring_buffers * max(block_bytes) + ws <= rates.tcm_bytes
    cache = VisitCache(rates, d, cfg.pipeline, kv_in_tcm=in_tcm)
    work = [[[0.0] * P for _ in range(C)] for _ in plans]  # work[s][c][p]: PE p of CUBE c at step s
    for s, plan in enumerate(plans):
        for (lane, qi), (keys, masked) in lane_tiles(plan).items():
            work[s][lane][qi % P] += cache.duration(Gc * plan.block_rows[qi], keys, masked, "ring")
    final = [sum(cache.duration(Gc * plans[0].block_rows[qi], (), (), "final") for qi in range(p, nq, P))
             for p in range(P)]
    hbm_us = 1.0 / (rates.pseudo_channels * rates.channel_bytes_per_us)  # per byte on one PE's HBM
    mesh = sub_mesh(C, cfg.cube_mesh)
    order = ring_cycle(mesh)  # ring position i -> CUBE id on the sub-mesh
    bounds = {}
    for interference in (True, False):
        bounds[interference] = _ring_events(C, P, rates, work, final, block_bytes, order, mesh, in_tcm, hbm_us,
                                            interference)
    busiest = max(sum(work[s][c][p] for s in range(C)) for c in range(C) for p in range(P))
    hi, lo = bounds[True], bounds[False]
    return {"latency_us": cfg.batch * hi["end"], "latency_lower_us": cfg.batch * lo["end"],
            "sweep_us": cfg.batch * busiest, "blocks_in_tcm": in_tcm,
            "simulated_tiles": cache.simulated_tiles, "plan_tiles": cfg.batch * sum(len(p.computed) for p in plans),
            "link_busy_us": hi["link_busy_us"], "messages": hi["messages"]}


def _ring_events(C, P, rates, work, final, block_bytes, order, mesh, in_tcm, hbm_us, interference) -> dict:
    """The ring's steps, block hand-offs and buffers as events (one process per CUBE; its P PEs run
    each step in parallel, their times ``work``). Staged in HBM, every PE writes a received block
    into its HBM (the block counts as received after that write) and the forwarding CUBE reads its
    block out (1 / P per PE); with ``interference`` those transfers are also added to the step in
    progress (an upper bound of their contention with the tile DMAs; without: a lower bound)."""
    env = simpy.Environment()
    noc = Noc(env, rates, cube_xy={i: divmod(order[i], mesh[1]) for i in range(C)}, pes_per_cube=1)
    free = [simpy.Container(env, capacity=rates.ring_buffers, init=rates.ring_buffers - 1) for _ in range(C)]
    arrived = {(c, s): env.event() for c in range(C) for s in range(1, C)}
    ends = []

    def send(c, s, left):
        """CUBE c forwards the block it holds at step s to c + 1 (K and V in one message); a block
        that finds no free buffer at the receiver waits in its NOC interface."""
        nxt = (c + 1) % C
        nbytes = block_bytes[(c - s) % C]
        landed = env.event()
        env.process(noc.send(c, nxt, nbytes, landed, left))
        yield landed
        yield free[nxt].get(1)
        if not in_tcm:  # each PE of the receiver writes the block into its own HBM
            yield env.timeout(nbytes * hbm_us)
        arrived[(nxt, s + 1)].succeed()

    def release(c, waits):
        yield env.all_of(waits)
        yield free[c].put(1)

    def cube(c):
        for s in range(C):
            if s:
                yield arrived[(c, s)]
            sent = env.event() if s < C - 1 else None
            if sent is not None:
                env.process(send(c, s, sent))
            t = max(work[s][c])
            b = block_bytes[(c - s) % C]
            if in_tcm and s == 0:  # each PE DMAs its own block into TCM first
                t += b * hbm_us + rates.dma_latency_us
            if not in_tcm and interference:
                t += (b * hbm_us if s else 0.0) + (b / P * hbm_us if s < C - 1 else 0.0)
            step = env.timeout(t)
            env.process(release(c, [step] + ([sent] if sent is not None else [])))
            yield step
        yield env.timeout(max(final))
        ends.append(env.now)

    for c in range(C):
        env.process(cube(c))
    env.run()
    if len(ends) != C:
        raise RuntimeError(f"ring did not finish: {C - len(ends)} CUBEs blocked (C={C}, P={P})")
    return {"end": max(ends), "link_busy_us": max(noc.link_busy_us.values(), default=0.0), "messages": noc.messages}


def plan_cells(case: str, S: int, tile: int, C: int, P: int, capacity: int | None = None) -> int:
    """Cells the case's plan enumerates (lanes x q blocks x KV tiles; decode's placement lays out
    ``capacity`` slots): what bounds its memory."""
    if case in ("decode", "decode_sp"):
        return max(S, capacity or 0) + math.ceil(S / tile)
    if case == "prefill":
        return math.ceil(S / tile) ** 2
    nq = math.ceil(S / tile)
    return C * C * nq * math.ceil(math.ceil(S / C) / tile)
