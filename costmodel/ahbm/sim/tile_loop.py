"""One *visit* as the PE's kernel runs it: a q block's sweep over its KV tiles (ADR-0060 sections 3, 5.6).

The kernel is the PE's CPU: a SimPy process that issues ops one after another (each costs its
issue time) and blocks only where the ADR's kernels auto-wait on a composite's result. Ops go to
the engines in issue order; MATH ops are in-order on the MATH engine, composites go to the
scheduler (``composite``). Per tile j, following the ADR's kernel text (section 3 / TL;DR):

  S_j = composite(q, K_j^T, epi=[scale])                          # Q.K^T, K_j streamed
  [S_j = S_j + mask_j; the mask built from positions]             # causal boundary tiles only
  m_j = max(S_j, -1); m2 = maximum(m, m_j); P = exp(S_j - m2)     # 3 score-sized, 1 row op
  corr = exp(m - m2); l = l * corr + sum(P, -1)                   # 1 score-sized, 5 row ops
  O = O * corr + composite(P, V_j)                                # P.V, V_j streamed; 2 O-sized ops

* opt1: issue S_j, wait it, softmax, issue P.V, wait it (auto-wait at ``+``), merge.
* opt3: S_{j+1} is issued before waiting on S_j (two persistent S buffers): it runs during the
  softmax of tile j; otherwise as opt1.
* opt2: per tile the composite S_j and one ex_composite (softmax + P.V + merge, the stateful
  accumulator) are issued without any CPU wait; the ex_composite's softmax waits for S_j and
  the previous merge (a serial chain through the accumulator); S_j waits for its S buffer.

Composite issue costs ``cpu_issue_composite_s``, every other op ``cpu_issue_s``. A ragged tile
loads only its real keys (the composite's N is the real key count). Every tile the plan marks
partial (``jaxref.attention.sweep``: it straddles the causal diagonal or holds fewer valid keys
than the tile) pays the spec's ``mask_ops_per_partial_tile`` score-sized MATH ops, each issued.

Visit ends (``kind``): 'decode' keeps (m, l, O) in TCM for the reduce; 'flash' normalises and
stores O; 'ring' reloads the q block's (m, l, O) from HBM before and writes it back after (a PE
holds many q blocks across ring steps, more than its TCM); 'final' only loads (m, l, O),
normalises and stores O (the ring's epilogue per q block).
"""

from __future__ import annotations

import simpy

from costmodel.ahbm.sim.composite import BF16_BYTES, FP32_BYTES, Composite
from costmodel.ahbm.sim.engines import PE

KINDS = ("decode", "flash", "ring", "final")


def _at(env: simpy.Environment, t: float):
    return env.timeout(max(t - env.now, 0.0))


class _Tile:
    """The engine ops of one tile on one PE (rows M-folded query rows, keys real keys, d head dim)."""

    def __init__(self, pe: PE, rows: int, keys: int, d: int):
        self.pe, self.rows, self.keys, self.d = pe, rows, keys, d

    def softmax(self, masked: bool, *, earliest: float | None = None) -> tuple[float, float]:
        """Book the mask (if any) and softmax ops in order; return (P ready, last op end)."""
        pe, s, r = self.pe, self.rows * self.keys, self.rows
        ops = [s] * self.mask_issues(masked) + [s, r, s]  # [mask build, mask add,] max, maximum, S - m2
        end = None
        for e in ops:
            end = pe.math_op(e, earliest=earliest)
        p_ready = pe.math_op(s)  # exp -> P
        for e in (r, r, r, s, r):  # m - m2, exp -> corr, l * corr, sum(P), +
            end = pe.math_op(e)
        return p_ready, end

    def mask_issues(self, masked: bool) -> int:
        """The mask's score-sized ops (one issue each): the spec's count on a partial tile."""
        return self.pe.rates.mask_ops if masked else 0

    def softmax_issues(self, masked: bool) -> int:
        return self.mask_issues(masked) + 9


def visit(pe: PE, *, rows: int, d: int, keys: tuple[int, ...], masked: tuple[bool, ...],
          pipeline: str, kind: str, kv_in_tcm: bool = False):
    """The kernel process of one visit; its return value is the visit's end time (us)."""
    env, n = pe.env, len(keys)
    o_elems = rows * d
    # q = tl.load(...) (lazy: the DMA runs, its first use -- S_0's GEMM -- waits for it)
    if kind != "final" and (ev := pe.issue("primitive")) is not None:
        yield ev
    q_ready = _at(env, pe.hbm.transfer(rows * d * BF16_BYTES)) if kind != "final" else None
    acc_ready = None
    if kind in ("ring", "final"):
        if (ev := pe.issue("primitive")) is not None:
            yield ev
        acc_ready = pe.hbm.transfer(rows * (d + 2) * FP32_BYTES)
    end = env.now if acc_ready is None else acc_ready
    tiles = [_Tile(pe, rows, k, d) for k in keys]

    def qk(j, out_free=()):
        return Composite(pe, "qk", rows, keys[j], d, b_in_tcm=kv_in_tcm, a_ready=(q_ready,), out_free=out_free)

    def pv(j, p_event, out_free=()):
        return Composite(pe, "pv", rows, keys[j], d, b_in_tcm=kv_in_tcm, a_ready=(p_event,), out_free=out_free)

    if n and pipeline in ("opt1", "opt3"):
        nxt = None
        if pipeline == "opt3":
            if (ev := pe.issue("composite")) is not None:
                yield ev
            nxt = qk(0)
        for j in range(n):
            if pipeline == "opt1":
                if (ev := pe.issue("composite")) is not None:
                    yield ev
                cur = qk(j)
            else:
                cur = nxt
                if j + 1 < n:
                    if (ev := pe.issue("composite")) is not None:
                        yield ev
                    nxt = qk(j + 1)
            yield cur.done  # first use of S_j
            for _ in range(tiles[j].softmax_issues(masked[j]) + 1):  # softmax ops and O * corr
                if (ev := pe.issue("primitive")) is not None:
                    yield ev
            p_ready, _ = tiles[j].softmax(masked[j], earliest=acc_ready if j == 0 else None)
            pe.math_op(o_elems)  # O * corr
            if (ev := pe.issue("composite")) is not None:
                yield ev
            o_j = pv(j, _at(env, p_ready))
            yield o_j.done  # auto-wait at O * corr + O_j
            if (ev := pe.issue("primitive")) is not None:
                yield ev
            end = pe.math_op(o_elems)
    elif n and pipeline == "opt2":
        sm_done, mg_done = [], []
        for j in range(n):
            if (ev := pe.issue("composite")) is not None:
                yield ev
            s_j = qk(j, out_free=(sm_done[j - 2],) if j >= 2 else ())
            if (ev := pe.issue("ex_composite")) is not None:
                yield ev
            p_ev, sm_ev, mg_ev = env.event(), env.event(), env.event()
            o_j = pv(j, p_ev, out_free=(sm_done[j - 1],) if j else ())  # P buffer: P_{j-1} consumed
            env.process(_ex_softmax(pe, tiles[j], masked[j], s_j, mg_done[j - 1] if j else None,
                                    acc_ready, p_ev, sm_ev, o_j, mg_ev, o_elems))
            sm_done.append(sm_ev)
            mg_done.append(mg_ev)
        end = yield mg_done[-1]  # tl.wait(): drain every composite
    elif n:
        raise ValueError(f"pipeline={pipeline!r} unknown; expected one of ('opt1', 'opt2', 'opt3')")
    if end > env.now:
        yield _at(env, end)
    if kind in ("flash", "final"):
        if (ev := pe.issue("primitive")) is not None:  # O / l
            yield ev
        div = pe.math_op(o_elems)
        if (ev := pe.issue("primitive")) is not None:  # tl.store
            yield ev
        end = pe.hbm.transfer(o_elems * BF16_BYTES, earliest=div)
    elif kind == "ring":
        if (ev := pe.issue("primitive")) is not None:
            yield ev
        end = pe.hbm.transfer(rows * (d + 2) * FP32_BYTES)
    if end > env.now:
        yield _at(env, end)
    return env.now


def _ex_softmax(pe, tile, masked, s_j, prev_mg, acc_ready, p_ev, sm_ev, o_j, mg_ev, o_elems):
    """The ex_composite's MATH part: softmax once S_j and the previous merge are done, then the
    merge O * corr + O_j once its P.V is done."""
    env = pe.env
    yield s_j.done
    if prev_mg is not None and not prev_mg.processed:
        yield prev_mg
    p_ready, end = tile.softmax(masked, earliest=acc_ready)
    scaled = pe.math_op(o_elems)  # O * corr
    yield _at(env, p_ready)
    p_ev.succeed()
    yield _at(env, end)
    sm_ev.succeed()
    yield o_j.done
    mg_ev.succeed(pe.math_op(o_elems, earliest=scaled))


def run_visit(rates, *, rows: int, d: int, keys: tuple[int, ...], masked: tuple[bool, ...], pipeline: str,
              kind: str, kv_in_tcm: bool = False) -> dict:
    """Simulate one visit on an idle PE: {'us': duration, 'gemm_busy_us', 'math_busy_us',
    'hbm_bytes', 'cpu_busy_us'}."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} unknown; expected one of {KINDS}")
    env = simpy.Environment()
    pe = PE(env, rates)
    if pipeline == "opt2" and "ex_composite" not in rates.commands:
        raise ValueError(f"pipeline='opt2' needs the ex_composite command, not in the hardware's "
                         f"commands={rates.commands}")
    if rates.run_ahead < 1:
        raise ValueError(f"composite_runahead_subtiles={rates.run_ahead} must be >= 1")
    proc = env.process(visit(pe, rows=rows, d=d, keys=keys, masked=masked, pipeline=pipeline, kind=kind,
                             kv_in_tcm=kv_in_tcm))
    env.run()
    if not proc.processed:
        raise RuntimeError(f"visit did not finish (deadlock): rows={rows} keys={keys[:4]}... {pipeline}")
    return {"us": proc.value, "gemm_busy_us": pe.gemm.busy_us, "math_busy_us": pe.math.busy_us,
            "hbm_bytes": pe.hbm.bytes_moved, "cpu_busy_us": pe.cpu_busy_us}
