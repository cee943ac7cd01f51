"""Unary elementwise ops (ttnn's unary program: ``ttnn.silu``, ``ttnn.sigmoid``, ``ttnn.neg``,
``ttnn.clamp``, ``ttnn.fill`` ... as one ``UnaryDeviceOperation`` with an SFPU op chain): the spec,
its price (``unary_us``), its core split, its op codes and its op-report row (read and written).

The program (tenstorrent/tt-metal ``ttnn/cpp/ttnn/operations/eltwise/unary/device/``): output tiles
split over the worker grid (``split_work_to_cores``); per tile the reader reads one page and waits
for it (``reader_unary.cpp`` @ cbe05e2c: ``async_read`` then ``async_read_barrier``, one page per
barrier), the compute kernel copies it into Dest, runs the op chain on the SFPU and packs it
(``eltwise_sfpu.cpp`` @ 0364ed2a), the writer writes it (``writer_unary.cpp`` @ b9395d6b); input and
output buffers hold two tiles each, so the three overlap. The current program factory creates its
kernels on the whole worker grid (``worker_grid``, cores without tiles get no-op arguments:
``unary_program_factory.cpp`` @ 019b681e, so a 1-tile op reports CORE COUNT 110); the older one
(``reader_unary_interleaved_start_id.cpp``, no ``worker_grid`` attribute) only on the cores with
tiles (@ 689f9bd6).
"""

from __future__ import annotations

import dataclasses
import math
import re

from costmodel.blackhole.kinds.eltwise import SFPU_SIGMOID_BF16_CYCLES, SFPU_SILU_BF16_CYCLES
from costmodel.blackhole.ops import (
    SFPU_ROWS_PER_TILE,
    barrier_read_us,
    cycles_us,
    dram_us,
    launch_us,
    noc_write_wait_cycles,
    overlap,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    l1_resident,
    no_sharding,
    tensor,
)
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat

# ---- its price -------------------------------------------------------------------------------------
# SFPU cycles per tile on a bfloat16 Dest of each op the chain may hold. Sigmoid and SiLU are binary_ng's
# fused-activation costs (kinds.eltwise: the same sigmoid_tile / silu_tile functions; a unary SIGMOID with
# param {4; 0} is vector mode RC, approx off: the same exact kernel). The others are source-derived counts,
# one cycle per SFPU instruction per 32-lane row (SFPU_ROWS_PER_TILE rows a tile), no Blackhole measurement
# found (tt-llk tt_llk_blackhole/common/inc/sfpu/):
#   neg    _calculate_negative_ (ckernel_sfpu_negative.h @ 14caef2e): SFPLOAD, the sign flip, SFPSTORE
#   fill   _calculate_fill_bitcast_ (@ 2f831d96): one SFPSTORE of a value loaded before the loop
#   clamp  calculate_clamp (tt-metal llk_sfpu/ckernel_sfpu_clamp.h @ 0279d9cf): a max then a min body,
#          each SFPLOAD, SFPSWAP, SFPSTORE (ckernel_sfpu_unary_max_min.h @ 040a27c1); its two constant
#          loads run once per tile (VectorMode::None, 32 iterations a call) and are left out
# Ops without a count here (exp, recip: multi-step kernels whose stored versions differ, the older one by
# about 3x) are not priced: the reader says so.
UNARY_SFPU_BF16_CYCLES = {
    "sigmoid": SFPU_SIGMOID_BF16_CYCLES,
    "silu": SFPU_SILU_BF16_CYCLES,
    "neg": 3 * SFPU_ROWS_PER_TILE,
    "fill": 1 * SFPU_ROWS_PER_TILE,
    "clamp": 6 * SFPU_ROWS_PER_TILE,
}
COPY_PASSES = 1  # copy_tile of the input into Dest (its unpack / pack pipeline: one elementwise pass)


def unary_tile_cycles(fit: FitParams, ops: tuple[str, ...]) -> float:
    """Compute-thread cycles per tile: the copy into Dest, one elementwise pass [eltwise_cycles_per_tile],
    then the chain's SFPU ops one after the other (``UNARY_SFPU_BF16_CYCLES``)."""
    validate_ops(ops)
    return COPY_PASSES * fit.eltwise_cycles_per_tile + sum(UNARY_SFPU_BF16_CYCLES[op] for op in ops)


def validate_ops(ops) -> None:
    """Raise ValueError unless ``ops`` is a non-empty tuple of op names with an SFPU cost."""
    if not (isinstance(ops, tuple) and ops):
        raise ValueError(f"ops={ops!r}: expected a non-empty tuple of op names of {sorted(UNARY_SFPU_BF16_CYCLES)}")
    for op in ops:
        if op not in UNARY_SFPU_BF16_CYCLES:
            raise ValueError(f"unary op {op!r}: priced for {sorted(UNARY_SFPU_BF16_CYCLES)}")


def unary_tiles(rows: int, width: int) -> int:
    """Tiles of a [rows, width] tensor in tile layout (the unit the program splits over the cores)."""
    return math.ceil(rows / TILE) * math.ceil(width / TILE)


def unary_us(hw: Blackhole, fit: FitParams, *, ops: tuple[str, ...], rows: int, width: int, act_dtype: str = "bf16",
             whole_grid: bool = True, in_l1: bool = False, out_l1: bool = False, relax: Relax | None = None):
    """ttnn's unary program running the SFPU chain ``ops`` on [rows, width] (bfloat16 Dest), us.

    Tiles over the grid; each core reads its tiles one barrier at a time (``barrier_read_us``: a DRAM
    round trip per tile unless the math hides it), computes ``unary_tile_cycles`` per tile, and all
    cores together move every DRAM tile in and out at the aggregate DRAM rate. The fixed time is binary_ng's
    [launch_eltwise_us] (no unary rows are fitted: the same streaming structure and dispatch), sent to
    the whole grid (``whole_grid``, the current factory) or to the cores with tiles (the older one).
    ``in_l1`` / ``out_l1``: the input / output is L1-interleaved: its pages move over the NoC (each
    barrier a NoC read round trip, the last write a NoC write round trip: the NoC estimator's L1 entries,
    not a DRAM one) and count no DRAM bytes. The writer's last write and its barrier follow the last
    tile's math: a round trip after the overlapped reads and math."""
    if act_dtype != "bf16":
        raise ValueError(f"{act_dtype=}: the unary SFPU costs are sourced for a bfloat16 Dest only")
    act = tile_bytes(act_dtype)
    tiles = unary_tiles(rows, width)
    cores = min(tiles, hw.grid_cores)
    per_core = math.ceil(tiles / cores)
    t_read = barrier_read_us(hw, fit, per_core, per_core * act, cores, groups=per_core, in_l1=in_l1, relax=relax)
    t_math = cycles_us(hw, per_core * unary_tile_cycles(fit, ops))
    dram_tiles = tiles * ((not in_l1) + (not out_l1))
    t_agg = dram_us(hw, fit, dram_tiles, dram_tiles * act) if dram_tiles else 0.0
    sent_to = hw.grid_cores if whole_grid else cores
    # the writer's last tile and its barrier after the last tile's math: a DRAM round trip, or the NoC
    # estimator's write round trip into an L1-interleaved output
    t_tail = cycles_us(hw, noc_write_wait_cycles(hw, act)) if out_l1 else fit.dram_latency_us
    return launch_us(fit, sent_to, fit.launch_eltwise_us) + t_tail + smax(overlap(fit, t_read, t_math), t_agg,
                                                                          relax=relax)


@dataclasses.dataclass(frozen=True)
class UnarySpec:
    """ttnn's unary program on [rows, width]: ``ops`` its SFPU op chain in order (names of
    ``UNARY_SFPU_BF16_CYCLES``); ``whole_grid``: the current program factory, which sends its kernels
    to every worker (False: the older one, only to the cores with tiles); ``in_l1`` / ``out_l1``: the
    input / output is L1-interleaved."""

    ops: tuple[str, ...]
    rows: int
    width: int
    act_dtype: str = "bf16"
    whole_grid: bool = True
    in_l1: bool = False
    out_l1: bool = False
    op_class = "unary"

    def __post_init__(self):
        validate_ops(self.ops)
        for name in ("rows", "width"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name}={v!r}: expected an integer >= 1")
        for name in ("whole_grid", "in_l1", "out_l1"):
            if type(getattr(self, name)) is not bool:  # 1 and None are not flags
                raise ValueError(f"{name}={getattr(self, name)!r}: expected a bool")

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return unary_us(hw, fit, ops=self.ops, rows=self.rows, width=self.width, act_dtype=self.act_dtype,
                        whole_grid=self.whole_grid, in_l1=self.in_l1, out_l1=self.out_l1, relax=relax)


# ---- its op-report row -----------------------------------------------------------------------------
# ttnn's UnaryOpType of each priced op, and the parameter text it is priced with ('*': any)
TTNN_OF_OP = {"sigmoid": "SIGMOID", "silu": "SILU", "neg": "NEG", "fill": "FILL", "clamp": "CLAMP_TSS"}
OP_OF_TTNN = {v: k for k, v in TTNN_OF_OP.items()}
# SIGMOID's {vector mode; approx}: {} (the defaults) or RC (4) exact (0), the kernel the cost is of
PRICED_PARAMS = {"SIGMOID": ("", "4; 0"), "SILU": ("",), "NEG": ("",), "FILL": ("*",), "CLAMP_TSS": ("*",)}
CHAIN_ITEM = r"op_type=UnaryOpType::(\w+);param=\{([^}]*)\}"


def op_chain(ln: ReportLine) -> tuple[str, ...]:
    """The row's SFPU op chain (``op_chain`` attribute) as model op names; Skip for an op without a cost."""
    text = ln.attr("op_chain")
    if text is None:
        raise Skip("unary row without an op_chain attribute")
    found = re.findall(CHAIN_ITEM, text)
    if not found or text.count("UnaryOpType") != len(found):
        raise Skip(f"unary op chain not read ({text})")
    ops = []
    for name, param in found:
        allowed = PRICED_PARAMS.get(name)
        if allowed is None:
            raise Skip(f"unary op {name} not priced (SFPU costs are sourced for {sorted(PRICED_PARAMS)})")
        if "*" not in allowed and param.strip() not in allowed:
            raise Skip(f"unary op {name} with param {{{param}}} not priced (priced: "
                        f"{', '.join('{' + p + '}' for p in allowed)})")
        ops.append(OP_OF_TTNN[name])
    return tuple(ops)


def read(ln: ReportLine, hw: Blackhole, cls: str = "unary") -> UnarySpec:
    """A unary row (tile layout, interleaved, bfloat16 in and out, bfloat16 Dest) as a ``UnarySpec``."""
    ops = op_chain(ln)
    if (ln.attr("fp32_dest_acc_en") or "false") not in ("false", "0"):
        raise Skip("unary op with a Float32 Dest: only the bfloat16-Dest SFPU costs are sourced")
    if (ln.attr("preserve_fp32_precision") or "false") not in ("false", "0"):
        raise Skip("unary op with preserve_fp32_precision: only the bfloat16-Dest SFPU costs are sourced")
    no_sharding(ln, "INPUT_0", "OUTPUT_0")
    act = ln.dtype("INPUT_0", ActivationFormat)
    ln.dtype("OUTPUT_0", ActivationFormat)  # bfloat16 out too: the SFPU costs are sourced for bfloat16
    x = ln.shape("INPUT_0")  # elementwise: batch dims are more rows
    return UnarySpec(ops, x[0] * x[1] * x[2], x[3], act, whole_grid=ln.attr("worker_grid") is not None,
                     in_l1=l1_resident(ln, "INPUT_0"), out_l1=l1_resident(ln, "OUTPUT_0"))


OP_CLASSES = {"unary": ("UnaryDeviceOperation",)}  # first: written
SPECS = (UnarySpec,)


def cores(spec: UnarySpec, hw: Blackhole) -> int:
    """The whole grid (the current factory) or the cores with tiles (``unary_us``)."""
    return hw.grid_cores if spec.whole_grid else min(unary_tiles(spec.rows, spec.width), hw.grid_cores)


def chain_text(ops: tuple[str, ...]) -> str:
    """A unary op chain as ttnn prints it (commas as ';'): SIGMOID, SILU and NEG without a parameter (the
    kernels priced), FILL and CLAMP_TSS with a placeholder value (their SFPU cost does not depend on it)."""
    param = {"FILL": "0", "CLAMP_TSS": "-7; 7"}
    return "{" + "; ".join(f"BasicUnaryWithParam<float; int; unsigned int>(base=BasicUnaryWithParam<float>("
                           f"op_type=UnaryOpType::{TTNN_OF_OP[op]};param={{{param.get(TTNN_OF_OP[op], '')}}}))"
                           for op in ops) + "}"


def record(spec: UnarySpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    memory = {True: "DEV_0_L1_INTERLEAVED", False: "DEV_0_DRAM_INTERLEAVED"}
    x = tensor((1, 1, spec.rows, spec.width), spec.act_dtype, memory=memory[spec.in_l1])
    y = tensor((1, 1, spec.rows, spec.width), spec.act_dtype, memory=memory[spec.out_l1])
    attrs = {"fp32_dest_acc_en": "false", "op_chain": chain_text(spec.ops), "preserve_fp32_precision": "false"}
    if spec.whole_grid:
        attrs["worker_grid"] = f"{{[0-0 - {hw.grid_x - 1}-{hw.grid_y - 1}]}}"  # as the current factory prints it
    return OP_CLASSES["unary"][0], attrs, [x], [y], "HiFi4"
