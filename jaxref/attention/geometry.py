"""Attention geometry (head counts) and the input checks every ADR-0060 algorithm shares.

Dimension vocabulary: T queries, S keys, N q heads, K kv heads, G = N // K group, H head_dim.
Layout: q [T, N, H], k / v [S, K, H]; query head n uses kv head n // G (HF ``repeat_kv`` order).
"""

from __future__ import annotations

import dataclasses

# AHBM topology (REFERENCE.md section 3): a SIP is a 4x4 mesh of CUBEs, a CUBE has 8 PEs. A CUBE
# Group (the C CUBEs that own one kv head) stays inside one SIP, so its sub-mesh fits in 4x4.
from jaxref.validation import check_choice

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


def check_inputs(q, k, v, *, causal: bool = False, kv_layout: str = "SKH") -> tuple[int, int, int, int, int, int]:
    """The one argument check of every attention function: q [T, N, H] and k / v [S, K, H]
    (``kv_layout='SKH'``) or head-major [K, S, H] (``'KSH'``); return (T, S, N, K, G, H).

    Raises ValueError naming the offending argument, the value and what was expected.
    """
    check_choice("kv_layout", kv_layout, ("SKH", "KSH"))
    want = "[S, K, H]" if kv_layout == "SKH" else "[K, S, H]"
    if q.ndim != 3:
        raise ValueError(f"q.shape={tuple(q.shape)} must be [T, N, H] (3 dims)")
    if k.ndim != 3:
        raise ValueError(f"k.shape={tuple(k.shape)} must be {want} (3 dims)")
    if v.ndim != 3:
        raise ValueError(f"v.shape={tuple(v.shape)} must be {want} (3 dims)")
    T, N, H = q.shape
    S, K, Hk = k.shape if kv_layout == "SKH" else (k.shape[1], k.shape[0], k.shape[2])
    if v.shape != k.shape:
        raise ValueError(f"v.shape={tuple(v.shape)} must equal k.shape={tuple(k.shape)}: K and V differ")
    if Hk != H:
        raise ValueError(f"k.shape[2]={Hk} (head_dim) must equal q.shape[2]={H}")
    if T < 1 or S < 1:
        raise ValueError(f"need at least one query and one key, got T={T}, S={S}")
    if N % K:
        raise ValueError(f"q.shape[1]={N} (q heads) must be divisible by the K={K} kv heads of k")
    if causal and T > S:
        raise ValueError(f"causal=True needs q.shape[0]={T} <= S={S} keys (bottom-right aligned: "
                         "query t sees keys s <= t + S - T)")
    return T, S, N, K, N // K, H


def check_positive(name: str, value, *, allow_none: bool = False) -> None:
    """Raise ValueError unless ``value`` is a positive int (or None when allowed)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}={value!r} must be a positive int")


def check_schedule_args(num_queries, num_keys, *, causal: bool, dtype_bytes) -> None:
    """Shared argument checks of the ``*_schedule`` planners (static ints, T <= S when causal)."""
    check_positive("num_queries", num_queries)
    check_positive("num_keys", num_keys)
    check_positive("dtype_bytes", dtype_bytes)
    if causal and num_queries > num_keys:
        raise ValueError(f"causal=True needs num_queries={num_queries} <= num_keys={num_keys}")


