"""Flash: parity on its own tiling cases, its schedule vs hand-derived counts and executed GEMMs.
(The generic contract -- masks, bf16, grads, vmap, NaN, bad inputs -- is test_attention_contract.py.)"""

import functools

import jax
import numpy as np
import pytest
from _attention_util import (
    assert_matches_reference,
    dot_operand_shapes,
    executed_tiles,
    random_qkv,
    reference,
)

from jaxref.attention import AttentionGeometry, Flash, TileConfig, causal_mask

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
    got = jax.jit(functools.partial(Flash(tile, q_block), causal=causal))(q, k, v)
    assert_matches_reference(got, reference(q, k, v, causal=causal))


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
    sch = Flash(tile, q_block).schedule(T, S, g, causal=True)
    assert (sch.tiles_past, sch.tiles_partial, sch.tiles_skipped) == _bruteforce_tiles(T, S, tile, q_block, True)
    q, k, v = random_qkv(6, T, S, g.num_heads, g.num_kv_heads, g.head_dim)
    assert executed_tiles(Flash(tile, q_block), q, k, v, causal=True) == sch.tiles_computed


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_causal_prefill_computes_lower_triangle(n):
    """T = S = n * b, q_block = tile = b: n(n+1)/2 tiles (n diagonal masked), n(n-1)/2 skipped."""
    b = 16
    sch = Flash(b, b).schedule(n * b, n * b, causal=True)
    assert sch.tiles_computed == n * (n + 1) // 2
    assert sch.tiles_partial == n and sch.tiles_skipped == n * (n - 1) // 2
    assert sch.gemm_flops == 4 * sch.tiles_computed * b * sch.num_heads * b * sch.head_dim
    no_skip = Flash(b, b, causal_skip=False).schedule(n * b, n * b, causal=True)
    assert no_skip.tiles_computed == n * n and no_skip.tiles_skipped == 0


def test_causal_skip_off_computes_future_tiles_and_still_matches():
    T, S, N, K, H = 40, 40, 4, 2, 8
    q, k, v = random_qkv(7, T, S, N, K, H)
    flash = Flash(8, 8, causal_skip=False)
    assert_matches_reference(jax.jit(functools.partial(flash, causal=True))(q, k, v), reference(q, k, v, causal=True))
    assert executed_tiles(flash, q, k, v, causal=True) == 25


def test_gqa_kv_tile_loads_independent_of_group():
    """ADR section 11.2: K/V tile reads do not depend on G; GEMM work scales with G; one GEMM per
    kv head serves the whole group (M = q_block * G rows; K/V operands are never repeated)."""
    T, S, K, H, tile, qb = 32, 96, 2, 16, 32, 16
    scheds = {G: Flash(tile, qb).schedule(T, S, AttentionGeometry(K * G, K, H), causal=True)
              for G in (1, 2, 8)}
    assert len({s.kv_tile_loads for s in scheds.values()}) == 1
    assert len({s.kv_bytes for s in scheds.values()}) == 1
    assert scheds[1].kv_tile_loads == 2 * K * scheds[1].tiles_computed
    for G, s in scheds.items():
        assert s.gemm_flops == G * scheds[1].gemm_flops
        q, k, v = random_qkv(8, T, S, K * G, K, H)
        jaxpr = jax.make_jaxpr(lambda q, k, v: Flash(tile, qb)(q, k, v, causal=True))(
            q, k, v).jaxpr
        shapes = dot_operand_shapes(jaxpr)
        assert shapes and all(lhs == (K, qb * G, min(tile, S)) or lhs == (K, qb * G, H) for lhs, _ in shapes)
        assert all(rhs == (tile, K, H) for _, rhs in shapes)  # the K / V tile, once per kv head
        assert executed_tiles(Flash(tile, qb), q, k, v, causal=True) == s.tiles_computed


@pytest.mark.parametrize("kw,name", [({"tile": 0}, "tile"), ({"q_block": -1}, "q_block"),
                                     ({"causal_skip": 1}, "causal_skip")], ids=["tile<=0", "q_block<=0", "skip"])
def test_flash_config_rejects_bad_knobs(kw, name):
    with pytest.raises(ValueError, match=name):
        Flash(**kw)


def test_tile_config_and_schedule_validate():
    with pytest.raises(ValueError, match="tile"):
        TileConfig(tile=0)
    with pytest.raises(ValueError, match="num_queries"):
        Flash().schedule(8, 4, causal=True)
