"""Tiled data-movement ops of ttnn (reshape, transpose, concat, slice): one spec for the family, the
work unit and reads per unit of each op from its kernels, priced by ``ops.data_movement_us``.

All move 32x32 tiles between interleaved tensors with a reader kernel that waits for each page it
reads (``noc_async_read_barrier`` per page) and a writer kernel; the factories split a work unit
over the cores. Per op (tenstorrent/tt-metal, ttnn/cpp/ttnn/operations/data_movement/, files the
report rows name in DATA MOVEMENT KERNEL SOURCE):

  reshape       reshape_view/device/device/dataflow/reader_reshape_tiled.cpp @ 050f24fa: per output
                tile, one mapping page, then every input tile its segments come from (a tile read
                again unless it is the previous segment's); output tiles split over the cores
  transpose_hc  transpose/device/kernels/dataflow/reader_unary_transpose_hc_interleaved_tiled_padding_
                aware.cpp @ 022c2361: one input tile per blocking read, the writer scatters its face
                rows; input tiles split over the cores, the program sent to the whole grid (CORE
                COUNT 64 for 24-38 tiles on a 64-core grid: bh_64_clip_encoder_1.csv)
  transpose_wh  transpose_wh compute kernel + reader_unary_transpose_wh_interleaved_start_id.cpp: one
                tile read, one transpose pass, one tile written; tiles over the whole grid
  concat        one read per output tile from the input that holds it; output tiles over the cores
  slice         one read per output tile (tile-aligned slices read only the tiles they keep)

Op class 'data_movement' (the launch is [launch_heads_us], the fixed time of a data-movement
program, which the heads ops share).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel.blackhole.ops import data_movement_us
from costmodel.blackhole.params import FitParams
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax

KINDS = ("reshape", "transpose_hc", "transpose_wh", "concat", "slice")
OP_CODES = {"ReshapeDeviceOperation": "reshape", "ReshapeViewDeviceOperation": "reshape",
            "TransposeDeviceOperation": "transpose", "ConcatDeviceOperation": "concat",
            "SliceDeviceOperation": "slice"}
# output tiles above which a reshape's tile map is not enumerated (the map is per output tile x row)
RESHAPE_MAP_MAX_TILES = 200_000


@dataclasses.dataclass(frozen=True)
class DataMovementSpec:
    """One tiled data-movement op.

    Attributes:
      kind: one of ``KINDS``.
      units: work units the factory splits over the cores (output tiles; input tiles for transpose_hc).
      reads_per_unit: blocking tile reads per unit (mean over units).
      dram_tiles: tiles read from and written to DRAM in all.
      act_dtype: the tensors' storage format.
      in_l1: the reads come from L1-interleaved tensors.
    """

    kind: str
    units: int
    reads_per_unit: float
    dram_tiles: int
    act_dtype: str = "bf16"
    in_l1: bool = False
    op_class = "data_movement"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"kind={self.kind!r} unknown; expected one of {list(KINDS)}")
        if not (isinstance(self.units, int) and self.units >= 1):
            raise ValueError(f"units={self.units!r} must be an integer >= 1")
        if not (math.isfinite(self.reads_per_unit) and self.reads_per_unit >= 1):
            raise ValueError(f"reads_per_unit={self.reads_per_unit!r} must be finite and >= 1")
        if not (isinstance(self.dram_tiles, int) and self.dram_tiles >= 0):
            raise ValueError(f"dram_tiles={self.dram_tiles!r} must be an integer >= 0")

    def whole_grid(self) -> bool:
        """The transpose programs are sent to the whole grid, cores without tiles included."""
        return self.kind.startswith("transpose")

    def cores(self, hw: Blackhole) -> int:
        """Cores the program is sent to (an op report's CORE COUNT)."""
        return hw.grid_cores if self.whole_grid() else min(self.units, hw.grid_cores)

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return data_movement_us(hw, fit, units=self.units, reads_per_unit=self.reads_per_unit,
                                dram_tiles=self.dram_tiles, act_dtype=self.act_dtype, in_l1=self.in_l1,
                                passes=1 if self.kind == "transpose_wh" else 0,
                                cores=self.cores(hw) if self.whole_grid() else None, relax=relax)


def tiles(padded: tuple[int, ...]) -> int:
    """Tiles of a TILE-layout tensor of padded shape [..., Y, X] (tile multiples)."""
    *lead, y, x = padded
    return math.prod(lead) * (y // TILE) * (x // TILE)


def reshape_reads_per_tile(in_logical: tuple[int, ...], out_logical: tuple[int, ...]) -> float:
    """Mean blocking reads per output tile of a tiled reshape (reader_reshape_tiled.cpp): the mapping
    page plus one read per run of segments from the same input tile, over the output tile's rows in
    order. Each row's 32-column segment starts and ends in an input tile (both ends counted; a
    segment wider than an input row is counted by its ends only).

    Shapes: logical [..., H, W] of the input and the output (same element count).
    """
    if math.prod(in_logical) != math.prod(out_logical):
        raise ValueError(f"reshape {in_logical} -> {out_logical}: element counts differ")
    *lo, ho, wo = out_logical
    hi, wi = in_logical[-2:]
    bo = math.prod(lo)
    hto, wto = math.ceil(ho / TILE), math.ceil(wo / TILE)
    hti, wti = math.ceil(hi / TILE), math.ceil(wi / TILE)
    n_tiles = bo * hto * wto
    if n_tiles > RESHAPE_MAP_MAX_TILES:
        raise ValueError(f"reshape to {out_logical}: {n_tiles} output tiles exceed {RESHAPE_MAP_MAX_TILES}")
    b, th, tw, r = np.meshgrid(np.arange(bo), np.arange(hto), np.arange(wto), np.arange(TILE), indexing="ij")
    row = th * TILE + r
    c0 = tw * TILE
    c1 = np.minimum(c0 + TILE, wo) - 1
    valid = (row < ho) & (c0 < wo)
    ids = []
    for c in (c0, c1):
        f = (b * ho + row) * wo + c
        bi_, rem = np.divmod(f, hi * wi)
        ri, ci = np.divmod(rem, wi)
        ids.append((bi_ * hti + ri // TILE) * wti + ci // TILE)
    seq = np.stack(ids, axis=-1).reshape(bo, hto, wto, 2 * TILE)  # per output tile: row ends, in order
    ok = np.repeat(valid, 2, axis=-1).reshape(seq.shape)
    # a read per change of input tile along the sequence (invalid rows repeat the previous id)
    seq = np.where(ok, seq, -1)
    first = ok[..., 0]
    changes = np.sum((seq[..., 1:] != seq[..., :-1]) & ok[..., 1:], axis=-1) + first
    return float(1.0 + changes.mean())  # + the mapping page


__all__ = ["KINDS", "OP_CODES", "RESHAPE_MAP_MAX_TILES", "DataMovementSpec", "reshape_reads_per_tile", "tiles"]
