"""Smooth roofline primitives: bounds, limits, exactness of the discrete path."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.smooth import Relax, sceil, smax, smin

XS = np.linspace(-3.0, 7.0, 1001).astype(np.float32)


def test_exact_path_is_exact():
    a, b = jnp.asarray(XS), jnp.asarray(XS[::-1])
    np.testing.assert_array_equal(smax(a, b, relax=None), np.maximum(XS, XS[::-1]))
    np.testing.assert_array_equal(smin(a, b, relax=None), np.minimum(XS, XS[::-1]))
    np.testing.assert_array_equal(sceil(a, relax=None), np.ceil(XS))


@pytest.mark.parametrize("tau", [1.0, 0.25, 0.01])
def test_smax_bounds(tau):
    r = Relax(tau_us=tau)
    a, b, c = XS, XS[::-1], np.full_like(XS, 2.0)
    got = np.asarray(smax(a, b, c, relax=r))
    exact = np.maximum(np.maximum(a, b), c)
    assert np.all(got >= exact - 1e-5)
    assert np.all(got <= exact + tau * np.log(3) + 1e-5)
    got_min = np.asarray(smin(a, b, relax=r))
    assert np.all(got_min <= np.minimum(a, b) + 1e-5)


@pytest.mark.parametrize("tau", [0.5, 0.2, 0.05])
def test_sceil_bounds_and_monotone(tau):
    got = np.asarray(sceil(jnp.asarray(XS), relax=Relax(tau_int=tau)))
    assert np.all(got >= XS - 1e-5) and np.all(got <= np.ceil(XS) + 1e-5)
    assert np.all(np.diff(got) >= -1e-5)
    ints = np.arange(-3.0, 8.0)
    np.testing.assert_allclose(sceil(jnp.asarray(ints), relax=Relax(tau_int=tau)), ints, atol=1e-5)


def test_sceil_converges_to_ceil():
    x = jnp.asarray(XS[np.abs(XS - np.round(XS)) > 0.05])  # away from the integers themselves
    err = [float(jnp.max(jnp.abs(sceil(x, relax=Relax(tau_int=t)) - jnp.ceil(x)))) for t in (0.3, 0.1, 0.01)]
    assert err[0] > err[1] > err[2] and err[2] < 1e-2


def test_relaxed_gradients_are_positive_and_finite():
    g = jax.vmap(jax.grad(lambda x: sceil(x, relax=Relax())))(jnp.asarray(XS))
    assert np.all(np.isfinite(g)) and np.all(np.asarray(g) > 0)
    g2 = jax.grad(lambda a: smax(a, 1.0, relax=Relax()))(1.0)
    assert 0.49 < float(g2) < 0.51  # equal arguments share the gradient


def test_relax_rejects_zero_temperature():
    with pytest.raises(ValueError, match="tau_us=0"):
        Relax(tau_us=0)
    with pytest.raises(ValueError, match="tau_int=-1"):
        Relax(tau_int=-1)
