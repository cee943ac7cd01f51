"""The data-movement writers' sub-tile NoC writes (reshape's tt_memmove segments, transpose_hc's face
rows) against real Blackhole op reports: the counts against the factory's own map algorithm written
out element by element, the writer threads' measured times, and the rows' kernel durations."""

import csv
import dataclasses
import math
import pathlib

import numpy as np
import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole.data_movement import reshape_copies_per_tile, transpose_hc_writes
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.report_reader import MODELLED, read_report
from costmodel.hardware import TILE, blackhole_p150a

DATA = profiler_reports_dir()
CLIP = DATA / "bh_64_clip_encoder_1.csv"
NORTH = pathlib.Path(__file__).parent / "data" / "profiler_pairs" / "bh_north_mini_functional_decode_b1.csv"
needs_reports = pytest.mark.skipif(not CLIP.is_file(), reason=f"real reports not found at {DATA}")


def _faced(h, w):
    """Offset of element (h, w) inside its 32x32 tile of four 16x16 faces."""
    f = TILE // 2
    hh, ww = h % TILE, w % TILE
    return ((hh // f) * 2 + ww // f) * f * f + (hh % f) * f + ww % f


def _map_segments(in_shape, out_shape):
    """Segments per output page, walked element by element as reshape_map_output_page does
    (tt-metal reshape_tiled_program_factory.cpp): merge while the input page is the previous
    element's and both faced offsets advance by one."""
    (_, hi_, wi_), (co_, ho_, wo_) = in_shape, out_shape
    wti, hti = math.ceil(wi_ / TILE), math.ceil(hi_ / TILE)
    counts = []
    for c in range(co_):
        for th in range(math.ceil(ho_ / TILE)):
            for tw in range(math.ceil(wo_ / TILE)):
                n, prev = 0, None
                for h in range(th * TILE, min(ho_, th * TILE + TILE)):
                    for w in range(tw * TILE, min(wo_, tw * TILE + TILE)):
                        flat = (c * ho_ + h) * wo_ + w
                        ci, rem = divmod(flat, hi_ * wi_)
                        hi, wi = divmod(rem, wi_)
                        page = ci * hti * wti + (hi // TILE) * wti + wi // TILE
                        cur = (page, _faced(hi, wi), _faced(h, w))
                        if not (prev and cur[0] == prev[0] and cur[1] - prev[1] == 1 and cur[2] - prev[2] == 1):
                            n += 1
                        prev = cur
                counts.append(n)
    return float(np.mean(counts))


@pytest.mark.parametrize("shapes", [((1, 19, 768), (19, 12, 64)), ((19, 12, 64), (1, 19, 768)),
                                    ((2, 40, 24), (1, 80, 24)), ((1, 33, 50), (3, 11, 50)), ((1, 8, 96), (1, 24, 32))],
                         ids=lambda s: f"{s[0]}->{s[1]}")
def test_reshape_copies_match_the_factory_map_walked_per_element(shapes):
    assert reshape_copies_per_tile(*shapes) == pytest.approx(_map_segments(*shapes))


def _rows(path, code):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["OP CODE"] == code and r["DEVICE KERNEL DURATION [ns]"]]


def _logical(r, pre):
    return tuple(int(r[f"{pre}_{d}_PAD[LOGICAL]"].split("[")[1].rstrip("]")) for d in "WZYX")


@needs_reports
def test_transpose_hc_writer_time_follows_the_counted_writes():
    """Per distinct HC shape (one tile per core or fewer in all three): the writer thread's time beyond
    the reader's (BRISC - NCRISC, read straight from the CSVs) grows with the face-row writes a core
    issues, and the assumed per-write cost puts it within a factor of two."""
    cycles = blackhole_p150a().noc_write_issue_cycles
    points = {}
    for path, cores in ((CLIP, 64), (NORTH, 110)):
        for r in _rows(path, "TransposeDeviceOperation"):
            if "HC" not in r["ATTRIBUTES"]:
                continue
            shape = _logical(r, "INPUT_0")
            per_tile, pad, per_pad = transpose_hc_writes(shape)
            n_tiles = math.prod(shape[:2]) * math.ceil(shape[2] / TILE) * math.ceil(shape[3] / TILE)
            assert n_tiles <= cores
            writes = per_tile + (per_pad if pad else 0.0) * math.ceil(pad / cores)
            gap = (float(r["DEVICE BRISC KERNEL DURATION [ns]"]) - float(r["DEVICE NCRISC KERNEL DURATION [ns]"])) / 1e3
            points.setdefault(writes, []).append(gap)
    assert sorted(points) == [6.0, 26.0, 42.0]
    gaps = [float(np.median(points[w])) for w in sorted(points)]
    assert gaps == sorted(gaps)
    for w, g in zip(sorted(points), gaps):
        assert 0.5 < w * cycles / 1.35e3 / g < 2.0


@needs_reports
def test_reshape_and_transpose_hc_rows_within_tolerance_and_the_writes_matter():
    """CLIP encoder reshape / HC-transpose rows predicted by the stored calibration against their
    DEVICE KERNEL DURATION; without the writes (0 cycles each) reshape falls back below -20%. Reshape's
    mean |error| is 18.6% (under-priced) since kernel-only slices and transposes pin the data-movement
    fixed time (report_calibration.json: 1.40 us, was 2.03 from traced rows, which masked ~0.6 us)."""
    rep = read_report(CLIP)
    fit = load_calibration().params
    errs, errs0 = {}, {}
    for r in rep.rows:
        kind = getattr(getattr(r.spec, "inner", None), "kind", None)
        if r.status != MODELLED or kind not in ("reshape", "transpose_hc"):
            continue
        us = float(KernelSpec(r.spec).us(rep.hw, fit))  # priced on the report's 8x8 grid (ChipSpec)
        no_writes = dataclasses.replace(r.spec.board(), noc_write_issue_cycles=0.0)
        us0 = float(KernelSpec(r.spec.inner).us(no_writes, fit))
        errs.setdefault(kind, []).append(us / r.duration_us - 1)
        errs0.setdefault(kind, []).append(us0 / r.duration_us - 1)
    assert len(errs["reshape"]) == 96 and len(errs["transpose_hc"]) == 96
    assert np.mean(np.abs(errs["reshape"])) < 0.20
    assert np.mean(np.abs(errs["transpose_hc"])) < 0.20
    assert np.mean(errs0["reshape"]) < -0.2
