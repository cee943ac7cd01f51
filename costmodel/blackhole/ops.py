"""The shared building blocks of the Blackhole op models (times in microseconds): each op kind's price
lives in its module (``costmodel.blackhole.kinds``; SDPA's formulas in ``sdpa``) and is built from these.

Every op is ``launch + body``. The launch (``launch_us``) is the op class's device-kernel fixed
time ([launch_matmul_us], [launch_norm_us], ...) plus the host/dispatch time a traced per-op table
includes: [dispatch_us] + [dispatch_core_us] per
core the program is sent to. A kernel-only measurement (a profiler report's DEVICE KERNEL DURATION)
is priced with ``kernel_only(fit)``, which drops the dispatch part.

The body combines what bounds the op: hard limits
(the core's own DRAM stream, its share of the chip's achievable bandwidth, all the op's bytes at
that bandwidth) by max, and pipeline stages that run concurrently (round trip, read, math,
handshake) by a q-norm. Work is split across cores the way the ttnn program factory splits it. Bytes are counted per
32x32 tile in the tensor's storage format (``hardware.tile_bytes``).

Shared building blocks (``FitParams`` names in brackets):
  * one core reading ``n`` tiles (``b`` bytes) while ``r`` cores read at once takes
    max(n / [core_read_tiles_per_s], b / noc_link, b * r / agg(b / n)): its own request rate (a
    DRAM read is one request per tile-sized page, so small bfp8 pages move fewer bytes per request
    than bf16 pages), its NoC link, or its fair share of the achievable aggregate bandwidth
    agg(page) = dram_peak * [dram_eff] / endpoint_slowdown(page): the DRAM endpoints take one
    request per ``hw.dram_request_cycles`` (tt-metal #55898), which costs small pages (bfp4 tiles)
    part of the byte rate;
  * a blocking read costs at least one [dram_latency_us] round trip;
  * stages that run concurrently (handshake, round trip, read, math) combine as a q-norm
    (``overlap``): between a sum (serial) and a max (perfect overlap), q = [overlap_exponent];
  * an elementwise pass over a tile costs [eltwise_cycles_per_tile] (an online-softmax step over a
    score tile is ``sdpa.SOFTMAX_PASSES`` of them), a 32x32x32 tile product 2*32^3 / FLOP-per-cycle x passes;
  * SFPU work is priced per tile from measured Blackhole SFPU throughputs ([BH-sfpu] in
    ``costmodel.hardware``, the SFPU_* constants of the kinds) or, where none is public, from the SFPI kernel's
    instruction count (one cycle per instruction per 32-lane iteration, 32 iterations a tile), said so.

Knobs that ttnn takes as integers (in0_block_w, per_core_N, k_chunk, q_chunk, cores per head) are
float leaves here so that the relaxed evaluator (``relax=Relax(...)``) can differentiate through
them; ``validate_*`` (for matmuls ``MatmulProgramConfig.validate``) rejects non-integer or
infeasible values before the exact evaluator runs.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp

from costmodel.blackhole.params import FitParams
from costmodel.hardware import TILE, Blackhole, fidelity_passes, tile_bytes
from costmodel.smooth import Relax, smax

# The padding mask tile: the writer kernel (BRISC) zeroes it with one volatile 16-bit store per element (its
# circular buffer is Float16_b), then fill_pad_tile stores -inf into the padded columns of every row: 32 x pad
# more 16-bit stores (writer_unary_interleaved_start_id_blocked_sm.cpp @ 06ed7702, lines 29-41; kernel_helper_
# functions/pad_tile.hpp @ 09b4c34b). Both are rolled loops of ``sh``, a pointer increment and a loop branch:
# data-movement kernels build at -O2 (DataMovementConfig's KernelBuildOptLevel::O2), which does not unroll them
# (the two loops rebuilt in C and compiled by Debian's riscv64-unknown-elf-gcc 12.2 -O2 -march=rv32im_zba_zbb
# -mabi=ilp32 give exactly that 3-instruction body; the SFPI toolchain itself was not run), and a baby RISC-V
# issues one instruction per cycle while the L1 store queue sustains one coalesced store per cycle (tenstorrent/
# tt-isa-documentation BlackholeA0/TensixTile/BabyRISCV/README.md @ 2c2c43b3), so the instructions bind; the
# fill's row loop (3 instructions and a mispredicted inner-loop exit per face row, ~0.1 us) is left out.
# The same loop body fills binary_ng's scalar tile (``scalar_tile_fill_us``).
RISC_STORE_LOOP_CYCLES = 3
SFPU_ROWS_PER_TILE = 32  # SFPU iterations of 32 lanes per 32x32 tile: 4 faces x 8 (ITERATIONS=8)


def us_of(seconds):
    return seconds * 1e6


def cycles_us(hw: Blackhole, cycles):
    return us_of(cycles / hw.clock_hz)


def endpoint_slowdown(hw: Blackhole, fit: FitParams, page_bytes):
    """Factor (>= 1) by which the DRAM endpoints' request rate slows a stream of ``page_bytes`` pages
    below its byte rate.

    Interleaved pages spread evenly over the banks, so each bank's endpoint serves its pages at
    [dram_eff] x peak / banks bytes per second, and accepts one request per
    ``hw.dram_request_cycles`` (one NoC per stream: ttnn's readers issue one ``noc_async_read`` per
    page from one RISC). The two limits are concurrent stages of one endpoint (``overlap``): a bf16
    tile (2 KB) loses ~2%, a bfp8 tile (1088 B) ~8%, a bfp4 tile (576 B) ~30%.
    """
    bank_bytes_per_s = hw.dram_peak_bytes_per_s * fit.dram_eff / hw.dram_banks
    request_per_byte_time = hw.dram_request_cycles / hw.clock_hz * bank_bytes_per_s / page_bytes
    return overlap(fit, 1.0, request_per_byte_time)


def agg_bytes_per_s(hw: Blackhole, fit: FitParams, page_bytes):
    """Achievable aggregate DRAM read bandwidth of an interleaved stream of ``page_bytes`` pages, B/s:
    [dram_eff] x peak, less the endpoints' request-rate loss (``endpoint_slowdown``)."""
    return hw.dram_peak_bytes_per_s * fit.dram_eff / endpoint_slowdown(hw, fit, page_bytes)


def dram_us(hw: Blackhole, fit: FitParams, tiles, nbytes):
    """``tiles`` pages (``nbytes`` bytes in all) at the achievable aggregate bandwidth of their page size, us."""
    return us_of(nbytes / agg_bytes_per_s(hw, fit, nbytes / tiles))


def launch_us(fit: FitParams, cores, kernel_fixed_us):
    """Fixed time of one op, us: its class's device-kernel fixed time ``kernel_fixed_us`` +
    [dispatch_us] + [dispatch_core_us] x ``cores`` (the cores the program is sent to). Zero dispatch
    terms (``kernel_only``) give the kernel-only time (DEVICE KERNEL DURATION)."""
    return kernel_fixed_us + fit.dispatch_us + fit.dispatch_core_us * cores


def kernel_only(fit: FitParams) -> FitParams:
    """``fit`` without the host/dispatch part of the launch: prices DEVICE KERNEL DURATION rows."""
    return dataclasses.replace(fit, dispatch_us=0.0, dispatch_core_us=0.0)


def l1_read_us(hw: Blackhole, fit: FitParams, tiles, nbytes, *, relax: Relax | None):
    """One core reading ``tiles`` pages (``nbytes`` bytes) of an L1-interleaved tensor (pages spread over
    the cores' L1 banks), us: its own page-request rate or its NoC link; no DRAM bank, endpoint or share."""
    return smax(us_of(tiles / fit.core_read_tiles_per_s), us_of(nbytes / hw.noc_link_bytes_per_s), relax=relax)


# The transaction size tt-metal's NoC estimator quotes its round trips at ([BH-noc-est] in costmodel.hardware,
# its smallest size): a larger transfer adds its bytes past these at one NoC link's rate.
NOC_EST_BYTES = 64


def noc_reads_cycles(hw: Blackhole, reads, nbytes):
    """One core issuing ``reads`` NoC reads of ``nbytes`` each from other cores' L1 back to back, then waiting
    for them (``noc_async_read_barrier``), cycles: one round trip [noc_l1_read_round_trip_cycles], its bytes
    past ``NOC_EST_BYTES`` at a link's rate, and each further read at its issue cost [noc_l1_read_issue_cycles]
    or its transfer, whichever is longer (the estimator's back-to-back 2 KB reads take 34.9 cycles each, as
    its 64 B ones do)."""
    link = hw.noc_bytes_per_cycle_per_link
    first = hw.noc_l1_read_round_trip_cycles + jnp.maximum(nbytes - NOC_EST_BYTES, 0) / link
    return first + (reads - 1) * jnp.maximum(hw.noc_l1_read_issue_cycles, nbytes / link)


def noc_write_wait_cycles(hw: Blackhole, nbytes):
    """One NoC write of ``nbytes`` and its barrier (the acknowledgement), cycles: the estimator's write round
    trip [noc_write_round_trip_cycles], issue included, and its bytes past ``NOC_EST_BYTES`` at a link's rate."""
    return hw.noc_write_round_trip_cycles + jnp.maximum(nbytes - NOC_EST_BYTES, 0) / hw.noc_bytes_per_cycle_per_link


def noc_mcast_cycles(hw: Blackhole, destinations, nbytes):
    """One multicast write of ``nbytes`` to ``destinations`` cores and its barrier (every destination's
    acknowledgement), cycles: [noc_mcast_cycles] at the estimator's 4 destinations, [noc_mcast_cycles_per_
    destination] for each further one (the line through its 4- and 110-destination entries, also below 4), its
    bytes past ``NOC_EST_BYTES`` at a link's rate."""
    return (hw.noc_mcast_cycles + hw.noc_mcast_cycles_per_destination * (destinations - 4)
            + jnp.maximum(nbytes - NOC_EST_BYTES, 0) / hw.noc_bytes_per_cycle_per_link)


def read_us(hw: Blackhole, fit: FitParams, tiles, nbytes, readers, *, others=(), relax: Relax | None):
    """One core reading ``tiles`` pages (``nbytes`` bytes) while ``readers`` cores read the same amount, us:
    its own page-request rate, its NoC link, or its share of the achievable aggregate bandwidth for
    pages of that size (``agg_bytes_per_s``).

    ``others``: further groups of cores reading at the same time, each ``(cores, tiles, nbytes)`` per
    core. The DRAM serves every open read its fair share, so a smaller read finishes early and hands its
    share on (max-min fairness): this core is done once it has had its ``nbytes`` and every other core
    min(its own bytes, ``nbytes``), each group's part at the bandwidth of its own page size. With no
    ``others`` this is ``readers`` x its own bytes."""
    share = readers * dram_us(hw, fit, tiles, nbytes)
    for cores, other_tiles, other_bytes in others:
        part = jnp.minimum(1.0, nbytes / other_bytes)  # of each other core's read, what it shares with this one
        share = share + cores * dram_us(hw, fit, other_tiles * part, other_bytes * part)
    # smax is a max (or a log-sum-exp, which is associative), so nesting l1_read_us is the 3-way smax
    return smax(l1_read_us(hw, fit, tiles, nbytes, relax=relax), share, relax=relax)


def barrier_read_us(hw: Blackhole, fit: FitParams, tiles, nbytes, readers, *, groups, in_l1: bool = False,
                    relax: Relax | None):
    """One core reading ``tiles`` pages (``nbytes`` bytes) in ``groups`` equal groups, each issued and
    then waited for (``noc_async_read_barrier``), while ``readers`` cores read the same amount, us:
    each group costs the overlap of a DRAM round trip and its read (``read_us``), so a reader that
    barriers every few pages is bound by the round trip, not by the bandwidth. ``in_l1``: pages of an
    L1-interleaved tensor, which no DRAM bank serves: each group is a NoC read round trip from another
    core's L1 and its further reads (``noc_reads_cycles``, the NoC estimator's L1 entries)."""
    if in_l1:
        return groups * cycles_us(hw, noc_reads_cycles(hw, tiles / groups, nbytes / tiles))
    read = read_us(hw, fit, tiles / groups, nbytes / groups, readers, relax=relax)
    return groups * overlap(fit, fit.dram_latency_us, read)


def overlap(fit: FitParams, *stage_us):
    """Time of pipeline stages that run concurrently on different engines, us.

    Double-buffered stages (a DRAM round trip, a read, the math, a handshake) overlap, but not
    perfectly: their time is the q-norm (sum t^q)^(1/q) with q = [overlap_exponent] (q = 1: fully
    serial, q -> inf: the max, i.e. perfect overlap). Smooth for q > 1, so this is the model
    itself, not a relaxation.
    """
    q = fit.overlap_exponent
    # normalise by the largest stage so t^q stays in range for any q
    m = jax.lax.stop_gradient(functools.reduce(jnp.maximum, [jnp.asarray(t) for t in stage_us]))
    m = jnp.maximum(m, 1e-30)  # all stages zero -> 0, not 0/0
    return m * sum((jnp.asarray(t) / m) ** q for t in stage_us) ** (1.0 / q)


def intermediate_pass_cycles(fit: FitParams, *, fp32_dest_acc: bool, fidelity_cycles=0.0):
    """Cycles of one elementwise pass over a tile of a compute kernel's intermediate circular buffer, which
    the factories keep in the Destination register's format: Float32 with ``fp32_dest_acc`` (twice the
    bytes of bf16 to unpack and pack, ``tile_bytes``), else Float16_b, on which [eltwise_cycles_per_tile]
    is fitted.

    ``fidelity_cycles``: the cycles per tile the pass's math runs past the unpacker at its fidelity
    (``fidelity_tile_cycles``), which lengthen it; Float32 lengthens it by its extra unpack and pack bytes.
    The two run on different threads (math; unpack and pack), so the pass takes the longer of the two
    extras, not their sum. Checked on the real reports' one-core RMSNorm rows: gemma-4's [32, 512] bf16
    HiFi4 and gpt-oss's [32, 2880] Float32 HiFi4 (tests/test_costmodel_norm_fidelity.py)."""
    base = fit.eltwise_cycles_per_tile
    fp32_extra = base * (tile_bytes("fp32") / tile_bytes("bf16") - 1.0) if fp32_dest_acc else 0.0
    return base + jnp.maximum(fp32_extra, fidelity_cycles)


# The FPU passes whose math runs fidelity phases, by their FPU op: (math-thread cycles per 32x32 tile at LoFi,
# at HiFi4, the unpacker's cycles per tile: the "Unpack bound"), tenstorrent/tt-metal
# tt_metal/tt-llk/docs/performance/blackhole_fpu_math_kernel_measurements.md @ 526c32d1 (Blackhole p300a,
# Float16_b -> Float16_b, dest_acc off, the math thread isolated): "eltwise mul | LoFi | 16.62", "| HiFi4 |
# 82.52", unpack bound 37.91; "reduce row · sum | LoFi | 12.08", "| HiFi4 | 49.07", 37.28. The doc solves its
# per-instruction costs from each LoFi / HiFi4 pair, the phase count being "the sole difference between the
# two builds" (llk_math_eltwise_binary.h issues 2 ELWMUL per face per phase), so each phase past the first
# adds a third of the difference; and "a math-side saving only shows up end to end where math was the
# limiter": a pass's math costs time only past the unpacker's. Element-wise add / sub, copies and max
# reductions run no fidelity phases (tech_reports/matrix_engine/matrix_engine.md): not listed.
FPU_MATH_CYCLES = {"mul": (16.62, 82.52, 37.91), "reduce_sum": (12.08, 49.07, 37.28)}
PHASELESS_FPU_OPS = ("add", "copy")  # element-wise add / sub and copies: no fidelity phases


def fidelity_tile_cycles(fpu_ops, fidelity: str) -> float:
    """Cycles per tile that the math of the FPU passes ``fpu_ops`` (one op name per pass: a key of
    ``FPU_MATH_CYCLES`` or of ``PHASELESS_FPU_OPS``) at ``fidelity`` runs past the unpacker, which the fitted
    pass already waits for (phaseless ops, and LoFi, HiFi2 math below the unpack bound, add nothing)."""
    further = fidelity_passes(fidelity) - 1  # phases past the first
    measured = fidelity_passes("HiFi4") - 1  # those of the measured HiFi4 build
    extra = 0.0
    for op in fpu_ops:
        if op in PHASELESS_FPU_OPS:
            continue
        if op not in FPU_MATH_CYCLES:
            raise ValueError(f"FPU op {op!r}: expected one of {sorted(FPU_MATH_CYCLES)} or {PHASELESS_FPU_OPS}")
        lofi, hifi4, unpack = FPU_MATH_CYCLES[op]
        extra += max(0.0, lofi + further * (hifi4 - lofi) / measured - unpack)
    return extra


def row_op_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, passes, n_in: int = 1, n_out: int = 1,
              act_dtype: str = "bf16", fp32_dest_acc: bool = False, launch_cores=None, sfpu_cycles_per_row=0.0,
              act_passes=0, fidelity_cycles_per_tile=0.0, start_us=None, relax: Relax | None = None):
    """A row-wise op (norms, softmax) over [rows, width] interleaved tensors, us: tile rows split
    over min(rows/32, grid) cores, each reading its rows of ``n_in`` inputs (at its rate or its share
    of the bandwidth) while running ``passes`` elementwise passes per tile, bounded by all
    ``n_in + n_out`` tensors at the aggregate DRAM bandwidth; one round trip to start; the launch of
    the norm class [launch_norm_us] sent to ``launch_cores`` (default: the cores with rows).

    ``fp32_dest_acc`` (the compute kernel config's ``fp32_dest_acc_en``): the factories keep the
    intermediate circular buffers in Float32 (layernorm_op_multi_core.cpp, softmax's factory), so
    every pass unpacks and packs tiles of twice the bytes of bf16 (``tile_bytes``): a pass costs
    their ratio times [eltwise_cycles_per_tile], which is fitted on bf16 intermediates.
    ``act_passes``: further passes per tile that stream only tiles of the activation format (no
    intermediate buffer), priced at that format's bytes, never below the fitted bf16 pass, whatever
    ``fp32_dest_acc``.

    ``fidelity_cycles_per_tile``: the cycles per tile the passes' math runs past the unpacker at their
    fidelity (``fidelity_tile_cycles``), spread over the intermediate passes (``intermediate_pass_cycles``:
    the longer of that and Float32's extra bytes).

    ``sfpu_cycles_per_row``: SFPU work per tile row (cycles) on the same compute thread as the passes
    (softmax: the exp of every tile and the reciprocal of the row sum).

    ``start_us``: a core-local step (us) that the compute waits for before its first tile row, run
    while the first read makes its round trip (softmax's padding mask, ``softmax_mask_us``): the start
    is the later of the two. None: the round trip alone. (With several tiles per row the compute
    could copy the row's first tiles before the mask lands; the whole step is charged up front.)
    """
    act = tile_bytes(act_dtype)
    tile_rows, wt = rows // TILE, width // TILE
    cores = min(tile_rows, hw.grid_cores)
    rows_per_core = math.ceil(tile_rows / cores)
    bf16 = tile_bytes("bf16")
    pass_cycles = intermediate_pass_cycles(fit, fp32_dest_acc=fp32_dest_acc,
                                           fidelity_cycles=fidelity_cycles_per_tile / jnp.maximum(passes, 1))
    act_pass_cycles = fit.eltwise_cycles_per_tile * max(act, bf16) / bf16
    t_read = read_us(hw, fit, rows_per_core * wt * n_in, rows_per_core * wt * n_in * act, cores, relax=relax)
    t_math = cycles_us(hw, rows_per_core * (wt * (passes * pass_cycles + act_passes * act_pass_cycles)
                                            + sfpu_cycles_per_row))
    t_agg = dram_us(hw, fit, tile_rows * wt * (n_in + n_out), tile_rows * wt * (n_in + n_out) * act)
    t_start = fit.dram_latency_us if start_us is None else smax(fit.dram_latency_us, start_us, relax=relax)
    return (launch_us(fit, cores if launch_cores is None else launch_cores, fit.launch_norm_us) + t_start
            + smax(overlap(fit, t_read, t_math), t_agg, relax=relax))


__all__ = [
    "FPU_MATH_CYCLES",
    "PHASELESS_FPU_OPS",
    "RISC_STORE_LOOP_CYCLES",
    "agg_bytes_per_s",
    "cycles_us",
    "dram_us",
    "endpoint_slowdown",
    "fidelity_tile_cycles",
    "intermediate_pass_cycles",
    "kernel_only",
    "l1_read_us",
    "launch_us",
    "noc_mcast_cycles",
    "noc_reads_cycles",
    "noc_write_wait_cycles",
    "overlap",
    "read_us",
    "row_op_us",
    "us_of",
]
