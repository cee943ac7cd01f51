"""Tenstorrent number formats emulated bit-exactly in JAX, and tt-metal's PCC.

* ``round_bf16`` - fp32 -> bf16 round-to-nearest-even, returned as fp32 (values exactly representable);
  ``einsum_f32`` - an einsum with float32 sums, run as a bf16 dot where the operands hold bf16 values.
* ``quantize_bfp`` - bfloat8_b / bfloat4_b block floating point (shared exponent per 16-element face row);
  ``quantize_bfp_ste`` is the same forward with a straight-through (identity) gradient.
* ``pcc`` / ``compare`` - tt-metal ``comp_pcc`` semantics and the one comparison result (host, float64).
* ``formats`` - the tile / format constants (TILE, FACE_ROW, MANTISSA_BITS, TILE_BYTES, ...).
"""

from jaxref.numerics.bf16 import einsum_f32, round_bf16
from jaxref.numerics.bfp import quantize_bfp, quantize_bfp_ste
from jaxref.numerics.formats import FACE_ROW, FORMATS, MANTISSA_BITS, TILE, TILE_BYTES
from jaxref.numerics.pcc import Comparison, compare, pcc

__all__ = [
    "FACE_ROW",
    "FORMATS",
    "MANTISSA_BITS",
    "TILE",
    "TILE_BYTES",
    "Comparison",
    "compare",
    "einsum_f32",
    "pcc",
    "quantize_bfp",
    "quantize_bfp_ste",
    "round_bf16",
]
