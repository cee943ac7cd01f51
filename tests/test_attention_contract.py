"""The contract every registered single-device attention algorithm keeps (``IMPLEMENTATIONS``),
run over each entry: forward + lse against the dense reference AND the float64 numpy oracle,
bias / mask with fully masked rows, bf16 within 2x of dense bf16, gradients, vmap, NaN / Inf
propagation, bad inputs, and the config being a hashable jit-static value. The sharded entries keep
the same contract in ``test_attention_distributed.py``'s 8-device subprocess.

A new algorithm gets all of this by adding its config to ``jaxref.attention.registry``."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _attention_util import (
    FP32_TOL,
    assert_matches_reference,
    dense_bf16,
    grad_errors,
    numpy_attention,
    random_bias_mask,
    random_qkv,
    reference,
    rel_err,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxref.attention import MASK_LSE, attention_reference, causal_mask
from jaxref.attention.registry import single_device
from jaxref.numerics import pcc

IMPLS = single_device()
N, K, H = 8, 2, 8  # G = 4: every ring entry's C divides it
# (T, S, causal): odd sizes; chunked prefill T < S; decode; a tile larger than S.
PROBLEMS = {
    "noncausal-T<S": (12, 29, False),
    "causal-chunked-prefill": (12, 29, True),
    "causal-square": (13, 13, True),
    "decode": (1, 31, True),
    "S<tile": (3, 2, False),
}


def _fn(impl, **kw):
    return jax.jit(functools.partial(impl.bind(), **kw))


@pytest.mark.parametrize("problem", PROBLEMS.values(), ids=PROBLEMS.keys())
@pytest.mark.parametrize("name", IMPLS)
def test_forward_matches_reference_and_numpy_oracle(name, problem):
    T, S, causal = problem
    impl = IMPLS[name]
    q, k, v = random_qkv(50, T, S, N, K, H)
    got = _fn(impl, causal=causal)(q, k, v)
    assert_matches_reference(got, reference(q, k, v, causal=causal))
    keep = np.asarray(causal_mask(T, S))[None] if causal else None
    want_out, want_lse = numpy_attention(q, k, v, keep)
    assert rel_err(got[0], want_out) <= FP32_TOL and rel_err(got[1], want_lse) <= FP32_TOL
    assert pcc(want_out, np.asarray(got[0], np.float64)) > 1 - 1e-9


@pytest.mark.parametrize("name", [n for n, i in IMPLS.items() if i.mask])
def test_bias_mask_and_fully_masked_rows(name):
    T, S = 10, 23
    q, k, v = random_qkv(51, T, S, N, K, H)
    bias, mask = random_bias_mask(52, N, T, S, keep=0.6)
    mask[1, 4] = mask[:, 7] = False  # one head's row, and every head's row 7: fully masked
    got = _fn(IMPLS[name], bias=bias, mask=mask, causal=True)(q, k, v)
    assert_matches_reference(got, reference(q, k, v, bias=bias, mask=mask, causal=True))
    out, lse = (np.asarray(x) for x in got)
    assert np.all(out[4, 1] == 0) and np.all(out[7] == 0)
    assert lse[1, 4] == np.float32(MASK_LSE) and np.all(lse[:, 7] == np.float32(MASK_LSE))
    # numpy oracle with the mask alone (bias-free): the same fully masked rows
    got = _fn(IMPLS[name], mask=mask)(q, k, v)
    want_out, want_lse = numpy_attention(q, k, v, mask)
    assert rel_err(got[0], want_out) <= FP32_TOL and rel_err(got[1], want_lse) <= FP32_TOL


@pytest.mark.parametrize("name", IMPLS)
def test_bf16_within_2x_of_dense_bf16(name):
    """FlashAttention convention: the algorithm on bf16 inputs vs the fp32 reference on the
    unrounded inputs, against naive dense attention computed in bf16 on the same inputs."""
    T, S = 24, 61
    q, k, v = random_qkv(53, T, S, N, K, 64)
    ref, _ = reference(q, k, v, causal=True)
    bf = [jnp.asarray(np.asarray(x).astype(jnp.bfloat16)) for x in (q, k, v)]
    out, _ = _fn(IMPLS[name], causal=True)(*bf)
    err, err_dense = rel_err(out, ref), rel_err(dense_bf16(*bf, causal=True), ref)
    assert 1e-4 < err <= 2 * err_dense, (err, err_dense)  # > 1e-4: the inputs really were rounded


@pytest.mark.parametrize("name", [n for n, i in IMPLS.items() if i.grad])
def test_grad_matches_reference(name):
    T, S = 8, 19
    q, k, v = random_qkv(54, T, S, N, K, H)
    errs = grad_errors(IMPLS[name].bind(), q, k, v, causal=True)
    assert max(errs) <= 1e-5, errs


@pytest.mark.parametrize("name", [n for n, i in IMPLS.items() if i.vmap])
def test_vmap_over_a_batch(name):
    q, k, v = random_qkv(55, 6, 17, N, K, H)
    qb, kb, vb = (jnp.stack([x, 2 * x, -x]) for x in (q, k, v))
    fn = functools.partial(IMPLS[name].bind(), causal=True)
    got = jax.jit(jax.vmap(fn))(qb, kb, vb)
    want = jax.jit(jax.vmap(lambda q, k, v: attention_reference(q, k, v, causal=True)))(qb, kb, vb)
    assert_matches_reference(got, want)


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("where", ["k", "v"])
@pytest.mark.parametrize("name", IMPLS)
def test_nan_in_one_valid_row_propagates_exactly_as_in_the_reference(name, where, causal):
    """Issue 20: one NaN in one valid K (or V) row of kv head 1 used to give exactly 0 for that
    group through flash / split-KV / ring (a NaN l was taken for a row that saw no key)."""
    T, S, row = 6, 23, 19  # causal: key 19 is visible to queries 2.. only (bottom-right, S - T = 17)
    q, k, v = random_qkv(56, T, S, N, K, H)
    if where == "k":
        k = k.at[row, 1, 2].set(jnp.nan)
    else:
        v = v.at[row, 1, 2].set(jnp.nan)
    out, lse = (np.asarray(x) for x in _fn(IMPLS[name], causal=causal)(q, k, v))
    r_out, r_lse = (np.asarray(x) for x in reference(q, k, v, causal=causal))
    np.testing.assert_array_equal(np.isnan(out), np.isnan(r_out))
    np.testing.assert_array_equal(np.isnan(lse), np.isnan(r_lse))
    assert np.isnan(out[:, 4:]).any() and np.all(np.isfinite(out[:, :4]))  # the group of kv head 1 only
    fin = np.isfinite(r_out)
    assert rel_err(out[fin], r_out[fin]) <= FP32_TOL


@pytest.mark.parametrize("name", IMPLS)
def test_inf_key_propagates_exactly_as_in_the_reference(name):
    q, k, v = random_qkv(57, 5, 17, N, K, H)
    k = k.at[3, 0, 0].set(jnp.inf)
    out, lse = (np.asarray(x) for x in _fn(IMPLS[name])(q, k, v))
    r_out, r_lse = (np.asarray(x) for x in reference(q, k, v))
    np.testing.assert_array_equal(np.isfinite(out), np.isfinite(r_out))
    np.testing.assert_array_equal(np.isfinite(lse), np.isfinite(r_lse))
    assert not np.all(np.isfinite(out))


BAD = {
    "int-q": (lambda q, k, v: (q.astype(jnp.int32), k, v), {}, r"q\.dtype=int32 must be a floating dtype"),
    "int-kv": (lambda q, k, v: (q, k.astype(jnp.int32), v.astype(jnp.int32)), {}, r"k\.dtype=int32"),
    "heads": (lambda q, k, v: (q[:, :3], k, v), {}, r"q\.shape\[1\]=3"),
    "kv-lengths": (lambda q, k, v: (q, k, v[:-1]), {}, r"v\.shape"),
    "causal-T>S": (lambda q, k, v: (q, k[:4], v[:4]), {"causal": True}, r"causal=True needs q\.shape\[0\]=6 <= S=4"),
    "head_dim": (lambda q, k, v: (q[..., :4], k, v), {}, r"k\.shape\[2\]"),
    "rank": (lambda q, k, v: (q[0], k, v), {}, r"q\.shape=\(8, 8\) must be \[T, N, H\]"),
    "scale-nan": (lambda q, k, v: (q, k, v), {"scale": float("nan")}, "scale=nan must be a finite float > 0"),
    "scale<=0": (lambda q, k, v: (q, k, v), {"scale": -1.0}, "scale=-1.0"),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("name", IMPLS)
def test_bad_inputs_raise_naming_the_argument(name, bad):
    make, kw, msg = bad
    q, k, v = random_qkv(0, 6, 12, N, K, H)
    with pytest.raises(ValueError, match=msg):
        IMPLS[name].bind()(*make(q, k, v), **kw)


@pytest.mark.parametrize("name", IMPLS)
def test_config_is_frozen_hashable_and_jit_static(name):
    cfg = IMPLS[name].config
    assert hash(cfg) == hash(dataclasses.replace(cfg)) and cfg == dataclasses.replace(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.tile = 1
    q, k, v = random_qkv(58, 4, 9, N, K, H)

    @functools.partial(jax.jit, static_argnames=("attn", "causal"))
    def run(q, k, v, *, attn, causal):
        return attn(q, k, v, causal=causal)

    assert_matches_reference(run(q, k, v, attn=cfg, causal=True), reference(q, k, v, causal=True))


def test_registry_flags_are_true_to_the_configs():
    """A config that claims no mask refuses one; every single-device entry takes bias and mask."""
    from jaxref.attention import IMPLEMENTATIONS

    assert set(IMPLS) < set(IMPLEMENTATIONS) and all(i.mesh is None for i in IMPLS.values())
    for impl in IMPLEMENTATIONS.values():
        if impl.mesh is not None:
            with pytest.raises(ValueError, match="mesh"):
                impl.bind()


# ---- one meaning for masks and biases (issue 30) -------------------------------------------------
@settings(max_examples=12, deadline=None)
@given(arg=st.sampled_from(["mask", "bias"]), dtype=st.sampled_from(
    [np.float32, np.float16, np.float64, np.int32, np.int8, np.uint8, np.bool_]))
@pytest.mark.parametrize("name", [n for n, i in IMPLS.items() if i.mask])
def test_masks_are_bool_and_biases_float_everything_else_a_type_error(name, arg, dtype):
    """A 0 / -inf float mask was cast to bool (inverted) by the tiled paths, an int {0, 1, 2} mask read
    bitwise by one and as truthy by the others, a bool bias added as 0 / 1: one rule now, one check."""
    T, S = 4, 9
    q, k, v = random_qkv(60, T, S, N, K, H)
    x = np.random.default_rng(61).integers(0, 3, (N, T, S)).astype(dtype)
    if arg == "mask":
        x = np.where(x == 0, -np.inf, 0.0).astype(dtype) if np.issubdtype(dtype, np.floating) else x
    good = dtype == np.bool_ if arg == "mask" else np.issubdtype(dtype, np.floating)
    if good:
        return  # accepted: its values are checked against the reference by the tests above
    with pytest.raises(TypeError, match=rf"{arg}\.dtype={np.dtype(dtype).name} must be"):
        IMPLS[name].bind()(q, k, v, **{arg: x})


def test_bad_mask_shape_is_a_value_error_naming_it():
    q, k, v = random_qkv(62, 4, 9, N, K, H)
    with pytest.raises(ValueError, match=r"mask\.shape=\(4, 8\) must broadcast to \[N, T, S\] = \(8, 4, 9\)"):
        attention_reference(q, k, v, mask=np.ones((4, 8), bool))


# ---- the reference's semantics for non-finite and extreme scores, on every entry (issue 30) -------
ET, ES = 5, 13  # small problem: one compile per (entry, causal), reused by every example


@functools.cache
def _masked_fn(name, causal):
    attn = attention_reference if name == "reference" else IMPLS[name].bind()
    return jax.jit(lambda q, k, v, mask: attn(q, k, v, mask=mask, causal=causal, scale=1.0))


def _extreme_problem(case, seed, mag, head):
    """q, k, v, mask of one adversarial case; kv head ``head`` (q heads head*G ...) is the target."""
    rng = np.random.default_rng(seed)
    q, k, v = (np.array(x) for x in random_qkv(seed, ET, ES, N, K, H))  # writable copies
    mask = rng.random((N, ET, ES)) < 0.8
    mask[:, :, 0] = True  # every row keeps a valid key: "no key" cannot be the answer
    G = N // K
    heads = slice(head * G, (head + 1) * G)
    if case == "every-valid-score--inf":  # an Inf in every key of one kv head: scores -inf, not "masked"
        q[:, heads] = np.abs(q[:, heads])
        k[:, head, 0], q[:, heads, 0] = np.inf, -1.0
    elif case == "scores-below-floor":  # finite scores below -1.19e38 are scores (softmax = mean of v)
        q[:, heads], k[:, head] = 0.0, 0.0
        q[:, heads, 0], k[:, head, 0] = -mag * 1e19, 1e19  # every score -mag * 1e38
    elif case == "huge-values":  # the merge must not overflow where the reference does not
        v[:, head] = np.sign(v[:, head]) * mag * 1e38
    elif case == "nan-v-in-a-masked-key":  # selected away, not multiplied by a 0 weight
        mask[:, :, 7] = False
        v[7, head, 2] = np.nan
    return (*(jnp.asarray(x, jnp.float32) for x in (q, k, v)), jnp.asarray(mask))


EXTREME_CASES = ["every-valid-score--inf", "scores-below-floor", "huge-values", "nan-v-in-a-masked-key"]


@settings(max_examples=8, deadline=None)
@given(case=st.sampled_from(EXTREME_CASES), seed=st.integers(0, 2**16), mag=st.floats(1.2, 3.3),
       head=st.integers(0, K - 1), causal=st.booleans())
@pytest.mark.parametrize("name", [n for n, i in IMPLS.items() if i.mask])
def test_extreme_and_nonfinite_scores_follow_the_reference(name, case, seed, mag, head, causal):
    """Issue 30: the tiled paths read a row whose scores are all -inf (or below -1.19e38) as "no key"
    (0), overflowed on v = 3e38 and let a NaN of a masked V row leak. "No key" now comes from the mask
    only. Oracles: the dense reference, and for the finite cases the float64 numpy oracle."""
    q, k, v, mask = _extreme_problem(case, seed, mag, head)
    keep = np.asarray(mask) & (np.asarray(causal_mask(ET, ES))[None] if causal else True)
    out, lse = (np.asarray(x, np.float64) for x in _masked_fn(name, causal)(q, k, v, mask))
    r_out, r_lse = (np.asarray(x, np.float64) for x in _masked_fn("reference", causal)(q, k, v, mask))
    for got, want in ((out, r_out), (lse, r_lse)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
        fin = np.isfinite(want)
        assert rel_err(got[fin], want[fin]) <= FP32_TOL
    G = N // K
    target = out[:, head * G:(head + 1) * G]
    if case == "every-valid-score--inf":
        assert np.isnan(target).all() and np.isneginf(lse[head * G:(head + 1) * G]).all()
    else:  # finite everywhere, and equal to the float64 oracle (the masked NaN V row zeroed: excluded)
        assert np.isfinite(out).all() and np.isfinite(lse).all()
        v_clean = np.nan_to_num(np.asarray(v, np.float64))
        want_out, _ = numpy_attention(np.asarray(q, np.float64), np.asarray(k, np.float64), v_clean, keep,
                                      scale=1.0)
        assert rel_err(out, want_out) <= FP32_TOL
    if case == "scores-below-floor":  # every score equal: each row's output is the mean of its valid values
        w = keep.reshape(K, G, ET, ES)[head] / keep.reshape(K, G, ET, ES)[head].sum(-1, keepdims=True)
        want = np.einsum("GTS,SH->TGH", w, np.asarray(v, np.float64)[:, head])
        assert rel_err(target, want) <= FP32_TOL
