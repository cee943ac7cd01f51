"""``ttnn.softmax`` over the last dim: the spec, its price (``softmax_us``), its core split, its op
codes and its op-report row (read and written)."""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.ops import (
    RISC_STORE_LOOP_CYCLES,
    cycles_us,
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
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat

# ---- its price -------------------------------------------------------------------------------------
# standalone numerically stable softmax (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/softmax/
# device/kernels/attention/compute/softmax.cpp @ 0063e996): per tile the matrix-unit / FPU passes row max
# (reduce MAX), x - max (sub_tiles_bcast_cols), row sum (reduce SUM) and x * 1/sum (mul bcast cols); the exp
# of each tile and the reciprocal of each row's sum run on the SFPU (SFPU_EXP / SFPU_RECIP costs, ``softmax_us``)
SOFTMAX_ROW_PASSES = 4


# a row whose logical width stops short of its tile-padded width (mask_padded_data): every tile is first copied
# into cb_x (copy_tile; the row's last tile instead add_tiles_bcast_rows with the -inf padding mask), which the
# numerically stable passes then read (softmax.cpp @ 0063e996, kernel_main's ``if (mask_padded_data)`` branch)
SOFTMAX_PADDED_COPY_PASSES = 1


# SFPU cost with a bfloat16 Dest (fp32_dest_acc_en=0) relative to the Float32 Dest costs of the hardware spec
# (Blackhole.sfpu_exp_cycles_per_tile / sfpu_recip_cycles_per_tile), from the same measurements [BH-sfpu]:
# the accurate bfloat16 exp (exp_21f) 672 cycles/tile (tenstorrent/tt-metal pull request #29495) vs 2548 for
# Float32 (#33563); the reciprocal 3 vs 5 cycles per 32 lanes (tenstorrent/tt-llk pull request #834)
SFPU_EXP_BF16_RATIO = 672.0 / 2548.0


SFPU_RECIP_BF16_RATIO = 3.0 / 5.0


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


@dataclasses.dataclass(frozen=True)
class SoftmaxSpec:
    """``ttnn.softmax`` over the last dim of [rows, width] (interleaved, no mask; ``softmax_us``);
    ``width`` is tile-padded; ``fp32_dest_acc``: Float32 intermediates (as ``NormSpec``); ``pad_cols``:
    columns of each row's last tile past the logical width (CLIP's [12, 19, 19] scores: 13), which make
    the kernels build and add a padding mask."""

    rows: int
    width: int
    act_dtype: str = "bf16"
    fp32_dest_acc: bool = False
    pad_cols: int = 0
    op_class = "norm"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return softmax_us(hw, fit, rows=self.rows, width=self.width, act_dtype=self.act_dtype,
                          fp32_dest_acc=self.fp32_dest_acc, pad_cols=self.pad_cols, relax=relax)


def read(ln: ReportLine, hw: Blackhole, cls: str = "softmax") -> SoftmaxSpec:
    """A softmax row (unmasked, unscaled, default program config) as a ``SoftmaxSpec``."""
    if (ln.attr("softmax_type") or "SoftmaxOperationType::Softmax") != "SoftmaxOperationType::Softmax":
        raise Skip(f"softmax variant not modelled ({ln.attr('softmax_type')})")
    if (ln.attr("dim") or "3") not in ("3", "-1"):
        raise Skip(f"softmax over dim {ln.attr('dim')} (the model reduces the last dim)")
    if (ln.attr("is_causal_mask") or "false") == "true" or ln.has("INPUT_1"):
        raise Skip("softmax with a mask not modelled")
    if (ln.attr("scale") or "std::nullopt") != "std::nullopt":
        raise Skip("scaled softmax not modelled")
    pc = ln.attr("program_config") or "SoftmaxDefaultProgramConfig()"
    if not pc.startswith("SoftmaxDefaultProgramConfig"):
        raise Skip(f"program-config kind not modelled: {pc.split('(')[0]}")
    no_sharding(ln, "INPUT_0", "OUTPUT_0")
    x = ln.shape("INPUT_0")  # a row-wise op: batch dims are more rows
    # a logical width short of the padded one makes the kernels build and add a padding mask
    pad_cols = x[3] - ln.logical("INPUT_0")[3]
    if not 0 <= pad_cols < TILE:
        raise Skip(f"softmax row padded by {pad_cols} columns (the padding mask covers part of one tile)")
    return SoftmaxSpec(x[0] * x[1] * x[2], x[3], ln.dtype("INPUT_0", ActivationFormat), row_fp32_dest_acc(ln),
                       pad_cols=pad_cols)


OP_CLASSES = {"softmax": ("SoftmaxDeviceOperation", "Softmax")}  # first: written
SPECS = (SoftmaxSpec,)


def cores(spec: SoftmaxSpec, hw: Blackhole) -> int:
    """The whole grid: the program is sent to every worker (``softmax_us``)."""
    return hw.grid_cores


def record(spec: SoftmaxSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    x = dataclasses.replace(tensor((1, 1, spec.rows, spec.width), spec.act_dtype),
                            logical=(1, 1, spec.rows, spec.width - spec.pad_cols))
    ckc = compute_kernel("HiFi4", fp32_dest_acc=spec.fp32_dest_acc)
    attrs = {"compute_kernel_config": ckc, "dim": "3", "inplace": "false", "is_causal_mask": "false",
             "numeric_stable": "true", "program_config": "SoftmaxDefaultProgramConfig()", "scale": "std::nullopt",
             "softmax_type": "SoftmaxOperationType::Softmax"}
    return OP_CLASSES["softmax"][0], attrs, [x], [x], "HiFi4"
