"""OP TO OP LATENCY [ns] in the op reports the project writes: the traced gap between consecutive
device ops (``Blackhole.trace_op_gap_s``) after each device's first op, which gets 0.

Oracles: the real reports, read with the csv module (tt-metal's traced North-mini decode windows in
tests/data/profiler_pairs, an untraced CLIP encoder run in shared/data/profiler_reports). The emitted
files read by the real tool are checked in test_costmodel_report_reader.py (``--emit-csv``) and
test_device_parity.py (the emulated parity ``ops.csv``)."""

import csv
import statistics

import pytest
from _report_util import TRACED_DECODE, records, traced_gap_median_ns, traced_gaps_ns
from _shared_data import profiler_reports_dir

from costmodel.blackhole.report_schema import GAP, OpRecord, TensorDesc, write_report
from costmodel.hardware import Blackhole, blackhole, field_bounds

UNTRACED_CLIP = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
# tt-perf-report 1.4.1 flags a gap above this (perf_report.py, print_op_to_op_gap_advice) and says
# tracing would save it
ADVICE_GAP_NS = 6500.0


def test_trace_gap_is_the_median_of_the_real_traced_decode_windows():
    gaps = [g for path in TRACED_DECODE for g in traced_gaps_ns(path)]
    assert len(gaps) == 42  # 2 windows x 22 ops, each window's first left out
    assert blackhole().trace_op_gap_s * 1e9 == pytest.approx(traced_gap_median_ns(), abs=1e-6)
    assert blackhole("p100a").trace_op_gap_s == blackhole().trace_op_gap_s
    # every measured traced gap lies inside the field's bounds, all below tt-perf-report's advice threshold
    lo, hi = field_bounds(Blackhole, "trace_op_gap_s")
    assert hi * 1e9 == ADVICE_GAP_NS
    assert all(lo <= g * 1e-9 <= hi for g in gaps)


@pytest.mark.skipif(not UNTRACED_CLIP.is_file(), reason=f"shared data missing: {UNTRACED_CLIP}")
def test_untraced_gaps_are_larger_than_the_traced_ones():
    """Without trace the host issues every op: a real untraced Blackhole run's typical gap is above
    tt-perf-report's advice threshold and above every traced gap, so the traced number is the one a
    traced step's report carries."""
    rows = [r for r in records(UNTRACED_CLIP) if r["OP TYPE"] == "tt_dnn_device"]
    assert not any(r["METAL TRACE ID"] for r in rows)
    untraced = statistics.median(float(r[GAP]) for r in rows[1:])
    traced = [g for path in TRACED_DECODE for g in traced_gaps_ns(path)]
    assert untraced > ADVICE_GAP_NS > max(traced)


def _record(device_id: int) -> OpRecord:
    t = TensorDesc((1, 1, 32, 64), "BFLOAT16")
    return OpRecord("BinaryNgDeviceOperation", {}, (t, t), (t,), "", 2, 1000.0, device_id=device_id)


def test_writer_gives_each_device_first_op_zero_and_the_gap_after(tmp_path):
    path = tmp_path / "r.csv"
    write_report(path, [_record(0), _record(0), _record(1), _record(0), _record(1)], op_gap_ns=591.5)
    with path.open(newline="") as f:
        assert [(r["DEVICE ID"], r[GAP]) for r in csv.DictReader(f)] == [
            ("0", "0"), ("0", "591.5"), ("1", "0"), ("0", "591.5"), ("1", "591.5")]
    write_report(path, [_record(0), _record(0)], op_gap_ns=None)  # neither measured nor modelled: empty
    with path.open(newline="") as f:
        assert [r[GAP] for r in csv.DictReader(f)] == ["", ""]


@pytest.mark.parametrize("gap", [-1.0, float("nan"), float("inf")], ids=["negative", "nan", "inf"])
def test_writer_refuses_a_gap_that_is_not_a_time(gap, tmp_path):
    with pytest.raises(ValueError, match="op_gap_ns="):
        write_report(tmp_path / "r.csv", [_record(0)], op_gap_ns=gap)
