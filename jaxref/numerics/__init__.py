"""Tenstorrent number formats emulated bit-exactly in JAX, and tt-metal's PCC.

* ``round_bf16`` - fp32 -> bf16 round-to-nearest-even, returned as fp32 (values exactly representable).
* ``quantize_bfp`` - bfloat8_b / bfloat4_b block floating point (shared exponent per 16-element face row);
  ``quantize_bfp_ste`` is the same forward with a straight-through (identity) gradient.
* ``pcc`` / ``compare`` - tt-metal ``comp_pcc`` semantics and a small error report (host, float64).
"""

from jaxref.numerics.bf16 import round_bf16
from jaxref.numerics.bfp import FACE_ROW, MANTISSA_BITS, TILE_WIDTH, quantize_bfp, quantize_bfp_ste
from jaxref.numerics.pcc import Comparison, compare, pcc

__all__ = [
    "FACE_ROW",
    "MANTISSA_BITS",
    "TILE_WIDTH",
    "Comparison",
    "compare",
    "pcc",
    "quantize_bfp",
    "quantize_bfp_ste",
    "round_bf16",
]
