"""costmodel.tuning: the projection onto legal neighbours, its fallbacks and errors, the descent."""

import jax
import jax.numpy as jnp
import pytest

from costmodel import tuning

TILES = tuning.Axis("tile", (32, *range(64, 4097, 64)))
CUBES = tuning.Axis("cubes", (1, 2, 4, 8, 16))


@pytest.mark.parametrize("x", [47.0, 64.0, 100.0, 777.7, 5000.0, 1.0])
def test_around_gives_the_legal_values_just_below_and_above(x):
    got = TILES.around(x, 1)
    below = [v for v in TILES.values if v <= x]
    above = [v for v in TILES.values if v >= x]
    assert got == sorted({*(below[-1:]), *(above[:1])})  # brute force over the legal values


def test_project_widens_then_falls_back_then_names_the_constraint():
    point = {"tile": 700.0, "cubes": 5.0}
    near = tuning.project(point, (TILES, CUBES), lambda c: None)
    assert near == [{"tile": t, "cubes": c} for t in (640, 704) for c in (4, 8)]
    # only tiles >= 1024 legal: radius 1 and 2 hold none, the log-nearest legal candidate is returned
    big = lambda c: None if c["tile"] >= 1024 else f"tcm: tile={c['tile']} too big"
    every = lambda: [{"tile": t, "cubes": c} for t in TILES.values for c in CUBES.values]
    assert tuning.project(point, (TILES, CUBES), big, everything=every) == [{"tile": 1024, "cubes": 4}]
    with pytest.raises(ValueError, match=r"no legal config: every candidate is excluded, by sips: too many"):
        tuning.project(point, (TILES, CUBES), lambda c: "sips: too many", everything=every)


def test_axis_rejects_bad_values():
    with pytest.raises(ValueError, match="must be positive, distinct, ascending"):
        tuning.Axis("tile", (64, 32))
    with pytest.raises(ValueError, match="must not be empty"):
        tuning.Axis("tile", ())


def test_descend_reaches_the_minimum_of_a_bowl_and_clips():
    loss = lambda p: jnp.sum((p - jnp.asarray([3.0, -2.0])) ** 2)
    x, vals = tuning.descend(loss, jnp.zeros(2), steps=300, lr=0.1)
    assert jnp.allclose(x, jnp.asarray([3.0, -2.0]), atol=1e-2) and vals[-1] < vals[0]
    x, _ = tuning.descend(loss, jnp.zeros(2), steps=300, lr=0.1, clip=lambda p: jnp.clip(p, -1.0, 1.0))
    assert jnp.allclose(x, jnp.asarray([1.0, -1.0]), atol=1e-6)


def test_forward_gradient_equals_reverse_mode_on_a_pytree():
    """The descent's forward-mode gradient against jax's reverse mode (an independent
    implementation of the same derivative), on a pytree of a vector and a scalar with smooth
    maxima and a softmax, as the cost models' losses have."""

    def loss(p):
        x, w = p["x"], jax.nn.softmax(p["w"])
        return jnp.log(jnp.sum(w * jnp.logaddexp(x**2, 3.0 - x))) + jnp.sin(p["s"]) * x[0]

    params = {"x": jnp.asarray([0.3, -1.2, 2.0]), "w": jnp.asarray([0.1, 0.5, -0.7]), "s": jnp.asarray(0.4)}
    val, g = tuning.value_and_grad_forward(loss)(params)
    val_r, g_r = jax.value_and_grad(loss)(params)
    assert jnp.allclose(val, val_r)
    assert jax.tree.structure(g) == jax.tree.structure(g_r)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_r), strict=True):
        assert a.shape == b.shape and jnp.allclose(a, b, rtol=1e-5, atol=1e-6), (a, b)
