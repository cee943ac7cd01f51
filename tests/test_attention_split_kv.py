"""Decode-SP split-KV attention: equality with the dense reference over meshes / placements /
rotations, and the 2-level reduce-to-root against the ADR's verification plan (section 11.3)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _attention_util import (
    assert_matches_reference,
    executed_tiles,
    numpy_attention,
    random_qkv,
    reference,
    rel_err,
)

from jaxref.attention import MASK_LSE, AttentionGeometry, KVPlacement, SplitKV, reduce_plan
from jaxref.attention.core import finalize
from jaxref.attention.reduce import reduce_partials

# (T, S, N, K, H, tile, q_block, causal, C, P, placement, start_cube, start_pe, reduce)
CASES = {
    "R1-decode-G8": (1, 37, 8, 1, 16, 8, None, True, 1, 1, "round_robin", 0, 0, "tree"),
    "R2-decode-G2-contig-rot": (1, 50, 4, 2, 16, 16, None, False, 1, 2, "contiguous", 0, 1, "tree"),
    "R4-decode-G1-rr-rot": (1, 45, 2, 2, 8, 4, None, True, 2, 2, "round_robin", 1, 1, "tree"),
    "R8-prefill-causal-G2-contig-a2a": (40, 40, 4, 2, 8, 3, 8, True, 2, 4, "contiguous", 1, 3, "all_to_all"),
    "R16-decode-G8-rr": (1, 100, 8, 1, 16, 2, None, True, 4, 4, "round_robin", 3, 2, "tree"),
    "R128-llama3-70b-decode-rr": (1, 300, 64, 8, 128, 2, None, True, 16, 8, "round_robin", 5, 7, "tree"),
    "R128-prefill-contig": (9, 300, 8, 2, 8, 2, 3, True, 16, 8, "contiguous", 9, 4, "tree"),
}


def _config(case) -> tuple[SplitKV, bool]:
    _T, _S, _N, _K, _H, tile, q_block, causal, C, P, placement, sc, sp, red = case
    return SplitKV(tile=tile, q_block=q_block, num_cubes=C, pes_per_cube=P, placement=placement, start_cube=sc,
                   start_pe=sp, reduce=red), causal


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_split_kv_matches_reference(case):
    T, S, N, K, H = case[:5]
    q, k, v = random_qkv(10, T, S, N, K, H)
    cfg, causal = _config(case)
    got = jax.jit(functools.partial(cfg, causal=causal))(q, k, v)
    assert_matches_reference(got, reference(q, k, v, causal=causal))
    sch = cfg.schedule(T, S, AttentionGeometry(N, K, H), causal=causal)
    assert executed_tiles(cfg, q, k, v, causal=causal) == sch.tiles_computed
    assert sum(sch.rank_tokens) == S


def test_empty_ranks_and_fully_masked_rows_are_neutral():
    """Contiguous layout sized for 4x the context: most ranks hold nothing (MASK_LSE partials);
    a user mask fully masks some rows. Both must merge as neutral elements."""
    T, S, N, K, H = 3, 40, 4, 2, 8
    q, k, v = random_qkv(11, T, S, N, K, H)
    mask = np.ones((N, T, S), bool)
    mask[2, 1] = mask[:, 0] = False
    cfg = SplitKV(tile=4, num_cubes=4, pes_per_cube=4, placement="contiguous", capacity=4 * S, start_cube=2,
                  start_pe=1)
    sch = cfg.schedule(T, S, AttentionGeometry(N, K, H))
    assert sum(n == 0 for n in sch.rank_tokens) == 12  # B = 10 slots per rank: 4 frontier ranks hold all
    out, lse = jax.jit(lambda q, k, v: cfg(q, k, v, mask=mask))(q, k, v)
    assert_matches_reference((out, lse), reference(q, k, v, mask=mask))
    assert np.all(np.asarray(lse[:, 0]) == np.float32(MASK_LSE)) and lse[2, 1] == np.float32(MASK_LSE)
    assert np.all(np.asarray(out[0]) == 0)


def _simulate_holdings(plan):
    """Which ranks' keys each rank has merged after the plan: an independent set simulation."""
    R = plan.num_cubes * plan.pes_per_cube
    held = [{r} for r in range(R)]
    for rnd in plan.rounds:
        before = [set(h) for h in held]
        for src, dst, _ in rnd:
            held[dst] |= before[src] if plan.sends == "accumulated" else {src}
    return held


@pytest.mark.parametrize("reduce", ["tree", "all_to_all"])
def test_every_rank_state_matches_its_merged_key_set(reduce):
    """After the reduce each rank's normalised state equals dense attention over exactly the keys
    of the ranks it has merged; the tree leaves the full answer at one rank (the root) only."""
    T, S, N, K, H, C, P = 1, 40, 4, 2, 8, 4, 2
    q, k, v = random_qkv(12, T, S, N, K, H)
    cfg = SplitKV(tile=4, num_cubes=C, pes_per_cube=P, start_cube=1, start_pe=1, reduce=reduce)
    plan = cfg.reduce_plan
    reduced = jax.jit(lambda q, k, v: reduce_partials(cfg.partials(q, k, v), plan))(q, k, v)
    out, lse = finalize(reduced)  # [R, K, T, G, H]
    place = KVPlacement(num_cubes=C, pes_per_cube=P, capacity=S, start_cube=1, start_pe=1)
    owner = np.asarray(place.rank_of(np.arange(S)))
    holds = _simulate_holdings(plan)
    full = [r for r in range(C * P) if len(holds[r]) == C * P]
    assert full == ([plan.root] if reduce == "tree" else list(range(C * P)))
    for r, ranks in enumerate(holds):
        keys = np.flatnonzero(np.isin(owner, list(ranks)))
        want_out, want_lse = numpy_attention(q, k[keys], v[keys])
        got_out = jnp.transpose(out[r], (1, 0, 2, 3)).reshape(T, N, H)
        got_lse = jnp.transpose(lse[r], (0, 2, 1)).reshape(N, T)
        assert rel_err(got_out, want_out) < 1e-5 and rel_err(got_lse, want_lse) < 1e-5, r


@pytest.mark.parametrize("C,P", [(1, 1), (1, 8), (2, 8), (4, 2), (8, 8), (16, 8), (16, 1), (2, 4)])
def test_tree_reduce_rounds_match_adr_formula(C, P):
    """ceil(log2 P) Level-2 rounds + center-mesh depth over C Level-1 rounds; R - 1 messages; the
    result at exactly one rank; Level-2 messages stay in a CUBE, Level-1 ones cross one mesh link."""
    center_depth = {1: 0, 2: 1, 4: 2, 8: 3, 16: 4}[C]  # meshes 1x1, 1x2, 2x2, 2x4, 4x4
    plan = reduce_plan(C, P)
    assert plan.level2_rounds == math.ceil(math.log2(P)) and plan.level1_rounds == center_depth
    assert plan.num_rounds == math.ceil(math.log2(P)) + center_depth
    assert plan.messages(2) == C * (P - 1) and plan.messages(1) == C - 1
    assert plan.holders == (plan.root,) and plan.root % P == 0
    rows, cols = plan.cube_mesh
    assert rows * cols == C
    for rnd in plan.rounds:
        for src, dst, level in rnd:
            if level == 2:
                assert src // P == dst // P
            else:
                (r0, c0), (r1, c1) = divmod(src // P, cols), divmod(dst // P, cols)
                assert src % P == dst % P == 0 and abs(r0 - r1) + abs(c0 - c1) == 1
    base = reduce_plan(C, P, kind="all_to_all")
    assert base.num_rounds == C * P - 1 and base.messages() == C * P * (C * P - 1)
    sch = SplitKV(num_cubes=C, pes_per_cube=P).schedule(1, 4 * C * P)
    assert (sch.reduce_rounds, sch.reduce_messages) == (plan.num_rounds, C * P - 1)
    assert sch.payload_bytes == 8 * 1 * 8 * (128 + 2) * 4  # Llama3-70B: K * T * G * (H + 2) fp32
    assert sch.reduce_bytes == sch.reduce_messages * sch.payload_bytes


def test_split_kv_schedule_tiles_and_balance():
    """Round-robin: rank token counts within one; decode tiles = sum over ranks of ceil(n_r / tile);
    K/V tile loads independent of G."""
    S, tile = 1003, 16
    cfg = SplitKV(tile=tile, num_cubes=4, pes_per_cube=8, start_cube=3, start_pe=5)
    g8 = cfg.schedule(1, S, causal=True)
    assert max(g8.rank_tokens) - min(g8.rank_tokens) <= 1 and sum(g8.rank_tokens) == S
    assert g8.tiles_computed == sum(-(-n // tile) for n in g8.rank_tokens)
    assert g8.critical_path_tiles == max(-(-n // tile) for n in g8.rank_tokens)
    g1 = cfg.schedule(1, S, AttentionGeometry(8, 8, 128), causal=True)
    assert g1.kv_tile_loads == g8.kv_tile_loads == 2 * 8 * g8.tiles_computed
    assert g8.gemm_flops == 8 * g1.gemm_flops


BAD = {
    "tile<=0": ({"tile": 0}, "tile"),
    "mesh-mismatch": ({"num_cubes": 8, "cube_mesh": (2, 3)}, "cube_mesh"),
    "mesh-outside-SIP": ({"num_cubes": 8, "cube_mesh": (1, 8)}, "cube_mesh"),
    "C-not-rectangular-in-SIP": ({"num_cubes": 5}, "num_cubes"),
    "P>8": ({"pes_per_cube": 16}, "pes_per_cube"),
    "start_cube": ({"num_cubes": 2, "start_cube": 2}, "start_cube"),
    "start_pe": ({"pes_per_cube": 2, "start_pe": -1}, "start_pe"),
    "placement": ({"placement": "random"}, "placement"),
    "reduce": ({"reduce": "ring"}, "reduce"),
    "capacity<=0": ({"capacity": 0}, "capacity"),
}


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_split_kv_config_rejects_bad_knobs(bad):
    kw, name = bad
    with pytest.raises(ValueError, match=name):
        SplitKV(**kw)


def test_capacity_below_the_keys_is_refused_at_the_call():
    q, k, v = random_qkv(0, 1, 10, 4, 2, 8)
    with pytest.raises(ValueError, match="capacity=5 must be an int >= the number of keys S=10"):
        SplitKV(capacity=5)(q, k, v)


@pytest.mark.parametrize("C,P", [(1, 1), (1, 8), (2, 4), (3, 8), (3, 1)])
def test_all_reduce_plan_is_recursive_doubling_and_every_rank_gets_the_answer(C, P):
    """The one-shot all-reduce: log2 R exchange rounds for R = 2^m (plus a fold-in and a hand-back
    round otherwise); simulated on sets, every rank ends holding every rank's keys; numerically every
    rank's state is the full attention (the max + sum over ranks)."""
    R = C * P
    plan = reduce_plan(C, P, kind="all_reduce")
    m = 1 << (R.bit_length() - 1)
    assert plan.num_rounds == int(math.log2(m)) + (2 if R != m else 0) and plan.holders == tuple(range(R))
    held = [{r} for r in range(R)]
    for rnd in plan.rounds:
        before = [set(h) for h in held]
        for src, dst, level in rnd:
            held[dst] |= before[src]
            assert level == (2 if src // P == dst // P else 1)
    assert all(h == set(range(R)) for h in held)
    T, S, N, K, H = 1, 23, 4, 2, 8
    q, k, v = random_qkv(31, T, S, N, K, H)
    cfg = SplitKV(tile=4, num_cubes=C, pes_per_cube=P, reduce="all_reduce")
    out, lse = finalize(reduce_partials(cfg.partials(q, k, v), plan))
    want_out, want_lse = numpy_attention(q, k, v)
    for r in range(R):
        assert rel_err(jnp.transpose(out[r], (1, 0, 2, 3)).reshape(T, N, H), want_out) < 1e-5
        assert rel_err(jnp.transpose(lse[r], (0, 2, 1)).reshape(N, T), want_lse) < 1e-5
    assert_matches_reference(cfg(q, k, v), reference(q, k, v))
    sch = cfg.schedule(1, 4 * R)
    assert sch.reduce_rounds == plan.num_rounds and sch.reduce_bytes == plan.messages() * sch.payload_bytes
