"""``rotary_embedding_hf``: the spec, its price (``rope_us``), its core split, its op codes and its
op-report row (read and written)."""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.ops import (
    cycles_us,
    dram_us,
    launch_us,
    overlap,
    read_us,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    no_sharding,
    tensor,
)
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, smax
from jaxref.vocabulary import ActivationFormat

# ---- its price -------------------------------------------------------------------------------------
ROPE_PASSES = 3.5  # x*cos, rotate_half(x)*sin, add; negating half the tiles of rotate_half


ROPE_READS_PER_TILE = 4  # x tile, its rotate_half partner tile, cos tile, sin tile


def rope_us(hw: Blackhole, fit: FitParams, *, heads: int, rows: int, head_dim: int, act_dtype: str = "bf16",
            relax: Relax | None = None):
    """``ttnn.experimental.rotary_embedding_hf`` on [1, heads, rows, head_dim], us.

    Output tiles are split across the grid; each output tile reads its input tile, the
    rotate_half partner tile and the cos and sin tiles.
    """
    act = tile_bytes(act_dtype)
    tiles = heads * (rows // TILE) * (head_dim // TILE)
    cores = min(tiles, hw.grid_cores)
    per_core = math.ceil(tiles / cores)
    t_read = read_us(hw, fit, per_core * ROPE_READS_PER_TILE, per_core * ROPE_READS_PER_TILE * act, cores,
                     relax=relax)
    t_math = cycles_us(hw, per_core * ROPE_PASSES * fit.eltwise_cycles_per_tile)
    t_agg = dram_us(hw, fit, tiles * (ROPE_READS_PER_TILE + 1), tiles * (ROPE_READS_PER_TILE + 1) * act)
    return (launch_us(fit, cores, fit.launch_rope_us) + fit.dram_latency_us
            + smax(overlap(fit, t_read, t_math), t_agg, relax=relax))


@dataclasses.dataclass(frozen=True)
class RopeSpec:
    """``rotary_embedding_hf`` on [1, heads, rows, head_dim]."""

    heads: int
    rows: int
    head_dim: int
    act_dtype: str = "bf16"
    op_class = "rope"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return rope_us(hw, fit, heads=self.heads, rows=self.rows, head_dim=self.head_dim, act_dtype=self.act_dtype,
                       relax=relax)


def read(ln: ReportLine, hw: Blackhole, cls: str = "rope") -> RopeSpec:
    """A rotary-embedding row as a ``RopeSpec``."""
    x = ln.shape("INPUT_0")
    if x[0] > 1:
        raise Skip("batched operands")
    no_sharding(ln, "INPUT_0", "OUTPUT_0")
    return RopeSpec(x[1], x[2], x[3], ln.dtype("INPUT_0", ActivationFormat))


OP_CLASSES = {"rope": ("RotaryEmbeddingHfDeviceOperation", "RotaryEmbeddingHf")}  # first: written
SPECS = (RopeSpec,)


def cores(spec: RopeSpec, hw: Blackhole) -> int:
    """One tile per core, capped by the grid (``rope_us``'s split)."""
    return min(spec.heads * math.ceil(spec.rows / TILE) * (spec.head_dim // TILE), hw.grid_cores)


def record(spec: RopeSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    x = tensor((1, spec.heads, spec.rows, spec.head_dim), spec.act_dtype)
    cs = tensor((1, 1, spec.rows, spec.head_dim), spec.act_dtype)
    return OP_CLASSES["rope"][0], {}, [x, cs, cs], [x], ""
