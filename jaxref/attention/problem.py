"""``AttentionProblem``: the one argument check of every attention algorithm and what it resolves.

Dimension vocabulary: T queries, S keys, N q heads, K kv heads, G = N // K group, H head_dim.
Layout: q [T, N, H], k / v [S, K, H] (``kv_layout='SKH'``) or head-major [K, S, H] (``'KSH'``);
query head n uses kv head n // G (HF ``repeat_kv`` order). Queries are bottom-right aligned:
query t sits at key position t + S - T (decode / chunked prefill see the whole cache).
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from jaxref.validation import check_choice

KV_LAYOUTS = ("SKH", "KSH")


@dataclasses.dataclass(frozen=True)
class AttentionProblem:
    """Shapes, masking and the resolved score scale of one attention call (static, hashable)."""

    T: int  # queries
    S: int  # keys
    N: int  # q heads
    K: int  # kv heads (divides N)
    H: int  # head_dim
    causal: bool = False  # bottom-right aligned causal mask (needs T <= S)
    scale: float | None = None  # score scale; None resolves to H ** -0.5

    def __post_init__(self):
        for name in ("T", "S", "N", "K", "H"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive int")
        if self.N % self.K:
            raise ValueError(f"q heads N={self.N} must be divisible by the K={self.K} kv heads")
        if type(self.causal) not in (bool, np.bool_):
            raise ValueError(f"causal={self.causal!r} must be a bool")
        if self.causal and self.T > self.S:
            raise ValueError(f"causal=True needs q.shape[0]={self.T} <= S={self.S} keys (bottom-right aligned: "
                             "query t sees keys s <= t + S - T)")
        scale = self.H**-0.5 if self.scale is None else self.scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float, np.floating)) or not math.isfinite(scale) \
                or scale <= 0:
            raise ValueError(f"scale={self.scale!r} must be a finite float > 0 (or None for H ** -0.5)")
        object.__setattr__(self, "scale", float(scale))

    @property
    def G(self) -> int:
        """q heads per kv head (the GQA M-fold factor)."""
        return self.N // self.K

    @property
    def query_positions(self) -> np.ndarray:
        """[T] key positions of the queries, bottom-right aligned: t + S - T."""
        return np.arange(self.T) + (self.S - self.T)

    @classmethod
    def from_inputs(cls, q, k, v, *, bias=None, mask=None, causal: bool = False, scale: float | None = None,
                    kv_layout: str = "SKH", mask_name: str = "mask") -> AttentionProblem:
        """Check q [T, N, H], k / v [S, K, H] (or [K, S, H] for ``kv_layout='KSH'``), an optional bool
        keep-mask and float bias (each broadcastable to [N, T, S]) and return the problem.

        One meaning for every attention path: ``mask`` is bool (True = attend) and ``bias`` is float;
        anything else (a 0 / -inf float mask, an int mask, a bool bias) is a TypeError naming the
        argument (``mask_name``: how the caller calls its mask, e.g. ``keep``), its dtype and what was
        expected. Other bad input raises ValueError naming the argument, the value and what was expected.
        """
        check_choice("kv_layout", kv_layout, KV_LAYOUTS)
        want = "[S, K, H]" if kv_layout == "SKH" else "[K, S, H]"
        for name, x, shape in (("q", q, "[T, N, H]"), ("k", k, want), ("v", v, want)):
            if x.ndim != 3:
                raise ValueError(f"{name}.shape={tuple(x.shape)} must be {shape} (3 dims)")
            # Integer scores would be formed in the integer dtype (and truncated): wrong numbers.
            if not jnp.issubdtype(x.dtype, jnp.floating):
                raise ValueError(f"{name}.dtype={x.dtype} must be a floating dtype (cast integer inputs first)")
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
        for name, x, kind in ((mask_name, mask, "bool"), ("bias", bias, "float")):
            check_mask_or_bias(name, x, kind, (N, T, S))
        return cls(T, S, N, K, H, causal=causal, scale=scale)


def check_mask_or_bias(name: str, x, kind: str, shape: tuple[int, ...]) -> None:
    """A keep-mask must be bool (``kind='bool'``), a bias floating (``'float'``), each broadcastable to
    ``shape``: TypeError for the dtype, ValueError for the shape (None passes)."""
    if x is None:
        return
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        dtype = np.asarray(x).dtype
    if kind == "bool":
        if dtype != np.bool_:
            raise TypeError(f"{name}.dtype={dtype} must be bool (True = attend); a float 0 / -inf or an int "
                            f"mask is not accepted (pass an additive float as bias=, or mask.astype(bool))")
    elif not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"{name}.dtype={dtype} must be a floating dtype (an additive bias; a bool keep-mask "
                        "goes in mask=)")
    xshape = tuple(np.shape(x))
    try:
        np.broadcast_shapes(xshape, shape)
    except ValueError:
        raise ValueError(f"{name}.shape={xshape} must broadcast to [N, T, S] = {shape}") from None
    if len(xshape) > len(shape) or np.broadcast_shapes(xshape, shape) != shape:
        raise ValueError(f"{name}.shape={xshape} must broadcast to [N, T, S] = {shape}")
