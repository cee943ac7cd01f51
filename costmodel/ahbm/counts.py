"""Tile, visit and reduce-path counts of the ADR-0060 schedules, in the one form the model uses.

The model needs the counts as functions of (S, TILE, C, P) that ``jit`` / ``vmap`` / ``grad``
can trace, and at S up to 1M where enumerating a prefill schedule tile by tile is impossible. So
each count below is a closed form in the schedule's own parameters; ``tests/test_ahbm_counts.py``
checks it equal to ``jaxref.attention``'s ``SplitKV.schedule`` / ``Flash.schedule`` /
``Ring.plan`` / ``reduce_plan`` at integer points. With ``relax`` the ceilings are ``sceil``
(continuous, equal at integers). Reduce paths are read off ``reduce_plan``'s rounds directly.

A *visit* is one q block's sweep of consecutive tiles on one PE (its own Q load / store and
pipeline fill); ``single`` counts visits of exactly one tile (no steady state).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from costmodel.smooth import Relax, sceil, smin
from jaxref.attention import reduce_plan
from jaxref.attention.reduce import cube_mesh_shape

C_GRID = (1, 2, 4, 8, 16)  # decode-SP reduce tables: log2 C = 0..4
P_GRID = (1, 2, 4, 8)


def lane_tile(S, lanes, tile, *, relax: Relax | None):
    """(keys per lane, effective tile): the longest lane holds ceil(S / lanes) keys (round-robin
    balances to one token) and the schedules cap the tile at the lane's buffer."""
    keys = sceil(S / lanes, relax=relax)
    return keys, jnp.minimum(tile, keys) if relax is None else smin(tile, keys, relax=Relax(relax.tau_int, 1.0))


def decode_counts(S, tile, ranks, *, relax: Relax | None):
    """Decode (no-SP: ranks = 1): tiles per visit of the critical rank
    (= SplitKV.schedule(...).critical_path_tiles) and the effective tile."""
    keys, te = lane_tile(S, ranks, tile, relax=relax)
    return sceil(keys / te, relax=relax), te


def prefill_counts(S, tile, *, causal_skip: bool, relax: Relax | None):
    """Prefill no-SP (T = S, q block = tile): (tiles computed, visits, single-tile visits, tile).

    q block i sees tiles 0..i under causal skip: tiles = n (n + 1) / 2, one visit per q block and
    one single-tile visit (block 0); without the skip every block sweeps all n tiles.
    """
    _, te = lane_tile(S, 1, tile, relax=relax)
    n = sceil(S / te, relax=relax)
    if causal_skip:
        return n * (n + 1) / 2, n, jnp.ones_like(n), te
    return n * n, n, jnp.where(n <= 1, n, 0.0), te


def _pos_sum(A, P, *, relax):
    """sum_{k >= 0} max(A - k P, 0): terms A, A - P, ... while positive."""
    m = jnp.maximum(sceil(A / P, relax=relax), 0.0)
    return jnp.where(A > 0, m * A - P * m * (m - 1) / 2, 0.0)


def ring_block_counts(S, tile, C, P, b, *, relax: Relax | None):
    """Prefill-SP ring, KV block b (contiguous layout): work of the busiest PE of the CUBE holding it.

    n = S / TILE q blocks (q block = TILE rows), nb = n / C tiles per block; q block i sees
    v_i = clip(i - b nb + 1, 0, nb) tiles of block b. PE p takes q blocks i = p mod P; v is
    non-decreasing in i, so the PE holding i = n - 1 is the busiest: with A = n - b nb its visits
    are A, A - P, ... clipped to [0, nb]. Returns (tiles, visits, single-tile visits).
    """
    n = S / tile
    nb = n / C
    A = n - b * nb
    tiles = _pos_sum(A, P, relax=relax) - _pos_sum(A - nb, P, relax=relax)
    visits = jnp.maximum(sceil(A / P, relax=relax), 0.0)
    single = jnp.where((A >= 1) & (jnp.abs(jnp.round(A - 1) % P) < 0.5) & (nb >= 1), 1.0, 0.0)
    return tiles, visits, jnp.where(nb == 1, visits, single)


# ---- reduce paths ----------------------------------------------------------------------------------
def mesh_of(C: int, orientation: str) -> tuple[int, int]:
    """(rows, cols) of a C-CUBE Group's sub-mesh: 'wide' (rows <= cols, reduce_plan's default) or
    'tall' (its transpose)."""
    rows, cols = cube_mesh_shape(C)
    return (rows, cols) if orientation == "wide" else (cols, rows)


def xy_route(a: int, b: int, cols: int) -> list[tuple]:
    """Directed CUBE-NOC links of the dimension-ordered route a -> b (columns first, then rows)."""
    (r, c), (r1, c1) = divmod(a, cols), divmod(b, cols)
    links = []
    while c != c1:
        n = c + (1 if c1 > c else -1)
        links.append(((r, c), (r, n)))
        c = n
    while r != r1:
        n = r + (1 if r1 > r else -1)
        links.append(((r, c), (n, c)))
        r = n
    return links


def _hops(src: int, dst: int, P: int, cols: int) -> int:
    a, b = src // P, dst // P
    return abs(a // cols - b // cols) + abs(a % cols - b % cols)


@functools.cache
def reduce_rounds(C: int, P: int, kind: str, orientation: str = "wide") -> tuple:
    """``jaxref.attention.reduce_plan``'s rounds as (src, dst, level, hops, units) messages.

    ``units``: the message's transfer time in multiples of payload / link rate under contention
    within its round: the most messages of the round sharing one of its resources (Level-1:
    the source CUBE's NOC injection port, each directed link of its XY route, the destination's
    ejection port; Level-2: the sender's IPCQ tx and the receiver's rx port). For ``all_reduce``
    the rounds are the plan's recursive-doubling exchanges; every received message is merged.
    """
    plan = reduce_plan(C, P, kind=kind, cube_mesh=mesh_of(C, orientation))
    cols = plan.cube_mesh[1]
    rounds = []
    for rnd in plan.rounds:
        use: dict = {}
        res = []
        for s, d, lv in rnd:
            if lv == 2:
                r = [("tx", s), ("rx", d)]
            else:
                a, b = s // P, d // P
                r = [("inj", a), ("ej", b), *(("link", ln) for ln in xy_route(a, b, cols))]
            res.append(r)
            for x in r:
                use[x] = use.get(x, 0) + 1
        rounds.append(tuple((s, d, lv, _hops(s, d, P, cols), max(use[x] for x in r))
                            for (s, d, lv), r in zip(rnd, res, strict=True)))
    return tuple(rounds), plan.root, plan.sends


PATH_COLUMNS = ("l2_messages", "l2_units", "l1_messages", "l1_units", "hops", "merges")


@functools.cache
def reduce_paths(C: int, P: int, kind: str, orientation: str = "wide") -> np.ndarray:
    """Critical-path candidates of the data-driven reduce: rows over ``PATH_COLUMNS``. Every rank
    runs its rounds in order: sends (its current state) go out at once, each receive waits for
    the message and merges it on the rank's MATH engine. The latency is the max over rows of
    the row's linear cost; only Pareto-maximal rows are kept."""
    rounds, root, _ = reduce_rounds(C, P, kind, orientation)
    R = C * P
    zero = (0,) * len(PATH_COLUMNS)
    front = {r: {zero} for r in range(R)}  # paths ending at rank r's current time
    for rnd in rounds:
        out = {s: front[s] for s, *_ in rnd}  # a send leaves when its rank reaches this round
        for s, d, lv, h, u in rnd:
            msg = (1, u, 0, 0, 0, 0) if lv == 2 else (0, 0, 1, u, h, 0)
            arrive = {tuple(a + b for a, b in zip(p, msg)) for p in out[s]}
            front[d] = {tuple(a + b for a, b in zip(p, (0, 0, 0, 0, 0, 1))) for p in front[d] | arrive}
        front = {r: _pareto(paths) for r, paths in front.items()}
    ends = set().union(*front.values()) if kind != "tree" else front[root]
    return np.array(sorted(_pareto(ends)), dtype=np.float64)


def _pareto(paths: set) -> set:
    return {p for p in paths if not any(q != p and all(a >= b for a, b in zip(q, p)) for q in paths)}


@functools.cache
def reduce_table(kind: str, orientation: str = "wide") -> np.ndarray:
    """[len(C_GRID), len(P_GRID), rows, len(PATH_COLUMNS)] of ``reduce_paths`` (zero rows cost 0)."""
    tabs = [[reduce_paths(C, P, kind, orientation) for P in P_GRID] for C in C_GRID]
    k = max(t.shape[0] for row in tabs for t in row)
    out = np.zeros((len(C_GRID), len(P_GRID), k, len(PATH_COLUMNS)))
    for i, row in enumerate(tabs):
        for j, t in enumerate(row):
            out[i, j, : t.shape[0]] = t
    return out


def round_count(C: int, P: int, kind: str, orientation: str = "wide") -> int:
    """Rounds of the reduce plan (the message level the tree's depth counts)."""
    return len(reduce_rounds(C, P, kind, orientation)[0])


def link_load(C: int, P: int, kind: str, orientation: str = "wide") -> float:
    """Sum over rounds of the round's most-loaded Level-1 resource (messages): the CUBE-NOC
    roofline of the reduce in units of payload / link rate."""
    rounds, _, _ = reduce_rounds(C, P, kind, orientation)
    return float(sum(max((u for *_, lv, _h, u in rnd if lv == 1), default=0) for rnd in rounds))
