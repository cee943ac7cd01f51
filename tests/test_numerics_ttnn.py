"""quantize_bfp / round_bf16 against ttnn's own host converter, bit for bit.

ttnn installs on CPython 3.10 / 3.12 only; ``make test-ttnn`` builds ``.venv-ttnn`` with it and runs
this file. The host converter needs no chip, only a (mock) cluster descriptor: the project ships one
(``device/mock/blackhole_p150.yaml``) and the test points ``TT_METAL_MOCK_CLUSTER_DESC_PATH`` at it when
the variable is unset. Without ttnn the whole file skips and says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from jaxref.numerics import quantize_bfp, round_bf16

MOCK_DESC = Path(__file__).resolve().parents[1] / "device" / "mock" / "blackhole_p150.yaml"
os.environ.setdefault("TT_METAL_MOCK_CLUSTER_DESC_PATH", str(MOCK_DESC))

try:  # lazy: only this file needs ttnn, and only in the ttnn venv
    import ttnn
except (ImportError, OSError, RuntimeError) as exc:  # not installed, or its runtime refusing to start
    pytest.skip(f"ttnn host converter not importable here ({type(exc).__name__}: {exc}); "
                "run `make test-ttnn` (CPython 3.12 venv with ttnn 0.81.1)", allow_module_level=True)

pytestmark = pytest.mark.ttnn

FORMATS = {"bfp8": (7, ttnn.bfloat8_b), "bfp4": (3, ttnn.bfloat4_b)}


def _f32(*u32) -> np.ndarray:
    return np.array(u32, np.uint32).view(np.float32)


def _ttnn_roundtrip(a: np.ndarray, dtype) -> np.ndarray:
    """ttnn host tensor in ``dtype`` (TILE layout for block formats), read back as float32."""
    t = ttnn.Tensor(np.ascontiguousarray(a, np.float32), dtype)
    back = np.asarray(ttnn.to_dtype(t, ttnn.float32).to_numpy(), dtype=np.float32)
    return back.reshape(a.shape)


def _random_wide(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random signs and mantissas; exponents spread over [-100, 100] with per-row spreads from 0
    (every face row one binade) to 200 binades, so shared-exponent pre-shifts of 0..>31 all occur."""
    spread = rng.integers(0, 201, (rows, 1))
    centre = rng.integers(-100, 101, (rows, 1))
    e = np.clip(centre + rng.integers(-100, 101, (rows, cols)) * spread // 200, -126, 127)
    m = rng.uniform(1.0, 2.0, (rows, cols))
    s = rng.choice([-1.0, 1.0], (rows, cols))
    return (s * m * np.exp2(e)).astype(np.float32)


def _random_bits(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Uniform random fp32 bit patterns: every exponent, subnormals, Inf and NaN payloads."""
    return rng.integers(0, 2**32, (rows, cols), dtype=np.uint64).astype(np.uint32).view(np.float32)


def _edge_rows(w: int) -> np.ndarray:
    """Hand-picked 16-wide face rows for W mantissa bits; each row exercises one rule."""
    f32_max = np.finfo(np.float32).max
    top = 2**w - 1  # largest magnitude code
    rows = []

    def row(*vals):
        r = np.zeros(16, np.float32)
        r[: len(vals)] = np.asarray(vals, np.float32)
        rows.append(r)

    # Codes m have value m * 2^(p - (w-1)) when a row's largest exponent is p. Ties sit at m + 1/2;
    # odd m must round up, even m down. Small m means the element is pre-shifted (exponent < p).
    ms = sorted({0, 1, 2, 3, top // 4, top // 4 + 1, top // 2, top // 2 + 1, top - 2, top - 1,
                 *range(2**(w - 1) - 2, min(2**(w - 1) + 3, top))})[:15]
    for p in (0, 1, -3, 60):
        step = 2.0 ** (p - w + 1)
        ties = np.array([(m + 0.5) * step for m in ms], np.float32)
        row(2.0**p, *ties)
        row(-(2.0**p), *-ties)
        # One fp32 ulp above a tie: kept when the element is at the shared exponent, lost by the
        # truncating pre-shift when it is below (then the tie rule decides).
        row(2.0**p, *np.nextafter(ties, np.float32(np.inf)))
        # One fp32 ulp below a tie: always rounds down here, but fp32 -> bf16 -> bfp would round
        # it to the tie first (double rounding) and then up for odd m.
        row(2.0**p, *np.nextafter(ties, np.float32(0)))
    # Saturation: the largest magnitudes round past 2^W - 1 and clamp (exponent never bumped).
    row(1.9999999, -1.9999999, 2.0 - 2.0**-w, 2.0 - 2.0 ** -(w + 1), 1.0, 1.5, 1.75, 1.9375)
    row(f32_max, -f32_max, f32_max * 0.75, 1.0, 2.0**120)
    # Max-exponent rows (biased exponent 254), and a row pinned at 2^127 with small values.
    row(*np.linspace(2.0**127, f32_max, 16))
    row(2.0**127, 2.0**126, 2.0**121, 2.0**120, 2.0**100, 1.0, -(2.0**125))
    # +-0 and rows of zeros: signs are dropped.
    row(-0.0, 0.0, -0.0, 1.0, -0.0, -1.0)
    row(*([-0.0] * 16))
    row()
    # Subnormal rows, subnormals beside small normals, and the smallest normals.
    row(*_f32(*[0x00000001 + 0x00012345 * k for k in range(16)]))
    row(*_f32(*[0x80400000 + 0x00001000 * k for k in range(16)]))
    row(*_f32(0x00800000, 0x00400000, 0x80200000, 0x00000001, 0x01000000, 0x81800000, 0x007FFFFF))
    row(*_f32(0x01800000, 0x00FFFFFF, 0x00800001, 0x00C00000, 0x00A00000, 0x80900000, 0x00880000))
    # Inf / NaN survive and flush their row, except values within W-1 binades of 2^128.
    row(np.inf, 1.0, -2.0, 3.0e38, 2.0**127, 2.0**126, 2.0**122, 2.0**121)
    row(-np.inf, 5.0, -7.0, 1.0e-3)
    row(np.inf, f32_max, -f32_max, np.nextafter(f32_max, np.float32(0)), 1.5 * 2.0**127, 2.0**127)
    row(*_f32(0x7FC00000, 0x3F800000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0x7FA00000,
              0x7F900000, 0x7F880000, 0x7F840000, 0x7F820000, 0x7F810000, 0x7F808000, 0x7F804000))
    # Shared-exponent gaps of 23..33 binades (shift counts at and past the 24-bit mantissa).
    row(1.0, *[2.0**-g for g in range(23, 34)], *[-(2.0**-g) * 1.75 for g in range(23, 27)])
    row(2.0**100, 2.0**-100, -(2.0**99), 1.0, 2.0**90, 2.0**94, 2.0**95, 2.0**96, 2.0**97, 2.0**98)
    return np.stack(rows)


def _two_per_tile_row(rows: np.ndarray) -> np.ndarray:
    """[R, 16] face rows -> [ceil(R/2), 32]: two face rows side by side in each 32-wide tile row."""
    if len(rows) % 2:
        rows = np.concatenate([rows, np.zeros((1, 16), np.float32)])
    return rows.reshape(-1, 32)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_quantize_bfp_matches_ttnn_bit_for_bit(fmt):
    w, tt_dtype = FORMATS[fmt]
    rng = np.random.default_rng(2024 + w)
    cases = {
        "random wide exponents": _random_wide(rng, 128, 1024),  # 131072 values
        "random bit patterns": _random_bits(rng, 32, 1024),  # 32768 values incl. NaN / Inf / subnormal
        "edge face rows": _two_per_tile_row(_edge_rows(w)),
        "edge rows, each its own tensor row": _edge_rows(w),
        "non-tile shape [5, 37]": _random_wide(rng, 5, 37),
        "non-tile shape [3, 2, 50]": _random_wide(rng, 6, 50).reshape(3, 2, 50),
    }
    total = 0
    report = []
    for name, a in cases.items():
        got = np.asarray(quantize_bfp(a, w)).view(np.uint32)
        want = _ttnn_roundtrip(a, tt_dtype).view(np.uint32)
        assert got.shape == want.shape == a.shape
        bad = np.argwhere(got != want)
        total += a.size
        if bad.size:
            i = tuple(bad[0])
            report.append(f"{name}: {len(bad)} of {a.size} differ, first at {i}: "
                          f"x=0x{a.view(np.uint32)[i]:08x} ours=0x{got[i]:08x} ttnn=0x{want[i]:08x}")
    assert not report, f"{fmt}: " + "; ".join(report)
    assert total >= 100_000


def test_ttnn_examples_of_the_reference():
    # REFERENCE.md section 4, straight from ttnn (guards the harness itself).
    x = np.array([[1.0078125, 1.0234375, 1.9999999]], np.float32)
    np.testing.assert_array_equal(_ttnn_roundtrip(x, ttnn.bfloat8_b), [[1.0, 1.03125, 1.984375]])
    np.testing.assert_array_equal(_ttnn_roundtrip(x[:, 2:], ttnn.bfloat4_b), [[1.75]])


def test_round_bf16_matches_ttnn():
    rng = np.random.default_rng(7)
    a = np.concatenate([_random_wide(rng, 32, 1024).ravel(), _random_bits(rng, 32, 1024).ravel(),
                        _edge_rows(7).ravel(), _edge_rows(3).ravel()])
    got = np.asarray(round_bf16(a))
    want = _ttnn_roundtrip(a, ttnn.bfloat16)
    # NaN stays NaN, but the sign ttnn gives a NaN depends on its code path (observed: 0xffc00001 ->
    # 0xffc00000 in a short tensor, 0xffecca8d -> 0x7fc00000 in a long one): compare NaN as a class.
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    got, want, x = got[~nan].view(np.uint32), want[~nan].view(np.uint32), a[~nan].view(np.uint32)
    bad = np.flatnonzero(got != want)
    assert a.size >= 65_536
    assert bad.size == 0, (f"{bad.size} of {a.size} bf16 values differ, first x=0x{x[bad[0]]:08x} "
                           f"ours=0x{got[bad[0]]:08x} ttnn=0x{want[bad[0]]:08x}")
