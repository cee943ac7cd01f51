"""``nlp_create_qkv_heads``, ``nlp_concat_heads`` and ``nlp_create_qkv_heads_decode``: the specs, their
prices (``heads_us``, ``heads_decode_us``), their core split, their op codes and their op-report rows
(read and written)."""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.kinds.data_movement import data_movement_us
from costmodel.blackhole.ops import cycles_us, launch_us, noc_reads_cycles, us_of
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    l1_resident,
    no_sharding,
    tensor,
    unbatched,
)
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat

# ---- their prices ----------------------------------------------------------------------------------
SUBTILE_LINE_BYTES = 32  # a create-heads decode read: one face row of a bf16 tile, 16 elements


def heads_us(hw: Blackhole, fit: FitParams, *, rows: int, tiles_per_row: int, act_dtype: str = "bf16",
             in_l1: bool = False, relax: Relax | None = None):
    """``nlp_create_qkv_heads`` / ``nlp_concat_heads`` on a [rows, tiles_per_row*32] tensor, us.

    Pure data movement; the factories split tile rows across cores, so a 64-row input keeps only
    2 cores busy, and their readers move one tile per blocking read: each tile costs the overlap
    of a DRAM round trip and its transfer (latency bound: ~0.4 us per tile). With many tile rows
    every core streams at once and the op is bounded by all its DRAM bytes (each tile read once and
    written once) at the achievable aggregate bandwidth (``dram_us``): a [3200, 4096] prefill
    concat moves 52 MB. ``in_l1``: the input is L1-interleaved (read over the NoC, no DRAM bytes).
    """
    tile_rows = rows // TILE
    tiles = tile_rows * tiles_per_row
    return data_movement_us(hw, fit, units=tile_rows, reads_per_unit=tiles_per_row,
                            dram_tiles=tiles * (1 if in_l1 else 2), act_dtype=act_dtype, in_l1=in_l1, relax=relax)


@dataclasses.dataclass(frozen=True)
class HeadsSpec:
    """``nlp_create_qkv_heads`` (kind 'create') / ``nlp_concat_heads`` ('concat') on [rows, tiles_per_row*32];
    ``head_dim`` only names the concat input's layout [1, heads, rows, head_dim] in a profiler CSV;
    ``in_l1``: the input is L1-interleaved."""

    kind: str
    rows: int
    tiles_per_row: int
    act_dtype: str = "bf16"
    head_dim: int = 32
    in_l1: bool = False
    op_class = "heads"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return heads_us(hw, fit, rows=self.rows, tiles_per_row=self.tiles_per_row, act_dtype=self.act_dtype,
                        in_l1=self.in_l1, relax=relax)


def heads_decode_us(hw: Blackhole, fit: FitParams, *, users: int, q_heads: int, kv_heads: int, head_dim: int,
                    in_l1: bool = False, relax: Relax | None = None):
    """``nlp_create_qkv_heads_decode`` of an interleaved fused QKV [1, 1, users, (q + 2 kv) x head_dim]
    (bf16; ``in_l1``: L1-interleaved, else in DRAM) into the height-sharded Q, K and V heads, us.

    The interleaved factory (tt-metal ``nlp_create_qkv_heads_decode_interleaved_program_factory.cpp`` @
    08041dd9) runs one core per user, its two data-movement RISCs each copying one half (one face
    column) of every tile. Per head each RISC issues one sub-tile-line read (16 elements) per tile of
    the head and then waits for them (``reader_interleaved_tm_tile_layout_nlp_create_qkv_heads_decode.cpp``
    @ 00b0fa3f: ``noc_async_read`` per tile, ``noc_async_read_barrier`` per head); q + 2 kv heads one
    after another. A few bytes per request: no bandwidth term.

    From DRAM: head_dim / 32 requests at the core's page-request rate [core_read_tiles_per_s], then
    the last one's DRAM round trip [dram_latency_us]. Newer versions stage DRAM reads below the DRAM
    alignment through an L1 scratch (a second round trip per head); the real rows here price as the
    direct path.

    From L1 (the kernel's direct path: its aligned path is for DRAM inputs only): the head's reads go to
    other cores' L1 banks, one NoC round trip for the first [noc_l1_read_round_trip_cycles] and each
    further read issued before the same barrier [noc_l1_read_issue_cycles], both measured on Blackhole
    by tt-metal's NoC estimator ([BH-noc-est] in ``costmodel.hardware``; 64 B reads, the nearest size to
    these 32 B lines, between cores in another row and column, as most banks of an interleaved tensor
    are); no fitted parameter but the op class's fixed time.
    """
    reads = head_dim // TILE
    if in_l1:
        per_head = cycles_us(hw, noc_reads_cycles(hw, reads, SUBTILE_LINE_BYTES))
    else:
        per_head = fit.dram_latency_us + us_of(reads / fit.core_read_tiles_per_s)
    return launch_us(fit, users, fit.launch_heads_us) + (q_heads + 2 * kv_heads) * per_head


@dataclasses.dataclass(frozen=True)
class HeadsDecodeSpec:
    """``nlp_create_qkv_heads_decode`` of ``users`` rows of an interleaved fused QKV (bf16; ``in_l1``:
    L1-interleaved, else in DRAM) into ``q_heads`` + 2 x ``kv_heads`` heads of ``head_dim``."""

    users: int
    q_heads: int
    kv_heads: int
    head_dim: int
    act_dtype: str = "bf16"
    in_l1: bool = False
    op_class = "heads"

    def __post_init__(self):
        for name in ("users", "q_heads", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r}; expected a positive int")
        if not isinstance(self.kv_heads, int) or isinstance(self.kv_heads, bool) or self.kv_heads < 0:
            raise ValueError(f"kv_heads={self.kv_heads!r}; expected an int >= 0")
        if self.head_dim % TILE:
            raise ValueError(f"head_dim={self.head_dim}; expected a multiple of {TILE} (whole tiles per head)")
        if self.users > TILE:
            raise ValueError(f"users={self.users}; the op takes at most {TILE} users (one tile row)")
        if self.act_dtype != "bf16":
            raise ValueError(f"act_dtype={self.act_dtype!r}; the model prices bf16 (16-element lines of 32 B)")
        if self.in_l1 is not True and self.in_l1 is not False:
            raise ValueError(f"in_l1={self.in_l1!r}; expected a bool (the input L1-interleaved, else in DRAM)")

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return heads_decode_us(hw, fit, users=self.users, q_heads=self.q_heads, kv_heads=self.kv_heads,
                               head_dim=self.head_dim, in_l1=self.in_l1, relax=relax)


# ---- their op-report rows ------------------------------------------------------------------------------
def read_decode(ln: ReportLine) -> HeadsDecodeSpec:
    """An ``NLPCreateQKVHeadsDecodeDeviceOperation`` row as a ``HeadsDecodeSpec``: the interleaved factory
    from DRAM or L1; a sharded input, sub-core grids or a slice are skipped with the reason."""
    mem = ln.memory("INPUT_0")
    if "SHARDED" in mem:
        raise Skip(f"create-heads decode from a sharded input ({mem.removeprefix('DEV_0_')}: the sharded "
                   "factory, not modelled)")
    for key, expected in (("input_on_subcoregrids", "false"), ("slice_size", "std::nullopt"),
                          ("overlap_qk_coregrid", "true")):
        if (ln.attr(key) or expected) != expected:
            raise Skip(f"create-heads decode with {key}={ln.attr(key)} (the model prices {key}={expected})")
    act = ln.dtype("INPUT_0", ActivationFormat)
    counts = {}
    for key in ("head_dim", "num_q_heads", "num_kv_heads"):
        v = ln.attr(key)
        if v is None or not v.isdigit():
            raise ln.fail("ATTRIBUTES", f"{key}={v!r}; expected a non-negative integer")
        counts[key] = int(v)
    x, logical = unbatched(ln, "INPUT_0"), ln.logical("INPUT_0")
    hd, nq, nkv = counts["head_dim"], counts["num_q_heads"], counts["num_kv_heads"]
    if x[3] != (nq + 2 * nkv) * hd:
        raise ln.fail(ln.dim_col("INPUT_0", "X"), f"width {x[3]} != (num_q_heads {nq} + 2 x num_kv_heads {nkv}) x "
                                                  f"head_dim {hd}")
    try:
        return HeadsDecodeSpec(logical[2], nq, nkv, hd, act, in_l1=l1_resident(ln, "INPUT_0"))
    except ValueError as e:
        raise ln.fail("ATTRIBUTES", str(e)) from None


def read(ln: ReportLine, hw: Blackhole, cls: str) -> HeadsSpec | HeadsDecodeSpec:
    """A create-heads, concat-heads (``HeadsSpec``) or create-heads decode row (``cls``) as its spec."""
    if cls == "create_heads_decode":
        return read_decode(ln)
    no_sharding(ln, "INPUT_0", "OUTPUT_0")
    act = ln.dtype("INPUT_0", ActivationFormat)
    if cls == "create_heads":
        x = unbatched(ln, "INPUT_0")
        hd = ln.attr("head_dim")
        if hd is None or not hd.isdigit() or int(hd) < 1:
            raise ln.fail("ATTRIBUTES", f"head_dim={hd!r}; expected a positive integer")
        return HeadsSpec("create", x[2], x[3] // TILE, act, int(hd), in_l1=l1_resident(ln, "INPUT_0"))
    x = ln.shape("INPUT_0")
    if x[0] > 1:
        raise Skip("batched operands")
    return HeadsSpec("concat", x[2], x[1] * x[3] // TILE, act, x[3], in_l1=l1_resident(ln, "INPUT_0"))


OP_CLASSES = {"create_heads": ("NlpCreateHeadsDeviceOperation", "NLPCreateHeadsDeviceOperation", "NlpCreateHeads"),
              "concat_heads": ("NLPConcatHeadsDeviceOperation", "NlpConcatHeadsDeviceOperation", "NLPConcatHeads"),
              "create_heads_decode": ("NLPCreateQKVHeadsDecodeDeviceOperation",)}
SPECS = (HeadsSpec, HeadsDecodeSpec)


def cores(spec: HeadsSpec | HeadsDecodeSpec, hw: Blackhole) -> int:
    """One tile row per core, capped by the grid (``heads_us``'s split); one core per user (decode)."""
    if isinstance(spec, HeadsDecodeSpec):
        return spec.users
    return min(math.ceil(spec.rows / TILE), hw.grid_cores)


def record(spec: HeadsSpec | HeadsDecodeSpec, hw: Blackhole, heads: tuple[int, int] | None = None):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row; ``heads``: (q heads,
    kv heads) of a create-heads op (without it every head counts as a q head, num_kv_heads=0, as
    ttnn's q-only form)."""
    if isinstance(spec, HeadsDecodeSpec):
        return record_decode(spec)
    in_memory = "DEV_0_L1_INTERLEAVED" if spec.in_l1 else "DEV_0_DRAM_INTERLEAVED"
    if spec.kind == "create":
        total = spec.tiles_per_row * TILE // spec.head_dim
        nq, nkv = (total, 0) if heads is None else heads
        if nq + 2 * nkv != total:
            raise ValueError(f"heads={heads}: q + 2 kv heads must be the {total} heads of the input")
        outs = [tensor((1, nq, spec.rows, spec.head_dim), spec.act_dtype)]
        if nkv:
            outs += [tensor((1, nkv, spec.rows, spec.head_dim), spec.act_dtype)] * 2
        attrs = {"head_dim": str(spec.head_dim), "num_q_heads": str(nq), "num_kv_heads": str(nkv),
                 "transpose_k_heads": "false"}
        x = tensor((1, 1, spec.rows, spec.tiles_per_row * TILE), spec.act_dtype, memory=in_memory)
        return OP_CLASSES["create_heads"][0], attrs, [x], outs, ""
    n = spec.tiles_per_row * TILE // spec.head_dim
    return (OP_CLASSES["concat_heads"][0], {},
            [tensor((1, n, spec.rows, spec.head_dim), spec.act_dtype, memory=in_memory)],
            [tensor((1, 1, spec.rows, spec.tiles_per_row * TILE), spec.act_dtype)], "")


def record_decode(spec: HeadsDecodeSpec):
    """The row of a create-heads decode: the fused QKV interleaved in DRAM (or L1), Q / K / V height-sharded,
    one user per core."""
    width = (spec.q_heads + 2 * spec.kv_heads) * spec.head_dim
    memory = "DEV_0_L1_INTERLEAVED" if spec.in_l1 else "DEV_0_DRAM_INTERLEAVED"
    x = dataclasses.replace(tensor((1, 1, TILE, width), spec.act_dtype, memory=memory),
                            logical=(1, 1, spec.users, width))
    outs = [tensor((1, spec.users, TILE, spec.head_dim), spec.act_dtype, memory="DEV_0_L1_HEIGHT_SHARDED")
            for _ in range(3 if spec.kv_heads else 1)]
    attrs = {"head_dim": str(spec.head_dim), "num_q_heads": str(spec.q_heads), "num_kv_heads": str(spec.kv_heads),
             "input_on_subcoregrids": "false", "overlap_qk_coregrid": "true", "slice_size": "std::nullopt"}
    return OP_CLASSES["create_heads_decode"][0], attrs, [x], outs, ""
