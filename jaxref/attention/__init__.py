"""ADR-0060 attention algorithms as executable, differentiable references.

Layout everywhere: q [T, N, H], k / v [S, K, H] (no batch axis; ``jax.vmap`` adds one). Every
algorithm returns ``(out [T, N, H], lse [N, T])`` like ``attention_reference`` (a fully masked row
gives out 0, lse MASK_LSE) and has a ``*_schedule`` planning function returning, as plain data,
the plan the numeric code executes.

* ``flash_attention`` / ``flash_schedule``: tiled online softmax, GQA M-fold, causal tile skip.
* ``split_kv_attention`` / ``split_kv_schedule``: decode-SP over C x P ranks, 2-level reduce.
* ``ring_attention`` / ``ring_schedule``: prefill-SP, head-parallel ring KV, causal step skip.
* ``KVPlacement``: token -> (CUBE, PE, slot) maps (round-robin and contiguous layouts).
* ``split_kv_attention_sharded``: the same decode-SP with ``jax.shard_map`` on a ('cube', 'pe') mesh
  (reduce 'tree' / 'all_to_all' by ``lax.ppermute`` rounds, 'all_reduce' by ``pmax`` + ``psum``).
* ``ring_attention_sharded`` / ``sharded_ring_plan``: the ring on a ('cube', 'pe') mesh, KV blocks
  passed with ``lax.ppermute``, causal skip with ``lax.cond``.

All of them fold through one online-softmax core (``core``: ``Partial``, ``fold``, ``merge``,
``finalize``, the GQA fold), as does the expert's cache attention (``jaxref.cache_attention``).
"""

from jaxref.attention.core import KV_LAYOUTS, Partial, finalize, fold, group_queries, merge, merge_all
from jaxref.attention.distributed import MESH_AXES, split_kv_attention_sharded
from jaxref.attention.flash import (
    flash_attention,
    flash_attention_jit,
    flash_plan,
    flash_schedule,
)
from jaxref.attention.geometry import AttentionGeometry
from jaxref.attention.placement import LAYOUTS, KVPlacement
from jaxref.attention.reduce import REDUCES, cube_mesh_shape, reduce_partials, reduce_plan
from jaxref.attention.reference import MASK_LSE, MASK_VALUE, attention_reference, causal_mask
from jaxref.attention.ring import (
    ORDERINGS,
    ring_attention,
    ring_attention_jit,
    ring_blocks,
    ring_plan,
    ring_schedule,
)
from jaxref.attention.ring_sharded import ring_attention_sharded, sharded_ring_plan
from jaxref.attention.schedule import FlashSchedule, ReducePlan, RingSchedule, SplitKVSchedule, SweepCounts
from jaxref.attention.split_kv import (
    kv_placement,
    split_kv_attention,
    split_kv_attention_jit,
    split_kv_partials,
    split_kv_plan,
    split_kv_schedule,
)
from jaxref.attention.sweep import TileConfig

__all__ = [
    "KV_LAYOUTS",
    "LAYOUTS",
    "MASK_LSE",
    "MASK_VALUE",
    "MESH_AXES",
    "ORDERINGS",
    "REDUCES",
    "AttentionGeometry",
    "FlashSchedule",
    "KVPlacement",
    "Partial",
    "ReducePlan",
    "RingSchedule",
    "SplitKVSchedule",
    "SweepCounts",
    "TileConfig",
    "attention_reference",
    "causal_mask",
    "cube_mesh_shape",
    "finalize",
    "flash_attention",
    "flash_attention_jit",
    "flash_plan",
    "flash_schedule",
    "fold",
    "group_queries",
    "kv_placement",
    "merge",
    "merge_all",
    "reduce_partials",
    "reduce_plan",
    "ring_attention",
    "ring_attention_jit",
    "ring_attention_sharded",
    "ring_blocks",
    "ring_plan",
    "ring_schedule",
    "sharded_ring_plan",
    "split_kv_attention",
    "split_kv_attention_jit",
    "split_kv_attention_sharded",
    "split_kv_partials",
    "split_kv_plan",
    "split_kv_schedule",
]
