"""Property tests of the KV placement maps (ADR sections 0, 2.1, 2.2, B item 5)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxref.attention import KVPlacement


@st.composite
def placements(draw, layout=None):
    C = draw(st.integers(1, 16))
    P = draw(st.integers(1, 8))
    return KVPlacement(num_cubes=C, pes_per_cube=P, capacity=draw(st.integers(1, 700)),
                       layout=draw(st.sampled_from(["round_robin", "contiguous"])) if layout is None else layout,
                       start_cube=draw(st.integers(0, C - 1)), start_pe=draw(st.integers(0, P - 1)))


@settings(max_examples=150, deadline=None)
@given(placements())
def test_every_token_has_one_rank_and_slot_and_global_of_inverts(pl):
    tokens = np.arange(pl.capacity)
    rank, slot = pl.rank_of(tokens), pl.slot_of(tokens)
    assert np.all((0 <= rank) & (rank < pl.num_ranks)) and np.all((0 <= slot) & (slot < pl.slots_per_rank))
    pairs = rank * pl.slots_per_rank + slot
    assert len(np.unique(pairs)) == pl.capacity  # injective: no two tokens share a (rank, slot)
    assert np.array_equal(pl.global_of(rank, slot), tokens)
    cube, pe = pl.cube_pe_of(tokens)
    assert np.array_equal(cube * pl.pes_per_cube + pe, rank)


@settings(max_examples=150, deadline=None)
@given(placements(), st.data())
def test_per_rank_slots_are_dense_and_valid_len_counts_them(pl, data):
    counter = data.draw(st.integers(0, pl.capacity))
    tokens = np.arange(counter)
    rank, slot = pl.rank_of(tokens), pl.slot_of(tokens)
    for r in range(pl.num_ranks):
        mine = np.sort(slot[rank == r])
        assert np.array_equal(mine, np.arange(len(mine)))  # slots 0 .. n-1: dense, contiguous DMA
        assert pl.valid_len(counter, r) == len(mine)
        assert np.all(np.diff(tokens[rank == r]) > 0)  # appended in position order
    table, valid = pl.shard_table(counter)
    assert valid.sum() == counter and np.array_equal(np.sort(table[valid]), tokens)


@settings(max_examples=150, deadline=None)
@given(placements(layout="round_robin"), st.data())
def test_round_robin_balances_to_within_one_token(pl, data):
    counter = data.draw(st.integers(0, pl.capacity))
    counts = np.asarray(pl.valid_len(counter, np.arange(pl.num_ranks)))
    assert counts.sum() == counter and counts.max() - counts.min() <= 1
    if counter < pl.capacity:  # the decode writer of the next token is the next rank in rotation
        assert pl.writer_of(counter) == pl.rank_of(counter)


def test_round_robin_follows_adr_section0_formula():
    """Token i: CUBE (start_cube + i) mod C, PE (start_pe + i // C) mod P, slot i // (C P)."""
    C, P, sc, sp = 4, 8, 3, 5
    pl = KVPlacement(num_cubes=C, pes_per_cube=P, capacity=1000, start_cube=sc, start_pe=sp)
    for i in (0, 1, 3, 4, 31, 32, 33, 999):
        assert pl.cube_pe_of(i) == ((sc + i) % C, (sp + i // C) % P)
        assert pl.slot_of(i) == i // (C * P)


def test_contiguous_blocks_follow_adr_section21():
    """Logical rank l = cube_local * P + pe_local owns [l B, (l + 1) B), B = ceil(capacity / R)."""
    C, P, cap = 2, 4, 50
    pl = KVPlacement(num_cubes=C, pes_per_cube=P, capacity=cap, layout="contiguous", start_cube=1, start_pe=2)
    B = 7
    assert pl.slots_per_rank == B
    for i in range(cap):
        ell = i // B
        cube_local, pe_local = divmod(ell, P)
        assert pl.cube_pe_of(i) == ((cube_local + 1) % C, (pe_local + 2) % P) and pl.slot_of(i) == i % B
    assert [pl.valid_len(20, pl.rank_of(t)) for t in (0, 7, 14, 21)] == [7, 7, 6, 0]


@pytest.mark.parametrize("kw,name", [
    ({"num_cubes": 0, "pes_per_cube": 1, "capacity": 4}, "num_cubes"),
    ({"num_cubes": 2, "pes_per_cube": 1, "capacity": 0}, "capacity"),
    ({"num_cubes": 2, "pes_per_cube": 2, "capacity": 4, "start_pe": 2}, "start_pe"),
    ({"num_cubes": 2, "pes_per_cube": 2, "capacity": 4, "layout": "zigzag"}, "layout"),
])
def test_placement_rejects_bad_config(kw, name):
    with pytest.raises(ValueError, match=name):
        KVPlacement(**kw)


def test_placement_rejects_out_of_range_queries():
    pl = KVPlacement(num_cubes=2, pes_per_cube=2, capacity=10)
    with pytest.raises(ValueError, match="token"):
        pl.rank_of(10)
    with pytest.raises(ValueError, match="rank"):
        pl.global_of(4, 0)
    with pytest.raises(ValueError, match="slot"):
        pl.global_of(0, 3)
    with pytest.raises(ValueError, match="counter"):
        pl.valid_len(11, 0)
