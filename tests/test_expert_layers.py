"""Layer building blocks against independent oracles: numpy formulas, HF transformers' own RMSNorm /
RoPE modules, the dense ``attention_reference`` over an explicitly concatenated key set (the expert's
cache is head-major [K, S, H]; the oracle keeps its [S, K, H] layout, so the tests transpose)."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _expert_util import max_abs, tiny_setup

from jaxref.attention import attention_reference
from jaxref.batching import WEIGHT_LEFT_MAX_ROWS
from jaxref.cache_attention import attend_exact, attend_tail_slot, attention_over_rows, tail_slot_mask
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope
from jaxref.layers import apply_rope, decoder_layer, linear, mlp, rms_norm, rope_positions, rope_tables
from jaxref.numerics import round_bf16
from jaxref.options import ExpertOptions
from jaxref.precision import Precision


def _rand(key, shape, scale=1.0):
    return scale * jax.random.normal(jax.random.key(key), shape, jnp.float32)


# ---- RMSNorm -------------------------------------------------------------------------------
def test_rms_norm_fp32_matches_float64_formula():
    x, w = _rand(0, (64, 96), 3.0), _rand(1, (96,)) + 1.0
    xn, wn = np.asarray(x, np.float64), np.asarray(w, np.float64)
    want = xn / np.sqrt(np.mean(xn**2, -1, keepdims=True) + 1e-6) * wn
    np.testing.assert_allclose(rms_norm(x, w, eps=1e-6), want, rtol=2e-6, atol=1e-6)


def test_rms_norm_hf_bf16_matches_hf_module_in_bf16():
    """HF casts back to bf16 *before* the gamma multiply; the hf-bf16 policy must reproduce it."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRMSNorm

    x, w = round_bf16(_rand(2, (64, 128), 2.0)), round_bf16(_rand(3, (128,), 0.5) + 1.0)
    mod = Qwen3VLTextRMSNorm(128, eps=1e-6)
    mod.weight.data = torch.from_numpy(np.array(w)).to(torch.bfloat16)
    with torch.no_grad():
        ref = mod(torch.from_numpy(np.array(x)).to(torch.bfloat16)).float().numpy()
    ours = np.asarray(rms_norm(x, w, eps=1e-6, precision=Precision.hf_bf16()))
    # A different fp32 summation order may move a value across a bf16 rounding boundary: allow
    # one bf16 ulp on a few elements, demand equality for the rest.
    ulp = np.abs(ref) * 2.0**-7
    assert np.all(np.abs(ours - ref) <= ulp + 1e-30)
    assert np.mean(ours == ref) > 0.99
    # The single-rounding variant (gamma multiplied before the cast) is measurably different.
    single = np.asarray(round_bf16(rms_norm(x, w, eps=1e-6)))
    assert np.mean(single == ref) < np.mean(ours == ref)


def test_rms_norm_rejects_wrong_weight_shape():
    with pytest.raises(ValueError, match="rms_norm weight"):
        rms_norm(jnp.ones((4, 8)), jnp.ones(7), eps=1e-6)


# ---- RoPE ----------------------------------------------------------------------------------
@pytest.mark.parametrize("head_dim,section", [(128, [24, 20, 20]), (16, [4, 2, 2])], ids=["H128", "H16"])
def test_rope_tables_match_hf_mrope_with_equal_rows(head_dim, section):
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextConfig, Qwen3VLTextRotaryEmbedding

    hf_cfg = Qwen3VLTextConfig(
        hidden_size=2 * head_dim,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=head_dim,
        max_position_embeddings=1 << 20,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": section},
    )
    S, delta, T = 4700, -3, 64
    pos = rope_positions(S, delta, T)
    np.testing.assert_array_equal(pos, np.arange(T) + S + delta)
    hf_pos = torch.from_numpy(np.asarray(pos, np.int64)).view(1, 1, T).expand(3, 1, T)
    cos_ref, sin_ref = Qwen3VLTextRotaryEmbedding(hf_cfg)(torch.zeros(1, dtype=torch.float32), hf_pos)
    cos, sin = rope_tables(pos, head_dim=head_dim, theta=5e6)
    # inv_freq agrees with torch's fp32 pow to <= 1 ulp; at position ~4700 that is a few 1e-6.
    assert max_abs(cos, cos_ref[0]) < 1e-5 and max_abs(sin, sin_ref[0]) < 1e-5


def test_apply_rope_matches_hf_rotate_half():
    from transformers.models.qwen3_vl.modeling_qwen3_vl import apply_rotary_pos_emb

    q, k = _rand(4, (64, 4, 16)), _rand(5, (64, 2, 16))
    cos, sin = rope_tables(rope_positions(300, 2, 64), head_dim=16, theta=5e6)
    tq = torch.from_numpy(np.array(q)).permute(1, 0, 2)[None]  # HF [1, heads, T, H]
    tk = torch.from_numpy(np.array(k)).permute(1, 0, 2)[None]
    rq, rk = apply_rotary_pos_emb(
        tq, tk, torch.from_numpy(np.array(cos))[None], torch.from_numpy(np.array(sin))[None]
    )
    assert max_abs(apply_rope(q, cos, sin), rq[0].permute(1, 0, 2)) < 1e-6
    assert max_abs(apply_rope(k, cos, sin), rk[0].permute(1, 0, 2)) < 1e-6


# ---- attention over the cache --------------------------------------------------------------
def _hm(a):
    """[S, K, H] (the oracle's layout) <-> [K, S, H] (the expert cache's head-major layout)."""
    return jnp.swapaxes(a, 0, 1)


def _attn_inputs(S, smax=256, T=64, N=4, K=2, H=16, garbage=7.0, seed=0):
    """q [T, N, H], own k / v [T, K, H], head-major cache k / v [K, Smax, H] (garbage in rows >= S)."""
    q, ko, vo = _rand(seed, (T, N, H)), _rand(seed + 1, (T, K, H)), _rand(seed + 2, (T, K, H))
    ck, cv = _rand(seed + 3, (K, smax, H)), _rand(seed + 4, (K, smax, H))
    rows = jnp.arange(smax)[None, :, None]
    ck = jnp.where(rows < S, ck, garbage)
    cv = jnp.where(rows < S, cv, garbage)
    return q, ko, vo, ck, cv


@pytest.mark.parametrize("kv_chunk", [None, 64, 100, 256, 1000], ids=lambda c: f"chunk{c}")
def test_attention_over_rows_equals_dense_reference(kv_chunk):
    """The chunked online softmax vs the dense oracle: keep-mask, additive bias, both, neither."""
    q, k, v = _rand(10, (64, 4, 16), 2.0), _rand(11, (300, 2, 16), 2.0), _rand(12, (300, 2, 16))
    keep = jax.random.bernoulli(jax.random.key(13), 0.7, (300,))
    bias = _rand(14, (300,), 3.0)
    for kw in ({}, {"keep": keep}, {"bias": bias}, {"keep": keep, "bias": bias}):
        want_o, want_l = attention_reference(
            q,
            k,
            v,
            mask=kw.get("keep", jnp.ones(300, bool))[None, None, :],
            bias=kw.get("bias", jnp.zeros(300))[None, None, :],
        )
        out, lse = attention_over_rows(q, _hm(k), _hm(v), kv_chunk=kv_chunk, **kw)
        assert max_abs(out, want_o) < 1e-5 and max_abs(lse, want_l) < 1e-5, kw.keys()


def test_attention_over_rows_fully_excluded_and_bad_args():
    q, k, v = _rand(10, (64, 4, 16)), _rand(11, (300, 2, 16)), _rand(12, (300, 2, 16))
    keep = jnp.arange(300) >= 290  # the first 5 chunks of 64 rows see nothing valid
    want_o, want_l = attention_reference(q, k, v, mask=keep[None, None, :])
    kh, vh = _hm(k), _hm(v)
    out, lse = attention_over_rows(q, kh, vh, keep=keep, kv_chunk=64)
    assert max_abs(out, want_o) < 2e-6 and max_abs(lse, want_l) < 2e-5
    out, lse = attention_over_rows(q, kh, vh, keep=jnp.zeros(300, bool), kv_chunk=64)
    np.testing.assert_array_equal(out, 0.0)
    np.testing.assert_array_equal(lse, attention_reference(q, k, v, mask=jnp.zeros((1, 1, 300), bool))[1])
    with pytest.raises(ValueError, match="kv_chunk=0"):
        attention_over_rows(q, kh, vh, kv_chunk=0)
    with pytest.raises(ValueError, match="keep must be"):
        attention_over_rows(q, kh, vh, keep=jnp.ones(10, bool))
    with pytest.raises(ValueError, match=r"v\.shape=\(2, 10, 16\) must equal k\.shape"):
        attention_over_rows(q, kh, vh[:, :10])
    with pytest.raises(ValueError, match=r"k\.shape\[2\]=8 \(head_dim\)"):
        attention_over_rows(q, kh[..., :8], vh[..., :8])


@pytest.mark.parametrize("S", [0, 1, 100, 192, 256], ids=lambda s: f"S{s}")  # 256 = Smax
def test_attend_exact_equals_dense_attention_over_concatenated_keys(S):
    q, ko, vo, ck, cv = _attn_inputs(S)
    assert ck.shape[1] == 256
    want, _ = attention_reference(
        q, jnp.concatenate([_hm(ck)[:S], ko]), jnp.concatenate([_hm(cv)[:S], vo])
    )
    assert max_abs(attend_exact(q, ko, vo, ck, cv, S), want) < 2e-6
    traced = jax.jit(attend_exact)(q, ko, vo, ck, cv, jnp.int32(S))  # traced S: always the masked path
    assert max_abs(traced, want) < 2e-6
    for chunk in (None, 64, 100):  # the cache part in chunks (the default for vmapped trajectories)
        assert max_abs(attend_exact(q, ko, vo, ck, cv, S, kv_chunk=chunk), want) < 2e-6


@pytest.mark.parametrize("kv_chunk", [None, 64])
def test_attend_exact_under_vmap_and_autodiff_matches_dense_oracle(kv_chunk):
    """Trajectories sharing one cache: vmap (the cache attention loops over them, sequential_vmap),
    reverse mode through vmap, forward mode - each against the dense ``attention_reference`` over
    the concatenated keys, differentiated by JAX."""
    S = 100
    _, ko, vo, ck, cv = _attn_inputs(S)
    qb = _rand(20, (3,) + ko.shape[:1] + (4, ko.shape[2]))  # [B, T, N, H]

    def ours(q, ck):
        return attend_exact(q, ko, vo, ck, cv, S, kv_chunk=kv_chunk)

    def oracle(q, ck):
        return attention_reference(q, jnp.concatenate([_hm(ck)[:S], ko]), jnp.concatenate([_hm(cv)[:S], vo]))[0]

    assert max_abs(jax.jit(jax.vmap(ours, (0, None)))(qb, ck), jax.vmap(oracle, (0, None))(qb, ck)) < 2e-6

    def loss(f):
        return lambda qb, ck: jnp.sum(jnp.sin(jax.vmap(f, (0, None))(qb, ck)))

    for g, want in zip(jax.jit(jax.grad(loss(ours), (0, 1)))(qb, ck), jax.grad(loss(oracle), (0, 1))(qb, ck), strict=True):
        assert max_abs(g, want) < 1e-5
    tangents = (_rand(21, qb.shape[1:]), _rand(22, ck.shape))
    _, t_ours = jax.jvp(ours, (qb[0], ck), tangents)
    _, t_want = jax.jvp(oracle, (qb[0], ck), tangents)
    assert max_abs(t_ours, t_want) < 1e-5


@pytest.mark.parametrize("S", [0, 37, 100, 192], ids=lambda s: f"S{s}")
@pytest.mark.parametrize("garbage", [7.0, -3e3], ids=["fill7", "fill-3e3"])
def test_tail_slot_equals_exact(S, garbage):
    q, ko, vo, ck, cv = _attn_inputs(S, garbage=garbage)
    exact = attend_exact(q, ko, vo, ck, cv, S)
    assert max_abs(attend_tail_slot(q, ko, vo, ck, cv, S), exact) < 2e-6


def test_tail_slot_one_compile_serves_every_seq_len():
    traces = []

    @jax.jit
    def f(q, ko, vo, ck, cv, s):
        traces.append(1)
        return attend_tail_slot(q, ko, vo, ck, cv, s)

    for S in (3, 100, 192):
        q, ko, vo, ck, cv = _attn_inputs(S, seed=S)
        assert max_abs(f(q, ko, vo, ck, cv, jnp.int32(S)), attend_exact(q, ko, vo, ck, cv, S)) < 2e-6
    assert len(traces) == 1


def test_tail_slot_mask_values():
    m = np.asarray(tail_slot_mask(5, max_seq_len=16, num_tokens=4))
    np.testing.assert_array_equal(m, [0] * 5 + [-1e9] * 7 + [0] * 4)


def test_seq_len_limits_raise():
    q, ko, vo, ck, cv = _attn_inputs(10)
    with pytest.raises(ValueError, match="seq_len=193"):
        attend_tail_slot(q, ko, vo, ck, cv, 193)  # Smax - T = 192
    with pytest.raises(ValueError, match="seq_len=257"):
        attend_exact(q, ko, vo, ck, cv, 257)
    assert attend_exact(q, ko, vo, ck, cv, 256).shape == q.shape  # exact may use every row
    cfg, params, cache, x = tiny_setup()
    rope = expert_rope(10, 0, cfg=cfg)
    layer0 = jax.tree.map(lambda a: a[0], params.layers)
    with pytest.raises(ValueError, match="max_seq_len - num_tokens"):  # cfg.check_seq_len's message
        decoder_layer(layer0, x, (cache.k[0], cache.v[0]), 193, rope, cfg=cfg,
                      options=ExpertOptions(attention="tail_slot"))


# ---- MLP and the layer ---------------------------------------------------------------------
def test_mlp_matches_numpy_swiglu():
    _cfg, params, _, x = tiny_setup()
    p = jax.tree.map(lambda a: np.asarray(a[0], np.float64), params.layers)
    xn = np.asarray(x, np.float64)
    g = xn @ p.w_gate.T  # HF layout [out, in]
    want = (g / (1 + np.exp(-g)) * (xn @ p.w_up.T)) @ p.w_down.T
    np.testing.assert_allclose(
        mlp(jax.tree.map(lambda a: a[0], params.layers), x), want, rtol=1e-5, atol=1e-6
    )


def test_decoder_layer_rejects_bad_arguments():
    cfg, params, cache, x = tiny_setup()
    layer0 = jax.tree.map(lambda a: a[0], params.layers)
    rope = expert_rope(100, 0, cfg=cfg)
    kv = (cache.k[0], cache.v[0])
    with pytest.raises(ValueError, match="attention='flash'"):
        decoder_layer(layer0, x, kv, 100, rope, cfg=cfg, options=ExpertOptions(attention="flash"))
    with pytest.raises(ValueError, match="x must be"):
        decoder_layer(layer0, x[:10], kv, 100, rope, cfg=cfg)
    with pytest.raises(ValueError, match="cache_k must be"):
        decoder_layer(layer0, x, (cache.k[0][:1], cache.v[0][:1]), 100, rope, cfg=cfg)
    with pytest.raises(ValueError, match="cache_k must be"):  # the old [Smax, K, H] layout
        decoder_layer(layer0, x, (_hm(cache.k[0]), _hm(cache.v[0])), 100, rope, cfg=cfg)


@dataclasses.dataclass(frozen=True)
class _CountingPrecision(Precision):
    """Precision that records which hook saw which shape (hooks stay the identity)."""

    log: list = dataclasses.field(default_factory=list, compare=False, hash=False)

    def weight(self, x, *, axis=-1):
        self.log.append(("weight", x.shape, axis % x.ndim))
        return super().weight(x, axis=axis)

    def norm_weight(self, x):
        self.log.append(("norm_weight", x.shape))
        return super().norm_weight(x)

    def act(self, x):
        self.log.append(("act", x.shape))
        return super().act(x)

    def kv(self, x):
        self.log.append(("kv", x.shape))
        return super().kv(x)

    def mask_(self, x):
        self.log.append(("mask", x.shape))
        return super().mask_(x)


@pytest.mark.parametrize("attention,kv_calls,mask_calls", [("exact", 4, 0), ("tail_slot", 2, 1)])
def test_decoder_layer_calls_every_precision_hook(attention, kv_calls, mask_calls):
    """The hook contract issue 4 builds on: 7 matmul weights, 4 gammas, the K/V rows read, the mask,
    and every op output of the device graph."""
    cfg, params, cache, x = tiny_setup()
    layer0 = jax.tree.map(lambda a: a[0], params.layers)
    p = _CountingPrecision()
    rope = expert_rope(100, 0, cfg=cfg)
    decoder_layer(layer0, x, (cache.k[0], cache.v[0]), 100, rope, cfg=cfg, options=ExpertOptions(attention=attention, precision=p))
    kinds = [e[0] for e in p.log]
    assert kinds.count("weight") == 7
    # [out, in] 2-D views (tiny: D 64, N 4, K 2, H 16, F 128), rounded along the output axis 0.
    assert sorted(e[1:] for e in p.log if e[0] == "weight") == sorted(
        [((64, 64), 0), ((32, 64), 0), ((32, 64), 0), ((64, 64), 0), ((128, 64), 0), ((128, 64), 0), ((64, 128), 0)]
    )
    assert kinds.count("norm_weight") == 4
    assert kinds.count("kv") == kv_calls and kinds.count("mask") == mask_calls
    # rms_norm x2 (2 each), q/k/v out 3, q/k norm 2x2, rope 2x3, attn 1, wo 1, add 1, gate/up 2,
    # silu 1, mul 1, down 1, add 1
    assert kinds.count("act") == 4 + 3 + 4 + 6 + 1 + 1 + 1 + 2 + 1 + 1 + 1 + 1


def test_hf_bf16_policy_rounds_layer_output_and_fp32_is_identity():
    cfg, params, cache, x = tiny_setup()
    layer0 = jax.tree.map(lambda a: a[0], params.layers)
    rope = expert_rope(100, 5, cfg=cfg)
    kv = (cache.k[0], cache.v[0])
    out_bf16 = decoder_layer(layer0, x, kv, 100, rope, cfg=cfg, options=ExpertOptions(precision=Precision.hf_bf16()))
    np.testing.assert_array_equal(out_bf16, round_bf16(out_bf16))
    out32 = decoder_layer(layer0, x, kv, 100, rope, cfg=cfg)
    assert 1e-4 < max_abs(out_bf16, out32) < 0.1
    chex.assert_trees_all_equal(
        out32, decoder_layer(layer0, x, kv, 100, rope, cfg=cfg, options=ExpertOptions(precision=Precision.fp32()))
    )


def test_layer_accepts_bf16_stored_weights_and_cache():
    """Weights / cache held in bf16 are upcast inside the layer: same result as their fp32 values."""
    cfg, params, cache, x = tiny_setup()
    layer0 = jax.tree.map(lambda a: a[0].astype(jnp.bfloat16), params.layers)
    layer0_32 = jax.tree.map(lambda a: a.astype(jnp.float32), layer0)
    kv16 = (cache.k[0].astype(jnp.bfloat16), cache.v[0].astype(jnp.bfloat16))
    kv32 = tuple(a.astype(jnp.float32) for a in kv16)
    rope = expert_rope(100, 5, cfg=cfg)
    for attention in ("exact", "tail_slot"):
        a = decoder_layer(layer0, x, kv16, 100, rope, cfg=cfg, options=ExpertOptions(attention=attention))
        b = decoder_layer(layer0_32, x, kv32, 100, rope, cfg=cfg, options=ExpertOptions(attention=attention))
        assert a.dtype == jnp.float32
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


def test_config_presets_and_validation():
    tt = ExpertConfig.alpamayo_tt()
    assert (tt.num_layers, tt.hidden, tt.num_heads, tt.num_kv_heads, tt.head_dim, tt.ffn, tt.rope_theta) == (
        64,
        1536,
        16,
        8,
        128,
        6144,
        5e6,
    )
    r1 = ExpertConfig.alpamayo_r1()
    assert (r1.num_layers, r1.hidden, r1.ffn) == (36, 2048, 8256)
    with pytest.raises(ValueError, match="num_heads=6 not divisible by num_kv_heads=4"):
        ExpertConfig.tiny(num_heads=6, num_kv_heads=4)
    with pytest.raises(ValueError, match="head_dim=15"):
        ExpertConfig.tiny(head_dim=15)
    with pytest.raises(ValueError, match="hidden=0"):
        ExpertConfig.tiny(hidden=0)


@pytest.mark.parametrize("rows", [8, WEIGHT_LEFT_MAX_ROWS + 36])  # both GEMM forms
def test_linear_matches_matmul_under_every_transformation(rows):
    """``linear`` picks its GEMM form by rows and carries custom vmap / jvp rules: every
    transformation must still give ``x @ w.T`` (numpy float64 oracle)."""
    k = jax.random.split(jax.random.key(0), 4)
    x, w = jax.random.normal(k[0], (rows, 5)), jax.random.normal(k[1], (7, 5))
    xb, wb = jax.random.normal(k[2], (3, rows, 5)), jax.random.normal(k[3], (3, 7, 5))

    def ref(x, w):
        return np.asarray(x, np.float64) @ np.swapaxes(np.asarray(w, np.float64), -1, -2)

    def close(a, b):
        np.testing.assert_allclose(np.asarray(a), b, rtol=2e-5, atol=2e-5)

    close(linear(x, w), ref(x, w))
    close(jax.jit(linear)(x, w), ref(x, w))
    close(jax.vmap(linear, (0, None))(xb, w), ref(xb, w))
    close(jax.vmap(linear, (0, 0))(xb, wb), ref(xb, wb))
    close(jax.vmap(linear, (None, 0))(x, wb), ref(x[None], wb))
    close(jax.vmap(jax.vmap(linear, (0, None)), (0, None))(jnp.stack([xb, 2 * xb]), w), ref(jnp.stack([xb, 2 * xb]), w))
    # Derivatives: f = sum(sin(x W^T)); df/dx = cos(.) W, df/dW = cos(.)^T x.
    def f(x, w):
        return jnp.sum(jnp.sin(linear(x, w)))

    c = np.cos(ref(x, w))
    gx, gw = jax.grad(f, (0, 1))(x, w)
    close(gx, c @ np.asarray(w, np.float64))
    close(gw, c.T @ np.asarray(x, np.float64))
    close(jax.jacfwd(f, (0, 1))(x, w)[1], c.T @ np.asarray(x, np.float64))
    cb = np.cos(ref(xb, w))
    close(jax.vmap(jax.grad(f), (0, None))(xb, w), cb @ np.asarray(w, np.float64))
    close(jax.jit(jax.grad(lambda w: jax.vmap(f, (0, None))(xb, w).sum()))(w),
          np.einsum("bto,bti->oi", cb, np.asarray(xb, np.float64)))
    with pytest.raises(ValueError, match="linear wants w"):
        linear(x, w.T)
