"""Matmuls whose activation (in0) is L1-sharded, read from the real North-mini decode out-projection
line (tests/data/profiler_pairs, SOURCES.md there): the reader's form, the cores it writes against
the row's own CORE COUNT, the priced time against the measured one, the DRAM roofline without in0
bytes, and the writer / reader round trip of the layout each kind reads."""

import dataclasses
import math

import pytest
from _report_util import TRACED_DECODE, ideal_fit, one_line, records

from costmodel.blackhole import ops
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.holdout import row_intervals
from costmodel.blackhole.kinds import matmul as mm
from costmodel.blackhole.opspecs import KernelSpec, MatmulSpec
from costmodel.blackhole.program_config import MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, MatmulProgramConfig
from costmodel.blackhole.report_reader import MODELLED, model_cores, read_report, write_csv
from costmodel.hardware import blackhole_p150a

HW = blackhole_p150a()
HW_ANY_RATE = dataclasses.replace(HW, dram_request_cycles=0.0)  # as test_costmodel_ops' roofline limits


def _out_proj(r) -> bool:
    return r["OP CODE"] == "MatmulDeviceOperation" and r["INPUT_0_MEMORY"] == "DEV_0_L1_WIDTH_SHARDED"


@pytest.mark.parametrize("path", TRACED_DECODE, ids=["functional", "fused"])
def test_the_out_projection_line_is_read_as_an_in0_sharded_1d_matmul(tmp_path, path):
    line, rec = one_line(path, tmp_path / "oproj.csv", _out_proj)
    assert line.status == MODELLED, line.status
    spec = line.spec
    assert isinstance(spec, MatmulSpec) and spec.in0_sharded and not spec.in0_l1 and not spec.out_l1
    # the row's own shapes and program config
    assert (spec.M, spec.K, spec.N) == (int(rec["INPUT_0_Y_PAD[LOGICAL]"].split("[")[0]),
                                        int(rec["INPUT_0_X_PAD[LOGICAL]"].split("[")[0]),
                                        int(rec["INPUT_1_X_PAD[LOGICAL]"].split("[")[0])) == (32, 4096, 2048)
    assert spec.cfg.kind == MCAST_1D_IN0 and "mcast_in0=1" in rec["ATTRIBUTES"]
    assert (int(spec.cfg.in0_block_w), int(spec.cfg.per_core_N)) == (4, 2)
    # the cores priced are the cores the profiler counted
    assert model_cores(spec, HW) == int(rec["CORE COUNT"]) == 32


# Over-priced by +27% / +30% (53.9 us against 42.4 / 41.6 measured: its weights stream faster than the
# fitted dram_eff). Both rows lay inside their intervals only while the extrapolation term of the
# 1D-matmul family (the rows' kernel-only kind is one no stored row has) was 0.139, shrunk towards a
# matmul-class term that the DRAM-sharded public sweep's held-out errors (-36% to +9%, priced with the
# weight stream alone) inflated. Priced with their in0 handshake and products (matmul_dram_sharded_us)
# those rows are within 10%, the family term is 0.081 and both out projections lie below their intervals
# ([45.2, 64.4] for the functional one): a strict xfail on the model's miss.
OUT_PROJ_MISS = pytest.mark.xfail(strict=True, reason="priced +27-30% (53.9 vs 42.4 / 41.6 us: the weights stream "
                                  "faster than the fitted dram_eff), below the 1D family's interval")


@pytest.mark.parametrize("path", [pytest.param(TRACED_DECODE[0], marks=OUT_PROJ_MISS),
                                  pytest.param(TRACED_DECODE[1], marks=OUT_PROJ_MISS)],
                         ids=["functional", "fused"])
def test_the_out_projection_is_priced_inside_its_interval(tmp_path, path):
    """The measured DEVICE KERNEL DURATION lies inside the 90% interval that ``predict`` gives the row
    (stored calibration and discrepancy). The model over-predicts it (~54 vs ~42 us): the row streams
    its 16.8 MB of weights at ~0.8 of the DRAM peak, more than the fitted dram_eff, as the same
    report's interleaved 1D matmuls do (QKV +17%)."""
    report = read_report(path)
    (row,) = [r for r in report.timed_rows() if r.status == MODELLED and getattr(r.spec, "in0_sharded", False)]
    measured_us = float(next(r for r in records(path) if _out_proj(r))["DEVICE KERNEL DURATION [ns]"]) / 1e3
    assert row.duration_us == pytest.approx(measured_us)
    fit_rows = report.measured_rows()
    (iv,) = [p for r, p in zip([r for r in report.timed_rows() if r.status == MODELLED],
                               row_intervals(load_calibration(), fit_rows, hw=report.hw, discrepancy="stored"),
                               strict=True) if r.line == row.line]
    assert iv["lo"] <= measured_us <= iv["hi"], (iv["lo"], iv["predicted"], iv["hi"], measured_us)


@pytest.mark.parametrize("kind,M,K,N,cfg", [
    (MCAST_1D_IN0, 32, 4096, 2048, MatmulProgramConfig(4.0, 2.0, 1.0)),                # the North-mini out-proj
    # tall, short K: the output's DRAM bytes stay above the tile products and the one in1 multicast link
    (MCAST_1D_IN1, 8192, 128, 128, MatmulProgramConfig(4.0, 4.0, 4.0, kind=MCAST_1D_IN1)),
])
def test_sharded_in0_leaves_the_dram_bound(kind, M, K, N, cfg):
    """Unlimited core rate, no latency or launch: the 1D time is the DRAM bytes at the peak, and with in0
    L1-sharded those are the weights and the output only (bytes counted from the shapes)."""
    for sharded in (False, True):
        t = mm.matmul_us(HW_ANY_RATE, ideal_fit(), cfg, M=M, K=K, N=N, weight_dtype="bf16", in0_sharded=sharded)
        bytes_ = K * N * 2 + (0 if sharded else M * K * 2) + M * N * 2
        assert float(t) == pytest.approx(bytes_ / 512e9 * 1e6, rel=1e-4)


@pytest.mark.parametrize("kind,M,K,N,cfg", [
    (MCAST_1D_IN0, 32, 4096, 2048, MatmulProgramConfig(4.0, 2.0, 1.0)),
    (MCAST_1D_IN0, 128, 4096, 2048, MatmulProgramConfig(8.0, 2.0, 4.0)),
    (MCAST_1D_IN1, 1024, 2048, 256, MatmulProgramConfig(4.0, 8.0, 4.0, kind=MCAST_1D_IN1)),
    (MCAST_2D, 512, 2048, 2048, MatmulProgramConfig(4.0, 8.0, 2.0, kind=MCAST_2D, grid_x=8, grid_y=8)),
])
def test_less_in0_movement_is_never_slower(kind, M, K, N, cfg):
    """Fitted parameters: L1-sharded in0 (local) <= L1-interleaved (over the NoC) <= DRAM-interleaved."""
    fit = load_calibration().params

    def t(**flags):
        return float(KernelSpec(MatmulSpec(M, K, N, cfg, "bfp8", **flags)).us(HW, fit))
    sharded, l1, dram = t(in0_sharded=True), t(in0_l1=True), t()
    assert sharded <= l1 * (1 + 1e-6) and l1 <= dram * (1 + 1e-6), (sharded, l1, dram)
    assert math.isfinite(sharded) and sharded > 0


def test_in0_both_sharded_and_interleaved_is_refused():
    spec = MatmulSpec(32, 4096, 2048, MatmulProgramConfig(4.0, 2.0, 1.0), "bf16", in0_l1=True, in0_sharded=True)
    with pytest.raises(ValueError, match="in0_sharded=True and in0_l1=True"):
        spec.us(HW, load_calibration().params)


@pytest.mark.parametrize("kind,layout,M,cfg", [
    (MCAST_1D_IN0, "L1_WIDTH_SHARDED", 32, MatmulProgramConfig(4.0, 2.0, 1.0)),
    (MCAST_1D_IN1, "L1_HEIGHT_SHARDED", 1024, MatmulProgramConfig(4.0, 8.0, 4.0, kind=MCAST_1D_IN1)),
    (MCAST_2D, "L1_BLOCK_SHARDED", 512, MatmulProgramConfig(4.0, 8.0, 2.0, kind=MCAST_2D, grid_x=8, grid_y=8)),
])
def test_the_writer_writes_the_layout_the_reader_reads_back(tmp_path, kind, layout, M, cfg):
    """The mcast_in0 layout is the real line's (WIDTH); each kind's spec survives write_csv + read_report."""
    N = 2048 if kind != MCAST_1D_IN1 else 256
    spec = MatmulSpec(M, 2048, N, cfg, "bf16", in0_sharded=True)
    write_csv(tmp_path / "w.csv", [(spec, 10.0)], hw=HW)
    (rec,) = records(tmp_path / "w.csv")
    assert rec["INPUT_0_MEMORY"] == f"DEV_0_{layout}"
    (line,) = read_report(tmp_path / "w.csv").rows
    assert line.status == MODELLED, line.status
    assert line.spec.in0_sharded and not line.spec.in0_l1 and line.spec.cfg.kind == kind


@pytest.mark.parametrize("edit,reason", [
    (lambda r: r.update({"INPUT_0_MEMORY": "DEV_0_L1_HEIGHT_SHARDED"}), "reads an L1 WIDTH_SHARDED in0"),
    (lambda r: r.update({"CORE COUNT": "40"}), "sender-only cores not modelled"),
    (lambda r: r.update({"OUTPUT_0_MEMORY": "DEV_0_L1_WIDTH_SHARDED"}), "sharded operand (OUTPUT_0"),
])
def test_sharded_forms_the_model_does_not_price_are_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(TRACED_DECODE[0], tmp_path / "skip.csv", _out_proj, edit)
    assert line.status != MODELLED and reason in line.status, line.status


@pytest.mark.parametrize("memory,column", [("dram", "DEV_0_DRAM_INTERLEAVED"), ("l1", "DEV_0_L1_INTERLEAVED")])
def test_whatif_in0_memory_is_the_row_read_with_that_memory(tmp_path, memory, column):
    """``whatif --change in0_memory=...`` on the real line prices what the reader makes of the same line
    with its INPUT_0_MEMORY column edited to that memory (an independent path to the changed spec)."""
    from costmodel.blackhole.report_whatif import changed_spec, whatif_row

    line, _ = one_line(TRACED_DECODE[0], tmp_path / "a.csv", _out_proj)
    edited, _ = one_line(TRACED_DECODE[0], tmp_path / "b.csv", _out_proj, lambda r: r.update({"INPUT_0_MEMORY": column}))
    assert edited.status == MODELLED and not edited.spec.in0_sharded
    assert changed_spec(line.spec, {"in0_memory": memory}, HW) == edited.spec
    res = whatif_row(read_report(tmp_path / "a.csv"), line.line, {"in0_memory": memory}, load_calibration())
    fit = load_calibration().params
    assert res["after_us"] == pytest.approx(float(KernelSpec(edited.spec).us(HW, ops.kernel_only(fit))), rel=1e-4)
    assert res["after_us"] >= res["predicted_us"]  # moving in0 off its shards is never priced faster


def test_whatif_in0_memory_refuses_a_bad_value(tmp_path):
    from costmodel.blackhole.report_whatif import changed_spec

    line, _ = one_line(TRACED_DECODE[0], tmp_path / "a.csv", _out_proj)
    with pytest.raises(ValueError, match="in0_memory='sharded'"):
        changed_spec(line.spec, {"in0_memory": "sharded"}, HW)
