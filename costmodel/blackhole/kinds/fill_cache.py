"""``ttnn.fill_cache`` (UpdateCache FILL): the spec, its price (``fill_cache_us``), its core split,
its op codes and its op-report row (read and written)."""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.ops import (
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
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat, CacheFormat


# ---- its price -------------------------------------------------------------------------------------
def fill_cache_us(hw: Blackhole, fit: FitParams, *, kv_heads: int, rows: int, head_dim: int,
                  act_dtype: str = "bf16", kv_dtype: str = "bf16", relax: Relax | None = None):
    """``ttnn.fill_cache`` writing [kv_heads, rows, head_dim] into the cache tail, us.

    Tile rows are split across cores; the reader (input tiles) and writer (cache-format tiles)
    run on separate NoCs, so the slower of the two streams counts.
    """
    tile_rows, ht = kv_heads * (rows // TILE), head_dim // TILE
    cores = min(tile_rows, hw.grid_cores)
    per_core = math.ceil(tile_rows / cores) * ht
    t_in = read_us(hw, fit, per_core, per_core * tile_bytes(act_dtype), cores, relax=relax)
    t_out = read_us(hw, fit, per_core, per_core * tile_bytes(kv_dtype), cores, relax=relax)
    return launch_us(fit, cores, fit.launch_fill_cache_us) + fit.dram_latency_us + overlap(fit, t_in, t_out)


@dataclasses.dataclass(frozen=True)
class FillCacheSpec:
    """``ttnn.fill_cache`` of [kv_heads, rows, head_dim] into a ``kv_dtype`` cache."""

    kv_heads: int
    rows: int
    head_dim: int
    kv_dtype: str
    act_dtype: str = "bf16"
    op_class = "fill_cache"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return fill_cache_us(hw, fit, kv_heads=self.kv_heads, rows=self.rows, head_dim=self.head_dim,
                             act_dtype=self.act_dtype, kv_dtype=self.kv_dtype, relax=relax)


def read(ln: ReportLine, hw: Blackhole, cls: str = "fill_cache") -> FillCacheSpec:
    """A fill_cache row (not paged) as a ``FillCacheSpec``."""
    op = ln.attr("op_type") or "UpdateCacheOpType::FILL"
    if op != "UpdateCacheOpType::FILL":
        raise Skip(f"cache op type not modelled ({op}; the model covers fill_cache)")
    if "page_table" in ln.attrs or (ln.attr("paged") or "false") == "true":
        raise Skip("paged cache")
    new = ln.shape("INPUT_1")
    if new[0] > 1:
        raise Skip("batched operands")
    no_sharding(ln, "INPUT_0", "INPUT_1")
    return FillCacheSpec(new[1], new[2], new[3], ln.dtype("INPUT_0", CacheFormat), ln.dtype("INPUT_1", ActivationFormat))


OP_CLASSES = {"fill_cache": ("UpdateKVCacheOperation", "UpdateCacheDeviceOperation", "UpdateCache")}  # first: written
SPECS = (FillCacheSpec,)


def cores(spec: FillCacheSpec, hw: Blackhole) -> int:
    """One tile row of one kv head per core, capped by the grid (``fill_cache_us``'s split)."""
    return min(spec.kv_heads * math.ceil(spec.rows / TILE), hw.grid_cores)


def record(spec: FillCacheSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    cache = tensor((1, spec.kv_heads, spec.rows, spec.head_dim), spec.kv_dtype)
    attrs = {"op_type": "UpdateCacheOpType::FILL", "batch_idx": "0", "update_idx": "0", "batch_offset": "0"}
    return (OP_CLASSES["fill_cache"][0], attrs,
            [cache, tensor((1, spec.kv_heads, spec.rows, spec.head_dim), spec.act_dtype)], [cache], "")
