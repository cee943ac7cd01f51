"""quantize_bfp against an independent scalar oracle and hand-worked examples (main venv, no ttnn).

The bit-for-bit check against ttnn's own converter is ``tests/test_numerics_ttnn.py``. Here the
oracle is a plain-Python, one-value-at-a-time transcription of the rules in REFERENCE.md section 4
(integer mantissa arithmetic, decode by ``math.ldexp``), sharing no code with the JAX version.
"""

from __future__ import annotations

import math
import struct

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxref.numerics import quantize_bfp, quantize_bfp_ste

W_OF = {"bfp8": 7, "bfp4": 3}


# ---- oracle -------------------------------------------------------------------------------------
def _bits(v: float) -> int:
    return struct.unpack("<I", struct.pack("<f", v))[0]


def _oracle_face_row(bits: list[int], w: int) -> list[int]:
    """One face row of 16 fp32 bit patterns -> bit patterns after pack + unpack (REFERENCE.md 4).

    Works on the integer patterns throughout: a trip through Python floats would quieten NaNs.
    """
    exps = [(b >> 23) & 0xFF for b in bits]
    shared = max(exps)
    out = []
    for b, e in zip(bits, exps):
        sign = b >> 31
        if e == 0:  # +-0 and fp32 subnormals pack as zero
            out.append(0)
            continue
        mant = (b & 0x7FFFFF) | (1 << 23)
        mant = mant >> (shared - e) if shared - e < 32 else 0  # truncating pre-shift
        drop = 24 - w
        q, rem = divmod(mant, 1 << drop)
        half = 1 << (drop - 1)
        if rem > half or (rem == half and q % 2 == 1):
            q += 1
        q = min(q, (1 << w) - 1)
        if q == 0:
            out.append(0)  # sign cleared
            continue
        if shared == 255 and q >= 1 << (w - 1):
            # Decodes with exponent 255: the Inf / NaN itself (fraction from q), or a finite value
            # within one binade of 2^128 that rounded up to 2^(w-1) steps = 2^128 -> Inf.
            out.append((sign << 31) | (0xFF << 23) | ((q - (1 << (w - 1))) << (24 - w)))
            continue
        value = math.ldexp(q, shared - 127 - (w - 1))
        if value < 2.0**-126:  # the unpacker flushes what would decode to an fp32 subnormal
            out.append(0)
            continue
        out.append(_bits(-value if sign else value))
    return out


def oracle_bfp(x: np.ndarray, w: int) -> np.ndarray:
    """Pad the last axis with zeros to a multiple of 32 (ttnn's TILE layout), quantise face rows."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    rows = np.pad(x.reshape(-1, n), ((0, 0), (0, (-n) % 32)))
    out = np.zeros(rows.shape, np.uint32)
    for r in range(rows.shape[0]):
        for c in range(0, rows.shape[1], 16):
            out[r, c:c + 16] = _oracle_face_row([int(b) for b in rows[r, c:c + 16].view(np.uint32)], w)
    return out.view(np.float32)[:, :n].reshape(x.shape)


def _assert_bits_equal(got, want):
    got = np.asarray(got, np.float32).view(np.uint32)
    want = np.asarray(want, np.float32).view(np.uint32)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (f"{len(bad)} of {got.size} differ, first at {tuple(bad[0])}: "
                           f"got 0x{got[tuple(bad[0])]:08x} want 0x{want[tuple(bad[0])]:08x}")


def _wide(rng, shape, lo=-60, hi=60):
    return (rng.choice([-1.0, 1.0], shape) * rng.uniform(1, 2, shape)
            * np.exp2(rng.integers(lo, hi + 1, shape))).astype(np.float32)


# ---- hand-worked examples ---------------------------------------------------------------------
# Each comment derives the expected value from the rules; none comes from running the code.
@pytest.mark.parametrize(("fmt", "row", "want"), [
    # REFERENCE.md: shared exponent 2^0, bfp8 step 2^-6. 1.0078125 = 64.5 steps: tie, 64 even -> 1.0;
    # 1.0234375 = 65.5 steps: tie, 65 odd -> 66 = 1.03125; 1.9999999 = 127.99999 -> 128 -> clamp 127.
    ("bfp8", [1.0078125, 1.0234375, 1.9999999], [1.0, 1.03125, 1.984375]),
    # bfp4 step 2^-2: 1.9999999 -> 8 steps -> clamp 7 = 1.75 (exponent is never bumped).
    ("bfp4", [1.9999999], [1.75]),
    # Shared exponent 2^1 from 2.0, bfp8 step 2^-5. 1 + 2^-6 + 2^-23 is 32.5 steps + a sticky bit
    # that the truncating pre-shift (by one binade) drops: a tie, 32 even -> 1.0 (true rounding: 1.03125).
    ("bfp8", [2.0, 1.0 + 2.0**-6 + 2.0**-23], [2.0, 1.0]),
    # Same value alone in its row (no pre-shift): 64.5 steps + sticky -> above the tie -> 65 = 1.015625.
    ("bfp8", [1.0 + 2.0**-6 + 2.0**-23], [1.015625]),
    # Double rounding: 1 + 3/128 - 2^-20 is below the 65.5-step tie -> 65 = 1.015625; rounding to bf16
    # first would give the tie 1.0234375 and then 66 = 1.03125.
    ("bfp8", [1.0 + 3.0 / 128 - 2.0**-20], [1.015625]),
    # bfp4 row with max 8.0 (step 2): 3.0 = 1.5 steps: tie, 1 odd -> 2 steps = 4.0; 1.0 = 0.5 step:
    # tie, 0 even -> 0; -5.0 = 2.5 steps -> 2 -> -4.0; 0.9 truncates to below the tie -> 0.
    ("bfp4", [8.0, 3.0, 1.0, -5.0, 0.9], [8.0, 4.0, 0.0, -4.0, 0.0]),
    # -0.0 and values that round to zero lose their sign; subnormals pack as zero.
    ("bfp8", [-0.0, 1.0, -2.0**-8, 1e-40, -1e-40], [0.0, 1.0, 0.0, 0.0, 0.0]),
    # fp32 max: all mantissa bits -> rounds past 127 -> clamp 127 -> 127 * 2^(254-127-6).
    ("bfp8", [float(np.finfo(np.float32).max)], [127 * 2.0**121]),
    # An Inf row: shared exponent 255, bfp8 step 2^122. Inf is 64 steps (exponent 255, fraction 0);
    # 2^127 = 32 steps survives; 3e38 = 56.42 steps -> 56; 1.0 is ~2^-122 steps -> 0.
    ("bfp8", [np.inf, 1.0, 2.0**127, 3e38], [np.inf, 0.0, 2.0**127, 56 * 2.0**122]),
    # fp32 max in an Inf row is 63.99 steps of 2^122 -> 64 steps = 2^128: it decodes as Inf.
    ("bfp4", [np.inf, -float(np.finfo(np.float32).max), 2.0**127], [np.inf, -np.inf, 2.0**127]),
])
def test_hand_worked_examples(fmt, row, want):
    got = quantize_bfp(np.asarray(row, np.float32), W_OF[fmt])
    _assert_bits_equal(got, np.asarray(want, np.float32))


def test_nan_payload_rules():
    # A NaN whose payload rounds away decodes to Inf; a quiet NaN stays a NaN of the same sign.
    x = np.array([0x7F800001, 0xFFC00000, 0x7FC00000, 0xFF800001], np.uint32).view(np.float32)
    got = np.asarray(quantize_bfp(x, 7))
    assert np.isposinf(got[0]) and np.isneginf(got[3])
    assert np.isnan(got[1]) and np.signbit(got[1]) and np.isnan(got[2]) and not np.signbit(got[2])


# ---- against the oracle -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["bfp8", "bfp4"])
@pytest.mark.parametrize("case", ["wide", "tiny", "bits", "odd_width"])
def test_matches_scalar_oracle(fmt, case):
    rng = np.random.default_rng(hash((fmt, case)) % 2**32)
    x = {
        "wide": lambda: _wide(rng, (24, 96)),
        "tiny": lambda: _wide(rng, (16, 64), lo=-150, hi=-110),  # subnormals next to small normals
        "bits": lambda: rng.integers(0, 2**32, (16, 64), dtype=np.uint64).astype(np.uint32).view(np.float32),
        "odd_width": lambda: _wide(rng, (3, 4, 37), lo=-30, hi=30),
    }[case]()
    _assert_bits_equal(quantize_bfp(x, W_OF[fmt]), oracle_bfp(x, W_OF[fmt]))


@settings(max_examples=150, deadline=None)
@given(x=hnp.arrays(np.float32, (2, 40), elements=st.floats(width=32, allow_nan=True, allow_infinity=True)),
       w=st.sampled_from([7, 3]))
def test_matches_scalar_oracle_hypothesis(x, w):
    _assert_bits_equal(quantize_bfp(x, w), oracle_bfp(x, w))


# ---- structure: padding, rows, transforms ----------------------------------------------------
@pytest.mark.parametrize("w", [7, 3])
def test_padding_and_row_independence(w):
    rng = np.random.default_rng(3)
    x = _wide(rng, (6, 37))
    padded = np.pad(x, ((0, 0), (0, 64 - 37)))  # what ttnn's TILE layout holds
    _assert_bits_equal(quantize_bfp(x, w), np.asarray(quantize_bfp(padded, w))[:, :37])
    perm = rng.permutation(6)  # rows never share exponents
    _assert_bits_equal(np.asarray(quantize_bfp(x, w))[perm], quantize_bfp(x[perm], w))
    # Face rows are aligned to 16: moving a value across a face boundary changes its neighbours' fate.
    row = np.zeros((1, 32), np.float32)
    row[0, 15], row[0, 16] = 1024.0, 1.0
    assert float(quantize_bfp(row, w)[0, 16]) == 1.0  # 1.0 sits in the next face row: kept exactly
    row[0, 15], row[0, 14] = 1.0, 1024.0
    assert float(quantize_bfp(row, w)[0, 15]) == 0.0  # same face row as 1024: flushed


@pytest.mark.parametrize("w", [7, 3])
def test_jit_vmap_idempotent_and_dtypes(w):
    rng = np.random.default_rng(4)
    x = jnp.asarray(_wide(rng, (4, 8, 48)))
    q = quantize_bfp(x, w)
    _assert_bits_equal(jax.jit(quantize_bfp, static_argnames="mantissa_bits")(x, mantissa_bits=w), q)
    _assert_bits_equal(jax.vmap(lambda t: quantize_bfp(t, w))(x), q)
    _assert_bits_equal(jax.vmap(lambda t: quantize_bfp(t, w), in_axes=1, out_axes=1)(x), q)
    _assert_bits_equal(quantize_bfp(q, w), q)  # representable values are fixed points
    assert q.dtype == jnp.float32 and q.shape == x.shape
    xb = x.astype(jnp.bfloat16)  # bf16 input is exact in fp32, so it matches the fp32 path
    _assert_bits_equal(quantize_bfp(xb, w), quantize_bfp(xb.astype(jnp.float32), w))
    assert float(quantize_bfp(jnp.float32(1.9999999), w)) == (1.984375 if w == 7 else 1.75)


def test_straight_through_gradient():
    rng = np.random.default_rng(5)
    x = jnp.asarray(_wide(rng, (3, 32), lo=-4, hi=4))
    c = jnp.asarray(rng.standard_normal((3, 32)).astype(np.float32))
    g_ste = jax.grad(lambda t: jnp.sum(quantize_bfp_ste(t, 7) * c))(x)
    np.testing.assert_array_equal(np.asarray(g_ste), np.asarray(c))  # identity backward
    g_plain = jax.grad(lambda t: jnp.sum(quantize_bfp(t, 7) * c))(x)
    np.testing.assert_array_equal(np.asarray(g_plain), 0.0)  # bit manipulation has no gradient
    _assert_bits_equal(quantize_bfp_ste(x, 3), quantize_bfp(x, 3))  # same forward
    _assert_bits_equal(jax.jit(quantize_bfp_ste, static_argnums=1)(x, 3), quantize_bfp(x, 3))


@pytest.mark.parametrize("bad", [0, 5, 8, True, 7.5, None])
def test_rejects_unsupported_mantissa_bits(bad):
    with pytest.raises(ValueError, match="mantissa_bits"):
        quantize_bfp(jnp.ones((2, 16)), bad)


def test_rejects_integer_input():
    with pytest.raises(ValueError, match="x.dtype"):
        quantize_bfp(jnp.ones((2, 16), jnp.int32), 7)
