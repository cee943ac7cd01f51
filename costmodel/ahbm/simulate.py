"""SimPy event simulation of the ADR-0060 kernels: the independent check of ``cases``.

It executes ``jaxref.attention``'s plans themselves (``SplitKV`` / ``Flash`` /
``Ring`` ``.plan`` tile lists, ``reduce_plan`` messages) op by op on resources: per PE an HBM
controller, a GEMM and a MATH engine (SimPy ``Resource``s, FIFO) and the kernel's CPU (the PE's
process, paying ``cpu_issue_s`` per issued op); per CUBE a ring link (serialised sends); IPCQ
messages between PEs and CUBE-NOC / UCIe messages between CUBEs with hop latency. The rules of
an inner tile (what the CPU waits for per pipelining option, double-buffered K / V / S tiles)
are those of ``pipeline``'s docstring; the analytic model derives its closed forms from them.
Batch: decode sweeps the B requests on every rank; prefill runs once and is scaled by B. The op
sizes (elements per softmax / merge, bytes) are the model's constants; rates come from ``hw``.
"""

from __future__ import annotations

import math

import simpy

from costmodel.ahbm import counts
from costmodel.ahbm.cases import MERGE_ELEMS_PER_ROW, MERGE_ELEMS_ROW_FIXED
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.pipeline import (
    ACC_BYTES,
    DTYPE_BYTES,
    MERGE_ELEMS_PER_OUT,
    N_MG,
    N_SM,
    SOFTMAX_ELEMS_PER_ROW,
    SOFTMAX_ELEMS_PER_SCORE,
    US,
)
from costmodel.hardware import AHBM
from jaxref.attention import Flash, Ring, SplitKV


class PE:
    """One PE: HBM controller, GEMM and MATH engines, rates in microseconds."""

    def __init__(self, env: simpy.Environment, hw: AHBM):
        self.env = env
        self.hbm, self.gemm, self.math = (simpy.Resource(env, 1) for _ in range(3))
        self.bw = float(hw.pe_controller_bytes_per_s * hw.hbm_efficiency) / US
        self.dl = float(hw.dma_local_latency_s) * US
        self.c = float(hw.cpu_issue_s) * US
        self.flops = float(hw.gemm_flops_per_cycle_per_pe * hw.pe_clock_hz) / US
        self.elems = float(hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz) / US
        self.tm, self.tk, self.tn = hw.gemm_tile_m, hw.gemm_tile_k, hw.gemm_tile_n

    def use(self, res, dt):
        with res.request() as r:
            yield r
            yield self.env.timeout(dt)

    def dma(self, nbytes):
        yield from self.use(self.hbm, nbytes / self.bw)
        yield self.env.timeout(self.dl)

    def gemm_us(self, m, k, n):
        up = lambda x, q: math.ceil(x / q) * q
        return 2 * up(m, self.tm) * up(k, self.tk) * up(n, self.tn) / self.flops

    def issue(self, n_ops):
        if self.c:
            yield self.env.timeout(n_ops * self.c)


def sweep(pe: PE, keys: list[int], rows: int, d: int, pipeline: str):
    """One visit: the tile loop over ``keys`` (real keys per tile) under one pipelining option."""
    env, n = pe.env, len(keys)
    ev = {k: [env.event() for _ in range(n)] for k in ("qk", "sm", "pv", "mg")}

    def after(name, j):
        return ev[name][j] if 0 <= j < n else None

    def wait(*events):
        return env.all_of([e for e in events if e is not None])

    def qk(j):
        yield wait(after("qk", j - 2))  # K buffer of tile j - 2 consumed
        yield from pe.dma(keys[j] * d * DTYPE_BYTES)
        yield wait(after("sm", j - 2))  # S buffer of tile j - 2 consumed
        yield from pe.use(pe.gemm, pe.gemm_us(rows, d, keys[j]))
        ev["qk"][j].succeed()

    def sm(j):
        yield wait(ev["qk"][j], after("mg", j - 1))
        elems = SOFTMAX_ELEMS_PER_SCORE * rows * keys[j] + SOFTMAX_ELEMS_PER_ROW * rows
        yield from pe.use(pe.math, elems / pe.elems)
        ev["sm"][j].succeed()

    def pv(j):
        yield wait(after("pv", j - 2))  # V buffer of tile j - 2 consumed
        yield from pe.dma(keys[j] * d * DTYPE_BYTES)
        yield ev["sm"][j]
        yield from pe.use(pe.gemm, pe.gemm_us(rows, keys[j], d))
        ev["pv"][j].succeed()

    def mg(j):
        yield ev["pv"][j]
        yield from pe.use(pe.math, MERGE_ELEMS_PER_OUT * rows * d / pe.elems)
        ev["mg"][j].succeed()

    if pipeline == "opt2":
        for j in range(n):
            yield from pe.issue(1)
            env.process(qk(j))
            yield from pe.issue(1)
            for f in (sm, pv, mg):
                env.process(f(j))
    else:
        if pipeline == "opt3":
            yield from pe.issue(1)
            env.process(qk(0))
        for j in range(n):
            if pipeline == "opt1":
                yield from pe.issue(1)
                env.process(qk(j))
            elif j + 1 < n:
                yield from pe.issue(1)
                env.process(qk(j + 1))
            yield ev["qk"][j]
            yield from pe.issue(N_SM)
            env.process(sm(j))
            yield from pe.issue(1)
            env.process(pv(j))
            yield ev["pv"][j]
            yield from pe.issue(N_MG)
            env.process(mg(j))
    yield ev["mg"][n - 1]


def simulate(cfg: AhbmConfig, hw: AHBM) -> dict:
    """Event-simulated latency (us) of ``cfg``: {'latency_us': ...}."""
    env = simpy.Environment()
    g = cfg.geometry
    G, d = g.group, g.head_dim
    if cfg.case in ("decode", "decode_sp"):
        end = _decode(env, cfg, hw, G, d)
        scale = 1
    elif cfg.case == "prefill":
        end = _prefill(env, cfg, hw, G, d)
        scale = cfg.batch
    else:
        end = _ring(env, cfg, hw, d)
        scale = cfg.batch
    env.run()
    return {"latency_us": scale * end["t"]}


def _decode(env, cfg, hw, G, d):
    C, P = (cfg.cubes, cfg.pes) if cfg.case == "decode_sp" else (1, 1)
    plan, _, _ = SplitKV(tile=cfg.tile, num_cubes=C, pes_per_cube=P).plan(1, cfg.seq_len, causal=False)
    R = C * P
    pes = [PE(env, hw) for _ in range(R)]
    tiles = {r: [] for r in range(R)}
    for lane, _qi, kj in sorted(plan.computed):
        tiles[lane].append(plan.tile_keys[lane][kj])
    payload = cfg.batch * G * (d + 2) * ACC_BYTES
    t2 = (float(hw.dma_local_latency_s) + payload / float(hw.ipcq_bytes_per_s)) * US
    t1 = (float(hw.ucie_transaction_s) + payload / float(hw.ucie_bytes_per_s)) * US
    hop = float(hw.cube_hop_latency_s) * US
    rounds, root, _ = counts.reduce_rounds(C, P, cfg.reduce) if R > 1 else ((), 0, "")
    inbox = {(r, k): [] for r in range(R) for k in range(len(rounds))}
    for k, rnd in enumerate(rounds):
        for s, dst, lv, h, mg in rnd:
            inbox[(dst, k)].append(env.event())
    end = {"t": 0.0}

    def deliver(ev_, dt):
        yield env.timeout(dt)
        ev_.succeed()

    def rank(r):
        pe = pes[r]
        for _ in range(cfg.batch):
            yield from pe.dma(G * d * DTYPE_BYTES)
            if tiles[r]:
                yield from sweep(pe, tiles[r], G, d, cfg.pipeline)
        for k, rnd in enumerate(rounds):
            slot = 0
            for s, dst, lv, h, mg in rnd:
                if s == r:
                    recv = [m for m in rnd if m[1] == dst]
                    ev_ = inbox[(dst, k)][recv.index((s, dst, lv, h, mg))]
                    env.process(deliver(ev_, t2 if lv == 2 else t1 + h * hop))
            for s, dst, lv, h, mg in rnd:
                if dst == r:
                    yield inbox[(r, k)][slot]
                    slot += 1
                    if mg:
                        rows = cfg.batch * G
                        merge = rows * (MERGE_ELEMS_PER_ROW * d + MERGE_ELEMS_ROW_FIXED)
                        yield from pe.use(pe.math, merge / pe.elems)
        end["t"] = max(end["t"], env.now)

    def finish():
        yield env.all_of(procs)
        pe = pes[root]
        yield from pe.use(pe.math, cfg.batch * G * d / pe.elems)
        yield from pe.dma(cfg.batch * G * d * DTYPE_BYTES)
        end["t"] = env.now

    procs = [env.process(rank(r)) for r in range(R)]
    env.process(finish())
    return end


def _visits(plan, lane, pes_per_cube):
    """{pe: [(q block, [keys per tile]), ...]} of one lane's computed tiles, q block i on PE i mod P."""
    by_q = {}
    for ln, qi, kj in sorted(plan.computed):
        if ln == lane:
            by_q.setdefault(qi, []).append(plan.tile_keys[lane][kj])
    out = {p: [] for p in range(pes_per_cube)}
    for qi in sorted(by_q):
        out[qi % pes_per_cube].append((qi, by_q[qi]))
    return out


def _prefill(env, cfg, hw, G, d):
    plan = Flash(cfg.tile, cfg.tile, causal_skip=cfg.causal_skip).plan(cfg.seq_len, cfg.seq_len, causal=True)
    pe = PE(env, hw)
    te = plan.tile
    rows = G * te
    end = {"t": 0.0}

    def run():
        for _qi, keys in _visits(plan, 0, 1)[0]:
            yield from pe.dma(rows * d * DTYPE_BYTES)
            yield from sweep(pe, keys, rows, d, cfg.pipeline)
            yield from pe.use(pe.math, rows * d / pe.elems)
            yield from pe.dma(rows * d * DTYPE_BYTES)
        end["t"] = env.now

    env.process(run())
    return end


def _ring(env, cfg, hw, d):
    C, P = cfg.cubes, cfg.pes
    _, valid, plans = Ring(cfg.tile, cfg.tile, num_cubes=C).plan(cfg.seq_len, cfg.seq_len, causal=True)
    te = plans[0].tile
    rows = te
    pes = [[PE(env, hw) for _ in range(P)] for _ in range(C)]
    links = [simpy.Resource(env, 1) for _ in range(C)]
    xfer = 2 * int(valid[0].sum()) * d * DTYPE_BYTES / float(hw.ucie_bytes_per_s) * US
    lat = float(hw.cube_hop_latency_s + hw.ucie_transaction_s) * US
    arrive = {(c, s): env.event() for c in range(C) for s in range(1, C)}
    end = {"t": 0.0}
    acc = rows * (d + 2) * ACC_BYTES

    def send(c, s):
        with links[c].request() as r:
            yield r
            yield env.timeout(xfer)
        yield env.timeout(lat)
        arrive[((c + 1) % C, s + 1)].succeed()

    def pe_step(pe, visits):
        for _qi, keys in visits:
            yield from pe.dma(rows * d * DTYPE_BYTES + acc)
            yield from sweep(pe, keys, rows, d, cfg.pipeline)
            yield from pe.dma(acc)

    def cube(c):
        for s, plan in enumerate(plans):
            if s < C - 1:
                env.process(send(c, s))
            work = _visits(plan, c, P)
            yield env.all_of([env.process(pe_step(pes[c][p], work[p])) for p in range(P)])
            if s < C - 1:
                yield arrive[(c, s + 1)]
        n_blocks = [len(range(p, plans[0].num_q_blocks, P)) for p in range(P)]
        for p in range(P):
            env.process(final(pes[c][p], n_blocks[p]))

    def final(pe, nq):
        for _ in range(nq):
            yield from pe.use(pe.math, rows * d / pe.elems)
            yield from pe.dma(rows * d * DTYPE_BYTES)
        end["t"] = max(end["t"], env.now)

    for c in range(C):
        env.process(cube(c))
    return end


__all__ = ["PE", "simulate", "sweep"]

