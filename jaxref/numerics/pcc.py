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
    r = np.min(np.ma.corrcoef(np.ma.masked_invalid(g.ravel()), np.ma.masked_invalid(c.ravel())))
    if isinstance(r, np.ma.core.MaskedConstant):
        return 1.0
    return float(r)


@dataclasses.dataclass(frozen=True)
class Comparison:
    """How far ``calculated`` is from ``golden``: the one comparison result of the project.

    Attributes:
      pcc: tt-metal ``comp_pcc`` value (which sets NaN / Inf to 0 before correlating: see
        ``nonfinite`` before trusting it).
      max_abs: max |golden - calculated| (float64).
      mean_abs: mean |golden - calculated|.
      rel_fro: ||golden - calculated||_F / ||golden||_F (inf when golden is all zero and they differ).
      n: number of elements compared.
      nonfinite: elements where golden and calculated disagree in finiteness or in their
        non-finite value (NaN vs finite, +Inf vs NaN, ...); an identical NaN / Inf in both agrees.
        When it is > 0, max_abs, mean_abs and rel_fro are NaN: a bad number is never averaged away.
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
        """True when every element pair is comparable (no NaN / Inf that the other lacks)."""
        return self.nonfinite == 0

    def __str__(self) -> str:
        text = (f"PCC {self.pcc:.7f}  max|d| {self.max_abs:.3e}  mean|d| {self.mean_abs:.3e}  "
                f"rel-Frobenius {self.rel_fro:.3e}  (n={self.n})")
        if self.golden_nonfinite or self.calculated_nonfinite:
            text += (f"  NON-FINITE: {self.calculated_nonfinite} in calculated, {self.golden_nonfinite} in "
                     f"golden, {self.nonfinite} mismatched (PCC computed with them set to 0)")
        return text


def compare(golden, calculated) -> Comparison:
    """PCC plus absolute and relative errors of ``calculated`` against ``golden``.

    Args:
      golden, calculated: same-shape floating arrays (calculated is cast to golden's dtype, as in
        ``pcc``). Pairs holding the same non-finite value (both NaN, or the same Inf) agree
        (distance 0); any other pair with a NaN / Inf makes the error statistics NaN.
    Returns:
      a ``Comparison``.
    """
    g, c = _prepare(golden, calculated)
    g64 = g.astype(np.float32).astype(np.float64).ravel()
    c64 = c.astype(np.float32).astype(np.float64).ravel()
    g_fin, c_fin = np.isfinite(g64), np.isfinite(c64)
    same_nonfinite = ~g_fin & ~c_fin & ((np.isnan(g64) & np.isnan(c64)) | (g64 == c64))
    mismatched = int(np.sum((~g_fin | ~c_fin) & ~same_nonfinite))
    ok = g_fin & c_fin
    d = np.abs(g64[ok] - c64[ok])
    num = float(np.sqrt(np.sum(d * d)))
    den = float(np.sqrt(np.sum(g64[ok] ** 2)))
    rel = num / den if den > 0 else (0.0 if num == 0 else float("inf"))
    max_abs, mean_abs = (float(d.max()), float(d.mean())) if d.size else (0.0, 0.0)
    if mismatched:
        max_abs = mean_abs = rel = float("nan")
    return Comparison(pcc=pcc(g, c), max_abs=max_abs, mean_abs=mean_abs, rel_fro=rel, n=int(g64.size),
                      nonfinite=mismatched, golden_nonfinite=int(np.sum(~g_fin)),
                      calculated_nonfinite=int(np.sum(~c_fin)))
