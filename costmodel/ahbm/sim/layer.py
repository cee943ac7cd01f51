"""Event simulation of one decoder layer on the AHBM mesh: the independent check of the analytic
layer model (``costmodel.ahbm.layer``).

It reads the layer plan (``costmodel.ahbm.layer_plan``: who computes which GEMM share, the
collectives' rings, the element-ops) as plain data, by its fields, and the hardware spec; it
imports nothing of the model's (``tests/test_ahbm_simulate.py`` checks every module of this
package). Each part of the plan runs in a fresh SimPy environment after the previous one ended
(the layer's parts depend on each other's outputs):

* GEMM: one PE (all PEs hold equal shares and run alike, on their own HBM): a DMA process moves
  each ``gemm_tile_k``-row sub-tile of the weight slice and the matching activation sub-tile
  through the PE's interleaved pseudo-channels (``engines.Hbm``) into one of
  ``composite_runahead_subtiles`` operand buffers; a GEMM process runs each landed sub-tile's
  32 x 64 x 32 engine tiles (ragged edges padded) on the PE's engine and frees the buffer; after a
  block's last sub-tile its outputs are written back through the pseudo-channels. An M-block
  plan of more than ``EXACT_BLOCKS`` blocks is simulated for EXACT_BLOCKS - 1 and EXACT_BLOCKS full
  blocks (then the last one) and extended by the difference, the steady per-block period.
* collectives: every CUBE of the ring is a process; each step sends its chunk as a message
  (``noc.Noc``: XY routes over the SIP's CUBE mesh with per-port and per-link FIFO contention;
  across SIPs over a UCIe link resource per mesh row, see ``UCIe``), waits for its predecessor's
  message and, in a reduce-scatter, adds it on its PEs' MATH engines (each PE adds 1 / P of the
  chunk). All SIPs are simulated; a group all-gather simulates one group (the groups are disjoint
  rectangles of the mesh, so they share no link).
* element-ops: one op of ``elem_ops`` on a PE's MATH engine.
* attention: ``costmodel.ahbm.sim.simulate`` of the plan's kernel configuration, x waves.
"""

from __future__ import annotations

import dataclasses

import simpy

from costmodel.ahbm.sim import simulate
from costmodel.ahbm.sim.engines import PE, FifoServer
from costmodel.ahbm.sim.noc import Noc, transfer
from costmodel.ahbm.sim.rates import SimRates
from costmodel.hardware import AHBM

US_PER_S = 1e6
BF16 = 2  # bytes of a weight / activation element
EXACT_BLOCKS = 3


def _sub_sizes(total: int, step: int) -> list[int]:
    return [min(step, total - i) for i in range(0, total, step)]


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def gemm(part, hw: AHBM) -> float:
    """Simulated duration (us) of one PE's GEMM share (``layer_plan.Gemm`` fields)."""
    rates = SimRates.of(hw)
    rows, k, n, mb = part.rows, part.k, part.n, part.m_block
    blocks = [min(mb, rows - i) for i in range(0, rows, mb)]
    if len(blocks) <= EXACT_BLOCKS + 1:
        return _gemm_blocks(rates, blocks, k, n)
    last = blocks[-1]
    t_a = _gemm_blocks(rates, [mb] * (EXACT_BLOCKS - 1) + [last], k, n)
    t_b = _gemm_blocks(rates, [mb] * EXACT_BLOCKS + [last], k, n)
    return t_b + (len(blocks) - 1 - EXACT_BLOCKS) * (t_b - t_a)


def _gemm_blocks(rates: SimRates, blocks: list[int], k: int, n: int) -> float:
    env = simpy.Environment()
    pe = PE(env, rates)
    tm, tk, tn = rates.gemm_tile
    subs = [(r, kk) for r in blocks for kk in _sub_sizes(k, tk)]
    last_of_block = set()
    i = -1
    for r in blocks:
        i += len(_sub_sizes(k, tk))
        last_of_block.add(i)
    landed = [env.event() for _ in subs]
    consumed = [env.event() for _ in subs]
    ends = []

    def dma():
        for j, (r, kk) in enumerate(subs):
            if j >= rates.run_ahead and not consumed[j - rates.run_ahead].processed:
                yield consumed[j - rates.run_ahead]
            landed[j].succeed(pe.hbm.transfer(kk * n * BF16 + r * kk * BF16))

    def engine():
        for j, (r, kk) in enumerate(subs):
            t = yield landed[j]
            if t > env.now:
                yield env.timeout(t - env.now)
            tiles = _ceil(r, tm) * _ceil(kk, tk) * _ceil(n, tn)
            end = pe.gemm.reserve(tiles * rates.gemm_sub_us)
            yield env.timeout(end - env.now)
            consumed[j].succeed()
            if j in last_of_block:  # the block's outputs, bf16, back to HBM
                ends.append(pe.hbm.transfer(r * n * BF16))

    env.process(dma())
    env.process(engine())
    env.run()
    return max(ends)


def elementwise(part, hw: AHBM) -> float:
    env = simpy.Environment()
    pe = PE(env, SimRates.of(hw))
    return pe.math_op(part.elem_ops)


@dataclasses.dataclass
class UCIe:
    """The UCIe links from SIP s to SIP s + 1 (mod sips), one per mesh row (``sip_links`` of them,
    rows mapped round-robin): each packet of a message (``noc.transfer``) holds its link for
    bytes / ``ucie_bytes_per_s`` (FIFO), and the message lands ``ucie_transaction_s +
    dma_remote_sip_latency_s`` after its last packet (the measured remote-SIP DMA latency, taken to
    include the hops to the SIP's edge)."""

    env: simpy.Environment
    hw: AHBM
    links: int

    def __post_init__(self):
        self.res: dict = {}
        self.busy_us: dict = {}

    def send(self, sip: int, row: int, nbytes: float, arrived: simpy.Event):
        key = (sip, row % self.links)
        if key not in self.res:
            self.res[key] = simpy.Resource(self.env, 1)
            self.busy_us[key] = 0.0
        rate = float(self.hw.ucie_bytes_per_s) / US_PER_S
        yield from transfer(self.env, [self.res[key]], nbytes, rate)  # per packet, like the CUBE NOC
        self.busy_us[key] += nbytes / rate
        yield self.env.timeout((float(self.hw.ucie_transaction_s) + float(self.hw.dma_remote_sip_latency_s)) * US_PER_S)
        arrived.succeed()


def collective(part, hw: AHBM, mesh) -> float:
    """Simulated duration (us) of a ring collective (``layer_plan.Collective`` fields)."""
    lines = list(part.lines)
    if not lines:
        return 0.0
    sips = next((L for axis, L in lines if axis == "sip"), 1)
    rows_cols = {axis: L for axis, L in lines if axis in ("row", "col")}
    # the CUBEs: a rows x cols rectangle (the SIP's mesh, or one group's sub-mesh) per SIP
    R, Ccols = rows_cols.get("col", 1), rows_cols.get("row", 1)
    rates = SimRates.of(hw)
    env = simpy.Environment()
    P = part.pes_per_cube
    xy = {r * Ccols + c: (r, c) for r in range(R) for c in range(Ccols)}
    nocs = [Noc(env, rates, cube_xy=xy, pes_per_cube=P) for _ in range(sips)]
    ucie = UCIe(env, hw, int(mesh.sip_links))
    adders = {(s, cube): [FifoServer(env) for _ in range(P)] for s in range(sips) for cube in xy}
    # the phases: (axis, length, chunk bytes, add?)
    phases = []
    if part.kind == "all_reduce":
        held = part.nbytes
        for axis, L in lines:
            held /= L
            phases.append((axis, L, held, True))
        phases += [(axis, L, ch, False) for axis, L, ch, _ in reversed(phases)]
    else:
        held = part.nbytes / (sips * R * Ccols)
        for axis, L in lines:
            phases.append((axis, L, held, False))
            held *= L
    inbox = {}
    for ph, (_axis, L, _ch, _add) in enumerate(phases):
        for s in range(sips):
            for cube in xy:
                for step in range(L - 1):
                    inbox[(ph, step, s, cube)] = env.event()
    ends = []

    def successor(axis, L, s, cube):
        r, c = xy[cube]
        if axis == "row":
            return s, r * Ccols + (c + 1) % L
        if axis == "col":
            return s, ((r + 1) % L) * Ccols + c
        return (s + 1) % L, cube

    def member(s, cube):
        r, _ = xy[cube]
        for ph, (axis, L, ch, add) in enumerate(phases):
            ds, dcube = successor(axis, L, s, cube)
            for step in range(L - 1):
                ev = inbox[(ph, step, ds, dcube)]
                if axis == "sip":
                    env.process(ucie.send(s, r, ch, ev))
                else:
                    env.process(nocs[s].send(cube * P, dcube * P, ch, ev))
                yield inbox[(ph, step, s, cube)]
                if add:  # the CUBE's P PEs each add 1 / P of the received chunk
                    end = max(a.reserve(ch / BF16 / P / rates.math_elems_per_us) for a in adders[(s, cube)])
                    yield env.timeout(end - env.now)
        ends.append(env.now)

    for s in range(sips):
        for cube in xy:
            env.process(member(s, cube))
    env.run()
    return max(ends)


def attention(part, hw: AHBM) -> float:
    return part.waves * simulate(part.cfg, dataclasses.replace(hw, sips=part.sips))["latency_us"]


def simulate_layer(layer, hw: AHBM, mesh, *, attention_keys_max: int = 1 << 15) -> dict:
    """{part name: simulated us, or None where not simulated} and 'layer' (the sum; None when a
    part is missing). Prefill attention beyond ``attention_keys_max`` keys is not simulated (its
    plan grows as S^2)."""
    out = {}
    for p in layer.parts:
        kind = type(p).__name__
        if kind == "Gemm":
            out[p.name] = gemm(p, hw)
        elif kind == "Collective":
            out[p.name] = collective(p, hw, mesh)
        elif kind == "Elementwise":
            out[p.name] = elementwise(p, hw)
        elif kind == "Attention":
            big = p.cfg.case == "prefill_sp" and p.cfg.seq_len > attention_keys_max
            out[p.name] = None if big else attention(p, hw)
        else:
            raise TypeError(f"part {p!r}: unknown kind {kind!r}")
    vals = list(out.values())
    out["layer"] = None if any(v is None for v in vals) else sum(vals)
    return out


__all__ = ["UCIe", "attention", "collective", "elementwise", "gemm", "simulate_layer"]
