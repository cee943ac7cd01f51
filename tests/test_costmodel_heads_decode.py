"""``nlp_create_qkv_heads_decode`` (``kinds.heads.HeadsDecodeSpec``) read from real report lines and
priced against measured rows no fit saw.

Every ``NLPCreateQKVHeadsDecodeDeviceOperation`` row of the repository's real reports reads as the users,
heads and head size its columns and attributes say (written out here by hand), on one core per user (its
CORE COUNT), or is skipped with the reason (a sharded input). The price has no parameter of its own: per
head, from DRAM one sub-tile read request per tile at the core's page-request rate and one DRAM round trip,
both fitted on other ops; from L1 one NoC round trip and a further read issue per tile, both measured by
tt-metal's NoC estimator on Blackhole (``costmodel.hardware`` [BH-noc-est]), not on these rows. These rows
meet them for the first time."""

import pathlib

import pytest
from _report_util import inner, one_line, op_rows

from costmodel.blackhole import kinds
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.heads import HeadsDecodeSpec
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.report_reader import MODELLED
from costmodel.hardware import blackhole_p150a

DATA = pathlib.Path(__file__).parent / "data"
NM_DECODE = DATA / "profiler_pairs" / "bh_north_mini_functional_decode_b1.csv"
GPT_OSS = DATA / "profiler_more" / "bh_gpt_oss_20b_fused_decode_b1.csv"
GEMMA = DATA / "profiler_more" / "bh_gemma4_31b_fused_full_decode.csv"
LLAMA = DATA / "profiler_more" / "bh_llama3_2_1b_advisor_incumbent_decode.csv"
PHI = DATA / "profiler_more" / "bh_phi35_mini_advisor_candidate_decode.csv"
HW = blackhole_p150a()
FIT = kernel_only(load_calibration().params)  # the rows are DEVICE KERNEL DURATION
CODE = "NLPCreateQKVHeadsDecodeDeviceOperation"

# (users, q heads, kv heads, head_dim) as the rows show them: INPUT_0 [1, 1, 32[1], 5120] and the attributes
EXPECTED = {NM_DECODE: HeadsDecodeSpec(1, 32, 4, 128), GPT_OSS: HeadsDecodeSpec(1, 64, 8, 64)}
# ... from an L1-interleaved input: Gemma-4's [1, 1, 32[1], 20480], Llama-3.2-1B's [1, 1, 32[32], 3072] (32 users)
EXPECTED_L1 = {GEMMA: HeadsDecodeSpec(1, 32, 4, 512, in_l1=True), LLAMA: HeadsDecodeSpec(32, 32, 8, 64, in_l1=True)}


@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.stem)
def test_dram_rows_read_as_their_heads_on_one_core_per_user_and_price_within_10_percent(path):
    rows = op_rows(path, CODE)
    assert rows and all(r.status == MODELLED for r in rows), {r.status for r in rows}
    assert {inner(r.spec) for r in rows} == {EXPECTED[path]}
    assert {kinds.cores(r.spec, HW) for r in rows} == {1}  # CORE COUNT 1 in every row
    for r in rows:
        assert abs(float(inner(r.spec).us(HW, FIT)) / r.duration_us - 1) < 0.10, (r.line, r.duration_us)


@pytest.mark.parametrize("path", list(EXPECTED_L1), ids=lambda p: p.stem)
def test_l1_rows_read_as_their_heads_on_one_core_per_user_and_price_within_10_percent(path):
    """Gemma-4's one user (40 heads of 16 tiles: 16 reads per head and RISC) and Llama's 32 users (48 heads of
    2 tiles): the per-read issue and the round trip carry the two ends."""
    rows = op_rows(path, CODE)
    assert rows and all(r.status == MODELLED for r in rows), {r.status for r in rows}
    assert {inner(r.spec) for r in rows} == {EXPECTED_L1[path]}
    assert {kinds.cores(r.spec, HW) for r in rows} == {EXPECTED_L1[path].users}  # the rows' CORE COUNT
    for r in rows:
        assert abs(float(inner(r.spec).us(HW, FIT)) / r.duration_us - 1) < 0.10, (r.line, r.duration_us)


def test_an_l1_input_is_priced_below_the_same_input_in_dram():
    """The L1 round trip (373 cycles) is shorter than the fitted DRAM one, whatever the head size."""
    for hd in (64, 128, 512):
        dram, l1 = HeadsDecodeSpec(1, 32, 4, hd), HeadsDecodeSpec(1, 32, 4, hd, in_l1=True)
        assert float(l1.us(HW, FIT)) < float(dram.us(HW, FIT))


def test_a_sharded_input_is_skipped_with_the_reason():
    rows = op_rows(PHI, CODE)
    reason = "create-heads decode from a sharded input (L1_WIDTH_SHARDED"
    assert rows and all(reason in r.status for r in rows), {r.status for r in rows}


@pytest.mark.parametrize("edit, reason", [
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'input_on_subcoregrids': 'false'",
                                                           "'input_on_subcoregrids': 'true'")),
     "input_on_subcoregrids=true"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'overlap_qk_coregrid': 'true'",
                                                           "'overlap_qk_coregrid': 'false'")),
     "overlap_qk_coregrid=false"),
    (lambda r: r.update(INPUT_0_DATATYPE="BFLOAT8_B"), "data type not modelled (INPUT_0 BFLOAT8_B)"),
])
def test_other_forms_are_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(NM_DECODE, tmp_path / "h.csv", lambda r: r["OP CODE"] == CODE, edit)
    assert line.status != MODELLED and reason in line.status, line.status


@pytest.mark.parametrize("edit, match", [
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'num_kv_heads': '4'", "'num_kv_heads': '5'")),
     r"width 5120 != \(num_q_heads 32 \+ 2 x num_kv_heads 5\) x head_dim 128"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'head_dim': '128'", "'head_dim': 'x'")),
     r"head_dim='x'; expected a non-negative integer"),
])
def test_a_row_that_contradicts_itself_is_refused_naming_the_column(tmp_path, edit, match):
    with pytest.raises(ValueError, match=match):
        one_line(NM_DECODE, tmp_path / "h.csv", lambda r: r["OP CODE"] == CODE, edit)


@pytest.mark.parametrize("kwargs, match", [
    ({"users": 0}, r"users=0; expected a positive int"),
    ({"users": 33}, r"users=33; the op takes at most 32 users"),
    ({"q_heads": True}, r"q_heads=True; expected a positive int"),
    ({"kv_heads": -1}, r"kv_heads=-1; expected an int >= 0"),
    ({"head_dim": 48}, r"head_dim=48; expected a multiple of 32"),
    ({"act_dtype": "bfp8"}, r"act_dtype='bfp8'"),
    ({"in_l1": "yes"}, r"in_l1='yes'; expected a bool"),
])
def test_bad_specs_are_refused_naming_the_field(kwargs, match):
    base = {"users": 1, "q_heads": 32, "kv_heads": 4, "head_dim": 128}
    with pytest.raises(ValueError, match=match):
        HeadsDecodeSpec(**{**base, **kwargs})
