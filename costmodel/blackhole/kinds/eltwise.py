"""Binary elementwise ops (binary_ng: add / mul of two tensors or a tensor and a scalar, FPU or SFPU
path, fused sigmoid / SiLU): the spec, its price (``eltwise_us``), its core split, its op codes
and its op-report row (read and written)."""

from __future__ import annotations

import dataclasses
import math
import re

from costmodel.blackhole.ops import (
    RISC_STORE_LOOP_CYCLES,
    SFPU_ROWS_PER_TILE,
    cycles_us,
    dram_us,
    launch_us,
    overlap,
    read_us,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    no_sharding,
    tensor,
)
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat

# ---- its price -------------------------------------------------------------------------------------
ELTWISE_PASSES = 1


# 32-bit stores that fill binary_ng's scalar operand tile: fill_with_val_bfloat16 packs two bf16 values per
# store (512), fill_with_val<1024, float> stores one Float32 value each (binary_ng/device/kernels/dataflow/
# fill_tile_utils.hpp @ 04f0123e, called once by writer_interleaved_scalar.cpp @ 00635679 before any output)
SCALAR_FILL_STORES = {"fp32": 1024}


SCALAR_FILL_STORES_PACKED = 512


def scalar_tile_fill_us(hw: Blackhole, act_dtype: str = "bf16"):
    """Time for binary_ng's writer (writer_interleaved_scalar.cpp) to fill the scalar operand's tile in
    L1, us: ``SCALAR_FILL_STORES`` 32-bit stores of a rolled loop at ``RISC_STORE_LOOP_CYCLES`` each
    (512 for bf16: 1.1 us at 1.35 GHz). The compute kernel (eltwise_binary_scalar.cpp @ 00174421) waits
    for that tile (``cb_post_rhs.wait_front(1)``) before its first output tile."""
    return cycles_us(hw, RISC_STORE_LOOP_CYCLES * SCALAR_FILL_STORES.get(act_dtype, SCALAR_FILL_STORES_PACKED))


# binary_ng's SFPU path (``is_sfpu``: eltwise_binary_sfpu_no_bcast.cpp / eltwise_binary_sfpu_scalar.cpp,
# tenstorrent/tt-metal ttnn/cpp/ttnn/operations/eltwise/binary_ng/device/kernels/compute/ @ 00174421): per output
# tile, copy_tile of each operand into Dest, the SFPU binary op on the two Dest tiles, the post activations in
# place, one pack. A lhs / rhs activation is a pass of its own first (eltwise_utils_sfpu.hpp PREPROCESS:
# copy_tile, the activation, pack into c_3 / c_4) whose pack the main loop's copy_tile of that operand waits for.
# A bfloat16 output runs a bfloat16 Dest (binary_ng_program_factory.cpp @ 00635679: fp32_dest_acc_en only for a
# Float32 / Int32 / UInt32 output), so the bfloat16-Dest SFPU costs below apply.
SFPU_COPY_PASSES = 2  # copy_tile of lhs and rhs (a scalar operand's one tile is copied again for every tile)


SFPU_ACTIVATION_PASSES = 2  # a lhs / rhs activation: its own copy_tile, and the pack the main loop waits on


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


SFPU_BINARY_BF16_CYCLES = {"mul": SFPU_MUL_BF16_CYCLES}


SFPU_ACTIVATION_BF16_CYCLES = {"sigmoid": SFPU_SIGMOID_BF16_CYCLES, "silu": SFPU_SILU_BF16_CYCLES}


ACTIVATION_OPERANDS = ("lhs", "rhs", "post")


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


@dataclasses.dataclass(frozen=True)
class EltwiseSpec:
    """Binary ``ttnn.add`` (kind 'add') / ``ttnn.mul`` ('mul') on [rows, width]; ``n_inputs`` 1 for a
    scalar second operand (one tensor read per output tile). ``sfpu``: binary_ng's SFPU path
    (``is_sfpu``), with ``activations`` the fused unary ops as (operand, op) pairs, operand 'lhs' /
    'rhs' / 'post', op 'sigmoid' / 'silu' (``sfpu_binary_tile_cycles``)."""

    kind: str
    rows: int
    width: int
    act_dtype: str = "bf16"
    n_inputs: int = 2
    sfpu: bool = False
    activations: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.sfpu:
            validate_sfpu_binary(self.kind, self.activations)
        elif self.activations:
            raise ValueError(f"activations={self.activations} on the FPU path: priced on the SFPU path only")

    @property
    def op_class(self) -> str:
        # the SFPU kernel is another program than the FPU eltwise: kept out of the eltwise rows that pin
        # launch_eltwise_us (costmodel/data/report_calibration.json lists the classes it fits)
        return "eltwise_sfpu" if self.sfpu else "eltwise"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return eltwise_us(hw, fit, rows=self.rows, width=self.width, n_inputs=self.n_inputs,
                          act_dtype=self.act_dtype, kind=self.kind, sfpu=self.sfpu, activations=self.activations,
                          relax=relax)


# ttnn's fused unary ops (UnaryOpType) of binary_ng that the SFPU path prices (kinds.eltwise.SFPU_ACTIVATION_BF16_CYCLES),
# with no parameter (param={}: the accurate, non-approximate kernels)
ACTIVATION_OF_TTNN = {"SIGMOID": "sigmoid", "SILU": "silu"}


def activation_text(ops) -> str:
    """A binary_ng activation list as ttnn prints it (commas as ';'), of model activation names."""
    ttnn_of = {v: k for k, v in ACTIVATION_OF_TTNN.items()}
    return "{" + "; ".join(f"BasicUnaryWithParam<float; int; unsigned int>(base=BasicUnaryWithParam<float>("
                           f"op_type=UnaryOpType::{ttnn_of[op]};param={{}}))" for op in ops) + "}"


def fused_activations(ln: ReportLine) -> tuple[tuple[str, str], ...]:
    """binary_ng's fused activations as (operand, op) pairs ('lhs' / 'rhs' / 'post'), in the attributes'
    order; Skip for one the model does not price."""
    out = []
    for operand in ACTIVATION_OPERANDS:
        text = ln.attr(f"{operand}_activations") or ""
        found = re.findall(r"op_type=UnaryOpType::(\w+);param=\{([^}]*)\}", text)
        if text.count("UnaryOpType") != len(found):
            raise Skip(f"fused {operand} activation not read ({text})")
        for name, param in found:
            if name not in ACTIVATION_OF_TTNN or param.strip():
                raise Skip(f"fused {operand} activation {name}{'(' + param + ')' if param.strip() else ''} not "
                            f"priced (SFPU costs are sourced for {sorted(ACTIVATION_OF_TTNN)} without a parameter)")
            out.append((operand, ACTIVATION_OF_TTNN[name]))
    return tuple(out)


def read(ln: ReportLine, hw: Blackhole, cls: str = "eltwise") -> EltwiseSpec:
    """A binary_ng add or mul row (same-shape operands or a scalar) as an ``EltwiseSpec``."""
    op = ln.attr("binary_op_type") or "no binary_op_type"
    kind = {"BinaryOpType::ADD": "add", "BinaryOpType::MUL": "mul"}.get(op)
    if kind is None:
        raise Skip(f"binary op type not modelled ({op})")
    scalar = (ln.attr("scalar") or "std::nullopt") != "std::nullopt"
    if ln.has("INPUT_1") == scalar:
        raise Skip("both a scalar and a second tensor" if scalar else "no second operand and no scalar")
    sfpu = (ln.attr("is_sfpu") or "false") == "true"
    activations = fused_activations(ln)
    if activations and not sfpu:
        raise Skip("fused activations on the FPU path: not priced (the model prices them on the SFPU path)")
    if sfpu and kind not in SFPU_BINARY_BF16_CYCLES:
        raise Skip(f"binary {kind} on the SFPU path (is_sfpu): not priced (the SFPU path prices "
                    f"{sorted(SFPU_BINARY_BF16_CYCLES)})")
    if sfpu and re.search(r"fp32_dest_acc_en=(1|true)", ln.attr("compute_kernel_config") or ""):
        # (the tensors are bfloat16, ActivationFormat: Dest is bfloat16 unless the config asks for Float32)
        raise Skip("binary op on the SFPU path with a Float32 Dest: only the bfloat16-Dest SFPU costs are sourced")
    x = ln.shape("INPUT_0")  # elementwise: batch dims are more rows
    # a row / column broadcast keeps the padded shape (a [32[1], W] row under a [32[17], W] input: binary_ng
    # runs eltwise_binary_row_bcast.cpp), so the logical shapes tell it
    if not scalar and (ln.shape("INPUT_1") != x or ln.logical("INPUT_1") != ln.logical("INPUT_0")):
        raise Skip("broadcast operand")
    no_sharding(ln, "INPUT_0", "OUTPUT_0", *(() if scalar else ("INPUT_1",)))
    act = ln.dtype("INPUT_0", ActivationFormat)
    if not scalar:
        ln.dtype("INPUT_1", ActivationFormat)
    return EltwiseSpec(kind, x[0] * x[1] * x[2], x[3], act, n_inputs=1 if scalar else 2, sfpu=sfpu,
                       activations=activations)


OP_CLASSES = {"eltwise": ("BinaryNgDeviceOperation", "BinaryDeviceOperation")}  # first: written
SPECS = (EltwiseSpec,)


def cores(spec: EltwiseSpec, hw: Blackhole) -> int:
    """The whole grid: binary_ng sends its program to every worker (``eltwise_us``)."""
    return hw.grid_cores


def record(spec: EltwiseSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    x = tensor((1, 1, spec.rows, spec.width), spec.act_dtype)
    scalar = spec.n_inputs == 1
    acts = {f"{o}_activations": activation_text(op for operand, op in spec.activations if operand == o)
            for o in ACTIVATION_OPERANDS}
    attrs = {"binary_op_type": f"BinaryOpType::{spec.kind.upper()}", "is_sfpu": "true" if spec.sfpu else "false",
             **acts, "scalar": "1.0" if scalar else "std::nullopt"}
    return OP_CLASSES["eltwise"][0], attrs, [x] if scalar else [x, x], [x], ""
