"""Data-movement ops of ttnn (tiled reshape, transpose, concat, slice; the last-dim concat of row-major
tensors): one spec for the family, the work unit and reads per unit of each op from its kernels, priced by
``data_movement_us`` (``stick_concat_us`` for the row-major concat).

The tiled ones move 32x32 tiles between interleaved tensors with a reader kernel that waits for each page it
reads (``noc_async_read_barrier`` per page) and a writer kernel; the factories split a work unit
over the cores. Per op (tenstorrent/tt-metal, ttnn/cpp/ttnn/operations/data_movement/, files the
report rows name in DATA MOVEMENT KERNEL SOURCE):

  reshape       reshape_view/device/device/dataflow/reader_reshape_tiled.cpp @ 050f24fa: per output
                tile, one mapping page (a page of the host-built mapping tensor in DRAM, read and waited
                for), then every input tile its segments come from (a tile read again unless it is the
                previous segment's); the factory's map lists an output tile's segments grouped by input
                page (``reshape_map_output_page``'s std::map, reshape_tiled_program_factory.cpp @
                01840686), so each input tile it touches is read once; output tiles split over the cores
                (``split_work_to_cores``: CORE COUNT = min(output tiles, grid), consecutive pages per
                core). Output tiles differ where a row block straddles tile rows (Qwen's 33-row heads: 64
                copies and 2-3 input pages next to one-row tiles of 2 copies), so the op is priced by the
                core whose own tiles take longest (``busiest_core_loads``), not by mean tiles. The writer
                (writer_reshape_tiled.cpp, same folder) copies each segment into a scratch page with
                tt_memmove (one NoC write to its own L1 per segment, a face row or less; common/kernels/
                common.hpp), then writes the page out and waits for it (``noc_async_write_barrier``) before
                it pops the mapping page; the input and mapping circular buffers hold one page each
                (``reader_cb_len = 1``, factory @ 01840686), so the copies and the output write run on
                the reads' chain: one blocking tile write per output tile (``RESHAPE_BLOCKING_WRITES``;
                checked by the writer thread's time past the reader's, BRISC - NCRISC, on the CLIP and
                gpt-oss rows: the last input tile's copies + one round trip). Not priced: the writer's
                barrier on its own-L1 copies and the two one-page handshakes per input tile before the
                reader may read the next (CLIP's reader threads leave ~0.1 us per input tile over the
                model's read + copies), and all cores walking their input pages in the same ascending
                order (12-19 cores on one DRAM bank at a time in the CLIP rows)
  transpose_hc  transpose/device/kernels/dataflow/reader_unary_transpose_hc_interleaved_tiled_padding_
                aware.cpp @ 022c2361: one input tile per blocking read, the writer scatters its face
                rows; input tiles split over the cores, the program sent to the whole grid (CORE
                COUNT 64 for 24-38 tiles on a 64-core grid: bh_64_clip_encoder_1.csv). The writer
                (writer_unary_transpose_hc_interleaved_tiled_padding_aware.cpp @ 0d1a31f5, logic as at
                022c2361) issues one NoC write per face row it keeps: 2 (faces across) x the tile's real
                rows, then a write barrier per tile; when C is not a tile multiple it then fills the
                output's padding rows: per padding tile one write per face from the first padding face
                row (``transpose_hc_writes``); the padding tiles are taken as split over the cores as
                the tiles are (the factory's split is not read here). That is the writer since
                tt-metal pull request #36896 (merged 2026-01-31); before it, one write per face row of
                each padding face, 26-62 per padding tile instead of 2-4. The CLIP report ran the older
                writer (tests/test_costmodel_dm_writes.py: with each kernel's count the writer threads
                spend 32-49 ns a write in every report): its rows are priced with the newer count and
                come out right only because the assumed issue cost (64 cycles) is ~1.35x the writers'
                measured ~47 cycles a write. Not corrected here: a report's header dates its build only
                roughly (``report_build``: one without a column builds since 2026-02-19 write may
                predate the change, and reading it warns for these rows), and the same cost prices
                reshape's L1 copies and tilize's stick reads, which lowered with it come out low
  transpose_wh  transpose_wh compute kernel + reader_unary_transpose_wh_interleaved_start_id.cpp: one
                tile read, one transpose pass, one tile written; tiles over the whole grid
  concat        one read per output tile from the input that holds it, waited for (reader_concat_interleaved_
                start_id.cpp @ 01656bf7); output tiles over the cores; the writer is eltwise/unary's (the
                rows' DATA MOVEMENT KERNEL SOURCE, bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv)
  slice         one read per output tile (tile-aligned slices read only the tiles they keep)
  concat_sticks a concat along the last dim of ROW_MAJOR tensors (concat_program_factory.cpp @ d95c1ad5:
                WIDTH_CONCAT, one output stick a unit, ``split_work_to_cores`` over the grid, a circular
                buffer of 2 sticks): per stick the reader reads each input's piece and waits once
                (reader_concat_stick_layout_interleaved_start_id.cpp, every stored version), the writer
                writes the stick and waits for it (ttnn/cpp/ttnn/kernel/dataflow/writer_unary_stick_layout_
                interleaved_start_id.cpp @ 02032f92: ``noc_async_write_barrier`` per stick); with the
                reader at most two sticks ahead, a stick costs the overlap of the two round trips

Op class 'data_movement' (the launch is [launch_heads_us], the fixed time of a data-movement
program, which the heads ops share). Three of the family are built as ttnn's unary streaming program
instead: a reader that fetches one page per unit with ``noc_async_read_tile``, at most a one-tile
compute step, and the unary writer that writes one page per unit from ``start_id``
(``writer_unary_interleaved_start_id.cpp``: eltwise/unary's own for transpose_wh and concat, a copy of it in
slice/device/kernels/dataflow/ for slice, as the rows' DATA MOVEMENT KERNEL SOURCE name them), with no
mapping page, no face-row scatter and no host-side map; their fixed time is that of the eltwise programs,
[launch_eltwise_us] (``UNARY_PROGRAM_KINDS``). Concat and slice have no compute kernel (COMPUTE KERNEL
SOURCE []), and their one-tile-per-core rows still come out ~0.3 us over (Qwen lines 54, 67, 70): the
eltwise programs' fixed time includes a compute kernel these programs do not run; not priced apart.
"""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np

from costmodel.blackhole.ops import (
    barrier_read_us,
    cycles_us,
    dram_us,
    launch_us,
    noc_write_wait_cycles,
    overlap,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import ReportLine, Skip, l1_resident, no_sharding
from costmodel.hardware import STICK_FORMATS, TILE, Blackhole, element_bytes, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat

KINDS = ("reshape", "transpose_hc", "transpose_wh", "concat", "slice", "concat_sticks")
OP_CODES = {"ReshapeDeviceOperation": "reshape", "ReshapeViewDeviceOperation": "reshape",
            "TransposeDeviceOperation": "transpose", "ConcatDeviceOperation": "concat",
            "SliceDeviceOperation": "slice"}
# kinds whose program is ttnn's unary streaming program (reader, optional one-tile compute, unary writer):
# priced with the eltwise programs' fixed time [launch_eltwise_us]
UNARY_PROGRAM_KINDS = ("transpose_wh", "concat", "slice", "concat_sticks")
# output tiles above which a reshape's tile map is not enumerated (the map is per output tile x row)
RESHAPE_MAP_MAX_TILES = 200_000
# blocking tile writes per reshape output tile: writer_reshape_tiled.cpp writes the scratch page out with a
# noc_async_write_barrier before it frees the one-page mapping buffer the reader's next output tile needs
RESHAPE_BLOCKING_WRITES = 1.0


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
      small_writes_per_unit: sub-tile NoC writes the writer issues per unit (mean; reshape: tt_memmove
        segments; transpose_hc: face rows), on the long thread.
      pad_units: transpose_hc padding tiles the writer fills after its tiles (0 when C is a tile multiple).
      small_writes_per_pad_unit: NoC writes per padding tile.
      core_loads: (units, blocking reads, sub-tile writes) of the cores that may bind, each a core's totals
        over its own units (``busiest_core_loads``; reshape, whose output tiles differ in reads and writes);
        empty: every core does ceil(units / cores) mean units.
      stick_bytes: concat_sticks: bytes of an output stick (its units are sticks, its reads per unit the
        inputs' pieces); 0 for the tiled kinds.
    """

    kind: str
    units: int
    reads_per_unit: float
    dram_tiles: int
    act_dtype: str = "bf16"
    in_l1: bool = False
    small_writes_per_unit: float = 0.0
    pad_units: int = 0
    small_writes_per_pad_unit: float = 0.0
    core_loads: tuple[tuple[float, float, float], ...] = ()
    stick_bytes: int = 0
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
        if not (isinstance(self.pad_units, int) and self.pad_units >= 0):
            raise ValueError(f"pad_units={self.pad_units!r} must be an integer >= 0")
        for name in ("small_writes_per_unit", "small_writes_per_pad_unit"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v >= 0):
                raise ValueError(f"{name}={v!r} must be finite and >= 0")
        if (self.kind == "concat_sticks") != (isinstance(self.stick_bytes, int) and self.stick_bytes >= 1):
            raise ValueError(f"stick_bytes={self.stick_bytes!r}: expected an integer >= 1 for concat_sticks "
                             "(row-major output sticks) and 0 for the tiled kinds")
        for load in self.core_loads:
            if len(load) != 3 or not all(math.isfinite(x) and x >= 0 for x in load):
                raise ValueError(f"core_loads entry {load!r} must be (units, reads, writes), finite and >= 0")

    def whole_grid(self) -> bool:
        """The transpose programs are sent to the whole grid, cores without tiles included."""
        return self.kind.startswith("transpose")

    def cores(self, hw: Blackhole) -> int:
        """Cores the program is sent to (an op report's CORE COUNT)."""
        return hw.grid_cores if self.whole_grid() else min(self.units, hw.grid_cores)

    def small_writes_per_core(self, hw: Blackhole) -> float:
        """Sub-tile NoC writes of the busiest core: its share of the units and of the padding tiles."""
        def share(n):
            return math.ceil(n / min(n, hw.grid_cores)) if n else 0
        return share(self.units) * self.small_writes_per_unit + share(self.pad_units) * self.small_writes_per_pad_unit

    def kernel_fixed_us(self, fit: FitParams):
        """Device-kernel fixed time of the op's program: [launch_eltwise_us] for the unary streaming
        programs (``UNARY_PROGRAM_KINDS``), else the data-movement class's [launch_heads_us]."""
        return fit.launch_eltwise_us if self.kind in UNARY_PROGRAM_KINDS else fit.launch_heads_us

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        if self.kind == "concat_sticks":
            return stick_concat_us(hw, fit, self, relax=relax)
        loads = self.core_loads or None
        writes = tuple(w for _, _, w in loads) if loads else self.small_writes_per_core(hw)
        return data_movement_us(hw, fit, units=self.units, reads_per_unit=self.reads_per_unit,
                                dram_tiles=self.dram_tiles, act_dtype=self.act_dtype, in_l1=self.in_l1,
                                passes=1 if self.kind == "transpose_wh" else 0,
                                cores=self.cores(hw) if self.whole_grid() else None,
                                small_writes_per_core=writes,
                                core_loads=tuple((u, r) for u, r, _ in loads) if loads else None,
                                blocking_writes_per_unit=RESHAPE_BLOCKING_WRITES if self.kind == "reshape" else 0.0,
                                kernel_fixed_us=self.kernel_fixed_us(fit), relax=relax)


def tiles(padded: tuple[int, ...]) -> int:
    """Tiles of a TILE-layout tensor of padded shape [..., Y, X] (tile multiples)."""
    *lead, y, x = padded
    return math.prod(lead) * (y // TILE) * (x // TILE)


def reshape_tile_work(in_logical: tuple[int, ...], out_logical: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Per output tile of a tiled reshape, in output page order: (blocking reads, tt_memmove segments).

    Reads (reader_reshape_tiled.cpp): the mapping page plus one read per distinct input tile the output
    tile's elements come from. The reader reads a tile again unless it is the previous segment's, and the
    factory's map (reshape_map_output_page, reshape_tiled_program_factory.cpp @ 01840686) lists the
    segments grouped by input page in a std::map, so each input tile is one run however its rows
    interleave with other tiles'. Each row's 32-column segment starts and ends in an input tile (both ends
    counted; a segment wider than an input row is counted by its ends only).

    Segments (writer_reshape_tiled.cpp's tt_memmove, one NoC write to the core's own L1 each): the host
    map merges elements only while both the input and the output faced offsets advance by one, so a
    segment lies inside one output face row (16 columns) and one input face row: each output face row is
    split wherever its consecutive input elements cross an input face-row boundary (a multiple of 16
    columns or a new row).

    Shapes: logical [..., H, W] of the input and the output (same element count); both results [tiles].
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
    # reads: per output tile, the input tiles holding its rows' first and last columns
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
    seq = np.stack(ids, axis=-1).reshape(bo, hto, wto, 2 * TILE)  # per output tile: the rows' end tiles
    ok = np.repeat(valid, 2, axis=-1).reshape(seq.shape)
    # a read per distinct input tile: sorted, each new id is one (padding rows' ends sort first as -1)
    seq = np.sort(np.where(ok, seq, -1), axis=-1)
    distinct = np.sum(seq[..., 1:] != seq[..., :-1], axis=-1) + (seq[..., 0] >= 0)
    reads = 1.0 + distinct.reshape(n_tiles)  # + the mapping page
    # segments: every output face row, its first column and length (0 where the columns are padding)
    face = TILE // 2
    rows = np.arange(bo * ho)
    fc0 = np.arange(0, wto * TILE, face)
    length = np.clip(wo - fc0, 0, face)
    f0 = rows[:, None] * wo + fc0[None, :]  # flat index of each face row's first element
    k = np.arange(1, face)
    # a new segment at each later element that starts an input face row; an input exactly one face wide
    # continues its face from one row to the next (offsets +1) unless the row starts a face (row mod 16 = 0)
    fk = f0[..., None] + k
    starts = (fk % wi % face == 0) & (k < length[None, :, None])
    if wi == face:
        starts &= (fk % (hi * wi) // wi) % face == 0
    segments = np.where(length > 0, 1 + starts.sum(axis=-1), 0)  # [bo * ho, 2 * wto]
    # an output row's last element and the next row's first are consecutive offsets where the tile is 32
    # wide at row 15 (511 -> 512) or 16 wide off a face edge: one segment if the input's are too
    wl = np.minimum(wo - np.arange(wto) * TILE, TILE)  # each output tile column's width
    r, h = rows[:-1], rows[:-1] % ho  # each row but the last, and its row in its output matrix
    pair = ((rows[1:] // ho == r // ho) & (h // TILE == (rows[1:] % ho) // TILE))[:, None] & (
        ((wl == TILE)[None, :] & (h % TILE == face - 1)[:, None])
        | ((wl == face)[None, :] & (h % face != face - 1)[:, None]))
    if pair.any():
        ends = [r[:, None] * wo + np.arange(wto) * TILE + wl - 1, (r + 1)[:, None] * wo + np.arange(wto) * TILE]
        at = []
        for f in ends:
            bi_, rem = np.divmod(f, hi * wi)
            ri, ci = np.divmod(rem, wi)
            fo = ((ri % TILE // face) * 2 + ci % TILE // face) * face * face + (ri % face) * face + ci % face
            at.append(((bi_ * hti + ri // TILE) * wti + ci // TILE, fo))
        merged = pair & (at[0][0] == at[1][0]) & (at[1][1] == at[0][1] + 1)
        segments[1:, ::2] -= merged  # the next row's first face row loses its own segment
    tile_of_row = (rows // ho) * hto + (rows % ho) // TILE
    per_tile = np.zeros((bo * hto, wto))
    np.add.at(per_tile, tile_of_row, segments.reshape(bo * ho, wto, 2).sum(axis=-1))
    return reads, per_tile.reshape(n_tiles)


def reshape_reads_per_tile(in_logical: tuple[int, ...], out_logical: tuple[int, ...]) -> float:
    """Mean blocking reads per output tile of a tiled reshape (``reshape_tile_work``'s reads)."""
    return float(reshape_tile_work(in_logical, out_logical)[0].mean())


def reshape_copies_per_tile(in_logical: tuple[int, ...], out_logical: tuple[int, ...]) -> float:
    """Mean tt_memmove segments per output tile of a tiled reshape (``reshape_tile_work``'s segments)."""
    return float(reshape_tile_work(in_logical, out_logical)[1].mean())


def split_work_ranges(units: int, grid_cores: int) -> list[tuple[int, int]]:
    """[start, end) unit ranges of the cores, in order, as tt-metal's ``split_work_to_cores`` deals a
    count over a grid (tt_metal/common/work_split.cpp): min(units, grid) cores, the first units mod cores
    of them one unit more than the rest; the reshape factory hands them consecutive output pages
    (``page_idx_start += increment`` per core, reshape_tiled_program_factory.cpp @ 01840686)."""
    cores = min(units, grid_cores)
    q, extra = divmod(units, cores)
    sizes = [q + 1] * extra + [q] * (cores - extra)
    ends = np.cumsum(sizes)
    return list(zip((ends - sizes).tolist(), ends.tolist()))


def busiest_core_loads(per_unit: tuple[np.ndarray, ...], grid_cores: int) -> tuple[tuple[float, ...], ...]:
    """(units, then the total of each per-unit count) of every core under ``split_work_ranges``, each count
    [units] in unit order, reduced to the cores no other core matches or exceeds in every entry (the Pareto
    front, sorted): the busiest core is one of them whatever a unit and each count cost."""
    ranges = split_work_ranges(len(per_unit[0]), grid_cores)
    sums = {(float(e - s), *(float(a[s:e].sum()) for a in per_unit)) for s, e in ranges}
    front = [p for p in sums if not any(q != p and all(x >= y for x, y in zip(q, p)) for q in sums)]
    return tuple(sorted(front))


def transpose_hc_writes(in_logical: tuple[int, ...]) -> tuple[float, int, float]:
    """NoC writes of the padding-aware tiled HC transpose's writer for an input of logical shape
    [..., C, H, W]: (mean writes per input tile, padding tiles, writes per padding tile).

    Per input tile, one face-row write per (face across, real row): 2 x 32, or 2 x the real rows of
    the last tile row of H. When C is not a tile multiple, each of the output's N x H x W_t padding
    tiles gets one write per face (2 across) per face row from the one holding row C mod 32 on.
    """
    *lead, c, h, w = in_logical
    n = math.prod(lead)
    faces_across = TILE // (TILE // 2)
    ht, wt = math.ceil(h / TILE), math.ceil(w / TILE)
    h_last = h - (ht - 1) * TILE
    per_tile = faces_across * ((ht - 1) * TILE + h_last) / ht
    if c % TILE == 0:
        return per_tile, 0, 0.0
    face_c_start = (c % TILE) // (TILE // 2)
    return per_tile, n * h * wt, float(faces_across * (faces_across - face_c_start))


# ---- its price -------------------------------------------------------------------------------------
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
    ``in_l1``: the reads come from L1-interleaved pages (NoC round trips, ``barrier_read_us``, no DRAM bank).
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
    t_tile = barrier_read_us(hw, fit, 1, act, cores, groups=1, in_l1=in_l1, relax=relax)
    if passes:
        t_tile = overlap(fit, t_tile, cycles_us(hw, passes * fit.eltwise_cycles_per_tile))
    t_agg = dram_us(hw, fit, dram_tiles, dram_tiles * act) if dram_tiles else 0.0
    # each candidate core's chain: its blocking reads and output-tile writes, then its sub-tile writes
    chains = [(r + n * blocking_writes_per_unit) * t_tile + cycles_us(hw, w * hw.noc_write_issue_cycles)
              for (n, r), w in zip(core_loads, small_writes_per_core)]
    fixed = fit.launch_heads_us if kernel_fixed_us is None else kernel_fixed_us
    return launch_us(fit, cores, fixed) + smax(*chains, t_agg, relax=relax)


def stick_concat_us(hw: Blackhole, fit: FitParams, spec: DataMovementSpec, relax: Relax | None = None):
    """A concat along the last dim of ROW_MAJOR tensors (``concat_sticks``), us: the launch
    ([launch_eltwise_us]) and the busiest core's sticks, each the reader's blocking read of the inputs'
    pieces (``barrier_read_us``) and the writer's write round trip (``hw.noc_write_round_trip_cycles``,
    the bytes past ``NOC_EST_BYTES`` at a link's rate); the first stick pays both, each further one their
    overlap (the two-stick buffer lets the reader run ahead); or the DRAM traffic where every core streams."""
    cores = spec.cores(hw)
    n = math.ceil(spec.units / cores)
    piece = spec.stick_bytes / spec.reads_per_unit
    read = barrier_read_us(hw, fit, spec.reads_per_unit, spec.stick_bytes, cores, groups=1, in_l1=spec.in_l1,
                           relax=relax)
    write = cycles_us(hw, noc_write_wait_cycles(hw, spec.stick_bytes))
    chain = read + write + (n - 1) * overlap(fit, read, write)
    floor = dram_us(hw, fit, spec.dram_tiles, spec.dram_tiles * piece) if spec.dram_tiles else 0.0
    return launch_us(fit, cores, spec.kernel_fixed_us(fit)) + smax(chain, floor, relax=relax)


# ---- its op-report row (read only: the expert's graph writes none of these) ----------------------------
OP_CLASSES = {f"data_movement/{kind}": tuple(c for c, k in OP_CODES.items() if k == kind)
              for kind in dict.fromkeys(OP_CODES.values())}
SPECS = (DataMovementSpec,)


def cores(spec: DataMovementSpec, hw: Blackhole) -> int:
    """The cores the op's factory splits its work units over (``DataMovementSpec.cores``), as priced."""
    return spec.cores(hw)


def read(ln: ReportLine, hw: Blackhole, cls: str) -> DataMovementSpec:
    """A reshape / transpose / concat / slice row (``cls``: 'data_movement/<kind>'): the op's work unit and reads."""
    kind = cls.removeprefix("data_movement/")
    ins = [p for p in ("INPUT_0", "INPUT_1", "INPUT_2") if ln.has(p)]
    no_sharding(ln, *ins, "OUTPUT_0")
    if kind == "concat" and any(ln.get(f"{pre}_DATATYPE") != ln.get("INPUT_0_DATATYPE") for pre in ins[1:]):
        raise Skip("concat of tensors of different formats")
    layouts = {ln.get(f"{pre}_LAYOUT") for pre in (*ins, "OUTPUT_0")}
    if kind == "concat" and layouts == {"ROW_MAJOR"}:
        return read_stick_concat(ln, ins)
    for pre in (*ins, "OUTPUT_0"):
        if ln.get(f"{pre}_LAYOUT") not in ("TILE", ""):
            raise Skip(f"{kind} of a {ln.get(f'{pre}_LAYOUT')} tensor (the model moves tiles)")
    act = ln.dtype("INPUT_0", ActivationFormat)
    if ln.get("OUTPUT_0_DATATYPE") != ln.get("INPUT_0_DATATYPE"):
        raise Skip(f"{kind} with a format conversion ({ln.get('INPUT_0_DATATYPE')} -> {ln.get('OUTPUT_0_DATATYPE')})")
    out = tiles(ln.shape("OUTPUT_0"))
    out_dram = 0 if l1_resident(ln, "OUTPUT_0") else out
    if kind == "reshape":
        try:
            reads, copies = reshape_tile_work(ln.logical("INPUT_0"), ln.logical("OUTPUT_0"))
        except ValueError as e:
            raise Skip(f"reshape not modelled ({e})") from None
        in_l1 = l1_resident(ln, "INPUT_0")
        read_dram = 0 if in_l1 else round(float((reads - 1).sum()))
        # output tiles differ (a 33-row block straddles tile rows): the busiest core's own tiles bind
        loads = busiest_core_loads((reads, copies), hw.grid_cores)
        return DataMovementSpec("reshape", out, float(reads.mean()), read_dram + out_dram, act, in_l1,
                                small_writes_per_unit=float(copies.mean()), core_loads=loads)
    if kind == "transpose":
        dim = ln.attr("dim") or ""
        sub = {"TransposeOpDim::HC": "transpose_hc", "TransposeOpDim::WH": "transpose_wh"}.get(dim)
        if sub is None:
            raise Skip(f"transpose dim not modelled ({dim or 'no dim'}; the model covers HC and WH)")
        n = tiles(ln.shape("INPUT_0"))
        in_l1 = l1_resident(ln, "INPUT_0")
        if sub == "transpose_wh":
            return DataMovementSpec(sub, n, 1.0, (0 if in_l1 else n) + out_dram, act, in_l1)
        per_tile, pad, per_pad = transpose_hc_writes(ln.logical("INPUT_0"))
        return DataMovementSpec(sub, n, 1.0, (0 if in_l1 else n) + out_dram, act, in_l1, small_writes_per_unit=per_tile,
                                pad_units=pad, small_writes_per_pad_unit=per_pad)
    if kind == "concat":
        read_dram = sum(tiles(ln.shape(p)) for p in ins if not l1_resident(ln, p))
        return DataMovementSpec("concat", out, 1.0, read_dram + out_dram, act, all(l1_resident(ln, p) for p in ins))
    step = ln.attr("step") or "Shape([1; 1; 1; 1])"
    if re.fullmatch(r"Shape\(\[1(?:; 1)*\]\)", step) is None:
        raise Skip(f"strided slice not modelled (step {step})")
    in_l1 = l1_resident(ln, "INPUT_0")
    return DataMovementSpec("slice", out, 1.0, (0 if in_l1 else out) + out_dram, act, in_l1)


def read_stick_concat(ln: ReportLine, ins: list[str]) -> DataMovementSpec:
    """A concat of ROW_MAJOR tensors along their last dim as a ``concat_sticks`` spec: one unit per
    output stick, one read per input per stick (each input's piece of equal size, as the rows have it)."""
    dim = ln.attr("dim") or ""
    out = ln.shape("OUTPUT_0")
    if dim not in ("3", "-1"):
        raise Skip(f"concat of ROW_MAJOR tensors along dim {dim or '?'} (the model prices the last-dim concat)")
    act = ln.dtype("INPUT_0", ActivationFormat)
    if act not in STICK_FORMATS:  # ttnn keeps block-float tensors tiled: a row like this is not one ttnn writes
        raise Skip(f"concat of ROW_MAJOR {ln.get('INPUT_0_DATATYPE')} tensors (sticks hold {list(STICK_FORMATS)})")
    widths = {ln.shape(p)[-1] for p in ins}
    if len(widths) != 1:
        raise Skip(f"concat of ROW_MAJOR pieces of different widths {sorted(widths)} (the model prices equal pieces)")
    elem = element_bytes(act)
    sticks = out[0] * out[1] * out[2]
    in_l1 = all(l1_resident(ln, p) for p in ins)
    pages = (0 if in_l1 else sticks * len(ins)) + (0 if l1_resident(ln, "OUTPUT_0") else sticks * len(ins))
    return DataMovementSpec("concat_sticks", sticks, float(len(ins)), pages, act, in_l1, stick_bytes=out[-1] * elem)


__all__ = [
    "KINDS",
    "OP_CLASSES",
    "OP_CODES",
    "RESHAPE_BLOCKING_WRITES",
    "RESHAPE_MAP_MAX_TILES",
    "SPECS",
    "UNARY_PROGRAM_KINDS",
    "DataMovementSpec",
    "busiest_core_loads",
    "cores",
    "read",
    "read_stick_concat",
    "reshape_copies_per_tile",
    "reshape_reads_per_tile",
    "reshape_tile_work",
    "split_work_ranges",
    "stick_concat_us",
    "tiles",
    "transpose_hc_writes",
]
