"""Event simulation of the ADR-0060 kernels at sub-tile grain: the independent check of the
analytic model (``costmodel.ahbm.model``).

It shares only two inputs with the model: the hardware spec (``costmodel.hardware.AHBM``, read
in ``rates``) and the plans of ``jaxref.attention`` (which tiles each lane computes, with their
real key counts; the placement; the reduce rounds; the ring steps). Op sizes come from the
geometry and the ADR's kernel text; nothing is imported from the model's modules
(``tests/test_ahbm_simulate.py`` fails if it is).

Modules: ``engines`` (FIFO servers, pseudo-channels, the PE), ``composite`` (the scheduler's
DMA -> GEMM -> write sub-tile stream with its run-ahead), ``tile_loop`` (the kernel's tile loop per
pipelining option), ``visits`` (each distinct visit simulated once; long visits extended by
their period), ``noc`` (IPCQ ports and CUBE-NOC links with contention), ``kernels`` (the cases).
"""

from __future__ import annotations

from costmodel.ahbm.sim.kernels import decode, plan_cells, prefill, ring
from costmodel.ahbm.sim.rates import SimRates
from costmodel.hardware import AHBM

MAX_PLAN_CELLS = 1 << 23  # a plan of 8M (lane, q block, tile) cells takes ~1 GB in jaxref's tuples


def simulate(cfg, hw: AHBM, *, gemm_order: str = "ready") -> dict:
    """Event-simulated latency of one attention layer of ``cfg`` (an ``AhbmConfig``: case, S, B,
    TILE, C, P, pipelining, reduce, placement / capacity, sub-mesh orientation) on ``hw``.

    gemm_order: how the GEMM engine orders sub-tiles of concurrent composites ('ready' | 'issue',
    see ``composite``; the spec leaves it open). Returns {'latency_us',
    'sweep_us', 'simulated_tiles' (tiles the simulation ran), 'plan_tiles' (tiles the plan
    computes), ...}. Raises ValueError when the plan would not fit in memory.
    """
    cells = plan_cells(cfg.case, cfg.seq_len, cfg.tile, cfg.cubes, cfg.pes, cfg.capacity)
    if cells > MAX_PLAN_CELLS:
        raise ValueError(f"seq_len={cfg.seq_len} (capacity {cfg.capacity}) with tile={cfg.tile} is too large to "
                         f"simulate: case={cfg.case!r} plans {cells} (slot / lane, q block, tile) cells, more than "
                         f"{MAX_PLAN_CELLS}; use a larger tile, a smaller seq_len or capacity (the analytic model "
                         "has no such limit)")
    rates = SimRates.of(hw, gemm_order=gemm_order)
    if cfg.case in ("decode", "decode_sp"):
        return decode(cfg, rates)
    if cfg.case == "prefill":
        return prefill(cfg, rates)
    if cfg.case == "prefill_sp":
        return ring(cfg, rates)
    raise ValueError(f"case={cfg.case!r} unknown; expected one of ('decode', 'decode_sp', 'prefill', 'prefill_sp')")


__all__ = ["MAX_PLAN_CELLS", "SimRates", "simulate"]
