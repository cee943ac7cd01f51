"""The parity script's per-layer generated model (``device.parity_model``) against the eager path.

Oracles: the ordinary upload path (``host_tensor`` quantising a host array, as for a checkpoint)
and the parameter table's layout conversion (``layer_from_params``); the generated buffers must
hold exactly those values, so generating per layer changes memory, never numbers.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from device.emulation import Emulation
from device.host import host_tensor, layer_formats, layer_from_params, params_from_device
from device.parity_model import GeneratedModel
from jaxref.action import action_in_proj, action_out_proj
from jaxref.config import ExpertConfig
from jaxref.expert import expert_stack, velocity
from jaxref.numerics import round_bf16
from jaxref.weights import init_cache_layer, init_layer_params, init_params

CFG = ExpertConfig.tiny(head_dim=32, num_layers=3, hidden=96, ffn=160)  # odd widths: 3 / 5 tiles


@pytest.fixture(scope="module")
def model():
    return GeneratedModel.build(jax.random.PRNGKey(3), CFG, 70, fill=7.0)


@pytest.mark.parametrize("weights", ["bfp8", "bf16"])
def test_generated_weights_equal_the_uploaded_quantised_layer(model, weights):
    emu = Emulation()
    dev = emu.open_device(0)
    gen = model.emulation_layers(emu, dev, weights=weights)
    fmts = layer_formats(weights)
    for i in range(CFG.num_layers):
        host = model.host_layer(i)
        for name, t in gen[i].items():
            want = host_tensor(emu, host[name], fmts[name]).value
            np.testing.assert_array_equal(np.asarray(t.value), np.asarray(want), err_msg=f"layer {i} {name}")
    # layers differ from each other
    assert not np.array_equal(np.asarray(gen[0]["w2"].value), np.asarray(gen[1]["w2"].value))


def test_golden_layer_is_the_device_layer_in_golden_layout(model):
    for i in range(CFG.num_layers):
        params, k, v = model.golden_layer(i)
        back = layer_from_params(params, CFG)
        for name, a in model.host_layer(i).items():
            np.testing.assert_array_equal(back[name], a, err_msg=f"layer {i} {name}")
        gk, _gv = model.cache_layer(i)
        np.testing.assert_array_equal(k, np.asarray(gk))
        assert np.all(k[:, 70:] == 7.0) and np.all(v[:, 70:] == 7.0) and not np.any(k[:, :70] == 7.0)
    p0 = params_from_device(model.host_layer(0), CFG)
    assert p0.wq.shape == (CFG.num_heads, 32, 96) and p0.wo.shape == (96, CFG.num_heads, 32)


def test_valid_only_source_is_the_exact_golden_without_the_fill_rows(model):
    """The fp32 golden's source (``valid_only``): each layer's cache is rows [0, S) of the full one,
    bit for bit, and the velocity through it is the velocity over the whole [K, Smax, H] layer (whose
    fill rows the exact attention excludes) up to the order of the softmax sums."""
    full, valid = model.layer_source(), model.layer_source(valid_only=True)
    for i in range(CFG.num_layers):
        (pf, kf, vf), (pv, kv, vv) = full(jax.numpy.int32(i)), valid(jax.numpy.int32(i))
        assert kv.shape == (CFG.num_kv_heads, 70, 32)
        np.testing.assert_array_equal(np.asarray(kv), np.asarray(kf)[:, :70])
        np.testing.assert_array_equal(np.asarray(vv), np.asarray(vf)[:, :70])
        for a, b in zip(jax.tree.leaves(pf), jax.tree.leaves(pv), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    x0 = jax.random.normal(jax.random.PRNGKey(9), (CFG.num_tokens, CFG.action_dim))
    ctx = model.context()
    want = np.asarray(velocity(model.params, x0, 0.3, ctx, cfg=CFG, layers=full))
    got = np.asarray(velocity(model.params, x0, 0.3, ctx, cfg=CFG, layers=valid))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_generated_cache_keeps_fill_cache_rows(model):
    emu = Emulation()
    dev = emu.open_device(0)
    (k, _v), = model.emulation_caches(emu, dev, fmt="bf16")[:1]
    rows = emu.to_device(emu.Tensor(np.ones((1, CFG.num_kv_heads, 32, 32), np.float32), emu.bfloat16), dev)
    emu.fill_cache(k, rows, 0, update_idx=CFG.max_seq_len - 32)
    got = np.asarray(k.value)
    assert np.all(got[0, :, -32:] == 1.0) and np.array_equal(got[0, :, :-32], np.asarray(model.cache_layer(0)[0])[:, :-32])
    view = emu.reshape(k, (CFG.num_kv_heads, 1, CFG.max_seq_len, 32))
    assert view.buffer_address() == k.buffer_address() and np.all(np.asarray(view.value)[:, 0, -32:] == 1.0)


def test_velocity_is_the_hidden_stack_through_action_out_proj(model):
    """device.parity takes the fp32 golden's velocity at (x0, 0) from its hidden-state stack on
    ``action_in_proj(x0, 0)``: the same bits as ``velocity`` itself (one stack run instead of two)."""
    params, ctx = model.params, model.context()
    x0 = jax.random.normal(jax.random.PRNGKey(8), (CFG.num_tokens, CFG.action_dim))
    emb = action_in_proj(params.action_in, x0, 0.0, cfg=CFG.action_in)
    out, _ = expert_stack(model.layer_source(), params.final_norm, emb, ctx, cfg=CFG, return_hidden=True)
    np.testing.assert_array_equal(np.asarray(action_out_proj(params.action_out, out)),
                                  np.asarray(velocity(params, x0, 0.0, ctx, cfg=CFG, layers=model.layer_source())))


def test_build_draws_the_op_by_op_draws_bit_for_bit(model):
    """The one compiled draw (``parity_model._draw``) against the draws made op by op, each eager, as
    the build made them before: one layer, the cache rows and the non-layer parameters of
    ``init_params`` (a one-layer model, its layer dropped), every value rounded to bf16."""
    k_l, k_c, k_p = jax.random.split(jax.random.PRNGKey(3), 3)
    one = dataclasses.replace(CFG, num_layers=1)
    layer = jax.tree.map(round_bf16, init_layer_params(k_l, one))
    for name, a in layer_from_params(layer, one).items():
        np.testing.assert_array_equal(np.asarray(model.base[name]), a, err_msg=name)
    k, v = init_cache_layer(k_c, CFG, 70, max_seq_len=70)
    for got, want in zip(model.cache_rows, (k, v), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(round_bf16(want)))
    rest = jax.tree.map(round_bf16, dataclasses.replace(init_params(k_p, one), layers=None))
    want_leaves, got_leaves = jax.tree.leaves(rest), jax.tree.leaves(model.params)
    assert len(want_leaves) == len(got_leaves) and model.params.layers is None
    for got, want in zip(got_leaves, want_leaves, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
