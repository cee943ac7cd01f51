"""The four ADR-0060 section-10 cases on simulated PEs, walking ``jaxref.attention``'s plans.

* decode (C = P = 1) / decode_sp: ``split_kv_plan`` over ``kv_placement`` (round-robin or
  contiguous, with its capacity) gives every rank's real tiles (keys per tile); each rank sweeps
  the B requests one after another (a 'decode' visit each), then the ranks run
  ``reduce_plan``'s rounds data-driven: a rank sends its state when it reaches a round, each
  receive waits for the message and merges it on the rank's MATH engine; (m, l, O) travel as three
  messages (ADR section 4: separate tl.sends); the root normalises and stores O.
  Aggregation: ranks with the same tile list sweep in the same time (their engines are their
  own), so each distinct list is simulated once; the reduce itself is simulated message by
  message on the NOC (``noc``) for all R ranks.
* prefill (one PE): ``flash_plan``'s q blocks (TILE rows x G heads M-folded) visit their
  computed tiles one q block after another ('flash' visits); B requests are independent: x B.
* prefill_sp (ring, C = G, one q head per CUBE): ``ring_plan``'s per-step plans; q block i of a
  CUBE runs on PE i mod P (ADR section B, prefill item 3); at each step a PE runs its 'ring'
  visits on the block it holds, after the block has arrived. A CUBE sends its held block (K and V,
  two messages) to the next CUBE of the ring when it starts a step, once the receiver has a free
  block buffer (``ring_buffers``, 2 = ping-pong); a buffer frees when its PEs are done with it and
  its send has left. The ring's CUBEs sit on the CUBE Group's sub-mesh in snake order, so ring
  neighbours are one hop apart. Staged in HBM, a received block is written to the CUBE's HBM (each
  PE's channels take 1 / P) and read back by the tile DMAs; that write is charged to the PEs
  before their next step (an upper bound of its interference). After the last step every PE
  normalises and stores each of its q blocks ('final' visits).
"""

from __future__ import annotations

import math

import simpy

from costmodel.ahbm.sim.composite import BF16_BYTES
from costmodel.ahbm.sim.engines import PE
from costmodel.ahbm.sim.noc import Noc
from costmodel.ahbm.sim.tile_loop import FP32_BYTES
from costmodel.ahbm.sim.visits import VisitCache
from jaxref.attention import TileConfig, cube_mesh_shape, flash_plan, kv_placement, reduce_plan, ring_plan
from jaxref.attention import split_kv_plan

MERGE_ROW_OPS = 8  # log-sum-exp merge (ADR section 4): maximum, 2 x (sub, exp), l_a sa, l_b sb, +
MERGE_OUT_OPS = 3  # O_a sa, O_b sb, +
MERGE_ISSUES = MERGE_ROW_OPS + MERGE_OUT_OPS


def lane_tiles(plan) -> dict:
    """{(lane, q block): ([keys per computed tile], [masked per tile])} in tile order."""
    partial = set(plan.partial)
    out: dict = {}
    for item in sorted(plan.computed):
        lane, qi, kj = item
        ks, ms = out.setdefault((lane, qi), ([], []))
        ks.append(plan.tile_keys[lane][kj])
        ms.append(item in partial)
    return {k: (tuple(a), tuple(b)) for k, (a, b) in out.items()}


def decode(cfg, rates, *, placement: str, capacity: int | None) -> dict:
    G, d = cfg.geometry.group, cfg.geometry.head_dim
    sp = cfg.case == "decode_sp"
    C, P = (cfg.cubes, cfg.pes) if sp else (1, 1)
    pl = kv_placement(cfg.seq_len, num_cubes=C, pes_per_cube=P, placement=placement if sp else "round_robin",
                      capacity=capacity if sp else None)
    plan, _, _ = split_kv_plan(1, cfg.seq_len, tiles=TileConfig(cfg.tile, None), placement=pl, causal=False)
    R = C * P
    by_lane = {lane: v for (lane, _), v in lane_tiles(plan).items()}
    cache = VisitCache(rates, d, cfg.pipeline)
    sweep = {}
    for r in range(R):
        keys, masked = by_lane.get(r, ((), ()))
        sweep[r] = cfg.batch * cache.duration(G, keys, masked, "decode") if keys else 0.0
    rows = cfg.batch * G
    env = simpy.Environment()
    pes = [PE(env, rates) for _ in range(R)]
    rplan = reduce_plan(C, P, kind=cfg.reduce)
    rmesh = rplan.cube_mesh
    noc = Noc(env, rates, cube_xy={c: divmod(c, rmesh[1]) for c in range(C)}, pes_per_cube=P)
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
    plan = flash_plan(cfg.seq_len, cfg.seq_len, tiles=TileConfig(cfg.tile, cfg.tile), causal=True,
                      causal_skip=cfg.causal_skip)
    cache = VisitCache(rates, d, cfg.pipeline)
    total = 0.0
    for (_, qi), (keys, masked) in sorted(lane_tiles(plan).items()):
        total += cache.duration(G * plan.block_rows[qi], keys, masked, "flash")
    return {"latency_us": cfg.batch * total, "sweep_us": cfg.batch * total, "simulated_tiles": cache.simulated_tiles,
            "plan_tiles": cfg.batch * len(plan.computed)}


def snake(mesh: tuple[int, int]) -> list[int]:
    """CUBE ids of a rows x cols sub-mesh in boustrophedon order: a ring whose neighbours are one
    hop apart when rows is even or rows = 1 (row-major ids: row * cols + col)."""
    rows, cols = mesh
    order = []
    for r in range(rows):
        cs = range(cols) if r % 2 == 0 else range(cols - 1, -1, -1)
        order += [r * cols + c for c in cs]
    return order


def ring(cfg, rates) -> dict:
    G, d = cfg.geometry.group, cfg.geometry.head_dim
    C, P, S = cfg.cubes, cfg.pes, cfg.seq_len
    Gc = G // C
    _, valid, plans = ring_plan(S, S, num_cubes=C, tiles=TileConfig(cfg.tile, cfg.tile), causal=True)
    in_tcm = rates.ring_in_tcm
    cache = VisitCache(rates, d, cfg.pipeline, kv_in_hbm=not in_tcm)
    nq = plans[0].num_q_blocks
    block_bytes = [2 * int(n) * d * BF16_BYTES for n in valid.sum(1)]  # K and V of block b
    # work[s][c][p]: PE p of CUBE c on step s
    work = [[[0.0] * P for _ in range(C)] for _ in plans]
    for s, plan in enumerate(plans):
        for (lane, qi), (keys, masked) in lane_tiles(plan).items():
            work[s][lane][qi % P] += cache.duration(Gc * plan.block_rows[qi], keys, masked, "ring")
    final = [sum(cache.duration(Gc * plans[0].block_rows[qi], (), (), "final") for qi in range(p, nq, P))
             for p in range(P)]
    hbm_bytes_per_us = rates.pseudo_channels * rates.channel_bytes_per_us

    mesh = cube_mesh_shape(C)
    order = snake(mesh)  # ring position i -> CUBE id on the sub-mesh
    env = simpy.Environment()
    noc = Noc(env, rates, cube_xy={i: divmod(order[i], mesh[1]) for i in range(C)}, pes_per_cube=1)
    free = [simpy.Container(env, capacity=rates.ring_buffers, init=rates.ring_buffers - 1) for _ in range(C)]
    arrived = {(c, s): env.event() for c in range(C) for s in range(1, C)}
    pe_done = {(c, s, p): env.event() for c in range(C) for s in range(C) for p in range(P)}
    ends = []

    def send(c, s):
        """CUBE c forwards the block it holds at step s to c + 1 (K then V)."""
        nxt = (c + 1) % C
        yield free[nxt].get(1)
        evs = [env.event(), env.event()]
        nbytes = block_bytes[(c - s) % C] / 2
        for ev in evs:
            env.process(noc.send(c, nxt, nbytes, ev))
        yield env.all_of(evs)
        arrived[(nxt, s + 1)].succeed()
        return env.now

    def cube(c):
        for s in range(C):
            if s:
                yield arrived[(c, s)]
            sent = env.process(send(c, s)) if s < C - 1 else None
            waits = [pe_done[(c, s, p)] for p in range(P)] + ([sent] if sent is not None else [])
            env.process(release(c, waits))

    def release(c, waits):
        yield env.all_of(waits)
        yield free[c].put(1)

    def pe(c, p):
        for s in range(C):
            if s:
                yield arrived[(c, s)]
            t = work[s][c][p]
            if s and not in_tcm:  # the received block written to HBM (this PE's share) and the
                t += block_bytes[(c - s) % C] / P / hbm_bytes_per_us  # block read out to forward
                if s < C - 1:
                    t += block_bytes[(c - s) % C] / P / hbm_bytes_per_us
            yield env.timeout(t)
            pe_done[(c, s, p)].succeed()
        yield env.timeout(final[p])
        ends.append(env.now)

    for c in range(C):
        env.process(cube(c))
        for p in range(P):
            env.process(pe(c, p))
    env.run()
    if len(ends) != C * P:
        raise RuntimeError(f"ring did not finish: {C * P - len(ends)} PEs blocked (C={C}, P={P})")
    busiest = max(sum(work[s][c][p] for s in range(C)) for c in range(C) for p in range(P))
    return {"latency_us": cfg.batch * max(ends), "sweep_us": cfg.batch * busiest,
            "simulated_tiles": cache.simulated_tiles, "plan_tiles": cfg.batch * sum(len(p.computed) for p in plans),
            "link_busy_us": max(noc.link_busy_us.values(), default=0.0), "messages": noc.messages}


def plan_cells(case: str, S: int, tile: int, C: int, P: int) -> int:
    """Cells the case's plan enumerates (lanes x q blocks x KV tiles): what bounds its memory."""
    if case in ("decode", "decode_sp"):
        return S + math.ceil(S / tile)
    if case == "prefill":
        return math.ceil(S / tile) ** 2
    nq = math.ceil(S / tile)
    return C * C * nq * math.ceil(math.ceil(S / C) / tile)
