"""A plan search over a whole real op report: per matmul row, the program-config (and weight-format)
change the model prices fastest, ranked by predicted saving with its 90% interval.

    python -m costmodel.blackhole plan --ops-csv ops_perf_results.csv [--start-signpost NAME --end-signpost NAME]
                                       [--target-ms 30] [--top 15] [--json]

For every matmul row the model prices, the candidates are its own kind of program config with
every in0_block_w that divides K/32 and (1D in0-multicast) every per_core_N whose split fits the
grid, legal by ``MatmulProgramConfig.validate`` (L1, grid, subblock: ttnn's own for the block), and
the same config with the other weight formats of the vocabulary, flagged: the model prices their
bytes, not their accuracy, which only a parity run of the user's model can tell. Each candidate is
priced exactly (``KernelSpec``); a row gets its best change only where that is priced faster than
its own config (by ``SAME_PRICE``), else no plan; the saving's interval is the difference of two linearised
predictions (``report_diff.delta_interval``). The port's ``plan --target-ms`` generalised: with a
target, the probability that the report's measured total minus the savings reaches it.
"""

from __future__ import annotations

import dataclasses
import math

from scipy import stats

from costmodel.blackhole.fit import Calibration
from costmodel.blackhole.intervals import LEVEL, quantile
from costmodel.blackhole.opspecs import ChipSpec, KernelSpec, MatmulSpec
from costmodel.blackhole.program_config import IN0_SHARD_LAYOUT, MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D
from costmodel.blackhole.report_diff import delta_interval, linearised
from costmodel.blackhole.report_reader import MODELLED, Report
from costmodel.hardware import TILE
from jaxref.validation import choices_of
from jaxref.vocabulary import WeightFormat


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """The best change of one matmul row: what it is, the predicted times (us) and the saving's interval."""

    line: int
    op_code: str
    measured_us: float
    predicted_us: float
    change: str
    after_us: float
    saving_us: float
    lo_us: float
    hi_us: float
    candidates: int
    flag: str = ""


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(spec: MatmulSpec, board) -> list[tuple[str, MatmulSpec, str]]:
    """(change text, changed spec, flag) of every legal alternative of ``spec`` (its own config excluded)."""
    c = spec.cfg
    kt, nt = spec.K // TILE, spec.N // TILE
    blocks = _divisors(kt)
    splits = [d for d in _divisors(nt) if nt // d <= board.grid_cores] if c.kind == MCAST_1D_IN0 else [
        int(c.per_core_N)]
    out = []
    for bw in blocks:
        for pn in splits:
            cfg = dataclasses.replace(c, in0_block_w=float(bw), per_core_N=float(pn), out_subblock_h=None,
                                      out_subblock_w=None)
            for wd in choices_of(WeightFormat):
                if (bw, pn, wd) == (int(c.in0_block_w), int(c.per_core_N), spec.weight_dtype):
                    continue
                try:
                    cfg.validate("matmul", board, M=spec.M, K=spec.K, N=spec.N, weight_dtype=wd,
                                 act_dtype=spec.act_dtype, fp32_dest_acc=True)
                except ValueError:
                    continue
                parts = [f"{name} {old}->{new}" for name, old, new in (
                    ("in0_block_w", int(c.in0_block_w), bw), ("per_core_N", int(c.per_core_N), pn),
                    ("weights", spec.weight_dtype, wd)) if old != new]
                text = ", ".join(parts)
                flag = "" if wd == spec.weight_dtype else "weight format: accuracy not modelled (check with a parity run)"
                out.append((text, dataclasses.replace(spec, cfg=cfg, weight_dtype=wd), flag))
    return out


# A candidate priced less than this fraction faster than the row's own config is not a change worth
# advising: far below the run-to-run movement of an unchanged op between two profiler runs (e.g. a
# weight format that a row bound elsewhere reads a few ns faster).
SAME_PRICE = 1e-3


def searched_rows(report: Report) -> list:
    """The rows ``plan_report`` searches: modelled matmul rows of the 1D / 2D kinds."""
    def searched(r) -> bool:
        inner = getattr(r.spec, "inner", r.spec)
        return isinstance(inner, MatmulSpec) and inner.cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D)
    return [r for r in report.rows if r.status == MODELLED and searched(r)]


def plan_report(report: Report, cal: Calibration, *, level: float = LEVEL) -> list[RowPlan]:
    """The best priced change of every searched row (``searched_rows``) that the model prices faster
    than the row's own config, by saving (largest first); a row none beats has no plan."""
    z = quantile(cal, level)
    plans = []
    for r in searched_rows(report):
        inner = getattr(r.spec, "inner", r.spec)
        board = r.spec.board() if isinstance(r.spec, ChipSpec) else report.hw

        def wrap(s, r=r):
            return ChipSpec(s, r.spec.chip, r.spec.grid) if isinstance(r.spec, ChipSpec) else s
        cands = candidates(inner, board)
        now = float(KernelSpec(r.spec).us(report.hw, cal.params))
        priced = [(float(KernelSpec(wrap(s)).us(report.hw, cal.params)), text, s, flag) for text, s, flag in cands]
        priced = [x for x in priced if x[0] < now * (1 - SAME_PRICE)]  # only changes priced faster
        config_only = [x for x in priced if not x[3]]
        best = [min(config_only, key=lambda x: x[0])] if config_only else []
        formats = [x for x in priced if x[3]]
        if formats and (not best or min(formats, key=lambda x: x[0])[0] < best[0][0]):
            best.append(min(formats, key=lambda x: x[0]))  # only where a format beats every config
        for _, text, spec, flag in best:
            a, b = linearised(report.hw, cal, [KernelSpec(r.spec), KernelSpec(wrap(spec))],
                              [r.duration_us, r.duration_us])
            d, lo, hi, _ = delta_interval(cal, a, b, z=z)
            plans.append(RowPlan(r.line, r.op_code, r.duration_us, a[0], text, b[0], -d, -hi, -lo, len(cands), flag))
    return sorted(plans, key=lambda p: -p.saving_us)


def total_measured_us(report: Report) -> float:
    return sum(r.duration_us for r in report.timed_rows())


def reach_probability(report: Report, plans: list[RowPlan], target_us: float, cal: Calibration) -> float:
    """P(measured total - the config changes' savings <= target), their sum normal with the intervals' sd
    (the rows' intervals added in quadrature: their parameter parts are correlated, so this is a
    rough figure, stated as such)."""
    z = quantile(cal)
    configs = [p for p in plans if not p.flag]  # the format changes need a parity run first
    saving = sum(p.saving_us for p in configs)
    sd = math.sqrt(sum(((p.hi_us - p.lo_us) / (2 * z)) ** 2 for p in configs)) or 1e-12
    return float(stats.norm.cdf((target_us - (total_measured_us(report) - saving)) / sd))


def format_plan(report: Report, plans: list[RowPlan], *, top: int = 15, target_ms: float | None = None,
                cal: Calibration | None = None) -> str:
    lines = [(f"{'line':>6s} {'op code':28s} {'measured':>9s} {'predicted':>9s} {'after':>9s} {'saving':>8s}  "
              f"{'90% interval':18s} change")]
    for p in plans[:top]:
        lines.append(f"{p.line:6d} {p.op_code[:28]:28s} {p.measured_us:9.1f} {p.predicted_us:9.1f} {p.after_us:9.1f} "
                     f"{p.saving_us:8.1f}  [{p.lo_us:.1f}, {p.hi_us:.1f}]{'':4s} {p.change}"
                     + (f"  ({p.flag})" if p.flag else ""))
    total = total_measured_us(report)
    configs = [p for p in plans if not p.flag]
    saving = sum(p.saving_us for p in configs)
    if total > 0:
        lines.append(f"\n{len(searched_rows(report))} matmul rows searched, {len({p.line for p in plans})} with a faster "
                     f"priced change: predicted saving of the config changes "
                     f"{saving:.1f} us of the report's {total:.1f} us measured device time ({100 * saving / total:.1f}%)"
                     f"; rows where only a weight-format change (flagged) does better: "
                     f"{len([p for p in plans if p.flag])}")
    if target_ms is not None and cal is not None:
        lines.append(f"P(device time <= {target_ms:g} ms after the changes) = "
                     f"{reach_probability(report, plans, target_ms * 1e3, cal):.2f} (rough: rows' intervals in quadrature)")
    return "\n".join(lines)


def plan_json(report: Report, plans: list[RowPlan]) -> dict:
    return {"rows": [dataclasses.asdict(p) for p in plans], "rows_searched": len(searched_rows(report)),
            "measured_total_us": total_measured_us(report),
            "predicted_saving_us": sum(p.saving_us for p in plans if not p.flag)}


# ---- what-if on one real row ---------------------------------------------------------------------
CONFIG_FIELDS = ("in0_block_w", "per_core_N", "per_core_M", "out_subblock_h", "out_subblock_w")
SPEC_FIELDS = ("weight_dtype", "act_dtype", "fidelity", "kv_dtype", "mask_dtype")
# where a matmul's activation (in0) lives: DRAM- or L1-interleaved, or L1-sharded in the layout its
# program-config kind reads (program_config.IN0_SHARD_LAYOUT); the MatmulSpec flags of each
IN0_MEMORY = {"dram": {"in0_l1": False, "in0_sharded": False}, "l1": {"in0_l1": True, "in0_sharded": False},
              "l1_sharded": {"in0_l1": False, "in0_sharded": True}}


def changed_spec(spec, changes: dict[str, str], board):
    """``spec`` (an op spec of a report row, possibly a ``ChipSpec``) with ``changes`` applied:
    program-config fields of a matmul (``CONFIG_FIELDS``, integers), format / fidelity fields of
    any op that has them (``SPEC_FIELDS``) and a multicast matmul's ``in0_memory`` (``IN0_MEMORY``).
    ValueError names a field the op lacks, a bad value, or a changed matmul config that ttnn would
    refuse (``MatmulProgramConfig.validate``)."""
    if isinstance(spec, ChipSpec):
        return dataclasses.replace(spec, inner=changed_spec(spec.inner, changes, spec.board()))
    out = spec
    cfg_changes = {}
    for key, value in changes.items():
        if key in CONFIG_FIELDS:
            if not isinstance(spec, MatmulSpec):
                raise ValueError(f"--change {key}={value}: {type(spec).__name__} has no matmul program config; "
                                 f"expected one of {[f for f in SPEC_FIELDS if hasattr(spec, f)]}")
            if not (value.isdigit() and int(value) >= 1):
                raise ValueError(f"--change {key}={value!r}: expected an integer >= 1")
            cfg_changes[key] = int(value) if key.startswith("out_subblock") else float(value)
        elif key == "in0_memory":
            if not isinstance(spec, MatmulSpec) or spec.cfg.kind not in IN0_SHARD_LAYOUT:
                raise ValueError(f"--change in0_memory={value}: {type(spec).__name__} is not a 1D / 2D multicast "
                                 f"matmul; expected a row whose program config is one of {sorted(IN0_SHARD_LAYOUT)}")
            if value not in IN0_MEMORY:
                raise ValueError(f"--change in0_memory={value!r}: expected one of {list(IN0_MEMORY)}")
            out = dataclasses.replace(out, **IN0_MEMORY[value])
        elif key in SPEC_FIELDS:
            if not hasattr(spec, key):
                raise ValueError(f"--change {key}={value}: {type(spec).__name__} has no {key}; expected one of "
                                 f"{[f for f in (*SPEC_FIELDS, *CONFIG_FIELDS) if hasattr(spec, f) or (f in CONFIG_FIELDS and isinstance(spec, MatmulSpec))]}")
            out = dataclasses.replace(out, **{key: value})
        else:
            raise ValueError(f"--change {key}={value}: unknown field; expected one of "
                             f"{[*CONFIG_FIELDS, *SPEC_FIELDS, 'in0_memory']}")
    if cfg_changes:
        subblock = {} if any(k.startswith("out_subblock") for k in cfg_changes) else {"out_subblock_h": None,
                                                                                       "out_subblock_w": None}
        out = dataclasses.replace(out, cfg=dataclasses.replace(out.cfg, **cfg_changes, **subblock))
    if isinstance(out, MatmulSpec):
        out.cfg.validate("matmul", board, M=out.M, K=out.K, N=out.N, weight_dtype=out.weight_dtype,
                         act_dtype=out.act_dtype, fp32_dest_acc=True)
    return out


def whatif_row(report: Report, line: int, changes: dict[str, str], cal: Calibration, *, level: float = LEVEL) -> dict:
    """The row at ``line`` before and after ``changes``: measured, predicted now, predicted after, and
    the predicted delta with its 90% interval (``report_diff.delta_interval``)."""
    row = next((r for r in report.rows if r.line == line), None)
    if row is None:
        raise ValueError(f"--line {line}: no data line {line} in {report.path}")
    if row.status != MODELLED:
        raise ValueError(f"--line {line} ({row.op_code}): not priced by the model ({row.status})")
    board = row.spec.board() if isinstance(row.spec, ChipSpec) else report.hw
    new = changed_spec(row.spec, changes, board)
    a, b = linearised(report.hw, cal, [KernelSpec(row.spec), KernelSpec(new)], [row.duration_us] * 2)
    d, lo, hi, _ = delta_interval(cal, a, b, z=quantile(cal, level))
    return {"line": line, "op_code": row.op_code, "changes": dict(changes), "measured_us": row.duration_us,
            "predicted_us": a[0], "after_us": b[0], "delta_us": d, "delta_interval_us": [lo, hi],
            "after_interval_us": [row.duration_us + lo, row.duration_us + hi]}
