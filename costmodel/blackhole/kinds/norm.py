"""``ttnn.rms_norm`` / ``ttnn.layer_norm`` (with or without a fused residual add): the spec, its price
(``rms_norm_us``), its core split, its op codes and its op-report row (read and written)."""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp

from costmodel.blackhole.kinds import norm_sharded
from costmodel.blackhole.kinds.norm_sharded import NormShardedSpec
from costmodel.blackhole.ops import (
    SFPU_ROWS_PER_TILE,
    fidelity_tile_cycles,
    intermediate_pass_cycles,
    row_op_us,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    compute_kernel,
    no_sharding,
    row_fp32_dest_acc,
    tensor,
)
from costmodel.hardware import TILE, Blackhole, fidelity_passes, tile_bytes
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat

# ---- its price -------------------------------------------------------------------------------------
# Elementwise passes per tile, counted from the op's compute kernel.
# The interleaved norm kernel (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/layernorm/device/kernels/
# compute/layernorm.cpp @ 9438a76b, the use_welford=0 path), per tile of a row; each pass is named by the circular
# buffers it streams per tile: "inter" when it unpacks or packs a tile of the factory's intermediate format (cb_x of
# a fused residual, cb_xmm, cb_xmm2, cb_fusion: Float32 with fp32_dest_acc_en, layernorm_op_multi_core.cpp
# @ 015365c6), "act" when it streams only tiles of the activation format; and by its FPU op, whose fidelity
# phases the math thread runs ("mul", "reduce_sum": ``ops.FPU_MATH_CYCLES``; "add", "copy": none). The
# per-row rsqrt is one tile, ignored.
NORM_TILE_PASSES = (
    ("inter", "mul"),  # x^2: mul_tiles(cb_in, cb_in), packed to cb_xmm2
    ("inter", "reduce_sum"),  # the row reduce of cb_xmm2 (reduce_tile; one pack per row)
    ("inter", "mul"),  # x * rstd: mul_tiles_bcast_cols, packed to cb_fusion
    ("inter", "mul"),  # * gamma: mul_tiles_bcast_rows of cb_fusion, packed to cb_out
)


NORM_RESIDUAL_TILE_PASS = ("inter", "add")  # x = a + b: add_tiles(cb_in, cb_inb), packed to cb_x


# The large-tensor RMSNorm kernel (layernorm_large_tensor.cpp @ 9438a76b, unchanged in structure @ 00d78d63, the
# RMSNORM path), per tile of a row; it streams x from DRAM twice (the variance, then the output) and packs more:
NORM_LARGE_TENSOR_TILE_PASSES = (
    ("inter", "copy"),  # copy_tile(cb_in) + square_tile (SFPU, ``SFPU_SQUARE_CYCLES``), packed to cb_xmm2
    ("inter", "reduce_sum"),  # the row reduce of cb_xmm2 (reduce_tile into one Dest tile per block)
    # copy_tile(cb_in), packed to cb_xmm ("We shouldn't have to pack to intermediate CB ... tt-llk #868")
    ("inter", "copy"),
    ("inter", "mul"),  # x * rstd: mul_tiles(cb_xmm, cb_ex2pe) (cb_ex2pe a full tile per row), to cb_fusion
    ("inter", "mul"),  # * gamma: mul_tiles_bcast_rows(cb_fusion, cb_gamma), packed to cb_out
)


# its LayerNorm path: E[x] (row_wise_mean of cb_in), then x - E[x] (sub_tiles_bcast_cols) in place of each
# copy_tile above, + beta (add_tiles_bcast_rows of cb_fusion) after gamma: the 7 passes of the small kernel, one
# more SFPU square per tile
LAYERNORM_LARGE_TENSOR_TILE_PASSES = ((("act", "reduce_sum"),)
                                      + tuple(("inter", "add") if op == "copy" else (buf, op)
                                              for buf, op in NORM_LARGE_TENSOR_TILE_PASSES)
                                      + (("inter", "add"),))


LAYERNORM_TILE_PASSES = (
    ("act", "reduce_sum"),  # E[x]: the row reduce of x from cb_in (bf16; cb_x with a residual), one pack a row
    ("inter", "add"),  # x - E[x]: sub_tiles_bcast_cols, packed to cb_xmm
    ("inter", "mul"),  # (x - E[x])^2: mul_tiles(cb_xmm, cb_xmm), packed to cb_xmm2
    ("inter", "reduce_sum"),  # Var[x]: the row reduce of cb_xmm2
    ("inter", "mul"),  # * rstd: mul_tiles_bcast_cols of cb_xmm, packed to cb_fusion
    ("inter", "mul"),  # * gamma: mul_tiles_bcast_rows of cb_fusion, packed to cb_fusion
    ("inter", "add"),  # + beta: add_tiles_bcast_rows of cb_fusion, packed to cb_out
)


# square_tile (calculate_square, tt_llk_blackhole/common/inc/sfpu/ckernel_sfpu_square.h as stored in the search
# index): per 32-lane row SFPLOAD, SFPMUL, SFPNOP, SFPSTORE and the Dest increment, 5 instructions, one cycle each
# (the convention of ``SFPU_MUL_BF16_CYCLES``), on the math thread between the copy and the pack
SFPU_SQUARE_CYCLES = 5 * SFPU_ROWS_PER_TILE


# ---- row-parallel and tile-parallel small ops ------------------------------------------------------
def rms_norm_us(hw: Blackhole, fit: FitParams, *, rows: int, width: int, act_dtype: str = "bf16",
                fused_residual: bool = False, layernorm: bool = False, fp32_dest_acc: bool = False,
                fidelity: str = "HiFi4", relax: Relax | None = None):
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
    22.8 us before, 21.3 after (HiFi4 adds nothing there: ``fidelity`` below, Float32's extra bytes are
    longer).

    The large-tensor kernel (``norm_large_tensor``) runs other passes: ``norm_tile_passes(large_tensor=True)``,
    5 per tile for RMSNorm (x is copied through Dest twice, once squared on the SFPU, once packed to cb_xmm
    for want of a Dest-reuse multiply), the SFPU square of every tile (``SFPU_SQUARE_CYCLES``) and per row
    one copy of the variance's running sum per block after the first. Checked on Qwen3.6-27B's [64(33),
    5120] bf16 rows (2 cores, 160 tiles each, HiFi4, fp32_dest_acc_en=0; tests/data/profiler_more/
    bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv line 16 and 3 more, 85.2-86.2 us, the TRISCs
    binding): 44.1 us before (-48%), 71.6 after (-16%), 83.2 (-2%) with their HiFi4 math (``fidelity``).
    Muse's [8192, 6656] large-tensor rows stay DRAM-bound (unchanged).

    ``fidelity`` (the compute kernel config's math fidelity; ttnn's rms_norm / layer_norm default HiFi4,
    layernorm.cpp's ``init_device_compute_kernel_config``): each multiply and sum-reduce pass runs its
    fidelity phases on the math thread, which costs what it runs past the unpacker per tile
    (``ops.fidelity_tile_cycles``, measured on Blackhole: HiFi4 only, HiFi2's math is within the unpacker's
    time), or Float32's extra bytes where those are longer (``ops.intermediate_pass_cycles``).
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

    def count(passes, buffer):
        return sum(buf == buffer for buf, _ in passes)

    def fid(passes):
        return fidelity_tile_cycles([op for _, op in passes], fidelity)

    return row_op_us(hw, fit, rows=rows, width=width,
                     passes=jnp.where(large, count(big, "inter"), count(small, "inter")),
                     act_passes=jnp.where(large, count(big, "act"), count(small, "act")),
                     fidelity_cycles_per_tile=jnp.where(large, fid(big), fid(small)),
                     sfpu_cycles_per_row=jnp.where(large, large_row_cycles, 0.0),
                     n_in=n_in, n_out=n_out, act_dtype=act_dtype, fp32_dest_acc=fp32_dest_acc, relax=relax)


def norm_tile_passes(*, layernorm: bool, fused_residual: bool,
                     large_tensor: bool = False) -> tuple[tuple[str, str], ...]:
    """The per-tile passes of the norm compute kernel (``NORM_TILE_PASSES`` / ``LAYERNORM_TILE_PASSES``;
    ``large_tensor``: layernorm_large_tensor.cpp's ``NORM_LARGE_TENSOR_TILE_PASSES`` /
    ``LAYERNORM_LARGE_TENSOR_TILE_PASSES``), each (buffer, FPU op): "inter" or "act" by the tiles it streams,
    and the op whose fidelity phases it runs. A fused residual
    adds the pre-add pass, whose sum lands in cb_x (an intermediate buffer), so LayerNorm's E[x] reduce then
    reads intermediate tiles. The large-tensor kernel instead adds b to every read of x in Dest
    (binary_dest_reuse_tiles ELWADD, or row_wise_mean_with_pre_add for E[x]): one pass per read of x."""
    if large_tensor:
        base = LAYERNORM_LARGE_TENSOR_TILE_PASSES if layernorm else NORM_LARGE_TENSOR_TILE_PASSES
        if not fused_residual:
            return base
        if layernorm:  # E[x] then reads the sum, not bf16 x alone
            base = (("inter", base[0][1]),) + base[1:]
        return (NORM_RESIDUAL_TILE_PASS,) * (3 if layernorm else 2) + base
    if not layernorm:
        return ((NORM_RESIDUAL_TILE_PASS,) if fused_residual else ()) + NORM_TILE_PASSES
    if fused_residual:
        return (NORM_RESIDUAL_TILE_PASS, ("inter", LAYERNORM_TILE_PASSES[0][1])) + LAYERNORM_TILE_PASSES[1:]
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


@dataclasses.dataclass(frozen=True)
class NormSpec:
    """``ttnn.rms_norm`` over [rows, width] (``fused_residual``: add + rms_norm in one op;
    ``layernorm``: ``ttnn.layer_norm``, mean statistic and beta as well; ``fp32_dest_acc``: the
    compute kernel config's ``fp32_dest_acc_en``, Float32 intermediates; ``fidelity``: its math
    fidelity, ttnn's default HiFi4)."""

    rows: int
    width: int
    act_dtype: str = "bf16"
    fused_residual: bool = False
    layernorm: bool = False
    fp32_dest_acc: bool = False
    fidelity: str = "HiFi4"
    op_class = "norm"

    def __post_init__(self):
        fidelity_passes(self.fidelity)  # ValueError naming the field for anything but a MathFidelity name

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return rms_norm_us(hw, fit, rows=self.rows, width=self.width, act_dtype=self.act_dtype,
                           fused_residual=self.fused_residual, layernorm=self.layernorm,
                           fp32_dest_acc=self.fp32_dest_acc, fidelity=self.fidelity, relax=relax)


def read(ln: ReportLine, hw: Blackhole, cls: str = "norm") -> NormSpec | NormShardedSpec:
    """A LayerNorm device-operation row (RMSNorm or LayerNorm) as a ``NormSpec``, or with the sharded program
    config as ``norm_sharded``'s ``NormShardedSpec``."""
    kind = ln.attr("norm_type")
    if kind not in ("LayerNormType::RMSNORM", "LayerNormType::LAYERNORM"):
        raise Skip(f"norm type not modelled ({kind or 'no norm_type'}; the model covers RMSNorm and LayerNorm)")
    pc = ln.attr("program_config") or ""
    if pc.startswith(norm_sharded.PROGRAM_CONFIG):
        return norm_sharded.read(ln, hw)
    if pc and not pc.startswith("LayerNormDefaultProgramConfig"):
        raise Skip(f"program-config kind not modelled: {pc.split('(')[0]}")
    x = ln.shape("INPUT_0")  # a row-wise op: batch dims are more rows
    no_sharding(ln, "INPUT_0", "OUTPUT_0")
    act = ln.dtype("INPUT_0", ActivationFormat)
    # a residual has x's logical shape; gamma is one logical row (its padded shape may equal x's: [32[1], W]).
    # When x is one logical row too (decode), the count tells: the op's tensors come as x, [residual], [gamma],
    # [beta], so a residual is followed by gamma (and beta): gpt-oss's one-row RMSNorm [x, gamma] lines measure
    # what its 17-row unfused lines do (tests/data/profiler_more/bh_gpt_oss_20b_fused_decode_b1.csv lines 16, 70)
    layernorm = kind == "LayerNormType::LAYERNORM"
    fused = ln.has("INPUT_1") and ln.logical("INPUT_1") == ln.logical("INPUT_0")
    if fused and ln.logical("INPUT_0")[2] == 1:
        fused = ln.has("INPUT_3" if layernorm else "INPUT_2")
    return NormSpec(x[0] * x[1] * x[2], x[3], act, fused, layernorm=layernorm,
                    fp32_dest_acc=row_fp32_dest_acc(ln), fidelity=ln.fidelity())


OP_CLASSES = {"norm": norm_sharded.LAYERNORM_CODES}  # first: written
SPECS = (NormSpec,)


def cores(spec: NormSpec, hw: Blackhole) -> int:
    """One tile row per core, capped by the grid (``ops.row_op_us``'s split)."""
    return min(math.ceil(spec.rows / TILE), hw.grid_cores)


def record(spec: NormSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    x = tensor((1, 1, spec.rows, spec.width), spec.act_dtype)
    gamma = tensor((1, 1, spec.width // TILE, TILE), spec.act_dtype, "ROW_MAJOR")
    attrs = {"norm_type": f"LayerNormType::{'LAYERNORM' if spec.layernorm else 'RMSNORM'}", "eps": "1e-05",
             "program_config": "LayerNormDefaultProgramConfig(legacy_reduction=0;legacy_rsqrt=0;use_welford=0)",
             "distributed_norm_stage": "DistributedLayerNormStage::NOT_DISTRIBUTED"}
    if spec.fp32_dest_acc:
        attrs["compute_kernel_config"] = compute_kernel(spec.fidelity, fp32_dest_acc=True)
    ins = [x, x, gamma] if spec.fused_residual else [x, gamma]
    return OP_CLASSES["norm"][0], attrs, ins + ([gamma] if spec.layernorm else []), [x], spec.fidelity
