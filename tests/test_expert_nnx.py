"""The flax NNX wrapper holds the params and calls the same pure functions (equal results, grads)."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _expert_util import tiny_setup
from flax import nnx

from jaxref.config import ExpertConfig
from jaxref.expert import sample, velocity
from jaxref.nnx import ActionExpert
from jaxref.options import ExpertOptions
from jaxref.precision import Precision
from jaxref.weights import init_params

TAIL = ExpertOptions(attention="tail_slot")


def test_module_equals_pure_functions():
    cfg, params, cache, _ = tiny_setup()
    model = ActionExpert(cfg, params=params, options=TAIL)
    chex.assert_trees_all_equal(model.expert_params(), params)
    x = jax.random.normal(jax.random.key(3), (2, cfg.num_tokens, cfg.action_dim))
    np.testing.assert_array_equal(
        model(x, 0.25, cache), velocity(params, x, 0.25, cache, cfg=cfg, options=TAIL)
    )
    a, vs = model.sample(cache, jax.random.key(4), num_steps=3)
    a2, vs2 = sample(params, cache, jax.random.key(4), cfg=cfg, options=TAIL, num_steps=3)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(vs, vs2)


def test_state_holds_every_leaf_as_param_and_nnx_transforms_work():
    cfg, params, cache, _ = tiny_setup(
        seq_len=40, max_seq_len=128, cfg=ExpertConfig.tiny(num_layers=1, max_seq_len=128)
    )
    model = ActionExpert(cfg, params=params, options=ExpertOptions(precision=Precision.hf_bf16()))
    state = nnx.state(model, nnx.Param)
    assert len(jax.tree.leaves(state)) == len(jax.tree.leaves(params))
    x = jax.random.normal(jax.random.key(5), (cfg.num_tokens, cfg.action_dim))
    out = nnx.jit(lambda m, x: m(x, 0.5, cache))(model, x)
    np.testing.assert_allclose(
        out, velocity(params, x, 0.5, cache, cfg=cfg, options=ExpertOptions(precision=Precision.hf_bf16())), rtol=1e-6, atol=1e-6
    )
    # Gradients through the module equal gradients of the pure function w.r.t. the params.
    fp32 = ActionExpert(cfg, params=params)
    g_mod = nnx.jit(nnx.grad(lambda m: jnp.sum(m(x, 0.5, cache) ** 2)))(fp32)
    g_pure = jax.jit(jax.grad(lambda p: jnp.sum(velocity(p, x, 0.5, cache, cfg=cfg) ** 2)))(params)
    got = nnx.to_pure_dict(g_mod)["params"]  # nested dicts named by the schema fields
    chex.assert_trees_all_close(got, dataclasses.asdict(g_pure), rtol=1e-5, atol=1e-7)
    assert float(jnp.abs(g_pure.layers.wq).max()) > 0


def test_random_init_from_rngs_and_error_without_params():
    cfg, _, cache, _ = tiny_setup()
    model = ActionExpert(cfg, rngs=nnx.Rngs(params=0))
    chex.assert_trees_all_equal_shapes(model.expert_params(), init_params(jax.random.key(0), cfg))
    assert model(jnp.zeros((cfg.num_tokens, cfg.action_dim)), 0.0, cache).shape == (
        cfg.num_tokens,
        cfg.action_dim,
    )
    with pytest.raises(ValueError, match="needs params"):
        ActionExpert(cfg)
