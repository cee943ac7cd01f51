"""``plan --ops-csv`` beyond matmuls: SDPA chunk searches against an exhaustive search of their own
(every tile multiple, not only divisors, filtered by the model's legality rule), add + norm fusions
against the port's own fused op (``graph.layer_op_specs`` with ``fuse_add_norm``) and against real
CLIP add + LayerNorm lines, real SDPA rows the model does not price listed with the reader's reason,
and the combination of changes behind P(reach)."""

import csv
import dataclasses
import json

import numpy as np
import pytest
from _report_util import PAIRS_DIR, records
from _shared_data import need_file, profiler_reports_dir
from scipy import stats

from costmodel.blackhole import BlackholeConfig
from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.graph import layer_op_specs
from costmodel.blackhole.intervals import quantile
from costmodel.blackhole.opspecs import ChipSpec, KernelSpec, NormSpec, SdpaDecodeSpec
from costmodel.blackhole.report_plan import (
    combine,
    plan_search,
    reach_probability,
    total_measured_us,
)
from costmodel.blackhole.report_reader import read_report
from costmodel.blackhole.sdpa_program_config import MAX_CORES_PER_HEAD
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
CLIP = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"


@pytest.fixture(scope="module")
def cal():
    return load_calibration()


@pytest.fixture(scope="module", params=["decode", "standard"])
def port_report(request, tmp_path_factory):
    """The port's layer emitted as a report (its SDPA row in either kernel; its add + rms_norm2 unfused)."""
    path = tmp_path_factory.mktemp("plan_kinds") / f"port_{request.param}.csv"
    extra = ["--attn-mode", "standard", "--q-chunk", "32"] if request.param == "standard" else []
    main(["--emit-csv", str(path), *extra, "--json"])
    return read_report(path)


@pytest.fixture(scope="module")
def port_result(port_report, cal):
    return plan_search(port_report, cal)


def _exhaustive_sdpa(spec, hw, params):
    """(best us, attn) over every k_chunk and every q_chunk (standard) / cores_per_head (decode) in
    steps of a tile (divisors or not), the kernel's own KV format, legal by the config's rule."""
    decode = isinstance(spec, SdpaDecodeSpec)
    seconds = range(1, MAX_CORES_PER_HEAD + 1) if decode else range(32, spec.q_rows + 1, 32)
    best = (float("inf"), None)
    for k in range(32, int(spec.smax_rows) + 1, 32):
        for v in seconds:
            attn = dataclasses.replace(spec.attn, k_chunk=float(k),
                                       **{"cores_per_head" if decode else "q_chunk": float(v)})
            try:
                attn.validate(hw, smax=spec.smax_rows, num_tokens=1 if decode else spec.q_rows,
                              group=spec.q_rows if decode else 1, head_dim=spec.head_dim, kv_dtype=spec.kv_dtype,
                              mask_dtype=spec.mask_dtype, act_dtype=spec.act_dtype)
            except ValueError:
                continue
            t = float(KernelSpec(dataclasses.replace(spec, attn=attn)).us(hw, params))
            best = min(best, (t, attn), key=lambda x: x[0])
    return best


def test_sdpa_best_config_is_the_exhaustive_best(port_report, port_result, cal):
    (row,) = [r for r in port_report.rows if r.status == "modelled" and "Sdpa" in type(r.spec).__name__]
    (plan,) = [p for p in port_result.changes if p.kind == "sdpa" and not p.flag]
    t_best, attn = _exhaustive_sdpa(row.spec, port_report.hw, cal.params)
    assert plan.after_us == pytest.approx(t_best, rel=1e-5), (plan.change, attn)
    assert plan.predicted_us == pytest.approx(float(KernelSpec(row.spec).us(port_report.hw, cal.params)), rel=1e-5)
    assert plan.saving_us == pytest.approx(plan.predicted_us - plan.after_us, rel=1e-6)
    assert 0 < plan.saving_us and plan.lo_us <= plan.saving_us <= plan.hi_us and plan.lines == (row.line,)
    assert f"k_chunk 128->{int(attn.k_chunk)}" in plan.change or attn.k_chunk == 128


def test_sdpa_format_change_is_flagged_and_beats_every_config(port_result):
    sdpa = [p for p in port_result.changes if p.kind == "sdpa"]
    flagged = [p for p in sdpa if p.flag]
    config = [p for p in sdpa if not p.flag]
    # one best change per flag: the KV format, the fidelity, both
    assert len(config) == 1 and len(flagged) == len({p.flag for p in flagged}) <= 3
    for p in flagged:
        assert ("kv bf16->" in p.change) == ("KV-cache format" in p.flag) and p.after_us < config[0].after_us
        assert ("fidelity " in p.change) == ("fidelity: accuracy not modelled" in p.flag)


def test_fusion_saving_is_measured_pair_minus_the_ports_fused_op(port_report, port_result, cal):
    """The oracle: the two rows' measured time minus the fused op as the port's own graph builds it
    (``fuse_add_norm``: its ``add_rms_norm2``), kernel-only as a report measures it."""
    (plan,) = [p for p in port_result.changes if p.kind == "fusion"] or port_result.fusions_not_faster
    add, norm = (next(r for r in port_report.rows if r.line == ln) for ln in plan.lines)
    assert (add.op_code, norm.op_code) == ("BinaryNgDeviceOperation", "LayerNormDeviceOperation")
    assert plan.lines == (add.line, add.line + 1)
    fused = layer_op_specs(BlackholeConfig.for_expert(CFG, fuse_add_norm=True), cfg=CFG)["add_rms_norm2"]
    t_fused = float(KernelSpec(fused).us(port_report.hw, cal.params))
    assert plan.after_us == pytest.approx(t_fused, rel=1e-5)
    assert plan.saving_us == pytest.approx(add.duration_us + norm.duration_us - t_fused, rel=1e-5, abs=1e-4)
    assert plan.lo_us < plan.saving_us < plan.hi_us


def _cut(src, dst, lines, edit=lambda recs: None):
    """A report of the data lines ``lines`` of ``src`` (file line numbers), edited by ``edit``."""
    recs = records(src)
    keep = [recs[ln - 2] for ln in lines]
    edit(keep)
    with dst.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(keep)
    return keep


def test_real_clip_add_layernorm_pair_priced_as_the_fused_layernorm(tmp_path, cal):
    """CLIP's residual add (line 26) and the next LayerNorm (line 27), cut from the real report: the
    pair is found, and its saving is their measured time minus a fused LayerNorm with the rows,
    width, format and fp32 accumulation the lines carry, on the 8x8 grid they ran on."""
    need_file(CLIP)
    add, norm = _cut(CLIP, tmp_path / "pair.csv", (26, 27))
    assert add["OP CODE"] == "BinaryNgDeviceOperation" and "ADD" in add["ATTRIBUTES"]
    assert norm["OP CODE"] == "LayerNormDeviceOperation" and "LAYERNORM" in norm["ATTRIBUTES"]
    assert "fp32_dest_acc_en=1" in norm["ATTRIBUTES"] and norm["AVAILABLE WORKER CORE COUNT"] == "64"
    rows, width = (int(norm[f"INPUT_0_{d}_PAD[LOGICAL]"].split("[")[0]) for d in "YX")
    rep = read_report(tmp_path / "pair.csv")
    res = plan_search(rep, cal)
    (plan,) = res.changes + res.fusions_not_faster
    fused = ChipSpec(NormSpec(rows, width, "bf16", fused_residual=True, layernorm=True, fp32_dest_acc=True),
                     "p150a", (8, 8))
    measured = (float(add["DEVICE KERNEL DURATION [ns]"]) + float(norm["DEVICE KERNEL DURATION [ns]"])) / 1e3
    t_fused = float(KernelSpec(fused).us(rep.hw, cal.params))
    assert plan.kind == "fusion" and plan.lines == (2, 3)
    assert plan.after_us == pytest.approx(t_fused, rel=1e-5)
    assert plan.saving_us == pytest.approx(measured - t_fused, rel=1e-5)
    assert plan.lo_us < plan.saving_us < plan.hi_us
    # the model prices the fused LayerNorm (one core's extra pass over 32 rows) above the two rows
    # measured, so it is searched and not advised
    assert (plan in res.fusions_not_faster) == (plan.saving_us <= 0)


def test_real_pair_of_other_shapes_is_skipped_with_why(tmp_path, cal):
    """The same real lines with the norm's input made wider: no fusion, and the reason names both."""
    need_file(CLIP)

    def widen(recs):
        for pre in ("INPUT_0", "OUTPUT_0"):
            recs[1][f"{pre}_X_PAD[LOGICAL]"] = "1536[1536]"
    _cut(CLIP, tmp_path / "pair.csv", (26, 27), widen)
    res = plan_search(read_report(tmp_path / "pair.csv"), cal)
    assert not res.changes and not res.fusions_not_faster
    (skip,) = res.skipped
    assert skip.kind == "fusion" and skip.lines == (2, 3)
    assert "32x768 bf16) is not the norm's input (32x1536 bf16)" in skip.reason


def test_real_clip_every_pair_found(cal):
    """Every LayerNorm of the real CLIP report directly after an add is searched (50 of them)."""
    need_file(CLIP)
    rep = read_report(CLIP)
    recs = records(CLIP)
    expected = [(i + 2, i + 3) for i in range(len(recs) - 1)
                if "BinaryOpType::ADD" in recs[i]["ATTRIBUTES"] and recs[i + 1]["OP CODE"] == "LayerNormDeviceOperation"]
    res = plan_search(rep, cal)
    found = sorted(p.lines for p in res.changes + res.fusions_not_faster if p.kind == "fusion")
    assert found == expected and res.searched["fusion"] == len(expected) == 50


@pytest.mark.parametrize("path, line, reason", [
    (PAIRS_DIR / "bh_north_mini_functional_decode_b1.csv", 12, "priced but not searched: causal SDPA decode"),
    (PAIRS_DIR / "bh_north_mini_functional_prefill_s128.csv", 10, "priced but not searched: causal SDPA"),
    (profiler_reports_dir() / "bh_8xp150_deepseek_v3_d_p.csv", 182, "collective across chips"),
], ids=["decode-causal-paged", "prefill-causal", "ring-joint"])
def test_real_sdpa_rows_are_listed_with_the_readers_reason(path, line, reason, tmp_path, capsys):
    """The real SDPA line cut from its report (the whole reports' plans: test_costmodel_report_plan.py)."""
    need_file(path)
    (rec,) = _cut(path, tmp_path / "sdpa.csv", (line,))
    assert "ScaledDotProduct" in rec["OP CODE"] or "SDPA" in rec["OP CODE"].upper(), rec["OP CODE"]
    capsys.readouterr()
    assert main(["plan", "--ops-csv", str(tmp_path / "sdpa.csv"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    (skip,) = [s for s in doc["skipped"] if s["kind"] == "sdpa"]
    assert skip["lines"] == [2] and reason in skip["reason"]
    assert doc["searched"]["sdpa"] == 0


def test_combination_of_identical_changes_is_fully_correlated(cal):
    """North-mini decode lines 18 and 19 are the same matmul with the same best change: their errors
    (parameters and the op model's) are one, so the pair's sd is twice one's, and the 90% interval
    of one change alone is its own interval."""
    path = PAIRS_DIR / "bh_north_mini_functional_decode_b1.csv"
    rep = read_report(path)
    res = plan_search(rep, cal)
    z = quantile(cal)
    one, two = (p for p in res.changes if not p.flag and p.line in (18, 19))
    assert one.change == two.change and one.saving_us == pytest.approx(two.saving_us)
    _, s1, sd1 = combine([one], cal)
    assert s1 == one.saving_us and z * sd1 == pytest.approx((one.hi_us - one.lo_us) / 2, rel=1e-6)
    _, s2, sd2 = combine([one, two], cal)
    assert s2 == pytest.approx(2 * s1) and sd2 == pytest.approx(2 * sd1, rel=1e-6)
    # independent changes of other ops add less than linearly
    chosen, s, sd = combine(res.changes, cal)
    sds = [(p.hi_us - p.lo_us) / (2 * z) for p in chosen]
    assert len({p.line for p in chosen}) == len(chosen) == 5 and sd < sum(sds)
    # P(reach) is the t distribution of the combination: 0.95 at the interval's upper end of the total
    target = total_measured_us(rep) - s + z * sd
    assert reach_probability(rep, res.changes, target, cal) == pytest.approx(0.95, abs=1e-6)
    assert reach_probability(rep, res.changes, total_measured_us(rep) - s, cal) == pytest.approx(0.5, abs=1e-9)
    assert stats.t.cdf(z, cal.dof) == pytest.approx(0.95)


def test_one_change_per_row_when_changes_overlap(port_result, cal):
    """A change on a line already changed is left out of the combination (a row's flagged format
    change never joins; two changes of one row: only the larger)."""
    (sdpa,) = [p for p in port_result.changes if p.kind == "sdpa" and not p.flag]
    smaller = dataclasses.replace(sdpa, saving_us=sdpa.saving_us / 2)
    chosen, s, _ = combine([smaller, sdpa], cal)
    assert chosen == [sdpa] and s == sdpa.saving_us
    fusion = [p for p in port_result.changes if p.kind == "fusion"]
    clash = [dataclasses.replace(f, lines=(f.lines[1], sdpa.line), saving_us=sdpa.saving_us * 2) for f in fusion]
    chosen, _, _ = combine([sdpa, *clash], cal)
    assert chosen == (clash or [sdpa])
    g = np.sum([p.saving_grad for p in port_result.changes if not p.flag], axis=0)
    assert g.shape == np.asarray(cal.theta).shape


def test_cli_json_carries_every_kind_and_p_reach(tmp_path, capsys):
    """The port's emitted report with its residual adds measured 3x slower (the emitted adds alone are
    priced no faster fused: the fused norm's extra pass costs what the add's kernel does), so every
    change kind has a row."""
    path = tmp_path / "port.csv"
    main(["--emit-csv", str(path), "--json"])
    capsys.readouterr()
    with open(path, newline="") as f:
        recs = list(csv.DictReader(f))
    for r in recs:
        if r["OP CODE"] == "BinaryNgDeviceOperation" and "BinaryOpType::ADD" in r["ATTRIBUTES"]:
            r["DEVICE KERNEL DURATION [ns]"] = str(3.0 * float(r["DEVICE KERNEL DURATION [ns]"]))
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    assert main(["plan", "--ops-csv", str(path), "--target-ms", "0.45", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert {r["kind"] for r in doc["rows"]} == {"matmul", "sdpa", "fusion"}
    assert all(r["lines"] and "saving_grad" not in r for r in doc["rows"])
    assert doc["searched"] == {"matmul": 5, "sdpa": 1, "fusion": 1} and 0.0 <= doc["p_reach"] <= 1.0
    lo, hi = doc["saving_interval_us"]
    assert lo < doc["predicted_saving_us"] < hi
    assert main(["plan", "--ops-csv", str(path), "--target-ms", "0.45", "--top", "3"]) == 0
    out = capsys.readouterr().out
    assert "sdpa" in out and "P(device time <= 0.45 ms after the combined changes)" in out


def test_cli_help_and_bad_input(tmp_path, capsys):
    assert main(["plan", "--ops-csv", "x.csv", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the text
    assert "per SDPA row" in out and "fused residual norm" in out
    assert "example: python -m costmodel.blackhole plan --ops-csv ops_perf_results.csv --target-ms 30" in out
    assert main(["plan", "--ops-csv", str(tmp_path / "missing.csv")]) == 2
    assert "error:" in capsys.readouterr().err
    assert main(["plan", "--ops-csv", str(tmp_path / "missing.csv"), "--top", "0"]) == 2
    assert "error:" in capsys.readouterr().err


def test_an_add_before_a_width_sharded_norm_is_no_fusion_the_plan_prices():
    """Phi-3.5's decode window: its residual adds feed width-sharded RMSNorms (``NormShardedSpec``); the
    fused residual norm is priced for the interleaved program only, so each such pair is a skip with that
    reason (the plan once stopped on the sharded norm's missing ``fused_residual``)."""
    import pathlib

    from costmodel.blackhole.report_plan import fusion_pairs

    more = pathlib.Path(__file__).parent / "data" / "profiler_more"
    rep = read_report(more / "bh_phi35_mini_advisor_candidate_decode.csv").between("PERF_DECODE", "PERF_DECODE_END")
    pairs, skips = fusion_pairs(rep)
    sharded = [s for s in skips if "NormShardedSpec" in s.reason]
    assert not pairs and sharded
    assert all("the fused residual norm of the interleaved program only" in s.reason for s in sharded)
