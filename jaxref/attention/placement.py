"""KV token -> (CUBE, PE, slot) placement of one kv head's cache over a CUBE Group (ADR sections 0, 2).

R = C * P ranks; physical rank r = cube * P + pe (the order of a ('cube', 'pe') mesh). Rotations
``start_cube`` / ``start_pe`` (= f(request_id)) shift which physical CUBE / PE plays logical 0:
cube_local = (cube - start_cube) mod C, pe_local = (pe - start_pe) mod P.

Two layouts:

* ``round_robin`` (ADR section 0, hierarchical round-robin, Level-1 first): token i lands on CUBE
  (start_cube + i) mod C, PE (start_pe + i // C) mod P, slot i // R. Counts balance to within one
  token; each rank's slots are dense. Its round-robin position is i mod R = pe_local * C +
  cube_local. (ADR section 2.1 writes the slot -> global map with the other nesting,
  ``slot * R + cube_local * P + pe_local``; we follow section 0's explicit per-level formula.)
* ``contiguous`` (ADR section 2.1, the shared prefill / decode layout): logical rank
  l = cube_local * P + pe_local owns positions [l * B, (l + 1) * B), B = ceil(capacity / R); a
  late block can be wholly future and skipped, and only frontier ranks hold data for short context.

All methods take Python ints or numpy integer arrays (vectorised).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxref.attention.geometry import check_positive
from jaxref.validation import check_choice

LAYOUTS = ("round_robin", "contiguous")


@dataclasses.dataclass(frozen=True)
class KVPlacement:
    """Placement of ``capacity`` KV slots (token positions 0 .. capacity - 1) over C x P ranks."""

    num_cubes: int  # C: CUBEs of the CUBE Group (Level-1 SP)
    pes_per_cube: int  # P: PEs per CUBE (Level-2 SP)
    capacity: int  # max tokens of this kv head (max_context); sets the per-rank buffer size
    layout: str = "round_robin"  # 'round_robin' | 'contiguous'
    start_cube: int = 0  # Level-1 rotation, in [0, C)
    start_pe: int = 0  # Level-2 rotation, in [0, P)

    def __post_init__(self):
        check_positive("num_cubes", self.num_cubes)
        check_positive("pes_per_cube", self.pes_per_cube)
        check_positive("capacity", self.capacity)
        check_choice("layout", self.layout, LAYOUTS)
        for name, n in (("start_cube", self.num_cubes), ("start_pe", self.pes_per_cube)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
                raise ValueError(f"{name}={v!r} must be an int in [0, {n})")

    @property
    def num_ranks(self) -> int:
        """R = C * P."""
        return self.num_cubes * self.pes_per_cube

    @property
    def slots_per_rank(self) -> int:
        """Per-rank KV buffer length: ceil(capacity / R) (ADR section 2.1)."""
        return -(-self.capacity // self.num_ranks)

    # ---- token -> rank ------------------------------------------------------------------------
    def _check_token(self, token):
        t = np.asarray(token)
        if not np.issubdtype(t.dtype, np.integer) or np.any(t < 0) or np.any(t >= self.capacity):
            raise ValueError(f"token={token!r} must be an integer in [0, capacity={self.capacity})")

    def _local(self, token):
        """(cube_local, pe_local) of a token."""
        C, P = self.num_cubes, self.pes_per_cube
        if self.layout == "round_robin":
            return token % C, (token // C) % P
        return divmod(token // self.slots_per_rank, P)

    def cube_pe_of(self, token):
        """(cube, pe) physical ids holding ``token``."""
        self._check_token(token)
        cube_local, pe_local = self._local(token)
        return (cube_local + self.start_cube) % self.num_cubes, (pe_local + self.start_pe) % self.pes_per_cube

    def rank_of(self, token):
        """Physical rank cube * P + pe holding ``token``."""
        cube, pe = self.cube_pe_of(token)
        return cube * self.pes_per_cube + pe

    def slot_of(self, token):
        """Slot of ``token`` in its rank's dense local buffer."""
        self._check_token(token)
        if self.layout == "round_robin":
            return token // self.num_ranks
        return token % self.slots_per_rank

    # ---- rank -> token ------------------------------------------------------------------------
    def _check_rank(self, rank):
        r = np.asarray(rank)
        if not np.issubdtype(r.dtype, np.integer) or np.any(r < 0) or np.any(r >= self.num_ranks):
            raise ValueError(f"rank={rank!r} must be an integer in [0, {self.num_ranks})")

    def logical_rank(self, rank):
        """Position of ``rank`` in its layout's order: i mod R for round-robin, the block index for
        contiguous."""
        self._check_rank(rank)
        C, P = self.num_cubes, self.pes_per_cube
        cube_local = (rank // P - self.start_cube) % C
        pe_local = (rank % P - self.start_pe) % P
        if self.layout == "round_robin":
            return pe_local * C + cube_local
        return cube_local * P + pe_local

    def global_of(self, rank, slot):
        """Token position stored at (rank, slot); may be >= capacity for a round-robin tail slot."""
        ell = self.logical_rank(rank)
        s = np.asarray(slot)
        if not np.issubdtype(s.dtype, np.integer) or np.any(s < 0) or np.any(s >= self.slots_per_rank):
            raise ValueError(f"slot={slot!r} must be an integer in [0, slots_per_rank={self.slots_per_rank})")
        if self.layout == "round_robin":
            return slot * self.num_ranks + ell
        return ell * self.slots_per_rank + slot

    def valid_len(self, counter, rank):
        """Valid slots of ``rank`` after ``counter`` tokens were written (ADR section 2.2)."""
        c = np.asarray(counter)
        if not np.issubdtype(c.dtype, np.integer) or np.any(c < 0) or np.any(c > self.capacity):
            raise ValueError(f"counter={counter!r} must be an integer in [0, capacity={self.capacity}]")
        ell = np.asarray(self.logical_rank(rank))
        if self.layout == "round_robin":
            n = c // self.num_ranks + (ell < c % self.num_ranks)
        else:
            n = np.clip(c - ell * self.slots_per_rank, 0, self.slots_per_rank)
        return int(n) if np.ndim(n) == 0 else n.astype(np.int64)

    def writer_of(self, counter):
        """Rank that stores the token written at position ``counter`` (the decode step's new K/V)."""
        return self.rank_of(counter)

    def shard_table(self, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Per-rank buffers after ``num_tokens`` writes: token ids [R, slots] (0 where invalid) and
        valid [R, slots]."""
        if not 0 <= num_tokens <= self.capacity:
            raise ValueError(f"num_tokens={num_tokens} must be in [0, capacity={self.capacity}]")
        ranks = np.arange(self.num_ranks)[:, None]
        slots = np.arange(self.slots_per_rank)[None, :]
        tokens = self.global_of(ranks, slots)
        valid = slots < np.asarray(self.valid_len(num_tokens, ranks))
        return np.where(valid, tokens, 0), valid
