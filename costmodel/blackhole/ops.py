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

# Elementwise passes per tile, counted from the op's compute kernel.
# The interleaved norm kernel (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/layernorm/device/kernels/
# compute/layernorm.cpp @ 9438a76b, the use_welford=0 path), per tile of a row; each pass is named by the circular
# buffers it streams per tile: "inter" when it unpacks or packs a tile of the factory's intermediate format (cb_x of
# a fused residual, cb_xmm, cb_xmm2, cb_fusion: Float32 with fp32_dest_acc_en, layernorm_op_multi_core.cpp
# @ 015365c6), "act" when it streams only tiles of the activation format. The per-row rsqrt is one tile, ignored.
NORM_TILE_PASSES = (
    "inter",  # x^2: mul_tiles(cb_in, cb_in), packed to cb_xmm2
    "inter",  # the row reduce of cb_xmm2 (reduce_tile; one pack per row)
    "inter",  # x * rstd: mul_tiles_bcast_cols, packed to cb_fusion
    "inter",  # * gamma: mul_tiles_bcast_rows of cb_fusion, packed to cb_out
)
NORM_RESIDUAL_TILE_PASS = "inter"  # x = a + b: add_tiles(cb_in, cb_inb), packed to cb_x
# The large-tensor RMSNorm kernel (layernorm_large_tensor.cpp @ 9438a76b, unchanged in structure @ 00d78d63, the
# RMSNORM path), per tile of a row; it streams x from DRAM twice (the variance, then the output) and packs more:
NORM_LARGE_TENSOR_TILE_PASSES = (
    "inter",  # copy_tile(cb_in) + square_tile (SFPU, ``SFPU_SQUARE_CYCLES``), packed to cb_xmm2
    "inter",  # the row reduce of cb_xmm2 (reduce_tile into one Dest tile per block)
    "inter",  # copy_tile(cb_in), packed to cb_xmm ("We shouldn't have to pack to intermediate CB ... tt-llk #868")
    "inter",  # x * rstd: mul_tiles(cb_xmm, cb_ex2pe) (cb_ex2pe broadcast to a full tile per row), to cb_fusion
    "inter",  # * gamma: mul_tiles_bcast_rows(cb_fusion, cb_gamma), packed to cb_out
)
# its LayerNorm path: E[x] (row_wise_mean of cb_in), then x - E[x] (sub_tiles_bcast_cols) in place of each
# copy_tile above, + beta (add_tiles_bcast_rows of cb_fusion) after gamma: the 7 passes of the small kernel, one
# more SFPU square per tile
LAYERNORM_LARGE_TENSOR_TILE_PASSES = ("act",) + NORM_LARGE_TENSOR_TILE_PASSES + ("inter",)
LAYERNORM_TILE_PASSES = (
    "act",  # E[x]: the row reduce of x straight from cb_in (bf16), one pack per row (cb_x, "inter", with a residual)
    "inter",  # x - E[x]: sub_tiles_bcast_cols, packed to cb_xmm
    "inter",  # (x - E[x])^2: mul_tiles(cb_xmm, cb_xmm), packed to cb_xmm2
    "inter",  # Var[x]: the row reduce of cb_xmm2
    "inter",  # * rstd: mul_tiles_bcast_cols of cb_xmm, packed to cb_fusion
    "inter",  # * gamma: mul_tiles_bcast_rows of cb_fusion, packed to cb_fusion
    "inter",  # + beta: add_tiles_bcast_rows of cb_fusion, packed to cb_out
)
# standalone numerically stable softmax (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/softmax/
# device/kernels/attention/compute/softmax.cpp @ 0063e996): per tile the matrix-unit / FPU passes row max
# (reduce MAX), x - max (sub_tiles_bcast_cols), row sum (reduce SUM) and x * 1/sum (mul bcast cols); the exp
# of each tile and the reciprocal of each row's sum run on the SFPU (SFPU_EXP / SFPU_RECIP costs, ``softmax_us``)
SOFTMAX_ROW_PASSES = 4
# a row whose logical width stops short of its tile-padded width (mask_padded_data): every tile is first copied
# into cb_x (copy_tile; the row's last tile instead add_tiles_bcast_rows with the -inf padding mask), which the
# numerically stable passes then read (softmax.cpp @ 0063e996, kernel_main's ``if (mask_padded_data)`` branch)
SOFTMAX_PADDED_COPY_PASSES = 1
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
# 32-bit stores that fill binary_ng's scalar operand tile: fill_with_val_bfloat16 packs two bf16 values per
# store (512), fill_with_val<1024, float> stores one Float32 value each (binary_ng/device/kernels/dataflow/
# fill_tile_utils.hpp @ 04f0123e, called once by writer_interleaved_scalar.cpp @ 00635679 before any output)
SCALAR_FILL_STORES = {"fp32": 1024}
SCALAR_FILL_STORES_PACKED = 512
# SFPU cost with a bfloat16 Dest (fp32_dest_acc_en=0) relative to the Float32 Dest costs of the hardware spec
# (Blackhole.sfpu_exp_cycles_per_tile / sfpu_recip_cycles_per_tile), from the same measurements [BH-sfpu]:
# the accurate bfloat16 exp (exp_21f) 672 cycles/tile (tenstorrent/tt-metal pull request #29495) vs 2548 for
# Float32 (#33563); the reciprocal 3 vs 5 cycles per 32 lanes (tenstorrent/tt-llk pull request #834)
SFPU_EXP_BF16_RATIO = 672.0 / 2548.0
SFPU_RECIP_BF16_RATIO = 3.0 / 5.0
# binary_ng's SFPU path (``is_sfpu``: eltwise_binary_sfpu_no_bcast.cpp / eltwise_binary_sfpu_scalar.cpp,
# tenstorrent/tt-metal ttnn/cpp/ttnn/operations/eltwise/binary_ng/device/kernels/compute/ @ 00174421): per output
# tile, copy_tile of each operand into Dest, the SFPU binary op on the two Dest tiles, the post activations in
# place, one pack. A lhs / rhs activation is a pass of its own first (eltwise_utils_sfpu.hpp PREPROCESS:
# copy_tile, the activation, pack into c_3 / c_4) whose pack the main loop's copy_tile of that operand waits for.
# A bfloat16 output runs a bfloat16 Dest (binary_ng_program_factory.cpp @ 00635679: fp32_dest_acc_en only for a
# Float32 / Int32 / UInt32 output), so the bfloat16-Dest SFPU costs below apply.
SFPU_COPY_PASSES = 2  # copy_tile of lhs and rhs (a scalar operand's one tile is copied again for every tile)
SFPU_ACTIVATION_PASSES = 2  # a lhs / rhs activation: its own copy_tile, and the pack the main loop waits on
SFPU_ROWS_PER_TILE = 32  # SFPU iterations of 32 lanes per 32x32 tile: 4 faces x 8 (ITERATIONS=8)
# accurate sigmoid (sigmoid_tile, param={}: 1 / (1 + exp_21f(-x)), one Newton step of the reciprocal, RNE to
# bfloat16; tt_metal/hw/ckernels/blackhole/metal/llk_api/llk_sfpu/ckernel_sfpu_sigmoid.h @ 00b0fa3f) on a
# bfloat16 Dest: 1247.21 cycles per tile measured on Blackhole with the tt-llk perf harness (Float16_b,
# tenstorrent/tt-metal pull request #49926, 2026-07-15, "Sigmoid (exact)")
SFPU_SIGMOID_BF16_CYCLES = 1247.21
# SiLU (silu_tile: calculate_silu, ckernel_sfpu_silu.h @ 015056e6, its sfpi loop: x * _sfpu_sigmoid_(x), RNE to
# bfloat16) is the sigmoid loop and one more SFPU multiply per row: a source-derived count (no Blackhole
# measurement found), each SFPU instruction one cycle per 32-lane iteration. (That stored version also carries an
# experimental hand-pipelined bfloat16 body, SILU_BF16_IMPL 1-3, ~20 issue slots a row; not priced: the held-out
# Muse Glimmer SiLU rows run at the sigmoid loop's cost, 2351 cycles a tile against 2182 priced here.)
SFPU_SILU_BF16_CYCLES = SFPU_SIGMOID_BF16_CYCLES + 1 * SFPU_ROWS_PER_TILE
# the bfloat16 SFPU multiply (mul_binary_tile: calculate_sfpu_binary_mul<is_fp32_dest_acc_en=false>,
# tt_metal/hw/ckernels/blackhole/metal/llk_api/llk_sfpu/ckernel_sfpu_binary.h @ 0085d978), per row: 2 SFPLOAD,
# SFPMUL, the software round-to-nearest-even with the zero guard (SFPLOADI 0x7fff; v_if(in0 != 0 && in1 != 0):
# push + 2 SFPSETCC; bits >> 16 as SFPMOV + SFPSHFT; & 1 as SFPLOADI + SFPAND; 2 SFPIADD; v_endif pop;
# & 0xFFFF0000 as SFPLOADI + SFPAND), SFPSTORE, the Dest increment: 18 instructions. A source-derived count
# (no Blackhole measurement of the binary SFPU multiply found), one cycle per instruction per 32-lane iteration.
SFPU_MUL_BF16_CYCLES = 18 * SFPU_ROWS_PER_TILE
# square_tile (calculate_square, tt_llk_blackhole/common/inc/sfpu/ckernel_sfpu_square.h as stored in the search
# index): per 32-lane row SFPLOAD, SFPMUL, SFPNOP, SFPSTORE and the Dest increment, 5 instructions, one cycle each
# (the convention of ``SFPU_MUL_BF16_CYCLES``), on the math thread between the copy and the pack
SFPU_SQUARE_CYCLES = 5 * SFPU_ROWS_PER_TILE
SFPU_BINARY_BF16_CYCLES = {"mul": SFPU_MUL_BF16_CYCLES}
SFPU_ACTIVATION_BF16_CYCLES = {"sigmoid": SFPU_SIGMOID_BF16_CYCLES, "silu": SFPU_SILU_BF16_CYCLES}
ACTIVATION_OPERANDS = ("lhs", "rhs", "post")
ROPE_PASSES = 3.5  # x*cos, rotate_half(x)*sin, add; negating half the tiles of rotate_half
ROPE_READS_PER_TILE = 4  # x tile, its rotate_half partner tile, cos tile, sin tile
ELTWISE_PASSES = 1
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


# ---- row-parallel and tile-parallel small ops ------------------------------------------------------
def rms_norm_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, act_dtype: str = "bf16",
                fused_residual: bool = False, layernorm: bool = False, fp32_dest_acc: bool = False,
                relax: Relax | None = None):
    """``ttnn.rms_norm`` (``layernorm``: ``ttnn.layer_norm``) over [rows, width] (interleaved), us.

    The reduction runs along a row, so the factory splits tile rows (rows/32) across cores: the
    expert's [64, 1536] input keeps 2 cores busy with 48 tiles each, a per-head q norm [16*64, 128]
    32 cores with 4 tiles each. Gamma is a [1,1,width/32,32] row-major stick (bytes negligible).
    ``fused_residual`` models an add+rms_norm kernel: two inputs, two outputs, one more pass.

    The input is read from DRAM once: the interleaved factory sizes the input circular buffer to a
    whole tile row (``in0_t = Wt_next_block_up``) and switches to the large-tensor kernels, which
    re-read it, only when the buffers do not fit L1 (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/
    normalization/layernorm/device/layernorm_op_multi_core.cpp @ 015365c6); the x^2 and x * rstd
    passes re-read the row from L1 (``NORM_TILE_PASSES``). Reading it twice from DRAM would put the p150
    prefill rows (3200 x 1536 in 59.5 us, DEVICE KERNEL DURATION) at 97% of the DRAM peak.

    LayerNorm is the same program (layernorm_op_multi_core.cpp serves both norm types: same row split,
    same reader) with the mean statistic and beta: the 7 passes of ``LAYERNORM_TILE_PASSES`` per tile
    instead of the 4 of ``NORM_TILE_PASSES`` (one more with a fused residual: ``norm_tile_passes``). The
    reader (reader_unary_interleaved_ln.cpp @ 015365c6) reads gamma and beta once per core, after its
    first row of x, while the compute kernel runs that row's statistic passes, and reuses them over its
    rows (bytes not counted, as gamma's).

    With ``fp32_dest_acc`` a pass that streams a Float32 intermediate tile costs twice the fitted bf16
    pass (``row_op_us``); LayerNorm's E[x] reduce streams only x (bf16, from cb_in) and the reduce scaler
    and packs one tile per row, so it is an activation-format pass (``act_passes``) even then: 13 bf16
    pass-equivalents per tile, not 14. Checked on CLIP's [32, 768] one-core LayerNorm rows (HiFi4,
    fp32_dest_acc_en=1; shared/data/profiler_reports/bh_64_clip_encoder_1.csv, 50 rows, 19.1-19.5 us):
    22.8 us before, 21.3 after; the rest of the gap is not in the count (x - E[x] and + beta are ELWSUB /
    ELWADD, which the LLK runs without the HiFi4 fidelity loop of ELWMUL and the reduce, but the fitted
    pass has no fidelity-dependent part to take off).

    The large-tensor kernel (``norm_large_tensor``) runs other passes: ``norm_tile_passes(large_tensor=True)``,
    5 per tile for RMSNorm (x is copied through Dest twice, once squared on the SFPU, once packed to cb_xmm
    for want of a Dest-reuse multiply), the SFPU square of every tile (``SFPU_SQUARE_CYCLES``) and per row
    one copy of the variance's running sum per block after the first. Checked on Qwen3.6-27B's [64(33),
    5120] bf16 rows (2 cores, 160 tiles each, HiFi4, fp32_dest_acc_en=0; tests/data/profiler_more/
    bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv line 16 and 3 more, 85.2-86.2 us, the TRISCs
    binding): 44.1 us before (-48%), 71.6 after (-16%). Not counted, and maybe the rest: each block's
    sub-steps there (copy -> cb_xmm -> * rstd -> cb_fusion -> * gamma) wait for the previous one's pack of
    the same block, so unpack, math and pack of a block run one after the other; the fitted pass prices
    them overlapped. Muse's [8192, 6656] large-tensor rows stay DRAM-bound (unchanged).
    """
    n_in, n_out = (2, 2) if fused_residual else (1, 1)
    # where, not if: the board's L1 may be a tracer
    large = norm_large_tensor(hw, width=width, act_dtype=act_dtype, fused_residual=fused_residual,
                              fp32_dest_acc=fp32_dest_acc)
    small = norm_tile_passes(layernorm=layernorm, fused_residual=fused_residual)
    big = norm_tile_passes(layernorm=layernorm, fused_residual=fused_residual, large_tensor=True)
    # large-tensor kernels: each statistic pass re-reads x (and the residual), the last one with gamma
    # (and beta) per row
    large_n_in = (3 if layernorm else 2) * n_in + (2 if layernorm else 1)
    n_in = jnp.where(large, large_n_in, n_in)
    # large-tensor kernels, per row: the SFPU square of every tile, and the variance's running sum carried
    # between blocks of NORM_BLOCK_TILES through cb_accumulate (one copy_tile back into Dest per block after
    # the first, layernorm_large_tensor.cpp's ``if (!block.is_first())``)
    blocks = -(-(width // TILE) // NORM_BLOCK_TILES[bool(fp32_dest_acc)])
    large_row_cycles = ((width // TILE) * SFPU_SQUARE_CYCLES
                        + (blocks - 1) * intermediate_pass_cycles(fit, fp32_dest_acc=fp32_dest_acc))
    return row_op_us(hw, fit, rows=rows, width=width,
                     passes=jnp.where(large, big.count("inter"), small.count("inter")),
                     act_passes=jnp.where(large, big.count("act"), small.count("act")),
                     sfpu_cycles_per_row=jnp.where(large, large_row_cycles, 0.0),
                     n_in=n_in, n_out=n_out, act_dtype=act_dtype, fp32_dest_acc=fp32_dest_acc, relax=relax)


def norm_tile_passes(*, layernorm: bool, fused_residual: bool, large_tensor: bool = False) -> tuple[str, ...]:
    """The per-tile passes of the norm compute kernel (``NORM_TILE_PASSES`` / ``LAYERNORM_TILE_PASSES``;
    ``large_tensor``: layernorm_large_tensor.cpp's ``NORM_LARGE_TENSOR_TILE_PASSES`` /
    ``LAYERNORM_LARGE_TENSOR_TILE_PASSES``), each "inter" or "act" by the tiles it streams. A fused residual
    adds the pre-add pass, whose sum lands in cb_x (an intermediate buffer), so LayerNorm's E[x] reduce then
    reads intermediate tiles. The large-tensor kernel instead adds b to every read of x in Dest
    (binary_dest_reuse_tiles ELWADD, or row_wise_mean_with_pre_add for E[x]): one pass per read of x."""
    if large_tensor:
        base = LAYERNORM_LARGE_TENSOR_TILE_PASSES if layernorm else NORM_LARGE_TENSOR_TILE_PASSES
        if not fused_residual:
            return base
        if layernorm:  # E[x] then reads the sum, not bf16 x alone
            base = ("inter",) + base[1:]
        return (NORM_RESIDUAL_TILE_PASS,) * (3 if layernorm else 2) + base
    if not layernorm:
        return ((NORM_RESIDUAL_TILE_PASS,) if fused_residual else ()) + NORM_TILE_PASSES
    if fused_residual:
        return (NORM_RESIDUAL_TILE_PASS, "inter") + LAYERNORM_TILE_PASSES[1:]
    return LAYERNORM_TILE_PASSES


# layernorm_op_multi_core.cpp's small-kernel circular buffers (module of ``norm_large_tensor``)
NORM_BLOCK_TILES = {True: 4, False: 8}  # block_size = fp32_dest_acc_en ? 4 : 8


def norm_large_tensor(hw: Blackhole, *, width: int, act_dtype: str = "bf16", fused_residual: bool = False,
                      fp32_dest_acc: bool = False):
    """Whether the interleaved norm factory switches to its large-tensor kernels for rows of ``width``
    (a boolean array: ``hw.l1_bytes_per_core`` may be a tracer).

    The factory (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/layernorm/device/
    layernorm_op_multi_core.cpp, e.g. as stored in the search index, id 56852315769) sizes its
    small-kernel circular buffers for a whole tile row, Wt rounded up to the block (4 tiles with
    fp32_dest_acc_en, else 8): x (Wt, or 2 blocks with a fused residual, whose own buffer is 2 blocks),
    xmm and xmm^2 (Wt each, intermediate format: Float32 with fp32_dest_acc_en, else Float16_b), gamma
    and beta (Wt each, Float16_b), the output (2 blocks), x + residual (Wt with a residual, else 2
    blocks), the gamma/beta staging (2 blocks), 8 + 2 + 2 intermediate tiles, and the reduce scaler
    and epsilon (2 Float16_b tiles each); when they do not fit one core's L1 (``CB_can_fit_in_L1``)
    it runs layernorm_large_tensor.cpp, whose reader (reader_unary_interleaved_ln_large_tensor.cpp
    @ 015365c6) streams a tile row in blocks once per pass: E[x] (LayerNorm only), the variance, and
    the final pass with gamma and beta, so x is read 2 (RMSNorm) or 3 (LayerNorm) times and gamma
    (and beta) once per tile row. Gamma and beta are taken in TILE layout (a ROW_MAJOR gamma skips
    the check in the factory). The Muse Glimmer report's [8192, 6656] RMSNorm rows name
    layernorm_large_tensor.cpp (tests/data/profiler_more).
    """
    blk = NORM_BLOCK_TILES[bool(fp32_dest_acc)]
    wt = -(-(width // TILE) // blk) * blk
    act, bf16 = tile_bytes(act_dtype), tile_bytes("bf16")
    inter = tile_bytes("fp32" if fp32_dest_acc else "bf16")
    x_tiles = 2 * blk if fused_residual else wt
    total = (x_tiles * act + (2 * blk * act if fused_residual else 0) + 2 * blk * act
             + (2 * wt + (wt if fused_residual else 2 * blk) + 2 * blk + 8 + 2 + 2) * inter
             + (2 * wt + 2 + 2) * bf16)
    return jnp.asarray(total) > hw.l1_bytes_per_core


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


def softmax_mask_us(hw: Blackhole, pad_cols: int):
    """Time for softmax's writer kernel to build the -inf padding mask tile of rows whose last tile
    has ``pad_cols`` padded columns (0: no mask, 0 us), us: 32 x 32 zeroing stores and 32 x
    ``pad_cols`` fill stores at ``RISC_STORE_LOOP_CYCLES`` cycles each (1440 stores, 3.2 us at
    1.35 GHz for CLIP's 19-wide rows). The compute's first tile row waits for it (``row_op_us``'s
    ``start_us``): with one tile per core it is most of the op's time after the launch."""
    if not 0 <= pad_cols < TILE:
        raise ValueError(f"{pad_cols=} must lie in [0, {TILE})")
    stores = TILE * TILE + TILE * pad_cols if pad_cols else 0
    return cycles_us(hw, RISC_STORE_LOOP_CYCLES * stores)


def softmax_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, act_dtype: str = "bf16",
               fp32_dest_acc: bool = False, pad_cols: int = 0, relax: Relax | None = None):
    """``ttnn.softmax`` over the last dim of [rows, width] (interleaved, no mask), us: a row op
    (``row_op_us``) of ``SOFTMAX_ROW_PASSES`` FPU passes per tile plus, on the SFPU, the exp of every
    tile and the reciprocal of each row's sum (one tile per row), at the spec's Float32-Dest costs
    (``hw.sfpu_exp_cycles_per_tile``, ``hw.sfpu_recip_cycles_per_tile``) or, without
    ``fp32_dest_acc``, their bfloat16 ratios (``SFPU_EXP_BF16_RATIO``, ``SFPU_RECIP_BF16_RATIO``). The
    accurate exp (``math_approx_mode=0``, what the rows read carry) is priced; the exp is most of a
    Float32 softmax (2548 of ~3200 cycles per tile). The program is sent to the whole grid, cores
    without rows included (CORE COUNT 64 for 12 tile rows on a 64-core grid:
    shared/data/profiler_reports/bh_64_clip_encoder_1.csv).

    ``pad_cols``: columns of each row's last tile that are padding (``width`` less the logical width;
    the factory's num_datum_padded, softmax_program_factory_attention_optimized.cpp @ 003544fc). The
    writer then builds a padding mask tile before the compute can start (``softmax_mask_us``) and
    every tile takes one more pass (``SOFTMAX_PADDED_COPY_PASSES``)."""
    exp_cycles = hw.sfpu_exp_cycles_per_tile * (1.0 if fp32_dest_acc else SFPU_EXP_BF16_RATIO)
    recip_cycles = hw.sfpu_recip_cycles_per_tile * (1.0 if fp32_dest_acc else SFPU_RECIP_BF16_RATIO)
    passes = SOFTMAX_ROW_PASSES + (SOFTMAX_PADDED_COPY_PASSES if pad_cols else 0)
    return row_op_us(hw, fit, rows=rows, width=width, passes=passes, act_dtype=act_dtype,
                     fp32_dest_acc=fp32_dest_acc, launch_cores=hw.grid_cores,
                     sfpu_cycles_per_row=(width // TILE) * exp_cycles + recip_cycles,
                     start_us=softmax_mask_us(hw, pad_cols) if pad_cols else None, relax=relax)


def rope_us(hw: Blackhole, fit: FitParams, *, heads: int, rows: int, head_dim: int, act_dtype: str = "bf16",
            relax: Relax | None = None):
    """``ttnn.experimental.rotary_embedding_hf`` on [1, heads, rows, head_dim], us.

    Output tiles are split across the grid; each output tile reads its input tile, the
    rotate_half partner tile and the cos and sin tiles.
    """
    act = tile_bytes(act_dtype)
    tiles = heads * (rows // TILE) * (head_dim // TILE)
    cores = min(tiles, hw.grid_cores)
    per_core = math.ceil(tiles / cores)
    t_read = read_us(hw, fit, per_core * ROPE_READS_PER_TILE, per_core * ROPE_READS_PER_TILE * act, cores,
                     relax=relax)
    t_math = cycles_us(hw, per_core * ROPE_PASSES * fit.eltwise_cycles_per_tile)
    t_agg = dram_us(hw, fit, tiles * (ROPE_READS_PER_TILE + 1), tiles * (ROPE_READS_PER_TILE + 1) * act)
    return (launch_us(fit, cores, fit.launch_rope_us) + fit.dram_latency_us
            + smax(overlap(fit, t_read, t_math), t_agg, relax=relax))


def heads_us(hw: Blackhole, fit: FitParams, *, rows: int, tiles_per_row: int, act_dtype: str = "bf16",
             in_l1: bool = False, relax: Relax | None = None):
    """``nlp_create_qkv_heads`` / ``nlp_concat_heads`` on a [rows, tiles_per_row*32] tensor, us.

    Pure data movement; the factories split tile rows across cores, so a 64-row input keeps only
    2 cores busy, and their readers move one tile per blocking read: each tile costs the overlap
    of a DRAM round trip and its transfer (latency bound: ~0.4 us per tile). With many tile rows
    every core streams at once and the op is bounded by all its DRAM bytes (each tile read once and
    written once) at the achievable aggregate bandwidth (``dram_us``): a [3200, 4096] prefill
    concat moves 52 MB. ``in_l1``: the input is L1-interleaved (read over the NoC, no DRAM bytes).
    """
    tile_rows = rows // TILE
    tiles = tile_rows * tiles_per_row
    return data_movement_us(hw, fit, units=tile_rows, reads_per_unit=tiles_per_row,
                            dram_tiles=tiles * (1 if in_l1 else 2), act_dtype=act_dtype, in_l1=in_l1, relax=relax)


def data_movement_us(hw: Blackhole, fit: FitParams, *, units, reads_per_unit, dram_tiles, act_dtype: str = "bf16",
                     in_l1: bool = False, passes=0, cores=None, small_writes_per_core=0.0, blocking_writes_per_unit=0.0,
                     core_loads=None, kernel_fixed_us=None, relax: Relax | None = None):
    """A data-movement op (heads, reshape, transpose, concat, slice: reader and writer kernels that
    copy tiles, no or one compute pass), us.

    The factory splits ``units`` (tile rows, output or input tiles: each op's own unit) over
    ``cores`` (default min(units, grid)); per unit the reader issues ``reads_per_unit`` tile reads,
    each waited for (``noc_async_read_barrier`` per page), so each costs the overlap of a DRAM round
    trip and its transfer, and the compute kernel (if any) runs ``passes`` elementwise passes per read
    tile alongside. With many units every core streams at once and the op is bounded by its
    ``dram_tiles`` DRAM tiles (read + written) at the achievable aggregate bandwidth (``dram_us``).
    ``in_l1``: the reads come from L1-interleaved pages (over the NoC at the reader's rate).
    ``small_writes_per_core``: sub-tile NoC writes (face rows, tens of bytes) the busiest core's writer
    issues on the same chain as its reads, each ``hw.noc_write_issue_cycles`` of the issuing RISC
    (reshape: one single-page circular buffer between reader and writer; transpose_hc: at most one
    tile per core, or the writer's per-tile write barrier before it frees the tile).
    ``blocking_writes_per_unit``: tile writes per unit the writer waits for (``noc_async_write_barrier``)
    before the reader may go on (reshape: the output tile, whose one-page mapping buffer is freed only
    after it), each priced as a blocking read: a DRAM round trip overlapped with the tile's transfer.
    ``core_loads``: where the units differ (reshape's output tiles), (units, blocking reads) of each core
    that may bind, ``small_writes_per_core`` then the same cores' sub-tile writes (a tuple of the same
    length); the op waits for the slowest of them.
    The launch is the data-movement class's fixed time [launch_heads_us], or ``kernel_fixed_us`` where
    the op's program is of another class (``data_movement.DataMovementSpec.kernel_fixed_us``).
    """
    act = tile_bytes(act_dtype)
    cores = min(units, hw.grid_cores) if cores is None else cores
    n_per_core = math.ceil(units / cores)
    if core_loads is None:
        core_loads, small_writes_per_core = ((n_per_core, n_per_core * reads_per_unit),), (small_writes_per_core,)
    elif len(core_loads) != len(small_writes_per_core):
        raise ValueError(f"{len(core_loads)=} and {len(small_writes_per_core)=} differ: one entry per core")
    read = l1_read_us(hw, fit, 1, act, relax=relax) if in_l1 else read_us(hw, fit, 1, act, cores, relax=relax)
    t_tile = overlap(fit, fit.dram_latency_us, read)
    if passes:
        t_tile = overlap(fit, t_tile, cycles_us(hw, passes * fit.eltwise_cycles_per_tile))
    t_agg = dram_us(hw, fit, dram_tiles, dram_tiles * act) if dram_tiles else 0.0
    # each candidate core's chain: its blocking reads and output-tile writes, then its sub-tile writes
    chains = [(r + n * blocking_writes_per_unit) * t_tile + cycles_us(hw, w * hw.noc_write_issue_cycles)
              for (n, r), w in zip(core_loads, small_writes_per_core)]
    fixed = fit.launch_heads_us if kernel_fixed_us is None else kernel_fixed_us
    return launch_us(fit, cores, fixed) + smax(*chains, t_agg, relax=relax)


def fill_cache_us(hw: Blackhole, fit: FitParams, *, kv_heads: int, rows: int, head_dim: int,
                  act_dtype: str = "bf16", kv_dtype: str = "bf16", relax: Relax | None = None):
    """``ttnn.fill_cache`` writing [kv_heads, rows, head_dim] into the cache tail, us.

    Tile rows are split across cores; the reader (input tiles) and writer (cache-format tiles)
    run on separate NoCs, so the slower of the two streams counts.
    """
    tile_rows, ht = kv_heads * (rows // TILE), head_dim // TILE
    cores = min(tile_rows, hw.grid_cores)
    per_core = math.ceil(tile_rows / cores) * ht
    t_in = read_us(hw, fit, per_core, per_core * tile_bytes(act_dtype), cores, relax=relax)
    t_out = read_us(hw, fit, per_core, per_core * tile_bytes(kv_dtype), cores, relax=relax)
    return launch_us(fit, cores, fit.launch_fill_cache_us) + fit.dram_latency_us + overlap(fit, t_in, t_out)


def scalar_tile_fill_us(hw: Blackhole, act_dtype: str = "bf16"):
    """Time for binary_ng's writer (writer_interleaved_scalar.cpp) to fill the scalar operand's tile in
    L1, us: ``SCALAR_FILL_STORES`` 32-bit stores of a rolled loop at ``RISC_STORE_LOOP_CYCLES`` each
    (512 for bf16: 1.1 us at 1.35 GHz). The compute kernel (eltwise_binary_scalar.cpp @ 00174421) waits
    for that tile (``cb_post_rhs.wait_front(1)``) before its first output tile."""
    return cycles_us(hw, RISC_STORE_LOOP_CYCLES * SCALAR_FILL_STORES.get(act_dtype, SCALAR_FILL_STORES_PACKED))


def sfpu_binary_tile_cycles(fit: FitParams, *, kind: str, activations: tuple[tuple[str, str], ...] = ()):
    """Compute-thread cycles per output tile of binary_ng's SFPU path with a bfloat16 Dest (see
    ``SFPU_COPY_PASSES``): each copy_tile and each activation's pack into its intermediate buffer one
    elementwise pass [eltwise_cycles_per_tile], plus the SFPU op ``kind`` ('mul') and each fused
    activation ((operand, op) pairs, operand 'lhs' / 'rhs' / 'post', op 'sigmoid' / 'silu'); they run
    one after the other on the tile (the main loop's copy of an activated operand waits for its pack)."""
    validate_sfpu_binary(kind, activations)
    passes = SFPU_COPY_PASSES + SFPU_ACTIVATION_PASSES * len({o for o, _ in activations if o != "post"})
    return (passes * fit.eltwise_cycles_per_tile + SFPU_BINARY_BF16_CYCLES[kind]
            + sum(SFPU_ACTIVATION_BF16_CYCLES[op] for _, op in activations))


def validate_sfpu_binary(kind: str, activations: tuple[tuple[str, str], ...]) -> None:
    """Raise ValueError for an SFPU binary op or a fused activation without a sourced cost."""
    if kind not in SFPU_BINARY_BF16_CYCLES:
        raise ValueError(f"{kind=}: the SFPU binary path is priced for {sorted(SFPU_BINARY_BF16_CYCLES)}")
    for operand, op in activations:
        if operand not in ACTIVATION_OPERANDS:
            raise ValueError(f"activation operand {operand!r}: expected one of {ACTIVATION_OPERANDS}")
        if op not in SFPU_ACTIVATION_BF16_CYCLES:
            raise ValueError(f"activation {op!r}: priced for {sorted(SFPU_ACTIVATION_BF16_CYCLES)}")


def eltwise_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, n_inputs: int = 2,
               act_dtype: str = "bf16", kind: str = "add", sfpu: bool = False,
               activations: tuple[tuple[str, str], ...] = (), relax: Relax | None = None):
    """Binary eltwise (``ttnn.add`` / ``ttnn.mul``) on [rows, width]; output tiles split over the grid, us.

    ``sfpu``: binary_ng's SFPU path (``is_sfpu``; bfloat16 only), whose per-tile compute is
    ``sfpu_binary_tile_cycles`` of ``kind`` ('add' / 'mul') with the fused ``activations``; else the FPU
    path, one elementwise pass per tile whatever the kind (no fused activations). ``n_inputs`` 1: a scalar
    second operand, whose tile the writer fills before the compute can start (``scalar_tile_fill_us``,
    overlapped with the first read's round trip)."""
    if sfpu and act_dtype != "bf16":
        raise ValueError(f"{act_dtype=}: the SFPU path is priced with the bfloat16-Dest SFPU costs only")
    if activations and not sfpu:
        raise ValueError(f"{activations=} on the FPU path: fused activations are priced on the SFPU path only")
    act = tile_bytes(act_dtype)
    tiles = (rows // TILE) * (width // TILE)
    cores = min(tiles, hw.grid_cores)
    per_core = math.ceil(tiles / cores)
    t_read = read_us(hw, fit, per_core * n_inputs, per_core * n_inputs * act, cores, relax=relax)
    tile_cycles = (sfpu_binary_tile_cycles(fit, kind=kind, activations=activations) if sfpu
                   else ELTWISE_PASSES * fit.eltwise_cycles_per_tile)
    t_math = cycles_us(hw, per_core * tile_cycles)
    t_agg = dram_us(hw, fit, tiles * (n_inputs + 1), tiles * (n_inputs + 1) * act)
    # binary_ng sends its program to the whole grid, cores without tiles included (a 24-tile add on
    # a 64-core grid reports CORE COUNT 64: shared/data/profiler_reports/bh_64_clip_encoder_1.csv)
    t_start = fit.dram_latency_us if n_inputs == 2 else smax(fit.dram_latency_us, scalar_tile_fill_us(hw, act_dtype),
                                                              relax=relax)
    return (launch_us(fit, hw.grid_cores, fit.launch_eltwise_us) + t_start
            + smax(overlap(fit, t_read, t_math), t_agg, relax=relax))


__all__ = [
    "RISC_STORE_LOOP_CYCLES",
    "agg_bytes_per_s",
    "cycles_us",
    "data_movement_us",
    "dram_us",
    "eltwise_us",
    "endpoint_slowdown",
    "fill_cache_us",
    "heads_us",
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
    "norm_large_tensor",
    "norm_tile_passes",
    "overlap",
    "read_us",
    "rms_norm_us",
    "rope_us",
    "row_op_us",
    "scalar_tile_fill_us",
    "sfpu_binary_tile_cycles",
    "softmax_mask_us",
    "softmax_us",
    "us_of",
    "validate_sfpu_binary",
]
