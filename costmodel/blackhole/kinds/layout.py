"""Layout conversions (``ttnn.tilize``, ``ttnn.tilize_with_val_padding``, ``ttnn.untilize``,
``ttnn.untilize_with_unpadding``) on ttnn's multi-core split-rows programs: the spec, its price
(``layout_us``), its core split, its op codes and how it reads an op-report row.

A row-major tensor is a list of sticks (one row of the last dim each); a tiled one is 32x32 tiles. The
programs priced here split the tensor's tile rows ("blocks": 32 sticks x the whole padded width) over
the cores with ``split_blocks_for_tilize`` (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/core/
work_split/work_split_tilize.hpp: ceil(blocks / grid) blocks per core, ceil(blocks / that) cores, the
last one the remainder), and per block run a reader, one compute pass per tile (tilize / untilize) and a
writer, each block handed over through circular buffers of one block (ttnn/cpp/ttnn/operations/
data_movement/, the files a row's DATA MOVEMENT KERNEL SOURCE names):

  tilize        reader_unary_stick_layout_split_rows_multicore.cpp @ d4a17b9a (and its _interleaved twin
                @ c0cef43f): per block the 32 sticks are read back to back, then one
                ``noc_async_read_barrier``; writer_unary_interleaved_start_id.cpp @ 298edc3b: one page
                write per tile (``noc_async_writes_flushed``, no acknowledgement waited for)
  tilize with   reader_unary_pad_dims_split_rows_multicore.cpp @ 04b34050: the block's real sticks read
  val padding   back to back, the padding columns of each and the padding rows of the block filled with
                the pad value by 32-bit stores of the reader's RISC (``fill_l1_range``), one barrier per
                block (older versions barrier per stick: ruled out by the rows, e.g. Qwen3.6's 33-row
                tilize on 2 cores takes less than 32 DRAM round trips would)
  untilize      reader_unary_start_id.cpp: one tile read and waited for at a time, or, for a height-
                sharded input, reader_unary_sharded.cpp (no NoC traffic: one core per shard);
                writer_unary_stick_layout_split_rows_multi_core.cpp @ 02a62fe7: the block's 32 sticks
                written back to back, then one ``noc_async_write_barrier``
  untilize      reader_unary_interleaved_start_id.cpp (a tile at a time, waited for);
  with          writer_unary_stick_layout_split_rows_multicore.cpp @ 84718237: each real stick written
  unpadding     and waited for (``noc_async_write_barrier`` in the stick loop), so each costs a NoC
                write round trip; padding rows are not written

The block programs (``LayoutBlockSpec``), which the factories pick for wide tensors, cut each slice into
square blocks of tiles, one per core (``block_edge``: the factories' ``compute_ncores_wh``), and their
row-major side waits for each stick: the both-dims tilize reader after each stick read, the wh untilize
writer after each stick write. The tilize of a sharded tensor is not priced: the reader says so.

Known misses (held-out rows: tests/test_costmodel_layout.py and the report's held-out table): a version
of the padding reader filled with element-sized (16-bit) stores, twice the 32-bit count (the CLIP
report's older build), and the block programs' one-row tilize_with_val_padding, whose padding fill takes
about twice the 32-bit stores' time (fill_with_val in the both-dims reader); an fp32 tilize, whose writer
and compute threads run longer than a pass and a write per tile; and the fixed time, the eltwise programs' [launch_eltwise_us], which exceeds a one-block
program's.

Op class 'layout' (the launch is [launch_eltwise_us]: these are ttnn's unary streaming programs, a
reader, a one-pass compute kernel and a writer, as ``data_movement.UNARY_PROGRAM_KINDS`` are).
"""

from __future__ import annotations

import dataclasses
import math
import re

import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.ops import (
    RISC_STORE_LOOP_CYCLES,
    barrier_read_us,
    cycles_us,
    dram_us,
    launch_us,
    noc_write_wait_cycles,
    overlap,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import ReportLine, Skip, l1_resident
from costmodel.hardware import TILE, Blackhole, element_bytes, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.validation import check_choice
from jaxref.vocabulary import LayoutFormat

KINDS = ("tilize", "untilize")
OP_CODES = {"TilizeWithValPaddingDeviceOperation": "tilize", "TilizeDeviceOperation": "tilize",
            "UntilizeWithUnpaddingDeviceOperation": "untilize", "UntilizeDeviceOperation": "untilize"}
# the dataflow kernels of the programs priced (file stems, as DATA MOVEMENT KERNEL SOURCE lists them)
STICK_READERS = ("reader_unary_stick_layout_split_rows_multicore", "reader_unary_stick_layout_split_rows_interleaved",
                 "reader_unary_pad_dims_split_rows_multicore")
TILE_READERS = ("reader_unary_start_id", "reader_unary_interleaved_start_id", "reader_unary_sharded")
STICK_WRITERS = {"writer_unary_stick_layout_split_rows_multi_core": False,  # one barrier per block
                 "writer_unary_stick_layout_split_rows_multicore": True}  # a barrier per stick
# the block programs' row-major-side kernels (the both-dims tilize reader, the wh untilize writer)
BLOCK_KERNELS = ("reader_unary_pad_multicore_both_dims", "writer_unary_stick_layout_wh_multicore")
FILL_BYTES_PER_STORE = 4  # fill_l1_range's interior stores are 32-bit


@dataclasses.dataclass(frozen=True)
class LayoutSpec:
    """One tilize or untilize on the split-rows program.

    Attributes:
      kind: 'tilize' (sticks -> tiles) or 'untilize' (tiles -> sticks).
      blocks: tile rows in all (32 sticks of the padded width each): the unit split over the cores.
      block_tiles: tiles across a block (the padded width / 32).
      stick_bytes: bytes of one real stick (the logical width).
      sticks: real sticks in all (the row-major side's pages).
      core_loads: (blocks, real sticks, padding bytes filled) of each core that may bind.
      act_dtype: the tensor's format (both sides).
      sticks_in_l1, tiles_in_l1: the row-major / tiled side is an L1 tensor (interleaved or sharded),
        not DRAM.
      shard_cores: cores of a height-sharded tiled input (untilize: one core per shard, no reads); 0 for
        an interleaved one (the blocks split over the grid).
      stick_barrier: untilize: the writer waits for each stick (untilize_with_unpadding's writer), not
        once per block.
    """

    kind: str
    blocks: int
    block_tiles: int
    stick_bytes: int
    sticks: int
    core_loads: tuple[tuple[int, int, int], ...]
    act_dtype: str = "bf16"
    sticks_in_l1: bool = False
    tiles_in_l1: bool = False
    shard_cores: int = 0
    stick_barrier: bool = False
    op_class = "layout"

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        check_choice("act_dtype", self.act_dtype, LayoutFormat)
        for name in ("blocks", "block_tiles", "stick_bytes", "sticks"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name}={v!r} must be an integer >= 1")
        if not (isinstance(self.shard_cores, int) and self.shard_cores >= 0):
            raise ValueError(f"shard_cores={self.shard_cores!r} must be an integer >= 0")
        if self.shard_cores and self.kind != "untilize":
            raise ValueError(f"shard_cores={self.shard_cores}: only an untilize's tiled input is read sharded")
        if self.shard_cores and self.blocks % self.shard_cores:
            raise ValueError(f"shard_cores={self.shard_cores} does not divide blocks={self.blocks}: one core "
                             "per shard of whole blocks")
        if self.stick_barrier and self.kind != "untilize":
            raise ValueError("stick_barrier is a property of the untilize writer")
        if not self.core_loads:
            raise ValueError("core_loads is empty; expected (blocks, real sticks, padding bytes) per candidate core")
        for load in self.core_loads:
            if len(load) != 3 or not all(isinstance(x, int) and x >= 0 for x in load) or load[0] < 1:
                raise ValueError(f"core_loads entry {load!r} must be (blocks >= 1, sticks >= 0, padding bytes >= 0)")

    def cores(self, hw: Blackhole) -> int:
        """Cores the program runs on: one per shard, else ``split_blocks_for_tilize``'s count."""
        return self.shard_cores or split_blocks(self.blocks, hw.grid_cores)[1]

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return layout_us(hw, fit, self, relax=relax)


def split_blocks(blocks: int, grid_cores: int) -> tuple[int, int]:
    """(blocks per core, cores) of ``split_blocks_for_tilize``: ceil(blocks / grid) a core, the last
    core the remainder."""
    per_core = math.ceil(blocks / grid_cores)
    return per_core, math.ceil(blocks / per_core)


def block_edge(width_tiles: int, height_tiles: int, grid_cores: int) -> int:
    """The block programs' square block edge in tiles (``compute_ncores_wh`` / ``closest_square_larger_
    than_b``, work_split_tilize.hpp @ 02ed05c7): from the floor of the square root of ceil(tiles /
    grid) up, the first edge s whose ceil(W / s) x ceil(H / s) blocks are fewer than the grid's cores
    (1 if none is)."""
    per_core = math.ceil(width_tiles * height_tiles / grid_cores)
    root = math.isqrt(per_core)
    fits = lambda e: math.ceil(width_tiles / e) * math.ceil(height_tiles / e) < grid_cores
    if root * root == per_core and fits(root):
        return root
    return next((e for e in range(root + 1, width_tiles * height_tiles + 1) if fits(e)), 1)


@dataclasses.dataclass(frozen=True)
class LayoutBlockSpec:
    """One tilize or untilize on the block program: each [H, W]-tile slice cut into square blocks of
    ``block_edge`` tiles (cliff blocks at the right and bottom edges), one block per core, every core
    running its block in every slice (tilize_with_val_padding / tilize block factories,
    untilize(_with_unpadding) block factories; kernels ``reader_unary_pad_multicore_both_dims.cpp``,
    ``writer_unary_interleaved_start_id_wh.cpp``, ``reader_unary_interleaved_wh_multicore.cpp``,
    ``writer_unary_stick_layout_wh_multicore.cpp``: the row-major side's reader or writer waits for
    each stick, a block's width of it).

    Attributes:
      kind: 'tilize' or 'untilize'.
      width_tiles, height_tiles: tiles across and tile rows down one slice (the padded [-1] and [-2]).
      slices: the product of the leading dims.
      rows: real rows of a slice (the logical [-2]).
      stick_bytes: bytes of one real row (the logical width).
      act_dtype, sticks_in_l1, tiles_in_l1: as ``LayoutSpec``'s.
      pad: the tilize fills the padding (tilize_with_val_padding).
    """

    kind: str
    width_tiles: int
    height_tiles: int
    slices: int
    rows: int
    stick_bytes: int
    act_dtype: str = "bf16"
    sticks_in_l1: bool = False
    tiles_in_l1: bool = False
    pad: bool = False
    op_class = "layout"

    def __post_init__(self):
        check_choice("kind", self.kind, KINDS)
        check_choice("act_dtype", self.act_dtype, LayoutFormat)
        for name in ("width_tiles", "height_tiles", "slices", "rows", "stick_bytes"):
            v = getattr(self, name)
            if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
                raise ValueError(f"{name}={v!r} must be an integer >= 1")
        if self.rows > TILE * self.height_tiles:
            raise ValueError(f"rows={self.rows} exceed the {self.height_tiles} tile rows of a slice")
        if self.pad and self.kind != "tilize":
            raise ValueError("pad is a property of tilize_with_val_padding")

    def edge(self, hw: Blackhole) -> int:
        return block_edge(self.width_tiles, self.height_tiles, hw.grid_cores)

    def cores(self, hw: Blackhole) -> int:
        """One block per core: ceil(W / s) x ceil(H / s)."""
        e = self.edge(hw)
        return math.ceil(self.width_tiles / e) * math.ceil(self.height_tiles / e)

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        """The launch and the top-left block's core (a full block, holding the slice's first, real rows),
        or the DRAM floor (``dram_floor_us``)."""
        e, cores = self.edge(hw), self.cores(hw)
        elem = element_bytes(self.act_dtype)
        tile_rows, row_tiles = min(e, self.height_tiles), min(e, self.width_tiles)
        real = sum(min(TILE, max(0, self.rows - TILE * j)) for j in range(tile_rows))
        width = row_tiles * TILE * elem
        stick = min(width, self.stick_bytes)
        pad = (real * (width - stick) + (TILE * tile_rows - real) * width) if self.pad else 0
        chain = chain_us(hw, fit, kind=self.kind, act_dtype=self.act_dtype, blocks=tile_rows * self.slices,
                         row_tiles=row_tiles, sticks=real * self.slices, stick_bytes=stick, pad_bytes=pad * self.slices,
                         sticks_in_l1=self.sticks_in_l1, tiles_in_l1=self.tiles_in_l1, tile_reads=True,
                         stick_barrier=True, cores=cores, relax=relax)
        floor = dram_floor_us(hw, fit, sticks=self.rows * self.slices, stick_bytes=self.stick_bytes,
                              tiles=self.width_tiles * self.height_tiles * self.slices, act_dtype=self.act_dtype,
                              sticks_in_l1=self.sticks_in_l1, tiles_in_l1=self.tiles_in_l1)
        return launch_us(fit, cores, fit.launch_eltwise_us) + smax(chain, floor, relax=relax)


def block_sticks(logical: tuple[int, ...], padded: tuple[int, ...]) -> np.ndarray:
    """Real sticks of each block (tile row) of a tensor of logical / padded [W, Z, Y, X], in order:
    min(32, Y - 32 j) for the j-th tile row of each [Y, X] slice."""
    y = logical[-2]
    rows = padded[-2] // TILE
    per_slice = np.clip(y - TILE * np.arange(rows), 0, TILE)
    return np.tile(per_slice, math.prod(padded[:-2]))


def core_loads(sticks: np.ndarray, *, per_core: int, stick_bytes: int, padded_stick_bytes: int,
               pad: bool) -> tuple[tuple[int, int, int], ...]:
    """(blocks, real sticks, padding bytes) of each distinct core load, the cores taking ``per_core``
    consecutive blocks (the last the rest). ``pad``: the reader fills the padding (tilize_with_val_
    padding): each real stick's padding columns and each padding row of the whole padded width."""
    n = len(sticks)
    starts = np.arange(0, n, per_core)
    counts = np.minimum(per_core, n - starts)
    real = np.add.reduceat(sticks, starts)
    pad_bytes = (real * (padded_stick_bytes - stick_bytes) + (TILE * counts - real) * padded_stick_bytes) if pad \
        else np.zeros_like(real)
    return tuple(sorted({(int(c), int(r), int(p)) for c, r, p in zip(counts, real, pad_bytes, strict=True)}))


# ---- its price -------------------------------------------------------------------------------------
def chain_us(hw: Blackhole, fit: FitParams, *, kind: str, act_dtype: str, blocks: int, row_tiles: int, sticks: int,
             stick_bytes: int, pad_bytes: int, sticks_in_l1: bool, tiles_in_l1: bool, tile_reads: bool,
             stick_barrier: bool, cores: int, relax: Relax | None):
    """One core's time on ``blocks`` tile rows of ``row_tiles`` tiles, ``sticks`` real sticks of
    ``stick_bytes`` and ``pad_bytes`` of padding filled, us.

    Per block the reader, the compute pass and the writer run one after another (the circular buffers
    hold one block), and successive blocks overlap: the first block costs the sum of its stages, each
    further one their overlap (``overlap``).
      reader (tilize): the sticks issued back to back at ``hw.noc_write_issue_cycles`` each (an address
      generated and a command-buffer issue, as a write's) or a link's rate, and per block one round trip
      (a DRAM round trip [dram_latency_us], or ``hw.noc_l1_read_round_trip_cycles`` from L1) overlapped
      with the block's padding fill (``RISC_STORE_LOOP_CYCLES`` per 32-bit store), which the reader runs
      before it waits; where the reader waits for each stick (``stick_barrier``: the block programs), a
      round trip per stick and the fill after it;
      reader (untilize): a blocking tile read per tile (``barrier_read_us``), none from a shard;
      compute: one pass per tile ([eltwise_cycles_per_tile], scaled by the tile's bytes for fp32);
      writer (tilize): one tile write per tile at ``hw.noc_write_issue_cycles`` or a link's rate;
      writer (untilize): the sticks at that rate, then a write round trip (``hw.noc_write_round_trip_
      cycles``, a stick's bytes past ``NOC_EST_BYTES`` at a link's rate) per block; where the writer waits
      for each stick (``stick_barrier``), a round trip per stick.
    """
    link = hw.noc_bytes_per_cycle_per_link
    act = tile_bytes(act_dtype)
    tiles = blocks * row_tiles
    compute = cycles_us(hw, tiles * fit.eltwise_cycles_per_tile * act / tile_bytes("bf16"))
    if kind == "tilize":
        trip = cycles_us(hw, hw.noc_l1_read_round_trip_cycles) if sticks_in_l1 else fit.dram_latency_us
        fill = cycles_us(hw, RISC_STORE_LOOP_CYCLES * pad_bytes / FILL_BYTES_PER_STORE)
        if stick_barrier:
            reads = sticks * (trip + cycles_us(hw, stick_bytes / link)) + fill
        else:
            issue = cycles_us(hw, sticks * jnp.maximum(hw.noc_write_issue_cycles, stick_bytes / link))
            # the fills run between issuing a block's reads and waiting for them, so they hide its round trip
            reads = issue + blocks * overlap(fit, trip, fill / blocks)
        stages = (reads, compute, cycles_us(hw, tiles * jnp.maximum(hw.noc_write_issue_cycles, act / link)))
    else:
        reads = tiles * barrier_read_us(hw, fit, 1, act, cores, groups=1, in_l1=tiles_in_l1, relax=relax) \
            if tile_reads else 0.0
        # a write waited for costs its round trip (the estimator's write and barrier, issue included)
        trip = cycles_us(hw, noc_write_wait_cycles(hw, stick_bytes))
        if stick_barrier:
            writes = sticks * trip
        else:
            writes = cycles_us(hw, sticks * jnp.maximum(hw.noc_write_issue_cycles, stick_bytes / link)) + blocks * trip
        stages = (reads, compute, writes)
    return (sum(stages) + (blocks - 1) * overlap(fit, *stages)) / blocks


def core_us(hw: Blackhole, fit: FitParams, spec: LayoutSpec, load: tuple[int, int, int], cores: int,
            relax: Relax | None):
    """One core of a split-rows program on its ``load`` = (blocks, real sticks, padding bytes), us
    (``chain_us``)."""
    blocks, sticks, pad_bytes = load
    return chain_us(hw, fit, kind=spec.kind, act_dtype=spec.act_dtype, blocks=blocks, row_tiles=spec.block_tiles,
                    sticks=sticks, stick_bytes=spec.stick_bytes, pad_bytes=pad_bytes, sticks_in_l1=spec.sticks_in_l1,
                    tiles_in_l1=spec.tiles_in_l1, tile_reads=not spec.shard_cores, stick_barrier=spec.stick_barrier,
                    cores=cores, relax=relax)


def dram_floor_us(hw: Blackhole, fit: FitParams, *, sticks: int, stick_bytes: int, tiles: int, act_dtype: str,
                  sticks_in_l1: bool, tiles_in_l1: bool):
    """Where every core streams at once: the DRAM-resident side(s) at the achievable bandwidth of their
    page size (sticks, tiles), us."""
    floor = 0.0
    if not sticks_in_l1:
        floor = floor + dram_us(hw, fit, sticks, sticks * stick_bytes)
    if not tiles_in_l1:
        floor = floor + dram_us(hw, fit, tiles, tiles * tile_bytes(act_dtype))
    return floor


def layout_us(hw: Blackhole, fit: FitParams, spec: LayoutSpec, relax: Relax | None = None):
    """A tilize / untilize (``LayoutSpec``), us: the launch on its cores ([launch_eltwise_us]) and the
    slowest candidate core (``core_us``), or, where every core streams at once, the DRAM traffic: the
    DRAM-resident side(s) at the achievable bandwidth of their page size (sticks, tiles)."""
    cores = spec.cores(hw)
    chains = [core_us(hw, fit, spec, load, cores, relax) for load in spec.core_loads]
    floor = dram_floor_us(hw, fit, sticks=spec.sticks, stick_bytes=spec.stick_bytes, tiles=spec.blocks * spec.block_tiles,
                          act_dtype=spec.act_dtype, sticks_in_l1=spec.sticks_in_l1, tiles_in_l1=spec.tiles_in_l1)
    return launch_us(fit, cores, fit.launch_eltwise_us) + smax(*chains, floor, relax=relax)


# ---- its op-report row (read only: the expert's graph runs no layout conversion) -------------------------
OP_CLASSES = {f"layout/{kind}": tuple(c for c, k in OP_CODES.items() if k == kind) for kind in KINDS}
SPECS = (LayoutSpec, LayoutBlockSpec)


def cores(spec: LayoutSpec | LayoutBlockSpec, hw: Blackhole) -> int:
    """The cores the program runs on (the spec's ``cores``), as priced."""
    return spec.cores(hw)


def kernel_stems(ln: ReportLine) -> list[str]:
    """The dataflow kernels a row names (file stems of DATA MOVEMENT KERNEL SOURCE), [] where it names none."""
    return re.findall(r"([A-Za-z0-9_]+)\.cpp", ln.get("DATA MOVEMENT KERNEL SOURCE"))


def read_block(ln: ReportLine, kind: str, act: str, padded, logical, sticks_pre: str, tiles_pre: str) -> LayoutBlockSpec:
    """A row on the block program (its kernels name it) as a ``LayoutBlockSpec``."""
    if logical[:-2] != padded[:-2] or logical[-1] > padded[-1] or logical[-2] > padded[-2]:
        raise Skip(f"{kind} with padding outside the last two dims ({logical} in {padded})")
    for pre in (sticks_pre, tiles_pre):
        if "SHARDED" in ln.memory(pre):
            raise Skip(f"{kind} on the block program with a sharded operand ({ln.memory(pre).removeprefix('DEV_0_')})")
    elem = element_bytes(act)
    return LayoutBlockSpec(kind, padded[-1] // TILE, padded[-2] // TILE, math.prod(padded[:-2]), logical[-2],
                           logical[-1] * elem, act, sticks_in_l1=l1_resident(ln, sticks_pre),
                           tiles_in_l1=l1_resident(ln, tiles_pre),
                           pad=ln.get("OP CODE") == "TilizeWithValPaddingDeviceOperation")


def read(ln: ReportLine, hw: Blackhole, cls: str) -> LayoutSpec | LayoutBlockSpec:
    """A tilize / untilize row (``cls``: 'layout/<kind>') as a ``LayoutSpec`` (the split-rows programs) or a
    ``LayoutBlockSpec`` (the block programs, which its kernels name)."""
    kind = cls.removeprefix("layout/")
    code = ln.get("OP CODE")
    sticks_pre, tiles_pre = ("INPUT_0", "OUTPUT_0") if kind == "tilize" else ("OUTPUT_0", "INPUT_0")
    for pre, want in ((sticks_pre, "ROW_MAJOR"), (tiles_pre, "TILE")):
        if ln.get(f"{pre}_LAYOUT") != want:
            raise Skip(f"{kind} with {pre} in {ln.get(f'{pre}_LAYOUT') or 'no'} layout (expected {want})")
    act = ln.dtype("INPUT_0", LayoutFormat)
    if ln.dtype("OUTPUT_0", LayoutFormat) != act:
        raise Skip(f"{kind} with a format conversion ({ln.get('INPUT_0_DATATYPE')} -> {ln.get('OUTPUT_0_DATATYPE')})")
    stems = kernel_stems(ln)
    padded, logical = ln.shape(tiles_pre), ln.logical(sticks_pre)
    if set(stems) & set(BLOCK_KERNELS):
        return read_block(ln, kind, act, padded, logical, sticks_pre, tiles_pre)
    # the program's row-major side (tilize: the stick reader; untilize: the stick writer and a tile reader)
    known = [STICK_READERS] if kind == "tilize" else [tuple(STICK_WRITERS), TILE_READERS]
    if stems and not all(set(stems) & set(names) for names in known):
        raise Skip(f"{kind} program not modelled (kernels {stems})")
    if not stems and padded[-1] // TILE > 32 and (padded[-2] // TILE > 32 or padded[-1] > padded[-2]):
        raise Skip(f"{kind} of a wide tensor and no kernels named: ttnn may run its block program")
    if logical[:-2] != padded[:-2] or logical[-1] > padded[-1] or logical[-2] > padded[-2]:
        raise Skip(f"{kind} with padding outside the last two dims ({logical} in {padded})")
    mem = {pre: ln.memory(pre) for pre in (sticks_pre, tiles_pre)}
    shard_cores = 0
    if "SHARDED" in mem[sticks_pre]:
        raise Skip(f"{kind} with a sharded row-major side ({mem[sticks_pre].removeprefix('DEV_0_')}; not modelled)")
    if "SHARDED" in mem[tiles_pre]:
        if kind == "tilize" or "HEIGHT_SHARDED" not in mem[tiles_pre]:
            raise Skip(f"{kind} with a {mem[tiles_pre].removeprefix('DEV_0_')} tiled side (the model reads an "
                       "untilize's height-sharded input only)")
        shard_cores = int(float(ln.get("CORE COUNT") or 0))
    elem = element_bytes(act)
    sticks = block_sticks(logical, padded)
    blocks = len(sticks)
    if shard_cores and blocks % shard_cores:
        raise Skip(f"{blocks} tile rows do not split into {shard_cores} shards of whole tile rows")
    per_core = blocks // shard_cores if shard_cores else split_blocks(blocks, hw.grid_cores)[0]
    pad = code == "TilizeWithValPaddingDeviceOperation"
    loads = core_loads(sticks, per_core=per_core, stick_bytes=logical[-1] * elem, padded_stick_bytes=padded[-1] * elem,
                       pad=pad)
    return LayoutSpec(kind, blocks, padded[-1] // TILE, logical[-1] * elem, int(sticks.sum()), loads, act,
                      sticks_in_l1=l1_resident(ln, sticks_pre), tiles_in_l1=l1_resident(ln, tiles_pre),
                      shard_cores=shard_cores,
                      stick_barrier=kind == "untilize" and STICK_WRITERS.get(
                          next((s for s in stems if s in STICK_WRITERS), ""),
                          code == "UntilizeWithUnpaddingDeviceOperation"))


__all__ = [
    "BLOCK_KERNELS",
    "KINDS",
    "OP_CLASSES",
    "OP_CODES",
    "SPECS",
    "STICK_READERS",
    "STICK_WRITERS",
    "TILE_READERS",
    "LayoutBlockSpec",
    "LayoutSpec",
    "block_edge",
    "block_sticks",
    "chain_us",
    "core_loads",
    "cores",
    "dram_floor_us",
    "kernel_stems",
    "layout_us",
    "read",
    "read_block",
    "split_blocks",
]
