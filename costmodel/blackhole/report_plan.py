"""A plan search over a whole real op report: per row, the change the model prices fastest, ranked
by predicted saving with its 90% interval, in one ranking over three kinds of change.

    python -m costmodel.blackhole plan --ops-csv ops_perf_results.csv [--start-signpost NAME --end-signpost NAME]
                                       [--target-ms 30] [--top 15] [--json]

* matmul: every modelled matmul row, by its kind (``plan_candidates``, each candidate legal by the
  kind's one rule): 1D / 2D multicast, every in0_block_w that divides K/32 and (1D in0-multicast)
  every per_core_N whose split fits the grid (``MatmulProgramConfig.validate``: L1, grid, subblock);
  DRAM-sharded, every in0_block_w dividing the row's own (the in0 shard width the report does not
  print; ``MatmulProgramConfig.validate``); MinimalMatmul, its M / K / N block sizes over every block
  count (``MinimalMatmulSpec.validate``: subblocks, grid, L1); each also with the other weight formats
  of the vocabulary and every lower math fidelity;
* sdpa: every modelled SDPA row (flash-decode or standard): its ``SdpaProgramConfig`` with every
  k_chunk (a tile multiple dividing the cache rows) and every cores_per_head 1..16 (decode) or
  q_chunk (a tile multiple dividing the query rows per head, standard), legal by
  ``SdpaProgramConfig.validate`` (L1 among its rules), and the same with the other KV-cache formats
  and every lower math fidelity;
* fusion: an eltwise add row followed (next device op) by an unfused norm row whose input has the
  add's shape and format: both replaced by the model's fused residual norm (``NormSpec`` with
  ``fused_residual``, the op the port's ``--fuse-add-norm`` prices; two outputs, so the sum the
  residual stream reads later is still written). A report names no tensors: that the norm reads
  the add's output is read from adjacency, shape and format.

A change on a row whose measured time lies outside the model's own 90% interval of it (``predict``'s,
``RowPlan.fits_row``) is marked '!': the model misprices the op the change is priced on.

A format or fidelity change is flagged: the model prices its bytes and matrix-engine passes, not its
accuracy, which only a parity run of the user's model can tell (a KV-format change also leaves the
rows writing the cache unpriced). Each candidate is priced exactly (``KernelSpec``); a row gets its
best change only where that is priced faster than its own config (by ``SAME_PRICE``), else no plan,
and its best flagged change of each flag (format, fidelity, both) only where it beats every config
change (and, with both flags, each flag alone) by as much.

Savings. A config or format change keeps the op: its saving is the model's delta (prediction now
minus after), with the interval of ``report_diff.delta_interval`` (shared parameters and the op
model's shared error cancel). A fusion removes two measured rows and adds an op the report lacks:
its saving is the two rows' measured time minus the fused op's price, with the interval of the
fused op alone (``report_diff.one_side_interval``: its parameters and its own model error; the
removed rows are measured). The report's time is kernel time, so the dispatch gap of the op a
fusion removes is not counted in its saving.

The port's ``plan --target-ms`` generalised: P(the report's measured total minus the savings <=
target) for the unflagged changes combined one per row (``combine``).

Rows the plan cannot search say why (``PlanResult.skipped``): a matmul or SDPA row the model does
not price (the reader's reason) or does not search (a priced matmul of a kind outside
``SEARCHED_MATMUL_KINDS``), an SDPA row whose own config the model's
legality rule refuses, an add + norm pair one of whose rows is not priced or whose shapes differ.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
from scipy import stats

from costmodel.blackhole.discrepancy import load_discrepancy
from costmodel.blackhole.fit import Calibration
from costmodel.blackhole.intervals import LEVEL, kept_grad, param_var, quantile
from costmodel.blackhole.kinds.minimal_matmul import BATCH_FIELDS, MinimalMatmulSpec, minimal_matmul_batch_us
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.opspecs import (
    ChipSpec,
    EltwiseSpec,
    KernelSpec,
    MatmulSpec,
    NormSpec,
    SdpaCausalSpec,
    SdpaDecodeSpec,
    SdpaStandardSpec,
)
from costmodel.blackhole.plan_candidates import candidates, validate_sdpa
from costmodel.blackhole.program_config import (
    DRAM_SHARDED,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
)
from costmodel.blackhole.report_diff import delta_interval, linearised, one_side_interval
from costmodel.blackhole.report_predict import predict_report
from costmodel.blackhole.report_reader import CLASS_OF_CODE, MODELLED, Report, ReportRow

KINDS = ("matmul", "sdpa", "fusion")  # the change kinds, in the order the summary lists them
SEARCHED_MATMUL_KINDS = (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, DRAM_SHARDED)  # ttnn matmul configs searched


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """The best change of one row (a fusion: of an add + norm pair): what it is, the predicted times
    (us) and the saving's interval.

    ``measured_us`` / ``predicted_us``: the rows the change replaces, measured and as the model
    prices them; ``after_us``: the model's price after; ``saving_us``: predicted minus after for a
    config / format change, measured minus after for a fusion (module docstring); ``lines``: every
    report line the change replaces; ``saving_grad`` (d saving / d theta), ``saving_grad_kept`` (the
    same, or 0 where an op of the change extrapolates: ``intervals.param_var``) and ``model_var_us2``
    (the saving's model-error variance) are what ``combine`` adds up (not written to JSON)."""

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
    kind: str = "matmul"
    lines: tuple[int, ...] = ()
    predicted_interval_us: tuple[float, float] | None = None  # the row's own 90% interval now (``predict``'s)
    saving_grad: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    saving_grad_kept: np.ndarray | None = dataclasses.field(default=None, repr=False, compare=False)
    model_var_us2: float = dataclasses.field(default=0.0, repr=False, compare=False)
    op_key: object = dataclasses.field(default=None, repr=False, compare=False)  # the op model and change

    @property
    def fits_row(self) -> bool:
        """The row's measured time lies inside the model's 90% interval of it (always True for a fusion,
        whose saving starts from the measured rows): where it does not, the model misprices the op the
        change is priced on, and its saving (a model delta) deserves the same doubt."""
        iv = self.predicted_interval_us
        return iv is None or iv[0] <= self.measured_us <= iv[1]


@dataclasses.dataclass(frozen=True)
class Skip:
    """A row (or add + norm pair) of a searched kind that the plan could not search, and why."""

    lines: tuple[int, ...]
    op_code: str
    kind: str
    reason: str


@dataclasses.dataclass(frozen=True)
class PlanResult:
    """``plan_search``: the changes (by saving, largest first), the rows skipped with their reason,
    how many rows (pairs) of each kind were searched, and the add + norm pairs whose fused op the
    model prices no faster than the two rows measured (as changes, their saving <= 0: searched, not
    advised)."""

    changes: list[RowPlan]
    skipped: list[Skip]
    searched: dict[str, int]
    fusions_not_faster: list[RowPlan] = dataclasses.field(default_factory=list)


def _inner(spec):
    return getattr(spec, "inner", spec)


def _board(spec, report: Report):
    return spec.board() if isinstance(spec, ChipSpec) else report.hw


def _board_key(spec):
    """(chip, grid) of a row priced on another board or grid, None on the report's own."""
    return (spec.chip, spec.grid) if isinstance(spec, ChipSpec) else None


def _rewrap(row_spec, inner):
    """``inner`` on the board of ``row_spec`` (a ``ChipSpec`` keeps its chip and grid)."""
    return dataclasses.replace(row_spec, inner=inner) if isinstance(row_spec, ChipSpec) else inner


# A candidate priced less than this fraction faster than the row's own config is not a change worth
# advising: far below the run-to-run movement of an unchanged op between two profiler runs (e.g. a
# weight format that a row bound elsewhere reads a few ns faster).
SAME_PRICE = 1e-3


def _searched_matmul(r: ReportRow) -> bool:
    inner = _inner(r.spec)
    return isinstance(inner, MinimalMatmulSpec) or (isinstance(inner, MatmulSpec)
                                                     and inner.cfg.kind in SEARCHED_MATMUL_KINDS)


def _is_sdpa(r: ReportRow) -> bool:
    """A searched SDPA row: decode with a mask or standard. A causal decode (no mask) is priced at its
    cache's capacity, an upper bound of the position the report does not carry, or at the position its
    caller gave (``decode_position``): the search has no k-chunk or core change for it."""
    inner = _inner(r.spec)
    return isinstance(inner, SdpaStandardSpec) or (isinstance(inner, SdpaDecodeSpec) and inner.mask_dtype is not None)


def searched_rows(report: Report) -> list:
    """The rows ``plan_search`` searches configs of: modelled matmul rows of the ``SEARCHED_MATMUL_KINDS``
    and MinimalMatmul rows, and modelled SDPA rows (the add + norm pairs: ``fusion_pairs``)."""
    return [r for r in report.rows if r.status == MODELLED and (_searched_matmul(r) or _is_sdpa(r))]


def _row_kind(r: ReportRow) -> str | None:
    """'matmul' / 'sdpa' for a row of those op classes (by op code, modelled or not), else None."""
    cls = CLASS_OF_CODE.get(r.op_code)
    if cls in ("matmul", "minimal_matmul"):
        return "matmul"
    if cls in ("sdpa", "sdpa_decode") or "SDPA" in r.op_code.upper():
        return "sdpa"
    return None


def unsearched_rows(report: Report) -> list[Skip]:
    """Timed matmul / SDPA rows the plan does not search, each with why: the reader's skip reason, or
    the kind of program config the search does not cover."""
    out = []
    for r in report.timed_rows():
        kind = _row_kind(r)
        if kind is None or (r.status == MODELLED and (_searched_matmul(r) or _is_sdpa(r))):
            continue
        if r.status != MODELLED:
            reason = f"not priced by the model: {r.status}"
        elif kind == "sdpa":
            inner = _inner(r.spec)
            what = ("causal SDPA" if isinstance(inner, SdpaCausalSpec) else "causal SDPA decode, priced at its cache's "
                    "capacity or at the decode position given" if isinstance(inner, SdpaDecodeSpec)
                    else type(inner).__name__)
            reason = (f"priced but not searched: {what} (the plan searches masked decode and non-causal SDPA "
                      "chunks)")
        else:
            inner = _inner(r.spec)
            what = inner.cfg.kind if isinstance(inner, MatmulSpec) else type(inner).__name__
            reason = (f"priced but not searched: the plan searches the {'/'.join(SEARCHED_MATMUL_KINDS)} matmul "
                      f"configs and MinimalMatmul blocks (this row: {what})")
        out.append(Skip((r.line,), r.op_code, kind, reason))
    return out


def fusion_pairs(report: Report) -> tuple[list[tuple[ReportRow, ReportRow, object]], list[Skip]]:
    """The add + norm pairs of ``report`` the model can fuse, each with the fused op's spec (on the
    norm row's board), and the pairs it cannot with why. A pair: a timed eltwise row directly followed
    (next timed row: the same device) by a norm row; fusable when the first is a two-tensor add, the
    norm is not fused already, both are priced, and the add's output has the norm input's rows,
    width, format and board. A mul, or an add before a fused norm, is no pair."""
    timed = report.timed_rows()
    pairs, skips = [], []
    for a, n in itertools.pairwise(timed):
        if CLASS_OF_CODE.get(a.op_code) != "eltwise" or CLASS_OF_CODE.get(n.op_code) != "norm":
            continue
        lines, code = (a.line, n.line), f"{a.op_code} + {n.op_code}"
        ea, nn = _inner(a.spec), _inner(n.spec)
        if a.status == MODELLED and not (isinstance(ea, EltwiseSpec) and ea.kind == "add"):
            continue  # a mul before a norm: nothing to fuse
        if n.status == MODELLED and not isinstance(nn, NormSpec):
            skips.append(Skip(lines, code, "fusion", f"the norm row is a {type(nn).__name__}: the model prices the "
                                                     "fused residual norm of the interleaved program only"))
            continue
        if n.status == MODELLED and nn.fused_residual:
            continue  # the norm has its residual fused already
        why = None
        if a.status != MODELLED:
            why = f"the eltwise row is not priced by the model: {a.status}"
        elif n.status != MODELLED:
            why = f"the norm row is not priced by the model: {n.status}"
        elif ea.n_inputs != 2:
            why = "the add has a scalar operand: no residual tensor to fuse"
        elif (ea.rows, ea.width, ea.act_dtype) != (nn.rows, nn.width, nn.act_dtype):
            why = (f"the add's output ({ea.rows}x{ea.width} {ea.act_dtype}) is not the norm's input "
                   f"({nn.rows}x{nn.width} {nn.act_dtype})")
        elif _board_key(a.spec) != _board_key(n.spec):
            why = "the add and the norm ran on different worker grids"
        if why:
            skips.append(Skip(lines, code, "fusion", why))
        else:
            pairs.append((a, n, _rewrap(n.spec, dataclasses.replace(nn, fused_residual=True))))
    return pairs, skips


def _flag_parts(flag: str) -> frozenset:
    return frozenset(flag.split("; ")) if flag else frozenset()


def _best(now: float, priced: list[tuple]) -> list[tuple]:
    """Of one op's priced candidates [(after us, text, spec, flag)]: the fastest unflagged one priced
    faster than ``now``, and for each flag (a format, a fidelity, both) the fastest candidate carrying
    it, only where it beats (by ``SAME_PRICE``) every faster candidate of fewer flags: every config
    change, and for both flags each one alone (a fidelity change that buys nothing over the format
    change alone is not advised)."""
    priced = [x for x in priced if x[0] < now * (1 - SAME_PRICE)]
    config_only = [x for x in priced if not x[3]]
    best = [min(config_only, key=lambda x: x[0])] if config_only else []
    for flag in sorted({x[3] for x in priced if x[3]}):
        top = min((x for x in priced if x[3] == flag), key=lambda x: x[0])
        rivals = [x[0] for x in priced if _flag_parts(x[3]) < _flag_parts(flag)]
        if not rivals or top[0] < min(rivals) * (1 - SAME_PRICE):
            best.append(top)
    return best


def plan_search(report: Report, cal: Calibration, *, level: float = LEVEL) -> PlanResult:
    """Every searched row's (pair's) best priced change (module docstring), by saving (largest
    first); a row none beats has no plan; the rows that could not be searched, with why.

    Rows with one op spec share one search (a model's layers repeat their ops)."""
    z = quantile(cal, level)
    disc = load_discrepancy()
    hw, params = report.hw, cal.params
    skipped = unsearched_rows(report)
    searched = dict.fromkeys(KINDS, 0)
    by_spec: dict = {}  # row spec -> (changes of the op, candidates) or the reason it is skipped

    def price(spec) -> float:
        return float(KernelSpec(spec).us(hw, params))

    def price_all(spec, cands: list[tuple]) -> list[float]:
        """``price`` of each candidate op of the row ``spec``: MinimalMatmul block choices in batches
        (``minimal_matmul_batch_us``, the same price as one at a time), the rest one by one."""
        out = [None] * len(cands)
        groups: dict = {}
        for j, (_, s, _) in enumerate(cands):
            if isinstance(s, MinimalMatmulSpec):
                groups.setdefault(tuple(getattr(s, f) for f in BATCH_FIELDS), []).append(j)
            else:
                out[j] = price(_rewrap(spec, s))
        for idx in groups.values():
            us = minimal_matmul_batch_us(_board(spec, report), kernel_only(params), [cands[j][1] for j in idx])
            for j, u in zip(idx, np.asarray(us, np.float64), strict=True):
                out[j] = float(u)
        return out

    def search(spec, kind: str):
        inner, board = _inner(spec), _board(spec, report)
        if kind == "sdpa":
            try:
                validate_sdpa(inner, board)
            except ValueError as e:
                return f"its own program config fails the model's legality rule: {e}"
        cands = candidates(inner, board)
        now = price(spec)
        priced = [(us, text, s, flag) for us, (text, s, flag) in zip(price_all(spec, cands), cands, strict=True)]
        out = []
        for _, text, s, flag in _best(now, priced):
            new = _rewrap(spec, s)
            a, b = linearised(hw, cal, [KernelSpec(spec), KernelSpec(new)], [now, now])
            d, lo, hi, vm = delta_interval(cal, a, b, z=z, disc=disc)
            out.append({"predicted_us": a[0], "change": text, "after_us": b[0], "saving_us": -d, "lo_us": -hi,
                        "hi_us": -lo, "flag": flag, "saving_grad": a[1] - b[1], "model_var_us2": vm,
                        "saving_grad_kept": kept_grad(disc, a[1] - b[1], (a[2], a[0]), (b[2], b[0])),
                        "op_key": (spec, new)})
        return out, len(cands)

    # each row's own 90% interval, as ``predict`` gives it (``holdout.row_intervals``)
    row_iv = {x.line: (x.lo_us, x.hi_us) for x in predict_report(report, cal) if x.lo_us is not None}
    plans = []
    for r in searched_rows(report):
        kind = "matmul" if _searched_matmul(r) else "sdpa"
        if r.spec not in by_spec:
            by_spec[r.spec] = search(r.spec, kind)
        found = by_spec[r.spec]
        if isinstance(found, str):
            skipped.append(Skip((r.line,), r.op_code, kind, found))
            continue
        searched[kind] += 1
        changes, n = found
        plans += [RowPlan(r.line, r.op_code, r.duration_us, candidates=n, kind=kind, lines=(r.line,),
                          predicted_interval_us=row_iv.get(r.line), **c) for c in changes]

    pairs, fusion_skips = fusion_pairs(report)
    skipped += fusion_skips
    fused_cache: dict = {}
    not_faster = []
    for a, n, fused in pairs:
        searched["fusion"] += 1
        if fused not in fused_cache:
            e = linearised(hw, cal, [KernelSpec(fused)], [n.duration_us])[0]
            fused_cache[fused] = (e, *one_side_interval(cal, e, 1.0, z=z, disc=disc))
        (_, grad, fused_spec), after, lo, hi, vm = fused_cache[fused]
        measured = a.duration_us + n.duration_us
        norm = "layer_norm" if _inner(fused).layernorm else "rms_norm"
        # the fused op priced no faster than the two rows measured is searched, not advised
        (plans if after < measured * (1 - SAME_PRICE) else not_faster).append(RowPlan(a.line, f"{a.op_code} + {n.op_code}", measured, price(a.spec) + price(n.spec),
                             f"fuse the add (line {a.line}) into the {norm} (line {n.line}) as its residual input",
                             after, measured - after, measured - hi, measured - lo, 1, kind="fusion",
                             lines=(a.line, n.line), saving_grad=-grad, model_var_us2=vm,
                             saving_grad_kept=kept_grad(disc, -grad, (fused_spec, after)),
                             op_key=(a.spec, n.spec, fused)))
    skipped.sort(key=lambda s: s.lines)
    return PlanResult(sorted(plans, key=lambda p: -p.saving_us), skipped, searched, not_faster)


def plan_report(report: Report, cal: Calibration, *, level: float = LEVEL) -> list[RowPlan]:
    """The changes of ``plan_search`` (every kind, by saving, largest first)."""
    return plan_search(report, cal, level=level).changes


def total_measured_us(report: Report) -> float:
    return sum(r.duration_us for r in report.timed_rows())


def combine(plans: list[RowPlan], cal: Calibration) -> tuple[list[RowPlan], float, float]:
    """(the changes made together, their total saving us, its sd us): one change per row, the
    unflagged changes taken best first, each only where none of its lines is changed already (a
    fusion holds both its rows; a flagged format change needs a parity run first). The sd: the
    parameter part through the sum of the changes' gradients (one calibration prices every row:
    correlated), the model-error part added linearly over the changes of one op (the same spec
    before and after: the same op model's same error, as the port's layers) and in quadrature across
    ops (as the port's op names). A change without a gradient counts its interval as independent."""
    taken: set[int] = set()
    chosen = []
    for p in sorted((p for p in plans if not p.flag), key=lambda p: -p.saving_us):
        lines = set(p.lines or (p.line,))
        if not lines & taken:
            taken |= lines
            chosen.append(p)
    z = quantile(cal)
    g, g_kept = np.zeros(len(cal.theta)), np.zeros(len(cal.theta))
    sd_of_op: dict = {}
    independent = 0.0
    for p in chosen:
        if p.saving_grad is None:
            independent += ((p.hi_us - p.lo_us) / (2 * z)) ** 2
            continue
        g = g + p.saving_grad
        g_kept = g_kept + (p.saving_grad if p.saving_grad_kept is None else p.saving_grad_kept)
        sd_of_op[p.op_key] = sd_of_op.get(p.op_key, 0.0) + math.sqrt(p.model_var_us2)
    var = param_var(cal, g, g_kept) + sum(s**2 for s in sd_of_op.values()) + independent
    return chosen, sum(p.saving_us for p in chosen), math.sqrt(max(var, 0.0))


def reach_probability(report: Report, plans: list[RowPlan], target_us: float, cal: Calibration) -> float:
    """P(measured total - the combined savings <= target): Student-t with the calibration's degrees
    of freedom (as the intervals) around the combined saving, scale its sd (``combine``)."""
    _, saving, sd = combine(plans, cal)
    after = total_measured_us(report) - saving
    if sd == 0.0:
        return float(after <= target_us)
    return float(stats.t.cdf((target_us - after) / sd, cal.dof))


def _skip_lines(skipped: list[Skip]) -> list[str]:
    """The skipped rows grouped by (kind, reason), a few lines each."""
    groups: dict = {}
    for s in skipped:
        groups.setdefault((s.kind, s.reason), []).append(s)
    out = []
    for (kind, reason), ss in sorted(groups.items(), key=lambda kv: (KINDS.index(kv[0][0]), -len(kv[1]))):
        lines = ", ".join("+".join(map(str, s.lines)) for s in ss[:6]) + (", ..." if len(ss) > 6 else "")
        out.append(f"  {kind:6s} {len(ss):3d} x {reason} (line {lines})")
    return out


def format_plan(report: Report, result: PlanResult, *, top: int = 15, target_ms: float | None = None,
                cal: Calibration | None = None) -> str:
    plans = result.changes
    lines = [(f"{'line':>6s} {'kind':6s} {'op code':28s} {'measured':>9s} {'predicted':>9s} {'after':>9s} "
              f"{'saving':>8s}  {'90% interval':18s} change")]
    for p in plans[:top]:
        iv = f"[{p.lo_us:.1f}, {p.hi_us:.1f}]"
        mark = " " if p.fits_row else "!"
        lines.append(f"{p.line:6d}{mark}{p.kind:6s} {p.op_code[:28]:28s} {p.measured_us:9.1f} {p.predicted_us:9.1f} "
                     f"{p.after_us:9.1f} {p.saving_us:8.1f}  {iv:18s} {p.change}" + (f"  ({p.flag})" if p.flag else ""))
    if len(plans) > top:
        lines.append(f"... {len(plans) - top} more (--top)")
    missed = len({p.lines for p in plans if not p.fits_row})
    if missed:
        lines.append(f"! {missed} row(s) whose measured time lies outside the model's 90% interval of it: the model "
                     f"misprices that op now, so a saving priced on it (a model delta) is in doubt too (check it with "
                     f"whatif and a measurement)")
    n = result.searched
    with_plan = {k: len({p.lines for p in plans if p.kind == k}) for k in KINDS}
    lines.append(f"\nsearched: {n['matmul']} matmul rows ({with_plan['matmul']} with a faster priced change), "
                 f"{n['sdpa']} SDPA rows ({with_plan['sdpa']} with one), {n['fusion']} add + norm pairs "
                 f"({with_plan['fusion']} priced faster fused); config / format changes save the model's delta, "
                 f"a fusion the two rows measured minus the fused op priced")
    if result.fusions_not_faster:
        f = result.fusions_not_faster
        worst = max(f, key=lambda p: p.saving_us)
        lines.append(f"add + norm pairs whose fused op the model prices no faster than the two rows measured: "
                     f"{len(f)} (closest: lines {'+'.join(map(str, worst.lines))}, fused {worst.after_us:.1f} us vs "
                     f"{worst.measured_us:.1f} us measured)")
    if result.skipped:
        lines.append(f"not searched ({len(result.skipped)}), with why:")
        lines += _skip_lines(result.skipped)
    total = total_measured_us(report)
    if total > 0 and cal is not None:
        chosen, saving, sd = combine(plans, cal)
        z = quantile(cal)
        lines.append(f"combined, one change per row (unflagged, best first): {len(chosen)} changes, predicted saving "
                     f"{saving:.1f} us [{saving - z * sd:.1f}, {saving + z * sd:.1f}] of the report's {total:.1f} us "
                     f"measured device time ({100 * saving / total:.1f}%); flagged format / fidelity changes left out: "
                     f"{len([p for p in plans if p.flag])}")
        if target_ms is not None:
            lines.append(f"P(device time <= {target_ms:g} ms after the combined changes) = "
                         f"{reach_probability(report, plans, target_ms * 1e3, cal):.2f} (parameters correlated "
                         f"through the one calibration; model errors shared within an op, independent across ops)")
    return "\n".join(lines)


_NOT_WRITTEN = ("saving_grad", "saving_grad_kept", "model_var_us2", "op_key")


def plan_json(report: Report, result: PlanResult, cal: Calibration, *, target_ms: float | None = None) -> dict:
    """The changes (every kind, ``kind`` and ``lines`` naming what each replaces), the skipped rows
    with why, the rows searched per kind, the combined saving with its interval and the lines it
    changes (``combine``), and P(reach) with a target."""
    rows = [{**{k: (list(v) if k in ("lines", "predicted_interval_us") and v is not None else v)
                for k, v in dataclasses.asdict(p).items() if k not in _NOT_WRITTEN}, "fits_row": p.fits_row}
            for p in result.changes]
    doc = {"rows": rows, "skipped": [{**dataclasses.asdict(s), "lines": list(s.lines)} for s in result.skipped],
           "fusions_not_faster": [{k: (list(v) if k == "lines" else v) for k, v in dataclasses.asdict(p).items()
                                   if k not in _NOT_WRITTEN} for p in result.fusions_not_faster],
           "searched": dict(result.searched), "rows_searched": result.searched["matmul"] + result.searched["sdpa"],
           "measured_total_us": total_measured_us(report)}
    chosen, saving, sd = combine(result.changes, cal)
    z = quantile(cal)
    doc.update(predicted_saving_us=saving, saving_interval_us=[saving - z * sd, saving + z * sd],
               combined_lines=sorted(ln for p in chosen for ln in p.lines))
    if target_ms is not None:
        doc.update(target_ms=target_ms, p_reach=reach_probability(report, result.changes, target_ms * 1e3, cal))
    return doc
