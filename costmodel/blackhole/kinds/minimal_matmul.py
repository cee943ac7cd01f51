"""``ttnn.experimental.minimal_matmul`` (op code ``MinimalMatmulOp``): its spec, work split and cost.

The program (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/experimental/minimal_matmul/device/
minimal_matmul_program_factory.cpp @ 856eb4af, the version whose kernels ``dm_in0_sender.cpp`` /
``dm_in1_sender_out.cpp`` serve both senders and receivers, as the real reports list them) runs on the
whole ``compute_with_storage_grid_size`` grid and splits *tiles*, not blocks, over it:

* the grid is transposed when M > N (``transpose_core_grid``): M over the grid's rows (``grid_y``) and
  N over its columns (``grid_x``), or the reverse;
* M is padded to a multiple of its axis' cores and N to one of theirs, so every core owns
  ``M_tiles_per_core = ceil(Mt / m_axis)`` x ``N_tiles_per_core = ceil(Nt / n_axis)`` output tiles
  (a core past the last valid row or column still runs the loop on padding: "the receiver cores
  must ack all blocks that sender cores are expected to send");
* a core steps through ``ceil(M_tiles_per_core / M_block_size)`` x ``ceil(N_tiles_per_core /
  N_block_size)`` output blocks and, for each, all ``ceil(Kt / K_block_size)`` K blocks; its last
  block in M or N is partial and moves only its valid tiles (compute.cpp's ``current_M_block_tiles =
  m_tile_end - m_tile``, and the same in N), multiplied in whole subblocks (below).

So a [32, 768] x [768, 3072] matmul on 8x8 gives each core 12 N tiles (blocks of 8 and 4) and 3 K
blocks, and a [32, 3072] x [3072, 768] one 3 N tiles and 12 K blocks: 288 tile products per core
both, and the CLIP report measures both at 38.0 us. With M = 1 tile the M axis is padded to the 8 grid
rows: rows 1-7 own one padding tile each; their in0 injectors read nothing (``read_in0_block_sync`` stops
at the logical M) but every core still forwards, multiplies and acks every block.

What the compute kernel runs per K block (compute.cpp, the version of the factory above: ``matmul_blocks``
and its caller; tenstorrent/tt-metal .../minimal_matmul/device/kernels/compute.cpp as stored in the search
index, id 10480094267, and the same loops in the later id 54527958730):

* ``matmul_blocks`` walks the block's valid M x N tiles in subblocks of ``current_subblock_h = min(current
  M tiles, subblock_h)`` x ``current_subblock_w = min(current N tiles, subblock_w)``, from 0 while the start
  is inside the block, each subblock over all ``K_block_tiles``: a partial block of c tiles runs ceil(c /
  s) * s of them (CLIP's 3 N tiles in 2-wide subblocks: 4), and K past the tensor runs on zero-filled
  tiles (``subblock_tiles``);
* the partial sums accumulate in the intermediate buffer in L1 (``llk_pack_reconfig_l1_acc(1)`` from the
  second K block on: ``packer_l1_acc``), packed once per K block; not priced apart (the packer runs on its
  own thread while the next subblock is multiplied);
* after the K loop, ``copy_block`` (or with a bias ``add_bias_block``: add_tiles_bcast ROW) moves the whole
  ``M_block_tiles x N_block_tiles`` intermediate block, padding tiles included, into the output buffer one
  tile at a time: one elementwise pass over intermediate tiles (Float32 with fp32_dest_acc_en, else
  Float16_b; ``ops.intermediate_pass_cycles``, the norms' "inter" pass) per output block. All but the last block's pass run while
  the data movers fetch the next block's inputs (its share joins the per-step math); the last one's is
  serial before the last output write.

The bias (one N block per output block) is read by the other data-movement kernel after its K loop
(``FUSE_BIAS``, ``!is_output_writer``), while the compute runs the last K block: not priced apart, its
bytes are in the DRAM bound.

Per step the first core of each row reads the in0 block from DRAM and the first core of each column
the in1 block, and each block travels along its row / column as a chain of unicasts: a core waits
for the whole block, then writes it on to the next core (``in0_next_core`` / ``in1_next_core``, the
``build_core_order_for_axis`` chain; every core acks every block, so all cores of a row step
together). That is the 2D multicast matmul's block (``kinds.matmul.mcast_2d_block_us``) with each sender's
read followed by one write of the block over a NoC link on the same RISC, as the 1D matmul's sender
(``kinds.matmul.matmul_us``: read, then multicast); and the chain fills once: the first block reaches the
last core of a chain of c cores after c - 1 store-and-forward writes. No parameter of its own.
Each M block re-reads in1 and each N block re-reads in0 from DRAM. A forward moves the valid M rows
(dm_in0_sender.cpp's ``current_block_bytes``) or the valid N tiles of every row (dm_in1_sender_out.cpp's
``current_N_tiles_bytes``) of the whole K block (search index ids 10362540268 and 22390551918).

The injectors read at once, but not the same amount: one per valid M slice reads the in0 block (M_block x
K_block activation tiles), one per valid N slice the in1 block (K_block x N_block weight tiles). Each gets
its fair share of the DRAM until its read is done, so a smaller read frees its share early (``ops.read_us``
with ``others``): Muse's config-less bfp8 rows (11 in0 injectors of 64 bf16 tiles, 10 in1 injectors of
~56 bfp8 tiles) move 2.1 MB a step, not the 2.8 MB of 21 in0 blocks that pricing every sender as the
larger one counted (+11% to +23% -> -5% to +2.4%). Not closed by it: Muse's bfp4 projection with blocks
8/13/16 then lands 9.9% under its measurement (it was 1.9% under while every sender was priced as an in0
block): its steps take 17.2 us against 13.6 us of tile products and less of data movement, a gap no
count here explains.

The output is written block by block by the data-movement kernel of the smaller input (in0's unless
the grid is transposed: "Output is always written by DM reading the smaller input", the factory
above), on the same RISC as that input's reads and forwards: each output block but the last is
written during the K loop of the next one (``defer_write`` ... "defer writing until the
defer_k_write_block iteration of the next output block", dm_in1_sender_out.cpp / dm_in0_sender.cpp
of the same kernels, e.g. tenstorrent/tt-metal dm_in1_sender_out.cpp as stored in the search index,
id 11989679149), so its time joins that chain's per-step work, and only the last block's write
follows the pipeline. (An injector core writes each block right after its K loop instead: the same
work on the same RISC.)

Operands the reader accepts beyond DRAM-interleaved ones: weights (in1) DRAM width-sharded. The
kernels read in1 through a ``TensorAccessor`` one tile page at a time (``noc_async_read_tile``), the
same reads as for an interleaved tensor, so they are priced as such; the shard spec is not in an
op report, and which bank serves a page (a column strip per bank instead of round-robin pages) is
not modelled.

With no ``MinimalMatmulConfig`` (``config`` std::nullopt) the factory takes the device's compute grid
and ``determine_default_block_sizes``: M, K and N blocks of 8 tiles, subblock 2 x 2 with
fp32_dest_acc_en, else 2 x 4 when N >= M and 4 x 2 otherwise (``default_config``; the same defaults in
minimal_matmul_program_factory.cpp @ 856eb4af and the later versions stored).

Legality (``MinimalMatmulSpec.validate``, the one rule the reader and the plan search apply): the
op's own checks (minimal_matmul_device_operation.cpp, ``MinimalMatmulOp::validate`` @ 0007784228:
block and subblock sizes >= 1, the subblocks dividing the M / N blocks, subblock_h * subblock_w <= the
destination tiles, a grid of at least 2x2 within the device's) and, which the op does not check
before its program is built, its circular buffers fitting one core's L1: the factory above allocates,
on every core of the grid, in0 2 x M_block x K_block tiles in the activation's format, in1 2 x
K_block x N_block tiles in the weights' format, the output 2 x M_block x N_block tiles (the
activation's format: the output dtype ttnn defaults to), an intermediate M_block x N_block tiles in
Float32 with fp32_dest_acc_en (else Float16_b) and, with a bias, N_block tiles of it (in the bias's
format, taken as the activation's: the reports' bias rows are BFLOAT16). Block sizes need not divide
the tile counts.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from costmodel.blackhole.kinds.matmul import mcast_2d_block_us
from costmodel.blackhole.ops import cycles_us, dram_us, intermediate_pass_cycles, launch_us, read_us, us_of
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.program_config import DEST_TILES
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    compute_kernel,
    l1_resident,
    no_sharding,
    tensor,
    unbatched,
)
from costmodel.blackhole.report_schema import format_config
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat, WeightFormat

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
        act, w = tile_bytes(self.act_dtype), tile_bytes(self.weight_dtype)
        interm = tile_bytes("fp32" if self.fp32_dest_acc else "bf16")
        mk, kn, mn = self.m_block * self.k_block, self.k_block * self.n_block, self.m_block * self.n_block
        return 2 * mk * act + 2 * kn * w + 2 * mn * act + mn * interm + (self.n_block * act if self.bias else 0)

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
        """The factory's work split (module docstring): 'transposed' (M over the grid's columns),
        'm_axis' / 'n_axis' (cores along M / N), 'm_tiles_per_core' / 'n_tiles_per_core',
        'm_blocks_per_core' / 'n_blocks_per_core', 'k_blocks', and 'rows_used' / 'cols_used' (cores
        along M / N whose tiles are not all padding)."""
        mt, kt, nt = self.M // TILE, self.K // TILE, self.N // TILE
        transposed = self.M > self.N
        m_axis, n_axis = (self.grid_x, self.grid_y) if transposed else (self.grid_y, self.grid_x)
        mtpc, ntpc = math.ceil(mt / m_axis), math.ceil(nt / n_axis)
        return {"transposed": int(transposed), "m_axis": m_axis, "n_axis": n_axis, "m_tiles_per_core": mtpc,
                "n_tiles_per_core": ntpc, "m_blocks_per_core": math.ceil(mtpc / self.m_block),
                "n_blocks_per_core": math.ceil(ntpc / self.n_block), "k_blocks": math.ceil(kt / self.k_block),
                "rows_used": math.ceil(mt / mtpc), "cols_used": math.ceil(nt / ntpc)}

    def cores(self) -> int:
        """Cores the program runs on (and an op report's CORE COUNT): the whole config grid."""
        return self.grid_x * self.grid_y

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return minimal_matmul_us(hw, fit, self, relax=relax)


# determine_default_block_sizes (module docstring): M, K, N blocks in tiles
DEFAULT_BLOCKS = (8, 8, 8)


def default_config(*, M: int, N: int, fp32_dest_acc: bool) -> dict[str, int]:
    """ttnn's blocks and subblock for a minimal matmul without a config (module docstring), as the
    ``MinimalMatmulSpec`` fields m_block, k_block, n_block, subblock_h, subblock_w. M, N in elements."""
    sub = (2, 2) if fp32_dest_acc else ((2, 4) if N >= M else (4, 2))
    blocks = dict(zip(("m_block", "k_block", "n_block"), DEFAULT_BLOCKS))
    return blocks | {"subblock_h": sub[0], "subblock_w": sub[1]}


def minimal_matmul_us(hw: Blackhole, fit: FitParams, spec: MinimalMatmulSpec, *, relax: Relax | None = None):
    """Time of a minimal matmul, us (module docstring): the launch on the whole grid + the slower of
    the pipeline (steps x the 2D block of the average valid block with its forward write and, on the
    output writer's chain, its share of the deferred output writes, the injectors sharing the DRAM by
    what each reads, the compute's subblock-rounded products and its share of the output blocks'
    epilogue passes; a round trip, the two chains to fill, the last block's epilogue and output write)
    and all DRAM bytes (in1 once per M block, in0 once
    per N block, bias, output) at the aggregate bandwidth."""
    return minimal_matmul_batch_us(hw, fit, [spec], relax=relax)[0]


BATCH_FIELDS = ("M", "K", "N", "grid_x", "grid_y", "weight_dtype", "act_dtype", "fidelity", "bias", "fp32_dest_acc")


def subblock_tiles(tiles_per_core: int, block: int, subblock: int) -> float:
    """Tiles along one output axis that compute.cpp's ``matmul_blocks`` runs per output block, averaged
    over a core's blocks (module docstring): ``tiles_per_core`` split into blocks of ``block`` (the last
    partial), each walked in subblocks of min(its tiles, ``subblock``) from 0 while the start is inside
    it, so a block of c tiles costs ceil(c / s) * s with s = min(c, subblock)."""
    blocks = math.ceil(tiles_per_core / block)
    sizes = [block] * (blocks - 1) + [tiles_per_core - (blocks - 1) * block]
    return sum(math.ceil(c / min(c, subblock)) * min(c, subblock) for c in sizes) / blocks


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
    pad = (1 << (len(specs) - 1).bit_length()) - len(specs)
    padded = specs + specs[-1:] * pad
    act, w = tile_bytes(s0.act_dtype), tile_bytes(s0.weight_dtype)
    # average valid tiles of a block: a partial last block reads and writes only its valid tiles
    m_eff, n_eff = sp["m_tiles_per_core"] / sp["m_blocks_per_core"], sp["n_tiles_per_core"] / sp["n_blocks_per_core"]
    k_eff = kt / sp["k_blocks"]
    # what the kernels forward and multiply: whole K blocks (K past the tensor is zero-filled in L1) and,
    # in the compute kernel, M and N rounded up to whole subblocks
    k_full = np.asarray([s.k_block for s in padded], np.float64)
    m_math = np.asarray([subblock_tiles(x["m_tiles_per_core"], s.m_block, s.subblock_h) for s, x in zip(padded, splits)])
    n_math = np.asarray([subblock_tiles(x["n_tiles_per_core"], s.n_block, s.subblock_w) for s, x in zip(padded, splits)])
    blocks = sp["m_blocks_per_core"] * sp["n_blocks_per_core"]
    steps = blocks * sp["k_blocks"]
    senders = sp["rows_used"] + sp["cols_used"]
    # each block is written on to the next core of its chain after it lands (one NoC link)
    fwd0 = us_of(m_eff * k_full * act / hw.noc_link_bytes_per_s)
    fwd1 = us_of(k_full * n_eff * w / hw.noc_link_bytes_per_s)
    # per output block, after its K loop, the compute kernel copies the whole M_block x N_block intermediate
    # block (or adds the bias to it) into the output buffer: one pass over intermediate tiles, on the compute
    # thread; all but the last block's run while the data movers fetch the next block's inputs
    t_epilogue = cycles_us(hw, np.asarray([s.m_block * s.n_block for s in padded], np.float64)
                           * intermediate_pass_cycles(fit, fp32_dest_acc=s0.fp32_dest_acc))
    t_math = (cycles_us(hw, m_math * k_full * n_math * hw.tile_matmul_cycles(s0.fidelity))
              + t_epilogue * (blocks - 1) / steps)
    # one output block's write, every busy core writing at once; all but the last block's are written
    # during the next block's K loop by the smaller input's kernel (in1's when transposed), on its RISC
    busy = sp["rows_used"] * sp["cols_used"]
    t_write = read_us(hw, fit, m_eff * n_eff, m_eff * n_eff * act, busy, relax=relax)
    deferred = t_write * (blocks - 1) / steps
    chain0, chain1 = fwd0 + (1 - sp["transposed"]) * deferred, fwd1 + sp["transposed"] * deferred
    # the injectors of in0 (one per valid M slice) and of in1 (one per valid N slice) read blocks of different
    # sizes at once: the DRAM shares their bytes out (read_us's others)
    t_block = mcast_2d_block_us(hw, fit, m_tiles=m_eff, k_tiles=k_eff, n_tiles=n_eff, senders=senders,
                                act_dtype=s0.act_dtype, weight_dtype=s0.weight_dtype, fidelity=s0.fidelity,
                                forward_us=(chain0, chain1), sender_split=(sp["rows_used"], sp["cols_used"]),
                                math_us=t_math, relax=relax)
    # the first block reaches the end of its chain (in0 along the N axis, in1 along the M axis) after
    # one store-and-forward write per hop
    t_fill = smax((sp["n_axis"] - 1) * fwd0, (sp["m_axis"] - 1) * fwd1, relax=relax)
    in1_tiles = sp["m_blocks_per_core"] * kt * nt
    act_tiles = sp["n_blocks_per_core"] * mt * kt + mt * nt + (sp["m_blocks_per_core"] * nt if s0.bias else 0)
    t_agg = dram_us(hw, fit, in1_tiles, in1_tiles * w) + dram_us(hw, fit, act_tiles, act_tiles * act)
    t_pipe = steps * t_block + fit.dram_latency_us + t_fill + t_epilogue + t_write
    return (launch_us(fit, s0.cores(), fit.launch_matmul_us) + smax(t_pipe, t_agg, relax=relax))[:len(specs)]


# ---- its op-report row ------------------------------------------------------------------------------
OP_CLASSES = {"minimal_matmul": OP_CODES}
SPECS = (MinimalMatmulSpec,)


def cores(spec: MinimalMatmulSpec, hw: Blackhole) -> int:
    """The cores holding output blocks (``MinimalMatmulSpec.cores``), as priced."""
    return spec.cores()


def read(ln: ReportLine, hw: Blackhole, cls: str = "minimal_matmul") -> MinimalMatmulSpec:
    """A ``MinimalMatmulOp`` row: ``config`` MinimalMatmulConfig(M/K/N_block_size, subblock, grid), or
    std::nullopt for ttnn's defaults (``minimal_matmul.default_config``)."""
    cfg = ln.attr("config") or "std::nullopt"
    if cfg != "std::nullopt" and not cfg.startswith("MinimalMatmulConfig("):
        raise Skip(f"minimal matmul config {cfg.split('(')[0]!r} not modelled")
    if (ln.attr("fused_activation") or "std::nullopt") != "std::nullopt":
        raise Skip(f"fused activation not modelled ({ln.attr('fused_activation')})")
    x, w = unbatched(ln, "INPUT_0"), unbatched(ln, "INPUT_1")
    # DRAM width-sharded weights: read page by page through a TensorAccessor, as interleaved (minimal_matmul)
    if ln.memory("INPUT_1") != "DEV_0_DRAM_WIDTH_SHARDED":
        no_sharding(ln, "INPUT_1")
    no_sharding(ln, "INPUT_0", "OUTPUT_0", *(("INPUT_2",) if ln.has("INPUT_2") else ()))
    for pre in ("INPUT_0", "INPUT_1", "OUTPUT_0"):
        if l1_resident(ln, pre):
            raise Skip(f"minimal matmul with {pre} in L1 (the model streams DRAM operands)")
    if w[2] != x[3]:
        raise ln.fail(ln.dim_col("INPUT_1", "Y"), f"K={w[2]} of the weights != K={x[3]} of the activations")
    act, wdt = ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", WeightFormat)
    if ln.has("INPUT_2"):
        ln.dtype("INPUT_2", ActivationFormat)
    if cfg == "std::nullopt":  # ttnn's defaults on the device's grid (the row's: ``hw`` is its board)
        grid = (hw.grid_x, hw.grid_y)
        blocks = default_config(M=x[2], N=w[3], fp32_dest_acc=ln.fp32_dest_acc())
    else:
        grid = ln.config_grid(cfg, hw)
        if grid is None:
            raise ln.fail("ATTRIBUTES", "MinimalMatmulConfig lacks compute_with_storage_grid_size")
        blocks = {"m_block": ln.config_int(cfg, "M_block_size"), "k_block": ln.config_int(cfg, "K_block_size"),
                  "n_block": ln.config_int(cfg, "N_block_size"),
                  "subblock_h": ln.config_int(cfg, "subblock_h", default=1),
                  "subblock_w": ln.config_int(cfg, "subblock_w", default=1)}
    spec = MinimalMatmulSpec(x[2], x[3], w[3], grid_x=grid[0], grid_y=grid[1], weight_dtype=wdt, act_dtype=act,
                             fidelity=ln.fidelity(), bias=ln.has("INPUT_2"), fp32_dest_acc=ln.fp32_dest_acc(),
                             **blocks)
    try:
        spec.validate(hw)
    except ValueError as e:
        raise Skip(f"MinimalMatmulConfig outside the model's legality rule ({e})") from None
    return spec


def record(spec: MinimalMatmulSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    cfg = format_config("MinimalMatmulConfig", [
        ("M_block_size", spec.m_block), ("K_block_size", spec.k_block), ("N_block_size", spec.n_block),
        ("subblock_h", spec.subblock_h), ("subblock_w", spec.subblock_w),
        ("compute_with_storage_grid_size", f"(x={spec.grid_x};y={spec.grid_y})")])
    ckc = compute_kernel(spec.fidelity, fp32_dest_acc=spec.fp32_dest_acc)
    attrs = {"compute_kernel_config": ckc, "config": cfg, "fused_activation": "std::nullopt"}
    ins = [tensor((1, 1, spec.M, spec.K), spec.act_dtype), tensor((1, 1, spec.K, spec.N), spec.weight_dtype)]
    if spec.bias:
        ins.append(tensor((1, 1, TILE, spec.N), spec.act_dtype))
    return OP_CODES[0], attrs, ins, [tensor((1, 1, spec.M, spec.N), spec.act_dtype)], spec.fidelity


__all__ = [
    "BATCH_FIELDS",
    "DEFAULT_BLOCKS",
    "OP_CLASSES",
    "OP_CODES",
    "SPECS",
    "MinimalMatmulSpec",
    "cores",
    "default_config",
    "minimal_matmul_batch_us",
    "minimal_matmul_us",
    "read",
    "record",
    "subblock_tiles",
]
