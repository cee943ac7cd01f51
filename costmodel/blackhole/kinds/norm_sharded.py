"""``ttnn.rms_norm`` on a width-sharded decode row (``LayerNormShardedMultiCoreProgramConfig``): the spec,
its price (``rms_norm_sharded_us``), its core split and its op-report row (read through the norm kind's
reader, which hands the sharded program config here, and written).

The program, as its kernels run it (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/normalization/layernorm/
device/: the factory ``layernorm_op_multi_core_sharded.cpp`` @ 0324d68d with ``sharded_layernorm_factory_
helpers.cpp`` @ 01507e46, the readers ``kernels/dataflow/reader_mcast_sender_unary_sharded_ln.cpp`` @ 00d8eec3
and ``reader_mcast_receiver_unary_sharded_ln.cpp`` @ 0277e5a6, the writer ``writer_unary_sharded_ln_rm_gb.cpp``
@ 09b4c34b, the compute kernel ``kernels/compute/layernorm_sharded.cpp`` @ 00b0fa3f with RMSNORM defined), for
one tile row (block_h 1) width-sharded over a gx x gy grid, block_w tiles per core:

* every core squares its block_w tiles and reduces them to one partial tile (2 passes per tile), then
  increments a semaphore on the sender, core (0, 0); the sender waits for all of them and multicasts VALID to
  the grid (a barrier over every core's partial);
* the first-stage reducers, column x = 0 (one per grid row; the sender alone on a one-row grid), read the
  partial tiles of their row (gx, or all n on a one-row grid), back to back and one barrier, and reduce them;
  with more than one row (the two-stage reduce: ``should_use_two_stage_reduce``, which also asks for a row-major
  shard orientation; a report row does not show the orientation, so row-major is assumed) each row reducer
  then increments a second semaphore on the sender, which reads the gy - 1 row results and reduces them;
* the sender adds epsilon and takes the reciprocal square root (one tile), reads that tile back into the
  global buffer over the NoC (one read and barrier), and multicasts it, then a semaphore, to the other n - 1
  cores;
* every core multiplies its block_w tiles by the statistic, then by gamma (2 passes per tile);
* meanwhile the writer reads gamma, a [W/32, 32] row-major stick per tile, one 64 B DRAM read and barrier per
  tile (then a 32 B local copy): block_w DRAM round trips, which the final gamma pass waits for.

Priced: the norm class's fixed time [launch_norm_us] on the compute's path (the writer starts with the
kernel); each pass [eltwise_cycles_per_tile] (an intermediate-
format pass, ``ops.intermediate_pass_cycles``; the epsilon add and the rsqrt of the one statistic tile are
two passes); each NoC step at tt-metal's NoC estimator's Blackhole measurements ([BH-noc-est] in
``costmodel.hardware``): a semaphore increment as a write and its acknowledgement [noc_write_round_trip_cycles]
(the waiting core sees it one way, so an upper bound), a multicast and its acknowledgements
(``ops.noc_mcast_cycles``), the gathers and the read-back (``ops.noc_reads_cycles``); gamma's sticks at the
fitted DRAM round trip [dram_latency_us]; the x^2, reduce, * rstd and * gamma passes' math past the unpacker
at their fidelity (``ops.fidelity_tile_cycles``, as the interleaved norm's). Not priced: the atomic increments
queuing at the sender.
"""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.ops import (
    cycles_us,
    fidelity_tile_cycles,
    intermediate_pass_cycles,
    launch_us,
    noc_mcast_cycles,
    noc_reads_cycles,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import ReportLine, Skip, compute_kernel, row_fp32_dest_acc, tensor
from costmodel.hardware import TILE, Blackhole, fidelity_passes, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat

PROGRAM_CONFIG = "LayerNormShardedMultiCoreProgramConfig"
# the LayerNorm device operation's op codes (the first written): the norm kind's op class (kinds.norm.OP_CLASSES),
# declared here, where this program's rows are written too, since the norm kind imports this module
LAYERNORM_CODES = ("LayerNormDeviceOperation", "LayerNorm")
SEMAPHORE_BYTES = 4  # a semaphore multicast: one 32-bit word


# ---- its price -------------------------------------------------------------------------------------
def rms_norm_sharded_us(hw: Blackhole, fit: FitParams, *, grid: tuple[int, int], block_w: int,
                        fp32_dest_acc: bool = False, fidelity: str = "HiFi4", relax: Relax | None = None):
    """``ttnn.rms_norm`` of one tile row width-sharded over ``grid`` (gx, gy) cores, ``block_w`` tiles each, us
    (the module docstring's chain). Every step moves or computes intermediate-format tiles (the partials,
    the statistic), whatever the activation's format."""
    gx, gy = grid
    n = gx * gy
    two_stage = gx > 1 and gy > 1
    first = gx if two_stage else n  # partial tiles a first-stage reducer gathers (its own among them)
    partial = tile_bytes("fp32" if fp32_dest_acc else "bf16")  # the partials live in the intermediate format
    p = intermediate_pass_cycles(fit, fp32_dest_acc=fp32_dest_acc)

    def fpu(op):  # a pass whose FPU op runs fidelity phases
        return intermediate_pass_cycles(fit, fp32_dest_acc=fp32_dest_acc,
                                        fidelity_cycles=fidelity_tile_cycles((op,), fidelity))

    chain = (block_w * (fpu("mul") + fpu("reduce_sum"))  # x^2 and the row reduce of the core's block
             + hw.noc_write_round_trip_cycles + noc_mcast_cycles(hw, n - 1, SEMAPHORE_BYTES)  # partial ready; VALID
             + noc_reads_cycles(hw, first, partial) + first * p)  # the row's partials, reduced
    if two_stage:  # the row results to the sender, reduced there
        chain = (chain + hw.noc_write_round_trip_cycles + noc_reads_cycles(hw, gy - 1, partial) + (gy - 1) * p)
    chain = (chain + 2 * p  # + epsilon, rsqrt
             + noc_reads_cycles(hw, 1, partial)  # the statistic read back into the global buffer
             + noc_mcast_cycles(hw, n - 1, partial) + noc_mcast_cycles(hw, n - 1, SEMAPHORE_BYTES)  # to every core
             + block_w * fpu("mul"))  # x * rstd
    # the writer's blocking 64 B stick reads run from the kernel's start, beside the compute's fixed time
    gamma = block_w * fit.dram_latency_us
    return (launch_us(fit, n, 0.0) + smax(fit.launch_norm_us + cycles_us(hw, chain), gamma, relax=relax)
            + cycles_us(hw, block_w * fpu("mul")))  # * gamma


@dataclasses.dataclass(frozen=True)
class NormShardedSpec:
    """``ttnn.rms_norm`` of one tile row [32, gx * gy * block_w * 32] width-sharded over a ``grid`` of (gx, gy)
    cores, ``block_w`` tiles per core (``LayerNormShardedMultiCoreProgramConfig``, block_h 1), gamma a row-major
    stick in DRAM; ``fp32_dest_acc``: Float32 intermediates; ``fidelity``: the math fidelity (ttnn's default
    HiFi4)."""

    grid: tuple[int, int]
    block_w: int
    act_dtype: str = "bf16"
    fp32_dest_acc: bool = False
    fidelity: str = "HiFi4"
    op_class = "norm"

    def __post_init__(self):
        g = self.grid
        if (not isinstance(g, tuple) or len(g) != 2
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in g)):
            raise ValueError(f"grid={g!r}; expected (gx, gy), two positive ints")
        if g == (1, 1):
            raise ValueError("grid=(1, 1); expected at least two cores (the priced chain reduces across cores)")
        if not isinstance(self.block_w, int) or isinstance(self.block_w, bool) or self.block_w < 1:
            raise ValueError(f"block_w={self.block_w!r}; expected a positive int (tiles per core)")
        fidelity_passes(self.fidelity)  # ValueError naming the field for anything but a MathFidelity name

    @property
    def width(self) -> int:
        return self.grid[0] * self.grid[1] * self.block_w * TILE

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return rms_norm_sharded_us(hw, fit, grid=self.grid, block_w=self.block_w, fp32_dest_acc=self.fp32_dest_acc,
                                   fidelity=self.fidelity, relax=relax)


# ---- its op-report row -----------------------------------------------------------------------------
def read(ln: ReportLine, hw: Blackhole) -> NormShardedSpec:
    """A ``LayerNormDeviceOperation`` row with a ``LayerNormShardedMultiCoreProgramConfig`` as a
    ``NormShardedSpec``: RMSNorm of one tile row, width-sharded in L1 in and out, a row-major gamma, no
    residual, beta or Welford; other forms are skipped with the reason."""
    pc = ln.attr("program_config") or ""
    if (ln.attr("norm_type") or "") != "LayerNormType::RMSNORM":
        raise Skip(f"sharded {ln.attr('norm_type')} (the model prices the sharded program's RMSNorm)")
    for key, want in (("use_welford", 0), ("inplace", 0)):
        if ln.config_flag(pc, key, default=want) != want:
            raise Skip(f"sharded RMSNorm with {key}=1 (the model prices {key}=0)")
    if ln.config_int(pc, "block_h") != 1:
        raise Skip(f"sharded RMSNorm with block_h {ln.config_int(pc, 'block_h')} (the model prices one tile row)")
    for pre in ("INPUT_0", "OUTPUT_0"):
        if ln.memory(pre) != "DEV_0_L1_WIDTH_SHARDED":
            raise Skip(f"sharded RMSNorm with {pre} {ln.memory(pre).removeprefix('DEV_0_')} (the model prices an "
                       "L1 width-sharded row in and out)")
    x = ln.shape("INPUT_0")
    if x[0] * x[1] * x[2] != TILE:
        raise Skip(f"sharded RMSNorm of {x[0] * x[1] * x[2]} padded rows (the model prices one tile row)")
    if not ln.has("INPUT_1") or ln.logical("INPUT_1") == ln.logical("INPUT_0") or ln.has("INPUT_2"):
        raise Skip("sharded RMSNorm with a residual, no gamma or a beta (the model prices x and gamma)")
    if ln.get("INPUT_1_LAYOUT") != "ROW_MAJOR" or "DRAM" not in ln.memory("INPUT_1"):
        raise Skip("sharded RMSNorm with a tiled or L1 gamma (the model prices the row-major gamma writer)")
    grid = ln.config_grid(pc, hw)
    if grid is None:
        raise ln.fail("ATTRIBUTES", f"{PROGRAM_CONFIG} without compute_with_storage_grid_size")
    if grid == (1, 1):
        raise Skip("sharded RMSNorm on one core (no reduce across cores: the price's handshakes would not run)")
    block_w = ln.config_int(pc, "block_w")
    if grid[0] * grid[1] * block_w * TILE != x[3]:
        raise ln.fail(ln.dim_col("INPUT_0", "X"), f"width {x[3]} != {grid[0]} x {grid[1]} cores x block_w "
                                                  f"{block_w} x {TILE}")
    return NormShardedSpec(grid, block_w, ln.dtype("INPUT_0", ActivationFormat), row_fp32_dest_acc(ln),
                           ln.fidelity())


OP_CLASSES: dict[str, tuple[str, ...]] = {}  # its rows are the norm kind's op class, read there
SPECS = (NormShardedSpec,)


def cores(spec: NormShardedSpec, hw: Blackhole) -> int:
    """The shard grid: every core holds a block of the row."""
    return spec.grid[0] * spec.grid[1]


def record(spec: NormShardedSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    gx, gy = spec.grid
    x = tensor((1, 1, TILE, spec.width), spec.act_dtype, memory="DEV_0_L1_WIDTH_SHARDED")
    gamma = tensor((1, 1, spec.width // TILE, TILE), spec.act_dtype, "ROW_MAJOR")
    pc = (f"{PROGRAM_CONFIG}(compute_with_storage_grid_size={gx}-{gy};subblock_w={spec.block_w};block_h=1;"
          f"block_w={spec.block_w};inplace=0;legacy_reduction=0;legacy_rsqrt=0;use_welford=0)")
    attrs = {"norm_type": "LayerNormType::RMSNORM", "eps": "1e-05", "program_config": pc,
             "distributed_norm_stage": "DistributedLayerNormStage::NOT_DISTRIBUTED",
             "compute_kernel_config": compute_kernel(spec.fidelity, fp32_dest_acc=spec.fp32_dest_acc)}
    return LAYERNORM_CODES[0], attrs, [x, gamma], [x], spec.fidelity
