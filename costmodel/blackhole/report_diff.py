"""Two op reports of one model (before / after a change), matched op by op: the measured delta per
op and in total next to the model's predicted delta with its 90% interval.

    python -m costmodel.blackhole diff BEFORE.csv AFTER.csv [--calibration CAL] [--json]

Rows are matched by aligning the two sequences of op codes (``difflib.SequenceMatcher``: a change
that adds or removes ops leaves the rest paired in order). A pair both of whose rows the model
prices gets a predicted delta: linearised in the parameters (the Jacobian of both predictions, so
what the two rows share cancels) plus the model error of a delta; an unchanged spec
predicts a delta of exactly 0 (the same op model's relative error is shared:
``intervals.delta_model_var``, as the port's ``--vs`` deltas). This is the check that a what-if prediction holds on a user's change.
"""

from __future__ import annotations

import dataclasses
import difflib
import math

import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.discrepancy import load_discrepancy
from costmodel.blackhole.fit import Calibration, residuals_and_jacobian
from costmodel.blackhole.intervals import LEVEL, delta_model_var, quantile
from costmodel.blackhole.report_reader import MODELLED, Report
from jaxref.config import ExpertConfig


@dataclasses.dataclass(frozen=True)
class PairDelta:
    """One matched op: measured us of both rows and, when both are modelled, the predicted delta
    (after - before) with its interval."""

    op_code: str
    line_a: int
    line_b: int
    measured_a: float
    measured_b: float
    predicted: float | None = None
    lo: float | None = None
    hi: float | None = None

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
    discrepancy when None."""
    (pa, ga, sa), (pb, gb, sb) = a, b
    g = gb - ga
    vm = delta_model_var(cal, load_discrepancy() if disc is None else disc, sa, pa, sb, pb)
    sd = math.sqrt(max(float(g @ cal.cov @ g) + vm, 0.0))
    return pb - pa, pb - pa - z * sd, pb - pa + z * sd, vm


def _linearised(report: Report, cal: Calibration) -> dict:
    """{line: ``linearised`` entry} of the report's modelled rows."""
    fit_rows = report.measured_rows()
    modelled = [x for x in report.rows if x.status == MODELLED]
    lin = linearised(report.hw, cal, [r.spec for r in fit_rows], [r.target for r in fit_rows])
    return {row.line: e for row, e in zip(modelled, lin, strict=True)}


def diff_reports(a: Report, b: Report, cal: Calibration, *, level: float = LEVEL) -> dict:
    """Matched pairs, unmatched rows of each side and totals (see the module docstring).

    Returns {"pairs": [PairDelta], "only_a": [ReportRow], "only_b": [ReportRow], "total": {...}} with
    the total measured delta over all pairs and, over the pairs both modelled, measured vs predicted
    delta with its interval, and the share of |measured delta| in pairs whose interval holds it.
    """
    ra, rb = a.timed_rows(), b.timed_rows()
    la, lb = _linearised(a, cal), _linearised(b, cal)
    z, disc = quantile(cal, level), load_discrepancy()
    sm = difflib.SequenceMatcher(a=[r.op_code for r in ra], b=[r.op_code for r in rb], autojunk=False)
    pairs, grad_sum, var_model = [], np.zeros(len(cal.theta)), 0.0
    matched_a, matched_b = set(), set()
    for block in sm.get_matching_blocks():
        for k in range(block.size):
            x, y = ra[block.a + k], rb[block.b + k]
            matched_a.add(x.line)
            matched_b.add(y.line)
            if x.line in la and y.line in lb:
                d, lo, hi, vm = delta_interval(cal, la[x.line], lb[y.line], z=z, disc=disc)
                pairs.append(PairDelta(x.op_code, x.line, y.line, x.duration_us, y.duration_us, d, lo, hi))
                grad_sum += lb[y.line][1] - la[x.line][1]
                var_model += vm
            else:
                pairs.append(PairDelta(x.op_code, x.line, y.line, x.duration_us, y.duration_us))
    priced = [p for p in pairs if p.predicted is not None]
    pred = sum(p.predicted for p in priced)
    sd = math.sqrt(max(float(grad_sum @ cal.cov @ grad_sum) + var_model, 0.0))
    moved = sum(abs(p.measured) for p in priced)
    total = {"measured_us": sum(p.measured for p in pairs), "pairs": len(pairs), "modelled_pairs": len(priced),
             "modelled_measured_us": sum(p.measured for p in priced), "predicted_us": pred,
             "interval_us": [pred - z * sd, pred + z * sd],
             "share_inside": (sum(abs(p.measured) for p in priced if p.inside) / moved) if moved > 0 else None}
    return {"pairs": pairs, "only_a": [r for r in ra if r.line not in matched_a],
            "only_b": [r for r in rb if r.line not in matched_b], "total": total}


def format_diff(d: dict, *, top: int = 15) -> str:
    """The pairs with the largest measured deltas, the unmatched rows and the totals."""
    lines = [(f"{'op code':36s} {'line a':>6s} {'line b':>6s} {'measured a':>10s} {'measured b':>10s} {'delta':>9s} "
              f"{'predicted':>9s}  90% interval")]
    for p in sorted(d["pairs"], key=lambda p: -abs(p.measured))[:top]:
        pr = "" if p.predicted is None else f"{p.predicted:+9.1f}  [{p.lo:+.1f}, {p.hi:+.1f}]"
        lines.append(f"{p.op_code[:36]:36s} {p.line_a:6d} {p.line_b:6d} {p.measured_a:10.1f} {p.measured_b:10.1f} "
                     f"{p.measured:+9.1f} {pr}")
    for side, key in (("before", "only_a"), ("after", "only_b")):
        if d[key]:
            us = sum(r.duration_us for r in d[key])
            lines.append(f"\nonly {side}: {len(d[key])} rows, {us:.1f} us "
                         f"({', '.join(sorted({r.op_code for r in d[key]})[:6])})")
    t = d["total"]
    share = "n/a" if t["share_inside"] is None else f"{100 * t['share_inside']:.0f}%"
    lines.append(f"\n{t['pairs']} matched ops: measured delta {t['measured_us']:+.1f} us; over the "
                 f"{t['modelled_pairs']} modelled pairs measured {t['modelled_measured_us']:+.1f} us, predicted "
                 f"{t['predicted_us']:+.1f} us [{t['interval_us'][0]:+.1f}, {t['interval_us'][1]:+.1f}]; share of the "
                 f"measured movement inside its pair's interval: {share}")
    return "\n".join(lines)


def diff_json(d: dict) -> dict:
    return {"pairs": [{**dataclasses.asdict(p), "measured": p.measured, "inside": p.inside} for p in d["pairs"]],
            "only_a": [{"line": r.line, "op_code": r.op_code, "us": r.duration_us} for r in d["only_a"]],
            "only_b": [{"line": r.line, "op_code": r.op_code, "us": r.duration_us} for r in d["only_b"]],
            "total": d["total"]}
