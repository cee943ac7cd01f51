"""The one program-config type of a ttnn matmul (``MatmulProgramConfig``) and its one legality rule.

ttnn 0.81.1 has three matmul program-config classes; ``kind`` tells them (and the two 1D
directions) apart, so every consumer switches on one attribute:

  ``mcast_1d_in0``   ``MatmulMultiCoreReuseMultiCast1DProgramConfig(mcast_in0=True)``: in0 (all M
                     rows) multicast to every core, N split over cores (``per_core_M`` = M tiles)
  ``mcast_1d_in1``   the same class with ``mcast_in0=False``: in1 multicast, M split over cores
                     (``per_core_N`` = N tiles)
  ``mcast_2d``       ``MatmulMultiCoreReuseMultiCastProgramConfig``: M over grid rows, N over grid
                     columns (swapped with ``transpose_mcast``)
  ``dram_sharded``   ``MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig``: in1 width-sharded
                     over the DRAM banks, in0 width-sharded in L1 (no grid field: the shard spec sets it)

One type serves the emulation (``device.emulation`` checks every ``linear`` with ``validate``), the
device graph (``device.graph.TTExpert`` reads them from its ``Port``; ``build(ttnn)`` makes the real
object) and the cost model (``costmodel.blackhole.kinds.matmul.matmul_us`` prices it, ``graph.validate`` / ``tune`` call the same
``validate``). It lives here, under ``costmodel.blackhole``, because the legality rule needs the
chip's numbers (``costmodel.hardware``: grid, L1 per core, tile bytes per format) and the cost
model's pytree machinery, and because ``costmodel`` never imports ``device``: ``device`` imports
this module (no ttnn needed), so there is no import cycle.

The three block sizes the cost model differentiates through (``in0_block_w``, ``per_core_N``,
``per_core_M``) are float pytree leaves (integers in a concrete config; ``validate`` rejects
fractions); everything else is static (hashable tree metadata). Sizes are in 32x32 tiles.
``ttnn_repr()`` is the string ttnn 0.81.1's ``repr`` prints (what an op report's ``ATTRIBUTES``
carries, there with ``;`` for ``,``); ``parse`` reads that string back in either form.
"""

from __future__ import annotations

import dataclasses
import math
import re

from costmodel._pytree import pytree_dataclass, static_field
from costmodel.hardware import TILE, Blackhole, tile_bytes
from jaxref.validation import check_choice, check_dtype, check_int, choices_of
from jaxref.vocabulary import ActivationFormat, MatmulKind, WeightFormat

MCAST_1D_IN0 = "mcast_1d_in0"
MCAST_1D_IN1 = "mcast_1d_in1"
MCAST_2D = "mcast_2d"
DRAM_SHARDED = "dram_sharded"
KINDS: tuple[str, ...] = choices_of(MatmulKind)
assert KINDS == (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, DRAM_SHARDED)  # the names above spell the vocabulary's
CLASS_NAMES = {MCAST_1D_IN0: "MatmulMultiCoreReuseMultiCast1DProgramConfig",
               MCAST_1D_IN1: "MatmulMultiCoreReuseMultiCast1DProgramConfig",
               MCAST_2D: "MatmulMultiCoreReuseMultiCastProgramConfig",
               DRAM_SHARDED: "MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig"}
# The L1 sharding of in0 (the activation) each multicast kind reads from local shards: ttnn picks
# mcast_in0 for a WIDTH_SHARDED in0 and mcast_in0=False for a HEIGHT_SHARDED one (tt-metal
# ttnn/cpp/ttnn/operations/matmul/device/config/matmul_program_config.cpp, the 1D config of a sharded
# in0), and the 2D factory reads a BLOCK_SHARDED in0 (one shard per grid core). The report's memory
# column names it 'L1_<layout>' ('DEV_0_L1_WIDTH_SHARDED').
IN0_SHARD_LAYOUT = {MCAST_1D_IN0: "WIDTH_SHARDED", MCAST_1D_IN1: "HEIGHT_SHARDED", MCAST_2D: "BLOCK_SHARDED"}
# fused activations ttnn accepts in a program config that this project knows (UnaryOpType names, lower case)
ACTIVATIONS = ("silu", "gelu", "relu")
# destination-register tiles an output subblock may use: 8 with bf16 accumulation, 4 with fp32
DEST_TILES = {False: 8, True: 4}
# ttnn's subblock candidates (h, w), in the order its chooser tries them (tt-metal
# ttnn/cpp/ttnn/operations/matmul/device/config/matmul_program_config.cpp: SUBBLOCK_HW_CHOICES).
SUBBLOCK_CHOICES = ((4, 2), (2, 4), (8, 1), (1, 8), (7, 1), (1, 7), (3, 2), (2, 3), (6, 1), (1, 6), (5, 1), (1, 5),
                    (2, 2), (4, 1), (1, 4), (3, 1), (1, 3), (2, 1), (1, 2), (1, 1))


def ttnn_subblock(per_core_M: int, per_core_N: int, *, fp32_dest_acc: bool = True) -> tuple[int, int]:
    """The output subblock (h, w) ttnn's ``get_matmul_subblock_params`` picks for a per-core block
    (no height / width constraint): the first candidate that fits the destination registers
    (``DEST_TILES``) and divides the block."""
    for h, w in SUBBLOCK_CHOICES:
        if h * w <= DEST_TILES[bool(fp32_dest_acc)] and per_core_M % h == 0 and per_core_N % w == 0:
            return h, w
    return 1, 1


@pytree_dataclass
class MatmulProgramConfig:
    """A ttnn matmul program config (see the module docstring for ``kind``).

    Attributes:
      in0_block_w: K tiles per inner block (each block: one in0 and one in1 block per core).
      per_core_N, per_core_M: output tiles per core along N and M.
      kind: one of ``KINDS``.
      grid_x, grid_y: ``compute_with_storage_grid_size`` (columns x rows of cores).
      out_subblock_h, out_subblock_w: destination-register subblock, tiles (both None: the subblock
        ttnn's own config helpers give the per-core block, ``ttnn_subblock``; one None: 1).
      out_block_h, out_block_w: output block, tiles (None: ttnn's default, per_core_M / per_core_N).
      fuse_batch: batch folded into M (1D / 2D).
      fused_activation: None or a lower-case ``UnaryOpType`` name in ``ACTIVATIONS`` (w1's 'silu').
      transpose_mcast: 2D only, M over columns and N over rows.
      num_workers_per_dram_bank: DRAM-sharded only.
    """

    in0_block_w: float
    per_core_N: float
    per_core_M: float = 2.0
    kind: str = static_field(default=MCAST_1D_IN0)
    grid_x: int = static_field(default=11)
    grid_y: int = static_field(default=10)
    out_subblock_h: int | None = static_field(default=None)
    out_subblock_w: int | None = static_field(default=None)
    out_block_h: int | None = static_field(default=None)
    out_block_w: int | None = static_field(default=None)
    fuse_batch: bool = static_field(default=True)
    fused_activation: str | None = static_field(default=None)
    transpose_mcast: bool = static_field(default=False)
    num_workers_per_dram_bank: int = static_field(default=1)

    def __post_init__(self):
        # only static fields here: the leaves may be tracers (vmap / grad) or JAX's placeholders
        check_choice("kind", self.kind, MatmulKind)
        if self.fused_activation is not None and self.fused_activation not in ACTIVATIONS:
            raise ValueError(f"fused_activation={self.fused_activation!r} unknown; expected None or one of "
                             f"{list(ACTIVATIONS)}")
        for name in ("grid_x", "grid_y", "num_workers_per_dram_bank"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name}={v!r} must be an integer >= 1")
        for name in ("out_block_h", "out_block_w", "out_subblock_h", "out_subblock_w"):
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name}={v!r} must be None or an integer >= 1")

    # ---- derived -------------------------------------------------------------------------
    @property
    def subblock(self) -> tuple[int, int]:
        """(out_subblock_h, out_subblock_w) as ttnn runs it: the given one, or with neither given the
        one ttnn's helpers pick for the per-core block (fp32 accumulation: legal either way)."""
        if self.out_subblock_h is None and self.out_subblock_w is None:
            return ttnn_subblock(math.ceil(float(self.per_core_M)), math.ceil(float(self.per_core_N)))
        return (self.out_subblock_h or 1, self.out_subblock_w or 1)

    def _key(self) -> tuple:
        """The fields with the subblock as run: configs that build the same ttnn object are equal."""
        return (*(getattr(self, f.name) for f in dataclasses.fields(self) if not f.name.startswith("out_subblock")),
                *self.subblock)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def mcast_in0(self) -> bool | None:
        """ttnn's ``mcast_in0`` of a 1D config (None for the other kinds)."""
        return {MCAST_1D_IN0: True, MCAST_1D_IN1: False}.get(self.kind)

    @property
    def grid(self) -> tuple[int, int]:
        return (self.grid_x, self.grid_y)

    def num_cores(self, *, M: int, N: int) -> int:
        """Cores that hold output blocks for [M, K] x [K, N] (concrete configs)."""
        mt, nt = math.ceil(M / TILE), math.ceil(N / TILE)
        return math.ceil(mt / float(self.per_core_M)) * math.ceil(nt / float(self.per_core_N))

    def l1_bytes(self, *, weight_dtype: str, act_dtype: str = "bf16"):
        """L1 per core of the circular buffers, bytes: double-buffered in0 and in1 blocks and the
        output block (tracer-safe: the cost model's tuner penalises it)."""
        act, w = tile_bytes(act_dtype), tile_bytes(weight_dtype)
        return (2 * self.per_core_M * self.in0_block_w * act + 2 * self.in0_block_w * self.per_core_N * w
                + self.per_core_M * self.per_core_N * act)

    # ---- the one legality rule --------------------------------------------------------------
    def validate(self, name: str, hw: Blackhole, *, M: int, K: int, N: int, weight_dtype: str,
                 act_dtype: str = "bf16", fp32_dest_acc: bool = True) -> None:
        """Raise ValueError (naming ``name``.field, the value and what was expected) unless this is a
        legal config for ``linear([M, K] act, [K, N] weight)`` on ``hw``.

        Rules: M, K, N tile multiples; in0_block_w divides K/32; the kind's split fits the grid (1D
        in0 and DRAM-sharded: per_core_M = M/32, ceil(N/32 / per_core_N) cores; 1D in1 the mirror;
        2D: M blocks over the grid's rows, N blocks over its columns); the grid fits the chip's; subblocks
        divide the output block, which divides the per-core block, and use at most ``DEST_TILES``
        destination tiles; the circular buffers fit one core's L1.
        """
        check_dtype("weight_dtype", weight_dtype, WeightFormat)
        check_dtype("act_dtype", act_dtype, ActivationFormat)
        for dim_name, dim in (("M", M), ("K", K), ("N", N)):
            if dim <= 0 or dim % TILE:
                raise ValueError(f"{name}: {dim_name}={dim} must be a positive multiple of {TILE}")
        Mt, Kt, Nt = M // TILE, K // TILE, N // TILE
        ibw = check_int(f"{name}.in0_block_w", self.in0_block_w, lo=1)
        pcn = check_int(f"{name}.per_core_N", self.per_core_N, lo=1)
        pcm = check_int(f"{name}.per_core_M", self.per_core_M, lo=1)
        if not (self.grid_x <= hw.grid_x and self.grid_y <= hw.grid_y):
            raise ValueError(f"{name}: core grid {self.grid_x}x{self.grid_y} must fit the {hw.name} compute grid "
                             f"{hw.grid_x}x{hw.grid_y}")
        if Kt % ibw:
            raise ValueError(f"{name}.in0_block_w={ibw} must divide K/32={Kt}")
        cores = self.grid_x * self.grid_y
        # a split need not be exact: the last core's block is partial (real reports run 2D configs
        # with per_core_N=5 on N/32=48, and ttnn's own 1D heuristic gives per_core_N = ceil(..))
        mb, nb = math.ceil(Mt / pcm), math.ceil(Nt / pcn)
        if self.kind in (MCAST_1D_IN0, DRAM_SHARDED):
            if pcm != Mt:
                raise ValueError(f"{name}.per_core_M={pcm} must equal M/32={Mt} for the {self.kind} config")
            if nb > cores:
                raise ValueError(f"{name}: ceil(N/32 / per_core_N) = ceil({Nt}/{pcn}) = {nb} cores exceeds the "
                                 f"{self.grid_x}x{self.grid_y} grid ({cores} cores)")
        elif self.kind == MCAST_1D_IN1:
            if pcn != Nt:
                raise ValueError(f"{name}.per_core_N={pcn} must equal N/32={Nt} for the {self.kind} config")
            if mb > cores:
                raise ValueError(f"{name}: ceil(M/32 / per_core_M) = ceil({Mt}/{pcm}) = {mb} cores exceeds the "
                                 f"{self.grid_x}x{self.grid_y} grid ({cores} cores)")
        else:  # 2D: M blocks over the grid's rows, N blocks over its columns (swapped if transposed)
            rows, cols = (self.grid_x, self.grid_y) if self.transpose_mcast else (self.grid_y, self.grid_x)
            if mb > rows or nb > cols:
                raise ValueError(f"{name}: {mb} x {nb} output blocks (per_core_M={pcm}, per_core_N={pcn}) exceed the "
                                 f"{rows} x {cols} grid (transpose_mcast={self.transpose_mcast})")
        obh = pcm if self.out_block_h is None else self.out_block_h
        obw = pcn if self.out_block_w is None else self.out_block_w
        if pcm % obh or pcn % obw:
            raise ValueError(f"{name}: out_block ({obh}, {obw}) must divide per_core (M {pcm}, N {pcn})")
        sh, sw = self.subblock
        if obh % sh or obw % sw:
            raise ValueError(f"{name}: out_subblock ({sh}, {sw}) must divide out_block ({obh}, {obw})")
        dest = DEST_TILES[bool(fp32_dest_acc)]
        if sh * sw > dest:
            raise ValueError(f"{name}: out_subblock_h * out_subblock_w = {sh * sw} "
                             f"> {dest} destination tiles (fp32_dest_acc={fp32_dest_acc})")
        l1 = float(self.l1_bytes(weight_dtype=weight_dtype, act_dtype=act_dtype))
        if l1 > float(hw.l1_bytes_per_core):
            raise ValueError(f"{name}: circular buffers need {l1 / 1024:.0f} KB of L1 per core "
                             f"(in0_block_w={ibw}, per_core_N={pcn}); the core has {hw.l1_bytes_per_core / 1024:.0f} KB")

    # ---- ttnn's heuristic -------------------------------------------------------------------
    @classmethod
    def default_heuristic(cls, *, M: int, K: int, N: int, grid_x: int = 11, grid_y: int = 10,
                          fused_activation: str | None = None) -> MatmulProgramConfig:
        """What ttnn picks without a program config for a short-M (in0-multicast) matmul.

        tt-metal ``get_mcast_1d_config`` (mcast_in0): per_core_M = M/32,
        per_core_N = ceil(ceil(N / cores) / 32), in0_block_w = 2 if K/32 is even else 1, the
        subblock of ``ttnn_subblock`` (fp32 accumulation, ttnn's default compute config).
        """
        cores = grid_x * grid_y
        return cls(in0_block_w=2.0 if (K // TILE) % 2 == 0 else 1.0,
                   per_core_N=float(math.ceil(math.ceil(N / cores) / TILE)), per_core_M=float(M // TILE),
                   grid_x=grid_x, grid_y=grid_y, fused_activation=fused_activation)

    # ---- ttnn objects and strings ----------------------------------------------------------------
    def build(self, ns):
        """The ttnn object (``ns``: ``ttnn`` or ``device.emulation.Emulation``, same class names)."""
        act = None if self.fused_activation is None else ns.UnaryWithParam(
            getattr(ns.UnaryOpType, self.fused_activation.upper()))
        common = {"in0_block_w": int(self.in0_block_w), "per_core_M": int(self.per_core_M),
                      "per_core_N": int(self.per_core_N), "fused_activation": act}
        if self.kind == DRAM_SHARDED:
            return ns.MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig(
                **common, num_workers_per_dram_bank=self.num_workers_per_dram_bank)
        common.update(compute_with_storage_grid_size=ns.CoreCoord(self.grid_x, self.grid_y),
                      out_subblock_h=self.subblock[0], out_subblock_w=self.subblock[1],
                      fuse_batch=self.fuse_batch)
        for f in ("out_block_h", "out_block_w"):
            if getattr(self, f) is not None:
                common[f] = getattr(self, f)
        if self.kind == MCAST_2D:
            return ns.MatmulMultiCoreReuseMultiCastProgramConfig(**common, transpose_mcast=self.transpose_mcast)
        return ns.MatmulMultiCoreReuseMultiCast1DProgramConfig(**common, mcast_in0=self.mcast_in0)

    @classmethod
    def from_ttnn(cls, pc) -> MatmulProgramConfig:
        """The config of a ttnn (or emulation) program-config object; an output block equal to the
        per-core block reads back as None (ttnn fills that default in)."""
        kind = _kind_of(type(pc).__name__, getattr(pc, "mcast_in0", None))
        act = getattr(pc, "fused_activation", None)
        fields = {"in0_block_w": float(pc.in0_block_w), "per_core_N": float(pc.per_core_N),
                      "per_core_M": float(pc.per_core_M), "kind": kind,
                      "fused_activation": None if act is None else _activation_name(str(act.op_type))}
        if kind == DRAM_SHARDED:
            return cls(**fields, num_workers_per_dram_bank=int(getattr(pc, "num_workers_per_dram_bank", 1)))
        g = pc.compute_with_storage_grid_size
        fields.update(grid_x=int(g.x), grid_y=int(g.y), out_subblock_h=int(pc.out_subblock_h),
                      out_subblock_w=int(pc.out_subblock_w), fuse_batch=bool(pc.fuse_batch))
        for f, full in (("out_block_h", pc.per_core_M), ("out_block_w", pc.per_core_N)):
            v = getattr(pc, f, None)
            fields[f] = None if v is None or int(v) == int(full) else int(v)
        if kind == MCAST_2D:
            fields["transpose_mcast"] = bool(pc.transpose_mcast)
        return cls(**fields)

    def ttnn_repr(self) -> str:
        """ttnn 0.81.1's ``repr`` of the built object (defaults of the fields this type does not hold
        printed as ttnn prints them)."""
        def b(v):
            return str(int(bool(v)))

        # GELU as the cost model prices it: ttnn's approximate one (param 1)
        act = "std::nullopt" if self.fused_activation is None else \
            f"UnaryWithParam(op_type=UnaryOpType::{self.fused_activation.upper()}" \
            f"{',param={1}' if self.fused_activation == 'gelu' else ''})"
        pcm, pcn = int(self.per_core_M), int(self.per_core_N)
        if self.kind == DRAM_SHARDED:
            return (f"{CLASS_NAMES[self.kind]}(in0_block_w={int(self.in0_block_w)},per_core_M={pcm},per_core_N={pcn},"
                    f"fused_activation={act},num_workers_per_dram_bank={self.num_workers_per_dram_bank})")
        obh = pcm if self.out_block_h is None else self.out_block_h
        obw = pcn if self.out_block_w is None else self.out_block_w
        head = (f"{CLASS_NAMES[self.kind]}(compute_with_storage_grid_size={self.grid_x}-{self.grid_y},"
                f"in0_block_w={int(self.in0_block_w)},out_subblock_h={self.subblock[0]},"
                f"out_subblock_w={self.subblock[1]},out_block_h={obh},out_block_w={obw},"
                f"per_core_M={pcm},per_core_N={pcn},")
        if self.kind == MCAST_2D:
            return head + (f"transpose_mcast={b(self.transpose_mcast)},fused_activation={act},"
                           f"fuse_batch={b(self.fuse_batch)},allowed_worker_cores=std::nullopt)")
        return head + (f"fuse_batch={b(self.fuse_batch)},fused_activation={act},mcast_in0={b(self.mcast_in0)},"
                       "gather_in0=0,hop_cores={},num_global_cb_receivers=1,untilize_out=0,"
                       "allowed_worker_cores=std::nullopt,stream_in1=0)")

    @classmethod
    def parse(cls, text: str) -> MatmulProgramConfig:
        """A config from ttnn's ``repr`` or an op report's ATTRIBUTES form of it (``;`` separators,
        grid ``(x=11;y=10)``); the text may hold other attributes around it. Raises ValueError
        naming what is missing or unknown."""
        m = re.search(r"(MatmulMultiCoreReuse\w*ProgramConfig)\(", text)
        if m is None:
            raise ValueError(f"no matmul program config (MatmulMultiCoreReuse...ProgramConfig(...)) in {text[:120]!r}")
        body = _balanced(text, m.end() - 1)
        values = dict(_split_fields(body))

        def num(key, default=None):
            if key not in values:
                if default is None:
                    raise ValueError(f"{m.group(1)}: field {key!r} missing in {body[:160]!r}")
                return default
            v = values[key]
            if not re.fullmatch(r"\d+", v):
                raise ValueError(f"{m.group(1)}: field {key}={v!r} is not a non-negative integer")
            return int(v)

        mcast = values.get("mcast_in0")
        kind = _kind_of(m.group(1), None if mcast is None else mcast.lower() in ("1", "true"))
        act = values.get("fused_activation", "std::nullopt")
        fields = {"in0_block_w": float(num("in0_block_w")), "per_core_N": float(num("per_core_N")),
                      "per_core_M": float(num("per_core_M")), "kind": kind,
                      "fused_activation": None if act in ("std::nullopt", "None", "") else _activation_name(act)}
        if kind == DRAM_SHARDED:
            return cls(**fields, num_workers_per_dram_bank=num("num_workers_per_dram_bank", 1))
        g = values.get("compute_with_storage_grid_size", "")
        gm = re.fullmatch(r"\(x=(\d+)[;,]\s*y=(\d+)\)|(\d+)-(\d+)", g)
        if gm is None:
            raise ValueError(f"{m.group(1)}: compute_with_storage_grid_size={g!r}; expected '11-10' or '(x=11;y=10)'")
        gx, gy = (int(v) for v in (gm.groups()[:2] if gm.group(1) else gm.groups()[2:]))
        pcm, pcn = num("per_core_M"), num("per_core_N")
        obh, obw = num("out_block_h", pcm), num("out_block_w", pcn)
        fields.update(grid_x=gx, grid_y=gy, out_subblock_h=num("out_subblock_h"), out_subblock_w=num("out_subblock_w"),
                      out_block_h=None if obh == pcm else obh, out_block_w=None if obw == pcn else obw,
                      fuse_batch=bool(num("fuse_batch", 1)))
        if kind == MCAST_2D:
            fields["transpose_mcast"] = bool(num("transpose_mcast", 0))
        return cls(**fields)


def _kind_of(class_name: str, mcast_in0: bool | None) -> str:
    if class_name == CLASS_NAMES[MCAST_2D]:
        return MCAST_2D
    if class_name == CLASS_NAMES[DRAM_SHARDED]:
        return DRAM_SHARDED
    if class_name == CLASS_NAMES[MCAST_1D_IN0]:
        if mcast_in0 is None:
            raise ValueError(f"{class_name} without mcast_in0: cannot tell in0 from in1 multicast")
        return MCAST_1D_IN0 if mcast_in0 else MCAST_1D_IN1
    raise ValueError(f"program config class {class_name!r} is not a matmul config this project models; expected one "
                     f"of {sorted(set(CLASS_NAMES.values()))}")


def _activation_name(text: str) -> str:
    """'UnaryWithParam(op_type=UnaryOpType::SILU)' / 'UnaryOpType.SILU' / 'silu' -> 'silu'."""
    m = re.search(r"UnaryOpType(?:::|\.)(\w+)", text)
    name = (m.group(1) if m else text).lower()
    if name not in ACTIVATIONS:
        raise ValueError(f"fused_activation={text!r} unknown; expected one of {list(ACTIVATIONS)}")
    return name


def _balanced(text: str, open_idx: int) -> str:
    """The text inside the parenthesis that opens at ``open_idx``."""
    depth = 0
    for i in range(open_idx, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_idx + 1:i]
    raise ValueError(f"unbalanced parentheses in {text[open_idx:open_idx + 160]!r}")


def _split_fields(body: str):
    """(key, value) pairs of 'k=v,k=(..),k=v' (',' or ';' separators, nesting kept)."""
    depth, cur = 0, ""
    for ch in body + ",":
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
        if ch in ",;" and depth == 0:
            if "=" in cur:
                k, v = cur.split("=", 1)
                yield k.strip(), v.strip()
            cur = ""
            continue
        cur += ch


__all__ = ["ACTIVATIONS", "CLASS_NAMES", "DRAM_SHARDED", "IN0_SHARD_LAYOUT", "KINDS", "MCAST_1D_IN0", "MCAST_1D_IN1",
           "MCAST_2D", "MatmulProgramConfig"]
