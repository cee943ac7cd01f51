"""Reader forms built from real report lines (shared/data/profiler_reports): 2D-multicast matmuls on
DRAM operands, the row's own fp32_dest_acc flag, scalar eltwise operands, gamma told from a residual
by its logical shape, collectives set apart; and ``coverage``'s device-time shares against an
independent sum over the CSV."""

import math
import pathlib

import pytest
from _report_util import inner, one_line, records
from _shared_data import profiler_reports_dir

from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import EltwiseSpec, KernelSpec, MatmulSpec, NormSpec
from costmodel.blackhole.program_config import MCAST_2D
from costmodel.blackhole.report_coverage import coverage
from costmodel.blackhole.report_reader import COLLECTIVE, MODELLED, read_report

DATA = profiler_reports_dir()
DEEPSEEK = DATA / "bh_8xp150_deepseek_v3_d_p.csv"
CLIP = DATA / "bh_64_clip_encoder_1.csv"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real reports not found at {DATA}")


def _one_line(src, dst, pick, edit=lambda r: None):
    return one_line(src, dst, pick, edit)[0]


def test_2d_multicast_on_dram_operands_is_read_and_priced(tmp_path):
    def pick(r):
        return ("MatmulMultiCoreReuseMultiCastProgramConfig(" in r["ATTRIBUTES"] and r["DEVICE ID"] == "0"
                and r["OUTPUT_0_MEMORY"].endswith("DRAM_INTERLEAVED"))
    line = _one_line(DEEPSEEK, tmp_path / "mm2d.csv", pick)
    assert line.status == MODELLED and isinstance(line.spec, MatmulSpec) and line.spec.cfg.kind == MCAST_2D
    us = float(KernelSpec(line.spec).us(read_report(tmp_path / "mm2d.csv").hw, load_calibration().params))
    assert math.isfinite(us) and us > 0


def test_2d_multicast_with_an_l1_output_is_read_with_its_l1_flag(tmp_path):
    def pick(r):
        return "MatmulMultiCoreReuseMultiCastProgramConfig(" in r["ATTRIBUTES"] and r["OUTPUT_0_MEMORY"].endswith(
            "L1_INTERLEAVED")
    line = _one_line(DEEPSEEK, tmp_path / "mm2d_l1.csv", pick)
    assert line.status == MODELLED and line.spec.cfg.kind == MCAST_2D
    assert line.spec.out_l1 and not line.spec.in0_l1


@pytest.mark.parametrize("flag, modelled", [("0", True), ("1", False)])
def test_the_rows_fp32_dest_acc_flag_sets_the_destination_tiles(tmp_path, flag, modelled):
    """A real 1D matmul line with an 1x8 output subblock: legal with fp32_dest_acc_en=0 (8 destination
    tiles), not with 1 (4). Its batch of 32 heads is made one head so that only the flag differs."""
    def pick(r):
        return "MatmulMultiCoreReuseMultiCast1DProgramConfig(" in r["ATTRIBUTES"] and "out_subblock_w=8" in r[
            "ATTRIBUTES"]

    def edit(r):
        assert "fp32_dest_acc_en=0" in r["ATTRIBUTES"]
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("fp32_dest_acc_en=0", f"fp32_dest_acc_en={flag}")
        for pre in ("INPUT_0", "INPUT_1", "OUTPUT_0"):
            r[f"{pre}_Z_PAD[LOGICAL]"] = "1[1]"
    line = _one_line(DEEPSEEK, tmp_path / f"dest{flag}.csv", pick, edit)
    assert (line.status == MODELLED) == modelled, line.status
    if not modelled:
        assert "8 > 4 destination tiles" in line.status


def test_scalar_mul_is_one_tensor_read(tmp_path):
    line = _one_line(CLIP, tmp_path / "scalar.csv", lambda r: "'scalar': '0.125'" in r["ATTRIBUTES"])
    # CLIP ran on a 64-core grid: the spec is priced there (a ChipSpec of the 8x8 grid)
    assert line.status == MODELLED and line.spec.grid == (8, 8)
    assert line.spec.inner == EltwiseSpec("mul", 32, 768, "bf16", n_inputs=1)


@pytest.mark.parametrize("second, fused", [("gamma", False), ("residual", True)])
def test_norm_gamma_is_told_from_a_residual_by_its_logical_shape(tmp_path, second, fused):
    """CLIP's norm line has gamma [1, 1, 32[1], 768]: padded like x [32[19], 768], one logical row."""
    def edit(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("LayerNormType::LAYERNORM", "LayerNormType::RMSNORM")
        assert r["INPUT_1_Y_PAD[LOGICAL]"] == "32[1]" and r["INPUT_0_Y_PAD[LOGICAL]"] == "32[19]"
        if second == "residual":
            r["INPUT_1_Y_PAD[LOGICAL]"] = "32[19]"
    line = _one_line(CLIP, tmp_path / f"{second}.csv", lambda r: r["OP CODE"] == "LayerNormDeviceOperation", edit)
    # the line's compute kernel config says fp32_dest_acc_en=1
    assert line.status == MODELLED and line.spec.inner == NormSpec(32, 768, "bf16", fused, fp32_dest_acc=True)


GPT_OSS_DECODE = pathlib.Path(__file__).parent / "data" / "profiler_more" / "bh_gpt_oss_20b_fused_decode_b1.csv"


@pytest.mark.parametrize("residual", [False, True])
def test_one_row_norm_tells_gamma_from_a_residual_by_the_tensor_count(tmp_path, residual):
    """gpt-oss's one-token RMSNorm line has x [32[1], 2880] and gamma [32[1], 2880]: one logical shape. The
    op's tensors come as x, [residual], gamma, so two tensors are x and gamma (the line is not a fused add +
    norm), and three are x, a residual and gamma."""
    def edit(r):
        if residual:
            for col in [c for c in list(r) if c.startswith("INPUT_1_")]:
                r[col.replace("INPUT_1_", "INPUT_2_")] = r[col]
    pick = (lambda r: r["OP CODE"] == "LayerNormDeviceOperation" and r["INPUT_0_Y_PAD[LOGICAL]"] == "32[1]")
    line = _one_line(GPT_OSS_DECODE, tmp_path / f"norm{residual}.csv", pick, edit)
    assert line.status == MODELLED
    assert inner(line.spec) == NormSpec(32, 2880, "bf16", fused_residual=residual, fp32_dest_acc=True)


def test_gpt_oss_one_row_norms_read_as_the_unfused_norm_they_measure_like():
    """The report's six RMSNorms, one-token (lines 70, 90, ...) and 17-token (16, 31), measure alike
    (44.85-45.00 us): they read to one unfused spec, so they get one price."""
    rep = read_report(GPT_OSS_DECODE)
    norms = [r for r in rep.rows if r.status == MODELLED and isinstance(inner(r.spec), NormSpec)]
    assert len(norms) == 6 and max(r.duration_us for r in norms) < 1.01 * min(r.duration_us for r in norms)
    assert {inner(r.spec) for r in norms} == {NormSpec(32, 2880, "bf16", fused_residual=False, fp32_dest_acc=True)}


def test_collectives_are_set_apart_and_coverage_sums_the_csv(capsys):
    rep = read_report(DEEPSEEK)
    collectives = {r.op_code for r in rep.rows if r.status == COLLECTIVE}
    assert {"AllGatherAsyncDeviceOperation", "ReduceScatterMinimalAsyncDeviceOperation"} <= collectives
    cov = coverage(rep)
    # independent: sum the device-0 device ops' durations straight from the CSV
    recs = [r for r in records(DEEPSEEK) if r["DEVICE ID"] == "0" and r["OP TYPE"] == "tt_dnn_device"]
    total = sum(float(r["DEVICE KERNEL DURATION [ns]"]) for r in recs) / 1e3
    coll = sum(float(r["DEVICE KERNEL DURATION [ns]"]) for r in recs if r["OP CODE"] in collectives) / 1e3
    assert cov.rows == len(recs) and cov.device_us == pytest.approx(total)
    assert coll > 0 and cov.collective_us == pytest.approx(coll)
    assert cov.modelled_us + sum(us for _, us in cov.skipped.values()) == pytest.approx(total)
    assert cov.share == pytest.approx(cov.modelled_us / (total - coll))
    assert main(["coverage", str(DEEPSEEK), str(CLIP)]) == 0
    out = capsys.readouterr().out
    assert "bh_8xp150_deepseek_v3_d_p.csv" in out and f"{100 * cov.share:.1f}%" in out
    assert "unary op EXP not priced" in out  # CLIP's sigmoid as a unary chain: no sourced cost of exp
