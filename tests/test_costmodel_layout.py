"""Layout conversions (``costmodel.blackhole.kinds.layout``: tilize / untilize on the split-rows programs)
and the row-major last-dim concat (``data_movement`` kind ``concat_sticks``), read from real report lines
(tests/data/profiler_more, SOURCES.md) and priced against the rows' own measured times, which no fit saw:
the calibration holds no layout row and no row-major concat."""

from __future__ import annotations

import pathlib

import pytest
from _report_util import inner, one_line, records

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds import layout
from costmodel.blackhole.kinds.data_movement import DataMovementSpec
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.report_reader import MODELLED, model_cores, read_report
from costmodel.hardware import blackhole_p150a

MORE = pathlib.Path(__file__).parent / "data" / "profiler_more"
HW = blackhole_p150a()
FIT = kernel_only(load_calibration().params)


def rows_of(name: str, code: str):
    return [r for r in read_report(MORE / name).rows if r.op_code == code]


def modelled(name: str, code: str, spec_type=layout.LayoutSpec):
    """{spec: [measured us]} of the modelled rows of op ``code`` in report ``name`` whose spec is a
    ``spec_type`` (the split-rows programs' by default)."""
    out: dict = {}
    for r in rows_of(name, code):
        if r.status == MODELLED and isinstance(inner(r.spec), spec_type):
            out.setdefault(inner(r.spec), []).append(r.duration_us)
    return out


def price(spec) -> float:
    return float(spec.us(HW, FIT))


def test_split_blocks_is_ttnn_split_blocks_for_tilize():
    # ceil(blocks / grid) a core, then ceil(blocks / that) cores: 512 tile rows -> 5 a core on 103 cores
    # (Llama's fp32 tilize reports CORE COUNT 103); 32 -> 32 cores of 1
    assert layout.split_blocks(512, 110) == (5, 103)
    assert layout.split_blocks(32, 110) == (1, 32)
    assert layout.split_blocks(2880, 110) == (27, 107)


def test_block_sticks_counts_the_real_rows_of_each_tile_row():
    # Qwen3.6's [1, 4, 33, 64] padded to 64 rows: per head a full tile row then a 1-row one
    assert layout.block_sticks((1, 4, 33, 64), (1, 4, 64, 64)).tolist() == [32, 1] * 4
    # gpt-oss's [1, 32, 1, 2880]: 32 tile rows of one real row each
    assert layout.block_sticks((1, 32, 1, 2880), (1, 32, 32, 2880)).tolist() == [1] * 32


def test_every_layout_row_of_the_reports_runs_on_the_cores_priced():
    # the oracle is each row's own CORE COUNT (the program ttnn ran); the model's split must give it
    checked = 0
    for path in sorted(MORE.glob("bh_*.csv")):
        if path.stem.endswith("_perf_report"):
            continue
        recs = records(path)
        for r in read_report(path).rows:
            if r.status == MODELLED and isinstance(inner(r.spec), layout.SPECS):
                checked += 1
                assert model_cores(inner(r.spec), HW) == int(float(recs[r.line - 2]["CORE COUNT"])), (path.name, r.line)
    assert checked >= 100
    rep = read_report(MORE / "bh_llama3_2_1b_advisor_incumbent_decode.csv")
    fp32 = [inner(r.spec) for r in rep.rows if r.status == MODELLED and r.op_code == "TilizeDeviceOperation"
            and inner(r.spec).act_dtype == "fp32" and inner(r.spec).blocks == 512]
    assert fp32 and all(model_cores(s, HW) == 103 for s in fp32)


def test_phi_reads_its_three_layout_forms():
    phi = "bh_phi35_mini_advisor_candidate_decode.csv"
    (sharded,) = modelled(phi, "UntilizeDeviceOperation")
    assert sharded.shard_cores == 32 and sharded.blocks == 32 and sharded.block_tiles == 3
    assert not sharded.stick_barrier and sharded.sticks_in_l1 and sharded.tiles_in_l1
    (unpad,) = modelled(phi, "UntilizeWithUnpaddingDeviceOperation")
    # [1, 32, 32, 64[48]] -> 48 columns: 96 B sticks, each written and waited for
    assert unpad.stick_barrier and unpad.stick_bytes == 96 and unpad.block_tiles == 2
    pads = modelled(phi, "TilizeWithValPaddingDeviceOperation")
    # 48 -> 64 columns: each of a core's 32 sticks fills 16 bf16 columns (32 B); 96 columns: no padding
    assert sorted(s.core_loads for s in pads) == [((1, 32, 0),), ((1, 32, 1024),)]


def test_each_written_stick_of_untilize_with_unpadding_costs_one_write_round_trip():
    # gpt-oss's one-tile untilize_with_unpadding keeps 17 rows (prefill) or 1 (decode): same program, one
    # core; the measured difference over 16 sticks is the writer's per-stick barrier, which the model prices
    # from the NoC estimator's write round trip (hw.noc_write_round_trip_cycles), not from these rows
    specs = {s.sticks: (s, t) for name in ("bh_gpt_oss_20b_fused_prefill_s17.csv", "bh_gpt_oss_20b_fused_decode_b1.csv")
             for s, t in modelled(name, "UntilizeWithUnpaddingDeviceOperation").items()
             if s.block_tiles == 1 and s.stick_bytes == 64}
    (s17, t17), (s1, t1) = specs[17], specs[1]
    measured = (min(t17) - min(t1)) / 16
    priced = (price(s17) - price(s1)) / 16
    assert priced == pytest.approx(measured, rel=0.1)


@pytest.mark.parametrize(("name", "cols"), [("bh_gpt_oss_20b_fused_decode_b1.csv", 32),
                                            ("bh_gpt_oss_20b_fused_decode_b1.csv", 64),
                                            ("bh_qwen3_4b_optimized_decode.csv", 128),
                                            ("bh_qwen3_6_27b_functional_full_attention_prefill_s33.csv", 256)])
def test_a_one_row_tilize_with_padding_is_its_padding_fill(name, cols):
    # one real row padded to 32 on one core: the reader fills 31 rows of the width with 32-bit stores, so the
    # time grows with the width; priced within 15% at each width, three models' reports
    (spec, times), = [(s, t) for s, t in modelled(name, "TilizeWithValPaddingDeviceOperation").items()
                      if s.sticks == 1 and s.stick_bytes == 2 * cols]
    assert spec.core_loads == ((1, 1, 31 * cols * 2),)
    assert price(spec) == pytest.approx(sorted(times)[len(times) // 2], rel=0.15)


def test_a_sharded_tilize_is_skipped_with_the_reason():
    llama = rows_of("bh_llama3_2_1b_advisor_incumbent_decode.csv", "TilizeDeviceOperation")
    assert any("not modelled (kernels ['writer_unary_sharded', 'reader_unary_sharded'])" in r.status for r in llama)


def test_phi_row_major_concat_is_one_stick_per_unit_and_priced_within_15_percent():
    (spec, times), = modelled("bh_phi35_mini_advisor_candidate_decode.csv", "ConcatDeviceOperation",
                                      DataMovementSpec).items()
    assert (spec.kind, spec.units, spec.reads_per_unit, spec.stick_bytes, spec.in_l1) == ("concat_sticks", 1024, 2.0,
                                                                                         192, True)
    assert model_cores(spec, HW) == 110
    assert price(spec) == pytest.approx(sorted(times)[len(times) // 2], rel=0.15)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("kind", "transpose", "kind='transpose' unknown"),
    ("act_dtype", "bfp8", "act_dtype='bfp8' unknown"),
    ("blocks", 0, "blocks=0 must be an integer >= 1"),
    ("stick_bytes", 1.5, "stick_bytes=1.5 must be an integer >= 1"),
    ("shard_cores", 3, "shard_cores=3: only an untilize"),
    ("core_loads", ((0, 1, 0),), r"core_loads entry \(0, 1, 0\)"),
    ("core_loads", (), "core_loads is empty"),
])
def test_a_bad_layout_spec_is_refused_naming_the_field(field, value, match):
    good = {"kind": "tilize", "blocks": 2, "block_tiles": 1, "stick_bytes": 64, "sticks": 33,
            "core_loads": ((1, 32, 0),)}
    with pytest.raises(ValueError, match=match):
        layout.LayoutSpec(**{**good, field: value})


PHI = MORE / "bh_phi35_mini_advisor_candidate_decode.csv"


def is_concat(r):
    return r["OP CODE"] == "ConcatDeviceOperation"


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'dim': '3'", "'dim': '2'")),
     "concat of ROW_MAJOR tensors along dim 2"),
    (lambda r: r.update({"INPUT_1_X_PAD[LOGICAL]": "64[64]", "OUTPUT_0_X_PAD[LOGICAL]": "112[112]"}),
     "concat of ROW_MAJOR pieces of different widths [48, 64]"),
    (lambda r: r.update(INPUT_1_DATATYPE="FLOAT32"), "concat of tensors of different formats"),
    (lambda r: r.update(INPUT_0_MEMORY="DEV_0_L1_HEIGHT_SHARDED"), "sharded operand (INPUT_0 L1_HEIGHT_SHARDED)"),
])
def test_a_row_major_concat_the_model_does_not_price_is_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(PHI, tmp_path / "c.csv", is_concat, edit)
    assert line.status.startswith(reason)


def is_unpad(r):
    return r["OP CODE"] == "UntilizeWithUnpaddingDeviceOperation" and r["DEVICE KERNEL DURATION [ns]"]


@pytest.mark.parametrize(("edit", "reason"), [
    (lambda r: r.update(OUTPUT_0_LAYOUT="TILE"), "untilize with OUTPUT_0 in TILE layout (expected ROW_MAJOR)"),
    (lambda r: r.update(INPUT_0_DATATYPE="BFLOAT8_B", OUTPUT_0_DATATYPE="BFLOAT8_B"),
     "data type not modelled (INPUT_0 BFLOAT8_B)"),
    (lambda r: r.update({"DATA MOVEMENT KERNEL SOURCE": "['x/writer_other.cpp'; 'x/reader_other.cpp']"}),
     "untilize program not modelled (kernels ['writer_other', 'reader_other'])"),
    (lambda r: r.update(OUTPUT_0_MEMORY="DEV_0_L1_WIDTH_SHARDED"), "untilize with a sharded row-major side"),
])
def test_a_layout_row_the_model_does_not_price_is_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(PHI, tmp_path / "u.csv", is_unpad, edit)
    assert line.status.startswith(reason), line.status


def test_a_layout_row_without_kernel_names_is_read_by_its_op_code(tmp_path):
    # an older report without DATA MOVEMENT KERNEL SOURCE: untilize_with_unpadding's writer waits per stick
    line, _ = one_line(PHI, tmp_path / "u.csv", is_unpad, lambda r: r.update({"DATA MOVEMENT KERNEL SOURCE": ""}))
    assert line.status == MODELLED and inner(line.spec).stick_barrier


@pytest.mark.xfail(strict=True, reason="the fixed time is the eltwise programs' [launch_eltwise_us] (0.93 us, fitted on "
                   "binary_ng rows); a one-stick untilize_with_unpadding runs 1.1 us in all, its writer thread 1.02 us "
                   "of it (the row's BRISC duration) for a tile read, one pass and one stick write: priced 1.65 us, "
                   "+45%. The 17-stick rows of the same program are within 10%, so the miss is the fixed part")
def test_a_one_stick_untilize_is_priced_within_20_percent():
    (spec, times), = [(s, t) for s, t in modelled("bh_gpt_oss_20b_fused_decode_b1.csv",
                                                  "UntilizeWithUnpaddingDeviceOperation").items()
                      if s.sticks == 1 and s.stick_bytes == 64]
    assert price(spec) == pytest.approx(min(times), rel=0.2)


def test_block_edge_is_ttnn_compute_ncores_wh():
    # the block programs' square block edge s: the first s from isqrt(ceil(tiles / grid)) up with
    # ceil(W / s) x ceil(H / s) < grid; the rows' CORE COUNTs: Qwen3.6's 5120 x 12288 tilize 105 cores
    # (s = 26: 15 x 7), its 1 -> 32 x 5120 padded tilize 80 (s = 2), gpt-oss's 2880 x 5760 untilize 98 per
    # slice of 90 tile rows (s = 13: 14 x 7)
    assert layout.block_edge(384, 160, 110) == 26
    assert layout.block_edge(160, 1, 110) == 2
    assert layout.block_edge(180, 90, 110) == 13
    spec = layout.LayoutBlockSpec("untilize", 180, 90, 32, 2880, 11520)
    assert spec.cores(HW) == 98


def test_an_untilize_edited_to_the_block_writer_reads_as_the_block_program(tmp_path):
    line, _ = one_line(PHI, tmp_path / "u.csv", is_unpad, lambda r: r.update(
        {"DATA MOVEMENT KERNEL SOURCE": "['x/writer_unary_stick_layout_wh_multicore.cpp'; "
                                        "'x/reader_unary_interleaved_wh_multicore.cpp']"}))
    assert line.status == MODELLED
    spec = inner(line.spec)
    assert isinstance(spec, layout.LayoutBlockSpec) and (spec.width_tiles, spec.height_tiles, spec.slices) == (2, 1, 32)


def test_the_block_tilize_waits_for_each_stick():
    # gpt-oss's tilize_with_val_padding of [1, 32, 17, 2880] on the block program: 90 cores of one tile
    # column, each reading 32 slices x 17 sticks, one DRAM round trip each; priced within 10%
    (spec, times), = [(s, t) for s, t in modelled("bh_gpt_oss_20b_fused_prefill_s17.csv",
                                                  "TilizeWithValPaddingDeviceOperation", layout.LayoutBlockSpec).items()
                      if s.rows == 17]
    assert spec.cores(HW) == 90
    assert price(spec) == pytest.approx(sorted(times)[len(times) // 2], rel=0.1)


@pytest.mark.xfail(strict=True, reason="the block programs' one-row tilize_with_val_padding fills 31 padding rows "
                   "per slice; priced with 32-bit stores at RISC_STORE_LOOP_CYCLES (the count fill_with_val takes) "
                   "it comes out 29-39% under on gpt-oss, Qwen3.6 and Muse: the both-dims reader's fill runs at about "
                   "half that rate, which no source here explains")
def test_the_block_one_row_padded_tilize_is_priced_within_20_percent():
    (spec, times), = [(s, t) for s, t in modelled("bh_gpt_oss_20b_fused_prefill_s17.csv",
                                                  "TilizeWithValPaddingDeviceOperation", layout.LayoutBlockSpec).items()
                      if s.rows == 1]
    assert price(spec) == pytest.approx(sorted(times)[len(times) // 2], rel=0.2)


@pytest.mark.parametrize(("field", "value", "match"), [
    ("kind", "reshape", "kind='reshape' unknown"),
    ("width_tiles", 0, "width_tiles=0 must be an integer >= 1"),
    ("rows", 65, "rows=65 exceed the 2 tile rows of a slice"),
    ("pad", True, "pad is a property of tilize_with_val_padding"),
])
def test_a_bad_block_spec_is_refused_naming_the_field(field, value, match):
    good = {"kind": "untilize", "width_tiles": 90, "height_tiles": 2, "slices": 1, "rows": 33, "stick_bytes": 5760}
    with pytest.raises(ValueError, match=match):
        layout.LayoutBlockSpec(**{**good, field: value})
