"""Every check of the cache's S and M-RoPE delta holds eager and under ``jit`` (issue 30): integers
are integers (100.7, -0.5, True refused, never truncated), S within its bound (the tail-slot form
needs S <= Smax - T), positions i + rope_delta + S within int32. ``velocity_jit`` / ``sample_jit``
refuse exactly what the eager ``velocity`` refuses, before tracing; a value traced inside a caller's
``jit`` (which cannot raise) poisons the result with NaN instead of computing with it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _expert_util import tiny_setup
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxref.expert import CacheContext, KVCache, sample_jit, velocity, velocity_jit
from jaxref.options import ExpertOptions
from jaxref.weights import init_cache

INT32_MAX = 2**31 - 1
TAIL = ExpertOptions(attention="tail_slot")
EXACT = ExpertOptions()


@pytest.fixture(scope="module")
def setup():
    cfg, params, cache, _ = tiny_setup()
    return cfg, params, cache, jnp.zeros((cfg.num_tokens, cfg.action_dim), jnp.float32)


def refusal(seq_len, rope_delta, *, smax: int, T: int, attention: str):
    """The rule written from the issue, independent of the library: the exception a call must raise."""
    for x in (seq_len, rope_delta):
        if isinstance(x, bool) or not isinstance(x, int):
            return TypeError
    bound = smax - T if attention == "tail_slot" else smax
    if not 0 <= seq_len <= bound or not -(2**31) <= rope_delta <= INT32_MAX:
        return ValueError
    if rope_delta + seq_len + T - 1 > INT32_MAX:
        return ValueError
    return None


BAD_INTS = st.one_of(st.integers(-(2**40), -1), st.integers(2**31 - 200, 2**40))
SEQ = st.one_of(st.integers(0, 300), BAD_INTS, st.floats(-2, 300).filter(lambda f: f != int(f)), st.booleans())
DELTA = st.one_of(st.integers(-5, 5), st.integers(INT32_MAX - 400, INT32_MAX + 5), st.floats(-2, 2), st.booleans())


@settings(max_examples=40, deadline=None)
@given(seq_len=SEQ, rope_delta=DELTA, tail=st.booleans(), entry=st.sampled_from(["velocity", "velocity_jit",
                                                                                  "sample_jit"]))
def test_eager_and_jitted_entry_points_refuse_what_the_rule_refuses(setup, seq_len, rope_delta, tail, entry):
    cfg, params, cache, x = setup
    options = TAIL if tail else EXACT
    want = refusal(seq_len, rope_delta, smax=cache.max_seq_len, T=cfg.num_tokens,
                   attention=options.attention)
    if want is None:
        return  # accepted inputs are computed by the tests below (one compile each)

    def call():
        c = KVCache.create(cache.k, cache.v, seq_len, rope_delta)
        if entry == "sample_jit":
            return sample_jit(params, c, jax.random.key(0), cfg=cfg, options=options, num_steps=1)
        fn = velocity if entry == "velocity" else velocity_jit
        return fn(params, x, 0.5, c, cfg=cfg, options=options)

    with pytest.raises(want, match="seq_len|rope_delta"):
        call()


def test_the_jitted_tail_slot_bound_is_the_eager_one(setup):
    """Issue 30: velocity_jit / sample_jit computed with S = Smax - 63 (T = 64), which velocity refuses."""
    cfg, params, cache, x = setup
    smax, T = cache.max_seq_len, cfg.num_tokens
    over = KVCache.create(cache.k, cache.v, smax - T + 1, 0)
    for fn in (velocity, velocity_jit):
        with pytest.raises(ValueError, match=rf"seq_len={smax - T + 1} must satisfy 0 <= seq_len <= max_seq_len - "):
            fn(params, x, 0.5, over, cfg=cfg, options=TAIL)
    with pytest.raises(ValueError, match="seq_len"):
        sample_jit(params, over, jax.random.key(0), cfg=cfg, options=TAIL, num_steps=1)
    edge = KVCache.create(cache.k, cache.v, smax - T, 0)
    got = velocity_jit(params, x, 0.5, edge, cfg=cfg, options=TAIL)
    np.testing.assert_allclose(got, velocity(params, x, 0.5, edge, cfg=cfg, options=TAIL), rtol=1e-5, atol=1e-6)


def test_values_traced_inside_a_callers_jit_poison_the_result(setup):
    """Inside a caller's jit S and the delta are traced: an out-of-bound value cannot raise, so the
    result is NaN rather than a number computed with it; in-bound values give the eager result."""
    cfg, params, cache, x = setup
    smax, T = cache.max_seq_len, cfg.num_tokens

    @jax.jit
    def run(s, d):
        return velocity(params, x, 0.5, KVCache.create(cache.k, cache.v, s, d), cfg=cfg, options=TAIL)

    ok = np.asarray(run(jnp.int32(smax - T), jnp.int32(3)))
    assert np.isfinite(ok).all()
    np.testing.assert_allclose(ok, velocity(params, x, 0.5, KVCache.create(cache.k, cache.v, smax - T, 3), cfg=cfg,
                                            options=TAIL), rtol=1e-5, atol=1e-6)
    last_ok = INT32_MAX - (smax - T) - (T - 1)  # the largest delta whose last position is INT32_MAX
    assert np.isfinite(np.asarray(run(jnp.int32(smax - T), jnp.int32(last_ok)))).all()
    for s, d in ((smax - T + 1, 0), (-1, 0), (0, INT32_MAX), (smax - T, last_ok + 1)):
        assert np.isnan(np.asarray(run(jnp.int32(s), jnp.int32(d)))).all(), (s, d)


@pytest.mark.parametrize("bad", [100.7, -0.5, True, np.float32(3.0), jnp.float32(3.0)], ids=repr)
def test_seq_len_is_an_integer_where_it_is_taken(setup, bad):
    cfg, _, cache, _ = setup
    for make in (lambda: KVCache.create(cache.k, cache.v, bad, 0), lambda: CacheContext.create(bad, 0),
                 lambda: init_cache(jax.random.key(0), cfg, bad, max_seq_len=256)):
        with pytest.raises(TypeError, match=r"seq_len=.* must be an integer"):
            make()


@pytest.mark.parametrize("bad,exc", [(1.5, TypeError), (True, TypeError), (2**31, ValueError), (-(2**31) - 1, ValueError)],
                         ids=repr)
def test_rope_delta_is_an_int32_integer(setup, bad, exc):
    _, _, cache, _ = setup
    with pytest.raises(exc, match="rope_delta"):
        KVCache.create(cache.k, cache.v, 10, bad)
    with pytest.raises(exc, match="rope_delta"):
        CacheContext.create(10, bad)
