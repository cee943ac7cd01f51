"""Head-parallel ring attention (prefill-SP): equality with the dense reference for every
ordering, causal step skip and load balance against hand-derived counts (ADR sections 5.5, 11)."""

import functools

import jax
import numpy as np
import pytest
from _attention_util import assert_matches_reference, executed_tiles, random_bias_mask, random_qkv, reference

from jaxref.attention import MASK_LSE, AttentionGeometry, Ring
from jaxref.attention.ring import ring_blocks

# (T, S, N, K, H, tile, q_block, causal, ordering)
CASES = {
    "G8-contiguous-causal-prefill": (64, 64, 8, 1, 16, 8, 8, True, "contiguous"),
    "G8-zigzag-causal-ragged": (45, 45, 8, 1, 8, 3, 6, True, "zigzag"),
    "G2-striped-causal-T<S": (13, 45, 4, 2, 8, 3, 4, True, "striped"),
    "G1-contiguous-noncausal": (20, 33, 2, 2, 8, 5, None, False, "contiguous"),
    "G8-decode-S<C-blocks": (1, 5, 8, 1, 8, 3, None, True, "contiguous"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_ring_matches_reference(case):
    T, S, N, K, H, tile, q_block, causal, ordering = case
    q, k, v = random_qkv(20, T, S, N, K, H)
    ring = Ring(tile=tile, q_block=q_block, ordering=ordering)
    assert_matches_reference(jax.jit(functools.partial(ring, causal=causal))(q, k, v), reference(q, k, v, causal=causal))
    sch = ring.schedule(T, S, AttentionGeometry(N, K, H), causal=causal)
    assert executed_tiles(ring, q, k, v, causal=causal) == sch.tiles_computed
    assert sum(sch.block_tokens) == S and sch.steps == N // K


def test_ring_bias_mask_and_fully_masked_rows():
    T, S, N, K, H = 10, 24, 4, 2, 8
    q, k, v = random_qkv(21, T, S, N, K, H)
    bias, mask = random_bias_mask(22, N, T, S, keep=0.5)
    mask[3, 2] = mask[:, 9] = False
    ring = Ring(tile=4, q_block=4, ordering="zigzag")
    got = jax.jit(lambda q, k, v: ring(q, k, v, bias=bias, mask=mask, causal=True))(q, k, v)
    assert_matches_reference(got, reference(q, k, v, bias=bias, mask=mask, causal=True))
    out, lse = got
    assert lse[3, 2] == np.float32(MASK_LSE) and np.all(np.asarray(lse[:, 9]) == np.float32(MASK_LSE))
    assert np.all(np.asarray(out[9]) == 0)


@pytest.mark.parametrize("C", [2, 4, 8])
def test_ring_skips_wholly_future_block_steps(C):
    """T = S = C * B, q_block = B, contiguous: q block b needs blocks 0..b, so of the C^2 (q block,
    step) pairs per CUBE, C(C-1)/2 are skipped (about half) and the computed tiles are the lower
    triangle: C * C(C+1)/2 block-steps of B / tile tiles each (the diagonal ones masked)."""
    B, tile, K, H = 16, 8, 2, 8
    g = AttentionGeometry(K * C, K, H)
    sch = Ring(tile=tile, q_block=B).schedule(C * B, C * B, g, causal=True)
    per = B // tile
    assert sch.block_steps_skipped == C * C * (C - 1) // 2
    assert sch.block_steps_run == C * C * (C + 1) // 2
    assert sch.block_steps_skipped + sch.block_steps_run == C ** 3
    assert sch.tiles_computed == C * per * C * (C + 1) // 2
    assert sch.tiles_partial == C * C * per
    assert sch.kv_rotations == C - 1 and sch.ring_messages == 2 * C * (C - 1) * K
    assert sch.ring_bytes == 2 * K * (C - 1) * C * B * H * 2
    q, k, v = random_qkv(24, C * B, C * B, K * C, K, H)
    assert executed_tiles(Ring(tile=tile, q_block=B), q, k, v, causal=True) == sch.tiles_computed


def test_zigzag_and_striped_balance_the_lock_step_ring():
    """Under causal masking the contiguous ring's per-step work is uneven (critical path 16/9 of
    the balanced share for C = 8); zigzag and striped orderings make every step even."""
    C, S = 8, 1024
    g = AttentionGeometry(C, 1, 128)
    crit = {}
    for ordering, tile in (("contiguous", S // 16), ("zigzag", S // 16), ("striped", S // 64)):
        sch = Ring(tile=tile, q_block=S // C, ordering=ordering).schedule(S, S, g, causal=True)
        crit[ordering] = sch.critical_path_flops / (sch.gemm_flops / C)
    assert crit["contiguous"] == pytest.approx(16 / 9)
    assert crit["zigzag"] == pytest.approx(1.0) and crit["striped"] == pytest.approx(1.0)


def test_ring_blocks_partition_the_sequence():
    for S, C in ((45, 8), (64, 8), (5, 8), (33, 2)):
        for ordering in ("contiguous", "zigzag", "striped"):
            tokens, valid = ring_blocks(S, C, ordering)
            held = np.sort(tokens[valid])
            assert np.array_equal(held, np.arange(S)), (S, C, ordering)
            for row, ok in zip(tokens, valid):
                assert np.all(np.diff(row[ok]) > 0)  # positions increase along a block


def test_ring_bad_input_raises():
    q, k, v = random_qkv(0, 8, 8, 4, 2, 8)
    with pytest.raises(ValueError, match="num_cubes=4 must divide the group size G=2"):
        Ring(num_cubes=4)(q, k, v)
    with pytest.raises(ValueError, match="ordering"):
        Ring(ordering="random")
    with pytest.raises(ValueError, match="tile"):
        Ring(tile=-3)
    with pytest.raises(ValueError, match="num_cubes"):
        Ring(num_cubes=0)
    with pytest.raises(ValueError, match="group=G"):
        Ring().plan(8, 8, causal=False)


@pytest.mark.parametrize("C", [1, 2, 4])
def test_ring_with_fewer_cubes_than_group_holds_g_over_c_heads_per_cube(C):
    """C < G: each CUBE holds G / C q heads of every kv group (bias / mask follow their heads)."""
    T, S, N, K, H = 12, 30, 16, 2, 8  # G = 8
    q, k, v = random_qkv(27, T, S, N, K, H)
    bias, mask = random_bias_mask(28, N, T, S, keep=0.7)
    ring = Ring(tile=4, q_block=4, num_cubes=C, ordering="zigzag")
    got = jax.jit(lambda q, k, v: ring(q, k, v, bias=bias, mask=mask, causal=True))(q, k, v)
    assert_matches_reference(got, reference(q, k, v, bias=bias, mask=mask, causal=True))
    sch = ring.schedule(T, S, AttentionGeometry(N, K, H), causal=True)
    assert executed_tiles(ring, q, k, v, causal=True) == sch.tiles_computed and sch.steps == C
    # The GQA fold: each computed tile serves G / C heads, so the flops scale with them.
    assert sch.gemm_flops == sum(sum(f) for f in sch.step_cube_flops)
