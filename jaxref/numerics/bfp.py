"""Tenstorrent block floating point (bfloat8_b / bfloat4_b), emulated bit-exactly in JAX.

The rules are those of tt-metal's host converter (``blockfloat_common.cpp`` pack, ``bfloat8.cpp`` /
``bfloat4.cpp`` unpack), checked bit for bit against ttnn 0.81.1 in ``tests/test_numerics_ttnn.py``:

* A 32x32 tile is four 16x16 faces; each 16-element face row shares one 8-bit exponent, the largest
  biased fp32 exponent of its 16 values. Face rows never straddle rows of the tensor, so only the
  last axis matters: it is grouped in runs of 16 (aligned to 16), after zero padding to a multiple
  of 32 as ttnn's TILE layout pads (zeros never raise a shared exponent, so padding to 16 is the
  same thing and is what we do).
* An element is a sign and a W-bit magnitude without hidden bit (W = 7 for bfloat8_b, 3 for
  bfloat4_b). Encoding takes the 24-bit mantissa with its hidden 1, shifts it right by
  ``E_shared - E_elem`` (truncating), then drops ``24 - W`` bits with round-to-nearest-even and
  clamps to ``2^W - 1`` (saturation: the shared exponent is never bumped). A zero magnitude clears
  the sign, so -0.0 and anything that rounds to 0 come back as +0.0.
* ttnn treats fp32 subnormals as zero (observed: a subnormal never contributes a magnitude, even
  when the row's shared exponent would have kept it). A row of zeros / subnormals decodes to 0.
* Decoding renormalises the magnitude into an fp32 with exponent ``E_shared - shift``. Inf and NaN
  carry exponent 255: they survive (a NaN whose payload rounds to the bare hidden bit becomes Inf)
  and flush every value of their row more than W-1 binades below 2^128 to zero; a finite value
  that rounds up to 2^128 in such a row (e.g. fp32 max) decodes as Inf.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxref.numerics.formats import FACE_ROW, MANTISSA_BITS

_EXP_MASK = 0x7F800000
_FRAC_MASK = 0x007FFFFF
_HIDDEN = 0x00800000


def _check_mantissa_bits(mantissa_bits) -> int:
    if mantissa_bits not in MANTISSA_BITS.values() or isinstance(mantissa_bits, bool):
        raise ValueError(
            f"mantissa_bits={mantissa_bits!r} unsupported; expected 7 (bfloat8_b) or 3 (bfloat4_b)")
    return int(mantissa_bits)


def _quantize_rows(bits: jnp.ndarray, w: int) -> jnp.ndarray:
    """Quantise fp32 bit patterns ``bits`` [..., R, 16] (uint32), one shared exponent per row."""
    u32 = jnp.uint32
    exp = (bits & u32(_EXP_MASK)) >> u32(23)  # [..., R, 16] biased exponent 0..255
    sign = bits >> u32(31)
    # ttnn flushes fp32 subnormals (and +-0) to zero before packing.
    is_zero = exp == 0
    shared = jnp.max(exp, axis=-1, keepdims=True)  # [..., R, 1]

    mant = (bits & u32(_FRAC_MASK)) | u32(_HIDDEN)  # 24-bit mantissa with hidden 1
    # Pre-shift to the shared exponent: plain truncation. Shifts >= 24 leave nothing; clamp to 31 so
    # the shift amount stays defined for uint32.
    mant = mant >> jnp.minimum(shared - exp, u32(31))

    drop = 24 - w  # bits removed by the rounding step
    tie = u32(1 << (drop - 1))
    rem = mant & u32((1 << drop) - 1)
    q = mant >> u32(drop)
    round_up = (rem > tie) | ((rem == tie) & ((q & u32(1)) == 1))  # nearest, ties to even
    q = jnp.minimum(q + round_up.astype(u32), u32((1 << w) - 1))  # saturate, exponent fixed
    q = jnp.where(is_zero, u32(0), q)

    # Decode exactly as ttnn's unpacker: normalise q so its top bit lands on bit w-1, drop that
    # (now hidden) bit, exponent = shared - shift. q == 0 -> +0.0 (the sign is cleared).
    top = 31 - jax.lax.clz(jnp.maximum(q, u32(1)))  # position of q's leading 1
    shift = u32(w - 1) - top
    frac = (q << (shift + u32(1))) & u32((1 << w) - 1)
    out_exp = shared - shift
    out = (sign << u32(31)) | (out_exp << u32(23)) | (frac << u32(23 - w))
    # q > 0 always has shift <= shared - 1 for normal inputs (out_exp >= 1); the guard mirrors the
    # unpacker's denormal flush for completeness.
    keep = (q != 0) & (shared > shift)
    return jnp.where(keep, out, u32(0))


@functools.partial(jax.jit, static_argnames=("mantissa_bits",))
def _quantize_bfp(x: jnp.ndarray, mantissa_bits: int) -> jnp.ndarray:
    x = jnp.asarray(x, jnp.float32)
    shape = x.shape
    n = shape[-1]
    pad = (-n) % FACE_ROW
    if pad:
        x = jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, pad)])
    bits = jax.lax.bitcast_convert_type(x, jnp.uint32)
    rows = bits.reshape(*shape[:-1], (n + pad) // FACE_ROW, FACE_ROW)  # [..., R, 16]
    q = _quantize_rows(rows, mantissa_bits).reshape(*shape[:-1], n + pad)
    return jax.lax.bitcast_convert_type(q[..., :n], jnp.float32)


def quantize_bfp(x: jnp.ndarray, mantissa_bits: int) -> jnp.ndarray:
    """Round ``x`` through Tenstorrent block floating point and back (pack + unpack), bit-exactly.

    Args:
      x: float array, any shape [..., C]; values are first taken to float32 (exact for bf16 input).
        Groups of 16 consecutive elements of the last axis share an exponent, so pass tensors in the
        orientation the device stores them (weights [in, out], the mask [T, Smax]).
      mantissa_bits: 7 for bfloat8_b, 3 for bfloat4_b (static; keyword or positional).
    Returns:
      float32 array of x's shape holding the values ttnn's host converter gives for
      ``ttnn.Tensor(x, bfloat8_b / bfloat4_b)`` read back as float32. jit- and vmap-able; its
      gradient is zero almost everywhere (use ``quantize_bfp_ste`` to differentiate through it).
    """
    w = _check_mantissa_bits(mantissa_bits)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"x.dtype={x.dtype} must be a floating dtype")
    if x.ndim == 0:
        return _quantize_bfp(x.reshape(1), w).reshape(())
    if x.shape[-1] == 0:
        return jnp.asarray(x, jnp.float32)
    return _quantize_bfp(x, w)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def quantize_bfp_ste(x: jnp.ndarray, mantissa_bits: int) -> jnp.ndarray:
    """``quantize_bfp`` forward, identity backward (straight-through estimator).

    Args / Returns as ``quantize_bfp``; the derivative with respect to ``x`` is taken as 1, so a
    loss can be differentiated through the device's weight / cache quantisation.
    """
    return quantize_bfp(x, mantissa_bits)


@quantize_bfp_ste.defjvp
def _quantize_bfp_ste_jvp(mantissa_bits, primals, tangents):
    (x,), (x_dot,) = primals, tangents
    return quantize_bfp(x, mantissa_bits), jnp.asarray(x_dot, jnp.float32)
