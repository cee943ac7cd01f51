"""pcc / compare against tt-metal's comp_pcc definition (REFERENCE.md section 6), case by case.

Expected values come from the definition: the Pearson formula written out in float64 sums, and the
short-circuit rules (all-NaN, all-zero, equality, masked zero variance) derived by hand.
"""

from __future__ import annotations

import math
import sys

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxref.numerics import compare, pcc

NAN, INF = float("nan"), float("inf")


def pearson(g, c) -> float:
    """Textbook Pearson r in float64."""
    g = np.asarray(g, np.float64).ravel()
    c = np.asarray(c, np.float64).ravel()
    dg, dc = g - g.mean(), c - c.mean()
    return float(np.sum(dg * dc) / np.sqrt(np.sum(dg * dg) * np.sum(dc * dc)))


@pytest.mark.parametrize("shape", [(7,), (64, 48), (2, 3, 5, 4)])
def test_matches_pearson_on_random_data(shape):
    rng = np.random.default_rng(sum(shape))
    g = rng.standard_normal(shape).astype(np.float32)
    c = (g + 0.05 * rng.standard_normal(shape)).astype(np.float32)
    assert pcc(g, c) == pytest.approx(pearson(g, c), abs=1e-12)
    assert pcc(g, -c) == pytest.approx(-pearson(g, c), abs=1e-12)
    assert pcc(jnp.asarray(g), jnp.asarray(c)) == pytest.approx(pearson(g, c), abs=1e-12)


@pytest.mark.parametrize(("golden", "calculated", "want"), [
    pytest.param([NAN, NAN], [NAN, NAN], 1.0, id="both-all-nan"),
    pytest.param([NAN, NAN], [1.0, 2.0], 0.0, id="golden-all-nan"),
    pytest.param([1.0, 2.0], [NAN, NAN], 0.0, id="calculated-all-nan"),
    pytest.param([0.0, 0.0, 0.0], [0.0, 1.0, 2.0], 0.0, id="golden-all-zero"),
    pytest.param([0.0, 1.0, 2.0], [0.0, -0.0, 0.0], 0.0, id="calculated-all-zero"),
    pytest.param([0.0, 0.0], [-0.0, 0.0], 1.0, id="both-all-zero-equal"),
    # A NaN is non-zero for the zero test (torch's .bool()), so this is "exactly one all-zero".
    pytest.param([NAN, 0.0, 0.0], [0.0, 0.0, 0.0], 0.0, id="nan-counts-as-nonzero"),
    pytest.param([1.0, -2.0, 3.0], [1.0, -2.0, 3.0], 1.0, id="exactly-equal"),
    pytest.param([0.0, 1.0, -0.0], [-0.0, 1.0, 0.0], 1.0, id="equal-up-to-signed-zero"),
    # NaN / Inf are zeroed before the equality test: these agree once both become 0.
    pytest.param([1.0, INF, 3.0, NAN], [1.0, NAN, 3.0, -INF], 1.0, id="nonfinite-zeroed-then-equal"),
    # Both constant and different: every entry of corrcoef is 0/0 -> masked -> 1.0.
    pytest.param([2.0, 2.0, 2.0], [5.0, 5.0, 5.0], 1.0, id="both-constant"),
])
def test_short_circuit_cases(golden, calculated, want):
    assert pcc(np.asarray(golden, np.float32), np.asarray(calculated, np.float32)) == want


def test_constant_golden_masks_its_row():
    # Zero variance masks the golden's row and column of the 2x2 corrcoef matrix; the min is then the
    # calculated tensor's own diagonal entry var/var = 1 (up to rounding): tt-metal reports ~1.0 even
    # though the tensors are unrelated. Reproduced as defined, not "fixed".
    g = np.full(8, 3.0, np.float32)
    c = np.arange(8, dtype=np.float32)
    assert pcc(g, c) == pytest.approx(1.0, abs=1e-15)
    assert pcc(c, g) == pytest.approx(1.0, abs=1e-15)


def test_nonfinite_values_are_zeroed_before_pearson():
    g = np.array([1.0, 2.0, INF, 4.0, 5.0], np.float32)
    c = np.array([1.5, 1.0, 3.0, NAN, 4.0], np.float32)
    assert pcc(g, c) == pytest.approx(pearson([1, 2, 0, 4, 5], [1.5, 1, 3, 0, 4]), abs=1e-12)


def test_calculated_takes_golden_dtype():
    rng = np.random.default_rng(0)
    g32 = rng.standard_normal(256).astype(np.float32)
    g16 = g32.astype(ml_dtypes.bfloat16)
    # fp32 noise far below half a bf16 ulp: cast to the bf16 golden's dtype it rounds back -> equal.
    c = g16.astype(np.float32) * np.float32(1 + 2.0**-12)
    assert pcc(g16, c) == 1.0
    # With an fp32 golden the same pair is compared in fp32, so it is not exactly equal.
    r = pcc(g16.astype(np.float32), c)
    assert r != 1.0 and r == pytest.approx(pearson(g16.astype(np.float32), c), abs=1e-12)
    # bf16 vs bf16 (not equal): Pearson of the fp32 values.
    c16 = (g32 + 0.1).astype(ml_dtypes.bfloat16)
    c16[0] = ml_dtypes.bfloat16(7.0)
    assert pcc(g16, c16) == pytest.approx(pearson(g16.astype(np.float32), c16.astype(np.float32)), abs=1e-12)


def test_compare_report():
    rep = compare(np.array([3.0, 4.0], np.float32), np.array([3.0, 5.0], np.float32))
    # d = [0, 1]: max 1, mean 0.5, ||d|| / ||g|| = 1 / 5.
    assert (rep.max_abs, rep.mean_abs, rep.n) == (1.0, 0.5, 2)
    assert rep.rel_fro == pytest.approx(0.2, abs=1e-15)
    assert rep.pcc == pytest.approx(1.0, abs=1e-15)  # two points are always perfectly correlated
    assert "PCC 1.0000000" in str(rep)
    same = compare(np.zeros(4, np.float32), np.zeros(4, np.float32))
    assert (same.pcc, same.max_abs, same.rel_fro) == (1.0, 0.0, 0.0)
    assert compare(np.zeros(2, np.float32), np.ones(2, np.float32)).rel_fro == float("inf")


def test_bad_input():
    with pytest.raises(ValueError, match="calculated.shape"):
        pcc(np.zeros(3, np.float32), np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="golden.dtype"):
        pcc(np.zeros(3, np.int32), np.zeros(3, np.float32))


@pytest.mark.parametrize("frac", [0.1, 0.999])
def test_compare_counts_nonfinite_and_never_reports_zero_error(frac):
    """Issue 20: NaN in 10% (or 99.9%) of the candidate used to give max-abs 0, rel-Frobenius 0."""
    rng = np.random.default_rng(3)
    g = rng.standard_normal(1000).astype(np.float32)
    c = g.copy()
    bad = rng.permutation(1000)[: round(frac * 1000)]
    c[bad] = np.nan
    rep = compare(g, c)
    assert (rep.nonfinite, rep.calculated_nonfinite, rep.golden_nonfinite) == (len(bad), len(bad), 0)
    assert not rep.finite and not rep.meets(min_pcc=-1.0)
    assert np.isnan(rep.max_abs) and np.isnan(rep.mean_abs) and np.isnan(rep.rel_fro) and np.isnan(rep.pcc)
    assert f"NON-FINITE {len(bad)} in calculated" in str(rep) and "FAIL" in str(rep)


def test_compare_identical_nonfinite_values_are_a_failure_not_agreement():
    """Issue 30: two all-NaN tensors (a broken model on both sides) compared as pcc 1.0, max-abs 0,
    finite=True. Any NaN / Inf on either side is now a failure with its counts."""
    g = np.array([1.0, NAN, INF, -INF], np.float32)
    rep = compare(g, g.copy())
    assert (rep.nonfinite, rep.golden_nonfinite, rep.calculated_nonfinite) == (3, 3, 3)
    assert not rep.finite and not rep.meets() and np.isnan(rep.pcc) and np.isnan(rep.max_abs)
    both_nan = compare(np.full(5, NAN, np.float32), np.full(5, NAN, np.float32))
    assert (both_nan.nonfinite, both_nan.finite, both_nan.meets()) == (5, False, False)
    assert both_nan.pcc != 1.0 and both_nan.max_abs != 0.0  # NaN: neither a perfect PCC nor a zero error
    assert pcc(np.full(5, NAN, np.float32), np.full(5, NAN, np.float32)) == 1.0  # tt-metal's metric, as defined


def test_meets_applies_the_targets_to_finite_comparisons():
    g = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    rep = compare(g, g + np.array([0, 0, 0, 0.5], np.float32))
    assert rep.meets() and rep.meets(min_pcc=0.9, max_abs=0.5)
    assert not rep.meets(max_abs=0.4) and not rep.meets(min_pcc=rep.pcc + 1e-9)


def test_float64_is_compared_in_float64():
    """Issue 30: float64 inputs were cast to float32 first (1e200 vs 2e200 equal, 1e-12 reported as 0)."""
    rep = compare(np.array([1e200, 3e200]), np.array([2e200, 3e200]))
    assert rep.max_abs == 1e200 and rep.mean_abs == 5e199 and rep.finite
    assert rep.rel_fro == pytest.approx(1 / np.sqrt(10), rel=1e-12)  # ||(1, 0)|| / ||(1, 3)||, no overflow
    tiny = compare(np.array([1.0, 2.0, 3.0]), np.array([1.0 + 1e-12, 2.0, 3.0]))
    assert tiny.max_abs == pytest.approx(1e-12, rel=1e-3) and tiny.pcc < 1.0
    assert compare(np.array([1.0, 5e200, -2e200]), np.array([1.0, 5e200, -2e200])).pcc == 1.0


# ---- property tests (hypothesis): each fails on the issue-30 behaviour ---------------------------
BAD_VALUES = st.sampled_from([NAN, INF, -INF])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 40), data=st.data(), dtype=st.sampled_from([np.float32, np.float64]))
def test_any_nonfinite_value_is_counted_and_fails(n, data, dtype):
    g = np.asarray(data.draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n)), dtype)
    c = np.asarray(data.draw(st.lists(st.floats(-1e6, 1e6), min_size=n, max_size=n)), dtype)
    g_bad = data.draw(st.sets(st.integers(0, n - 1)))
    c_bad = data.draw(st.sets(st.integers(0, n - 1), min_size=0 if g_bad else 1))
    for idx in g_bad:
        g[idx] = data.draw(BAD_VALUES)
    for idx in c_bad:
        c[idx] = g[idx] if idx in g_bad and data.draw(st.booleans()) else data.draw(BAD_VALUES)  # identical too
    rep = compare(g, c)
    assert (rep.golden_nonfinite, rep.calculated_nonfinite, rep.nonfinite) == (
        len(g_bad), len(c_bad), len(g_bad | c_bad))
    assert not rep.finite and not rep.meets()
    assert all(np.isnan(x) for x in (rep.pcc, rep.max_abs, rep.mean_abs, rep.rel_fro))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(-1e300, 1e300), st.floats(-1e300, 1e300)), min_size=1, max_size=30))
def test_float64_errors_are_exact_float64_statistics(pairs):
    g = np.array([a for a, _ in pairs], np.float64)
    c = np.array([b for _, b in pairs], np.float64)
    d = [abs(float(a) - float(b)) for a, b in pairs]  # python floats: the float64 oracle
    if not all(np.isfinite(d)):  # the difference itself overflows float64: nothing to compare exactly
        return
    rep = compare(g, c)
    assert rep.finite and rep.max_abs == max(d)
    assert rep.mean_abs == pytest.approx(sum(x / len(d) for x in d), rel=1e-12, abs=0)
    # ||d|| / ||g|| exceeds float64 itself (a subnormal golden): inf is then the right answer
    log_ratio = math.log(math.hypot(*d) or 1e-320) - math.log(math.hypot(*g.tolist()) or 1e-320)
    assert np.isfinite(rep.rel_fro) or not np.any(g) or log_ratio > math.log(sys.float_info.max)
