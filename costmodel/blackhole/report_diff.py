"""Two op reports of one model (before / after a change), matched op by op: the measured delta per
op and in total next to the model's predicted delta with its 90% interval.

    python -m costmodel.blackhole diff BEFORE.csv AFTER.csv [--calibration CAL] [--json]

Rows are matched by aligning the two sequences of op codes (``difflib.SequenceMatcher``: a change
that adds or removes ops leaves the rest paired in order). A pair both of whose rows the model
prices gets a predicted delta: linearised in the parameters (the Jacobian of both predictions, so
what the two rows share cancels) plus the model error of a delta; an unchanged spec predicts a
delta of exactly 0 (the same op model's relative error is shared: ``intervals.delta_model_var``, as
the port's ``--vs`` deltas). A priced row of one side only (a fusion removes two matmuls and adds
one) is a delta of minus / plus its whole time, with its own model error (``intervals.own_model_var``,
as the port's fused add+norm). This is the check that a what-if prediction holds on a user's change.

The model prices kernel time, not run-to-run noise: an unchanged op measured twice moves by a
fraction of a percent, which no interval of 0 width holds. Those pairs are counted apart (their
measured movement is the noise of the two runs) and the share inside the intervals is taken over
the changed ops.
"""

from __future__ import annotations

import dataclasses
import difflib
import math

import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.discrepancy import load_discrepancy
from costmodel.blackhole.fit import Calibration, residuals_and_jacobian
from costmodel.blackhole.intervals import (
    LEVEL,
    delta_model_var,
    kept_grad,
    own_model_var,
    param_var,
    quantile,
)
from costmodel.blackhole.report_reader import MODELLED, Report, ReportRow
from jaxref.config import ExpertConfig


@dataclasses.dataclass(frozen=True)
class PairDelta:
    """One matched op (or, with ``line_a`` / ``line_b`` None, a row of one side only, measured 0 on
    the other): measured us of both sides and, when every row present is modelled, the predicted
    delta (after - before) with its interval; ``unchanged``: both rows have the same spec (the
    prediction is exactly 0); ``unpriced``: why there is no prediction."""

    op_code: str
    line_a: int | None
    line_b: int | None
    measured_a: float
    measured_b: float
    predicted: float | None = None
    lo: float | None = None
    hi: float | None = None
    unchanged: bool = False
    unpriced: str = ""

    @property
    def measured(self) -> float:
        return self.measured_b - self.measured_a

    @property
    def inside(self) -> bool | None:
        return None if self.lo is None else self.lo <= self.measured <= self.hi


def linearised(hw, cal: Calibration, specs: list, targets: list[float]) -> list[tuple[float, np.ndarray, object]]:
    """(prediction us, d prediction / d theta [P], spec) of each (kernel-scope) spec on ``hw``;
    ``targets`` only anchor the residuals (any positive times)."""
    if not specs:
        return []
    r, J = residuals_and_jacobian(jnp.asarray(cal.theta, jnp.float32), hw, jnp.asarray(targets, jnp.float32),
                                  specs=tuple(specs), cfg=ExpertConfig.alpamayo_tt())
    r, J = np.asarray(r, np.float64), np.asarray(J, np.float64)
    return [(t * math.exp(ri), t * math.exp(ri) * gi, spec) for spec, t, ri, gi in zip(specs, targets, r, J,
                                                                                       strict=True)]


def delta_interval(cal: Calibration, a: tuple, b: tuple, *, z: float, disc=None) -> tuple[float, float, float, float]:
    """(predicted b - a, lo, hi, model-error variance) of two ``linearised`` entries: the parameters'
    part through the difference of their gradients, the model error as every delta interval's
    (``intervals.delta_model_var``: shared by one op model, 0 for one spec). ``disc``: the stored
    discrepancy when None. The same spec on both sides predicts exactly 0 (its two entries differ
    only by the float rounding of the residuals they were anchored on)."""
    (pa, ga, sa), (pb, gb, sb) = a, b
    if sa == sb:
        return 0.0, 0.0, 0.0, 0.0
    g = gb - ga
    disc = load_discrepancy() if disc is None else disc
    vm = delta_model_var(cal, disc, sa, pa, sb, pb)
    sd = math.sqrt(max(param_var(cal, g, kept_grad(disc, g, (sa, pa), (sb, pb))) + vm, 0.0))
    return pb - pa, pb - pa - z * sd, pb - pa + z * sd, vm


def one_side_interval(cal: Calibration, e: tuple, sign: float, *, z: float, disc) -> tuple[float, float, float, float]:
    """(predicted delta, lo, hi, model-error variance) of a ``linearised`` entry present on one side
    only: ``sign`` -1 removes it (before only), +1 adds it (after only)."""
    p, g, spec = e
    vm = own_model_var(cal, disc, spec, p)
    sd = math.sqrt(max(param_var(cal, g, kept_grad(disc, g, (spec, p))) + vm, 0.0))
    return sign * p, sign * p - z * sd, sign * p + z * sd, vm


def _linearised(report: Report, cal: Calibration) -> dict:
    """{line: ``linearised`` entry} of the report's modelled rows."""
    fit_rows = report.measured_rows()
    modelled = [x for x in report.rows if x.status == MODELLED]
    lin = linearised(report.hw, cal, [r.spec for r in fit_rows], [r.target for r in fit_rows])
    return {row.line: e for row, e in zip(modelled, lin, strict=True)}


def _unpriced(x: ReportRow | None, y: ReportRow | None) -> str:
    """Why a delta has no prediction: the skip reason of each side not modelled (once if both share it)."""
    why = [(side, r.status) for side, r in (("before", x), ("after", y)) if r is not None and r.status != MODELLED]
    if len(why) == 2 and why[0][1] == why[1][1]:
        return why[0][1]
    return "; ".join(f"{side}: {status}" for side, status in why)


def diff_reports(a: Report, b: Report, cal: Calibration, *, level: float = LEVEL) -> dict:
    """Matched pairs, rows of one side only and totals (see the module docstring).

    Returns {"pairs": [PairDelta], "only_a": [PairDelta], "only_b": [PairDelta], "total": {...}}.
    The total has the whole reports' measured delta (every timed row of both), and over the priced
    deltas (pairs both modelled and modelled rows of one side) the measured delta next to the
    predicted one with its interval (parameters through the summed gradients, model errors summed
    per delta as the port's ``--vs`` totals); ``share_inside`` is the share of the changed priced
    deltas' |measured| movement whose own interval holds it; the unchanged pairs' movement is
    ``noise_us``.
    """
    ra, rb = a.timed_rows(), b.timed_rows()
    la, lb = _linearised(a, cal), _linearised(b, cal)
    z, disc = quantile(cal, level), load_discrepancy()
    sm = difflib.SequenceMatcher(a=[r.op_code for r in ra], b=[r.op_code for r in rb], autojunk=False)
    # grad_kept: the part of grad_sum through which the weak prior's share counts (intervals.param_var)
    pairs, grad_sum, grad_kept, var_model = [], np.zeros(len(cal.theta)), np.zeros(len(cal.theta)), 0.0
    matched_a, matched_b = set(), set()
    for block in sm.get_matching_blocks():
        for k in range(block.size):
            x, y = ra[block.a + k], rb[block.b + k]
            matched_a.add(x.line)
            matched_b.add(y.line)
            if x.line in la and y.line in lb:
                d, lo, hi, vm = delta_interval(cal, la[x.line], lb[y.line], z=z, disc=disc)
                same = x.spec == y.spec
                pairs.append(PairDelta(x.op_code, x.line, y.line, x.duration_us, y.duration_us, d, lo, hi, same))
                if not same:  # one spec twice: the same prediction, so nothing of it reaches the total
                    (pa, ga, sa), (pb, gb, sb) = la[x.line], lb[y.line]
                    grad_sum += gb - ga
                    grad_kept += kept_grad(disc, gb - ga, (sa, pa), (sb, pb))
                var_model += vm
            else:
                pairs.append(PairDelta(x.op_code, x.line, y.line, x.duration_us, y.duration_us,
                                       unpriced=_unpriced(x, y)))
    sides = []
    for rows, lin, matched, sign in ((ra, la, matched_a, -1.0), (rb, lb, matched_b, 1.0)):
        side = []
        for r in rows:
            if r.line in matched:
                continue
            lines = (r.line, None) if sign < 0 else (None, r.line)
            ms = (r.duration_us, 0.0) if sign < 0 else (0.0, r.duration_us)
            if r.line in lin:
                d, lo, hi, vm = one_side_interval(cal, lin[r.line], sign, z=z, disc=disc)
                side.append(PairDelta(r.op_code, *lines, *ms, d, lo, hi))
                p, g, spec = lin[r.line]
                grad_sum += sign * g
                grad_kept += kept_grad(disc, sign * g, (spec, p))
                var_model += vm
            else:
                side.append(PairDelta(r.op_code, *lines, *ms,
                                      unpriced=_unpriced(*((r, None) if sign < 0 else (None, r)))))
        sides.append(side)
    only_a, only_b = sides
    priced = [p for p in pairs + only_a + only_b if p.predicted is not None]
    changed = [p for p in priced if not p.unchanged]
    pred = sum(p.predicted for p in priced)
    sd = math.sqrt(max(param_var(cal, grad_sum, grad_kept) + var_model, 0.0))
    measured_priced = sum(p.measured for p in priced)
    moved = sum(abs(p.measured) for p in changed)
    total = {"measured_us": sum(r.duration_us for r in rb) - sum(r.duration_us for r in ra),
             "before_us": sum(r.duration_us for r in ra), "after_us": sum(r.duration_us for r in rb),
             "pairs": len(pairs), "only_a": len(only_a), "only_b": len(only_b),
             "priced": len(priced), "changed": len(changed), "unchanged": len(priced) - len(changed),
             "priced_measured_us": measured_priced, "predicted_us": pred,
             "interval_us": [pred - z * sd, pred + z * sd],
             "inside": pred - z * sd <= measured_priced <= pred + z * sd,
             "unpriced_measured_us": sum(p.measured for p in pairs + only_a + only_b if p.predicted is None),
             "noise_us": sum(abs(p.measured) for p in priced if p.unchanged),
             "share_inside": (sum(abs(p.measured) for p in changed if p.inside) / moved) if moved > 0 else None}
    return {"pairs": pairs, "only_a": only_a, "only_b": only_b, "total": total}


def _line(n: int | None) -> str:
    return "-" if n is None else str(n)


def format_diff(d: dict, *, top: int = 15) -> str:
    """The deltas with the largest measured movement (pairs and rows of one side), and the totals."""
    lines = [(f"{'op code':36s} {'line a':>6s} {'line b':>6s} {'measured a':>10s} {'measured b':>10s} {'delta':>9s} "
              f"{'predicted':>9s}  90% interval")]
    items = d["pairs"] + d["only_a"] + d["only_b"]
    for p in sorted(items, key=lambda p: -abs(p.measured))[:top]:
        if p.predicted is None:
            pr = f"          ({p.unpriced})"
        elif p.unchanged:
            pr = f"{0.0:+9.1f}  unchanged spec"
        else:
            pr = f"{p.predicted:+9.1f}  [{p.lo:+.1f}, {p.hi:+.1f}]{'' if p.inside else '  outside'}"
        lines.append(f"{p.op_code[:36]:36s} {_line(p.line_a):>6s} {_line(p.line_b):>6s} {p.measured_a:10.1f} "
                     f"{p.measured_b:10.1f} {p.measured:+9.1f} {pr}")
    for side, key in (("before", "only_a"), ("after", "only_b")):
        if d[key]:
            us = sum(p.measured_a + p.measured_b for p in d[key])
            lines.append(f"only {side}: {len(d[key])} rows, {us:.1f} us "
                         f"({', '.join(sorted({p.op_code for p in d[key]})[:6])})")
    t = d["total"]
    share = "n/a" if t["share_inside"] is None else f"{100 * t['share_inside']:.0f}%"
    lines.append(f"\nreports: {t['before_us']:.1f} -> {t['after_us']:.1f} us, measured delta {t['measured_us']:+.1f} us "
                 f"({t['pairs']} matched ops, {t['only_a']} before only, {t['only_b']} after only)")
    lines.append(f"priced ({t['priced']} deltas): measured {t['priced_measured_us']:+.1f} us, predicted "
                 f"{t['predicted_us']:+.1f} us [{t['interval_us'][0]:+.1f}, {t['interval_us'][1]:+.1f}] "
                 f"({'inside' if t['inside'] else 'outside'}); unpriced ops moved {t['unpriced_measured_us']:+.1f} us")
    lines.append(f"share of the {t['changed']} changed deltas' measured movement inside their own interval: {share}; "
                 f"{t['unchanged']} unchanged specs moved {t['noise_us']:.1f} us in all (run-to-run noise)")
    return "\n".join(lines)


def _json(p: PairDelta) -> dict:
    return {**dataclasses.asdict(p), "measured": p.measured, "inside": p.inside}


def diff_json(d: dict) -> dict:
    """The ``diff_reports`` result as JSON: every delta with its fields, ``line`` and ``us`` on the
    rows of one side."""
    side = {"only_a": ("line_a", "measured_a"), "only_b": ("line_b", "measured_b")}
    return {"pairs": [_json(p) for p in d["pairs"]],
            **{k: [{"line": getattr(p, ln), "us": getattr(p, us), **_json(p)} for p in d[k]]
               for k, (ln, us) in side.items()},
            "total": d["total"]}
