"""The fixed time of small ops, per tt-metal build.

The op reports of the newer builds (``tests/data/profiler_more``, the North-mini pairs; their CSVs carry
``DRAM BW UTIL PER CTRL (%)``) run small ops faster than the stored calibration prices them; the older
build's (the CLIP encoder, tt-perf-report's test data) are priced to within 0.15 us (median). The
launch constants ([launch_eltwise_us], [launch_heads_us]) are fitted on the port's tables and the public
sets; a fixed time per build is not modelled. ``calibrate --ops-csv`` on a user's own report moves them."""

from __future__ import annotations

import csv
import statistics

import pytest

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.report_reader import MODELLED, read_report
from experiments.report.sections.blackhole import real_report_paths, report_positions

NEWER_BUILD_COLUMN = "DRAM BW UTIL PER CTRL (%)"
SMALL_US = 3.0  # measured device time below which an op is mostly its fixed time
MIN_OPS = 5
TOLERANCE_US = 0.15
OLDER = "bh_64_clip_encoder_1.csv"


@pytest.fixture(scope="module")
def offsets() -> dict[str, tuple[bool, int, float]]:
    """{report: (newer build, small ops, median of measured - priced us)} over each real report's
    modelled rows (every run in it, its first device) measured under ``SMALL_US``, priced with the stored
    fit; reports with fewer than ``MIN_OPS`` such rows left out."""
    params, positions = load_calibration().params, report_positions()
    out = {}
    for path in real_report_paths():
        with open(path, newline="") as f:
            newer = NEWER_BUILD_COLUMN in next(csv.reader(f))
        report = read_report(path, decode_position=positions.get(str(path)))
        diffs = [r.duration_us - float(KernelSpec(r.spec).us(report.hw, params)) for r in report.timed_rows()
                 if r.status == MODELLED and r.duration_us < SMALL_US]
        if len(diffs) >= MIN_OPS:
            out[path.name] = (newer, len(diffs), statistics.median(diffs))
    return out


def test_the_older_builds_small_ops_are_priced_within_0_15_us(offsets):
    newer, n, median = offsets[OLDER]
    assert not newer and n >= 100
    assert abs(median) <= TOLERANCE_US, f"{OLDER}: median measured - priced {median:+.2f} us over {n} small ops"


@pytest.mark.xfail(strict=True, reason="the newer builds run small ops faster than the launch constants fitted on "
                                       "the older ones price them (median measured - priced: gpt-oss -0.55 / -0.41, "
                                       "Qwen3-4B -0.44, Qwen3.6 -0.23 / -0.37, Phi-3.5 -0.24, Llama-3.2 -1.32 us; "
                                       "North-mini +-0.11): a fixed time per build is not modelled")
def test_the_newer_builds_small_ops_are_priced_within_0_15_us(offsets):
    newer = {name: (n, m) for name, (is_newer, n, m) in offsets.items() if is_newer}
    assert len(newer) >= 5
    off = {name: f"{m:+.2f} us ({n} ops)" for name, (n, m) in newer.items() if abs(m) > TOLERANCE_US}
    assert not off, off
