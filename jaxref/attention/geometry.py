"""Attention geometry (head counts) and the small knob checks the ADR-0060 algorithms share.

Dimension vocabulary: T queries, S keys, N q heads, K kv heads, G = N // K group, H head_dim.
Layout: q [T, N, H], k / v [S, K, H]; query head n uses kv head n // G (HF ``repeat_kv`` order).
"""

from __future__ import annotations

import dataclasses

# AHBM topology (REFERENCE.md section 3): a SIP is a 4x4 mesh of CUBEs, a CUBE has 8 PEs. A CUBE
# Group (the C CUBEs that own one kv head) stays inside one SIP, so its sub-mesh fits in 4x4.

SIP_MESH_SHAPE = (4, 4)
PES_PER_CUBE_MAX = 8


@dataclasses.dataclass(frozen=True)
class AttentionGeometry:
    """Head geometry of one attention layer. Defaults are Llama3-70B (ADR-0060 section 0)."""

    num_heads: int = 64  # N: query heads
    num_kv_heads: int = 8  # K: key/value heads; must divide num_heads
    head_dim: int = 128  # H: per-head width d

    def __post_init__(self):
        for name in ("num_heads", "num_kv_heads", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name}={v!r} must be a positive int")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads={self.num_heads} not divisible by num_kv_heads={self.num_kv_heads}")

    @property
    def group(self) -> int:
        """G: query heads per kv head (the GQA M-fold factor)."""
        return self.num_heads // self.num_kv_heads

    def q_shape(self, num_queries: int) -> tuple[int, int, int]:
        return (num_queries, self.num_heads, self.head_dim)

    def kv_shape(self, num_keys: int) -> tuple[int, int, int]:
        return (num_keys, self.num_kv_heads, self.head_dim)

    # ---- presets ----------------------------------------------------------------------------
    @classmethod
    def llama3_70b(cls) -> AttentionGeometry:
        """ADR-0060 reference model: 64 q heads, 8 kv heads, G = 8, d = 128."""
        return cls(64, 8, 128)

    @classmethod
    def alpamayo_tt(cls) -> AttentionGeometry:
        """The action expert of the Blackhole port: 16 q heads, 8 kv heads, G = 2, d = 128."""
        return cls(16, 8, 128)

    @classmethod
    def tiny(cls) -> AttentionGeometry:
        """Small geometry for tests: 8 q heads, 2 kv heads, G = 4, d = 16."""
        return cls(8, 2, 16)

    @classmethod
    def from_expert(cls, cfg) -> AttentionGeometry:
        """Geometry of a ``jaxref.config.ExpertConfig``."""
        return cls(cfg.num_heads, cfg.num_kv_heads, cfg.head_dim)


def check_positive(name: str, value, *, allow_none: bool = False) -> None:
    """Raise ValueError unless ``value`` is a positive int (or None when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive int")


def schedule_problem(num_queries, num_keys, geometry: AttentionGeometry | None, *, causal: bool,
                     dtype_bytes) -> AttentionGeometry:
    """Shared argument checks of the ``schedule`` methods (static ints, T <= S when causal); returns
    the geometry (default Llama3-70B: 64 q heads, 8 kv heads, d 128)."""
    check_positive("num_queries", num_queries)
    check_positive("num_keys", num_keys)
    check_positive("dtype_bytes", dtype_bytes)
    if causal and num_queries > num_keys:
        raise ValueError(f"causal=True needs num_queries={num_queries} <= num_keys={num_keys}")
    return AttentionGeometry.llama3_70b() if geometry is None else geometry


