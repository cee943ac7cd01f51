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

import collections
import functools
import heapq
import itertools

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


def ring_tiles(S, tile, C, *, relax: Relax | None):
    """(q block rows, KV tile) of the prefill-SP ring (``Ring(tile, tile)``'s plan): q blocks of
    ``tile`` query rows (capped at T = S) and KV tiles of ``tile`` keys capped at a ring block's
    ceil(S / C) keys, so at small S a q block spans several KV blocks' worth of rows."""
    rows = jnp.minimum(tile, S) if relax is None else smin(tile, S, relax=Relax(relax.tau_int, 1.0))
    return rows, lane_tile(S, C, tile, relax=relax)[1]


def ring_block_counts(S, q_block, tile, C, P, b, *, top=0, relax: Relax | None):
    """Prefill-SP ring, KV block b (contiguous layout): work of the busiest PE of the CUBE holding it.

    ``q_block`` / ``tile``: ``ring_tiles``. n = S / q_block q blocks, nb = B / tile tiles per block
    of B = S / C keys; q block i sees v_i = clip(floor(((i + 1) q_block - 1 - b B) / tile) + 1,
    0, nb) tiles of block b. Either tile = q_block, then v_i = clip(i + 1 - ceil((1 + b B) /
    tile) + 1, 0, nb) (exact at ragged S: n = ceil(S / q_block), blocks of B = ceil(S / C) keys
    in nb = ceil(B_b / tile) tiles), or tile = B < q_block, then nb <= 1 and v_i is 1 from the
    first q block reaching the block's first key on: both are clip(i - i0 + 1, 0, nb) with
    A = n - i0 = n + 1 - ceil((1 + b B) / q_block). PE p takes q blocks i = p mod P; v is
    non-decreasing in i, so the PE holding i = n - 1 is the busiest: its visits are A, A - P, ...
    clipped to [0, nb]. ``top`` = 1: the PE holding q block n - 2 instead (A - 1, A - 1 - P, ...).
    Returns (tiles, visits, single-tile visits, visits sweeping all nb tiles: those that end on
    the block's ragged last tile, the tiles of the PE's top q block's visit).
    """
    nb, A = ring_block_reach(S, q_block, tile, C, b, top=top, relax=relax)
    tiles = _pos_sum(A, P, relax=relax) - _pos_sum(A - nb, P, relax=relax)
    visits = jnp.maximum(sceil(A / P, relax=relax), 0.0)
    single = jnp.where((A >= 1) & (jnp.abs(jnp.round(A - 1) % P) < 0.5) & (nb >= 1), 1.0, 0.0)
    full = jnp.maximum(sceil((A - nb + 1.0) / P, relax=relax), 0.0)
    return (tiles, visits, jnp.where(nb == 1, visits, single), jnp.where(nb >= 1, jnp.minimum(full, visits), 0.0),
            jnp.clip(A, 0.0, nb))


def ring_block_reach(S, q_block, tile, C, b, *, top=0, relax: Relax | None):
    """(nb, A) of ``ring_block_counts``: block b's tiles and how many q blocks, from q block
    n - 1 - ``top`` down, reach into it (q block n - 1 - top - k sees u = A - k of its tiles)."""
    if relax is None:  # ragged S: blocks of ceil(S / C) keys (the last one shorter), the last q block ragged
        n = jnp.ceil(S / q_block)
        Bk = jnp.ceil(S / C)
        nb = jnp.ceil(jnp.clip(S - b * Bk, 0.0, Bk) / tile)
        A = n + 1.0 - jnp.ceil((1.0 + b * Bk) / q_block)  # q block i sees block b iff b Bk <= (i + 1) q_block - 1
    else:  # relaxed: the fractional counts (exact at S a multiple of C x tile, tile = q_block)
        nb = S / (C * tile)
        A = S / q_block - b * S / (C * q_block)
    return nb, A - top


def ring_block_masks(S, q_block, tile, C, P, b, *, top=0, relax: Relax | None) -> dict:
    """Partial (masked) tiles of the busiest PE's visits to KV block b, beyond the block's ragged
    last tile (``ring_block_counts``' arguments; a visit's partial tiles are its last one or two).

    The PE's visits reach u = A, A - P, ... >= 1 tiles into the block (clipped to nb). A visit
    with u < nb ends on its q block's diagonal tile: partial ('last'). A visit with u >= nb ends
    on the block's last tile [s_L, e_L], partial for the q block holding s_L (u = nb) and, when
    e_L passes the next q block's first row, for that one too (u = nb + 1) ('end'; the ragged last
    tile is partial for every visit anyway). With q blocks of R = tile rows and the block's tiles
    starting at offset o = b B mod R inside a q block, the tile before the diagonal one is partial
    too when o >= 2 (its last key passes the q block's first row; visits with 2 <= u <= nb: 'mid').
    A ragged last tile (fewer keys than the tile) is partial for every visit, so 'end' is 0 then.
    Relaxed: aligned blocks (o = 0, no crossing). Returns {'last', 'end', 'mid'} visit counts.
    """
    nb, A = ring_block_reach(S, q_block, tile, C, b, top=top, relax=relax)

    def ge(x):  # visits with u >= x
        return jnp.maximum(sceil((A - x + 1.0) / P, relax=relax), 0.0)

    at_end, after_end = ge(nb) - ge(nb + 1.0), ge(nb + 1.0) - ge(nb + 2.0)
    if relax is not None:
        return {"last": ge(1.0) - ge(nb), "end": at_end, "mid": 0.0 * A}
    Bk = jnp.ceil(S / C)
    b_keys = jnp.clip(S - b * Bk, 0.0, Bk)
    s_last = b * Bk + jnp.maximum(nb - 1.0, 0.0) * tile
    e_last = b * Bk + b_keys - 1.0
    cross = e_last > (jnp.floor(s_last / q_block) + 1.0) * q_block
    off = b * Bk - jnp.floor(b * Bk / q_block) * q_block
    ragged = b_keys - jnp.maximum(nb - 1.0, 0.0) * tile < tile  # partial for every visit: not counted here
    return {"last": ge(1.0) - ge(nb), "end": jnp.where(ragged, 0.0, at_end + jnp.where(cross, after_end, 0.0)),
            "mid": jnp.where((off >= 2.0) & (nb >= 2.0), ge(2.0) - ge(nb + 1.0), 0.0)}


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

    ``units``: the message's delivery time in multiples of payload / link rate under FIFO
    contention within its round (the round's sends leave together, in plan order): the most
    messages of the round up to and including this one that share one of its resources (Level-1:
    the source CUBE's NOC injection port, each directed link of its XY route, the destination's
    ejection port; Level-2: the sender's IPCQ tx and the receiver's rx port), so the k-th message
    through a shared port lands after k transfers and its receiver proceeds then. For ``all_reduce``
    the rounds are the plan's recursive-doubling exchanges; every received message is merged.
    """
    plan = reduce_plan(C, P, kind=kind, cube_mesh=mesh_of(C, orientation))
    cols = plan.cube_mesh[1]
    rounds = []
    for rnd in plan.rounds:
        use: dict = {}
        units = []
        for s, d, lv in rnd:
            if lv == 2:
                r = [("tx", s), ("rx", d)]
            else:
                a, b = s // P, d // P
                r = [("inj", a), ("ej", b), *(("link", ln) for ln in xy_route(a, b, cols))]
            for x in r:  # FIFO: this message queues behind the round's earlier ones on each resource
                use[x] = use.get(x, 0) + 1
            units.append(max(use[x] for x in r))
        rounds.append(tuple((s, d, lv, _hops(s, d, P, cols), u) for (s, d, lv), u in zip(rnd, units, strict=True)))
    return tuple(rounds), plan.root, plan.sends


PATH_COLUMNS = ("l2_messages", "l2_units", "l1_messages", "l1_units", "hops", "merges", "issues", "l2_small", "l1_small")
# a message is the (O, m, l) triplet, three transfers (see SEND_ISSUES): *_units counts O-sized
# transfers (B G d fp32), *_small the m- and l-sized ones (B G fp32)
PARTS = ("O", "m", "l")
# CPU issues of the reduce (ADR-0060 section 4): the (m, l, O) triplet goes as three tl.sends and
# arrives as three tl.recvs ("sent as separate tl.sends"); merge() is maximum, two (sub, exp),
# l_a * sa, l_b * sb, +, O_a * sa, O_b * sb, + (11 primitive ops)
SEND_ISSUES = 3
RECV_ISSUES = 3
MERGE_ISSUES = 11


def _route(s: int, d: int, lv: int, P: int, cols: int) -> list[tuple]:
    """Queues a message holds while it transfers, in the order it takes them: Level-2 the sender's
    IPCQ tx and the receiver's rx port; Level-1 the source CUBE's NOC injection port, each directed
    link of its XY route and the destination CUBE's ejection port (cut-through)."""
    if lv == 2:
        return [("tx", s), ("rx", d)]
    a, b = s // P, d // P
    return [("inj", a), *(("link", ln) for ln in xy_route(a, b, cols)), ("ej", b)]


@functools.cache
def _vec(**kw) -> tuple:  # a replay builds ~1M weight rows from a few dozen distinct ones
    return tuple(kw.get(c, 0) for c in PATH_COLUMNS)


# replays kept per process (their Pareto rows, a few KB each; the graph itself is dropped): they are
# keyed by the hardware's column costs and the ranks' sweep ends, so a sweep over S or rates would
# otherwise keep one per point it evaluated. The traced tables alone need 5 x 4 grid points per reduce
# kind, so a smaller cache re-replays the costliest (all_to_all, C 16) each time another kind is used.
REPLAY_CACHE = 512

# the replay's column costs when the caller has none: a transfer one unit, an m / l part 1 / 64 of
# it, nothing else any time (the links-bound limit)
LINKS_LIMIT = tuple(float(x) for x in _vec(l1_units=1, l2_units=1, l1_small=1 / 64, l2_small=1 / 64))


def _reduce_graph(C: int, P: int, kind: str, orientation: str, unit: tuple = LINKS_LIMIT,
                  offsets: tuple | None = None):
    """The data-driven reduce as a max-plus graph: (predecessors per node as (node, weight row)
    lists, each rank's start node, the end nodes). Every rank runs its rounds in order: its sends
    (its state when it reaches the round; the i-th triplet leaves after 3 i + 1 tl.send issues)
    go out at once, each receive waits for the message (3 tl.recvs) and merges it on the rank's
    MATH engine (11 issues, then the merge). Each part of a triplet (``PARTS``) is a transfer
    that holds its route's queues (``_route``) for its size: it starts at the later of its send
    and each queue's previous transfer ending, and lands its latency after the transfer. Node
    times are maxima over predecessors of (predecessor time + weight row . column costs).

    Which transfer a queue serves first is a matter of timing: a message's header takes its
    route's queues in order, one per step, holding each one it got while it waits for the next
    (the NOC cannot preempt a cut-through path), and a queue serves requests first come, first
    served; at one instant, a header fewer steps from a queue gets there first. So a link can
    carry a later round's message of a rank that ran ahead before an earlier round's one, a
    message waiting for a busy link keeps its injection port from the CUBE's other PEs, and the
    small m / l parts of a triplet can queue behind another rank's O. The order is read off a
    replay of the reduce at column costs ``unit`` (the hardware's, ``cases.replay_unit``) from the
    ranks' sweep ends ``offsets`` (all at once when None; same-instant events in the order they
    arose, ranks in rank order); the graph prices that order at any rates (and start times),
    exactly wherever they replay to the same order."""
    unit = np.asarray(unit, dtype=np.float64)
    rounds, root, _ = reduce_rounds(C, P, kind, orientation)
    cols = mesh_of(C, orientation)[1]
    R = C * P
    preds: list = []
    when: list = []  # replay time of each node

    costs: dict = {}  # weight row -> its cost at ``unit`` (np.dot's value, computed once per distinct row)

    def cost(w):
        c = costs.get(w)
        if c is None:
            c = costs[w] = float(np.dot(w, unit))
        return c

    def node(*edges):
        preds.append(list(edges))
        when.append(max((when[n] + cost(w) for n, w in edges), default=0.0))
        return len(preds) - 1

    starts = [node() for _ in range(R)]
    if offsets is not None:  # the ranks' sweep ends (replay time only: the graph prices from each start)
        when[:R] = [float(x) for x in offsets]
    front = list(starts)
    sends = [[[] for _ in rounds] for _ in range(R)]  # rank -> round -> message indices, plan order
    recvs = [[[] for _ in rounds] for _ in range(R)]
    for k, rnd in enumerate(rounds):
        for i, (s, d, *_) in enumerate(rnd):
            sends[s][k].append(i)
            recvs[d][k].append(i)
    events: list = []  # (time, sequence, action, args): same-time events in the order they arose
    seq = itertools.count()

    def at(t, action, *args):
        heapq.heappush(events, (t, next(seq), action, args))

    holder: dict = {}  # queue -> message holding it
    waiting: dict = {}  # queue -> messages waiting for it, first come first
    last_end: dict = {}  # queue -> end node of its last transfer
    got: dict = {}  # message -> queues held so far
    ready: dict = {}  # message -> (node, weight row) of its send
    landed: dict = {}  # message -> (end node, latency row)
    blocked: dict = {}  # message -> (rank, round, receive index) waiting for it
    taken: set = set()  # parts received

    routes: dict = {}  # (round, message) -> its queues

    def route_of(key):
        r = routes.get(key[:2])
        if r is None:
            s, d, lv, *_ = rounds[key[0]][key[1]]
            r = routes[key[:2]] = _route(s, d, lv, P, cols)
        return r

    def advance(key, t):  # one step of the message's header: take its next queue, or start
        route = route_of(key)
        if len(got[key]) < len(route):
            q = route[len(got[key])]
            if q in holder:
                waiting.setdefault(q, collections.deque()).append(key)
                return
            holder[q] = key
            got[key].append(q)
            at(t, "send", key)
            return
        start = node(ready[key], *((last_end[q], _vec()) for q in route if q in last_end))
        lv, h = rounds[key[0]][key[1]][2:4]
        size = ("l2_units" if lv == 2 else "l1_units") if key[2] == 0 else ("l2_small" if lv == 2 else "l1_small")
        end = node((start, _vec(**{size: 1})))
        for q in route:
            last_end[q] = end
        lat = _vec(l2_messages=1) if lv == 2 else _vec(l1_messages=1, hops=h)
        at(when[end], "done", key, end, lat)

    def receive(r, k, j):
        while j < len(recvs[r][k]):
            for part in range(len(PARTS)):  # tl.recv of each part in turn, then the merge
                key = (k, recvs[r][k][j], part)
                if key not in landed:
                    blocked[key] = (r, k, j)
                    return
                if key in taken:
                    continue
                end, lat = landed[key]
                taken.add(key)
                front[r] = node((front[r], _vec(issues=1)), (end, lat))
            front[r] = node((front[r], _vec(issues=MERGE_ISSUES, merges=1)))
            j += 1
        if k + 1 < len(rounds):
            at(when[front[r]], "round", r, k + 1)

    def round_(r, k):
        pre = front[r]
        mine = sends[r][k]
        for n, i in enumerate(mine):  # the triplets go out before the receives, part by part
            for part in range(len(PARTS)):
                key = (k, i, part)
                ready[key], got[key] = (pre, _vec(issues=SEND_ISSUES * n + part + 1)), []
                at(when[pre] + cost(ready[key][1]), "send", key)
        if mine:
            front[r] = node((pre, _vec(issues=SEND_ISSUES * len(mine))))
        receive(r, k, 0)

    for r in range(R):
        if rounds:
            at(when[starts[r]], "round", r, 0)
    while events:
        t, _, action, args = heapq.heappop(events)
        if action == "round":
            round_(*args)
        elif action == "send":
            advance(args[0], t)
        elif action == "done":  # each queue passes to its first waiter at once; the message lands after
            key, end, lat = args
            for q in got.pop(key):
                del holder[q]
                if waiting.get(q):
                    nxt = waiting[q].popleft()
                    holder[q] = nxt
                    got[nxt].append(q)
                    at(t, "send", nxt)
            at(t + cost(lat), "land", key, end, lat)
        else:
            key, end, lat = args
            landed[key] = (end, lat)
            if key in blocked:
                receive(*blocked.pop(key))
    if holder or blocked or len(taken) != len(landed):
        raise RuntimeError(f"reduce replay did not finish ({kind}, C={C}, P={P})")
    ends = [front[root]] if kind == "tree" else list(front)
    return preds, starts, ends


def origin_paths(C: int, P: int, kind: str, orientation: str = "wide", unit: tuple = LINKS_LIMIT,
                 offsets: tuple | None = None) -> tuple:
    """Critical-path candidates from each rank's sweep end to the reduce's end: one array per rank
    (rows over ``PATH_COLUMNS``), so the latency of ranks that finish their sweeps at times t_r is
    max_r (t_r + max over rank r's rows of the row's linear cost). Computed backwards over
    ``_reduce_graph`` (its queue order replayed at column costs ``unit``); only Pareto-maximal
    rows are kept (capped, see ``_FRONT_CAP``). Cached on the arguments' values, however passed."""
    return _origin_paths(int(C), int(P), kind, orientation, tuple(float(x) for x in unit),
                         None if offsets is None else tuple(float(x) for x in offsets))


@functools.lru_cache(maxsize=REPLAY_CACHE)
def _origin_paths(C: int, P: int, kind: str, orientation: str, unit: tuple, offsets: tuple | None) -> tuple:
    preds, starts, ends = _reduce_graph(C, P, kind, orientation, unit, offsets)
    width = len(PATH_COLUMNS)
    pending: list = [[] for _ in preds]  # row blocks reaching each node from its successors
    for e in ends:
        pending[e].append(np.zeros((1, width)))
    back: list = [None] * len(preds)
    rows = {}  # weight row (tuple) -> its array, made once per distinct row
    for n in range(len(preds) - 1, -1, -1):  # predecessors are earlier nodes
        if not pending[n]:
            continue
        # one block is a successor's front shifted by a weight row: already a (capped) front
        back[n] = pending[n][0] if len(pending[n]) == 1 else _pareto(np.concatenate(pending[n]))
        pending[n] = None
        for p, w in preds[n]:
            a = rows.get(w)
            if a is None:
                a = rows[w] = np.asarray(w, dtype=np.float64)
            pending[p].append(back[n] + a)
    return tuple(np.zeros((0, width)) if back[s] is None else back[s] for s in starts)


def rank_order(C: int, P: int, placement: str) -> list[int]:
    """Physical ranks in the order their key counts fall (``KVPlacement``): round-robin deals
    token i to CUBE i mod C, PE (i // C) mod P, so local index i is rank (i mod C) P + (i // C)
    mod P and the first S mod R of them hold one key more; contiguous fills ranks 0, 1, ... in turn."""
    R = C * P
    if placement == "contiguous":
        return list(range(R))
    return [(i % C) * P + (i // C) % P for i in range(R)]


def reduce_paths(C: int, P: int, kind: str, orientation: str = "wide", unit: tuple = LINKS_LIMIT) -> np.ndarray:
    """Critical-path candidates of the reduce when every rank finishes its sweep at once."""
    return _pareto(np.concatenate(origin_paths(C, P, kind, orientation, unit)))


# Large plans (C x P = 128, all-reduce) grow Pareto fronts of thousands of rows; a front is capped
# to the rows that are the maximum under one of these positive cost directions (log-uniform over
# four decades per column, fixed seed), which keeps the max exact wherever the hardware's column
# costs are near one of them and a lower bound elsewhere.
_DIRECTIONS = 10.0 ** np.random.default_rng(0).uniform(-2.0, 2.0, (12, len(PATH_COLUMNS)))
_FRONT_CAP = 12


def _pareto(rows: np.ndarray) -> np.ndarray:
    """The distinct Pareto-maximal rows of ``rows`` [n, len(PATH_COLUMNS)], sorted, capped: row i
    is dominated when another row is >= it in every column."""
    if len(rows) > 1:  # distinct, lexicographically sorted (np.unique(axis=0) is slow on small blocks)
        rows = rows[np.lexsort(rows.T[::-1])]
        rows = rows[np.concatenate(([True], (rows[1:] != rows[:-1]).any(1)))]
    if len(rows) > 4 * _FRONT_CAP:  # pre-cap: the dominance scan is quadratic
        rows = _cap(rows)
    ge = (rows[None, :, :] >= rows[:, None, :]).all(-1)
    np.fill_diagonal(ge, False)
    front = rows[~ge.any(1)]
    return _cap(front) if len(front) > _FRONT_CAP else front


def _cap(rows: np.ndarray) -> np.ndarray:
    """The rows (distinct, sorted) that are the maximum under one of ``_DIRECTIONS``."""
    return rows[np.unique(np.argmax(rows @ _DIRECTIONS.T, axis=0))]


SEGMENTS = ("prefix", "single", "suffix")


def segment_rows(C: int, P: int, kind: str, orientation: str = "wide",
                 placement: str = "round_robin") -> tuple[np.ndarray, np.ndarray]:
    """(rows [3, R + 1, k, len(PATH_COLUMNS)], nonempty [3, R + 1]): for segment ``SEGMENTS`` and
    index t = 0..R the Pareto rows of the ranks ``rank_order``[:t] (prefix), [t] (single) and [t:]
    (suffix), zero-padded to k rows; empty segments flagged 0, their rows zero."""
    per = origin_paths(C, P, kind, orientation)
    order = rank_order(C, P, placement)
    R = C * P
    empty = np.zeros((0, len(PATH_COLUMNS)))
    pre, suf = [empty], [empty]
    for t in range(R):
        pre.append(_pareto(np.concatenate([pre[-1], per[order[t]]])))
        suf.append(_pareto(np.concatenate([suf[-1], per[order[R - 1 - t]]])))
    segs = [pre, [per[order[t]] for t in range(R)] + [empty], suf[::-1]]
    k = max(len(v) for seg in segs for v in seg)
    rows = np.zeros((3, R + 1, k, len(PATH_COLUMNS)))
    for g, seg in enumerate(segs):
        for t, v in enumerate(seg):
            rows[g, t, : len(v)] = v
    return rows, np.array([[float(len(v) > 0) for v in seg] for seg in segs])


@functools.cache
def segment_tables(kind: str, orientation: str = "wide", placement: str = "round_robin") -> tuple:
    """(rows [len(C_GRID), len(P_GRID), 3, R_max + 2, k, len(PATH_COLUMNS)], nonempty [..., 3, R_max + 2]):
    ``segment_rows`` of every grid (C, P) at the default replay order, stacked for traced (C, P);
    segments past R are flagged empty, their rows zero."""
    R_max = C_GRID[-1] * P_GRID[-1]
    sets = {(i, j): segment_rows(C, P, kind, orientation, placement)
            for i, C in enumerate(C_GRID) for j, P in enumerate(P_GRID)}
    k = max(r.shape[2] for r, _ in sets.values())
    rows = np.zeros((len(C_GRID), len(P_GRID), 3, R_max + 2, k, len(PATH_COLUMNS)))
    nonempty = np.zeros(rows.shape[:4])
    for (i, j), (r, f) in sets.items():
        rows[i, j, :, : r.shape[1], : r.shape[2]] = r
        nonempty[i, j, :, : f.shape[1]] = f
    return rows, nonempty


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
