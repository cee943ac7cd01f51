"""The composite GEMM command as the PE scheduler streams it: DMA -> GEMM -> write-back per sub-tile.

A composite computes out [M, N] = A [M, Kd] . B [Kd, N] with A resident in TCM (the M-folded Q
rows, or the probabilities P) and B a ``tl.ref`` operand (a K or V tile) streamed in sub-tiles of
keys (``AHBM.composite_runahead_subtiles``; ADR-0060 section 1, section B items 4-5):

* Q.K^T (``kind='qk'``): a sub-tile is TILE_N keys (the N step of the scheduler's tile plan) of
  all d: DMA of keys x d x 2 B, the GEMM's engine tiles for N = those keys, the scale epilogue on
  MATH over the rows x keys scores and their write-back into TCM (rows x keys x 4 B, fp32).
* P.V (``kind='pv'``): a sub-tile is TILE_K keys (the K step): DMA of keys x d x 2 B, the engine
  tiles for K = those keys, accumulated in the engine; one write-back of rows x d x 4 B at the end.

Stages: the DMA of sub-tile i starts once sub-tile i - depth's GEMM ended (the composite's own
``depth`` operand buffers) and queues FIFO on the PE's pseudo-channels with every other transfer
of the PE; its data lands the DMA latency after its transfer (from TCM instead: a read on the TCM
port, no latency). The GEMM engine (FIFO, shared by every composite of the PE) runs a sub-tile's
engine tiles back to back once its data has landed; an engine tile costs a full TILE_M x TILE_K x
TILE_N product whatever its fill (ragged M, K or N pad to the engine tile), and one B sub-tile
serves every M tile (the GQA reuse of section B item 4). The engine keeps one composite's
accumulators (``PE.accumulator``, FIFO): a Q.K^T sub-tile is complete in one pass (K = d) and
holds them for its engine tiles only, a P.V composite accumulates over its sub-tiles and holds
them from its first sub-tile's GEMM to its last, so sub-tiles of concurrent composites interleave
on the engine only between Q.K^T sub-tiles. Whether the scheduler may run a later-issued
composite's sub-tile before an earlier one's is not in the spec: ``gemm_order='ready'`` (default)
serves sub-tiles FIFO as their operands land (what opt2's premise needs: Q.K^T of tile j + 1 runs
while tile j's ex_composite waits for its softmax), ``'issue'`` starts a composite's GEMMs only
after the previously issued composite's. A composite starts (both stages) once
its output buffer is free (``out_free``: the scheduler dispatches a command when its destination
is; this bounds how far opt2's issue runs ahead), and its GEMM stage also waits for A
(``a_ready``: Q loaded, P computed). ``done`` fires when its last write-back ends.
"""

from __future__ import annotations

import math

from costmodel.ahbm.sim.engines import PE

BF16_BYTES = 2  # storage of q / k / v / O and P (ADR-0060 section 0.5.2: bf16)
FP32_BYTES = 4  # GEMM outputs and the (m, l, O) accumulators


def subtiles(keys: int, step: int) -> list[int]:
    """Keys per sub-tile of a ``keys``-key operand streamed ``step`` keys at a time (last ragged)."""
    return [min(step, keys - i) for i in range(0, keys, step)]


class Composite:
    """One composite GEMM over a ``keys``-key K or V tile for ``rows`` M-folded query rows."""

    def __init__(self, pe: PE, kind: str, rows: int, keys: int, d: int, *, b_in_tcm: bool = False,
                 a_ready: tuple = (), out_free: tuple = ()):
        if kind not in ("qk", "pv"):
            raise ValueError(f"kind={kind!r} unknown; expected 'qk' or 'pv'")
        tm, tk, tn = pe.rates.gemm_tile
        self.pe, self.kind, self.rows, self.d = pe, kind, rows, d
        self.subs = subtiles(keys, tn if kind == "qk" else tk)
        m_tiles = math.ceil(rows / tm)
        if kind == "qk":  # M = rows, K = d, N = the sub-tile's keys
            self.engine_tiles = [m_tiles * math.ceil(d / tk) * math.ceil(k / tn) for k in self.subs]
        else:  # M = rows, K = the sub-tile's keys, N = d
            self.engine_tiles = [m_tiles * math.ceil(k / tk) * math.ceil(d / tn) for k in self.subs]
        self.b_in_tcm, self.a_ready, self.out_free = b_in_tcm, a_ready, out_free
        env = pe.env
        self.landed = [env.event() for _ in self.subs]  # value: time the sub-tile's data is usable
        self.consumed = [env.event() for _ in self.subs]  # its GEMM ended: the buffer is free
        self.done = env.event()
        self.gemm_done = env.event()
        self.previous = pe.last_composite if pe.rates.gemm_order == "issue" else None
        pe.last_composite = self
        env.process(self._dma())
        env.process(self._gemm())

    def _dma(self):
        pe, depth = self.pe, self.pe.rates.run_ahead
        for ev in self.out_free:
            if not ev.processed:
                yield ev
        for i, k in enumerate(self.subs):
            if i >= depth and not self.consumed[i - depth].processed:
                yield self.consumed[i - depth]
            nbytes = k * self.d * BF16_BYTES
            self.landed[i].succeed(pe.tcm_io(nbytes) if self.b_in_tcm else pe.hbm.transfer(nbytes))

    def _gemm(self):
        env, pe = self.pe.env, self.pe
        waits = self.a_ready + self.out_free + ((self.previous.gemm_done,) if self.previous is not None else ())
        self.previous = None
        for ev in waits:
            if not ev.processed:
                yield ev
        written = env.now
        held = None
        write_backs = []
        for i, k in enumerate(self.subs):
            ready = yield self.landed[i]
            if ready > env.now:
                yield env.timeout(ready - env.now)
            if held is None:  # the engine's accumulator: per sub-tile (Q.K^T), whole composite (P.V)
                held = pe.accumulator.request()
                yield held
            end = pe.gemm.reserve(self.engine_tiles[i] * pe.rates.gemm_sub_us)
            yield env.timeout(end - env.now)
            self.consumed[i].succeed()
            if self.kind == "qk":  # scale epilogue, then the scores' write-back
                pe.accumulator.release(held)
                held = None
                write_backs.append(env.process(self._write_back(pe.math_op(self.rows * k), self.rows * k * FP32_BYTES)))
        self.gemm_done.succeed()
        if self.kind == "pv":
            pe.accumulator.release(held)
            written = pe.tcm_io(self.rows * self.d * FP32_BYTES)
        for wb in write_backs:
            written = max(written, (yield wb))
        if written > env.now:
            yield env.timeout(written - env.now)
        self.done.succeed()

    def _write_back(self, ready: float, nbytes: float):
        """A Q.K^T sub-tile's scores go to TCM once its scale epilogue ends: the TCM port serves
        requests in the order they become ready, so the write-back requests it only then (booked
        at the GEMM's end it would hold the port idle until the epilogue ends, delaying another
        composite's write-back ready earlier). Returns the write-back's end."""
        env = self.pe.env
        if ready > env.now:
            yield env.timeout(ready - env.now)
        return self.pe.tcm_io(nbytes)
