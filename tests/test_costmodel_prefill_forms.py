"""Reader forms and mechanisms of long prefills, built from real report lines: config-less
minimal_matmul (ttnn's default blocks) with DRAM width-sharded weights and its deferred output writes,
causal prefill SDPA (with and without a program config), and the norm factory's large-tensor kernels
(Muse Glimmer 30B prefill of 8192 tokens, tests/data/profiler_more; North mini prefill of 128 tokens,
tests/data/profiler_pairs; the shared CLIP and DeepSeek reports)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
from _report_util import PAIRS_DIR, ideal_fit, inner, one_line, records
from _shared_data import profiler_reports_dir

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.kinds.norm import norm_large_tensor
from costmodel.blackhole.opspecs import NormSpec, SdpaCausalSpec
from costmodel.blackhole.report_reader import MODELLED, model_cores, read_report
from costmodel.blackhole.sdpa import causal_k_chunks
from costmodel.hardware import blackhole_p150a

MORE = __import__("pathlib").Path(__file__).parent / "data" / "profiler_more"
MUSE = MORE / "bh_muse_glimmer_30b_optimized_prefill_full_s8192.csv"
WINDOW = ("PERF_PREFILL", "PERF_PREFILL_END")
NM_PREFILL = PAIRS_DIR / "bh_north_mini_functional_prefill_s128.csv"
# DRAM and NoC without limits: what is left is the compute the test counts
FAST = dataclasses.replace(blackhole_p150a(), dram_request_cycles=0.0, dram_peak_bytes_per_s=1e30,
                           noc_bytes_per_cycle_per_link=1e30)


def _qkv(r):  # the QKV projection: [8192, 6656] x [6656, 4608], no config, weights DRAM width-sharded
    return r["OP CODE"] == "MinimalMatmulDeviceOperation" and r["INPUT_1_X_PAD[LOGICAL]"] == "4608[4608]"


def test_a_config_less_minimal_matmul_takes_ttnns_default_blocks_on_the_device_grid(tmp_path):
    """``config`` std::nullopt: determine_default_block_sizes (M, K, N blocks of 8; subblock 4 x 2 for
    M > N without fp32_dest_acc_en, 2 x 2 with it) on the device's 11x10 grid (CORE COUNT 110)."""
    line, rec = one_line(MUSE, tmp_path / "qkv.csv", _qkv)
    assert "'config': 'std::nullopt'" in rec["ATTRIBUTES"] and line.status == MODELLED, line.status
    spec = inner(line.spec)
    assert spec == MinimalMatmulSpec(8192, 6656, 4608, 8, 8, 8, 11, 10, "bfp8", "bf16", "LoFi", subblock_h=4,
                                     subblock_w=2, fp32_dest_acc=False)
    assert model_cores(spec, blackhole_p150a()) == int(rec["CORE COUNT"]) == 110

    def fp32(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("fp32_dest_acc_en=0", "fp32_dest_acc_en=1")
    line, _ = one_line(MUSE, tmp_path / "qkv32.csv", _qkv, fp32)
    assert (inner(line.spec).subblock_h, inner(line.spec).subblock_w) == (2, 2)


def test_dram_width_sharded_weights_are_read_page_by_page_as_interleaved_ones(tmp_path):
    """The kernels read in1 through a TensorAccessor, tile by tile: the same line with interleaved
    weights reads to the same spec (same price); L1-sharded weights are still refused."""
    line, rec = one_line(MUSE, tmp_path / "sharded.csv", _qkv)
    assert rec["INPUT_1_MEMORY"] == "DEV_0_DRAM_WIDTH_SHARDED"

    def interleaved(r):
        r["INPUT_1_MEMORY"] = "DEV_0_DRAM_INTERLEAVED"
    plain, _ = one_line(MUSE, tmp_path / "plain.csv", _qkv, interleaved)
    assert plain.spec == line.spec

    def l1(r):
        r["INPUT_1_MEMORY"] = "DEV_0_L1_WIDTH_SHARDED"
    refused, _ = one_line(MUSE, tmp_path / "l1.csv", _qkv, l1)
    assert refused.status.startswith("sharded operand (INPUT_1 L1_WIDTH_SHARDED)"), refused.status


def test_the_muse_prefill_matmuls_are_priced_within_a_quarter_and_their_sum_within_ten_percent():
    """Held out (no Muse row is fitted): the window's six minimal matmuls (1.2-5.9 ms, four with a
    config, two without) under the stored calibration. Each output block but the last is written
    during the next block's K loop (``defer_write``): writing every block after the pipeline priced
    their sum 16% over."""
    fit = load_calibration().params
    rep = read_report(MUSE).between(*WINDOW)
    rows = [r for r in rep.measured_rows() if isinstance(inner(r.spec.inner), MinimalMatmulSpec)]
    assert len(rows) == 6
    pred = [float(r.spec.us(rep.hw, fit)) for r in rows]
    for r, p in zip(rows, pred):
        assert p == pytest.approx(r.target, rel=0.25), (r.name, p, r.target)
    assert sum(pred) == pytest.approx(sum(r.target for r in rows), rel=0.10)


def _sdpa(r):
    return r["OP CODE"] == "SDPAOperation"


def test_causal_prefill_sdpa_deals_zigzag_pairs_of_q_chunks_over_the_grid(tmp_path):
    """Muse's causal SDPA over 8192 rows, 32 q heads, chunks of 256: q chunk q reads and computes
    q + 1 K chunks; the 1024 (head, q chunk) items pair zigzag into 512 pairs of 33 steps, dealt 5 to
    the busiest of 110 cores: 165 steps (the count issue tenstorrent/tt-metal#55766 quotes for the
    same 32 x 32 chunk geometry). With free DRAM, NoC and softmax, its time is those steps' tile
    products (2 x 8 x 8 x 4 per step, HiFi4). Under the stored calibration it is within 25% of the
    measured 7.09 ms; no mask is read."""
    line, rec = one_line(MUSE, tmp_path / "sdpa.csv", _sdpa)
    assert "'is_causal': 'true'" in rec["ATTRIBUTES"] and line.status == MODELLED, line.status
    spec = inner(line.spec)
    assert isinstance(spec, SdpaCausalSpec)
    assert (spec.rows, spec.q_heads, spec.head_dim, spec.attn.q_chunk, spec.attn.k_chunk, spec.fidelity) == \
        (8192, 32, 128, 256.0, 256.0, "HiFi4")
    assert model_cores(spec, blackhole_p150a()) == int(rec["CORE COUNT"]) == 110
    ks = causal_k_chunks(rows=8192, q_chunk=256, k_chunk=256)
    assert ks == list(range(1, 33))
    math_us = 165 * (2 * 8 * 8 * 4) * FAST.tile_matmul_cycles("HiFi4") / FAST.clock_hz * 1e6
    assert float(spec.us(FAST, ideal_fit())) == pytest.approx(math_us, rel=1e-3)
    measured = float(rec["DEVICE KERNEL DURATION [ns]"]) / 1e3
    assert float(line.spec.us(blackhole_p150a(), load_calibration().params)) == pytest.approx(measured, rel=0.25)


def test_a_config_less_causal_sdpa_takes_chunks_of_32(tmp_path):
    """North mini's 128-row causal prefill SDPA has no program config: ttnn's chunks are 32 rows
    (``program_config ? ... : 32``), so 4 q chunks per head, 64 pairs of 5 steps, one per core."""
    line, rec = one_line(NM_PREFILL, tmp_path / "nm.csv", _sdpa)
    assert "'program_config': 'std::nullopt'" in rec["ATTRIBUTES"] and line.status == MODELLED, line.status
    spec = inner(line.spec)
    assert (spec.rows, spec.q_heads, spec.attn.q_chunk, spec.attn.k_chunk) == (128, 32, 32.0, 32.0)
    math_us = 5 * (2 * 1 * 1 * 4) * FAST.tile_matmul_cycles("HiFi2") / FAST.clock_hz * 1e6
    assert float(spec.us(FAST, ideal_fit())) == pytest.approx(math_us, rel=1e-3)


def test_causal_sdpa_forms_outside_a_whole_prefill_are_skipped_with_the_reason(tmp_path):
    def chunked(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("'chunk_start_idx': 'std::nullopt'", "'chunk_start_idx': '4096'")
    line, _ = one_line(MUSE, tmp_path / "chunked.csv", _sdpa, chunked)
    assert line.status.startswith("causal SDPA with chunk_start_idx 4096"), line.status

    def odd(r):  # 8160 rows: 31.9 chunks of 256 -> not an even count of whole chunks
        for pre in ("INPUT_0", "INPUT_1", "INPUT_2", "OUTPUT_0"):
            r[f"{pre}_Y_PAD[LOGICAL]"] = "8160[8160]"
    line, _ = one_line(MUSE, tmp_path / "odd.csv", _sdpa, odd)
    assert "not an even number of chunks" in line.status, line.status


def _norm_lines():
    """(report, line number, record) of every LayerNormDeviceOperation row of the real reports that
    names its compute kernel."""
    data = profiler_reports_dir()
    paths = [MUSE, NM_PREFILL] + ([data / "bh_64_clip_encoder_1.csv", data / "bh_8xp150_deepseek_v3_d_p.csv"]
                                  if data.is_dir() else [])
    for path in paths:
        for i, rec in enumerate(records(path)):
            if rec["OP CODE"] == "LayerNormDeviceOperation" and rec.get("COMPUTE KERNEL SOURCE"):
                yield path, i + 2, rec


def test_the_large_tensor_rule_picks_the_kernel_every_real_norm_row_names():
    """The factory's L1 rule (``kinds.norm.norm_large_tensor``) against the real factory's own choice, the
    compute kernel each report row names: layernorm_large_tensor.cpp for Muse's [8192, 6656] rows
    (Float32 intermediates), layernorm.cpp for every narrower one."""
    by_kind = {True: 0, False: 0}
    for path, n, rec in _norm_lines():
        rep = read_report(path)
        row = next((r for r in rep.rows if r.line == n), None)
        if row is None or row.status != MODELLED:
            continue
        spec = inner(row.spec)
        assert isinstance(spec, NormSpec)
        large = bool(norm_large_tensor(rep.hw, width=spec.width, act_dtype=spec.act_dtype,
                                       fused_residual=spec.fused_residual, fp32_dest_acc=spec.fp32_dest_acc))
        assert large == ("layernorm_large_tensor" in rec["COMPUTE KERNEL SOURCE"]), (path.name, n)
        by_kind[large] += 1
    assert by_kind[True] >= 4 and by_kind[False] >= 4, by_kind


def test_large_tensor_norm_rows_run_just_above_their_dram_floor():
    """Muse's [8192, 6656] RMSNorm rows read x twice and gamma once per tile row (the large-tensor
    reader): 436 MB, whose time at the DRAM peak the measured 0.89-0.99 ms exceed by less than 15%
    (reading x once, the floor was half the measurement)."""
    rep = read_report(MUSE)
    rows = [r for r in rep.measured_rows() if isinstance(inner(r.spec.inner), NormSpec)
            and inner(r.spec.inner).width == 6656]
    assert len(rows) >= 12
    floor = float(rows[0].spec.us(dataclasses.replace(rep.hw, dram_request_cycles=0.0), ideal_fit()))
    assert floor == pytest.approx((256 * 208 * 4) * 2048 / rep.hw.dram_peak_bytes_per_s * 1e6, rel=1e-3)
    measured = statistics.median(r.target for r in rows)
    assert floor < measured < 1.15 * floor


QWEN = MORE / "bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv"


def _qwen_large_norm_rows():
    """Qwen3.6-27B's [64(33), 5120] RMSNorm rows (csv lines 16, 82, 90, 156): 2 tile rows of 160 tiles on
    2 cores, bf16 intermediates (fp32_dest_acc_en=0, blocks of 8), layernorm_large_tensor.cpp."""
    rep = read_report(QWEN)
    rows = [r for r in rep.measured_rows() if isinstance(inner(r.spec.inner), NormSpec)
            and inner(r.spec.inner).width == 5120]
    return rep, rows


def test_qwen_large_tensor_rmsnorm_counts_the_kernels_passes_and_sfpu_square():
    """With the DRAM and the NoC out of the way, no launch and a 100-cycle pass, the large-tensor RMSNorm
    row costs what layernorm_large_tensor.cpp's RMSNORM path runs per tile: copy + square_tile (SFPU: 5
    instructions x 32 rows) packed to cb_xmm2, the reduce, copy packed to cb_xmm, x * rstd, * gamma (5
    passes, not the small kernel's 4), and per row 19 copies of the running sum (20 blocks of 8 tiles); at the
    row's HiFi4, the reduce's and the two multiplies' math past their unpacker's time per tile (tt-llk's
    Blackhole math-thread measurements: 49.07 - 37.28 and 2 x (82.52 - 37.91) cycles)."""
    rep, rows = _qwen_large_norm_rows()
    assert len(rows) == 4
    spec = inner(rows[0].spec.inner)
    assert (spec.rows, spec.width, spec.fp32_dest_acc, spec.layernorm) == (64, 5120, False, False)
    assert bool(norm_large_tensor(rep.hw, width=5120, act_dtype="bf16", fp32_dest_acc=False))
    fast = dataclasses.replace(FAST, l1_bytes_per_core=rep.hw.l1_bytes_per_core)
    us = float(spec.us(fast, ideal_fit(eltwise_cycles_per_tile=100.0)))
    assert spec.fidelity == "HiFi4"
    cycles = 160 * (5 * 100.0 + 5 * 32 + (49.07 - 37.28) + 2 * (82.52 - 37.91)) + 19 * 100.0
    assert us == pytest.approx(cycles / fast.clock_hz * 1e6, rel=1e-3)


def test_qwen_large_tensor_rmsnorm_rows_priced_within_10_percent():
    """The 4 measured rows (85.2-86.2 us, DEVICE KERNEL DURATION; the TRISCs bind, 84.1-85.3 us, the
    reader NCRISC 72.7-73.6 us) under the stored calibration: 83.2 us (-2%) with the HiFi4 math of the
    multiplies and the reduce past their unpacker's, 71.6 (-16%) without it; the small kernel's 4 passes
    without the square priced them at 44.1 us (-48%)."""
    _, rows = _qwen_large_norm_rows()
    fit = load_calibration().params
    measured = statistics.median(r.target for r in rows)
    assert 85.0 < measured < 86.5
    pred = float(rows[0].spec.us(blackhole_p150a(), fit))
    assert 0.9 * measured < pred < 1.1 * measured
