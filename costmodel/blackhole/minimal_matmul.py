"""``ttnn.experimental.minimal_matmul`` (op code ``MinimalMatmulOp``): its spec, work split and cost.

The program (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/experimental/minimal_matmul/device/
minimal_matmul_program_factory.cpp @ 00077842, the version whose kernels ``dm_in0_sender.cpp`` /
``dm_in1_sender_out.cpp`` serve both senders and receivers, as the real reports list them) runs on the
whole ``compute_with_storage_grid_size`` grid: M blocks (``M_block_size`` tiles, M padded to the
block) over the grid's rows, N blocks over its columns, ``M_blocks_per_core = ceil(M_blocks /
grid_y)``, ``N_blocks_per_core = ceil(N_blocks / grid_x)``; every core steps through its (m, n)
blocks and, for each, all K blocks (``K_block_size`` tiles). Per step the first core of a row reads
the in0 block from DRAM and forwards it along the row, the first core of a column reads the in1
block and forwards it down the column (a chain of unicasts: every core acks every block, so all
cores of a row step together), and each core multiplies its block; a partial last block reads and
multiplies only its valid tiles (``current_M_block_tiles = min(m_tile + M_block_tiles, M_end_tile) -
m_tile`` in the kernels' later versions, dm_in0_sender.cpp / compute.cpp; assumed here for the
version above too). That is the 2D
multicast matmul's block (``ops.mcast_2d_block_us``), repeated per (m, n) block: priced with it,
no parameter of its own. Each M block re-reads in1 and each N block re-reads in0 from DRAM.

Legality (``MinimalMatmulSpec.validate``, the one rule the reader and the plan search apply): the
op's own checks (minimal_matmul_device_operation.cpp, ``MinimalMatmulOp::validate`` @ 0007784228:
block and subblock sizes >= 1, the subblocks dividing the M / N blocks, subblock_h * subblock_w <= the
destination tiles, a grid of at least 2x2 within the device's) and, which the op does not check
before its program is built, its circular buffers fitting one core's L1: the factory above
(``minimal_matmul_factory``) allocates, on every core of the grid, in0 2 x M_block x K_block tiles,
in1 2 x K_block x N_block tiles and the output 2 x M_block x N_block tiles, all three in the
activation's tile format (``input_tile_size``), and an intermediate M_block x N_block tiles in Float32
with fp32_dest_acc_en (else Float16_b). Block sizes need not divide the tile counts (the factory pads
M, K and N up to a block).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel.blackhole.ops import dram_us, launch_us, mcast_2d_block_us, read_us
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.program_config import DEST_TILES
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, smax

OP_CODES = ("MinimalMatmulOp", "MinimalMatmulDeviceOperation")


@dataclasses.dataclass(frozen=True)
class MinimalMatmulSpec:
    """``minimal_matmul([M,K] act, [K,N] weights[, bias [1,N]])`` with a ``MinimalMatmulConfig``.

    Attributes:
      M, K, N: padded sizes in elements (tile multiples).
      m_block, k_block, n_block: the config's block sizes, tiles.
      grid_x, grid_y: ``compute_with_storage_grid_size``.
      weight_dtype, act_dtype, fidelity: formats and math fidelity.
      bias: a bias row is added (one tile row of N read per N block).
      subblock_h, subblock_w: the config's destination-register subblock, tiles (not priced: legality).
      fp32_dest_acc: the compute kernel config's ``fp32_dest_acc_en`` (the intermediate buffer's
        format and the destination tiles: legality only).
    """

    M: int
    K: int
    N: int
    m_block: int
    k_block: int
    n_block: int
    grid_x: int
    grid_y: int
    weight_dtype: str = "bf16"
    act_dtype: str = "bf16"
    fidelity: str = "HiFi4"
    bias: bool = False
    subblock_h: int = 1
    subblock_w: int = 1
    fp32_dest_acc: bool = True
    op_class = "matmul"

    def __post_init__(self):
        for name in ("M", "K", "N"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v > 0 and v % TILE == 0):
                raise ValueError(f"{name}={v!r} must be a positive multiple of {TILE}")
        for name in ("m_block", "k_block", "n_block", "grid_x", "grid_y", "subblock_h", "subblock_w"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name}={v!r} must be an integer >= 1")

    def l1_bytes(self) -> int:
        """L1 per core of the factory's circular buffers, bytes (module docstring)."""
        act = tile_bytes(self.act_dtype)
        interm = tile_bytes("fp32" if self.fp32_dest_acc else "bf16")
        mk, kn, mn = self.m_block * self.k_block, self.k_block * self.n_block, self.m_block * self.n_block
        return 2 * mk * act + 2 * kn * act + 2 * mn * act + mn * interm

    def validate(self, hw: Blackhole) -> None:
        """Raise ValueError (naming the field, its value and what was expected) unless the op accepts
        this config on ``hw`` and its circular buffers fit one core's L1 (module docstring)."""
        if self.m_block % self.subblock_h or self.n_block % self.subblock_w:
            raise ValueError(f"subblock ({self.subblock_h}, {self.subblock_w}) must divide the (M, N) blocks "
                             f"({self.m_block}, {self.n_block})")
        dest = DEST_TILES[bool(self.fp32_dest_acc)]
        if self.subblock_h * self.subblock_w > dest:
            raise ValueError(f"subblock_h * subblock_w = {self.subblock_h * self.subblock_w} > {dest} destination "
                             f"tiles (fp32_dest_acc={self.fp32_dest_acc})")
        if not (2 <= self.grid_x <= hw.grid_x and 2 <= self.grid_y <= hw.grid_y):
            raise ValueError(f"grid {self.grid_x}x{self.grid_y} must be at least 2x2 and fit the {hw.name} compute "
                             f"grid {hw.grid_x}x{hw.grid_y}")
        l1 = self.l1_bytes()
        if l1 > float(hw.l1_bytes_per_core):
            raise ValueError(f"circular buffers need {l1 / 1024:.0f} KB of L1 per core (blocks M {self.m_block}, "
                             f"K {self.k_block}, N {self.n_block}); the core has {hw.l1_bytes_per_core / 1024:.0f} KB")

    def split(self) -> dict[str, int]:
        """The factory's work split: blocks along M, N, K, blocks per core, rows / columns with work."""
        mt, kt, nt = self.M // TILE, self.K // TILE, self.N // TILE
        m_blocks, n_blocks = math.ceil(mt / self.m_block), math.ceil(nt / self.n_block)
        k_blocks = math.ceil(kt / self.k_block)
        mbpc, nbpc = math.ceil(m_blocks / self.grid_y), math.ceil(n_blocks / self.grid_x)
        return {"m_blocks": m_blocks, "n_blocks": n_blocks, "k_blocks": k_blocks, "m_blocks_per_core": mbpc,
                "n_blocks_per_core": nbpc, "rows_used": math.ceil(m_blocks / mbpc),
                "cols_used": math.ceil(n_blocks / nbpc)}

    def cores(self) -> int:
        """Cores the program runs on (and an op report's CORE COUNT): the whole config grid."""
        return self.grid_x * self.grid_y

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return minimal_matmul_us(hw, fit, self, relax=relax)


def minimal_matmul_us(hw: Blackhole, fit: FitParams, spec: MinimalMatmulSpec, *, relax: Relax | None = None):
    """Time of a minimal matmul, us (module docstring): the launch on the whole grid + the slower of
    the pipeline (steps x the 2D block of the average valid block, a round trip to fill, the output
    write) and all DRAM bytes (in1 once per M block, in0 once per N block, bias, output) at the
    aggregate bandwidth."""
    return minimal_matmul_batch_us(hw, fit, [spec], relax=relax)[0]


BATCH_FIELDS = ("M", "K", "N", "grid_x", "grid_y", "weight_dtype", "act_dtype", "fidelity", "bias")


def minimal_matmul_batch_us(hw: Blackhole, fit: FitParams, specs: list[MinimalMatmulSpec], *,
                            relax: Relax | None = None):
    """``minimal_matmul_us`` of several specs that differ only in their blocks, as one array [B], us.

    The blocks enter the price only through the work split (Python integers, per spec); the rest is
    the same arithmetic on arrays of them, so a plan search prices thousands of block choices at the
    cost of one (``report_plan``). Every spec must share ``BATCH_FIELDS`` with the first."""
    if not specs:
        raise ValueError("specs must hold at least one MinimalMatmulSpec, got none")
    s0 = specs[0]
    for s in specs[1:]:
        diff = [f for f in BATCH_FIELDS if getattr(s, f) != getattr(s0, f)]
        if diff:
            raise ValueError(f"specs must differ only in their blocks; {s} differs from the first in {diff}")
    mt, kt, nt = s0.M // TILE, s0.K // TILE, s0.N // TILE
    # padded (with the last spec) to a power of two: eager JAX compiles each op once per array shape
    splits = [s.split() for s in specs]
    splits += splits[-1:] * ((1 << (len(specs) - 1).bit_length()) - len(specs))
    sp = {k: np.asarray([x[k] for x in splits], np.float64) for k in splits[0]}
    act, w = tile_bytes(s0.act_dtype), tile_bytes(s0.weight_dtype)
    # average valid tiles of a block: a partial last block moves and multiplies only its valid tiles
    m_eff, n_eff, k_eff = mt / sp["m_blocks"], nt / sp["n_blocks"], kt / sp["k_blocks"]
    steps = sp["m_blocks_per_core"] * sp["n_blocks_per_core"] * sp["k_blocks"]
    senders = sp["rows_used"] + sp["cols_used"]
    t_block = mcast_2d_block_us(hw, fit, m_tiles=m_eff, k_tiles=k_eff, n_tiles=n_eff, senders=senders,
                                act_dtype=s0.act_dtype, weight_dtype=s0.weight_dtype, fidelity=s0.fidelity,
                                relax=relax)
    busy = sp["rows_used"] * sp["cols_used"]
    out_tiles = sp["m_blocks_per_core"] * sp["n_blocks_per_core"] * m_eff * n_eff
    t_out = read_us(hw, fit, out_tiles, out_tiles * act, busy, relax=relax)
    in1_tiles = sp["m_blocks"] * kt * nt
    act_tiles = sp["n_blocks"] * mt * kt + mt * nt + (sp["m_blocks"] * nt if s0.bias else 0)
    t_agg = dram_us(hw, fit, in1_tiles, in1_tiles * w) + dram_us(hw, fit, act_tiles, act_tiles * act)
    t_pipe = steps * t_block + fit.dram_latency_us + t_out
    return (launch_us(fit, s0.cores(), fit.launch_matmul_us) + smax(t_pipe, t_agg, relax=relax))[:len(specs)]


__all__ = ["BATCH_FIELDS", "OP_CODES", "MinimalMatmulSpec", "minimal_matmul_batch_us", "minimal_matmul_us"]
