"""Hardware specs as differentiable pytrees: Tenstorrent Blackhole (p150a, p100a) and AHBM.

Every number is a named float leaf with its unit in the name (``*_bytes_per_s``, ``*_hz``,
``*_cycles``, ``*_s``) so ``jax.grad`` of a cost flows into it; structure that selects code paths
(grid shape, counts of banks / PEs) is static tree metadata. Each field carries its unit and
source in its own definition (``spec(unit, source)`` field metadata, the one place they live);
``spec_table(hw)`` lists value, unit and source for reports and ``SOURCES`` is the same
provenance as a name -> (unit, source) map derived from that metadata.

Sources (see shared REFERENCE.md §2/§3):
  [BH-guide]  tenstorrent/tt-metal tech_reports/Blackhole/BlackholeBringUpProgrammingGuide.md
  [BH-gemm]   tenstorrent/tt-metal tech_reports/Blackhole_GEMM_FLOPS/GEMM_FLOPS_BH.md
  [BH-specs]  docs.tenstorrent.com Blackhole p150a / p100a specifications
  [tile]      tt-metal tile sizes (tt::tile_size(DataFormat)): 32x32 tile, bfp formats carry one
              8-bit exponent per 16-element face row -> 64 exponent bytes per tile
  [BH-dram-req] tenstorrent/tt-metal issue #55898 (2026-09-09, "Blackhole DRAM endpoints take one read
              request per ~16 cycles per NoC"), measured on p150 with ttnn reads of bf16 / bfp8_b / bfp4_b tiles
  [BH-trace-gap] tenstorrent/tt-metal models/autoports/coherelabs_north_mini_code_1_0/doc/: the traced
              decode windows of functional_decoder/tracy/dense/decode_batch1_ops.csv @ 786895d7 and
              fused_decoder/tracy/dense/decode/decode_batch1_ops.csv @ 1248bbe6 (tests/data/profiler_pairs)
  [BH-sfpu]   SFPU kernel throughputs measured on Blackhole with tt-llk's perf harness and quoted in the
              change that made them: tenstorrent/tt-metal pull request #33563 (2025-12-02, "High accuracy
              fp32 exp": Float32 exp 2548 cycles/tile, 2578 on main before it), #29495 (2025-09-27:
              bfloat16 accurate exp 672 cycles/tile), tenstorrent/tt-llk pull request #834 (2025-11-13:
              reciprocal 5 cycles per 32 lanes on Float32, 3 on bfloat16); the kernels as at tenstorrent/
              tt-llk tt_llk_blackhole/common/inc/sfpu/ckernel_sfpu_exp.h @ 36b092e8
  [BH-noc-est] tenstorrent/tt-metal tests/tt_metal/tt_metal/data_movement/noc_estimator/noc_latencies.yaml @ 795d9149
              (the NoC estimator's table, "based on empirical measurements from the data movement test suite",
              README @ 1aed94cc): median profiler-zone cycles of N back-to-back unicast transactions and their
              barrier (noc_estimator_tests/kernels/reader.cpp @ 00b0fa3f: the barrier inside the zone), between
              two Tensix cores in different rows and columns; the Blackhole entries are ``arch: 1``
              (common/types.hpp @ 795d9149: WORMHOLE_B0, BLACKHOLE), reads ``pattern: 0`` (ONE_FROM_ONE)
  [ADR-0060]  kernbench ADR-0003/0004/0017/0023 numbers quoted in seeds/ADR-0060-...md
  [assumed]   not public; a documented default, to be replaced by a measurement
"""

from __future__ import annotations

import dataclasses
import numbers

import jax.numpy as jnp

from costmodel._pytree import pytree_dataclass, static_field

# Bytes per 32x32 tile (bfp8 = 1024 one-byte values + 64 shared exponents, ...) and the tile edge:
# the Tenstorrent format constants, defined once in jaxref.numerics.formats. [tile]
from jaxref.numerics.formats import TILE, TILE_BYTES
from jaxref.validation import check_choice, choices_of
from jaxref.vocabulary import LayoutFormat, MathFidelity

# Math fidelity -> passes of the matrix engine per tile (HiFiN = 1/N of the LoFi rate: LoFi 1 ...
# HiFi4 4, the vocabulary's order). [BH-gemm]
FIDELITY_PASSES: dict[str, int] = {f: i + 1 for i, f in enumerate(choices_of(MathFidelity))}


def tile_bytes(fmt: str) -> int:
    """Bytes of one 32x32 tile stored in ``fmt`` ('fp32' | 'bf16' | 'bfp8' | 'bfp4')."""
    check_choice("dtype", fmt, TILE_BYTES)
    return TILE_BYTES[fmt]


# Formats a ROW_MAJOR tensor can hold (the vocabulary's LayoutFormat): one scalar per element; the block-float
# ones exist only as tiles, their exponents shared per 16-element row of a face
STICK_FORMATS = choices_of(LayoutFormat)


def element_bytes(fmt: str) -> int:
    """Bytes of one element of a ROW_MAJOR tensor (a stick's width x this = its bytes) in ``fmt``
    ('fp32' | 'bf16'); a block-float format has no per-element size and is refused."""
    check_choice("dtype", fmt, STICK_FORMATS)
    return TILE_BYTES[fmt] // (TILE * TILE)


def fidelity_passes(fidelity: str) -> int:
    """Matrix-engine passes per tile for a math fidelity ('LoFi' | 'HiFi2' | 'HiFi3' | 'HiFi4')."""
    check_choice("fidelity", fidelity, FIDELITY_PASSES)
    return FIDELITY_PASSES[fidelity]


# ---- field provenance ------------------------------------------------------------------------------
def spec(unit: str, source: str, *, static: bool = False, bounds: tuple[float, float] | None = None,
         settable: bool = False, **kwargs):
    """A spec field with its unit, source and physical range as metadata (static: tree metadata).

    ``bounds=(lo, hi)`` is the closed range ``lo <= value <= hi`` a value must lie in to be physical;
    a float field without it must be finite and > 0 (a rate, size, clock or latency).
    ``field_bounds`` reads it back for the one override / calibration validator. ``settable``: a
    static integer field (the worker grid) that ``--set`` may still replace by an integer in ``bounds``
    (it changes the traced structure, so it is not differentiable).
    """
    if settable and not (static and bounds is not None):
        raise ValueError(f"spec(settable=True) needs static=True and bounds; got {static=}, {bounds=}")
    meta = {"unit": unit, "source": source, "bounds": bounds, "settable": settable}
    return static_field(metadata=meta, **kwargs) if static else dataclasses.field(metadata=meta, **kwargs)


# Physical ranges of the spec fields (closed; read by ``field_bounds``, enforced on overrides and
# calibrations): orders of magnitude around any chip of this class, wide enough for every what-if,
# narrow enough that no float32 cost sum overflows or divides by a vanishing rate. [assumed]
RATE = (1e6, 1e15)  # B/s: 1 MB/s .. 1 PB/s
CLOCK = (1e6, 1e11)  # Hz: 1 MHz .. 100 GHz
LATENCY = (0.0, 1e-3)  # s: an ideal 0 .. 1 ms per transfer


# ---- Blackhole -------------------------------------------------------------------------------------
@pytree_dataclass
class Blackhole:
    """One Blackhole board. Float leaves are differentiable; the grid is static."""

    dram_peak_bytes_per_s: float = spec("B/s", "[BH-specs] p150a 512 GB/s (256-bit GDDR6, 16 GT/s); p100a 448 GB/s",
                                        bounds=RATE)
    dram_capacity_bytes: float = spec("B", "[BH-specs] p150a 32 GB, p100a 28 GB", bounds=(1e6, 1e15))
    clock_hz: float = spec("Hz", "[BH-guide] AI clock up to 1.35 GHz (the default: the calibration's tables were "
                                 "fitted at it); 1.1-1.3 GHz reported under load (REFERENCE §9): set it for a board "
                                 "that throttles; lower bound [assumed] 0.8 GHz, the slowest AI clock tt-metal's "
                                 "microbenchmarks were run at", bounds=(0.8e9, 1.35e9))
    matmul_flops_per_cycle_per_core: float = spec("FLOP/cycle", "[BH-gemm] 4096 at LoFi; HiFi2/3/4 = 1/2, 1/3, 1/4",
                                                  bounds=(1.0, 1e7))
    noc_bytes_per_cycle_per_link: float = spec("B/cycle", "[BH-guide] 64 B/flit/cycle/link", bounds=(1.0, 1e5))
    noc_hop_cycles: float = spec("cycles", "[BH-guide] ~9 cycles per router hop", bounds=(0.0, 1e4))
    l1_bytes_per_core: float = spec("B", "[BH-guide] 1464 KB usable of ~1.5 MB", bounds=(1024.0, 1e12))
    eth_bytes_per_s: float = spec("B/s", "[BH-guide] 25 GB/s per link per direction (unused by the single-chip expert)",
                                  bounds=RATE)
    name: str = spec("-", "preset name", static=True, default="p150a")
    grid_x: int = spec("cores", "[BH-guide] ttnn compute grid 11x10 (12x10 enabled, one column for dispatch); by "
                       "board and firmware 11x10 on p150a with firmware >= 19.5.0, 13x10 before, 12x10 reported on "
                       "some p150 in Galaxy systems (REFERENCE §9); at most the 14 Tensix columns of the die",
                       static=True, default=11, bounds=(1, 14), settable=True)
    grid_y: int = spec("cores", "[BH-guide] ttnn compute grid 11x10; at most the 10 Tensix rows of the die",
                       static=True, default=10, bounds=(1, 10), settable=True)
    dram_banks: int = spec("banks", "[BH-specs] 8 on p150a; 7 on p100a derived from 28 GB / 4 GB",
                           static=True, default=8)
    dram_request_cycles: float = spec(
        "cycles", "[BH-dram-req] a DRAM NoC endpoint accepts one read request per ~16.4 cycles (12 ns) per NoC, "
        "whatever the request size and however many cores issue: a 576 B bfp4 tile reaches 62% of channel peak, "
        "1088 B bfp8 91%, 2 KB bf16 98%; upper bound [assumed] 1000 cycles", default=16.4, bounds=(0.0, 1e3))
    noc_write_issue_cycles: float = spec(
        "cycles", "[assumed] the issuing RISC's time per small noc_async_write: address generation, the command-"
        "buffer-ready poll and ncrisc_noc_fast_write's ~7 command-buffer register stores and counter updates "
        "(tenstorrent/tt-metal tt_metal/hw/inc/blackhole/noc_nonblocking_api.h); an order of magnitude, not a "
        "measurement. [BH-noc-est]'s back-to-back 64 B writes to one core, with no address generated from a page "
        "id, take 23 cycles each ((6229 - 359) / 255, its Blackhole ONE_TO_ONE L1 entries): these kernels' "
        "writes, which generate an address per write, take at least that; the HC transpose writers of the real "
        "op reports spend ~47 cycles a face-row write (32-49 ns, tests/test_costmodel_dm_writes.py), so 64 is "
        "~1.35x high there; bounds: 2 cycles (a header and a data flit injected) to 1000",
        default=64.0, bounds=(2.0, 1e3))
    noc_l1_read_round_trip_cycles: float = spec(
        "cycles", "[BH-noc-est] one 64 B NoC read of another core's L1 and its barrier: 373 cycles (the Blackhole "
        "ONE_FROM_ONE L1 entry, 1 transaction; 405 at 2 KB); the Wormhole entries of the same table differ by ~90 "
        "cycles between cores in another row and column and cores on one axis, the torus ring's extra hops, so "
        "these are round trips; bounds: 2 x 9 cycles (one hop each way) to 1e4 [assumed]", default=373.0,
        bounds=(18.0, 1e4))
    noc_l1_read_issue_cycles: float = spec(
        "cycles", "[BH-noc-est] each further 64 B L1 read issued before the same barrier: (9279 - 373) / 255 = 34.9 "
        "cycles (the 256- and 1-transaction Blackhole ONE_FROM_ONE L1 entries; the 16- and 64-transaction ones "
        "give 33.9 and 34.7 from the same start); bounds: 1 to 1e3 [assumed]", default=34.9, bounds=(1.0, 1e3))
    noc_write_round_trip_cycles: float = spec(
        "cycles", "[BH-noc-est] one 64 B NoC write to another core's L1 and its barrier (the write's "
        "acknowledgement): 359 cycles (the Blackhole ONE_TO_ONE L1 entry, 1 transaction); bounds: 2 x 9 cycles to "
        "1e4 [assumed]", default=359.0, bounds=(18.0, 1e4))
    noc_mcast_cycles: float = spec(
        "cycles", "[BH-noc-est] one 64 B multicast write to a rectangle of 4 cores and its barrier (every "
        "destination's acknowledgement): 397 cycles (the Blackhole MULTICAST ONE_TO_ALL entry, 1 transaction, 4 "
        "subordinates); bounds: 2 x 9 cycles to 1e4 [assumed]", default=397.0, bounds=(18.0, 1e4))
    noc_mcast_cycles_per_destination: float = spec(
        "cycles", "[BH-noc-est] a multicast's further cycles per destination core: (779 - 397) / (110 - 4) = 3.6 "
        "(the 4- and 110-subordinate Blackhole MULTICAST ONE_TO_ALL entries at 64 B; the 25-subordinate one, 493, "
        "is 4% above the line); bounds: 0 to 1e3 [assumed]", default=3.6, bounds=(0.0, 1e3))
    sfpu_exp_cycles_per_tile: float = spec(
        "cycles", "[BH-sfpu] the accurate exponential (exp_tile<false>, math_approx_mode=0) on a Float32 Dest "
        "(fp32_dest_acc_en=1: ``_sfpu_exp_fp32_accurate_``, Cody-Waite reduction and a degree-7 polynomial, "
        "32 SFPU iterations of 32 lanes per tile): 2548 cycles per tile measured on Blackhole, 2578 before the "
        "change that introduced it; bounds: 32 (one SFPU instruction per iteration) to 1e5 [assumed]",
        default=2548.0, bounds=(32.0, 1e5))
    sfpu_recip_cycles_per_tile: float = spec(
        "cycles", "[BH-sfpu] the reciprocal (recip_tile) on a Float32 Dest: 5 cycles per 32 lanes, 32 iterations per "
        "tile = 160 cycles per tile (the SFPLOADMACRO Newton-Raphson path); bounds: 32 to 1e5 [assumed]",
        default=160.0, bounds=(32.0, 1e5))
    trace_op_gap_s: float = spec(
        "s", "[BH-trace-gap] gap between consecutive device ops of a ttnn trace replay on one chip (a kernel's "
        "start less the previous kernel's end: the profiler's OP TO OP LATENCY [ns]): the median of the 42 "
        "gaps measured in the two traced batch-1 decode windows of a Blackhole decoder layer (replay sessions 3 "
        "and 6; each window's first op, 209 and 294 us after the previous replay, left out), 455-1576 ns, "
        "median 591.5 ns (mean 881 ns: ~0.5 us before most ops, 0.9-1.6 us before the heads, sharding, rope "
        "and cache ops and the output projection). Not the model's per-op dispatch (FitParams.dispatch_us), "
        "and no step time reads it: it is what an emitted op report writes in OP TO OP LATENCY [ns] (static: "
        "not differentiable). Bounds: 0 to "
        "6.5 us, above which tt-perf-report 1.4.1 flags a gap and advises tracing", static=True, default=591.5e-9,
        bounds=(0.0, 6.5e-6))

    @property
    def grid_cores(self) -> int:
        """Tensix cores of the ttnn compute grid (110 on p150a)."""
        return self.grid_x * self.grid_y

    @property
    def noc_link_bytes_per_s(self):
        """One NoC link, one direction: 64 B/cycle x clock (~86 GB/s at 1.35 GHz)."""
        return self.noc_bytes_per_cycle_per_link * self.clock_hz

    def tile_matmul_cycles(self, fidelity: str):
        """Cycles of one 32x32x32 tile product on one core: 2*32^3 / (4096 FLOP/cycle) x passes."""
        return 2.0 * TILE**3 / self.matmul_flops_per_cycle_per_core * fidelity_passes(fidelity)


def blackhole_p150a() -> Blackhole:
    """p150a (and p150b): 32 GB GDDR6 at 512 GB/s, 11x10 ttnn compute grid. [BH-specs, BH-guide]"""
    return Blackhole(
        dram_peak_bytes_per_s=512e9,  # [BH-specs] 256-bit GDDR6 x 16 GT/s
        dram_capacity_bytes=32e9,  # [BH-specs]
        clock_hz=1.35e9,  # [BH-guide] AI clock up to 1.35 GHz
        matmul_flops_per_cycle_per_core=4096.0,  # [BH-gemm] LoFi; 16 cycles per 32x32x32 tile
        noc_bytes_per_cycle_per_link=64.0,  # [BH-guide] 64 B/flit/cycle/link
        noc_hop_cycles=9.0,  # [BH-guide] ~9 cycles per router hop
        l1_bytes_per_core=1464.0 * 1024.0,  # [BH-guide] ~1.5 MB, 1464 KB usable
        eth_bytes_per_s=25e9,  # [BH-guide] per link per direction
        name="p150a", dram_banks=8,  # the grid: the spec's defaults (11x10, ``GRID``)
    )


# The ttnn compute grid (columns x rows) every program config defaults to: the spec's grid fields.
GRID: tuple[int, int] = tuple(next(f.default for f in dataclasses.fields(Blackhole) if f.name == axis)
                              for axis in ("grid_x", "grid_y"))


def blackhole_p100a() -> Blackhole:
    """p100a: 28 GB at 448 GB/s [BH-specs]; Tensix numbers as p150a (REFERENCE gives no others).

    7 DRAM banks is derived (448/512 x 8 banks of 4 GB = 28 GB), not quoted.
    """
    return dataclasses.replace(blackhole_p150a(), dram_peak_bytes_per_s=448e9, dram_capacity_bytes=28e9,
                               name="p100a", dram_banks=7)


BLACKHOLE_PRESETS = {"p150a": blackhole_p150a, "p100a": blackhole_p100a}


def blackhole(name: str = "p150a") -> Blackhole:
    """Look a Blackhole preset up by name ('p150a' | 'p100a')."""
    check_choice("hw", name, BLACKHOLE_PRESETS)
    return BLACKHOLE_PRESETS[name]()


# ---- AHBM (ADR-0060) -------------------------------------------------------------------------------
@pytree_dataclass
class AHBM:
    """One AHBM SIP: a mesh of CUBEs (HBM stack + logic die with PEs). The ADR-0060 kernel model
    that consumes it is ``costmodel.ahbm``."""

    pseudo_channel_bytes_per_s: float = spec("B/s", "[ADR-0060] 32 GB/s per pseudo-channel (ADR-0003)", bounds=RATE)
    pe_controller_bytes_per_s: float = spec("B/s", "[ADR-0060] 256 GB/s per PE controller (8 pch x 32 GB/s)",
                                            bounds=RATE)
    hbm_efficiency: float = spec("1", "[ADR-0060] default efficiency factor 0.8", bounds=(1e-3, 1.0))
    ucie_bytes_per_s: float = spec("B/s", "[ADR-0060] 128 GB/s per UCIe connection; used only by messages that "
                                   "cross SIPs (none in these kernels: a CUBE Group stays in one SIP)",
                                   bounds=RATE)
    ucie_transaction_s: float = spec("s", "[ADR-0060] +8 ns per UCIe transaction (crossing SIPs only)", bounds=LATENCY)
    dma_local_latency_s: float = spec("s", "[ADR-0060] measured PE-local DMA 77 ns", bounds=LATENCY)
    dma_remote_cube_latency_s: float = spec("s", "[ADR-0060] measured worst remote CUBE 573 ns", bounds=LATENCY)
    dma_remote_sip_latency_s: float = spec("s", "[ADR-0060] measured remote SIP 409 ns", bounds=LATENCY)
    tcm_bytes_per_pe: float = spec("B", "[ADR-0060] scratch (TCM) 1 MiB", bounds=(1024.0, 1e12))
    pe_clock_hz: float = spec("Hz", "[assumed] 1 GHz; not public", bounds=CLOCK)
    gemm_flops_per_cycle_per_pe: float = spec("FLOP/cycle", "[assumed] one 32x64x32 tile per 64 cycles "
                                              "(2048 FLOP/cycle); not public", bounds=(1.0, 1e7))
    math_elems_per_cycle_per_pe: float = spec("elem/cycle", "[assumed] 64; not public", bounds=(1.0, 1e6))
    # Added for the kernel model (costmodel.ahbm). Defaults so older constructor calls still work.
    ipcq_bytes_per_s: float = spec("B/s", "[assumed] 128 GB/s: one PE->PE IPCQ transfer (PE_DMA) inside a CUBE, "
                                   "taken equal to a UCIe link; not public. Each PE has one IPCQ tx and one rx "
                                   "port: its outgoing messages serialise on tx, incoming ones on rx (FIFO); a "
                                   "message holds the sender's tx and the receiver's rx for payload / rate and "
                                   "is delivered dma_local_latency_s after (the reduce tree's pairs are 1-hop "
                                   "neighbours, ADR section 4.1)", default=128e9, bounds=RATE)
    cube_hop_latency_s: float = spec("s", "[assumed] 82.7 ns per CUBE-NOC hop = (573 - 77) ns / 6 hops: the "
                                     "measured worst remote-CUBE DMA over the 6 hops of a 4x4 mesh [ADR-0060]",
                                     default=(573e-9 - 77e-9) / 6, bounds=LATENCY)
    cpu_issue_s: float = spec("s", "[ADR-0060] CPU issue cost of one PRIMITIVE tl op (MATH op, tl.send, tl.recv; "
                              "ADR-0064's dispatch cost); default 0 as kernbench's dispatch_cycles=0 (section 9 "
                              "item 6). The kernel CPU issues ops in program order, one at a time; an op starts "
                              "executing only after its issue ends", default=0.0, bounds=(0.0, 1e-3))
    # ---- mechanisms of issue 18 (each specified precisely enough to be simulated independently; the
    # ---- per-case physics is costmodel/ahbm/physics.py's docstring) ------------------------------
    cpu_issue_composite_s: float = spec(
        "s", "[assumed] CPU issue cost of one COMPOSITE descriptor push (tl.composite and the opt2 "
        "tl.ex_composite; ADR-0064: a descriptor push >> a primitive op); default 0 as kernbench's "
        "dispatch_cycles=0 until ADR-0064 lands. Same in-order CPU as cpu_issue_s", default=0.0, bounds=(0.0, 1e-3))
    tcm_bytes_per_s: float = spec(
        "B/s", "[assumed] 256 GB/s (256 B/cycle at the assumed 1 GHz) per PE, not public: the TCM port. Used by "
        "(a) a composite's write-back stage (DMA_WB: each GEMM sub-tile's fp32 output into TCM, one in-order "
        "write port per PE) and (b) a composite operand read from TCM (ring K/V blocks held in TCM: no HBM "
        "DMA, no dma_local_latency_s)", default=256e9, bounds=RATE)
    cube_noc_bytes_per_s: float = spec(
        "B/s", "[assumed] 128 GB/s per CUBE-NOC link per direction (ADR-0017 NOC; not public, taken equal to the "
        "one die-to-die rate the ADR quotes). The CUBE NOC is the 2D mesh between the CUBEs of ONE SIP: every "
        "intra-SIP CUBE->CUBE message (decode Level-1 reduce, ring K/V blocks) uses it, never UCIe. A message "
        "from CUBE a to CUBE b follows dimension-ordered XY routing over the SIP mesh (columns first, then "
        "rows); cut-through: it holds a's injection port, every directed link of its route and b's ejection "
        "port (each at this rate; a CUBE's 8 PEs share one injection and one ejection port) for "
        "payload / rate, all at once, starting when all are free (FIFO per resource: contention); it is "
        "delivered cube_noc_transaction_s + hops x cube_hop_latency_s after its transfer ends",
        default=128e9, bounds=RATE)
    cube_noc_transaction_s: float = spec(
        "s", "[assumed] 2 ns per CUBE-NOC message (packet header / router set-up; not public; UCIe's 8 ns "
        "transaction cost applies only to messages that cross SIPs)", default=2e-9, bounds=(0.0, 1e-6))
    hbm_interleave_bytes: float = spec(
        "B", "[assumed] 256 B: a PE's data is interleaved over its pseudo_channels_per_pe pseudo-channels in "
        "256-byte chunks (chunk i on channel i mod 8); each pseudo-channel delivers pseudo_channel_bytes_per_s "
        "x hbm_efficiency and the PE controller caps the sum at pe_controller_bytes_per_s x hbm_efficiency "
        "(equal at the ADR numbers, so a transfer of n bytes takes n / (controller x efficiency) when n is a "
        "multiple of 8 x 256 B)", default=256.0, bounds=(1.0, float(1 << 20)))
    composite_runahead_subtiles: int = spec(
        "sub-tiles", "[assumed] 2 (double buffering; ADR-0060 section 9.1 'the scheduler's per-tile streaming "
        "depth', a tuning item). A composite GEMM streams its tl.ref K / V operand DMA -> GEMM -> write-back "
        "per sub-tile: gemm_tile_n keys for Q.K^T (the N step of the scheduler's tile plan), gemm_tile_k keys "
        "for P.V (its K step); the last sub-tile holds the remaining keys. It owns this many operand buffers: "
        "sub-tile i's DMA starts once sub-tile i - depth's GEMM has ended (depth 1 = no overlap inside a "
        "composite)", static=True, default=2)
    ring_recv_depth: int = spec(
        "blocks", "[ADR-0060] 2: ping-pong K/V block buffers per CUBE of the prefill ring (section 5.5; depth vs "
        "ping-pong is section 9.4). The block a CUBE computes on at step t arrives into a buffer released "
        "when its step t - depth block finished both its compute and its forward send; depth 1 = no "
        "receive/compute overlap", static=True, default=2)
    mask_ops_per_partial_tile: int = spec(
        "ops", "[ADR-0060] 2: the kernel text's optional 'S_j = S_j + mask_j' on a tile the plan marks partial "
        "(jaxref.attention.sweep: it straddles the causal diagonal, or holds fewer valid keys than the tile): "
        "the mask built from positions and its add, each a score-sized MATH op (rows x the tile's real keys) "
        "and one primitive CPU issue, before the softmax's max; past tiles pay none", static=True, default=2)
    hbm_bytes_per_cube: float = spec(
        "B", "[assumed] 36 GB per CUBE: a CUBE's 64 pseudo-channels at 2048 GB/s are one HBM4 stack (JEDEC "
        "JESD270-4: 2048-bit, 32 channels x 2 pseudo-channels, 4-16-high stacks of 24 / 32 Gb dies = 12-64 GB); "
        "12-high of 24 Gb = 36 GB, the first HBM4 parts (the ADR gives bandwidth, not capacity). Split evenly "
        "over the CUBE's PEs (each PE's controller owns its pseudo-channels): a PE holds its KV buffers of every "
        "decoder layer it serves in hbm_bytes_per_cube / pes_per_cube; the sips SIPs hold the model's KV and "
        "weights in total", default=36e9, bounds=(float(1 << 20), 1e15))
    sips: int = spec("SIPs", "[ADR-0060] 4 SIPs for the full model (section B: H_kv = 8 kv heads at C = 8, two "
                     "CUBE Groups per 16-CUBE SIP): the budget one attention layer's CUBE Groups must fit in",
                     static=True, default=4)
    commands: tuple = spec("-", "[ADR-0060] commands the PE scheduler has: 'composite' (the existing "
                           "CompositeCmd) today; 'ex_composite' (section 5.6 opt2's softmax + P.V + flash "
                           "accumulator) does not exist yet, so opt2 is legal only where it is assumed built",
                           static=True, default=("composite",))
    mesh_x: int = spec("CUBEs", "[ADR-0060] SIP = 4x4 mesh of CUBEs", static=True, default=4)
    mesh_y: int = spec("CUBEs", "[ADR-0060] SIP = 4x4 mesh of CUBEs", static=True, default=4)
    pes_per_cube: int = spec("PEs", "[ADR-0060] P = 8 PEs per CUBE", static=True, default=8)
    pseudo_channels_per_pe: int = spec("pch", "[ADR-0060] 8 pseudo-channels per PE", static=True, default=8)
    ucie_ports_per_cube: int = spec("ports", "[ADR-0060] up to 4 UCIe ports (N/E/W/S)", static=True, default=4)
    gemm_tile_m: int = spec("elements", "[ADR-0060] composite GEMM TILE_M = 32", static=True, default=32)
    gemm_tile_k: int = spec("elements", "[ADR-0060] composite GEMM TILE_K = 64", static=True, default=64)
    gemm_tile_n: int = spec("elements", "[ADR-0060] composite GEMM TILE_N = 32", static=True, default=32)

    def __post_init__(self):
        # the static integers shape the traced graph and the simulation's loops: a bad one would give
        # negative times or an empty loop further down instead of an error here
        for f, lo in AHBM_STATIC_MINIMA.items():
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                raise ValueError(f"AHBM.{f}={v!r}: expected an int >= {lo}")
        if not isinstance(self.commands, tuple) or "composite" not in self.commands or \
                set(self.commands) - set(AHBM_COMMANDS):
            raise ValueError(f"AHBM.commands={self.commands!r}: expected a tuple of {AHBM_COMMANDS} holding "
                             "'composite'")

    @property
    def cubes(self) -> int:
        """CUBEs per SIP (16)."""
        return self.mesh_x * self.mesh_y

    @property
    def pes(self) -> int:
        """PEs per SIP (128)."""
        return self.cubes * self.pes_per_cube

    @property
    def hbm_cube_bytes_per_s(self):
        """Peak HBM per CUBE: PEs x pseudo-channels x 32 GB/s = 2048 GB/s."""
        return self.pes_per_cube * self.pseudo_channels_per_pe * self.pseudo_channel_bytes_per_s


# The smallest legal value of each static integer of ``AHBM`` (0 mask ops: no mask cost; every count
# of buffers, engines or mesh positions at least one) and the scheduler commands it may name.
AHBM_STATIC_MINIMA = {"composite_runahead_subtiles": 1, "ring_recv_depth": 1, "mask_ops_per_partial_tile": 0,
                      "sips": 1, "mesh_x": 1, "mesh_y": 1, "pes_per_cube": 1, "pseudo_channels_per_pe": 1,
                      "ucie_ports_per_cube": 1, "gemm_tile_m": 1, "gemm_tile_k": 1, "gemm_tile_n": 1}
AHBM_COMMANDS = ("composite", "ex_composite")


# The TCM a PE's visit holds besides ring blocks (the one TCM-fit rule: the model's constraint and the
# simulation's ring-block placement both read it). Per pipelining option: (Q.K^T composites, P.V
# composites) in flight, each owning composite_runahead_subtiles operand sub-tile buffers (gemm_tile_n
# keys for Q.K^T, gemm_tile_k for P.V), and fp32 score buffers (opt3 / opt2 keep S_j and S_{j+1}).
AHBM_TCM_BUFFERS = {"opt1": (1, 1, 1), "opt3": (2, 1, 2), "opt2": (2, 2, 2)}


def ahbm_tcm_bytes(hw: AHBM, rows, keys, d: int, pipeline: str):
    """TCM bytes of one visit's working set (``AHBM_TCM_BUFFERS``): bf16 Q rows, fp32 (m, l, O),
    the composites' operand buffers, the fp32 score buffers, bf16 P and the fp32 P.V output, for
    ``rows`` M-folded query rows and tiles of ``keys`` keys at head dim ``d`` (ints or arrays)."""
    check_choice("pipeline", pipeline, AHBM_TCM_BUFFERS)
    n_qk, n_pv, s_bufs = AHBM_TCM_BUFFERS[pipeline]
    bf16, fp32 = 2, 4
    operands = hw.composite_runahead_subtiles * (n_qk * hw.gemm_tile_n + n_pv * hw.gemm_tile_k) * d * bf16
    return (rows * d * bf16 + rows * (d + 2) * fp32 + operands + s_bufs * rows * keys * fp32
            + rows * keys * bf16 + rows * d * fp32)


def ahbm_sip() -> AHBM:
    """The ADR-0060 SIP: 4x4 CUBEs x 8 PEs. [ADR-0060] except the engine rates, which are [assumed]."""
    return AHBM(
        pseudo_channel_bytes_per_s=32e9,  # [ADR-0060] ADR-0003
        pe_controller_bytes_per_s=256e9,  # [ADR-0060]
        hbm_efficiency=0.8,  # [ADR-0060] default efficiency factor
        ucie_bytes_per_s=128e9,  # [ADR-0060]
        ucie_transaction_s=8e-9,  # [ADR-0060]
        dma_local_latency_s=77e-9,  # [ADR-0060] measured
        dma_remote_cube_latency_s=573e-9,  # [ADR-0060] measured, worst case
        dma_remote_sip_latency_s=409e-9,  # [ADR-0060] measured
        tcm_bytes_per_pe=float(1 << 20),  # [ADR-0060] 1 MiB scratch
        pe_clock_hz=1e9,  # [assumed]
        gemm_flops_per_cycle_per_pe=2.0 * 32 * 64 * 32 / 64,  # [assumed] 2048 FLOP/cycle
        math_elems_per_cycle_per_pe=64.0,  # [assumed]
    )


# ---- provenance --------------------------------------------------------------------------------------
def field_spec(cls, name: str) -> tuple[str, str]:
    """(unit, source) of field ``name`` of a spec class, read from the field's metadata."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata["unit"], f.metadata["source"]
    raise ValueError(f"field={name!r} unknown; expected a field of {cls.__name__}")


def field_bounds(cls, name: str) -> tuple[float, float] | None:
    """Closed physical range (lo, hi) of float field ``name``, or None: then finite and > 0."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get("bounds")
    raise ValueError(f"field={name!r} unknown; expected a field of {cls.__name__}")


# Name -> (unit, source) over both specs, derived from the field metadata (not a second table).
SOURCES: dict[str, tuple[str, str]] = {f.name: (f.metadata["unit"], f.metadata["source"])
                                       for cls in (Blackhole, AHBM) for f in dataclasses.fields(cls)
                                       if f.name != "name"}


def spec_table(hw) -> list[tuple[str, object, str, str]]:
    """(name, value, unit, source) for every field of a ``Blackhole`` or ``AHBM`` spec."""
    rows = []
    for f in dataclasses.fields(hw):
        if f.name == "name":
            continue
        value = getattr(hw, f.name)
        value = value if isinstance(value, (int, str, tuple)) else float(jnp.asarray(value))
        rows.append((f.name, value, f.metadata["unit"], f.metadata["source"]))
    return rows


def float_fields(hw) -> list[str]:
    """Names of the differentiable (float leaf) fields of a spec, in declaration order."""
    return [f.name for f in dataclasses.fields(hw) if not f.metadata.get("static", False)]
