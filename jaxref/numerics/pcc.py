"""tt-metal's PCC (``comp_pcc``) and a small error report, evaluated on the host in float64.

``comp_pcc(golden, calculated)`` in tt-metal (``models/common/utility_functions.py``):

1. ``calculated`` is cast to ``golden``'s dtype (a bf16 golden rounds the calculated tensor);
2. both all-NaN -> 1.0; exactly one all-NaN -> 0.0;
3. exactly one of them all-zero (``any(t.bool())`` differs; NaN counts as non-zero) -> 0.0;
4. NaN and +-Inf are set to 0 in both;
5. exactly equal -> 1.0;
6. bf16 -> fp32, then ``min(np.ma.corrcoef(golden.flat, calculated.flat))``: the Pearson r in float64
   with every zero-variance entry masked (a constant tensor's row/column of the 2x2 matrix is
   masked, so the min is the other tensor's diagonal, ~1.0); all masked -> 1.0.

The metric runs in numpy float64, as tt-metal's does, so it is not traceable by ``jax.jit``.
``pcc`` is tt-metal's metric as defined (two all-NaN tensors give 1.0 there); ``compare``, the
project's check, fails closed on any non-finite value instead.
"""

from __future__ import annotations

import dataclasses

import numpy as np

try:  # ml_dtypes ships with jax; it provides numpy's bfloat16.
    from ml_dtypes import bfloat16 as _np_bfloat16
except ImportError:  # pragma: no cover - jax always installs ml_dtypes
    _np_bfloat16 = None


def _host(x, name: str) -> np.ndarray:
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.floating) or a.dtype == _np_bfloat16):
        raise ValueError(f"{name}.dtype={a.dtype} must be a floating dtype")
    return a


def _prepare(golden, calculated) -> tuple[np.ndarray, np.ndarray]:
    g = _host(golden, "golden")
    c = _host(calculated, "calculated")
    if g.shape != c.shape:
        raise ValueError(f"calculated.shape={c.shape} must equal golden.shape={g.shape}")
    if c.dtype != g.dtype:  # step 1: the calculated tensor takes the golden's dtype
        c = c.astype(g.dtype)
    return g, c


def pcc(golden, calculated) -> float:
    """Pearson correlation with tt-metal ``comp_pcc`` semantics (see the module docstring).

    Args:
      golden: reference array, any shape, floating dtype (numpy, jax or ml_dtypes bfloat16).
      calculated: array of the same shape; cast to golden's dtype first.
    Returns:
      PCC as a Python float (1.0 / 0.0 for the special cases tt-metal short-circuits).
    """
    g, c = _prepare(golden, calculated)
    g_nan, c_nan = np.isnan(g), np.isnan(c)
    if g_nan.all() and c_nan.all():
        return 1.0
    if g_nan.all() or c_nan.all():
        return 0.0
    # Zero test before the NaN masking: a NaN is a non-zero value for torch's .bool().
    if bool(np.any(g != 0)) != bool(np.any(c != 0)):
        return 0.0
    g = np.where(np.isfinite(g), g, np.zeros((), g.dtype))
    c = np.where(np.isfinite(c), c, np.zeros((), c.dtype))
    if np.array_equal(g, c):
        return 1.0
    if g.dtype == _np_bfloat16:  # step 6: bf16 -> fp32 (np.ma.corrcoef then works in float64)
        g, c = g.astype(np.float32), c.astype(np.float32)
    if g.dtype == np.float64:  # r is scale-invariant: unit max-abs keeps 1e200-scale products finite
        g, c = (x / m if (m := np.max(np.abs(x))) > 0 else x for x in (g, c))
    r = np.min(np.ma.corrcoef(np.ma.masked_invalid(g.ravel()), np.ma.masked_invalid(c.ravel())))
    if isinstance(r, np.ma.core.MaskedConstant):
        return 1.0
    return float(r)


def _float64(x: np.ndarray) -> np.ndarray:
    """The values exactly in float64 (float64 stays float64: 1e200 vs 2e200, 1e-12 differences survive)."""
    return x.astype(np.float32).astype(np.float64) if x.dtype == _np_bfloat16 else x.astype(np.float64)


def _norm(x: np.ndarray) -> float:
    """||x||_2 without overflow of the squares (1e200-scale float64 values)."""
    big = float(np.max(np.abs(x))) if x.size else 0.0
    return big * float(np.sqrt(np.sum((x / big) ** 2))) if big > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Comparison:
    """How far ``calculated`` is from ``golden``: the one comparison result of the project.

    Fails closed: any NaN / Inf on either side is a failure with its count, never a PCC or an
    error of 0 (two all-NaN tensors do not agree). Then ``pcc``, ``max_abs``, ``mean_abs`` and
    ``rel_fro`` are NaN, ``finite`` is False and ``meets(...)`` is False whatever the targets.

    Attributes:
      pcc: tt-metal ``comp_pcc`` value of two all-finite tensors (NaN when any value is non-finite).
      max_abs: max |golden - calculated| (float64; float64 inputs are compared in float64).
      mean_abs: mean |golden - calculated|.
      rel_fro: ||golden - calculated||_F / ||golden||_F (inf when golden is all zero and they differ).
      n: number of elements compared.
      nonfinite: elements with a NaN / Inf on either side (golden or calculated or both).
      golden_nonfinite, calculated_nonfinite: NaN / Inf elements in each.
    """

    pcc: float
    max_abs: float
    mean_abs: float
    rel_fro: float
    n: int
    nonfinite: int = 0
    golden_nonfinite: int = 0
    calculated_nonfinite: int = 0

    @property
    def finite(self) -> bool:
        """True when every value on both sides is finite (the comparison means something)."""
        return self.nonfinite == 0

    def meets(self, *, min_pcc: float | None = None, max_abs: float | None = None) -> bool:
        """The verdict: all finite, and PCC >= ``min_pcc`` and max |d| <= ``max_abs`` (those given)."""
        if not self.finite:
            return False
        return (min_pcc is None or self.pcc >= min_pcc) and (max_abs is None or self.max_abs <= max_abs)

    def __str__(self) -> str:
        if not self.finite:
            return (f"FAIL: NON-FINITE {self.calculated_nonfinite} in calculated, {self.golden_nonfinite} in "
                    f"golden ({self.nonfinite} of n={self.n} elements with a NaN / Inf on either side): no PCC")
        return (f"PCC {self.pcc:.7f}  max|d| {self.max_abs:.3e}  mean|d| {self.mean_abs:.3e}  "
                f"rel-Frobenius {self.rel_fro:.3e}  (n={self.n})")


def compare(golden, calculated) -> Comparison:
    """PCC plus absolute and relative errors of ``calculated`` against ``golden`` (fails closed).

    Args:
      golden, calculated: same-shape floating arrays (calculated is cast to golden's dtype, as in
        ``pcc``). Any NaN / Inf on either side makes the comparison a failure: counted, and every
        statistic NaN (identical NaNs do not agree: the model is broken on both sides).
    Returns:
      a ``Comparison``.
    """
    g, c = _prepare(golden, calculated)
    g64, c64 = _float64(g).ravel(), _float64(c).ravel()
    g_bad, c_bad = ~np.isfinite(g64), ~np.isfinite(c64)
    bad = int(np.sum(g_bad | c_bad))
    counts = {"n": int(g64.size), "nonfinite": bad, "golden_nonfinite": int(np.sum(g_bad)),
              "calculated_nonfinite": int(np.sum(c_bad))}
    if bad:
        nan = float("nan")
        return Comparison(pcc=nan, max_abs=nan, mean_abs=nan, rel_fro=nan, **counts)
    d = np.abs(g64 - c64)
    num, den = _norm(d), _norm(g64)
    rel = num / den if den > 0 else (0.0 if num == 0 else float("inf"))
    max_abs, mean_abs = (float(d.max()), float(np.mean(d))) if d.size else (0.0, 0.0)
    return Comparison(pcc=pcc(g, c), max_abs=max_abs, mean_abs=mean_abs, rel_fro=rel, **counts)
