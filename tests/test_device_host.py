"""Host side of the device graph and the parameter table: device weight layouts (from golden params
and straight from HF keys), rope / mask tables, the layer-source API of jaxref.expert, and single
emulated ops against independent references."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from device.emulation import Emulation
from device.host import host_tensor, layer_from_hf, layer_from_params, mask_host, read_host, rope_host
from jaxref.attention import attention_reference
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, stacked_layers, velocity
from jaxref.layers import LayerParams
from jaxref.numerics import quantize_bfp
from jaxref.param_table import LAYER_PARAMS, device_shapes
from jaxref.weights import init_cache, init_params, to_hf_state_dict

CFG = ExpertConfig.tiny(head_dim=32)


@pytest.fixture(scope="module")
def params():
    return init_params(jax.random.PRNGKey(0), CFG)


def test_table_covers_layer_params_in_order():
    assert [s.field for s in LAYER_PARAMS] == [f.name for f in dataclasses.fields(LayerParams)]


def test_device_layout_from_params_equals_hf_keys_and_fuses_qkv_in_hf_order(params):
    sd = to_hf_state_dict(params, CFG)
    for i in range(CFG.num_layers):
        a = layer_from_params(jax.tree.map(lambda x, i=i: x[i], params.layers), CFG)
        b = layer_from_hf(sd, i, CFG)
        assert a.keys() == b.keys() == device_shapes(CFG).keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        pre = f"layers.{i}."
        qkv = np.concatenate([sd[pre + f"self_attn.{p}_proj.weight"] for p in "qkv"], axis=0).T
        np.testing.assert_array_equal(a["wqkv"], qkv)
        np.testing.assert_array_equal(a["w2"], sd[pre + "mlp.down_proj.weight"].T)
        np.testing.assert_array_equal(a["q_norm"], sd[pre + "self_attn.q_norm.weight"].reshape(1, 1, 1, -1))
    with pytest.raises(ValueError, match="lacks"):
        layer_from_hf({}, 0, CFG)


def test_rope_and_mask_tables():
    cos, sin = rope_host(100, 3, CFG)
    pos = np.arange(CFG.num_tokens) + 3 + 100
    inv = 1.0 / CFG.rope_theta ** (np.arange(0, CFG.head_dim, 2) / CFG.head_dim)
    ang = np.concatenate([pos[:, None] * inv] * 2, axis=1)
    np.testing.assert_allclose(cos[0, 0], np.cos(ang), atol=2e-5)
    np.testing.assert_allclose(sin[0, 0], np.sin(ang), atol=2e-5)
    m = mask_host(100, CFG, rows=128)[0, 0]
    smax, T = CFG.max_seq_len, CFG.num_tokens
    assert m.shape == (128, smax) and (m[:, :100] == 0).all() and (m[:, smax - T:] == 0).all()
    assert (m[:, 100:smax - T] == -1e9).all()
    with pytest.raises(ValueError, match="seq_len"):
        mask_host(smax - T + 1, CFG, rows=64)


def test_host_tensors_round_like_quantize_bfp():
    ns = Emulation()
    a = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    t = host_tensor(ns, a, "bfp8")
    assert t.layout == ns.TILE_LAYOUT
    np.testing.assert_array_equal(read_host(ns, ns.to_device(t, ns.open_device(0))), quantize_bfp(a, 7))


def test_velocity_from_a_layer_source_equals_stacked(params):
    cache = init_cache(jax.random.PRNGKey(1), CFG, 100, max_seq_len=CFG.max_seq_len)
    x = jax.random.normal(jax.random.PRNGKey(2), (CFG.num_tokens, CFG.action_dim))
    want = velocity(params, x, 0.4, cache, cfg=CFG)
    small = dataclasses.replace(params, layers=None)
    got = velocity(small, x, 0.4, CacheContext.create(100), cfg=CFG, layers=stacked_layers(params.layers, cache))
    np.testing.assert_array_equal(got, want)
    half = lambda i: jax.tree.map(lambda a: a * 0.5, stacked_layers(params.layers, cache)(i))
    assert not np.allclose(velocity(small, x, 0.4, CacheContext.create(100), cfg=CFG, layers=half), want)


def test_emulated_decode_sdpa_matches_the_dense_reference():
    """The 8-user view: user u (= kv head u) with its G*T query rows vs jaxref's dense attention."""
    ns = Emulation(rounding=False)
    dev = ns.open_device(0)
    rng = np.random.default_rng(0)
    K, M, S, H = 2, 64, 256, 32
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in ((1, K, M, H), (K, 1, S, H), (K, 1, S, H)))
    mask = np.where(np.arange(S) < 200, 0.0, -1e9).astype(np.float32)[None, None, None].repeat(M, 2)
    up = lambda a: ns.to_device(ns.Tensor(a, ns.float32), dev)
    out = ns.transformer.scaled_dot_product_attention_decode(up(q), up(k), up(v), is_causal=False, attn_mask=up(mask))
    for u in range(K):  # reference: T = M queries of one head over the 200 visible keys
        ref, _ = attention_reference(jnp.asarray(q[0, u])[:, None], jnp.asarray(k[u, 0, :200])[:, None],
                                     jnp.asarray(v[u, 0, :200])[:, None])
        np.testing.assert_allclose(out.to_numpy()[0, u], np.asarray(ref)[:, 0], atol=2e-6)
    with pytest.raises(ValueError, match="attn_mask"):
        ns.transformer.scaled_dot_product_attention_decode(up(q), up(k), up(v), is_causal=False)


def test_emulated_fill_cache_and_qkv_heads():
    ns = Emulation(rounding=False)
    dev = ns.open_device(0)
    up = lambda a: ns.to_device(ns.Tensor(np.asarray(a, np.float32), ns.bfloat16), dev)
    cache = up(np.zeros((1, 2, 128, 32)))
    ns.fill_cache(cache, up(np.ones((1, 2, 64, 32))), 0, update_idx=64)
    assert cache.to_numpy()[0, :, 64:].min() == 1 and cache.to_numpy()[0, :, :64].max() == 0
    with pytest.raises(ValueError, match="multiple of 32"):
        ns.fill_cache(cache, up(np.ones((1, 2, 64, 32))), 0, update_idx=48)
    x = np.arange(64 * 8 * 32, dtype=np.float32).reshape(1, 1, 64, 8 * 32)  # 4 q + 2 k + 2 v heads of 32
    q, k, v = ns.experimental.nlp_create_qkv_heads(up(x), num_heads=4, num_kv_heads=2, transpose_k_heads=False)
    heads = x[0, 0].reshape(64, 8, 32).transpose(1, 0, 2)
    np.testing.assert_array_equal(q.to_numpy()[0], heads[:4])
    np.testing.assert_array_equal(k.to_numpy()[0], heads[4:6])
    np.testing.assert_array_equal(v.to_numpy()[0], heads[6:])
