"""Tenstorrent number formats emulated bit-exactly in JAX, and tt-metal's PCC.

* ``round_bf16`` - fp32 -> bf16 round-to-nearest-even, returned as fp32 (values exactly representable).
* ``quantize_bfp`` - bfloat8_b / bfloat4_b block floating point (shared exponent per 16-element face row).
* ``pcc`` / ``compare`` - tt-metal ``comp_pcc`` semantics and a small error report.
"""

from jaxref.numerics.bf16 import round_bf16

__all__ = ["round_bf16"]
