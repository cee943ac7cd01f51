"""flash_attention vs the dense reference; its schedule vs hand-derived counts and executed GEMMs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _attention_util import (
    assert_matches_reference,
    dense_bf16,
    dot_operand_shapes,
    executed_tiles,
    grad_errors,
    random_bias_mask,
    random_qkv,
    reference,
    rel_err,
)

from jaxref.attention import (
    MASK_LSE,
    AttentionGeometry,
    TileConfig,
    attention_reference,
    causal_mask,
    flash_attention,
    flash_attention_jit,
    flash_schedule,
)

# (T, S, N, K, H, tile, q_block, causal)
CASES = {
    "llama3-70b-decode-causal-G8-ragged": (1, 300, 64, 8, 128, 128, None, True),
    "prefill-causal-G1-ragged": (45, 45, 2, 2, 8, 8, 16, True),
    "chunked-prefill-causal-T<S-G2": (20, 53, 4, 2, 16, 8, 8, True),
    "tile>S": (3, 5, 2, 1, 8, 128, None, True),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_flash_matches_reference(case):
    T, S, N, K, H, tile, q_block, causal = case
    q, k, v = random_qkv(0, T, S, N, K, H)
    got = flash_attention_jit(q, k, v, causal=causal, tile=tile, q_block=q_block)
    assert_matches_reference(got, reference(q, k, v, causal=causal))


def test_flash_bias_mask_and_fully_masked_rows():
    """Non-causal prefill, G = 2, additive bias + boolean mask; fully masked rows give (0, MASK_LSE)."""
    T, S, N, K, H = 12, 30, 4, 2, 8
    q, k, v = random_qkv(1, T, S, N, K, H)
    bias, mask = random_bias_mask(2, N, T, S)
    mask[1, 4] = mask[:, 7] = False  # fully masked rows
    got = jax.jit(lambda q, k, v: flash_attention(q, k, v, bias=bias, mask=mask, tile=7, q_block=5))(q, k, v)
    want = reference(q, k, v, bias=bias, mask=mask)
    assert_matches_reference(got, want)
    out, lse = got
    assert np.all(np.asarray(out[4, 1]) == 0) and np.all(np.asarray(out[7]) == 0)
    assert lse[1, 4] == np.float32(MASK_LSE) and np.all(np.asarray(lse[:, 7]) == np.float32(MASK_LSE))


def test_flash_grad_matches_reference():
    T, S, N, K, H, tile, q_block, causal = CASES["prefill-causal-G1-ragged"]
    q, k, v = random_qkv(4, T, S, N, K, H)
    errs = grad_errors(flash_attention, q, k, v, causal=causal, tile=tile, q_block=q_block)
    assert max(errs) <= 1e-5, errs


def test_flash_bf16_within_2x_of_dense_bf16():
    """FlashAttention convention: flash on bf16 inputs vs the fp32 reference on the unrounded
    inputs, against naive dense attention computed in bf16 on the same inputs."""
    T, S, N, K, H = 48, 96, 4, 2, 64
    q, k, v = random_qkv(5, T, S, N, K, H)
    ref, _ = reference(q, k, v, causal=True)
    bf = [jnp.asarray(np.asarray(x).astype(jnp.bfloat16)) for x in (q, k, v)]
    out, _ = jax.jit(lambda q, k, v: flash_attention(q, k, v, causal=True, tile=32, q_block=16))(*bf)
    err_flash, err_dense = rel_err(out, ref), rel_err(dense_bf16(*bf, causal=True), ref)
    assert err_flash <= 2 * err_dense, (err_flash, err_dense)
    assert err_flash > 1e-4  # the inputs really were rounded: this is not an fp32 run


def _bruteforce_tiles(T, S, tile, q_block, causal):
    """(past, partial, skipped) from the dense causal mask cut into blocks x tiles."""
    vis = np.asarray(causal_mask(T, S)) if causal else np.ones((T, S), bool)
    bq = T if q_block is None else min(q_block, T)
    tl = min(tile, S)
    past = partial = skipped = 0
    for t0 in range(0, T, bq):
        for s0 in range(0, S, tl):
            blk = vis[t0:t0 + bq, s0:s0 + tl]
            if not blk.any():
                skipped += 1
            elif blk.all() and blk.shape[1] == tl:
                past += 1
            else:
                partial += 1
    return past, partial, skipped


@pytest.mark.parametrize("shape", [(64, 64, 8, 8), (64, 64, 16, 8), (50, 50, 8, 16), (20, 53, 8, 8), (1, 100, 32, None),
                                   (37, 37, 5, 3)])
def test_flash_schedule_counts_match_bruteforce_and_execution(shape):
    T, S, tile, q_block = shape
    g = AttentionGeometry(4, 2, 8)
    sch = flash_schedule(T, S, g, causal=True, tile=tile, q_block=q_block)
    assert (sch.tiles_past, sch.tiles_partial, sch.tiles_skipped) == _bruteforce_tiles(T, S, tile, q_block, True)
    q, k, v = random_qkv(6, T, S, g.num_heads, g.num_kv_heads, g.head_dim)
    assert executed_tiles(flash_attention, q, k, v, causal=True, tile=tile, q_block=q_block) == sch.tiles_computed


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_causal_prefill_computes_lower_triangle(n):
    """T = S = n * b, q_block = tile = b: n(n+1)/2 tiles (n diagonal masked), n(n-1)/2 skipped."""
    b = 16
    sch = flash_schedule(n * b, n * b, causal=True, tile=b, q_block=b)
    assert sch.tiles_computed == n * (n + 1) // 2
    assert sch.tiles_partial == n and sch.tiles_skipped == n * (n - 1) // 2
    assert sch.gemm_flops == 4 * sch.tiles_computed * b * sch.num_heads * b * sch.head_dim
    no_skip = flash_schedule(n * b, n * b, causal=True, tile=b, q_block=b, causal_skip=False)
    assert no_skip.tiles_computed == n * n and no_skip.tiles_skipped == 0


def test_causal_skip_off_computes_future_tiles_and_still_matches():
    T, S, N, K, H = 40, 40, 4, 2, 8
    q, k, v = random_qkv(7, T, S, N, K, H)
    kw = {"causal": True, "tile": 8, "q_block": 8, "causal_skip": False}
    assert_matches_reference(flash_attention_jit(q, k, v, **kw), reference(q, k, v, causal=True))
    assert executed_tiles(flash_attention, q, k, v, **kw) == 25


def test_gqa_kv_tile_loads_independent_of_group():
    """ADR section 11.2: K/V tile reads do not depend on G; GEMM work scales with G; one GEMM per
    kv head serves the whole group (M = q_block * G rows; K/V operands are never repeated)."""
    T, S, K, H, tile, qb = 32, 96, 2, 16, 32, 16
    scheds = {G: flash_schedule(T, S, AttentionGeometry(K * G, K, H), causal=True, tile=tile, q_block=qb)
              for G in (1, 2, 8)}
    assert len({s.kv_tile_loads for s in scheds.values()}) == 1
    assert len({s.kv_bytes for s in scheds.values()}) == 1
    assert scheds[1].kv_tile_loads == 2 * K * scheds[1].tiles_computed
    for G, s in scheds.items():
        assert s.gemm_flops == G * scheds[1].gemm_flops
        q, k, v = random_qkv(8, T, S, K * G, K, H)
        jaxpr = jax.make_jaxpr(lambda q, k, v: flash_attention(q, k, v, causal=True, tile=tile, q_block=qb))(
            q, k, v).jaxpr
        shapes = dot_operand_shapes(jaxpr)
        assert shapes and all(lhs == (K, qb * G, min(tile, S)) or lhs == (K, qb * G, H) for lhs, _ in shapes)
        assert all(rhs == (tile, K, H) for _, rhs in shapes)  # the K / V tile, once per kv head
        assert executed_tiles(flash_attention, q, k, v, causal=True, tile=tile, q_block=qb) == s.tiles_computed


def test_flash_is_vmappable_over_a_batch():
    q, k, v = random_qkv(9, 8, 24, 4, 2, 8)
    qb, kb, vb = (jnp.asarray(np.stack([x, 2 * x])) for x in map(np.asarray, (q, k, v)))
    out, lse = jax.jit(jax.vmap(lambda q, k, v: flash_attention(q, k, v, causal=True, tile=5)))(qb, kb, vb)
    want = jax.jit(jax.vmap(lambda q, k, v: attention_reference(q, k, v, causal=True)))(qb, kb, vb)
    assert_matches_reference((out, lse), want)


BAD = {
    "tile<=0": (lambda q, k, v: flash_attention(q, k, v, tile=0), "tile"),
    "q_block<=0": (lambda q, k, v: flash_attention(q, k, v, q_block=-1), "q_block"),
    "heads": (lambda q, k, v: flash_attention(q[:, :3], k, v), "q.shape"),
    "kv-lengths": (lambda q, k, v: flash_attention(q, k, v[:-1]), "v.shape"),
    "causal-T>S": (lambda q, k, v: flash_attention(q, k[:4], v[:4], causal=True), "q.shape"),
    "head_dim": (lambda q, k, v: flash_attention(q[..., :4], k, v), "k.shape"),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_flash_bad_input_raises(bad):
    fn, name = bad
    q, k, v = random_qkv(0, 6, 10, 4, 2, 8)
    with pytest.raises(ValueError, match=name.replace(".", r"\.")):
        fn(q, k, v)


def test_tile_config_and_schedule_validate():
    with pytest.raises(ValueError, match="tile"):
        TileConfig(tile=0)
    with pytest.raises(ValueError, match="num_queries"):
        flash_schedule(8, 4, causal=True)
