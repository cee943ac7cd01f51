"""Precision policies: the device preset matches the port's formats (seeds/EXPERT_NOTES.md) and each
hook rounds with the number format it names."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxref.numerics import quantize_bfp, round_bf16
from jaxref.precision import FORMATS, Precision, cast


def test_device_preset_formats():
    p = Precision.device()
    # Notes: bfp8 weights (default), bf16 gammas / residual stream / cache, bfp4 decode-mode mask.
    assert (p.weights, p.norm_weights, p.activations, p.cache, p.mask) == ("bfp8", "bf16", "bf16", "bf16", "bfp4")
    assert not p.is_exact and Precision.fp32().is_exact
    q = Precision.device(weights="bf16", cache="bfp8")
    assert (q.weights, q.cache, q.mask) == ("bf16", "bfp8", "bfp4")
    assert q != p and hash(q) != hash(p)  # usable as a static jit argument
    assert Precision.preset("device") == p


def test_hooks_round_with_their_format():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((4, 48)).astype(np.float32))
    p = Precision.device(cache="bfp8")
    np.testing.assert_array_equal(p.weight(x), quantize_bfp(x, 7))
    np.testing.assert_array_equal(p.kv(x), quantize_bfp(x, 7))
    np.testing.assert_array_equal(p.mask_(x), quantize_bfp(x, 3))
    np.testing.assert_array_equal(p.act(x), round_bf16(x))
    np.testing.assert_array_equal(p.norm_weight(x), round_bf16(x))
    np.testing.assert_array_equal(Precision.fp32().weight(x), x)  # the golden never rounds
    # Hooks are traceable: a jitted policy gives the same bits.
    np.testing.assert_array_equal(jax.jit(p.weight)(x), p.weight(x))


def test_device_mask_values():
    # The additive mask 0 / -1e9 in bfp4: 1e9 = 1.86 * 2^29, so a row holding it has shared exponent
    # 29 and step 2^(29-2); 1e9 / 2^27 = 7.45 -> 7 -> -7 * 2^27 = -939524096. Zeros stay exactly 0.
    mask = np.zeros((2, 64), np.float32)
    mask[:, 20:40] = -1e9
    got = np.asarray(Precision.device().mask_(mask))
    np.testing.assert_array_equal(got[mask == 0], 0.0)
    np.testing.assert_array_equal(got[mask != 0], -939524096.0)


@pytest.mark.parametrize("field", ["weights", "norm_weights", "activations", "cache", "mask"])
def test_rejects_unknown_format(field):
    with pytest.raises(ValueError, match=field):
        Precision(**{field: "fp8"})
    with pytest.raises(ValueError, match="fmt"):
        cast(jnp.ones(3), "fp8")
    assert "fp8" not in FORMATS


def test_device_weight_rounding_groups_like_the_device_layout():
    """Weights held [out, in] (HF layout) round as the device's [in, out] tiles do: blocks of 16 along
    the output axis. Oracle: quantize the device-layout tensor (fused wqkv [D, (N+2K) H], w1 [D, F])
    along its last axis and transpose back."""
    from jaxref.config import ExpertConfig
    from jaxref.layers import linear
    from jaxref.weights import init_layer_params

    cfg = ExpertConfig.tiny()
    lp = init_layer_params(jax.random.key(3), cfg)
    D = cfg.hidden
    # Exponents that vary along the output axis, so a grouping along the input axis would differ.
    scale = 2.0 ** jnp.arange(-6, 6, dtype=jnp.float32)
    wq = (lp.wq.reshape(-1, D) * jnp.tile(scale, 64)[: cfg.num_heads * cfg.head_dim, None])
    wqkv_dev = jnp.concatenate([wq, lp.wk.reshape(-1, D), lp.wv.reshape(-1, D)]).T  # [D, (N+2K) H]
    want = quantize_bfp(wqkv_dev, 7).T[: wq.shape[0]]
    p = Precision.device()
    np.testing.assert_array_equal(p.weight(wq, axis=0), want)
    assert not np.array_equal(p.weight(wq), want)  # the other grouping is really different
    w_gate = lp.w_gate * jnp.tile(scale, 64)[: cfg.ffn, None]
    np.testing.assert_array_equal(p.weight(w_gate, axis=0), quantize_bfp(w_gate.T, 7).T)
    # linear() rounds its weight that way: x @ round(W).T.
    x = jax.random.normal(jax.random.key(4), (5, D))
    np.testing.assert_allclose(
        linear(x, w_gate, precision=p), x @ quantize_bfp(w_gate.T, 7), rtol=1e-5, atol=1e-5
    )
