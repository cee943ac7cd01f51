"""jaxref.checks: the batched equivalence check finds equal functions equal and broken ones broken."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxref.attention import AttentionGeometry, attention_reference, flash_attention
from jaxref.checks import equivalence_check, pcc_traced

GEOM = AttentionGeometry(8, 2, 16)


def test_equivalence_check_passes_equal_functions():
    fn = functools.partial(flash_attention, causal=True, tile=7, q_block=4)
    rep = equivalence_check(fn, functools.partial(attention_reference, causal=True), num_problems=5, num_queries=9,
                            num_keys=30, geometry=GEOM, key=jax.random.PRNGKey(0))
    assert rep.max_abs_error.shape == (5,) and rep.pcc.shape == (5,)
    assert rep.max_rel_error.max() <= 1e-5 and rep.pcc.min() > 0.999999
    assert len(set(np.round(rep.scale, 6))) == 5  # five distinct random problems


def test_equivalence_check_flags_a_wrong_function():
    wrong_scale = functools.partial(flash_attention, scale=0.5, tile=8)
    rep = equivalence_check(wrong_scale, attention_reference, num_problems=3, num_queries=4, num_keys=16,
                            geometry=GEOM, key=jax.random.PRNGKey(1))
    assert rep.max_rel_error.min() > 1e-2 and rep.pcc.max() < 0.999


def test_equivalence_check_rounds_fn_a_inputs_to_dtype():
    """dtype applies to fn_a's inputs only: identity vs identity measures bf16 rounding of q."""
    rep = equivalence_check(lambda q, k, v: q, lambda q, k, v: q, num_problems=2, num_queries=4, num_keys=4,
                            geometry=GEOM, key=jax.random.PRNGKey(3), dtype=jnp.bfloat16)
    assert np.all(rep.max_rel_error > 0) and np.all(rep.max_rel_error < 2.0**-8)


def test_pcc_traced_matches_numpy():
    a = np.random.default_rng(0).normal(size=(7, 5))
    b = a + 0.3 * np.random.default_rng(1).normal(size=(7, 5))
    assert float(pcc_traced(jnp.asarray(a), jnp.asarray(b))) == pytest.approx(np.corrcoef(a.ravel(), b.ravel())[0, 1],
                                                                               abs=1e-5)
    assert float(pcc_traced(jnp.asarray(a), jnp.asarray(a))) == 1.0
    assert float(pcc_traced(jnp.zeros(4), jnp.arange(4.0))) == 0.0


def test_equivalence_check_validates():
    with pytest.raises(ValueError, match="num_problems"):
        equivalence_check(attention_reference, attention_reference, num_problems=0, num_queries=1, num_keys=2,
                          key=jax.random.PRNGKey(0))
