"""``ttnn.linear`` / ``ttnn.matmul`` with a MatmulMultiCoreReuse* program config: the spec, its price
(by the config's kind, ``matmul_us`` / ``matmul_2d_us`` / ``matmul_dram_sharded_us``), its core
split, its op codes and its op-report row (read and written). A config-less row gets ttnn's own
choice (``matmul_auto_config``)."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from costmodel.blackhole.kinds.eltwise import SFPU_SILU_BF16_CYCLES
from costmodel.blackhole.matmul_auto_config import auto_config
from costmodel.blackhole.ops import (
    RISC_STORE_LOOP_CYCLES,
    SFPU_ROWS_PER_TILE,
    barrier_read_us,
    cycles_us,
    dram_us,
    l1_read_us,
    launch_us,
    overlap,
    read_us,
    us_of,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.program_config import (
    DEST_TILES,
    DRAM_SHARDED,
    IN0_SHARD_LAYOUT,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
    ttnn_subblock,
)
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    batches,
    compute_kernel,
    finite,
    l1_resident,
    matmul_program_config,
    no_sharding,
    tensor,
)
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, sceil, smax
from jaxref.vocabulary import ActivationFormat, WeightFormat

# ---- its price -------------------------------------------------------------------------------------
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


# ttnn's approximate GELU (UnaryOpType::GELU, param={1}) on the SFPU, per output tile: the Blackhole wrapper runs
# _calculate_gelu_ in approximation mode (tt-metal tt_metal/hw/ckernels/blackhole/metal/llk_api/llk_sfpu/
# ckernel_sfpu_gelu.h @ 01105485), whose loop body per 32-lane row is SFPLOAD, the multiply by 0.5, one
# SFPLUTFP32 piecewise-linear lookup with the sign kept (lut2_sign), the add and SFPSTORE (tt-llk
# tt_llk_blackhole/common/inc/sfpu/ckernel_sfpu_gelu.h @ 002d1510): 5 instructions, one cycle each, 32 rows
# a tile. A source-derived count, no Blackhole measurement found; the accurate GELU (a degree-15 polynomial) is
# not priced.
GELU_APPROX_SFPU_CYCLES = 5 * SFPU_ROWS_PER_TILE


def activation_tile_cycles(activation: str) -> float:
    """Compute cycles per output tile of a matmul's fused ``activation``: the compute kernel
    (bmm_large_block_zm_fused_bias_activation.cpp, every matmul kind here) runs it on each output tile in
    Dest after the last K block, before the pack. 'silu': silu_tile on a bfloat16 Dest, the cost the unary
    and binary SFPU paths use (``eltwise.SFPU_SILU_BF16_CYCLES``, from a Blackhole measurement of the
    sigmoid); 'gelu': ttnn's approximate GELU, ``GELU_APPROX_SFPU_CYCLES``. On a Float32 Dest
    (fp32_dest_acc_en, as the port's matmuls run) no SFPU cost is sourced: priced at the bfloat16 Dest's
    (the port's notes put its w1's SiLU at 2.9 us, 4 output tiles a core, against 3.8 priced)."""
    if activation == "silu":
        return SFPU_SILU_BF16_CYCLES
    if activation == "gelu":
        return GELU_APPROX_SFPU_CYCLES
    raise ValueError(f"fused activation {activation!r}: the matmul prices 'silu' and 'gelu' (approximate)")


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
              fused_activation: bool | str = False, in0_l1: bool = False, in0_sharded: bool = False,
              out_l1: bool = False, batch: int = 1, in0_last_ktile_w: int = 0, relax: Relax | None = None):
    """Time of ``linear([M,K] act, [K,N] weights)`` with a 1D multicast program config, us.

    ``fused_activation``: the epilogue on each output tile, 'silu' (or True: the port's w1) / 'gelu'
    (``activation_tile_cycles``), False / None for none.

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
    activation = "silu" if fused_activation is True else fused_activation
    t_act = (batch * cycles_us(hw, cfg.per_core_M * cfg.per_core_N * activation_tile_cycles(activation))
             if activation else 0.0)
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


def dram_sharded_read_n(hw: Blackhole, cfg: MatmulProgramConfig, *, N: int) -> int:
    """Weight tiles a DRAM-sharded worker reads per K row (the factory's per_core_N_in1_sender): ceil(N
    tiles / workers)."""
    return math.ceil(N // TILE / dram_sharded_workers(hw, cfg))


def dram_sharded_compute_n(hw: Blackhole, cfg: MatmulProgramConfig, *, N: int) -> int:
    """Output tiles per worker the DRAM-sharded compute kernel runs (``per_core_N_compute``): the tiles it
    reads per K row (``dram_sharded_read_n``), padded where ttnn's subblock for it is one tile high and narrower than the
    destination registers allow, to the subblock width that needs the fewest subblocks
    (matmul_op_multi_core_reuse_mcast_dram_sharded_program_factory.cpp @ 01840686: "it is bad for
    compute, pad per_core_N_compute"; 36 tiles run as 5 subblocks of 8, 40 tiles). With bf16
    destination accumulation (8 tiles; the DRAM-sharded rows of every report here run with
    fp32_dest_acc_en=0, and the reader refuses the others)."""
    pcn = dram_sharded_read_n(hw, cfg, N=N)
    h, w = ttnn_subblock(cfg.per_core_M, pcn, fp32_dest_acc=False)
    max_w = DEST_TILES[False]
    if h != 1 or w >= max_w:
        return pcn
    n_sub, best_w = pcn // w, w
    for new_w in range(w + 1, max_w + 1):
        if math.ceil(pcn / new_w) < n_sub:
            n_sub, best_w = math.ceil(pcn / new_w), new_w
    return best_w * n_sub


def matmul_dram_sharded_us(hw: Blackhole, fit: FitParams, cfg: MatmulProgramConfig, *, M: int, K: int, N: int,
                           weight_dtype: str, act_dtype: str = "bf16", fidelity: str = "HiFi2",
                           fused_activation: str | None = None, relax: Relax | None = None):
    """``linear([M,K], [K,N])`` with ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig``, us.

    The factory (matmul_multicore_reuse_mcast_dram_sharded_program_factory.cpp @ 01840686) width-shards
    the weight over the DRAM banks and gives each bank ``num_workers_per_dram_bank`` bank-adjacent
    workers (W = banks x workers in all); each reads ``dram_sharded_read_n`` = ceil(N/32 / W) weight
    tiles per K row and computes ``dram_sharded_compute_n`` output tiles (the config's ``per_core_N`` only sets the
    output's storage shard). Per K block (in0_block_w tiles) a worker reads its in1 block from its own
    bank, the next blocks in flight while one lands (reader_bmm_tile_layout_in1_sender_dram_sharded.cpp
    @ b7c30ff0: one transaction id per block, a three-block buffer), at the bank's peak
    (``dram_peak / banks``, shared by the bank's workers: no interleaved NoC crossing, so [dram_eff] of
    an interleaved stream does not apply; multi-tile pages, so no per-tile request cost). That stream
    runs on its own RISC beside the block's chain: the worker's in0 handshake (its semaphore
    increment reaching the block's sender and the sender's multicast and VALID flag coming back, one
    NoC write round trip: reader_bmm_tile_layout_in0_sender_dram_sharded.cpp @ 09bff5d7, every worker
    in lock step), the activation block (per_core_M x in0_block_w tiles over one NoC link) and the
    block's tile products, one after the other. The chain is taken as serial from the public sweep
    (tenstorrent/tt-metal tests/ttnn/unit_tests/benchmarks/test_dram_sharded_decode_matmul.py run2.log,
    ``public_ops.json``): at K = N = 2048 halving the weight bytes (bf16 -> bfp8) saves 6% of the
    time and the blocks take ~0.6 us where the weight stream alone needs 0.27-0.51 us, so the blocks
    are not stream-bound; at 4096 they are (bf16 1.99 us per block for 2.05 us of stream). Why the
    handshake of block b+1 does not hide behind block b's products, although the in0 buffer holds two
    blocks, is not read from the kernels here. A block costs the larger of the stream and the chain;
    the first block also waits for its weights' DRAM round trip and one [mm_block_sync_us] fill.
    Shapes: M, K, N in elements (tile multiples); output L1-sharded (no DRAM write).

    ``fused_activation`` ('silu', or 'gelu' as ttnn's approximate GELU; None for none): the same compute kernel
    as the 1D kinds (bmm_large_block_zm_fused_bias_activation.cpp, the rows' COMPUTE KERNEL SOURCE) runs it
    on each of the worker's output tiles after the last K block (``activation_tile_cycles``), padded tiles
    included. Checked on a pair of Qwen3.6-27B decode rows, the same gate / up projection
    (32 x 5120 x 17408, bfp4, LoFi: 68 weight tiles a worker, computed as 72) with and without a fused SiLU
    (tests/data/profiler_more/bh_qwen3_6_27b_advisor_winner_full_attention_decode.csv lines 171 and 172:
    225.2 and 159.9 us, 1225 cycles per computed tile more, against the 1279 of ``eltwise.SFPU_SILU_BF16_CYCLES``).

    Not priced: the compute packs its partials every block (L1 accumulation, a read-modify-write).
    """
    if cfg.kind != "dram_sharded":
        raise ValueError(f"matmul_dram_sharded_us prices kind='dram_sharded'; got kind={cfg.kind!r}")
    Mt, Kt = M // TILE, K // TILE
    act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
    workers = dram_sharded_workers(hw, cfg)
    pcn = dram_sharded_read_n(hw, cfg, N=N)
    blocks = Kt / cfg.in0_block_w
    bank_bytes_per_s = hw.dram_peak_bytes_per_s / hw.dram_banks / cfg.num_workers_per_dram_bank
    t_in1 = us_of(cfg.in0_block_w * pcn * w / bank_bytes_per_s)
    t_handshake = cycles_us(hw, hw.noc_write_round_trip_cycles)
    t_in0 = us_of(Mt * cfg.in0_block_w * act / hw.noc_link_bytes_per_s)
    t_math = cycles_us(hw, Mt * cfg.in0_block_w * dram_sharded_compute_n(hw, cfg, N=N)
                       * hw.tile_matmul_cycles(fidelity))
    t_block = smax(t_in1, t_handshake + t_in0 + t_math, relax=relax)
    t_fill = fit.dram_latency_us + fit.mm_block_sync_us
    t_act = (cycles_us(hw, Mt * dram_sharded_compute_n(hw, cfg, N=N) * activation_tile_cycles(fused_activation))
             if fused_activation else 0.0)
    return launch_us(fit, workers, fit.launch_matmul_us) + t_fill + blocks * t_block + t_act


def matmul_weight_bytes(*, K: int, N: int, weight_dtype: str) -> int:
    """DRAM bytes of a [K, N] weight in tiles of ``weight_dtype``."""
    return (K // TILE) * (N // TILE) * tile_bytes(weight_dtype)


@dataclasses.dataclass(frozen=True)
class MatmulSpec:
    """``ttnn.linear([M,K] act, [K,N] weights)`` with a matmul program config, priced by ``cfg.kind``:
    ``mcast_1d_in0`` / ``mcast_1d_in1`` by ``matmul_us``, ``mcast_2d`` by ``matmul_2d_us``,
    ``dram_sharded`` by ``matmul_dram_sharded_us``.
    ``in0_l1`` / ``out_l1``: activation input / output L1-interleaved (1D and 2D kinds; DRAM-interleaved
    otherwise). ``in0_sharded``: the activation is L1-sharded the way the kind reads it
    (``IN0_SHARD_LAYOUT``: width-sharded for 1D in0-multicast, height-sharded for 1D in1-multicast,
    block-sharded for 2D; exclusive with ``in0_l1``). ``batch``: batches of a batched matmul ([batch, M, K] x [batch or 1, K, N] with the
    per-batch split, ``fuse_batch=False``; 1D and 2D kinds): each batch runs the whole K loop.
    ``in0_last_ktile_w``: logical K mod 32 of the activation (ttnn's ``in0_last_ktile_w``; 0: K tile-aligned),
    whose last K tile the 1D kinds' interleaved in0 reader zeroes past the logical K (``ktile_pad_us``).
    ``fused_activation``: the config's fused activation (``cfg.fused_activation``: 'silu', or 'gelu' as
    ttnn's approximate GELU) runs on each output tile (1D and DRAM-sharded kinds; True with no config
    activation: SiLU)."""

    M: int
    K: int
    N: int
    cfg: MatmulProgramConfig
    weight_dtype: str
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    fused_activation: bool = False
    in0_l1: bool = False
    out_l1: bool = False
    batch: int = 1
    in0_sharded: bool = False
    in0_last_ktile_w: int = 0
    op_class = "matmul"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        c = self.cfg
        if not (isinstance(self.batch, int) and self.batch >= 1):
            raise ValueError(f"batch={self.batch!r} must be an integer >= 1")
        if self.in0_sharded and self.in0_l1:
            raise ValueError("in0_sharded=True and in0_l1=True: the activation is either L1-sharded or "
                             "L1-interleaved; expected at most one")
        if self.in0_last_ktile_w and (c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1) or self.in0_sharded):
            raise ValueError(f"in0_last_ktile_w={self.in0_last_ktile_w}: the ragged-K padding is modelled for the 1D "
                             f"kinds' interleaved in0 reader; got kind={c.kind!r}, in0_sharded={self.in0_sharded}")
        if c.kind == MCAST_2D:
            if self.fused_activation:
                raise ValueError("the mcast_2d matmul models no fused activation; got fused_activation=True")
            return matmul_2d_us(hw, fit, M=self.M, K=self.K, N=self.N, in0_block_w=c.in0_block_w,
                                per_core_M=c.per_core_M, per_core_N=c.per_core_N, weight_dtype=self.weight_dtype,
                                act_dtype=self.act_dtype, fidelity=self.fidelity, in0_l1=self.in0_l1,
                                in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch, relax=relax)
        if c.kind == DRAM_SHARDED:
            if self.batch != 1:
                raise ValueError(f"the dram_sharded matmul models one batch; got batch={self.batch}")
            if self.in0_l1 or self.out_l1 or self.in0_sharded:
                raise ValueError(f"the dram_sharded matmul takes its activation and output L1-sharded by "
                                 f"construction (not flagged); got in0_l1={self.in0_l1}, "
                                 f"in0_sharded={self.in0_sharded}, out_l1={self.out_l1}")
            return matmul_dram_sharded_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                                          act_dtype=self.act_dtype, fidelity=self.fidelity,
                                          fused_activation=(c.fused_activation or "silu") if self.fused_activation
                                          else None, relax=relax)
        if c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1):
            raise ValueError(f"matmul program config kind={c.kind!r} is not modelled; the cost model prices "
                             f"{[MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, DRAM_SHARDED]}")
        return matmul_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                         act_dtype=self.act_dtype, fidelity=self.fidelity,
                         fused_activation=(c.fused_activation or True) if self.fused_activation else False,
                         in0_l1=self.in0_l1, in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch,
                         in0_last_ktile_w=self.in0_last_ktile_w, relax=relax)


KIND_NAMES = {"mcast_1d_in0": "1D in0-multicast", "mcast_1d_in1": "1D in1-multicast",
              "mcast_2d": "2D multicast", "dram_sharded": "DRAM-sharded"}


def read(ln: ReportLine, hw: Blackhole, cls: str = "matmul") -> MatmulSpec:
    """A matmul row as a ``MatmulSpec``; ``Skip`` with the reason for a form the model does not price."""
    pc = ln.attr("program_config") or "std::nullopt"
    x, w = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    ba, bb = batches(ln)
    name = pc.split("(")[0].strip()
    if name != "std::nullopt" and not name.startswith("MatmulMultiCoreReuse"):
        raise Skip(f"program-config kind not modelled: {name}")
    act, wdt = ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", WeightFormat)
    # transpose_a / transpose_b (ttnn.matmul's flags): the operand is stored [K, M] / [N, K]. With transpose_b the
    # in1 reader reads the same tiles, one page each, at strided page ids (in1_tensor_stride_w = K tiles), and the
    # unpacker transposes each tile as the matmul unpacks it (IN1_TRANSPOSE_TILE: matmul_block's transpose flag,
    # no pass of its own): the same price as the weight stored [K, N] (tt-metal matmul_multicore_reuse_mcast_1d_
    # program_factory.cpp @ 00629f0f, utilities/matmul_utilities.cpp @ 001cea9a, compute
    # bmm_large_block_zm_fused_bias_activation.cpp @ 01647ce5). transpose_a runs transpose_tile_block into a
    # buffer of its own first, a pass the model does not price.
    ta, tb = ((ln.attr(f"transpose_{o}") or "false") == "true" for o in "ab")
    (M, K), (Kw, N) = (x[3:1:-1] if ta else x[2:]), (w[3:1:-1] if tb else w[2:])
    if Kw != K:
        raise ln.fail(ln.dim_col("INPUT_1", "X" if tb else "Y"),
                      f"K={Kw} of the weights{' (transpose_b)' if tb else ''} != K={K} of the activations"
                      f"{' (transpose_a)' if ta else ''}")
    if ta:
        raise Skip("matmul with transpose_a=true (its activation tiles transposed in a pass of their own first, "
                   "not modelled)")
    if name == "std::nullopt":
        memories = [ln.memory(p) for p in ("INPUT_0", "INPUT_1", "OUTPUT_0")]
        grid = (hw.grid_x, hw.grid_y)
        cfg = auto_config(M=M, K=K, N=N, batch_a=ba, batch_b=bb, grid=grid,
                          all_interleaved=all("INTERLEAVED" in m for m in memories),
                          all_dram=all("DRAM" in m for m in memories), fp32_dest_acc=ln.fp32_dest_acc())
        if cfg is None:
            raise Skip("no program config, and ttnn's own choice for this shape (an L1-size estimate to a 2D "
                        "or non-multicast config) is not modelled")
        pc = matmul_program_config(cfg)  # the report form, read back below as a given config would be
        if finite(ln.get("CORE COUNT")) not in (None, float(cfg.num_cores(M=M, N=N))):
            raise Skip(f"no program config; CORE COUNT differs from the {cfg.num_cores(M=M, N=N)} cores of ttnn's "
                        f"choice as modelled ({KIND_NAMES[cfg.kind]})")
    ln.config_grid(pc, hw)  # a grid larger than the chip is an error, whatever the kind
    for key in ("in0_block_w", "per_core_M", "per_core_N"):
        ln.config_int(pc, key)
    try:
        cfg = MatmulProgramConfig.parse(pc)
    except ValueError as e:
        if "is not a matmul config this project models" in str(e):
            raise Skip(f"program-config kind not modelled: {name}") from None
        raise ln.fail("ATTRIBUTES", str(e)) from None
    if tb and cfg.kind not in (MCAST_1D_IN0, MCAST_1D_IN1):
        raise Skip(f"transpose_b on a {KIND_NAMES[cfg.kind]} matmul (the model reads the 1D program's transposed "
                   "in1 only)")
    batch = max(ba, bb)
    if batch > 1 and cfg.kind == DRAM_SHARDED:
        raise Skip("batched operands on a DRAM-sharded matmul")
    if batch > 1 and cfg.fuse_batch:
        if bb > 1:
            raise Skip("fuse_batch with batched weights (ttnn folds the batch into M only for unbatched weights)")
        M, batch = M * ba, 1  # the batch folded into M: one matmul of ba*M rows
    if cfg.kind == DRAM_SHARDED:  # activation and output L1-sharded, weights DRAM width-sharded, by construction
        if ln.fp32_dest_acc():
            raise Skip("DRAM-sharded matmul with fp32_dest_acc_en=1 (its compute width is padded for bf16 "
                       "destination accumulation only: dram_sharded_compute_n)")
        if "SHARDED" not in ln.memory("INPUT_1") or "DRAM" not in ln.memory("INPUT_1"):
            raise Skip(f"DRAM-sharded config with weights in {ln.memory('INPUT_1').removeprefix('DEV_0_')} "
                        "(expected DRAM width-sharded)")
    else:
        no_sharding(ln, "INPUT_1", "OUTPUT_0")
    in0_sharded = cfg.kind != DRAM_SHARDED and in0_sharded_read(ln, cfg, M=M, N=N)
    if l1_resident(ln, "INPUT_1") and cfg.kind != DRAM_SHARDED:
        raise Skip(f"weights in L1 ({ln.memory('INPUT_1').removeprefix('DEV_0_')}); the model streams the "
                    "weights from DRAM")
    if cfg.fused_activation not in (None, "silu", "gelu"):
        raise Skip(f"fused activation not modelled ({cfg.fused_activation})")
    if cfg.fused_activation == "gelu" and "UnaryOpType::GELU;param={1}" not in ln.attrs:
        raise Skip("fused GELU without the approximation flag (param={1}): the accurate GELU's SFPU cost is not "
                   "sourced")
    if cfg.kind == MCAST_2D and cfg.fused_activation is not None:
        raise Skip(f"fused activation on a {KIND_NAMES[cfg.kind]} matmul not modelled ({cfg.fused_activation})")
    try:
        cfg.validate("matmul", hw, M=M, K=K, N=N, weight_dtype=wdt, act_dtype=act, fp32_dest_acc=ln.fp32_dest_acc())
    except ValueError as e:
        raise Skip(f"program config outside the model's {KIND_NAMES[cfg.kind]} form ({e})") from None
    interleaved_l1 = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D)  # the L1 flags of the 1D and 2D models
    # the 1D factory's in0_last_ktile_w (logical K mod 32), zeroed by the interleaved in0 reader (ktile_pad_us);
    # a transposed in0 pads rows instead (in0_last_ktile_h), not modelled
    ragged_1d = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1) and not in0_sharded and ln.attr("transpose_a") != "true"
    return MatmulSpec(M, K, N, cfg, wdt, act, ln.fidelity(), cfg.fused_activation is not None,
                      in0_l1=interleaved_l1 and not in0_sharded and l1_resident(ln, "INPUT_0"),
                      out_l1=interleaved_l1 and l1_resident(ln, "OUTPUT_0"), batch=int(batch), in0_sharded=in0_sharded,
                      in0_last_ktile_w=ln.logical("INPUT_0")[3] % TILE if ragged_1d else 0)


def in0_sharded_read(ln: ReportLine, cfg: MatmulProgramConfig, *, M: int, N: int) -> bool:
    """Whether a 1D / 2D multicast matmul row's in0 is L1-sharded the way its kind reads it
    (``IN0_SHARD_LAYOUT``); skips in0 sharded otherwise (in DRAM, or another layout than the kind's),
    and a 1D in0-multicast row whose CORE COUNT exceeds its output cores: the factory then runs
    in0 senders on cores without output work (num_cores = max(output cores, shard cores):
    matmul_multicore_reuse_mcast_1d_program_factory.cpp @ 00629f0f), which the model does not price."""
    memory = ln.memory("INPUT_0")
    if "SHARDED" not in memory:
        return False
    layout = IN0_SHARD_LAYOUT[cfg.kind]
    if memory.removeprefix("DEV_0_") != f"L1_{layout}":
        raise Skip(f"sharded operand (INPUT_0 {memory.removeprefix('DEV_0_')}); the model reads an L1 {layout} in0 "
                    f"with a {KIND_NAMES[cfg.kind]} config and streams other operands interleaved")
    cores = finite(ln.get("CORE COUNT"))
    if cfg.kind == MCAST_1D_IN0 and cores is not None and cores > cfg.num_cores(M=M, N=N):
        raise Skip(f"in0 sharded over more cores ({cores:g} in CORE COUNT) than hold output blocks "
                    f"({cfg.num_cores(M=M, N=N)}): sender-only cores not modelled")
    return True


OP_CLASSES = {"matmul": ("MatmulDeviceOperation", "Matmul")}  # first: written; ttnn renames ops between versions
SPECS = (MatmulSpec,)


def cores(spec: MatmulSpec, hw: Blackhole) -> int:
    """The split ``MatmulSpec.us`` prices: the config's output-block cores, or a DRAM-sharded config's workers."""
    if spec.cfg.kind == DRAM_SHARDED:
        return dram_sharded_workers(hw, spec.cfg)
    return spec.cfg.num_cores(M=spec.M, N=spec.N)


def record(spec: MatmulSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    c, fid = spec.cfg, spec.fidelity
    if spec.fused_activation != (c.fused_activation is not None):
        raise ValueError(f"fused_activation={spec.fused_activation} but the program config's is "
                         f"{c.fused_activation!r}; a report carries one (the config's)")
    if spec.batch > 1 and c.fuse_batch:
        raise ValueError(f"batch={spec.batch} with fuse_batch=True: a fused batch is one matmul of batch*M rows "
                         "(write it with batch=1)")
    b = int(spec.batch)
    attrs = {"program_config": matmul_program_config(c),
             "compute_kernel_config": compute_kernel(fid), "output_dtype": "DataType::BFLOAT16",
             "bcast_batch": "true" if b == 1 else "false", "transpose_a": "false", "transpose_b": "false",
             "user_run_batched": "false", "untilize_out": "false"}
    l1, dram, weights = "DEV_0_L1_INTERLEAVED", "DEV_0_DRAM_INTERLEAVED", "DEV_0_DRAM_INTERLEAVED"
    in0 = f"DEV_0_L1_{IN0_SHARD_LAYOUT[c.kind]}" if spec.in0_sharded else l1 if spec.in0_l1 else dram
    out = l1 if spec.out_l1 else dram
    if c.kind == DRAM_SHARDED:  # activation and output L1 width-sharded, weights DRAM width-sharded: the form's own
        in0, out, weights = "DEV_0_L1_WIDTH_SHARDED", "DEV_0_L1_WIDTH_SHARDED", "DEV_0_DRAM_WIDTH_SHARDED"
    in0_desc = tensor((1, b, spec.M, spec.K), spec.act_dtype, memory=in0)
    if spec.in0_last_ktile_w:  # the logical K whose last tile is ragged
        in0_desc = dataclasses.replace(in0_desc, logical=(1, b, spec.M, spec.K - TILE + spec.in0_last_ktile_w))
    return (OP_CLASSES["matmul"][0], attrs, [in0_desc, tensor((1, b, spec.K, spec.N), spec.weight_dtype, memory=weights)],
            [tensor((1, b, spec.M, spec.N), spec.act_dtype, memory=out)], fid)
