"""Causal flash-decode rows (``kinds.sdpa.read_causal_decode``): the decode position is a device tensor,
not a report column, so a row is priced over its cache's capacity, exactly where that capacity is one
k chunk and as an upper bound of the merge where its chunks each get a core; the rest is skipped with
the reason. Built from the real rows of the North-mini, Gemma-4, Phi-3.5 and gpt-oss reports
(the invalid-trace excerpt's, 128 chunks over 2 cores per head, in test_costmodel_reports_in);
the prices are checked against the rows' own device times, which no fit saw."""

import pathlib
import re

import pytest
from _report_util import PAIRS_DIR, inner, one_line, op_rows

from costmodel.blackhole import kinds
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.sdpa import SdpaDecodeSpec, decode_split
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.report_reader import MODELLED
from costmodel.hardware import blackhole_p150a

MORE = pathlib.Path(__file__).parent / "data" / "profiler_more"
NM = PAIRS_DIR / "bh_north_mini_functional_decode_b1.csv"
GEMMA = MORE / "bh_gemma4_31b_fused_full_decode.csv"
PHI = MORE / "bh_phi35_mini_advisor_candidate_decode.csv"
GPT_OSS = MORE / "bh_gpt_oss_20b_fused_decode_b1.csv"
HW = blackhole_p150a()
FIT = kernel_only(load_calibration().params)  # the rows are DEVICE KERNEL DURATION
CODE = "SdpaDecodeDeviceOperation"


@pytest.mark.parametrize("grid, max_per_head, batch, kv, expected", [
    (110, 1, 1, 4, (1, 1)),  # North mini: 4 cores, one per kv head
    (32, 16, 1, 4, (8, 1)),  # Gemma-4: its 8x4 grid, 8 cores per kv head
    (110, 1, 32, 32, (1, 11)),  # Phi-3.5: 3 cores per user, 11 heads each
    (110, 110, 1, 8, (13, 1)),  # no program config: max_cores_per_head is the grid
])
def test_the_core_split_is_the_factorys(grid, max_per_head, batch, kv, expected):
    """sdpa_decode_program_factory's num_cores_per_head and num_heads_per_core, worked by hand."""
    assert decode_split(grid_cores=grid, max_cores_per_head=max_per_head, batch=batch, kv_heads=kv) == expected


def test_a_one_chunk_paged_cache_is_priced_exactly_whatever_the_position():
    """North mini: a page table of one 32-row block per user and k chunks of 32, so every position reads
    one chunk; 4 kv heads of 8 q heads (Q padded to one 32-row tile) on 4 cores, Q sharded in L1."""
    rows = op_rows(NM, CODE)
    assert [r.status for r in rows] == [MODELLED]
    spec = inner(rows[0].spec)
    assert (spec.users, spec.q_rows, spec.head_dim, spec.smax_rows, spec.mask_dtype) == (4, 32, 128, 32.0, None)
    assert (spec.attn.k_chunk, spec.grid_cores, spec.fidelity) == (32.0, None, "HiFi2")
    assert abs(float(spec.us(HW, FIT)) / rows[0].duration_us - 1) < 0.15, rows[0].duration_us


def test_chunks_on_their_own_cores_are_priced_at_the_capacity():
    """Gemma-4: two 64-row blocks per user, k chunks of 64, 8 cores per kv head on its 8x4 grid: at most
    two chunks, each on a core of its own; priced with both (the merge of two partials) and within 20%
    of every row."""
    rows = op_rows(GEMMA, CODE)
    assert len(rows) == 3 and {r.status for r in rows} == {MODELLED}  # the eager run and two replays
    spec = inner(rows[0].spec)
    assert (spec.users, spec.q_rows, spec.head_dim, spec.smax_rows, spec.grid_cores) == (4, 32, 512, 128.0, 32)
    assert kinds.cores(rows[0].spec, HW) == 32  # the CORE COUNT of every row
    for r in rows:
        assert abs(float(spec.us(HW, FIT)) / r.duration_us - 1) < 0.20, (r.line, r.duration_us)
    one_chunk = SdpaDecodeSpec(spec.attn, 64.0, 4, 32, 512, spec.kv_dtype, None, spec.act_dtype, spec.fidelity,
                               grid_cores=32)
    assert float(one_chunk.us(HW, FIT)) <= float(spec.us(HW, FIT))  # the capacity bounds the position's price


def test_forms_the_model_has_no_term_for_are_skipped_with_the_reason():
    """Phi-3.5's 11 (user, kv head) pairs per core and gpt-oss's attention sink, in every run of the op."""
    for path, reason in ((PHI, "SDPA decode with 11 (batch, kv head) pairs per core"),
                         (GPT_OSS, "SDPA decode with an attention sink or a mask input")):
        statuses = {r.status for r in op_rows(path, CODE)}
        assert statuses and all(reason in s for s in statuses), (path.name, statuses)


@pytest.mark.parametrize("edit, reason", [
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'sliding_window_size': 'std::nullopt'",
                                                           "'sliding_window_size': '64'")),
     "sliding window of 64 rows"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'use_mla': 'std::nullopt'", "'use_mla': 'true'")),
     "use_mla=true"),
    # eight blocks per user: the position sets how many of the 8 chunks the head's one core reads
    (lambda r: r.update({"INPUT_4_X_PAD[LOGICAL]": "8[8]"}), "paged or contiguous cache of 8 k chunks over 1 cores"),
    # no program config: ttnn splits a head over up to the whole grid (27 cores for 4 kv heads), one core per
    # chunk for these 20; the price splits a head over at most 16
    (lambda r: r.update({"INPUT_4_X_PAD[LOGICAL]": "20[20]", "ATTRIBUTES": re.sub(
        r"'program_config': 'SDPAProgramConfig\([^']*\)'", "'program_config': 'std::nullopt'", r["ATTRIBUTES"])}),
     "20 k chunks on as many cores per head: the price splits a head over at most 16 cores"),
    # 0: the kernels size each chunk from cur_pos (sdpa_decode/device/kernels/rt_args_common.hpp, Llama-3.2-1B's row)
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'k_chunk_size': '32'", "'k_chunk_size': '0'")),
     "k_chunk_size 0: its kernels size each k chunk from the decode position"),
    (lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace("'k_chunk_size': '32'", "'k_chunk_size': '48'")),
     "k_chunk_size 48 (the model prices whole-tile chunks)"),
])
def test_other_forms_are_skipped_with_the_reason(tmp_path, edit, reason):
    line, _ = one_line(NM, tmp_path / "d.csv", lambda r: r["OP CODE"] == CODE and r["DEVICE KERNEL DURATION [ns]"],
                       edit)
    assert line.status != MODELLED and reason in line.status, line.status


def test_a_chunk_size_that_is_no_number_is_refused_naming_the_column(tmp_path):
    def edit(r):
        r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("'k_chunk_size': '32'", "'k_chunk_size': 'big'")
    with pytest.raises(ValueError, match=r"ATTRIBUTES.*k_chunk_size='big'; expected a non-negative integer"):
        one_line(NM, tmp_path / "d.csv", lambda r: r["OP CODE"] == CODE and r["DEVICE KERNEL DURATION [ns]"], edit)


def test_a_page_table_for_other_users_is_refused_naming_the_column(tmp_path):
    def edit(r):
        r["INPUT_4_Y_PAD[LOGICAL]"] = "2[2]"
    with pytest.raises(ValueError, match=r"INPUT_4_Y.*page table of 2 users != Q's batch 1"):
        one_line(NM, tmp_path / "d.csv", lambda r: r["OP CODE"] == CODE and r["DEVICE KERNEL DURATION [ns]"], edit)
