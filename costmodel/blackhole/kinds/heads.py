"""``nlp_create_qkv_heads`` and ``nlp_concat_heads``: the spec, its price (``heads_us``), its core
split, its op codes and its op-report row (read and written)."""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.kinds.data_movement import data_movement_us
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


# ---- its price -------------------------------------------------------------------------------------
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


def read(ln: ReportLine, hw: Blackhole, cls: str) -> HeadsSpec:
    """A create-heads or concat-heads row (``cls``) as a ``HeadsSpec``."""
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
              "concat_heads": ("NLPConcatHeadsDeviceOperation", "NlpConcatHeadsDeviceOperation", "NLPConcatHeads")}
SPECS = (HeadsSpec,)


def cores(spec: HeadsSpec, hw: Blackhole) -> int:
    """One tile row per core, capped by the grid (``heads_us``'s split)."""
    return min(math.ceil(spec.rows / TILE), hw.grid_cores)


def record(spec: HeadsSpec, hw: Blackhole, heads: tuple[int, int] | None = None):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row; ``heads``: (q heads,
    kv heads) of a create-heads op (without it every head counts as a q head, num_kv_heads=0, as
    ttnn's q-only form)."""
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
