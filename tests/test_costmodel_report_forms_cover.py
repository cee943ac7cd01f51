"""Reader forms and mechanisms built from real report lines (shared/data/profiler_reports): batched
and config-less matmuls, minimal_matmul, LayerNorm, softmax, the data-movement family (reshape,
transpose, concat, slice); each row's CORE COUNT against the model's split; the share of device time
priced on the single-chip transformer reports against a sum straight from the CSV."""

import dataclasses
import math
import pathlib

import pytest
from _report_util import ideal_fit, inner, one_line, records
from _shared_data import profiler_reports_dir

from costmodel.blackhole.kinds.data_movement import DataMovementSpec, reshape_reads_per_tile
from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.matmul_auto_config import mcast_1d_config
from costmodel.blackhole.opspecs import KernelSpec, MatmulSpec, NormSpec, SdpaCausalSpec, SoftmaxSpec
from costmodel.blackhole.program_config import MCAST_1D_IN0, MCAST_1D_IN1, MatmulProgramConfig
from costmodel.blackhole.report_coverage import coverage
from costmodel.blackhole.report_reader import COLLECTIVE, MODELLED, model_cores, read_report
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import blackhole_p150a

DATA = profiler_reports_dir()
DEEPSEEK = DATA / "bh_8xp150_deepseek_v3_d_p.csv"
CLIP = DATA / "bh_64_clip_encoder_1.csv"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"real reports not found at {DATA}")
# the DRAM rooflines below assume endpoints that take requests at any rate (tt-metal #55898's limit
# is tested on its own in test_costmodel_ops)
HW = dataclasses.replace(blackhole_p150a(), dram_request_cycles=0.0)
BF16, BFP8 = 2048, 1088  # bytes per 32x32 tile (tt::tile_size)


def _dims(rec, pre):
    """Padded [W, Z, Y, X] of a tensor column group, read straight from the CSV cells."""
    return [int(rec[f"{pre}_{d}_PAD[LOGICAL]"].split("[")[0]) for d in "WZYX"]


def test_batched_1d_matmul_prices_every_batch_and_its_bytes(tmp_path):
    """DeepSeek's [32 heads] x [32, 128, 512] matmul (1D in1-multicast, fuse_batch=0, output in L1):
    read with its 32 batches on the per-batch split. With no latency, launch or rate limit it is no
    longer its DRAM bytes (in0 and in1 of every batch; the L1 output moves no DRAM byte) at the peak
    (56 us): the in1 sender also writes the output on the same RISC, so each batch's in1 block (read into
    the sender, then multicast: twice over its link), its tile products and its output block run back to
    back (110 us; the last batch's products and write are the op's tail, in the launch). The row measured
    310 us: far above the DRAM bytes, as the per-batch chain says."""
    def pick(r):
        return (r["OP CODE"] == "MatmulDeviceOperation" and r["DEVICE ID"] == "0" and "out_subblock_w=8" in
                r["ATTRIBUTES"] and "MultiCast1D" in r["ATTRIBUTES"])
    line, rec = one_line(DEEPSEEK, tmp_path / "bmm.csv", pick)
    assert line.status == MODELLED, line.status
    spec = line.spec
    x, w = _dims(rec, "INPUT_0"), _dims(rec, "INPUT_1")
    assert isinstance(spec, MatmulSpec) and spec.cfg.kind == MCAST_1D_IN1 and spec.batch == x[0] * x[1] == 32
    assert spec.out_l1 and not spec.in0_l1
    assert model_cores(spec, HW) == int(rec["CORE COUNT"])
    dram = x[1] * (x[2] * x[3] // 1024 * BF16 + w[2] * w[3] // 1024 * BFP8)
    link_us = 1e6 / HW.noc_link_bytes_per_s  # per byte
    c = spec.cfg  # one K block per batch (K = 128 = in0_block_w tiles)
    in1_block, out_block = c.in0_block_w * c.per_core_N * BFP8, c.per_core_M * c.per_core_N * BF16
    t_math = c.per_core_M * c.in0_block_w * c.per_core_N * HW.tile_matmul_cycles("HiFi2") / HW.clock_hz * 1e6
    chain = 2 * in1_block * link_us + t_math + out_block * link_us
    t = float(spec.us(HW, ideal_fit()))
    assert t == pytest.approx((x[1] - 1) * chain + 2 * in1_block * link_us, rel=1e-3)
    assert t > 1.9 * dram / HW.dram_peak_bytes_per_s * 1e6 and float(rec["DEVICE KERNEL DURATION [ns]"]) / 1e3 > t


def test_a_batched_matmul_is_its_batches_back_to_back():
    """Without a round trip or a launch (which are paid once), B batches cost B times one batch."""
    cfg = MatmulProgramConfig(16.0, 4.0, 1.0, kind=MCAST_1D_IN1, out_subblock_h=1, out_subblock_w=4, fuse_batch=False)
    spec = MatmulSpec(3200, 512, 128, cfg, "bfp8", batch=32)
    fit = ideal_fit(core_read_tiles_per_s=2e7, mm_block_sync_us=0.5, eltwise_cycles_per_tile=64.0)
    one = float(dataclasses.replace(spec, batch=1).us(HW, fit))
    assert float(spec.us(HW, fit)) == pytest.approx(32 * one, rel=1e-5)


@pytest.mark.parametrize("n, kind, cores, ibw", [("64[64]", MCAST_1D_IN0, 2, 1), ("32[19]", MCAST_1D_IN1, 1, 2)])
def test_a_matmul_without_a_program_config_gets_ttnns_1d_choice(tmp_path, n, kind, cores, ibw):
    """CLIP's attention matmuls (program_config nullopt, 12 heads on both sides, all in DRAM, one tile
    of M): ttnn's narrow-shape rule picks in0 multicast when N > M, in1 multicast otherwise; the split
    is the row's CORE COUNT."""
    def pick(r):
        return (r["OP CODE"] == "Matmul" and "'program_config': 'std::nullopt'" in r["ATTRIBUTES"]
                and r["INPUT_1_X_PAD[LOGICAL]"] == n)
    line, rec = one_line(CLIP, tmp_path / "auto.csv", pick)
    assert line.status == MODELLED, line.status
    spec = line.spec.inner
    assert spec.cfg.kind == kind and spec.cfg.in0_block_w == ibw and spec.batch == 12 and not spec.cfg.fuse_batch
    assert model_cores(spec, line.spec.board()) == int(rec["CORE COUNT"]) == cores


def _clip_attention_line(tmp_path, n):
    """CLIP's config-less attention matmul whose in1 X cell is ``n``: '32[19]' Q@K^T (1 core, in1 kind,
    K = 64), '64[64]' scores@V (2 cores, in0 kind, logical K = 19)."""
    def pick(r):
        return (r["OP CODE"] == "Matmul" and "'program_config': 'std::nullopt'" in r["ATTRIBUTES"]
                and r["INPUT_1_X_PAD[LOGICAL]"] == n)
    return one_line(CLIP, tmp_path / f"clip_{n[:2]}.csv", pick)


def test_clip_attention_matmuls_read_the_ragged_k_of_their_activation(tmp_path):
    """The in0 reader zeroes the columns past the logical K of the last K tile (the factory's
    in0_last_ktile_w = logical K mod 32): scores@V's activation is [32(19), 32(19)], Q@K^T's [32(19), 64]."""
    for n, kind in (("64[64]", MCAST_1D_IN0), ("32[19]", MCAST_1D_IN1)):
        line, rec = _clip_attention_line(tmp_path, n)
        k_logical = int(rec["INPUT_0_X_PAD[LOGICAL]"].split("[")[1].rstrip("]"))
        assert line.spec.inner.cfg.kind == kind and line.spec.inner.in0_last_ktile_w == k_logical % 32
    assert k_logical % 32 == 0  # Q@K^T's K = 64: nothing to zero


def test_clip_two_core_attention_matmul_is_slower_than_the_one_core_one(tmp_path):
    """Measured, CLIP's 2-core scores@V (in0 multicast, ragged K) takes ~1.5x the 1-core Q@K^T (in1 kind,
    SKIP_MCAST) over the same 12 batches; the old per-block pricing put both at 17.6 us (scores@V -28%). Now
    each is within 20% of its DEVICE KERNEL DURATION and their ratio within 10% of the measured one."""
    from costmodel.blackhole.ops import kernel_only
    from costmodel.blackhole.params import load_fitted
    fit = kernel_only(load_fitted())
    t, meas = {}, {}
    for n in ("64[64]", "32[19]"):
        line, rec = _clip_attention_line(tmp_path, n)
        t[n], meas[n] = float(line.spec.us(line.spec.board(), fit)), float(rec["DEVICE KERNEL DURATION [ns]"]) / 1e3
        assert t[n] == pytest.approx(meas[n], rel=0.20), (n, t[n], meas[n])
    assert t["64[64]"] / t["32[19]"] == pytest.approx(meas["64[64]"] / meas["32[19]"], rel=0.10)


def test_a_one_core_multicast_group_pays_no_handshake(tmp_path):
    """A multicast group of one core runs with SKIP_MCAST (matmul_multicore_reuse_mcast_1d_program_factory:
    in1_mcast_receiver_num_cores == 1): the 1-core Q@K^T pays no [mm_block_sync_us]; the 2-core scores@V pays
    it on each of its 12 batches x 1 K block (with a near-max overlap and no latency the handshake is the op)."""
    one, _ = _clip_attention_line(tmp_path, "32[19]")
    two, _ = _clip_attention_line(tmp_path, "64[64]")
    one_spec = one.spec.inner
    assert float(one_spec.us(HW, ideal_fit(mm_block_sync_us=5.0))) == float(one_spec.us(HW, ideal_fit()))
    two_spec = dataclasses.replace(two.spec.inner, in0_last_ktile_w=0)
    assert float(two_spec.us(HW, ideal_fit(mm_block_sync_us=5.0))) == pytest.approx(12 * 5.0, rel=1e-3)


def test_a_batched_matmul_writes_each_batch_before_reading_the_next(tmp_path):
    """The in1 reader and the output writer share one RISC and the output CB holds one block: per batch
    the in1 read barrier and the output write barrier are each a DRAM round trip, with the block's tile
    products between them; the first read's round trip (pipeline fill) once, and the last batch's products
    and write are the op's tail (in the launch, as for an unbatched row)."""
    line, _ = _clip_attention_line(tmp_path, "32[19]")
    spec, lat = line.spec.inner, 1.0
    t_math = 2 * HW.tile_matmul_cycles("HiFi4") / HW.clock_hz * 1e6  # in0_block_w = 2 tile products
    want = 11 * (2 * lat + t_math) + lat + lat  # 11 batches and their drains, the last batch's read, the fill
    assert float(spec.us(HW, ideal_fit(dram_latency_us=lat))) == pytest.approx(want, rel=1e-3)


def test_the_ragged_k_pad_zeroes_the_columns_past_the_logical_k():
    """pad_last_ktile zeroes 32 - w columns in each of the tile's 32 rows, a store loop per face row."""
    from costmodel.blackhole.kinds.matmul import PAD_LOOP_CYCLES_PER_ELEMENT as PER_ELEM
    from costmodel.blackhole.kinds.matmul import PAD_LOOP_CYCLES_PER_FACE_ROW as PER_ROW
    from costmodel.blackhole.kinds.matmul import ktile_pad_us
    for w, face_cols in ((19, 1), (16, 1), (8, 2), (1, 2)):
        cycles = ktile_pad_us(HW, last_ktile_w=w, act_dtype="bf16") * HW.clock_hz / 1e6
        assert (cycles - 32 * face_cols * PER_ROW) / PER_ELEM == pytest.approx(32 * (32 - w))
    assert ktile_pad_us(HW, last_ktile_w=0, act_dtype="bf16") == 0.0
    assert ktile_pad_us(HW, last_ktile_w=19, act_dtype="bfp8") == 0.0  # pad_last_ktile: Float16_b / Float32 only
    with pytest.raises(ValueError, match="last_ktile_w=32"):
        ktile_pad_us(HW, last_ktile_w=32, act_dtype="bf16")


def test_a_config_less_matmul_outside_the_narrow_rule_is_skipped_with_the_reason(tmp_path):
    def pick(r):
        return r["OP CODE"] == "Matmul" and r["INPUT_1_X_PAD[LOGICAL]"] == "64[64]"

    def edit(r):  # an L1 output: not all in DRAM, and a 1:2 shape is not narrow -> ttnn's L1 estimate
        r["OUTPUT_0_MEMORY"] = "DEV_0_L1_INTERLEAVED"
    line, _ = one_line(CLIP, tmp_path / "auto_l1.csv", pick, edit)
    assert line.status.startswith("no program config, and ttnn's own choice for this shape")


def test_minimal_matmul_is_read_from_its_config_and_split_over_the_grid(tmp_path):
    """CLIP's [32[19], 768] x [768, 3072] minimal_matmul (M/K/N blocks 2/8/8 on 8x8): the factory splits
    tiles, not blocks: 96 N tiles over 8 columns = 12 per core (blocks of 8 and 4) on all 8 columns,
    M's one tile padded to one per row, 3 K blocks; all 64 cores launched (CORE COUNT). With no
    latency, rate or NoC limit the busiest core's HiFi4 tile products (one valid M tile) and the last
    output block's write bound it."""
    def pick(r):
        return r["OP CODE"] == "MinimalMatmulOp" and r["INPUT_1_X_PAD[LOGICAL]"] == "3072[3072]"
    line, rec = one_line(CLIP, tmp_path / "mm.csv", pick)
    assert line.status == MODELLED, line.status
    spec = line.spec.inner
    assert spec == MinimalMatmulSpec(32, 768, 3072, 2, 8, 8, 8, 8, "bf16", "bf16", "HiFi4", bias=True, subblock_h=2,
                                     subblock_w=2, fp32_dest_acc=True)
    assert model_cores(spec, line.spec.board()) == int(rec["CORE COUNT"]) == 64
    sp = spec.split()
    assert (sp["transposed"], sp["n_tiles_per_core"], sp["n_blocks_per_core"], sp["m_tiles_per_core"],
            sp["cols_used"], sp["rows_used"], sp["k_blocks"]) == (0, 12, 2, 1, 8, 1, 3)
    hw = dataclasses.replace(line.spec.board(), dram_request_cycles=0.0, noc_bytes_per_cycle_per_link=1e5)
    t = float(spec.us(hw, ideal_fit()))
    # busiest core: 3 K blocks x (8 + 4) N tiles x 8 K tiles x 1 M tile = 288 tile products, 64 cycles each
    math_us = 288 * 64 / hw.clock_hz * 1e6
    # then the last output block's write (the first is written during the second's K loop, hidden here):
    # an average block (12 N tiles in 2 blocks: 6) on each of the 8 busy cores, at the peak
    out_us = 8 * 6 * BF16 / hw.dram_peak_bytes_per_s * 1e6
    assert t == pytest.approx(math_us + out_us, rel=2e-3)


def test_minimal_matmul_prices_the_clip_mlp_pair_as_measured():
    """The real CLIP report runs [32, 768] x [768, 3072] and [32, 3072] x [3072, 768] at the same
    time (38.0 us each, 24 rows apiece): under the factory's tile split both give each core 288 tile
    products. A block split (N blocks over columns: 384 vs 768 products) priced them 29 vs 53 us.
    Under the stored calibration the model's ratio is within 15% of the measured one and each of the
    three shapes is within 20% of its median measurement."""
    from costmodel.blackhole.fit import load_calibration

    fit = load_calibration().params
    by_shape: dict[tuple, list[float]] = {}
    spec_of = {}
    for row in read_report(CLIP, hw=blackhole_p150a()).measured_rows():  # KernelSpec(ChipSpec(...))
        mm = row.spec.inner.inner
        if isinstance(mm, MinimalMatmulSpec):
            key = (mm.M, mm.K, mm.N)
            by_shape.setdefault(key, []).append(row.target)
            spec_of[key] = row.spec
    assert set(by_shape) == {(32, 768, 768), (32, 768, 3072), (32, 3072, 768)}
    measured = {k: float(sorted(v)[len(v) // 2]) for k, v in by_shape.items()}
    predicted = {k: float(spec_of[k].us(blackhole_p150a(), fit)) for k in by_shape}
    up, down = (32, 768, 3072), (32, 3072, 768)
    assert measured[up] / measured[down] == pytest.approx(1.0, abs=0.02)
    assert predicted[up] / predicted[down] == pytest.approx(measured[up] / measured[down], rel=0.15)
    for k in by_shape:
        assert predicted[k] == pytest.approx(measured[k], rel=0.20), (k, predicted[k], measured[k])


def test_layernorm_is_read_and_costs_more_passes_than_rmsnorm(tmp_path):
    """CLIP's one-row LayerNorm (gamma and beta inputs): read as a LayerNorm over [32, 768] on one core
    (CORE COUNT); math-bound it costs the 7 passes of layernorm.cpp's two-pass path against RMSNorm's 4.
    With Float32 intermediates every pass that streams an intermediate tile costs twice a bf16 pass,
    RMSNorm's 4 all do, LayerNorm's E[x] reduce (x straight from cb_in, bf16) does not: 13 bf16
    pass-equivalents against RMSNorm's 8 (it was 7 x 2 = 14, 18% over CLIP's measured rows). The counts are
    taken at LoFi, whose math never outlasts the unpacker (no fidelity term)."""
    line, rec = one_line(CLIP, tmp_path / "ln.csv", lambda r: r["OP CODE"] == "LayerNormDeviceOperation")
    assert line.status == MODELLED, line.status
    spec = line.spec.inner
    fp32 = "fp32_dest_acc_en=1" in rec["ATTRIBUTES"]
    assert spec == NormSpec(32, 768, "bf16", fused_residual=False, layernorm=True, fp32_dest_acc=fp32,
                            fidelity=rec["MATH FIDELITY"]) and fp32
    assert model_cores(spec, line.spec.board()) == int(rec["CORE COUNT"]) == 1
    spec = dataclasses.replace(spec, fidelity="LoFi")
    fit = ideal_fit(eltwise_cycles_per_tile=100.0)
    ln, rms = float(spec.us(HW, fit)), float(dataclasses.replace(spec, layernorm=False).us(HW, fit))
    assert ln / rms == pytest.approx(13 / 8, rel=1e-3)
    bf16 = float(dataclasses.replace(spec, fp32_dest_acc=False).us(HW, fit))
    assert ln / bf16 == pytest.approx(13 / 7, rel=1e-3)
    rms_bf16 = float(dataclasses.replace(spec, layernorm=False, fp32_dest_acc=False).us(HW, fit))
    assert rms / rms_bf16 == pytest.approx(4096 / 2048, rel=1e-3)


def test_clip_layernorm_rows_are_priced_within_12_percent_and_the_one_core_rmsnorm_rows_unchanged():
    """Held-out check of the per-pass count under the stored calibration: CLIP's 50 one-core [32, 768]
    LayerNorm rows (HiFi4, fp32_dest_acc_en=1; 19.1-19.5 us) were priced 22.8 us (+18%) with all 7 passes
    at the Float32 rate; with E[x] at the bf16 rate 21.3 us (+11%). The one-core [32, 2880] RMSNorm rows of
    the gpt-oss reports (same kernel, same config, all 4 passes on Float32 tiles) keep their price (+2.5%)."""
    from costmodel.blackhole.fit import load_calibration

    fit = load_calibration().params
    def norm_rows(path, **kw):  # measured rows: KernelSpec(ChipSpec(NormSpec)) or KernelSpec(NormSpec)
        rows = [(r, inner(r.spec.inner)) for r in read_report(path, **kw).measured_rows()]
        return [r for r, op in rows if isinstance(op, NormSpec)], {op for _, op in rows if isinstance(op, NormSpec)}

    rows, specs = norm_rows(CLIP, hw=blackhole_p150a())
    assert len(rows) == 50 and specs == {NormSpec(32, 768, layernorm=True, fp32_dest_acc=True)}
    measured = sorted(r.target for r in rows)[len(rows) // 2]
    assert float(rows[0].spec.us(HW, fit)) == pytest.approx(measured, rel=0.12)
    gpt_oss = pathlib.Path(__file__).parent / "data" / "profiler_more" / "bh_gpt_oss_20b_fused_prefill_s17.csv"
    rms, specs = norm_rows(gpt_oss)
    assert specs == {NormSpec(32, 2880, fp32_dest_acc=True)}
    measured = sorted(r.target for r in rms)[len(rms) // 2]
    assert float(rms[0].spec.us(HW, fit)) == pytest.approx(measured, rel=0.05)


def test_softmax_is_a_row_op_sent_to_the_whole_grid(tmp_path):
    line, rec = one_line(CLIP, tmp_path / "sm.csv", lambda r: r["OP CODE"] == "SoftmaxDeviceOperation")
    assert line.status == MODELLED, line.status
    x = _dims(rec, "INPUT_0")
    fp32 = "fp32_dest_acc_en=1" in rec["ATTRIBUTES"]
    assert line.spec.inner == SoftmaxSpec(x[0] * x[1] * x[2], x[3], "bf16", fp32_dest_acc=fp32, pad_cols=32 - 19)
    assert rec["INPUT_0_X_PAD[LOGICAL]"] == "32[19]"
    assert model_cores(line.spec.inner, line.spec.board()) == int(rec["CORE COUNT"]) == 64


def _reads_brute_force(shape_in, shape_out):
    """Blocking reads per output tile of reader_reshape_tiled.cpp, by walking every element: per output
    tile its mapping page, then a read at every change of input tile along its rows."""
    hi, wi = shape_in[-2:]
    *lo, ho, wo = shape_out
    bo = math.prod(lo)
    total, n = 0, 0
    for b in range(bo):
        for th in range(-(-ho // 32)):
            for tw in range(-(-wo // 32)):
                prev, reads = None, 1
                for r in range(th * 32, min(th * 32 + 32, ho)):
                    for c in (tw * 32, min(tw * 32 + 32, wo) - 1):
                        f = (b * ho + r) * wo + c
                        bi, rem = divmod(f, hi * wi)
                        ri, ci = divmod(rem, wi)
                        tile = (bi, ri // 32, ci // 32)
                        reads += tile != prev
                        prev = tile
                total, n = total + reads, n + 1
    return total / n


@pytest.mark.parametrize("out_x, cores", [("64[64]", 38), ("768[768]", 24)])
def test_reshape_reads_each_output_tiles_segments(tmp_path, out_x, cores):
    """CLIP's head split [1, 19, 768] <-> [19, 12, 64]: one output tile per core (CORE COUNT), each
    reading its map page and the input tiles its rows come from."""
    def pick(r):
        return r["OP CODE"] == "ReshapeDeviceOperation" and r["OUTPUT_0_X_PAD[LOGICAL]"] == out_x
    line, rec = one_line(CLIP, tmp_path / "rs.csv", pick)
    assert line.status == MODELLED, line.status
    spec = line.spec.inner
    logical = [[int(rec[f"{p}_{d}_PAD[LOGICAL]"].split("[")[1].rstrip("]")) for d in "WZYX"]
               for p in ("INPUT_0", "OUTPUT_0")]
    assert spec.kind == "reshape" and spec.reads_per_unit == pytest.approx(_reads_brute_force(*logical))
    assert spec.reads_per_unit == {38: 13.0, 24: 20.0}[cores]  # 12 heads / 19 tokens per output tile, + the map
    assert model_cores(spec, line.spec.board()) == int(rec["CORE COUNT"]) == cores


def test_reshape_reads_per_tile_refuses_a_count_change():
    with pytest.raises(ValueError, match="element counts differ"):
        reshape_reads_per_tile((1, 1, 19, 768), (1, 19, 12, 32))


@pytest.mark.parametrize("dim, kind", [("TransposeOpDim::HC", "transpose_hc"), ("TransposeOpDim::WH", "transpose_wh")])
def test_transposes_are_read_by_dim_and_sent_to_the_whole_grid(tmp_path, dim, kind):
    line, rec = one_line(CLIP, tmp_path / "tr.csv", lambda r: r["OP CODE"] == "TransposeDeviceOperation"
                          and f"'dim': '{dim}'" in r["ATTRIBUTES"])
    assert line.status == MODELLED and line.spec.inner.kind == kind
    assert model_cores(line.spec.inner, line.spec.board()) == int(rec["CORE COUNT"]) == 64


def test_a_transpose_of_another_dim_is_skipped_with_the_reason(tmp_path):
    def edit(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("TransposeOpDim::HC", "TransposeOpDim::CN")
    line, _ = one_line(CLIP, tmp_path / "cn.csv", lambda r: "TransposeOpDim::HC" in r["ATTRIBUTES"], edit)
    assert line.status.startswith("transpose dim not modelled (TransposeOpDim::CN")


def test_slice_is_its_kept_tiles_read_and_written_at_the_dram_peak(tmp_path):
    """DeepSeek's [32, 3200, 192] -> [.., 128] slice: every kept tile read and written once; with no
    latency or launch it is those bytes at the peak."""
    def pick(r):
        return (r["OP CODE"] == "SliceDeviceOperation" and r["DEVICE ID"] == "0"
                and r["OUTPUT_0_X_PAD[LOGICAL]"] == "128[128]")
    line, rec = one_line(DEEPSEEK, tmp_path / "sl.csv", pick)
    assert line.status == MODELLED, line.status
    o = _dims(rec, "OUTPUT_0")
    out_bytes = math.prod(o) // 1024 * BF16
    assert isinstance(line.spec, DataMovementSpec) and line.spec.kind == "slice"
    assert model_cores(line.spec, HW) == int(rec["CORE COUNT"])
    assert float(line.spec.us(HW, ideal_fit())) == pytest.approx(2 * out_bytes / HW.dram_peak_bytes_per_s * 1e6,
                                                                   rel=1e-6)


def test_concat_counts_dram_bytes_only_for_dram_tensors(tmp_path):
    """DeepSeek's concat of an L1 [32, 3200, 512] and a DRAM [32, 3200, 64] tensor into DRAM: the DRAM
    bound is the DRAM input and the output, not the L1 input."""
    def pick(r):
        return r["OP CODE"] == "ConcatDeviceOperation" and r["INPUT_0_MEMORY"].endswith("L1_INTERLEAVED")
    line, rec = one_line(DEEPSEEK, tmp_path / "cc.csv", pick)
    assert line.status == MODELLED, line.status
    dram = (math.prod(_dims(rec, "INPUT_1")) + math.prod(_dims(rec, "OUTPUT_0"))) // 1024
    assert line.spec.kind == "concat" and line.spec.dram_tiles == dram and not line.spec.in_l1
    fit = ideal_fit()
    assert float(line.spec.us(HW, fit)) == pytest.approx(dram * BF16 / HW.dram_peak_bytes_per_s * 1e6, rel=1e-6)


@pytest.mark.parametrize("path", [CLIP, DEEPSEEK], ids=["clip", "deepseek"])
def test_every_modelled_row_has_the_core_count_the_model_splits_over(path):
    """The CORE COUNT column of every modelled row (all devices) equals the cores the model prices."""
    rep = read_report(path, device_id="all")
    recs = records(path)
    rows = [r for r in rep.rows if r.status == MODELLED]
    assert len(rows) > 100
    for r in rows:
        spec = inner(r.spec)
        hw = r.spec.board() if hasattr(r.spec, "board") else rep.hw
        assert model_cores(spec, hw) == int(float(recs[r.line - 2]["CORE COUNT"])), (r.line, r.op_code)


@pytest.mark.parametrize("path", [CLIP, DEEPSEEK], ids=["clip", "deepseek"])
def test_the_single_chip_reports_are_priced_to_80_percent_of_their_device_time(path):
    """Share of device time (collectives apart) priced, against a sum straight from the CSV."""
    rep = read_report(path)
    cov = coverage(rep)
    dev = min(int(r["DEVICE ID"]) for r in records(path) if r["DEVICE ID"])
    recs = [r for r in records(path) if r["OP TYPE"] == "tt_dnn_device" and int(r["DEVICE ID"]) == dev]
    modelled = {r.line for r in rep.rows if r.status == MODELLED}
    coll = {r.line for r in rep.rows if r.status == COLLECTIVE}
    lines = {i + 2: r for i, r in enumerate(records(path))}
    ns = {n: float(lines[n]["DEVICE KERNEL DURATION [ns]"]) for n in lines if lines[n] in recs}
    share = sum(ns[n] for n in modelled) / (sum(ns.values()) - sum(ns[n] for n in coll))
    assert cov.share == pytest.approx(share)
    assert share >= 0.80


def test_priced_times_of_the_new_forms_are_finite_and_positive():
    """Every modelled row of both reports, kernel-only under the stored calibration: finite, > 0."""
    from costmodel.blackhole.fit import load_calibration
    fit = load_calibration().params
    for path in (CLIP, DEEPSEEK):
        rep = read_report(path)
        for spec in {r.spec for r in rep.rows if r.status == MODELLED}:
            t = float(KernelSpec(spec).us(rep.hw, fit))
            assert math.isfinite(t) and t > 0, spec


@pytest.mark.parametrize("spec", [
    MatmulSpec(3200, 512, 128, MatmulProgramConfig(16.0, 4.0, 1.0, kind=MCAST_1D_IN1, out_subblock_h=1,
                                                   out_subblock_w=4, fuse_batch=False), "bfp8", batch=32),
    MatmulSpec(32, 32, 64, mcast_1d_config(M=32, K=32, N=64, grid=(11, 10), mcast_in0=True, fp32_dest_acc=True),
               "bf16", fidelity="HiFi4", batch=12, in0_last_ktile_w=19),
    MinimalMatmulSpec(32, 768, 3072, 2, 8, 8, 11, 10, bias=True),
    NormSpec(32, 768, layernorm=True, fp32_dest_acc=True),
    SoftmaxSpec(384, 32, fp32_dest_acc=True),
    SoftmaxSpec(384, 32, fp32_dest_acc=True, pad_cols=13),
    NormSpec(8192, 6656, fp32_dest_acc=True),
    SdpaCausalSpec(SdpaProgramConfig(256.0, 256.0, attn_mode="standard"), 8192, 32, 128, "bf16", fidelity="HiFi4"),
], ids=["batched", "ragged-k", "minimal", "layernorm", "softmax", "padded-softmax", "large-norm", "causal-sdpa"])
def test_written_forms_read_back_with_the_cores_priced(tmp_path, spec):
    """A spec written as an op report row reads back as itself; its CORE COUNT is the split priced."""
    from costmodel.blackhole.report_reader import write_csv
    path = tmp_path / "w.csv"
    write_csv(path, [(spec, 10.0)])
    (line,) = read_report(path).rows
    assert line.status == MODELLED and line.spec == spec, line.status
    rec = records(path)[0]
    assert int(rec["CORE COUNT"]) == model_cores(spec, blackhole_p150a())


def test_a_data_movement_spec_has_no_written_form(tmp_path):
    from costmodel.blackhole.report_reader import write_csv
    with pytest.raises(ValueError, match="DataMovementSpec has no op-report form"):
        write_csv(tmp_path / "w.csv", [(DataMovementSpec("slice", 10, 1.0, 20), 1.0)])


def test_a_partly_broadcast_batch_is_skipped_with_the_reason(tmp_path):
    """The batched DeepSeek line with its 32 activation batches as [2, 16] against [1, 32] weights."""
    def pick(r):
        return r["OP CODE"] == "MatmulDeviceOperation" and "out_subblock_w=8" in r["ATTRIBUTES"]

    def edit(r):
        r["INPUT_0_W_PAD[LOGICAL]"], r["INPUT_0_Z_PAD[LOGICAL]"] = "2[2]", "16[16]"
    line, _ = one_line(DEEPSEEK, tmp_path / "bcast.csv", pick, edit)
    assert line.status.startswith("batched operands broadcast over part of the batch dims")
