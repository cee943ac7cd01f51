"""Visit durations, each simulated once: identical visits on idle PEs take identical time.

Every PE starts a visit idle (the previous one has stored its result), so a visit's duration is a
function of its signature (rows, keys per tile, masks, pipelining option, kind) alone and
``VisitCache`` simulates each signature once, exactly.

Long visits: a visit is a run of ``L`` identical tiles followed by a short tail (a ragged last
tile, the causal diagonal). Past the pipeline's fill the tile loop is periodic: ``L -> L + p``
shifts every later event by the same ``delta``. For L > ``EXACT_TILES`` the cache simulates the
run lengths of a window around ``EXACT_TILES`` (same tail), finds the smallest period p <= 4 with
T(L' + p) - T(L') constant over the whole window (to 1e-9 relative) and extends it; when no period
is found it simulates the whole visit (``max_tiles`` bounds what that may cost, else it raises).
"""

from __future__ import annotations

from costmodel.ahbm.sim.tile_loop import run_visit

EXACT_TILES = 32
WINDOW = 12
PERIODS = (1, 2, 3, 4)


class VisitCache:
    """Memoised visit simulations for one (rates, head dim, pipelining option)."""

    def __init__(self, rates, d: int, pipeline: str, *, kv_in_tcm: bool = False, max_tiles: int = 4096):
        self.rates, self.d, self.pipeline, self.kv_in_tcm = rates, d, pipeline, kv_in_tcm
        self.max_tiles = max_tiles
        self._memo: dict = {}
        self._periods: dict = {}  # (rows, run tile, run mask, tail, kind) -> period or None
        self.simulated_tiles = 0  # tiles actually simulated (the aggregation's saving, reported)
        self.extrapolated = 0  # visits extended by periodicity

    def _exact(self, rows, keys, masked, kind) -> dict:
        key = (rows, keys, masked, kind)
        if key not in self._memo:
            self.simulated_tiles += len(keys)
            self._memo[key] = run_visit(self.rates, rows=rows, d=self.d, keys=keys, masked=masked,
                                        pipeline=self.pipeline, kind=kind, kv_in_tcm=self.kv_in_tcm)
        return self._memo[key]

    def duration(self, rows: int, keys: tuple[int, ...], masked: tuple[bool, ...], kind: str) -> float:
        """Duration (us) of one visit on an idle PE."""
        return self.stats(rows, keys, masked, kind)["us"]

    def stats(self, rows: int, keys: tuple[int, ...], masked: tuple[bool, ...], kind: str) -> dict:
        n = len(keys)
        run = 0
        while run < n and keys[run] == keys[0] and masked[run] == masked[0]:
            run += 1
        if run <= EXACT_TILES:
            return self._exact(rows, keys, masked, kind)
        tail_k, tail_m = keys[run:], masked[run:]

        def t(L):
            return self._exact(rows, (keys[0],) * L + tail_k, (masked[0],) * L + tail_m, kind)

        family = (rows, keys[0], masked[0], tail_k, tail_m, kind)
        if family not in self._periods:
            self._periods[family] = self._period(t)
        p = self._periods[family]
        if p is None:
            if n > self.max_tiles:
                raise RuntimeError(f"visit of {n} tiles shows no period <= {max(PERIODS)} over run lengths "
                                   f"{EXACT_TILES - WINDOW}..{EXACT_TILES}; simulating it whole exceeds "
                                   f"max_tiles={self.max_tiles}")
            return self._exact(rows, keys, masked, kind)
        L0 = next(L for L in range(EXACT_TILES, EXACT_TILES - p, -1) if (run - L) % p == 0)
        steps = (run - L0) // p
        base, nxt = t(L0), t(L0 + p)
        self.extrapolated += 1
        return {k: base[k] + steps * (nxt[k] - base[k]) for k in base}

    @staticmethod
    def _period(t) -> int | None:
        """Smallest p with T(L + p) - T(L) constant over the window (None: no period found)."""
        lo = EXACT_TILES - WINDOW
        times = {L: t(L)["us"] for L in range(lo, EXACT_TILES + max(PERIODS) + 1)}
        for p in PERIODS:
            diffs = [times[L + p] - times[L] for L in range(lo, EXACT_TILES + 1)]
            if max(diffs) - min(diffs) <= 1e-9 * times[EXACT_TILES]:
                return p
        return None
