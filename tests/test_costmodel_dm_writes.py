"""The data-movement writers' sub-tile NoC writes (reshape's tt_memmove segments, transpose_hc's face
rows) and reshape's reads and blocking output write against real Blackhole op reports: the counts
against the factory's own map algorithm written out element by element, the writer threads' measured
times, and the rows' kernel durations."""

import csv
import dataclasses
import math
import pathlib

import numpy as np
import pytest
from _shared_data import need_file, profiler_reports_dir

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.data_movement import (
    busiest_core_loads,
    reshape_copies_per_tile,
    reshape_reads_per_tile,
    reshape_tile_work,
    split_work_ranges,
    transpose_hc_writes,
)
from costmodel.blackhole.ops import overlap, read_us
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.report_reader import MODELLED, read_report
from costmodel.hardware import TILE, blackhole_p150a

DATA = profiler_reports_dir()
CLIP = DATA / "bh_64_clip_encoder_1.csv"
NORTH = pathlib.Path(__file__).parent / "data" / "profiler_pairs" / "bh_north_mini_functional_decode_b1.csv"
MORE = pathlib.Path(__file__).parent / "data" / "profiler_more"
GPT_OSS = [MORE / "bh_gpt_oss_20b_fused_decode_b1.csv", MORE / "bh_gpt_oss_20b_fused_prefill_s17.csv"]
QWEN = MORE / "bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv"
needs_reports = pytest.mark.skipif(not CLIP.is_file(), reason=f"real reports not found at {DATA}")


def _faced(h, w):
    """Offset of element (h, w) inside its 32x32 tile of four 16x16 faces."""
    f = TILE // 2
    hh, ww = h % TILE, w % TILE
    return ((hh // f) * 2 + ww // f) * f * f + (hh % f) * f + ww % f


def _map_pages(in_shape, out_shape):
    """Per output page, the factory's map walked element by element as reshape_map_output_page does
    (tt-metal reshape_tiled_program_factory.cpp @ 01840686): {input page: its segments}, a segment
    merged while the input page is the previous element's and both faced offsets advance by one."""
    (_, hi_, wi_), (co_, ho_, wo_) = in_shape, out_shape
    wti, hti = math.ceil(wi_ / TILE), math.ceil(hi_ / TILE)
    maps = []
    for c in range(co_):
        for th in range(math.ceil(ho_ / TILE)):
            for tw in range(math.ceil(wo_ / TILE)):
                segs, prev = {}, None
                for h in range(th * TILE, min(ho_, th * TILE + TILE)):
                    for w in range(tw * TILE, min(wo_, tw * TILE + TILE)):
                        flat = (c * ho_ + h) * wo_ + w
                        ci, rem = divmod(flat, hi_ * wi_)
                        hi, wi = divmod(rem, wi_)
                        page = ci * hti * wti + (hi // TILE) * wti + wi // TILE
                        cur = (page, _faced(hi, wi), _faced(h, w))
                        if not (prev and cur[0] == prev[0] and cur[1] - prev[1] == 1 and cur[2] - prev[2] == 1):
                            segs[page] = segs.get(page, 0) + 1
                        prev = cur
                maps.append(segs)
    return maps


def _map_segments(in_shape, out_shape):
    """Mean segments (tt_memmove copies) per output page of the factory's map."""
    return float(np.mean([sum(m.values()) for m in _map_pages(in_shape, out_shape)]))


def _map_reads(in_shape, out_shape):
    """Mean blocking reads per output page of reader_reshape_tiled.cpp over the factory's map: the
    mapping page, then one per run of segments from one input page; the map (a std::map keyed by input
    page) lists each page's segments together, so one read per distinct input page."""
    return 1.0 + float(np.mean([len(m) for m in _map_pages(in_shape, out_shape)]))


@pytest.mark.parametrize("shapes", [((1, 19, 768), (19, 12, 64)), ((19, 12, 64), (1, 19, 768)),
                                    ((2, 40, 24), (1, 80, 24)), ((1, 33, 50), (3, 11, 50)), ((1, 8, 96), (1, 24, 32))],
                         ids=lambda s: f"{s[0]}->{s[1]}")
def test_reshape_copies_match_the_factory_map_walked_per_element(shapes):
    assert reshape_copies_per_tile(*shapes) == pytest.approx(_map_segments(*shapes))


@pytest.mark.parametrize("shapes", [((1, 19, 768), (19, 12, 64)), ((19, 12, 64), (1, 19, 768)),
                                    ((1, 32, 17), (32, 17, 1)), ((2, 40, 24), (1, 80, 24)), ((1, 33, 50), (3, 11, 50)),
                                    ((1, 8, 96), (1, 24, 32)), ((1, 64, 48), (1, 96, 32)), ((1, 16, 100), (1, 50, 32))],
                         ids=lambda s: f"{s[0]}->{s[1]}")
def test_reshape_reads_match_the_factory_map_walked_per_element(shapes):
    """One read per distinct input page: where an output tile's rows alternate between input tiles
    ([1, 8, 96] -> [1, 24, 32]: 3 input tiles, each row 32 columns of one of them in turn) the map
    groups them, so 1 + 3 reads, not a read per change along the rows (25)."""
    assert reshape_reads_per_tile(*shapes) == pytest.approx(_map_reads(*shapes))


def _rows(path, code):
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r["OP CODE"] == code and r["DEVICE KERNEL DURATION [ns]"]]


def _logical(r, pre):
    return tuple(int(r[f"{pre}_{d}_PAD[LOGICAL]"].split("[")[1].rstrip("]")) for d in "WZYX")


# The HC transpose writer's padding loop changed in tenstorrent/tt-metal pull request #36896 (merged
# 2026-01-31, "Reduce number of noc writes using in padding path of transpose tile hc again", after #36842):
# before it, one NoC write per face row of each padding face (writer_unary_transpose_hc_interleaved_tiled_
# padding_aware.cpp as stored at myply/tt-metal @ b20ac21c and wusatosi/tt-metal @ 3ce95f16: a sub_tile_line
# loop inside face_w); after it, one write per face (tenstorrent/tt-metal @ 0d1a31f5, ``transpose_hc_writes``).
# The CLIP report ran the older kernel: it was added to tt-perf-report's test data on 2025-12-26 (commit
# 47849a4); the other reports' writers agree with the current one (below).
OLDER_KERNEL_REPORTS = {CLIP.name}
MIN_WRITES = 16  # below this the closing write barrier (~0.3 us) is most of the writer's tail


def _older_kernel_pad_writes(c: int) -> int:
    """NoC writes per padding tile of the pre-#36896 writer, its loops walked: for each face row from the
    one holding channel C mod 32 on, one write per face across."""
    face = TILE // 2
    first = (c % TILE) // face
    return sum(1 for face_c in range(first, TILE // face) for _ in range(TILE // face)
               for _ in range((c % face) if face_c == first else 0, face))


@pytest.fixture(scope="module")
def hc_writer_points():
    """{(report, shape): (writes a core issues with its own kernel, with the other kernel, median writer tail
    ns)} of every HC row with at most one input tile per core, the tail BRISC - NCRISC (the writer's time
    past the reader's last push, read straight from the CSVs)."""
    paths = [CLIP, *sorted(MORE.glob("bh_*.csv")), *sorted(NORTH.parent.glob("bh_*.csv"))]
    tails = {}
    for path in (p for p in paths if not p.name.endswith("_perf_report.csv")):
        older = path.name in OLDER_KERNEL_REPORTS
        for r in _rows(path, "TransposeDeviceOperation"):
            if "HC" not in r["ATTRIBUTES"]:
                continue
            shape = _logical(r, "INPUT_0")
            cores = int(float(r["AVAILABLE WORKER CORE COUNT"]))
            if math.prod(shape[:2]) * math.ceil(shape[2] / TILE) * math.ceil(shape[3] / TILE) > cores:
                continue
            per_tile, pad, per_pad = transpose_hc_writes(shape)
            share = math.ceil(pad / cores) if pad else 0
            current, previous = per_tile + per_pad * share, per_tile + _older_kernel_pad_writes(shape[1]) * share
            own, other = (previous, current) if older else (current, previous)
            tail = float(r["DEVICE BRISC KERNEL DURATION [ns]"]) - float(r["DEVICE NCRISC KERNEL DURATION [ns]"])
            tails.setdefault((path.name, shape, own, other), []).append(tail)
    return {(name, shape): (own, other, float(np.median(t))) for (name, shape, own, other), t in tails.items()
            if own >= MIN_WRITES}


def _median_cycles_per_write(points) -> float:
    """The median writer tail per write over ``hc_writer_points`` (each report's kernel's count), cycles."""
    return float(np.median([tail / n for n, _, tail in points.values()])) * blackhole_p150a().clock_hz / 1e9


def test_older_kernel_pad_writes_walk():
    """C = 19 (3 real rows in the last face): 13 face rows x 2 faces; C = 12: 4 + 16 rows x 2; C = 1: 15 + 16."""
    assert [_older_kernel_pad_writes(c) for c in (19, 12, 1, 16, 33)] == [26, 40, 62, 32, 62]


@needs_reports
def test_transpose_hc_writer_time_per_write_agrees_across_builds_with_each_kernels_count(hc_writer_points):
    """The HC writer's tail per face-row write, with each report's kernel's count: 32-49 ns in every report
    and shape (CLIP, older kernel, 37-40 ns; four newer reports, eight shapes, 32-49 ns). Counted with the
    other kernel's loop instead, CLIP's come out twice the newer ones (68-76 ns) and the newer ones half of
    CLIP's: the count, not the build, is what differs. The assumed issue cost (``noc_write_issue_cycles``)
    is within a factor of two of the median."""
    pts = hc_writer_points
    own = {k: tail / n for k, (n, _, tail) in pts.items()}
    other = {k: tail / m for k, (_, m, tail) in pts.items()}
    older = [k for k in pts if k[0] in OLDER_KERNEL_REPORTS]
    newer = [k for k in pts if k[0] not in OLDER_KERNEL_REPORTS]
    assert len(older) == 2 and len(newer) >= 7 and len({k[0] for k in newer}) >= 4
    assert max(own.values()) / min(own.values()) < 1.6
    newer_median = float(np.median([own[k] for k in newer]))
    older_median = float(np.median([own[k] for k in older]))
    assert all(other[k] > 1.8 * newer_median for k in older)
    assert all(other[k] < 0.8 * older_median for k in newer)
    assert 0.5 < blackhole_p150a().noc_write_issue_cycles / _median_cycles_per_write(pts) < 2.0


@needs_reports
@pytest.mark.xfail(strict=True, reason="the assumed issue cost (64 cycles) is ~1.35x the HC writers' measured "
                   "time per write (~47 cycles); lowered alone it under-prices reshape's L1 copies and tilize's "
                   "stick reads, which share it (see the module docstring of kinds/data_movement.py)")
def test_the_assumed_write_issue_cost_is_the_measured_one(hc_writer_points):
    """Within 15% of the median tail per write (each report's kernel's count)."""
    assert abs(blackhole_p150a().noc_write_issue_cycles / _median_cycles_per_write(hc_writer_points) - 1) < 0.15


@needs_reports
def test_reshape_and_transpose_hc_rows_within_tolerance_and_the_writes_matter():
    """CLIP encoder reshape / HC-transpose rows predicted by the stored calibration against their
    DEVICE KERNEL DURATION; without the writes (0 cycles each) reshape falls back below -20%. Reshape's
    mean |error| is 14.8% (under-priced; 18.6% before the output tile's blocking write) since kernel-only
    slices and transposes pin the data-movement fixed time (report_calibration.json: 1.40 us, was 2.03
    from traced rows, which masked ~0.6 us); what is left is ~0.1 us per input tile the reader waits for
    the writer, not priced (the module docstring of costmodel/blackhole/kinds/data_movement.py)."""
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
    assert np.mean(np.abs(errs["reshape"])) < 0.16
    assert np.mean(np.abs(errs["transpose_hc"])) < 0.20
    assert np.mean(errs0["reshape"]) < -0.2


def _reshape_3d(r, pre):
    """A report row's logical shape as the tiled reshape factory sees it: rank 3 [W*Z, Y, X]."""
    w, z, y, x = _logical(r, pre)
    return (w * z, y, x)


@needs_reports
def test_reshape_writer_tail_is_the_last_tiles_copies_and_one_blocking_write():
    """Per distinct reshape shape (one output tile per core in all four), the writer thread's time beyond
    the reader's (BRISC - NCRISC, read straight from the CSVs) is what writer_reshape_tiled.cpp does after
    the reader's last push: the copies of the output tile's last input page, then the output tile
    written and waited for (noc_async_write_barrier), priced as a blocking read (a DRAM round trip
    overlapped with its transfer). Without the write the copies alone leave >= 0.3 us of every tail."""
    hw, fit = blackhole_p150a(), load_calibration().params
    cycles_us = hw.noc_write_issue_cycles / hw.clock_hz * 1e6
    groups = {}
    for path, code in ((CLIP, "ReshapeDeviceOperation"),
                       *((p, "ReshapeViewDeviceOperation") for p in GPT_OSS if p.is_file())):
        for r in _rows(path, code):
            shapes = (_reshape_3d(r, "INPUT_0"), _reshape_3d(r, "OUTPUT_0"))
            cores = int(r["CORE COUNT"])
            gap = (float(r["DEVICE BRISC KERNEL DURATION [ns]"]) - float(r["DEVICE NCRISC KERNEL DURATION [ns]"])) / 1e3
            groups.setdefault((shapes, cores), []).append(gap)
    assert len(groups) >= 2
    for (shapes, cores), gaps in groups.items():
        maps = _map_pages(*shapes)
        assert len(maps) == cores  # split_work_to_cores: one output tile per core
        last_copies = float(np.median([m[max(m)] for m in maps]))
        t_write = float(overlap(fit, fit.dram_latency_us, read_us(hw, fit, 1, 2048, cores, relax=None)))
        tail = float(np.median(gaps))
        assert tail - last_copies * cycles_us > 0.3, shapes
        assert last_copies * cycles_us + t_write == pytest.approx(tail, rel=0.15), shapes


@needs_reports
def test_gpt_oss_reshape_rows_within_tolerance():
    """gpt-oss-20b's tiled reshapes ([1, 32, 17] -> [32, 17, 1], [1, 32, 1] -> [32, 1, 1]: 32 output tiles,
    two reads each) against the median DEVICE KERNEL DURATION of each report's rows of one shape: within
    8% with the output tile's blocking write (-10% to -15% without it)."""
    fit = load_calibration().params
    n = 0
    for path in GPT_OSS:
        need_file(path)
        rep = read_report(path)
        groups = {}
        for r in rep.rows:
            if r.status == MODELLED and "Reshape" in r.op_code:
                groups.setdefault(r.spec, []).append(r.duration_us)
        for spec, measured in groups.items():
            assert float(KernelSpec(spec).us(rep.hw, fit)) == pytest.approx(np.median(measured), rel=0.08), spec
            n += len(measured)
    assert n == 5


@pytest.mark.parametrize("shapes", [((1, 132, 256), (4, 33, 256)), ((4, 33, 256), (1, 132, 256)),
                                    ((2, 40, 24), (1, 80, 24)), ((1, 8, 96), (1, 24, 32)), ((1, 40, 16), (2, 20, 16)),
                                    ((1, 16, 64), (4, 16, 16))],
                         ids=lambda s: f"{s[0]}->{s[1]}")
def test_reshape_tile_work_per_tile_matches_the_factory_map_walked_per_element(shapes):
    """Per output tile, not only on average: Qwen's 33-row blocks make tiles of 1 or 2 input pages and 63-64
    segments next to tiles of one row (2 segments), so the cores' work differs. Where input and output
    rows line up, the map merges face row 15's end with face row 16's start (offsets 511 -> 512), and
    16-wide tensors run on across rows: one segment fewer each (the face-row count alone missed them)."""
    reads, copies = reshape_tile_work(*shapes)
    maps = _map_pages(*shapes)
    assert reads.tolist() == [1.0 + len(m) for m in maps]
    assert copies.tolist() == [float(sum(m.values())) for m in maps]


def test_split_work_ranges_deals_like_split_work_to_cores():
    """200 output tiles on 110 cores: 90 cores of 2, then 20 of 1, consecutive (Qwen line 28)."""
    ranges = split_work_ranges(200, 110)
    assert len(ranges) == 110 and ranges[0] == (0, 2) and ranges[89] == (178, 180) and ranges[90] == (180, 181)
    assert ranges[-1][1] == 200
    assert split_work_ranges(40, 110) == [(i, i + 1) for i in range(40)]
    # two cores: one with more units, one with more of the second count; a dominated core is dropped
    assert busiest_core_loads((np.array([1.0, 1.0, 1.0, 1.0, 9.0]),), 3) == ((1.0, 9.0), (2.0, 2.0))


def _qwen_groups(code):
    """Rows of ``code`` in the Qwen report grouped by spec: {first line: (spec, median us)}."""
    rep = read_report(QWEN)
    groups = {}
    for r in rep.rows:
        if r.status == MODELLED and r.op_code == code:
            groups.setdefault(r.spec, []).append((r.line, r.duration_us))
    return rep, {min(ln for ln, _ in v): (spec, float(np.median([d for _, d in v]))) for spec, v in groups.items()}


def test_qwen_reshape_rows_priced_by_the_busiest_core():
    """Qwen3.6-27B's reshapes of 33-row blocks (tests/data/profiler_more/SOURCES.md; one p150, 110 cores):
    lines 30, 31, 33 ([792|132, 256] <-> [24|4, 33, 256]) give some output tiles 64 copies and 2-3 input
    pages and others a single row. Priced by the busiest core's own tiles they are within 16% of the
    median DEVICE KERNEL DURATION; priced as ceil(units / cores) mean tiles (the model before) they are
    27-38% under. Line 28 ([24, 33, 256] -> [792, 256]) stays ~16% under (not asserted): see the
    module docstring of costmodel/blackhole/kinds/data_movement.py for the unpriced per-input-page handshakes."""
    fit = load_calibration().params
    rep, groups = _qwen_groups("ReshapeViewDeviceOperation")
    for line in (30, 31, 33):
        spec, measured = groups[line]
        assert len(spec.core_loads) >= 1
        new = float(KernelSpec(spec).us(rep.hw, fit)) / measured - 1
        old = float(KernelSpec(dataclasses.replace(spec, core_loads=())).us(rep.hw, fit)) / measured - 1
        assert abs(new) < 0.16, (line, new)
        assert old < -0.25, (line, old)


def test_qwen_concat_rows_are_the_unary_streaming_program():
    """Qwen's two-input concats (lines 50, 53, 70, 73: 16-384 output tiles) run reader_concat_interleaved_
    start_id.cpp with eltwise/unary's writer_unary_interleaved_start_id.cpp and no compute kernel, as the
    rows' kernel columns name them: the unary streaming program's fixed time [launch_eltwise_us], not the
    heads ops' [launch_heads_us]. Within +30% of the measured medians (+23% to +73% with the heads' time);
    the ~0.3 us left is that of the slices of one tile per core (lines 54, 67), the same program shape."""
    with open(QWEN, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["OP CODE"] == "ConcatDeviceOperation"]
    assert rows and all("eltwise/unary/device/kernels/dataflow/writer_unary_interleaved_start_id.cpp"
                        in r["DATA MOVEMENT KERNEL SOURCE"] and r["COMPUTE KERNEL SOURCE"] == "[]" for r in rows)
    fit = load_calibration().params
    rep, groups = _qwen_groups("ConcatDeviceOperation")
    assert sorted(groups) == [50, 53, 70, 73]
    for line, (spec, measured) in groups.items():
        assert spec.kernel_fixed_us(fit) == fit.launch_eltwise_us
        new = float(KernelSpec(spec).us(rep.hw, fit)) / measured - 1
        heads = float(KernelSpec(spec).us(rep.hw, dataclasses.replace(fit, launch_eltwise_us=fit.launch_heads_us)))
        assert 0.0 < new < 0.30, (line, new)
        assert heads / measured - 1 > 0.20, line
