"""A golden never hides a bad number (issue 20): a NaN / Inf in one valid key or value row reaches
the output of every attention path exactly where it reaches the dense reference's, the VLM-cache
attention and the expert's velocity / sample included; integer inputs are refused."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _attention_util import random_qkv
from _expert_util import tiny_setup

from jaxref.attention import MASK_LSE, attention_reference
from jaxref.cache_attention import attend_exact, attend_tail_slot, attention_over_rows
from jaxref.expert import KVCache, sample, velocity

T, S, N, K, H = 5, 23, 4, 2, 8
BAD_ROW, BAD_HEAD = 7, 1  # a valid key of kv head 1: q heads 2, 3 (G = 2) must be NaN, heads 0, 1 not


def poisoned(where: str, value: float):
    q, k, v = random_qkv(40, T, S, N, K, H)
    if where == "k":
        k = k.at[BAD_ROW, BAD_HEAD, 3].set(value)
    else:
        v = v.at[BAD_ROW, BAD_HEAD, 3].set(value)
    return q, k, v


def nan_pattern(out, lse):
    """(rows x heads of out holding a NaN, the same for lse): the pattern to match, not just 'any'."""
    return np.isnan(np.asarray(out)).any(-1), np.isnan(np.asarray(lse))


@pytest.mark.parametrize("causal", [False, True], ids=["noncausal", "causal"])
@pytest.mark.parametrize("where,value", [("k", np.nan), ("v", np.nan), ("k", np.inf), ("v", np.inf)],
                         ids=["nan-k", "nan-v", "inf-k", "inf-v"])
def test_reference_propagates_a_bad_value_to_its_group_only(where, value, causal):
    """The oracle's own behaviour, stated: q heads of the poisoned kv head go NaN (an Inf value
    gives +-Inf or NaN), the other group stays finite, and its lse is not the masked MASK_LSE."""
    q, k, v = poisoned(where, value)
    out, lse = jax.jit(lambda q, k, v: attention_reference(q, k, v, causal=causal))(q, k, v)
    out, lse = np.asarray(out), np.asarray(lse)
    assert np.all(np.isfinite(out[:, :2])) and np.all(np.isfinite(lse[:2]))  # kv head 0's q heads
    assert not np.all(np.isfinite(out[:, 2:]))
    assert not np.any(lse[2:] == np.float32(MASK_LSE))
    if where == "k" and np.isnan(value):  # (an Inf key gives -Inf scores, i.e. exclusions, on some rows)
        assert np.all(np.isnan(lse[2:])) and np.all(np.isnan(out[:, 2:]))


def test_masked_bad_key_stays_excluded_as_in_the_reference():
    """An excluded key is excluded whatever it holds: a NaN key masked out of every row changes nothing."""
    q, k, v = poisoned("k", np.nan)
    mask = np.ones((N, T, S), bool)
    mask[:, :, BAD_ROW] = False
    out, lse = attention_reference(q, k, v, mask=mask)
    assert np.all(np.isfinite(np.asarray(out))) and np.all(np.isfinite(np.asarray(lse)))


# ---- the expert's cache attention ------------------------------------------------------------
def _cache_problem(value):
    cfg, params, cache, _ = tiny_setup()
    rng = np.random.default_rng(41)
    Kh, _, Hd = cache.k.shape[1:]
    q = jnp.asarray(rng.standard_normal((cfg.num_tokens, cfg.num_heads, Hd)), jnp.float32)
    own = [jnp.asarray(rng.standard_normal((cfg.num_tokens, Kh, Hd)), jnp.float32) for _ in range(2)]
    ck = cache.k[0].at[1, 3, 0].set(value)  # kv head 1, cache row 3 < S = 100: a valid row
    return cfg, params, cache, q, own, ck, cache.v[0]


@pytest.mark.parametrize("attend", [attend_exact, attend_tail_slot], ids=["exact", "tail_slot"])
def test_nan_in_a_valid_cache_row_reaches_the_cache_attention_output(attend):
    cfg, _, cache, q, (ko, vo), ck, cv = _cache_problem(np.nan)
    out = np.asarray(attend(q, ko, vo, ck, cv, int(cache.seq_len)))  # [T, N, H]
    G = cfg.num_heads // cfg.num_kv_heads
    assert np.all(np.isnan(out[:, G:])), "kv head 1's q heads must be NaN"
    assert np.all(np.isfinite(out[:, :G])), "kv head 0's q heads must stay finite"
    # The oracle on the same keys (cache rows [0, S) then the own keys) agrees on the pattern.
    s = int(cache.seq_len)
    k_all = jnp.concatenate([jnp.transpose(ck[:, :s], (1, 0, 2)), ko])
    v_all = jnp.concatenate([jnp.transpose(cv[:, :s], (1, 0, 2)), vo])
    ref, _ = attention_reference(q, k_all, v_all)
    np.testing.assert_array_equal(np.isnan(out), np.isnan(np.asarray(ref)))


def test_nan_in_a_valid_cache_row_reaches_velocity_and_sample():
    cfg, params, cache, _, _, ck, _ = _cache_problem(np.nan)
    bad = KVCache.create(cache.k.at[0].set(ck), cache.v, cache.seq_len, cache.rope_delta)
    x = jnp.zeros((cfg.num_tokens, cfg.action_dim), jnp.float32)
    assert np.all(np.isfinite(np.asarray(velocity(params, x, 0.5, cache, cfg=cfg))))  # the clean cache
    assert np.all(np.isnan(np.asarray(velocity(params, x, 0.5, bad, cfg=cfg))))
    act, vs = jax.jit(lambda c: sample(params, c, jax.random.key(0), cfg=cfg, num_steps=2))(bad)
    assert np.all(np.isnan(np.asarray(act))) and np.all(np.isnan(np.asarray(vs)))


def test_nan_in_a_garbage_cache_row_is_excluded():
    """Rows [S, Smax) are not attended: a NaN there changes nothing (exact form)."""
    _, _, cache, q, (ko, vo), _, cv = _cache_problem(0.0)
    s = int(cache.seq_len)
    clean = np.asarray(attend_exact(q, ko, vo, cache.k[0], cv, s))
    dirty_k = cache.k[0].at[1, s + 3, 0].set(np.nan)
    np.testing.assert_array_equal(np.asarray(attend_exact(q, ko, vo, dirty_k, cv, s)), clean)


@pytest.mark.parametrize("where", ["k", "v"])
def test_nan_in_a_garbage_cache_row_is_excluded_in_k_and_in_v(where):
    """Issue 30: a NaN in a V row >= S made the whole velocity NaN (0 * NaN in P.V) while the same value
    in a K row was excluded. Rows >= S are selected away in both, through attend_exact and velocity."""
    cfg, params, cache, q, (ko, vo), _, _ = _cache_problem(0.0)
    s = int(cache.seq_len)
    clean = np.asarray(attend_exact(q, ko, vo, cache.k[0], cache.v[0], s))
    ck, cv = cache.k[0], cache.v[0]
    if where == "k":
        ck = ck.at[1, s + 3, 0].set(np.nan)
    else:
        cv = cv.at[1, s + 3, 0].set(np.nan)
    np.testing.assert_array_equal(np.asarray(attend_exact(q, ko, vo, ck, cv, s)), clean)
    dirty = KVCache.create(cache.k.at[0].set(ck), cache.v.at[0].set(cv), cache.seq_len, cache.rope_delta)
    x = jnp.zeros((cfg.num_tokens, cfg.action_dim), jnp.float32)
    np.testing.assert_array_equal(np.asarray(velocity(params, x, 0.5, dirty, cfg=cfg)),
                                  np.asarray(velocity(params, x, 0.5, cache, cfg=cfg)))


@pytest.mark.parametrize("arg,dtype", [("keep", np.float32), ("keep", np.int32), ("bias", np.bool_)])
def test_cache_row_mask_is_bool_and_bias_float(arg, dtype):
    """Issue 30: attention_over_rows(keep=float) cast the 0 / -inf mask to bool, inverting it."""
    q, k, v = random_qkv(43, T, S, N, K, H)
    kh, vh = (jnp.transpose(x, (1, 0, 2)) for x in (k, v))
    with pytest.raises(TypeError, match=rf"{arg}\.dtype={np.dtype(dtype).name} must be"):
        attention_over_rows(q, kh, vh, **{arg: np.zeros(S, dtype)})


@pytest.mark.parametrize("arg", ["q", "k", "v"])
def test_integer_inputs_are_refused(arg):
    """Issue 20: int32 q, k, v gave wrong numbers through flash (scores in int32); every path refuses."""
    q, k, v = random_qkv(42, T, S, N, K, H)
    args = {"q": q, "k": k, "v": v}
    args[arg] = args[arg].astype(jnp.int32)
    with pytest.raises(ValueError, match=rf"{arg}\.dtype=int32 must be a floating dtype"):
        attention_reference(**args)
