"""The fixed time of small ops: what the stored calibration leaves out, by tt-metal build and dispatch.

Two things the kernel-only pricing (``KernelSpec``) does not see move a small op's DEVICE KERNEL DURATION
by tenths of a microsecond:

* **Dispatch.** An op dispatched back to back (its OP TO OP LATENCY under ``BACK_TO_BACK_US``: it was
  queued before its predecessor ended) starts its cores ~0.9 us apart (DEVICE KERNEL FIRST TO LAST
  START ~1.1 us, against ~0.17 us when isolated), and a small multi-core op's kernel time grows with it.
* **Build.** The reports of the newer builds (their CSVs carry ``DRAM BW UTIL PER CTRL (%)``) run
  isolated small ops faster than the older build's (the CLIP encoder, tt-perf-report's test data).

The launch constants ([launch_eltwise_us], [launch_heads_us]) are fitted on the port's tables, the
public sets and the North-mini excerpts, whose rows are all back to back on a newer build: that level
is also the older build's isolated one, so both are priced, and the newer builds' isolated small ops
are priced high. ``calibrate --ops-csv`` on a user's own report moves the constants to its level."""

from __future__ import annotations

import csv
import statistics

import pytest

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.report_reader import MODELLED, model_cores, read_report
from experiments.report.sections.blackhole import real_report_paths, report_positions

NEWER_BUILD_COLUMN = "DRAM BW UTIL PER CTRL (%)"
GAP_COLUMN = "OP TO OP LATENCY [ns]"
SMALL_US = 3.0  # measured device time below which an op is mostly its fixed time
BACK_TO_BACK_US, ISOLATED_US = 1.0, 2.0  # OP TO OP LATENCY: queued behind the previous op / dispatched alone
MIN_OPS = 5
TOLERANCE_US = 0.2  # well under the offsets this file tells apart (0.2-0.6 us isolated, ~0.4 us by dispatch)
OLDER = "bh_64_clip_encoder_1.csv"


def dispatch(gap_text: str) -> str | None:
    """'back to back', 'isolated', or None (no gap, the first op, or in between) of an OP TO OP LATENCY cell."""
    try:
        gap_us = float(gap_text) / 1e3
    except ValueError:
        return None
    return "back to back" if 0 < gap_us < BACK_TO_BACK_US else "isolated" if gap_us > ISOLATED_US else None


@pytest.fixture(scope="module")
def small_ops() -> dict[str, dict]:
    """{report: {"newer": newer build, "rows": [(dispatch, cores priced, spec, measured us, measured - priced
    us)]}} over each real report's modelled rows (every run in it, its first device) measured under
    ``SMALL_US``, priced with the stored fit."""
    params, positions = load_calibration().params, report_positions()
    out = {}
    for path in real_report_paths():
        with open(path, newline="") as f:
            lines = csv.reader(f)
            header = next(lines)
            gap = header.index(GAP_COLUMN)
            gaps = {n: cells[gap] for n, cells in enumerate(lines, start=2)}  # the reader's line numbers
        report = read_report(path, decode_position=positions.get(str(path)))
        rows = [(dispatch(gaps[r.line]), model_cores(r.spec, report.hw), r.spec, r.duration_us,
                 r.duration_us - float(KernelSpec(r.spec).us(report.hw, params)))
                for r in report.timed_rows() if r.status == MODELLED and r.duration_us < SMALL_US]
        out[path.name] = {"newer": NEWER_BUILD_COLUMN in header, "rows": rows}
    return out


def medians(small_ops, newer: bool, how: str) -> dict[str, tuple[int, float]]:
    """{report: (ops, median measured - priced us)} of the multi-core small ops dispatched ``how``, of the
    reports of the newer (or older) build with at least ``MIN_OPS`` of them."""
    out = {}
    for name, rep in small_ops.items():
        d = [diff for how_, cores, _, _, diff in rep["rows"] if how_ == how and cores > 1]
        if rep["newer"] == newer and len(d) >= MIN_OPS:
            out[name] = (len(d), statistics.median(d))
    return out


def off(meds: dict[str, tuple[int, float]]) -> dict[str, str]:
    """The reports of ``medians`` whose median is off by more than ``TOLERANCE_US``, as text."""
    return {name: f"{m:+.2f} us ({n} ops)" for name, (n, m) in meds.items() if abs(m) > TOLERANCE_US}


def test_the_older_builds_isolated_small_ops_are_priced_within_0_2_us(small_ops):
    n, median = medians(small_ops, newer=False, how="isolated")[OLDER]
    assert n >= 100
    assert abs(median) <= TOLERANCE_US, f"{OLDER}: median measured - priced {median:+.2f} us over {n} small ops"


def test_back_to_back_small_ops_of_either_build_are_priced_within_0_2_us(small_ops):
    """The level the launch constants are fitted at: the newer builds' back-to-back rows (North-mini's among
    them) and the older build's."""
    both = {**medians(small_ops, newer=True, how="back to back"), **medians(small_ops, newer=False, how="back to back")}
    assert OLDER in both and len(both) >= 4
    assert not off(both), off(both)


@pytest.mark.xfail(strict=True, reason="the newer builds run isolated small ops faster than the launch constants "
                                       "price them (median measured - priced: gpt-oss -0.58 / -0.43, Qwen3-4B -0.49, "
                                       "Qwen3.6 -0.23 / -0.40 us; Phi-3.5 -0.18): a fixed time per build is not "
                                       "modelled")
def test_the_newer_builds_isolated_small_ops_are_priced_within_0_2_us(small_ops):
    newer = medians(small_ops, newer=True, how="isolated")
    assert len(newer) >= 5
    assert not off(newer), off(newer)


@pytest.mark.xfail(strict=True, reason="the same small multi-core op takes a median 0.43 us longer dispatched back to "
                                       "back than isolated (20 ops run both ways in 6 reports); the model prices a "
                                       "kernel without its dispatch")
def test_dispatch_changes_an_ops_price_as_it_changes_its_time(small_ops):
    """Ops a report runs both ways (one op spec, measured under ``SMALL_US`` both ways, more than one core):
    the median over them of (measured back to back - measured isolated) - (priced back to back - priced
    isolated)."""
    gaps = []
    for rep in small_ops.values():
        by_spec: dict = {}
        for how, cores, spec, us, diff in rep["rows"]:
            if how is not None and cores > 1:
                by_spec.setdefault(spec, {}).setdefault(how, []).append((us, us - diff))
        for runs in by_spec.values():
            if len(runs) == 2:
                b2b, iso = runs["back to back"], runs["isolated"]
                measured = statistics.median(u for u, _ in b2b) - statistics.median(u for u, _ in iso)
                priced = statistics.median(p for _, p in b2b) - statistics.median(p for _, p in iso)
                gaps.append(measured - priced)
    assert len(gaps) >= 15
    assert abs(statistics.median(gaps)) <= TOLERANCE_US, f"median {statistics.median(gaps):+.2f} us over {len(gaps)} ops"
