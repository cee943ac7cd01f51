"""Single-device FlashAttention with GQA M-fold and causal tile classification (ADR sections 3, 5.2, 5.4).

``Flash(tile=128)`` is the algorithm: called like ``attention_reference`` (same residuals), its
``plan`` is the static tile plan the numeric code executes and its ``schedule`` the plain-data
counts of that plan (what the cost model consumes).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from jaxref.attention.core import Partial, finalize, group_queries, lse_to_heads, to_heads
from jaxref.attention.geometry import AttentionGeometry, schedule_problem
from jaxref.attention.problem import AttentionProblem
from jaxref.attention.schedule import FlashSchedule, problem_counts
from jaxref.attention.sweep import (
    FUTURE,
    PARTIAL,
    PAST,
    SweepPlan,
    TileConfig,
    init_sweep_state,
    plan_sweep,
    rows_with_a_key,
    run_sweep,
    user_bias_mask,
)


@functools.lru_cache(maxsize=256)
def _plan(num_queries: int, num_keys: int, tiles: TileConfig, causal: bool, causal_skip: bool) -> SweepPlan:
    qpos = np.arange(num_queries) + (num_keys - num_queries)  # bottom-right aligned
    kpos = np.arange(num_keys)[None]
    return plan_sweep(qpos, kpos, np.ones_like(kpos, bool), tiles=tiles, causal=causal, causal_skip=causal_skip)


@dataclasses.dataclass(frozen=True)
class Flash:
    """Tiled online-softmax attention (one device), equal to ``attention_reference``.

    GEMM operands stay in the input dtype with fp32 accumulation, P is rounded to v's dtype before
    P.V, the softmax state is fp32.
    """

    tile: int = 128  # keys per KV tile (any S: the last tile is ragged)
    q_block: int | None = None  # query rows per block (None = all T in one block)
    causal_skip: bool = True  # False computes wholly-future tiles under the mask (to measure the skip)

    def __post_init__(self):
        TileConfig(self.tile, self.q_block)  # validates tile / q_block
        if type(self.causal_skip) is not bool:  # (1 / 0 are not accepted for a flag)
            raise ValueError(f"causal_skip={self.causal_skip!r} must be a bool")

    @property
    def tiles(self) -> TileConfig:
        return TileConfig(self.tile, self.q_block)

    def plan(self, num_queries: int, num_keys: int, *, causal: bool) -> SweepPlan:
        """The static one-lane tile plan ``__call__`` executes."""
        return _plan(num_queries, num_keys, self.tiles, causal, self.causal_skip)

    def __call__(self, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None):
        """q [T, N, H]; k, v [S, K, H]; bias / mask broadcastable to [N, T, S]; causal bottom-right.

        Returns out [T, N, H] float32, lse [N, T] float32; a fully masked row gives out 0, lse MASK_LSE.
        """
        pr = AttentionProblem.from_inputs(q, k, v, bias=bias, mask=mask, causal=causal, scale=scale)
        plan = self.plan(pr.T, pr.S, causal=causal)
        b, m = user_bias_mask(bias, mask, pr.N, pr.K, pr.T, pr.S)  # [K, T, G, S]
        state = init_sweep_state(plan, pr.K, pr.G, pr.H)
        state = run_sweep(state, plan, group_queries(q, pr.K)[None], k[None], v[None], pr.query_positions,
                          np.arange(pr.S)[None], np.ones((1, pr.S), bool), bias=None if b is None else b[None],
                          mask=None if m is None else m[None], scale=pr.scale, causal=causal)
        out, lse = finalize(Partial(*(x[0, :, :pr.T] for x in state)),
                            rows_with_a_key(m, causal=causal, T=pr.T, S=pr.S))
        return to_heads(out, pr.N), lse_to_heads(lse)

    def schedule(self, num_queries: int, num_keys: int, geometry: AttentionGeometry | None = None, *,
                 causal: bool = False, dtype_bytes: int = 2) -> FlashSchedule:
        """Plain-data schedule for T = num_queries, S = num_keys (geometry default Llama3-70B)."""
        g = schedule_problem(num_queries, num_keys, geometry, causal=causal, dtype_bytes=dtype_bytes)
        plan = self.plan(num_queries, num_keys, causal=causal)
        kinds = [(qi, kj, PAST) for _, qi, kj in plan.past] + [(qi, kj, PARTIAL) for _, qi, kj in plan.partial]
        kinds += [(qi, kj, FUTURE) for _, qi, kj in plan.future]
        io_bytes = num_queries * g.num_heads * g.head_dim * dtype_bytes
        return FlashSchedule(
            **problem_counts((plan,), g, num_queries=num_queries, num_keys=num_keys, causal=causal,
                             heads_per_lane=g.group, dtype_bytes=dtype_bytes),
            causal_skip=self.causal_skip, num_q_blocks=plan.num_q_blocks, num_kv_tiles=plan.num_tiles,
            q_bytes=io_bytes, out_bytes=io_bytes, tiles=tuple(sorted(kinds)))
