"""Roofline models of the ttnn ops of the expert layer on Blackhole (times in microseconds); SDPA in ``sdpa``.

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
    score tile is ``SOFTMAX_PASSES`` of them), a 32x32x32 tile product 2*32^3 / FLOP-per-cycle x passes;
  * SFPU work is priced per tile from measured Blackhole SFPU throughputs ([BH-sfpu] in
    ``costmodel.hardware``, the SFPU_* constants below) or, where none is public, from the SFPI kernel's
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
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from costmodel.blackhole.params import FitParams
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, sceil, smax

if TYPE_CHECKING:  # annotations only
    from costmodel.blackhole.program_config import MatmulProgramConfig

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
SILU_PASSES = 4  # fused SiLU epilogue on the output block: sigmoid (exp, add, reciprocal) and multiply
# online softmax per 32x32 score tile (ttnn SDPA compute kernel, per K chunk): add the mask, row
# max, subtract the max, exp, row sum; the running-max rescale of the output and of the sum is per
# output tile (q_chunk x head_dim), not per score tile, and is counted apart (SDPA_RESCALE_PASSES)
SOFTMAX_PASSES = 5
SOFTMAX_PASSES_NO_MASK = 4  # causal decode with cur_pos: no mask tile to add
SDPA_RESCALE_PASSES = 2  # per output tile per chunk: out * exp(m_old - m_new), + P.V
SDPA_COMBINE_PASSES = 3  # worker partial merge at the reducer: rescale own, rescale other, add
# The 1D matmul's in0 reader zeroes the columns past the logical K of the last K tile with a store loop on its
# data-movement RISC (``pad_last_ktile`` / ``fill_pad_face``, tenstorrent/tt-metal ttnn/cpp/ttnn/operations/
# matmul/device/kernels/dataflow/pad_tile.hpp @ 2c750e88): per 16-element face row, one 2-byte (bf16) or
# 4-byte (fp32) store per padded element. Counted from the loop as compiled at the data-movement flags
# (tt_metal/jit_build/build.cpp @ 00121434: -Os / -O2 with -fno-tree-loop-distribute-patterns, so no memset;
# checked with riscv GCC 12.2, rv32im): the inner loop is 3 instructions per store (sh, addi, bne), the face-
# row loop ~3 more. The baby RISC-V issues one instruction per cycle and a mispredicted branch (the inner
# loop's exit, once per face row) is a 4-cycle bubble (tenstorrent/tt-isa-documentation BlackholeA0/
# TensixTile/BabyRISCV/README.md @ 2c2c43b3); its store queue (one store a cycle into whole 16-byte blocks, one
# coalesced partial block per 5 cycles) keeps up with a store every 3 cycles, so it does not bind.
PAD_LOOP_CYCLES_PER_ELEMENT = RISC_STORE_LOOP_CYCLES  # the same sh / addi / bne store loop as the fills above
PAD_LOOP_CYCLES_PER_FACE_ROW = 3 + 4  # face-row loop instructions + the inner loop's exit mispredict
FACE = 16  # a 32x32 tile is 2x2 faces of 16x16


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


def barrier_read_us(hw: Blackhole, fit: FitParams, tiles, nbytes, readers, *, groups, relax: Relax | None):
    """One core reading ``tiles`` pages (``nbytes`` bytes) in ``groups`` equal groups, each issued and
    then waited for (``noc_async_read_barrier``), while ``readers`` cores read the same amount, us:
    each group costs the overlap of a DRAM round trip and its read (``read_us``), so a reader that
    barriers every few pages is bound by the round trip, not by the bandwidth."""
    t_group = overlap(fit, fit.dram_latency_us, read_us(hw, fit, tiles / groups, nbytes / groups, readers, relax=relax))
    return groups * t_group


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


# ---- matmul (1D multicast; config type and legality: program_config) ------------------------------
def ktile_pad_us(hw: Blackhole, *, last_ktile_w: int, act_dtype: str) -> float:
    """Time for the in0 reader's RISC to zero the padded columns of one ragged last K tile, us.

    ``last_ktile_w``: logical K mod 32 (ttnn's ``in0_last_ktile_w``; 0: K is tile-aligned, nothing to zero).
    Each 16-wide face column of the tile that holds padding loses ``pad`` of its columns in all 32 of its
    rows (2 faces x 16): columns past ``last_ktile_w``, counted per face as ``fill_pad_tile`` does. Priced
    at ``PAD_LOOP_CYCLES_PER_ELEMENT`` per zeroed element and ``PAD_LOOP_CYCLES_PER_FACE_ROW`` per face row
    (constants' comment). Only bf16 / fp32 tiles are zeroed (``pad_last_ktile`` handles Float16_b and
    Float32); block-float in0 (bfp8 / bfp4) is priced 0, as the kernel read here leaves it.
    """
    if not 0 <= last_ktile_w < TILE:
        raise ValueError(f"last_ktile_w={last_ktile_w} must be in [0, {TILE})")
    if last_ktile_w == 0 or act_dtype.startswith("bfp"):  # block-float in0 is not zeroed
        return 0.0
    cycles = 0
    for first_col in (0, FACE):  # the tile's two face columns
        pad = FACE - min(max(last_ktile_w - first_col, 0), FACE)  # its columns past the logical K
        if pad:
            cycles += TILE * (pad * PAD_LOOP_CYCLES_PER_ELEMENT + PAD_LOOP_CYCLES_PER_FACE_ROW)
    return cycles_us(hw, cycles)


def in0_block_us(hw: Blackhole, fit: FitParams, *, rows, tiles, nbytes, readers, in0_l1: bool, in0_sharded: bool,
                 others=(), relax: Relax | None):
    """Time for the core that supplies one in0 (activation) block of a 1D / 2D multicast matmul to
    have it in its circular buffer, us: ``tiles`` pages (``nbytes`` bytes) in ``rows`` tile rows,
    while ``readers`` cores read blocks of the same size. By where in0 lives:

      * DRAM-interleaved: a read at the core's rate or its share of the bandwidth (``read_us``, with the
        ``others`` that read at the same time);
      * L1-interleaved (``in0_l1``): pages over the NoC (``l1_read_us``);
      * L1-sharded (``in0_sharded``): the block is in the supplying core's own shard, nothing crosses
        the NoC or touches DRAM. One tile row is used in place (the circular buffer's read pointer
        walks the shard); a block of several tile rows narrower than the shard is first copied row by
        row into the circular buffer with local ``noc_async_read``s and a barrier (``extract_shard_sub_blocks``
        of tenstorrent/tt-metal ttnn/cpp/ttnn/operations/matmul/device/kernels/dataflow/
        reader_bmm_tile_layout_in0_sender_padding.cpp @ 9a1eac16 and
        reader_bmm_tile_layout_in0_sender_receiver_padding_block_sharded.cpp @ 07fd76c5), priced as an
        L1 read of the block. The report does not carry the input's shard width, so a block of several
        rows is taken to be narrower than its shard (the copy is paid; when the block is the whole shard
        width the kernel skips it, one local L1 read per block less).
    """
    if in0_l1 and in0_sharded:
        raise ValueError("in0_l1=True and in0_sharded=True: in0 is either L1-interleaved or L1-sharded; expected at "
                         "most one of them")
    if in0_sharded:  # where, not if: rows may be a traced knob (per_core_M) under the relaxed evaluator
        return jnp.where(jnp.asarray(rows) > 1, l1_read_us(hw, fit, tiles, nbytes, relax=relax), 0.0)
    if in0_l1:
        return l1_read_us(hw, fit, tiles, nbytes, relax=relax)
    return read_us(hw, fit, tiles, nbytes, readers, others=others, relax=relax)


def matmul_us(hw: Blackhole, fit: FitParams, cfg: MatmulProgramConfig, *, M: int, K: int, N: int,
              weight_dtype: str, act_dtype: str = "bf16", fidelity: str = "HiFi2",
              fused_activation: bool = False, in0_l1: bool = False, in0_sharded: bool = False,
              out_l1: bool = False, batch: int = 1, in0_last_ktile_w: int = 0, relax: Relax | None = None):
    """Time of ``linear([M,K] act, [K,N] weights)`` with a 1D multicast program config, us.

    ``cfg.kind`` 'mcast_1d_in0' (``mcast_in0=True``): N is split over ceil(N/32/per_core_N) cores,
    each reading its own in1 (weight) block of in0_block_w x per_core_N tiles per K block, while
    one sender core reads the in0 block of all M rows (per_core_M x in0_block_w activation tiles)
    and multicasts it to them. 'mcast_1d_in1' is the mirror: M split over ceil(M/32/per_core_M)
    cores reading their own in0 blocks, one sender reads and multicasts the in1 block of all N
    columns. Each of the K/32/in0_block_w blocks costs the q-norm overlap of the multicast
    handshake, a DRAM round trip (the reader barriers once per block: the bytes one core has in
    flight are one block, so narrow blocks pay the round trip more often), the own-block read at
    the core's request rate or its share of the bandwidth, the sender's stream (its read at its own
    rate, then the multicast over one NoC link: serial on its one data-movement RISC), and the tile
    products. The whole op is also bounded by all its bytes at the achievable aggregate bandwidth
    of their page sizes (``dram_us``), so DRAM-bound ops land at bytes / achieved bandwidth + overhead.

    ``in0_l1`` / ``out_l1``: the activation input / the output is L1-interleaved (ttnn
    ``L1_MEMORY_CONFIG``): in0 pages are read over the NoC at the reader's page rate and link
    (``l1_read_us``), and those bytes leave the DRAM bound; the weights always stream from DRAM.

    ``in0_sharded``: the activation is L1-sharded (``mcast_1d_in0``: width-sharded, K split over the
    cores; ``mcast_1d_in1``: height-sharded, each core holding its own M rows), as the factory
    (matmul_multicore_reuse_mcast_1d_program_factory.cpp @ 00629f0f) reads it: nothing of in0 is read
    from DRAM (its bytes leave the DRAM bound) and a block costs what ``in0_block_us`` says. With
    ``mcast_1d_in0`` the sender of K block b is the core whose shard holds it, so the senders take
    turns, but each block still pays the same handshake (receivers increment the sender's semaphore,
    it multicasts the block and the flag: reader_bmm_tile_layout_in0_sender_receiver_padding_block_sharded.cpp
    @ 07fd76c5) and the multicast over one NoC link; with ``mcast_1d_in1`` the core's own in0 block
    is in its shard and is not multicast, the in1 block is (as interleaved).

    ``batch``: a batched matmul ([batch, M, K] x [batch or 1, K, N], ``fuse_batch=False``): the
    program keeps the per-batch core split and its readers loop over the batches, each running the
    whole K loop again (reader_bmm_tile_layout_in0_sender_padding.cpp, ``for b < batch``), so the
    blocks, the epilogue and every byte (a broadcast in1 or in0 is read again per batch) scale by it.

    Per batch, each data-movement RISC runs its loop in program order (matmul_multicore_reuse_mcast_1d_
    program_factory.cpp @ 00629f0f; the same kernels, CBs and defines in the 2025 file matmul_op_multi_core_
    reuse_mcast_1d_program_factory.cpp @ 00a631ee; kernels reader_bmm_tile_layout_in0_sender_padding.cpp
    @ 00878522, reader_bmm_tile_layout_in0_receiver.cpp @ 0acb044a, reader_bmm_tile_layout_in1_sender_writer_
    padding.cpp @ 09519069), so a batch also lasts at least as long as either chain:

      * the in0 reader (RISCV_1): per K block its read and read barrier, then (in0 multicast) the
        multicast; on each batch's last K block with a ragged K (``in0_last_ktile_w`` = logical K mod 32,
        interleaved in0) it barriers per tile row and zeroes the padded columns of the row's last tile
        (``ktile_pad_us``) before it can multicast: the 2-core scores@V of CLIP (K = 19) pays it every batch;
      * the in1 reader + output writer (RISCV_0, one loop): per K block its in1 read and barrier (then its
        multicast, in1 kind), and after the batch's last block the output block, which waits for that
        block's tile products and is written with a write barrier (one DRAM round trip) before the next
        batch's first in1 read: the output CB holds one block ("No double buffer"), so batches do not
        overlap on this RISC. The last batch's drain is the op's tail, left in [launch_matmul_us] as for
        an unbatched row (whose price this leaves as it was: the fitted rows are bound by the K loop).

    A multicast group of one core (the in1 kind with all M on one core, or the in0 kind with all N on one)
    runs with ``SKIP_MCAST``: no semaphores, no multicast, so neither [mm_block_sync_us] nor the link
    transfer is paid (the in0 kind's L1-sharded reader does not take the define and keeps both).
    """
    if cfg.mcast_in0 is None:
        raise ValueError(f"matmul_us prices the 1D kinds (mcast_1d_in0 / mcast_1d_in1); got kind={cfg.kind!r}")
    Mt, Kt, Nt = M // TILE, K // TILE, N // TILE
    act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
    if cfg.mcast_in0:  # own: in1 block per core; multicast: in0 block
        cores = sceil(Nt / cfg.per_core_N, relax=relax)
        own_tiles, own_b, sent_tiles, sent_b = cfg.in0_block_w * cfg.per_core_N, w, cfg.per_core_M * cfg.in0_block_w, act
    else:  # own: in0 block per core; multicast: in1 block
        cores = sceil(Mt / cfg.per_core_M, relax=relax)
        own_tiles, own_b, sent_tiles, sent_b = cfg.per_core_M * cfg.in0_block_w, act, cfg.in0_block_w * cfg.per_core_N, w
    k_blocks = Kt / cfg.in0_block_w  # K blocks per batch
    # SKIP_MCAST: a group of one core neither handshakes nor multicasts (the factory's in0_mcast_receiver_num_cores
    # / in1_mcast_receiver_num_cores == 1); where, not if: cores is traced under the relaxed evaluator
    mcast = 1.0 if cfg.mcast_in0 and in0_sharded else jnp.where(jnp.asarray(cores) > 1, 1.0, 0.0)

    def read(tiles, nbytes, readers, is_in0):
        if is_in0:
            return in0_block_us(hw, fit, rows=cfg.per_core_M, tiles=tiles, nbytes=nbytes, readers=readers,
                                in0_l1=in0_l1, in0_sharded=in0_sharded, relax=relax)
        return read_us(hw, fit, tiles, nbytes, readers, relax=relax)

    def blocking_read(tiles, nbytes, readers, is_in0, groups=1.0):
        """A reader's block read up to its barrier(s): a DRAM round trip per group; in0 from L1 or its shard
        has no DRAM round trip (``in0_block_us``)."""
        if is_in0 and (in0_l1 or in0_sharded):
            return read(tiles, nbytes, readers, is_in0)
        return barrier_read_us(hw, fit, tiles, nbytes, readers, groups=groups, relax=relax)

    sent_link = mcast * us_of(sent_tiles * sent_b / hw.noc_link_bytes_per_s)
    t_own = read(own_tiles, own_tiles * own_b, cores, not cfg.mcast_in0)
    # the sender's read is one core's stream (its own rate), not a fair share: the aggregate bound below
    # counts its bytes with everyone else's
    t_send = read(sent_tiles, sent_tiles * sent_b, 1.0, cfg.mcast_in0) + sent_link
    t_math = cycles_us(hw, cfg.per_core_M * cfg.in0_block_w * cfg.per_core_N * hw.tile_matmul_cycles(fidelity))
    t_block = overlap(fit, mcast * fit.mm_block_sync_us, fit.dram_latency_us, t_own, t_send, t_math)

    # the per-batch chains of the two data-movement RISCs (docstring)
    in0_tiles, in0_readers = (sent_tiles, 1.0) if cfg.mcast_in0 else (own_tiles, cores)
    in0_link = sent_link if cfg.mcast_in0 else 0.0
    t_in0 = blocking_read(in0_tiles, in0_tiles * act, in0_readers, True) + in0_link
    ragged = in0_last_ktile_w > 0 and not in0_sharded
    t_in0_last = (blocking_read(in0_tiles, in0_tiles * act, in0_readers, True, groups=cfg.per_core_M) + in0_link
                  + cfg.per_core_M * ktile_pad_us(hw, last_ktile_w=in0_last_ktile_w, act_dtype=act_dtype)
                  if ragged else t_in0)
    in0_chain = (k_blocks - 1) * t_in0 + t_in0_last
    in1_tiles, in1_readers = (own_tiles, cores) if cfg.mcast_in0 else (sent_tiles, 1.0)
    t_in1 = blocking_read(in1_tiles, in1_tiles * w, in1_readers, False) + (0.0 if cfg.mcast_in0 else sent_link)
    out_link = us_of(cfg.per_core_M * cfg.per_core_N * act / hw.noc_link_bytes_per_s)
    t_write = out_link if out_l1 else overlap(fit, fit.dram_latency_us, out_link)
    # the writer's drain (the last block's products, the output write) delays the next batch's reads; the
    # last batch's drain is the op's tail, which [launch_matmul_us] carries as for every unbatched row
    t_batch = smax(k_blocks * t_block, in0_chain, k_blocks * t_in1 + t_math + t_write, relax=relax)
    t_last = smax(k_blocks * t_block, in0_chain, k_blocks * t_in1, relax=relax)
    t_pipe = (batch - 1) * t_batch + t_last + fit.dram_latency_us  # + pipeline fill
    act_tiles = (0 if in0_l1 or in0_sharded else Mt * Kt) + (0 if out_l1 else Mt * Nt)
    t_agg = batch * (dram_us(hw, fit, Kt * Nt, Kt * Nt * w)
                     + (dram_us(hw, fit, act_tiles, act_tiles * act) if act_tiles else 0.0))
    t_act = (batch * cycles_us(hw, cfg.per_core_M * cfg.per_core_N * SILU_PASSES * fit.eltwise_cycles_per_tile)
             if fused_activation else 0.0)
    return launch_us(fit, cores, fit.launch_matmul_us) + smax(t_pipe, t_agg, relax=relax) + t_act


# ---- matmul (2D multicast) ------------------------------------------------------------------------
def mcast_2d_block_us(hw: Blackhole, fit: FitParams, *, m_tiles, k_tiles, n_tiles, senders, act_dtype: str,
                      weight_dtype: str, fidelity: str, in0_l1: bool = False, in0_sharded: bool = False,
                      forward_us=(0.0, 0.0), sender_split=None, math_us=None, relax: Relax | None = None):
    """One K block of a 2D-multicast matmul core, us: the row's sender reads the in0 block
    (``m_tiles`` x ``k_tiles``), the column's sender the in1 block (``k_tiles`` x ``n_tiles``), all
    ``senders`` at once, and forward them along the row / column; the block costs the q-norm overlap
    of the handshake, a DRAM round trip, the slower of the two block reads and the tile products.
    ``in0_l1`` / ``in0_sharded``: the in0 block comes from L1-interleaved pages or the row sender's own
    L1 shard (``in0_block_us``). ``forward_us`` (in0, in1): time of the write that passes each block on
    after it lands, serial with its read on the same RISC (``minimal_matmul``'s chain of unicasts).
    ``sender_split`` (in0 senders, in1 senders): the senders of each input read that input's block, and
    the DRAM shares out their different amounts (``read_us``'s ``others``); None: all ``senders`` are
    priced as reading the block of the input priced. ``math_us``: the compute thread's time per block
    when it is not the ``m_tiles`` x ``k_tiles`` x ``n_tiles`` tile products (None).
    The one block cost of ``matmul_2d_us`` and ``minimal_matmul.minimal_matmul_us``."""
    act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
    in0_tiles, in1_tiles = m_tiles * k_tiles, k_tiles * n_tiles
    if sender_split is None:
        in0_readers, in1_readers, in0_others, in1_others = senders, senders, (), ()
    else:
        in0_readers, in1_readers = sender_split
        in0_others = ((in1_readers, in1_tiles, in1_tiles * w),)
        in1_others = ((in0_readers, in0_tiles, in0_tiles * act),)
    t_in0 = in0_block_us(hw, fit, rows=m_tiles, tiles=in0_tiles, nbytes=in0_tiles * act, readers=in0_readers,
                         in0_l1=in0_l1, in0_sharded=in0_sharded, others=in0_others, relax=relax) + forward_us[0]
    t_in1 = read_us(hw, fit, in1_tiles, in1_tiles * w, in1_readers, others=in1_others, relax=relax) + forward_us[1]
    t_math = (cycles_us(hw, m_tiles * k_tiles * n_tiles * hw.tile_matmul_cycles(fidelity)) if math_us is None
              else math_us)
    return overlap(fit, fit.mm_block_sync_us, fit.dram_latency_us, smax(t_in0, t_in1, relax=relax), t_math)


def matmul_2d_us(hw: Blackhole, fit: FitParams, *, M: int, K: int, N: int, in0_block_w, per_core_M, per_core_N,
                 weight_dtype: str, act_dtype: str = "bf16", fidelity: str = "HiFi2", in0_l1: bool = False,
                 in0_sharded: bool = False, out_l1: bool = False, batch: int = 1, relax: Relax | None = None):
    """``linear([M,K], [K,N])`` with ``MatmulMultiCoreReuseMultiCastProgramConfig`` (2D multicast), us.

    The output is split into per_core_M x per_core_N tile blocks, one per core of a
    ceil(M/32/per_core_M) x ceil(N/32/per_core_N) grid. Per K block (in0_block_w tiles) the first
    core of each grid row reads the row's in0 block (per_core_M x in0_block_w tiles) and multicasts it
    along the row, the first core of each column reads the column's in1 block and multicasts it down;
    all senders read at once (``mcast_2d_block_us``); then the output block is written. Built only
    from the shared blocks and parameters of the 1D model (no parameter of its own): what it misses
    (subblock packing, in0 re-reads) shows up as its validation error.

    ``in0_l1`` / ``out_l1``: activation / output L1-interleaved (as in ``matmul_us``: their pages
    move over the NoC, ``l1_read_us``, and leave the DRAM bound). ``in0_sharded``: the activation is
    L1 block-sharded over the grid, as the factory reads it (matmul_multicore_reuse_mcast_2d_program_factory.cpp):
    each grid row's K blocks are multicast along the row by the core whose shard holds them (the
    block-sharded in0 reader of ``matmul_us``), so no in0 byte is read from DRAM (``in0_block_us``).
    ``batch``: the readers loop the K blocks once per batch (as in ``matmul_us``).
    """
    Mt, Kt, Nt = M // TILE, K // TILE, N // TILE
    act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
    rows_used = sceil(Mt / per_core_M, relax=relax)
    cols_used = sceil(Nt / per_core_N, relax=relax)
    senders = rows_used + cols_used
    blocks = batch * Kt / in0_block_w
    t_block = mcast_2d_block_us(hw, fit, m_tiles=per_core_M, k_tiles=in0_block_w, n_tiles=per_core_N,
                                senders=senders, act_dtype=act_dtype, weight_dtype=weight_dtype, fidelity=fidelity,
                                in0_l1=in0_l1, in0_sharded=in0_sharded, relax=relax)
    cores = rows_used * cols_used
    out_tiles = per_core_M * per_core_N
    t_out = batch * (l1_read_us(hw, fit, out_tiles, out_tiles * act, relax=relax) if out_l1
                     else read_us(hw, fit, out_tiles, out_tiles * act, cores, relax=relax))
    act_tiles = (0 if in0_l1 or in0_sharded else Mt * Kt) + (0 if out_l1 else Mt * Nt)
    t_agg = batch * (dram_us(hw, fit, Kt * Nt, Kt * Nt * w)
                     + (dram_us(hw, fit, act_tiles, act_tiles * act) if act_tiles else 0.0))
    t_pipe = blocks * t_block + fit.dram_latency_us + t_out
    return launch_us(fit, cores, fit.launch_matmul_us) + smax(t_pipe, t_agg, relax=relax)


# ---- matmul (DRAM-sharded) ------------------------------------------------------------------------
def dram_sharded_workers(hw: Blackhole, cfg: MatmulProgramConfig) -> int:
    """Worker cores of a DRAM-sharded matmul: ``num_workers_per_dram_bank`` bank-adjacent readers per
    DRAM bank (``get_optimal_dram_bank_to_reader_assignment``), not the program config's core count."""
    return hw.dram_banks * cfg.num_workers_per_dram_bank


def matmul_dram_sharded_us(hw: Blackhole, fit: FitParams, cfg: MatmulProgramConfig, *, M: int, K: int, N: int,
                           weight_dtype: str, act_dtype: str = "bf16", fidelity: str = "HiFi2",
                           relax: Relax | None = None):
    """``linear([M,K], [K,N])`` with ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig``, us.

    The factory (matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp) width-shards the
    weight over the DRAM banks and gives each bank ``num_workers_per_dram_bank`` bank-adjacent
    workers (W = banks x workers in all); each computes per_core_N_compute = ceil(N/32 / W) output
    tiles (the config's ``per_core_N`` only sets the output's storage shard). Per K block
    (in0_block_w tiles) a worker reads its in1 block (in0_block_w x per_core_N_compute tiles) from its
    own bank, with 3 blocks outstanding (reader_bmm_tile_layout_in1_sender_dram_sharded.cpp: one
    transaction id each, so the round trip is paid once, not per block), at the bank's peak
    (``dram_peak / banks``, shared by the bank's workers: no interleaved NoC crossing, so [dram_eff]
    of an interleaved stream does not apply; multi-tile pages, so no per-tile request cost); the
    activation block (per_core_M x in0_block_w tiles) comes from the in0 core whose L1 shard holds
    it, multicast over one NoC link; and the tile products run on the worker. Successive blocks come
    from different in0 cores, so their handshakes overlap: one [mm_block_sync_us] fill, not one per
    block. A block costs the q-norm overlap of its three stages. Shapes: M, K, N in elements (tile multiples); output L1-sharded (no DRAM write).
    """
    if cfg.kind != "dram_sharded":
        raise ValueError(f"matmul_dram_sharded_us prices kind='dram_sharded'; got kind={cfg.kind!r}")
    Mt, Kt, Nt = M // TILE, K // TILE, N // TILE
    act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
    workers = dram_sharded_workers(hw, cfg)
    pcn = math.ceil(Nt / workers)  # per_core_N_compute
    blocks = Kt / cfg.in0_block_w
    bank_bytes_per_s = hw.dram_peak_bytes_per_s / hw.dram_banks / cfg.num_workers_per_dram_bank
    in1_block_bytes = cfg.in0_block_w * pcn * w
    t_in1 = us_of(in1_block_bytes / bank_bytes_per_s)
    t_in0 = us_of(Mt * cfg.in0_block_w * act / hw.noc_link_bytes_per_s)
    t_math = cycles_us(hw, Mt * cfg.in0_block_w * pcn * hw.tile_matmul_cycles(fidelity))
    t_block = overlap(fit, t_in1, t_in0, t_math)
    t_fill = fit.dram_latency_us + fit.mm_block_sync_us
    return launch_us(fit, workers, fit.launch_matmul_us) + t_fill + blocks * t_block


def matmul_weight_bytes(*, K: int, N: int, weight_dtype: str) -> int:
    """DRAM bytes of a [K, N] weight in tiles of ``weight_dtype``."""
    return (K // TILE) * (N // TILE) * tile_bytes(weight_dtype)


def intermediate_pass_cycles(fit: FitParams, *, fp32_dest_acc: bool):
    """Cycles of one elementwise pass over a tile of a compute kernel's intermediate circular buffer, which
    the factories keep in the Destination register's format: Float32 with ``fp32_dest_acc`` (twice the
    bytes of bf16 to unpack and pack, ``tile_bytes``), else Float16_b, on which [eltwise_cycles_per_tile]
    is fitted."""
    return fit.eltwise_cycles_per_tile * (tile_bytes("fp32") / tile_bytes("bf16") if fp32_dest_acc else 1.0)


def row_op_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, passes, n_in: int = 1, n_out: int = 1,
              act_dtype: str = "bf16", fp32_dest_acc: bool = False, launch_cores=None, sfpu_cycles_per_row=0.0,
              act_passes=0, start_us=None, relax: Relax | None = None):
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
    pass_cycles = intermediate_pass_cycles(fit, fp32_dest_acc=fp32_dest_acc)
    act_pass_cycles = fit.eltwise_cycles_per_tile * max(act, bf16) / bf16
    t_read = read_us(hw, fit, rows_per_core * wt * n_in, rows_per_core * wt * n_in * act, cores, relax=relax)
    t_math = cycles_us(hw, rows_per_core * (wt * (passes * pass_cycles + act_passes * act_pass_cycles)
                                            + sfpu_cycles_per_row))
    t_agg = dram_us(hw, fit, tile_rows * wt * (n_in + n_out), tile_rows * wt * (n_in + n_out) * act)
    t_start = fit.dram_latency_us if start_us is None else smax(fit.dram_latency_us, start_us, relax=relax)
    return (launch_us(fit, cores if launch_cores is None else launch_cores, fit.launch_norm_us) + t_start
            + smax(overlap(fit, t_read, t_math), t_agg, relax=relax))


__all__ = [
    "RISC_STORE_LOOP_CYCLES",
    "agg_bytes_per_s",
    "cycles_us",
    "dram_us",
    "endpoint_slowdown",
    "in0_block_us",
    "intermediate_pass_cycles",
    "kernel_only",
    "ktile_pad_us",
    "l1_read_us",
    "launch_us",
    "matmul_2d_us",
    "matmul_us",
    "matmul_weight_bytes",
    "mcast_2d_block_us",
    "overlap",
    "read_us",
    "row_op_us",
    "us_of",
]
