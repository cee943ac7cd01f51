"""Parity of the golden with HF transformers (``Qwen3VLTextDecoderLayer`` / ``Qwen3VLTextModel``):
random weights copied through ``to_hf_state_dict`` (which checks the export names), fp32, eager
attention with a 4-D additive mask, the VLM cache fed through HF's ``DynamicCache``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _expert_util import max_abs, tiny_setup

from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope, expert_stack
from jaxref.layers import decoder_layer
from jaxref.numerics import compare
from jaxref.options import ExpertOptions
from jaxref.precision import Precision
from jaxref.testing.hf_oracle import (
    hf_cache,
    hf_decoder_layer,
    hf_expert_outputs,
    hf_text_config,
    hf_text_model,
)
from jaxref.weights import init_cache, init_params

PCC_MIN, MAX_ABS = 0.999999, 1e-4


FP32 = Precision.fp32()


def _golden(params, x, cache, cfg, attention, precision=FP32):
    fn = jax.jit(
        lambda p, x, c: expert_stack(
            p.layers,
            p.final_norm,
            x,
            c,
            cfg=cfg,
            options=ExpertOptions(attention=attention, precision=precision),
            return_hidden=True,
        )
    )
    final, hidden = fn(params, x, cache)
    return np.asarray(hidden), np.asarray(final)


def _assert_parity(ours, ref, what):
    c = compare(ref, ours)  # tt-metal comp_pcc semantics, HF as the golden; NaN never passes
    assert c.finite and c.pcc >= PCC_MIN and c.max_abs <= MAX_ABS, f"{what}: {c}"


@pytest.mark.parametrize("attention", ["exact", "tail_slot"])
def test_tiny_model_per_layer_parity(attention):
    cfg, params, cache, x = tiny_setup(seq_len=100, max_seq_len=256, rope_delta=5)
    hf_layers, hf_final = hf_expert_outputs(hf_text_model(params, cfg), x, cache, num_tokens=cfg.num_tokens)
    hidden, final = _golden(params, x, cache, cfg, attention)
    for i in range(cfg.num_layers):
        _assert_parity(hidden[i], hf_layers[i], f"layer {i}")
    _assert_parity(final, hf_final, "final norm")
    # The comparison is sensitive: a wrong rope_delta (positions off by one) breaks it.
    shifted = type(cache)(k=cache.k, v=cache.v, seq_len=cache.seq_len, rope_delta=cache.rope_delta + 1)
    _, final_shifted = _golden(params, x, shifted, cfg, attention)
    assert max_abs(final_shifted, hf_final) > 1e-3


def test_tiny_decoder_layer_called_directly():
    """HF's layer module with externally computed position embeddings and a pre-filled cache."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import (
        Qwen3VLTextDecoderLayer,
        Qwen3VLTextRotaryEmbedding,
    )

    cfg, params, cache, x = tiny_setup(seq_len=77, max_seq_len=200, rope_delta=-4)
    hf_cfg = hf_text_config(cfg, num_layers=1)
    layer = hf_decoder_layer(params, cfg, layer=1)
    assert isinstance(layer, Qwen3VLTextDecoderLayer)
    T, S = cfg.num_tokens, 77
    pos = (torch.arange(T) + S - 4).view(1, 1, T).expand(3, 1, T)
    xt = torch.from_numpy(np.array(x))[None]
    pe = Qwen3VLTextRotaryEmbedding(hf_cfg)(xt, pos)
    one_layer_cache = type(cache)(
        k=cache.k[1:2], v=cache.v[1:2], seq_len=cache.seq_len, rope_delta=cache.rope_delta
    )
    with torch.no_grad():
        ref = layer(
            xt,
            position_embeddings=pe,
            attention_mask=torch.zeros(1, 1, T, S + T),
            cache=hf_cache(one_layer_cache),
        )[0].numpy()
    layer1 = jax.tree.map(lambda a: a[1], params.layers)
    ours = decoder_layer(layer1, x, (cache.k[1], cache.v[1]), 77, expert_rope(77, -4, cfg=cfg), cfg=cfg)
    _assert_parity(ours, ref, "decoder layer")


@pytest.mark.slow
def test_alpamayo_tt_width_two_layers_realistic_cache():
    """Two layers at alpamayo_tt widths (D 1536, 16/8 heads, H 128, F 6144) over S = 4600 cache rows."""
    cfg = ExpertConfig.alpamayo_tt(num_layers=2)
    kp, kc, kx = jax.random.split(jax.random.key(3), 3)
    params = init_params(kp, cfg)
    cache = init_cache(kc, cfg, 4600, max_seq_len=4600 + 64 + 32, rope_delta=11, fill=7.0)
    x = jax.random.normal(kx, (cfg.num_tokens, cfg.hidden), jnp.float32)
    hf_layers, hf_final = hf_expert_outputs(hf_text_model(params, cfg), x, cache, num_tokens=cfg.num_tokens)
    for attention in ("exact", "tail_slot"):
        hidden, final = _golden(params, x, cache, cfg, attention)
        for i in range(cfg.num_layers):
            _assert_parity(hidden[i], hf_layers[i], f"{attention} layer {i}")
        _assert_parity(final, hf_final, f"{attention} final norm")


def test_hf_bf16_policy_tracks_hf_in_bf16():
    """The hf-bf16 policy reproduces HF's bf16 casts: most outputs are bitwise equal to HF run in
    bf16 and the RMS error is several times below the fp32 golden's (the rest is fp32 accumulation
    order and the attention op, whose scores / probabilities the policy keeps in fp32)."""
    cfg, params, cache, x = tiny_setup(seq_len=100, max_seq_len=256, rope_delta=5)
    bf = lambda t: jax.tree.map(lambda a: a.astype(jnp.bfloat16).astype(jnp.float32), t)
    params, x = bf(params), bf(x)
    cache = type(cache)(k=bf(cache.k), v=bf(cache.v), seq_len=cache.seq_len, rope_delta=cache.rope_delta)
    hf_layers, hf_final = hf_expert_outputs(
        hf_text_model(params, cfg, dtype=torch.bfloat16),
        x,
        cache,
        num_tokens=cfg.num_tokens,
        dtype=torch.bfloat16,
    )
    hidden_bf, final_bf = _golden(params, x, cache, cfg, "exact", Precision.hf_bf16())
    hidden_32, final_32 = _golden(params, x, cache, cfg, "exact")
    rms = lambda a, b: float(np.sqrt(np.mean((np.asarray(a) - np.asarray(b)) ** 2)))
    for ours_bf, ours_32, ref in [*zip(hidden_bf, hidden_32, hf_layers), (final_bf, final_32, hf_final)]:
        assert np.mean(ours_bf == ref) > 0.85
        assert np.mean(ours_32 == ref) < 0.05
        assert rms(ours_bf, ref) < 0.5 * rms(ours_32, ref)


def test_jit_equals_eager():
    cfg, params, cache, x = tiny_setup()
    with jax.disable_jit():  # op-by-op, lax.scan as a Python loop
        eager_final, eager_hidden = expert_stack(
            params.layers, params.final_norm, x, cache, cfg=cfg, return_hidden=True
        )
    hidden, final = _golden(params, x, cache, cfg, "exact")
    np.testing.assert_allclose(final, eager_final, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(hidden, eager_hidden, rtol=1e-5, atol=1e-6)
