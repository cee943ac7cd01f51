"""Configuration of the AHBM attention-kernel model: the four ADR-0060 section-10 cases and knobs.

Cases (ADR-0060 section 10), per kv head (the K kv heads run on disjoint CUBE Groups in parallel):

* ``decode``     decode, no SP: one PE sweeps the whole KV of B requests (T_q = ``queries`` query tokens
  per step, 1 by default or more for speculative / multi-token decode: G x T_q rows M-folded into
  the engine's 32-row tiles, so T_q <= 4 fills the padding G = 8 leaves; different requests have
  different KV and cannot share a tile).
* ``decode_sp``  decode, SP: KV round-robin over C x P ranks, per-rank sweep, then a reduce of the
  (m, l, O) partials: ``tree`` (2-level reduce-to-root), ``all_to_all`` (kernbench fan-out) or
  ``all_reduce`` (Tree Attention style: every rank ends with the answer; messages are
  ``jaxref.attention.reduce_plan``'s recursive-doubling exchanges).
* ``prefill``    prefill, no SP: one PE, q blocks of TILE rows x G heads, causal tile skip.
* ``prefill_sp`` prefill, SP ring: C = G CUBEs, one q head each (head-parallel), contiguous KV
  blocks rotated over the ring (recv overlapped with compute), q blocks split over the P PEs of a
  CUBE round-robin, causal skip of wholly future tiles.

Knobs: TILE (keys per KV tile; prefill q blocks are TILE rows), C, P, the pipelining option of the
inner tile (ADR section 5.6: opt1 GEMM-engine bubble, opt3 software pipelining, opt2 ex_composite),
batch B and context S (any positive int: the last tile / q block / ring block is ragged). TILE, C
and P are powers of two (TILE: the scheduler's 32 / 64 GEMM steps; C: a rectangular sub-mesh of
the 4x4 SIP with a ring; P: the binomial Level-2 tree). Placement of decode-SP's keys
(``round_robin`` | ``contiguous`` with a ``capacity`` >= S), the CUBE Group's sub-mesh orientation
(``wide``: rows <= cols, e.g. 2x4 at C = 8; ``tall``: its transpose, 4x2). Hardware-dependent
feasibility (TCM, the SIP budget, the commands that exist) is ``model.constraints``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Literal

from jaxref.attention import AttentionGeometry
from jaxref.attention.reduce import REDUCES, cube_mesh_shape  # noqa: F401  (re-exported for the CLI)
from jaxref.validation import check_choice, choices_of, require
from jaxref.vocabulary import ReduceKind

if TYPE_CHECKING:
    from costmodel.hardware import AHBM

Case = Literal["decode", "decode_sp", "prefill", "prefill_sp"]
Pipeline = Literal["opt1", "opt2", "opt3"]
Reduce = ReduceKind  # declared once, in jaxref.vocabulary
Placement = Literal["round_robin", "contiguous"]
Mesh = Literal["wide", "tall"]  # CUBE Group sub-mesh orientation
CASES, PIPELINES, PLACEMENTS, MESHES = (choices_of(c) for c in (Case, Pipeline, Placement, Mesh))


def allowed_pipelines(hw: AHBM) -> tuple[str, ...]:
    """The pipelining options the hardware's commands allow (opt2 needs the ex_composite command)."""
    return tuple(p for p in PIPELINES if p != "opt2" or "ex_composite" in hw.commands)


# model name -> (geometry, decoder layers)
MODELS = {"llama3_70b": (AttentionGeometry.llama3_70b(), 80), "alpamayo": (AttentionGeometry.alpamayo_tt(), 64)}
# bf16 weight bytes of the whole model where known (Llama-3-70B: 70.55e9 parameters, the HF model
# card); the Alpamayo expert's are not: its KV alone is checked against HBM
WEIGHT_BYTES = {"llama3_70b": 2 * 70.55e9, "alpamayo": 0.0}
TILE_RANGE = (32, 4096)  # keys per tile: one composite N tile .. a one-shot sweep of a short shard
TILE_STEP = 64  # lcm of the scheduler's Q.K^T N step (32) and P.V K step (64)
CUBES_MAX = 16  # a CUBE Group stays inside one 4x4 SIP
PES_MAX = 8


# the options a case other than decode_sp must leave at these values (it has no reduce / placement;
# decode and prefill run on one PE, so no sub-mesh either)
IGNORED_DEFAULTS = {"reduce": "tree", "placement": "round_robin", "capacity": None, "cube_mesh": "wide"}


def is_pow2(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0 and x & (x - 1) == 0


def is_tile(x) -> bool:
    """A legal TILE: 32 or a multiple of 64 in ``TILE_RANGE``."""
    return (isinstance(x, int) and not isinstance(x, bool) and TILE_RANGE[0] <= x <= TILE_RANGE[1]
            and (x == TILE_RANGE[0] or x % TILE_STEP == 0))


def check_case_options(case: str, reduce: str, placement: str, capacity, cube_mesh: str) -> None:
    """Refuse options the case has no use for: only decode_sp has a reduce, a key placement and its
    capacity; decode and prefill run on one PE, so they have no CUBE sub-mesh either."""
    if case == "decode_sp":
        return
    given = {"reduce": reduce, "placement": placement, "capacity": capacity, "cube_mesh": cube_mesh}
    ignored = {k: v for k, v in given.items() if v != IGNORED_DEFAULTS[k]
               and not (k == "cube_mesh" and case == "prefill_sp")}
    require(not ignored, f"{', '.join(f'{k}={v!r}' for k, v in ignored.items())} has no effect on case={case!r} "
            "(only decode_sp has a reduce, a key placement and its capacity; decode and prefill run on one PE); "
            "drop it")


def check_problem(case: str, seq_len, batch, model: str, reduce: str = "tree") -> None:
    """Validate the problem a tuner is asked about (before any knob is chosen)."""
    check_choice("case", case, Case)
    check_choice("model", model, MODELS)
    check_choice("reduce", reduce, Reduce)
    for name, v in (("seq_len", seq_len), ("batch", batch)):
        require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{name}={v!r} must be a positive int")


@dataclasses.dataclass(frozen=True)
class AhbmConfig:
    """One discrete configuration, validated on construction (hardware-dependent feasibility,
    TCM, is checked by ``constraints`` in ``costmodel.ahbm.constraints``)."""

    case: Case
    seq_len: int  # S: context (keys); prefill also has T = S queries
    batch: int = 1  # B: independent requests, swept one after another on the same ranks
    queries: int = 1  # T: query tokens per decode step (speculative / multi-token decode), M-folded with G
    tile: int = 128  # TILE
    cubes: int = 1  # C
    pes: int = 1  # P
    pipeline: Pipeline = "opt3"
    reduce: Reduce = "tree"
    model: str = "llama3_70b"
    causal_skip: bool = True  # prefill: skip wholly future tiles (False computes them under the mask)
    placement: str = "round_robin"  # decode_sp key placement: 'round_robin' | 'contiguous'
    capacity: int | None = None  # max context of the KV buffers (contiguous blocks); None = seq_len
    cube_mesh: str = "wide"  # CUBE Group sub-mesh: 'wide' (rows <= cols) | 'tall' (its transpose)

    def __post_init__(self):
        check_choice("case", self.case, Case)
        check_choice("pipeline", self.pipeline, Pipeline)
        check_choice("reduce", self.reduce, Reduce)
        check_choice("model", self.model, MODELS)
        check_choice("placement", self.placement, Placement)
        check_choice("cube_mesh", self.cube_mesh, Mesh)
        for name in ("seq_len", "batch", "queries"):
            v = getattr(self, name)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{name}={v!r} must be a positive int")
        require(is_tile(self.tile), f"tile={self.tile!r} must be {TILE_RANGE[0]} or a multiple of {TILE_STEP} in "
                                  f"{list(TILE_RANGE)} (whole 32-key Q.K^T and 64-key P.V scheduler sub-tiles)")
        require(is_pow2(self.cubes) and self.cubes <= CUBES_MAX,
              f"cubes={self.cubes!r} must be a power of two <= {CUBES_MAX} (a CUBE Group stays in one SIP)")
        require(is_pow2(self.pes) and self.pes <= PES_MAX, f"pes={self.pes!r} must be a power of two <= {PES_MAX}")
        if self.capacity is not None:
            require(isinstance(self.capacity, int) and not isinstance(self.capacity, bool)
                  and self.capacity >= self.seq_len,
                  f"capacity={self.capacity!r} must be an int >= seq_len={self.seq_len} (the KV buffers hold "
                  "the context)")
        check_case_options(self.case, self.reduce, self.placement, self.capacity, self.cube_mesh)
        require(self.queries == 1 or self.case in ("decode", "decode_sp"),
                f"queries={self.queries} applies to decode only (prefill's queries are its S tokens)")
        require(self.queries <= self.seq_len, f"queries={self.queries} must be <= seq_len={self.seq_len} (the step's "
                "query tokens are among the keys)")
        G = self.geometry.group
        if self.case in ("decode", "prefill"):
            require(self.cubes == 1 and self.pes == 1,
                  f"case={self.case!r} runs on one PE: cubes={self.cubes}, pes={self.pes} must both be 1")
        if self.case == "prefill_sp":
            require(self.cubes == G, f"cubes={self.cubes} must equal the group size G={G}: the ring is "
                                   "head-parallel with one q head per CUBE (C = G)")
            require(self.seq_len >= G, f"seq_len={self.seq_len} must be >= C = G = {G} (one key per ring block)")

    @property
    def geometry(self) -> AttentionGeometry:
        return MODELS[self.model][0]

    @property
    def layers(self) -> int:
        return MODELS[self.model][1]

    @property
    def kv_capacity(self) -> int:
        """Keys the KV buffers are sized for (``capacity``, default S)."""
        return self.seq_len if self.capacity is None else self.capacity

    @property
    def mesh_shape(self) -> tuple[int, int]:
        """(rows, cols) of the CUBE Group's sub-mesh in the SIP (``jaxref.attention.reduce_plan``'s)."""
        rows, cols = cube_mesh_shape(self.cubes)
        return (rows, cols) if self.cube_mesh == "wide" else (cols, rows)

    @property
    def ranks(self) -> int:
        """R = C * P."""
        return self.cubes * self.pes

    @property
    def lane_keys(self) -> int:
        """Keys of the longest lane (rank / ring block / the one PE's whole KV)."""
        if self.case == "decode_sp":
            return min(self.seq_len, -(-self.kv_capacity // self.ranks)) if self.placement == "contiguous" \
                else -(-self.seq_len // self.ranks)
        if self.case == "prefill_sp":
            return -(-self.seq_len // self.cubes)
        return self.seq_len

    @property
    def tile_eff(self) -> int:
        """Effective tile: TILE capped at the keys one lane holds (a one-shot sweep beyond that),
        the cap the schedules apply (``min(tile, buffer_len)``)."""
        return min(self.tile, self.lane_keys)

    def replace(self, **kw) -> AhbmConfig:
        return dataclasses.replace(self, **kw)


def knob_space(case: str, model: str = "llama3_70b") -> dict[str, tuple[int, ...]]:
    """Discrete values of the tuned knobs of a case (the exhaustive search's grid)."""
    tiles = (TILE_RANGE[0], *range(TILE_STEP, TILE_RANGE[1] + 1, TILE_STEP))
    G = MODELS[model][0].group
    cubes = {"decode_sp": tuple(2**k for k in range(5)), "prefill_sp": (G,)}.get(case, (1,))
    pes = {"decode_sp": (1, 2, 4, 8), "prefill_sp": (1, 2, 4, 8)}.get(case, (1,))
    return {"tile": tiles, "cubes": cubes, "pes": pes, "pipeline": PIPELINES}
