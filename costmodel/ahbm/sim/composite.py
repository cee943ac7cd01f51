"""The composite GEMM command as the PE scheduler streams it: DMA -> GEMM -> write per sub-tile.

A composite computes out [M, N] = A [M, Kd] . B [Kd, N] with A resident in TCM (the M-folded Q
rows, or the probabilities P) and B a ``tl.ref`` operand (a K^T or V tile) the scheduler streams
in engine-tile chunks of TILE_K x TILE_N (ADR-0060 section 1, section B items 4-5):

* DMA stage (one per PE, ``Scheduler``): takes composites in issue order and, chunk after chunk
  (N blocks outer, K chunks inner), books each chunk's transfer on the PE's pseudo-channels; a
  chunk first takes one of ``run_ahead`` staging buffers, so the stream runs at most that many
  chunks ahead of the GEMMs that consume them.
* GEMM stage (one process per composite): as each chunk's data lands, the GEMM engine runs the
  ceil(M / TILE_M) engine tiles that share it back to back (one B chunk serves every M tile: the
  GQA reuse of section B item 4), then frees the chunk's buffer. Engine tiles cost a full
  TILE_M x TILE_K x TILE_N product whatever their fill (ragged M, K or N pad to the engine tile).
* Write stage: once an N block's last K chunk is multiplied its output tiles are written to TCM;
  with a ``scale`` epilogue (Q.K^T) the MATH engine applies it to the real elements written.

A composite's GEMM stage may also wait for A (``a_ready``: Q loaded, P computed) and for its
output buffer (``out_free``: the double-buffered S of software pipelining).
"""

from __future__ import annotations

import math

import simpy

from costmodel.ahbm.sim.engines import PE

BF16_BYTES = 2  # storage of q / k / v / O and P (ADR-0060 section 0.5.2: bf16)


def chunks(kd: int, n: int, tile_k: int, tile_n: int) -> list[tuple[int, int, bool]]:
    """B [kd, n] in engine-tile chunks, N blocks outer: (real bytes, real columns, last K chunk)."""
    out = []
    for nb in range(math.ceil(n / tile_n)):
        cols = min(tile_n, n - nb * tile_n)
        nk = math.ceil(kd / tile_k)
        for kb in range(nk):
            out.append((min(tile_k, kd - kb * tile_k) * cols * BF16_BYTES, cols, kb == nk - 1))
    return out


class Composite:
    """One composite GEMM command (see module docstring). ``done`` fires when its output is written."""

    def __init__(self, pe: PE, m: int, kd: int, n: int, *, b_in_hbm: bool = True, scale_epilogue: bool = False,
                 a_ready: tuple = (), out_free: tuple = ()):
        tm, tk, tn = pe.rates.gemm_tile
        self.pe, self.m = pe, m
        self.chunks = chunks(kd, n, tk, tn)
        self.m_tiles = math.ceil(m / tm)
        self.b_in_hbm, self.scale_epilogue = b_in_hbm, scale_epilogue
        self.a_ready, self.out_free = a_ready, out_free
        env = pe.env
        self.issued = [env.event() for _ in self.chunks]  # value: time the chunk's data is usable
        self.buffers = [None] * len(self.chunks)
        self.done = env.event()


class Scheduler:
    """A PE's composite scheduler: the in-order DMA stream and a GEMM stage per composite."""

    def __init__(self, pe: PE, run_ahead: int):
        if run_ahead < 1:
            raise ValueError(f"run_ahead={run_ahead} must be >= 1 (staging buffers of a composite stream)")
        self.pe, self.env = pe, pe.env
        self.queue = simpy.Store(self.env)
        self.buffers = simpy.Resource(self.env, run_ahead)
        self.env.process(self._dma_stream())

    def submit(self, comp: Composite) -> Composite:
        self.queue.put(comp)
        self.env.process(self._gemm_stage(comp))
        return comp

    def _dma_stream(self):
        hbm = self.pe.hbm
        while True:
            comp = yield self.queue.get()
            for i, (nbytes, _, _) in enumerate(comp.chunks):
                req = self.buffers.request()
                yield req
                comp.buffers[i] = req
                comp.issued[i].succeed(hbm.transfer(nbytes) if comp.b_in_hbm else self.env.now)

    def _gemm_stage(self, comp: Composite):
        env, pe = self.env, self.pe
        for ev in comp.a_ready + comp.out_free:
            if not ev.processed:
                yield ev
        burst = comp.m_tiles * pe.rates.gemm_sub_us
        written = env.now
        for i, (_, cols, last_k) in enumerate(comp.chunks):
            ready = yield comp.issued[i]
            if ready > env.now:
                yield env.timeout(ready - env.now)
            end = pe.gemm.reserve(burst)
            yield env.timeout(end - env.now)
            self.buffers.release(comp.buffers[i])
            if last_k:
                written = pe.math_op(comp.m * cols) if comp.scale_epilogue else env.now
        if written > env.now:
            yield env.timeout(written - env.now)
        comp.done.succeed()
