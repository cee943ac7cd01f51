"""Every row of a real op report next to the model: what to optimise first.

    python -m costmodel.blackhole predict --ops-csv ops_perf_results.csv [--calibration CAL]
                                          [--start-signpost NAME --end-signpost NAME]
                                          [--csv rows.csv] [--plot top.png] [--top 15] [--json]

Per device-op row of the kept device: the measured DEVICE KERNEL DURATION, the model's floor
(``floor_params``: the same op model with every fitted parameter at its physical best, so bytes at
the DRAM peak and tile products at the math peak, nothing re-derived), the prediction with its 90%
interval (parameter uncertainty, the calibration's sigma and the stored model discrepancy of the op
class: the terms of every CLI interval), or the skip reason where the model has none; the rows
ranked by measured time above the floor (where there is one), totals per op code; and, on matmul
rows, tt-perf-report's ideal (``tt_perf_report_ideal_us``: the roofline its DRAM % / FLOPs % divide
by, with its byte and core conventions), next to the model's floor.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import math
import pathlib

import numpy as np

from costmodel.blackhole.fit import PARAM_BOUNDS, Calibration
from costmodel.blackhole.holdout import row_intervals
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.params import PARAM_NAMES, FitParams, param_info, params_from_dict
from costmodel.blackhole.report_reader import MODELLED, Report
from jaxref.validation import atomic_output

# Units whose best case is the upper bound (rates, fractions, overlap); times and cycles go to the lower.
BEST_HIGH_UNITS = ("1", "tiles/s", "B/s")


def floor_params() -> FitParams:
    """Every fitted parameter at the end of its physical range (``PARAM_BOUNDS``) that makes ops fastest."""
    return params_from_dict({k: PARAM_BOUNDS[k][1] if param_info(k)["unit"] in BEST_HIGH_UNITS else PARAM_BOUNDS[k][0]
                             for k in PARAM_NAMES})


@dataclasses.dataclass(frozen=True)
class PredictedRow:
    """One device-op row: measured, and (when modelled) floor, prediction and interval, us."""

    line: int
    op_code: str
    status: str
    measured_us: float
    floor_us: float | None = None
    predicted_us: float | None = None
    lo_us: float | None = None
    hi_us: float | None = None
    ideal_us: float | None = None  # tt-perf-report's ideal (its DRAM % / FLOPs % as a time), matmul rows

    @property
    def above_floor_us(self) -> float | None:
        return None if self.floor_us is None else self.measured_us - self.floor_us

    @property
    def inside(self) -> bool | None:
        return None if self.lo_us is None else self.lo_us <= self.measured_us <= self.hi_us


def predict_report(report: Report, cal: Calibration) -> list[PredictedRow]:
    """Every timed device-op row of ``report`` (kept device), modelled rows priced under ``cal``."""
    timed = report.timed_rows()
    modelled = [r for r in timed if r.status == MODELLED]
    fit_rows = report.measured_rows()  # the modelled rows, in order, as fit rows (kernel-only specs)
    assert len(fit_rows) == len(modelled)
    iv = row_intervals(cal, fit_rows, hw=report.hw, discrepancy="stored") if fit_rows else []
    floor = floor_params()
    priced = {}
    for r, p in zip(modelled, iv, strict=True):
        f = float(KernelSpec(r.spec).us(report.hw, floor))
        priced[r.line] = (f, p["predicted"], p["lo"], p["hi"])
    out = []
    for r in timed:
        f, pred, lo, hi = priced.get(r.line, (None, None, None, None))
        out.append(PredictedRow(r.line, r.op_code, r.status, r.duration_us, f, pred, lo, hi, r.ideal_us))
    return out


def ranked(rows: list[PredictedRow]) -> list[PredictedRow]:
    """Rows by measured time above the floor (modelled rows), then the unmodelled rows by measured time."""
    return (sorted((r for r in rows if r.floor_us is not None), key=lambda r: -r.above_floor_us)
            + sorted((r for r in rows if r.floor_us is None), key=lambda r: -r.measured_us))


def totals(rows: list[PredictedRow]) -> dict[str, dict]:
    """Per op code: rows, measured us, modelled rows and their measured / predicted / floor us."""
    out: dict[str, dict] = collections.defaultdict(lambda: {"rows": 0, "measured_us": 0.0, "modelled_rows": 0,
                                                            "modelled_measured_us": 0.0, "predicted_us": 0.0,
                                                            "floor_us": 0.0})
    for r in rows:
        t = out[r.op_code]
        t["rows"] += 1
        t["measured_us"] += r.measured_us
        if r.predicted_us is not None:
            t["modelled_rows"] += 1
            t["modelled_measured_us"] += r.measured_us
            t["predicted_us"] += r.predicted_us
            t["floor_us"] += r.floor_us
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["measured_us"]))


def _num(v: float | None) -> str:
    return "" if v is None else f"{v:.3f}"


def write_rows_csv(path: pathlib.Path, rows: list[PredictedRow]) -> None:
    """The ranked rows as CSV (atomic)."""
    with atomic_output(path) as tmp, tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["line", "op_code", "measured_us", "floor_us", "above_floor_us", "predicted_us", "lo_us", "hi_us",
                    "inside", "tt_perf_report_ideal_us", "status"])
        for r in ranked(rows):
            w.writerow([r.line, r.op_code, _num(r.measured_us), _num(r.floor_us), _num(r.above_floor_us),
                        _num(r.predicted_us), _num(r.lo_us), _num(r.hi_us), "" if r.inside is None else int(r.inside),
                        _num(r.ideal_us), r.status])


def plot_top(path: pathlib.Path, rows: list[PredictedRow], *, top: int = 15, title: str = "") -> None:
    """Horizontal bars of the ``top`` ranked modelled rows: measured, floor, prediction with its interval."""
    from matplotlib.figure import Figure

    best = [r for r in ranked(rows) if r.floor_us is not None][:top]
    fig = Figure(figsize=(8.0, 0.35 * max(len(best), 3) + 1.2))
    ax = fig.subplots()
    y = np.arange(len(best))[::-1]
    ax.barh(y, [r.measured_us for r in best], color="#4c72b0", label="measured")
    ax.barh(y, [r.floor_us for r in best], color="#55a868", height=0.4, label="floor (model at its best case)")
    pred = np.asarray([r.predicted_us for r in best])
    err = np.asarray([[r.predicted_us - r.lo_us for r in best], [r.hi_us - r.predicted_us for r in best]])
    ax.errorbar(pred, y, xerr=err if len(best) else None, fmt="o", color="#c44e52", ms=4, label="predicted, 90%")
    ax.set_yticks(y, [f"{r.op_code[:28]} (line {r.line})" for r in best], fontsize=7)
    ax.set_xlabel("us")
    ax.set_title(title or "rows ranked by measured time above the floor", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    with atomic_output(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def format_predictions(rows: list[PredictedRow], *, top: int = 15) -> str:
    """The ranked table (``top`` rows), the per-op-code totals and the coverage of the intervals."""
    lines = [(f"{'line':>6s} {'op code':36s} {'measured':>9s} {'floor':>9s} {'above':>9s} {'predicted':>9s}  "
              f"{'90% interval':21s} {'tpr ideal':>9s} status")]
    for r in ranked(rows)[:top]:
        iv = "" if r.lo_us is None else f"[{r.lo_us:.1f}, {r.hi_us:.1f}]"
        lines.append(f"{r.line:6d} {r.op_code[:36]:36s} {r.measured_us:9.1f} {_num(r.floor_us):>9s} "
                     f"{_num(r.above_floor_us):>9s} {_num(r.predicted_us):>9s}  {iv:21s} {_num(r.ideal_us):>9s} "
                     f"{'' if r.status == MODELLED else r.status}")
    lines += ["", (f"{'op code':36s} {'rows':>5s} {'measured us':>12s} {'modelled':>9s} {'predicted us':>13s} "
                   f"{'floor us':>9s}")]
    for code, t in totals(rows).items():
        lines.append(f"{code[:36]:36s} {t['rows']:5d} {t['measured_us']:12.1f} {t['modelled_rows']:9d} "
                     f"{t['predicted_us']:13.1f} {t['floor_us']:9.1f}")
    m = [r for r in rows if r.inside is not None]
    if m:
        err = [abs(math.log(r.predicted_us / r.measured_us)) for r in m]
        lines.append(f"\n{len(m)} modelled rows: {100 * sum(r.inside for r in m) / len(m):.0f}% of the measurements "
                     f"inside their 90% interval, median |log error| {float(np.median(err)):.3f}")
    return "\n".join(lines)


def predictions_json(rows: list[PredictedRow]) -> dict:
    return {"rows": [{**dataclasses.asdict(r), "above_floor_us": r.above_floor_us, "inside": r.inside}
                     for r in ranked(rows)], "totals": totals(rows)}
