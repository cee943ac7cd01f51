"""Weights: HF names and shapes match the real modules, safetensors / torch round trips are bitwise,
bad state dicts are rejected with the key named, init scales are as documented."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _expert_util import torch_action_in_proj

from jaxref.config import ActionInConfig, ExpertConfig
from jaxref.testing.hf_oracle import hf_text_model
from jaxref.weights import (
    from_hf_state_dict,
    from_torch_state_dict,
    hf_names,
    init_cache,
    init_params,
    init_params_without_layers,
    load_safetensors,
    save_safetensors,
    to_hf_state_dict,
    to_torch_state_dict,
)

CFG = ExpertConfig.tiny()


@pytest.fixture(scope="module")
def params():
    return init_params(jax.random.key(0), CFG)


def test_names_and_shapes_match_hf_text_model_and_action_in_module(params):
    sd = to_hf_state_dict(params, CFG)
    hf_sd = hf_text_model(params, CFG).state_dict()  # loads strictly up to embed_tokens
    for k, v in hf_sd.items():
        if k != "embed_tokens.weight":
            assert k in sd and sd[k].shape == tuple(v.shape), k
            np.testing.assert_array_equal(sd[k], v.numpy())
    ain = torch_action_in_proj(
        action_dim=2, out_dim=CFG.hidden, hidden=CFG.action_in.hidden, num_layers=CFG.action_in.num_layers
    )
    ain_sd = {
        k[len("action_in_proj.") :]: torch.from_numpy(v)
        for k, v in sd.items()
        if k.startswith("action_in_proj.")
    }
    ain.load_state_dict(ain_sd, strict=True)  # every name and shape of the reference module, nothing else
    assert sd["action_out_proj.weight"].shape == (2, CFG.hidden) and sd["action_out_proj.bias"].shape == (2,)
    assert set(hf_names(CFG)) == {k for k in sd if not k.endswith("freqs")}


@pytest.mark.parametrize("n_layers", [1, 3], ids=lambda n: f"trunk{n}")
def test_safetensors_round_trip_is_bitwise(tmp_path, n_layers):
    cfg = ExpertConfig.tiny(action_in=ActionInConfig(hidden=24, num_layers=n_layers))
    p = init_params(jax.random.key(n_layers), cfg)
    path = tmp_path / "expert.safetensors"
    save_safetensors(path, p, cfg, expert_prefix="expert.")
    q = load_safetensors(path, cfg, expert_prefix="expert.")
    chex.assert_trees_all_equal(p, q)
    chex.assert_trees_all_equal_shapes_and_dtypes(p, q)


def test_torch_state_dict_round_trip_and_bf16_widening(params):
    sd = to_torch_state_dict(params, CFG)
    assert all(isinstance(v, torch.Tensor) and v.dtype == torch.float32 for v in sd.values())
    chex.assert_trees_all_equal(from_torch_state_dict(sd, CFG), params)
    # A bf16 checkpoint loads as its exact float32 widening.
    sd16 = {k: v.to(torch.bfloat16) for k, v in sd.items()}
    got = from_torch_state_dict(sd16, CFG)
    want = jax.tree.map(lambda a: jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32), params)
    chex.assert_trees_all_equal(got, want)


def test_bad_state_dicts_are_rejected_naming_the_key(params):
    sd = to_hf_state_dict(params, CFG)
    missing = {k: v for k, v in sd.items() if k != "layers.1.mlp.up_proj.weight"}
    with pytest.raises(ValueError, match="up_proj"):
        from_hf_state_dict(missing, CFG)
    wrong = dict(sd, **{"layers.0.self_attn.q_proj.weight": np.zeros((3, 3), np.float32)})
    with pytest.raises(ValueError, match=r"layers.0.self_attn.q_proj.weight.*\(3, 3\)"):
        from_hf_state_dict(wrong, CFG)
    extra = dict(sd, **{"lm_head.weight": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="lm_head.weight"):
        from_hf_state_dict(extra, CFG)
    from_hf_state_dict(extra, CFG, strict=False)  # tolerated when asked
    bad_freqs = dict(sd, **{"action_in_proj.sinus.0.freqs": np.ones((1, 10), np.float32)})
    with pytest.raises(ValueError, match="sinus.0.freqs"):
        from_hf_state_dict(bad_freqs, CFG)
    rounded = dict(
        sd,
        **{
            "action_in_proj.sinus.0.freqs": sd["action_in_proj.sinus.0.freqs"]
            .astype(jnp.bfloat16)
            .astype(np.float32)
        },
    )
    from_hf_state_dict(rounded, CFG)  # a bf16 checkpoint's rounded buffer is fine
    with pytest.raises(ValueError, match="embed"):  # a full HF model is ignored only for its embeddings
        from_hf_state_dict(dict(sd, **{"embed_tokens.bias": np.zeros(3, np.float32)}), CFG)


def test_init_scales_and_storage_dtype(params):
    cfg, p = CFG, params
    assert p.layers.wq.shape == (2, 4, 16, 64) and p.layers.wo.shape == (2, 64, 4, 16)  # HF [out, in]
    assert float(jnp.std(p.layers.w_gate)) == pytest.approx(0.02, rel=0.03)
    assert float(jnp.mean(p.layers.input_norm)) == pytest.approx(1.0, abs=0.03)
    assert 0.05 < float(jnp.std(p.layers.q_norm)) < 0.15
    # Layers differ (one key per layer) and the same key reproduces them.
    assert not np.allclose(p.layers.wq[0], p.layers.wq[1])
    chex.assert_trees_all_equal(p, init_params(jax.random.key(0), cfg))
    p16 = init_params(jax.random.key(0), cfg, dtype=jnp.bfloat16)
    assert p16.layers.wq.dtype == jnp.bfloat16 and p16.final_norm.dtype == jnp.float32
    np.testing.assert_array_equal(
        p16.layers.wq.astype(jnp.float32), p.layers.wq.astype(jnp.bfloat16).astype(jnp.float32)
    )
    c = init_cache(jax.random.key(2), cfg, 10, max_seq_len=40, fill=7.0, rope_delta=3)
    assert c.k.shape == (2, 2, 40, 16) and int(c.seq_len) == 10 and int(c.rope_delta) == 3  # [L, K, Smax, H]
    assert np.all(np.asarray(c.k[:, :, 10:]) == 7.0) and float(jnp.std(c.k[:, :, :10])) == pytest.approx(
        1.0, rel=0.1
    )
    with pytest.raises(ValueError, match="seq_len=50"):
        init_cache(jax.random.key(2), cfg, 50, max_seq_len=40)
    with pytest.raises(ValueError, match="LayerParams.wq"):
        to_hf_state_dict(
            dataclasses.replace(p, layers=dataclasses.replace(p.layers, wq=p.layers.wq[:, :, :8])), cfg
        )


@pytest.mark.parametrize("cfg", [CFG, ExpertConfig.tiny(num_layers=3, hidden=96, ffn=160)], ids=["tiny", "tiny-3x96"])
def test_init_params_without_layers_is_init_params_less_its_layers_bit_for_bit(cfg):
    key = jax.random.key(7)
    full, rest = init_params(key, cfg), init_params_without_layers(key, cfg)
    assert rest.layers is None
    chex.assert_trees_all_equal(dataclasses.replace(full, layers=None), rest)
