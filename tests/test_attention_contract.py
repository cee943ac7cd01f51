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
