"""Width-sharded decode RMSNorm (``kinds.norm_sharded``, ``LayerNormShardedMultiCoreProgramConfig``) read from
real report lines and priced against measured rows no fit saw.

Every sharded norm row of three real decode reports (Llama-3.2-1B: 8x4 cores of 2 tiles, HiFi2; Gemma-4
31B: 8x7 of 3, HiFi4; Phi-3.5-mini: 8x1 of 12, LoFi) reads as the grid and block its program config says
(written out here by hand), on that many cores (its CORE COUNT). The price has no parameter of its own: the
norm class's fixed time and the fitted elementwise pass, the NoC steps at tt-metal's NoC estimator's
Blackhole measurements, gamma's sticks at the fitted DRAM round trip. The writer thread's own time in the
rows (DEVICE NCRISC KERNEL DURATION: its RISC runs the gamma reads) checks the gamma term on its own."""

import pathlib

import numpy as np
import pytest
from _report_util import inner, one_line, op_rows, records

from costmodel.blackhole import kinds
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.norm_sharded import NormShardedSpec
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.report_reader import MODELLED
from costmodel.hardware import blackhole_p150a

MORE = pathlib.Path(__file__).parent / "data" / "profiler_more"
LLAMA = MORE / "bh_llama3_2_1b_advisor_incumbent_decode.csv"
GEMMA = MORE / "bh_gemma4_31b_fused_full_decode.csv"
PHI = MORE / "bh_phi35_mini_advisor_candidate_decode.csv"
HW = blackhole_p150a()
FIT = kernel_only(load_calibration().params)  # the rows are DEVICE KERNEL DURATION
CODE = "LayerNormDeviceOperation"
# (grid, block_w) as the rows' program configs and INPUT_0 widths say: 2048 = 8 x 4 x 2 x 32, ...; the
# fidelity as their MATH FIDELITY column
EXPECTED = {LLAMA: NormShardedSpec((8, 4), 2, fidelity="HiFi2"),
            GEMMA: NormShardedSpec((8, 7), 3, fidelity="HiFi4"),
            PHI: NormShardedSpec((8, 1), 12, fidelity="LoFi")}


def sharded_rows(path):
    return [r for r in op_rows(path, CODE) if isinstance(inner(r.spec), NormShardedSpec)]


@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.stem)
def test_rows_read_as_their_grid_and_block_on_the_cores_they_ran_on(path):
    rows = sharded_rows(path)
    recs = records(path)
    assert len(rows) >= 6 and all(r.status == MODELLED for r in rows)
    assert {inner(r.spec) for r in rows} == {EXPECTED[path]}
    for r in rows:
        assert kinds.cores(r.spec, HW) == int(recs[r.line - 2]["CORE COUNT"]), r.line


@pytest.mark.parametrize("path", [LLAMA, GEMMA], ids=lambda p: p.stem)
def test_the_two_stage_grids_price_within_20_percent_of_every_row(path):
    """Llama's rows alternate between 5.2 and 6.1 us, Gemma's between 6.5 and 7.4, layer after layer: one
    price for each spec, within 20% of all of them."""
    for r in sharded_rows(path):
        assert abs(float(inner(r.spec).us(HW, FIT)) / r.duration_us - 1) < 0.20, (r.line, r.duration_us)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "Phi's one-row grid (8 cores, 12 tiles each, LoFi: no fidelity phases) is priced 7.5 us against 5.7-7.1: "
    "the rows' reader thread hands on the statistic 4.2 us in, where the price has the fixed time, 24 passes "
    "and the NoC steps take 6 us (the handshakes are priced as round trips)"))
def test_the_one_row_grid_prices_within_20_percent_of_every_row():
    for r in sharded_rows(PHI):
        assert abs(float(inner(r.spec).us(HW, FIT)) / r.duration_us - 1) < 0.20, (r.line, r.duration_us)


def test_the_writer_threads_time_per_gamma_stick_is_the_fitted_dram_round_trip():
    """The writer reads gamma one blocking 64 B DRAM stick per tile of its block: across the three grids (2, 3
    and 12 sticks) its thread's time grows by a DRAM round trip per stick. The least-squares slope of the
    rows' DEVICE NCRISC KERNEL DURATION over block_w is within 15% of the fitted [dram_latency_us], which
    no sharded norm row was fitted to."""
    x, y = [], []
    for path, spec in EXPECTED.items():
        recs = records(path)
        for r in sharded_rows(path):
            x.append(spec.block_w)
            y.append(float(recs[r.line - 2]["DEVICE NCRISC KERNEL DURATION [ns]"]) / 1e3)
    slope, _ = np.polyfit(np.asarray(x, float), np.asarray(y), 1)
    assert abs(slope / float(FIT.dram_latency_us) - 1) < 0.15, (slope, float(FIT.dram_latency_us))


def test_the_price_grows_with_the_block_and_the_grid():
    """More tiles a core, more passes; more cores, longer handshakes and multicasts; a second grid row, the
    two-stage reduce's second gather."""
    t = lambda grid, bw: float(NormShardedSpec(grid, bw).us(HW, FIT))
    assert t((8, 4), 2) < t((8, 4), 4) < t((8, 4), 8)
    assert t((8, 1), 2) < t((8, 2), 2) < t((8, 4), 2) < t((8, 7), 2)


def _is_norm(r):
    return r["OP CODE"] == CODE and "LayerNormSharded" in r["ATTRIBUTES"]


@pytest.mark.parametrize("edit, reason", [
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("LayerNormType::RMSNORM", "LayerNormType::LAYERNORM")),
     "sharded LayerNormType::LAYERNORM"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("use_welford=0", "use_welford=1")), "use_welford=1"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("block_h=1", "block_h=2")), "block_h 2"),
    (lambda r: r.update(INPUT_1_LAYOUT="TILE"), "a tiled or L1 gamma"),
    (lambda r: r.update(OUTPUT_0_MEMORY="DEV_0_DRAM_INTERLEAVED"), "OUTPUT_0 DRAM_INTERLEAVED"),
    (lambda r: r.update(INPUT_0_MEMORY="DEV_0_L1_BLOCK_SHARDED"), "INPUT_0 L1_BLOCK_SHARDED"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("compute_with_storage_grid_size=8-4",
                                                           "compute_with_storage_grid_size=1-1").replace(
        "block_w=2", "block_w=64"), **{"INPUT_0_X_PAD[LOGICAL]": "2048[2048]"}), "sharded RMSNorm on one core"),
])
def test_other_forms_are_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(LLAMA, tmp_path / "n.csv", _is_norm, edit)
    assert line.status != MODELLED and reason in line.status, line.status


def test_a_row_whose_width_is_not_its_grid_times_its_block_is_refused_naming_the_column(tmp_path):
    def wider(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("block_w=2", "block_w=3")
    with pytest.raises(ValueError, match=r"INPUT_0_X.*width 2048 != 8 x 4 cores x block_w 3 x 32"):
        one_line(LLAMA, tmp_path / "n.csv", _is_norm, wider)


@pytest.mark.parametrize("kwargs, match", [
    ({"grid": (8, 0)}, r"grid=\(8, 0\); expected \(gx, gy\), two positive ints"),
    ({"grid": [8, 4]}, r"grid=\[8, 4\]"),
    ({"grid": (8, True)}, r"grid=\(8, True\)"),
    ({"grid": (1, 1)}, r"grid=\(1, 1\); expected at least two cores"),
    ({"block_w": 0}, r"block_w=0; expected a positive int"),
    ({"block_w": 2.0}, r"block_w=2.0"),
])
def test_bad_specs_are_refused_naming_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NormShardedSpec(**{"grid": (8, 4), "block_w": 2, **kwargs})
