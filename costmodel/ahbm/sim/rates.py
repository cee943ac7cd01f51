"""The simulation's reading of the hardware spec: every rate it uses, in bytes / elements per
microsecond, taken from ``costmodel.hardware.AHBM`` fields only (the one thing it shares with the
analytic model besides ``jaxref.attention``'s plans)."""

from __future__ import annotations

import dataclasses

from costmodel.hardware import AHBM

US_PER_S = 1e6
GEMM_ORDERS = ("ready", "issue")


def _f(x) -> float:
    return float(x)


@dataclasses.dataclass(frozen=True)
class SimRates:
    """Rates and latencies of one AHBM spec: times in microseconds, rates per microsecond."""

    pseudo_channels: int  # per PE
    interleave_bytes: float  # consecutive chunks of a PE's data go to consecutive pseudo-channels
    channel_bytes_per_us: float  # one pseudo-channel, efficiency applied, capped at controller / n
    dma_latency_us: float  # PE-local DMA: data usable this long after its transfer
    tcm_bytes_per_us: float  # the PE's TCM port (composite write-back, operand reads from TCM)
    tcm_bytes: float  # TCM capacity per PE
    gemm_sub_us: float  # one engine tile (TILE_M x TILE_K x TILE_N), whatever its fill
    gemm_tile: tuple[int, int, int]  # (M, K, N) of the composite's engine tile
    math_elems_per_us: float
    ipcq_bytes_per_us: float  # PE -> PE inside a CUBE (per tx / rx port)
    noc_bytes_per_us: float  # one CUBE-NOC link / port, one direction
    noc_transaction_us: float  # per CUBE-NOC message
    noc_hop_us: float  # per CUBE-NOC hop
    run_ahead: int  # operand sub-tile buffers of one composite
    ring_buffers: int  # K / V block buffers per CUBE in the ring (2 = ping-pong)
    mask_ops: int  # score-sized MATH ops (and CPU issues) of a partial tile's mask
    issue_us: dict  # CPU issue cost per op kind
    commands: tuple  # scheduler commands that exist ('composite', 'ex_composite')
    mesh: tuple[int, int]  # the SIP's CUBE mesh (rows, cols)
    hw: AHBM | None = None  # the spec itself, for its rules shared as data (the TCM working set)
    gemm_order: str = "ready"  # GEMM sub-tiles of concurrent composites: 'ready' (FIFO as their
    # operands land) | 'issue' (a composite's GEMMs only after the previously issued one's): the
    # spec does not say; see ``composite``

    @classmethod
    def of(cls, hw: AHBM, *, gemm_order: str = "ready") -> SimRates:
        if gemm_order not in GEMM_ORDERS:
            raise ValueError(f"gemm_order={gemm_order!r} unknown; expected one of {GEMM_ORDERS}")
        n = int(hw.pseudo_channels_per_pe)
        ch = min(_f(hw.pseudo_channel_bytes_per_s), _f(hw.pe_controller_bytes_per_s) / n) * _f(hw.hbm_efficiency)
        tm, tk, tn = int(hw.gemm_tile_m), int(hw.gemm_tile_k), int(hw.gemm_tile_n)
        flops_per_us = _f(hw.gemm_flops_per_cycle_per_pe) * _f(hw.pe_clock_hz) / US_PER_S
        prim, comp = _f(hw.cpu_issue_s) * US_PER_S, _f(hw.cpu_issue_composite_s) * US_PER_S
        return cls(
            pseudo_channels=n,
            interleave_bytes=_f(hw.hbm_interleave_bytes),
            channel_bytes_per_us=ch / US_PER_S,
            dma_latency_us=_f(hw.dma_local_latency_s) * US_PER_S,
            tcm_bytes_per_us=_f(hw.tcm_bytes_per_s) / US_PER_S,
            tcm_bytes=_f(hw.tcm_bytes_per_pe),
            gemm_sub_us=2.0 * tm * tk * tn / flops_per_us,
            gemm_tile=(tm, tk, tn),
            math_elems_per_us=_f(hw.math_elems_per_cycle_per_pe) * _f(hw.pe_clock_hz) / US_PER_S,
            ipcq_bytes_per_us=_f(hw.ipcq_bytes_per_s) / US_PER_S,
            noc_bytes_per_us=_f(hw.cube_noc_bytes_per_s) / US_PER_S,
            noc_transaction_us=_f(hw.cube_noc_transaction_s) * US_PER_S,
            noc_hop_us=_f(hw.cube_hop_latency_s) * US_PER_S,
            run_ahead=int(hw.composite_runahead_subtiles),
            ring_buffers=int(hw.ring_recv_depth),
            mask_ops=int(hw.mask_ops_per_partial_tile),
            issue_us={"composite": comp, "ex_composite": comp, "primitive": prim, "send": prim, "recv": prim},
            commands=tuple(hw.commands),
            mesh=(int(hw.mesh_y), int(hw.mesh_x)),
            hw=hw,
            gemm_order=gemm_order,
        )
