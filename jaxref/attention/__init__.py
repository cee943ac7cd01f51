"""ADR-0060 attention algorithms as executable, differentiable references.

Layout everywhere: q [T, N, H], k / v [S, K, H] (no batch axis; ``jax.vmap`` adds one). Each
algorithm is a frozen, hashable config object holding its knobs, called like the dense oracle:

    out, lse = Flash(tile=128)(q, k, v, causal=True)       # == attention_reference(q, k, v, causal=True)
    sched = SplitKV(num_cubes=4, pes_per_cube=8).schedule(1, 8192)   # plain data for the cost model

(a fully masked row gives out 0, lse MASK_LSE; a NaN / Inf in a valid key or value propagates as
through the reference). Vocabulary: a config's ``plan(T, S, causal=...)`` is the static tables its
numeric code executes (``SweepPlan`` tile lists, ``KVPlacement`` shard tables, a ``ReducePlan``'s
rounds); its ``schedule(...)`` is the plain-data counts derived from that plan (cost model input).

* ``Reference``: the dense oracle (``attention_reference``) as a config.
* ``Flash``: tiled online softmax, GQA M-fold, causal tile skip.
* ``SplitKV``: decode-SP over C x P ranks, placement + 2-level reduce; ``SplitKVSharded`` the same
  with ``jax.shard_map`` on a ('cube', 'pe') mesh.
* ``Ring``: prefill-SP, head-parallel ring KV, causal step skip; ``RingSharded`` on a mesh.
* ``IMPLEMENTATIONS``: every config with its capability flags (what tests and the report iterate).

All of them fold through one online-softmax core (``jaxref.attention.core``), as does the expert's
cache attention (``jaxref.cache_attention``).
"""

from jaxref.attention.distributed import MESH_AXES, SplitKVSharded
from jaxref.attention.flash import Flash
from jaxref.attention.geometry import AttentionGeometry
from jaxref.attention.placement import KVPlacement
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.reduce import reduce_plan
from jaxref.attention.reference import MASK_LSE, MASK_VALUE, Reference, attention_reference, causal_mask
from jaxref.attention.registry import IMPLEMENTATIONS, Implementation
from jaxref.attention.ring import Ring
from jaxref.attention.ring_sharded import RingSharded
from jaxref.attention.schedule import FlashSchedule, ReducePlan, RingSchedule, SplitKVSchedule
from jaxref.attention.split_kv import SplitKV
from jaxref.attention.sweep import SweepPlan, TileConfig

__all__ = [
    "IMPLEMENTATIONS",
    "MASK_LSE",
    "MASK_VALUE",
    "MESH_AXES",
    "AttentionGeometry",
    "AttentionProblem",
    "Flash",
    "FlashSchedule",
    "Implementation",
    "KVPlacement",
    "ReducePlan",
    "Reference",
    "Ring",
    "RingSchedule",
    "RingSharded",
    "SplitKV",
    "SplitKVSchedule",
    "SplitKVSharded",
    "SweepPlan",
    "TileConfig",
    "attention_reference",
    "causal_mask",
    "reduce_plan",
]
