"""pcc / compare against tt-metal's comp_pcc definition (REFERENCE.md section 6), case by case.

Expected values come from the definition: the Pearson formula written out in float64 sums, and the
short-circuit rules (all-NaN, all-zero, equality, masked zero variance) derived by hand.
"""

from __future__ import annotations

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

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
    assert not rep.finite
    assert np.isnan(rep.max_abs) and np.isnan(rep.mean_abs) and np.isnan(rep.rel_fro)
    assert f"NON-FINITE: {len(bad)} in calculated" in str(rep)


def test_compare_identical_nonfinite_values_agree():
    g = np.array([1.0, NAN, INF, -INF], np.float32)
    rep = compare(g, g.copy())
    assert (rep.nonfinite, rep.golden_nonfinite, rep.calculated_nonfinite) == (0, 3, 3)
    assert rep.finite and rep.max_abs == 0.0
    assert "NON-FINITE" in str(rep)  # still said, though they agree
    assert not compare(g, np.array([1.0, NAN, -INF, -INF], np.float32)).finite  # +Inf vs -Inf
