"""The model's closed-form counts equal jaxref.attention's schedules at integer points."""

import itertools
import math

import numpy as np
import pytest

from costmodel.ahbm import counts
from costmodel.smooth import Relax
from jaxref.attention import Flash, KVPlacement, Ring, SplitKV, reduce_plan


@pytest.mark.parametrize("S,tile,C,P", [(1024, 128, 1, 1), (1000, 64, 2, 4), (4096, 128, 8, 8), (777, 32, 4, 2),
                                        (96, 256, 16, 8), (65536, 512, 16, 8)])
def test_decode_tiles_match_split_kv_schedule(S, tile, C, P):
    sched = SplitKV(tile=tile, num_cubes=C, pes_per_cube=P).schedule(1, S)
    n, te = counts.decode_counts(float(S), float(tile), float(C * P), relax=None)
    assert float(n) == sched.critical_path_tiles
    assert float(te) == min(tile, -(-S // (C * P)))


@pytest.mark.parametrize("S,tile", [(1024, 128), (512, 32), (256, 256), (2048, 64)])
@pytest.mark.parametrize("skip", [True, False])
def test_prefill_tiles_match_flash_schedule(S, tile, skip):
    sched = Flash(tile, tile, causal_skip=skip).schedule(S, S, causal=True)
    tiles, visits, single, _ = counts.prefill_counts(float(S), float(tile), causal_skip=skip, relax=None)
    assert float(tiles) == sched.tiles_computed
    assert float(visits) == sched.num_q_blocks
    per_block = np.bincount([qi for qi, _, kind in sched.tiles if kind != "future"], minlength=sched.num_q_blocks)
    assert float(single) == int((per_block == 1).sum())


@pytest.mark.parametrize("S,tile,C,P", [(1024, 32, 8, 1), (1024, 32, 8, 4), (2048, 64, 8, 8), (512, 64, 2, 3),
                                        (1024, 128, 8, 2), (1000, 64, 8, 4), (8193, 64, 8, 3), (3000, 64, 8, 8),
                                        (348, 128, 8, 8), (256, 64, 8, 8), (450, 64, 8, 2), (700, 128, 8, 3)])
def test_ring_busiest_pe_matches_ring_plan(S, tile, C, P):
    """Per step and CUBE, the busiest PE (q block i on PE i mod P) of the plan = the closed form;
    at small S (a ring block shorter than the tile) the q blocks keep ``tile`` rows while the KV
    tile shrinks to the block."""
    _, _, plans = Ring(tile, tile, num_cubes=C).plan(S, S, causal=True)
    q_block, kv_tile = counts.ring_tiles(float(S), float(tile), C, relax=None)
    assert (float(q_block), float(kv_tile)) == (plans[0].q_block, plans[0].tile)
    for step, plan in enumerate(plans):
        for cube in range(C):
            per_pe = [[0, 0, 0, 0] for _ in range(P)]  # tiles, visits, single-tile visits, whole-block visits
            nb = sum(1 for k in plan.tile_keys[cube] if k > 0)
            by_q = {}
            for lane, qi, _ in plan.computed:
                if lane == cube:
                    by_q[qi] = by_q.get(qi, 0) + 1
            for qi, n in by_q.items():
                acc = per_pe[qi % P]
                acc[0] += n
                acc[1] += 1
                acc[2] += n == 1
                acc[3] += n == nb
            n = plans[0].num_q_blocks  # the PEs holding the last (ragged) q block and the one before
            for top in (0, 1) if P > 1 else (0,):
                got = counts.ring_block_counts(float(S), q_block, kv_tile, C, float(P), (cube - step) % C,
                                               top=top, relax=None)
                want = per_pe[(n - 1 - top) % P]
                assert [float(x) for x in got[:4]] == want, (step, cube, top)  # [3]: visits ending on the ragged tile
                assert float(got[4]) == by_q.get(n - 1 - top, 0), (step, cube, top)  # the top q block's tiles
            # the PE holding q block n - 1 sweeps the most tiles
            assert max(a[0] for a in per_pe) == per_pe[(n - 1) % P][0]


@pytest.mark.parametrize("C", counts.C_GRID)
@pytest.mark.parametrize("P", counts.P_GRID)
def test_tree_rounds_are_log2p_plus_center_mesh_depth(C, P):
    rows, cols = reduce_plan(C, P).cube_mesh
    expect = math.ceil(math.log2(P)) + cols // 2 + rows // 2
    assert counts.round_count(C, P, "tree") == expect
    assert counts.round_count(C, P, "all_to_all") == C * P - 1
    R = C * P  # all-reduce: recursive doubling, log2 R exchange rounds (+2 when R is not a power of two)
    assert counts.round_count(C, P, "all_reduce") == math.ceil(math.log2(R)) + (0 if R & (R - 1) == 0 else 2)
    # the critical path of the tree is one message per round, all one hop
    paths = counts.reduce_paths(C, P, "tree")
    col = {name: i for i, name in enumerate(counts.PATH_COLUMNS)}
    assert paths[:, col["l2_messages"]].max() + paths[:, col["l1_messages"]].max() == expect
    assert (paths[:, col["hops"]] == paths[:, col["l1_messages"]]).all()


@pytest.mark.parametrize("C,P", [(8, 8), (4, 8), (8, 2), (16, 4)])
def test_all_reduce_contention_counts_messages_sharing_a_cube_port(C, P):
    """Recursive doubling at C x P: in a cross-CUBE round every PE of a CUBE sends to the partner
    CUBE, so P messages share its NOC injection port (counted here from reduce_plan directly)."""
    plan = reduce_plan(C, P, kind="all_reduce")
    rounds, _, _ = counts.reduce_rounds(C, P, "all_reduce")
    for rnd_plan, rnd in zip(plan.rounds, rounds, strict=True):
        per_src_cube = {}
        for s, d, lv in rnd_plan:
            if lv == 1:
                per_src_cube[s // P] = per_src_cube.get(s // P, 0) + 1
        last_units = {}  # FIFO: the last message through a CUBE's injection port waits for all of them
        for s, d, lv, h, units in rnd:
            if lv == 1:
                last_units[s // P] = max(last_units.get(s // P, 0), units)
                assert h >= 1
            else:
                assert units == 1  # one message per PE port and round in recursive doubling
        assert all(last_units[a] >= n for a, n in per_src_cube.items())
    assert max(u for rnd in rounds for *_, lv, _h, u in rnd if lv == 1) >= P
    # the tree never shares a resource more than twice (two children converging on one CUBE)
    tree, _, _ = counts.reduce_rounds(C, P, "tree")
    assert max(u for rnd in tree for *_, u in rnd) <= 2


def test_relaxed_counts_equal_exact_at_integers_and_are_continuous():
    relax = Relax()
    for S, tile, R in [(4096.0, 128.0, 64.0), (1024.0, 64.0, 8.0), (65536.0, 32.0, 2.0)]:  # integer ratios
        exact = counts.decode_counts(S, tile, R, relax=None)[0]
        assert abs(float(counts.decode_counts(S, tile, R, relax=relax)[0]) - float(exact)) < 1e-3
    xs = np.linspace(100.0, 300.0, 401)
    ys = np.array([float(counts.prefill_counts(x * 32, 32.0, causal_skip=True, relax=relax)[0]) for x in xs])
    assert np.all(np.diff(ys) >= -1e-3) and np.max(np.abs(np.diff(ys))) < 400


@pytest.mark.parametrize("C,P", [(2, 2), (4, 2), (8, 8), (16, 8), (1, 8)])
@pytest.mark.parametrize("placement", ["round_robin", "contiguous"])
def test_rank_order_lists_ranks_by_falling_key_count_of_kv_placement(C, P, placement):
    """counts.rank_order against KVPlacement.valid_len: round-robin, the first S mod R ranks of the
    order hold q + 1 keys and the rest q; contiguous, ranks fill in order (full, one partial, empty)."""
    R = C * P
    order = counts.rank_order(C, P, placement)
    assert sorted(order) == list(range(R))
    for S in (R * 37 + 5, R + 1, 3 * R - 1, max(R // 2, 1), 1000):
        cap = S if placement == "round_robin" else 2 * S + 3
        pl = KVPlacement(num_cubes=C, pes_per_cube=P, capacity=cap, layout=placement)
        keys = [pl.valid_len(S, r) for r in order]
        assert sum(keys) == S
        assert all(a >= b for a, b in itertools.pairwise(keys))  # the order's key counts never rise
        if placement == "round_robin":
            q, t = divmod(S, R)
            assert keys == [q + 1] * t + [q] * (R - t)


@pytest.mark.parametrize("C,P,kind", [(2, 2, "tree"), (4, 2, "all_to_all"), (4, 8, "all_reduce"), (8, 8, "tree")])
def test_segment_tables_are_unions_of_the_ranks_paths(C, P, kind):
    """prefix t / single t / suffix t hold the Pareto rows of ranks order[:t] / order[t] / order[t:]:
    at positive column costs their max is the max over those ranks' own rows, exactly where the
    union needs no more than the front cap's rows and a lower bound within 2% where it is capped;
    the whole prefix is reduce_paths (every rank ending its sweep at once)."""
    rng = np.random.default_rng(C * P)
    i, j = counts.C_GRID.index(C), counts.P_GRID.index(P)
    R = C * P
    per = counts.origin_paths(C, P, kind)
    order = counts.rank_order(C, P, "round_robin")
    rows, nonempty = counts.segment_tables(kind, "wide", "round_robin")

    def check(table_rows, ranks, cost):
        want = max(float((per[r] @ cost).max()) for r in ranks)
        got = float((table_rows @ cost).max())
        assert want * 0.98 <= got <= want * (1 + 1e-12), (ranks, got, want)
        if len(ranks) == 1:  # one rank's own rows: exact
            assert got == pytest.approx(want, rel=1e-12)

    for _ in range(5):
        cost = rng.uniform(0.01, 1.0, len(counts.PATH_COLUMNS))
        for t in (0, 1, R // 2, R - 1, R):
            if t:
                check(rows[i, j, 0, t], order[:t], cost)
            if t < R:
                check(rows[i, j, 1, t], order[t:t + 1], cost)
                check(rows[i, j, 2, t], order[t:], cost)
            assert nonempty[i, j, 0, t] == (t > 0) and nonempty[i, j, 2, t] == (t < R)
        full = float((counts.reduce_paths(C, P, kind) @ cost).max())
        assert float((rows[i, j, 0, R] @ cost).max()) == pytest.approx(full, rel=0.02)


@pytest.mark.parametrize("S,tile,P", [(348, 64, 2), (572, 64, 4), (1160, 128, 8), (1382, 64, 2), (3000, 64, 4),
                                      (4976, 128, 8), (6400, 128, 4), (8193, 64, 8)])
def test_ring_block_masks_equal_the_plans_partial_tiles(S, tile, P):
    """``counts.ring_block_masks`` against ``Ring.plan``'s partial items for the busiest PE (the one
    holding the last q block, and the one holding the one before) of every block: visits ending on a
    partial diagonal tile, visits ending on a partial (not ragged) block-end tile, visits whose
    tile before the last is partial."""
    from costmodel.ahbm.sim.kernels import lane_tiles

    C = 8
    _, _, plans = Ring(tile, tile, num_cubes=C).plan(S, S, causal=True)
    nq = plans[0].num_q_blocks
    rows, te = counts.ring_tiles(float(S), float(tile), C, relax=None)
    checked = 0
    for top in (0, 1):
        pe = (nq - 1 - top) % P
        for s, plan in enumerate(plans):
            for lane in range(C):
                tiles = [k for k in plan.tile_keys[lane] if k > 0]
                ragged = bool(tiles) and tiles[-1] < plan.tile
                got = {"last": 0, "end": 0, "mid": 0}
                for (ln, qi), (keys, masked) in lane_tiles(plan).items():
                    if ln != lane or qi % P != pe:
                        continue
                    ends_block = len(keys) == len(tiles)
                    got["last"] += (not ends_block) and masked[-1]
                    got["end"] += ends_block and masked[-1] and not ragged
                    got["mid"] += len(keys) >= 2 and masked[-2]
                want = counts.ring_block_masks(float(S), rows, te, C, float(P), float((lane - s) % C), top=top,
                                               relax=None)
                assert {k: float(v) for k, v in want.items()} == {k: float(v) for k, v in got.items()}, (top, s, lane)
                checked += sum(got.values())
    assert checked > 0
