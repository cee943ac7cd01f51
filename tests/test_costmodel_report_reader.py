"""Profiler op reports out of the cost model: the notes' tables round-trip through the CSV (V2 and
V1 column names) and refit to the same parameters; the real tool, tt-perf-report, reads
``--emit-csv`` output: every matmul row gets DRAM / FLOP percentages and the hardware constants it
derives from them are the model's."""

import csv
import dataclasses
import math
import re
import subprocess
import sys

import numpy as np
import pytest
from _report_util import check_matmul_rows, traced_gap_median_ns, tt_perf_report

from costmodel.blackhole import BlackholeConfig, fit, layer_op_specs, rows
from costmodel.blackhole.cli import main
from costmodel.blackhole.opspecs import KernelSpec, MatmulSpec
from costmodel.blackhole.params import PARAM_NAMES
from costmodel.blackhole.program_config import ttnn_subblock
from costmodel.blackhole.report_reader import MODELLED, read_report, read_rows, write_csv
from costmodel.blackhole.report_schema import DURATION, GAP
from costmodel.hardware import blackhole
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
OP_TABLES = ("op_times", "matmul_table", "attention_table")


@pytest.fixture(scope="module")
def notes_csv(tmp_path_factory):
    """The notes' op tables (per-op, matmul default/tuned, attention) written as an op report."""
    ops = [r for r in rows.load_rows() if r.table in OP_TABLES]
    path = tmp_path_factory.mktemp("csv") / "ops_perf_results_notes.csv"
    write_csv(path, [(r.spec, r.target) for r in ops])
    return path, ops


def test_csv_reads_back_the_same_ops(notes_csv):
    """The same op specs, priced kernel-only: a report's duration column is DEVICE KERNEL DURATION."""
    path, ops = notes_csv
    back = read_rows(path)
    assert [r.spec for r in back] == [KernelSpec(r.spec) for r in ops]
    assert [r.target for r in back] == pytest.approx([r.target for r in ops], rel=1e-9)
    header = next(csv.reader(path.open()))
    for col in ("OP CODE", "OP TYPE", "DEVICE ID", "DEVICE ARCH", "CORE COUNT", "MATH FIDELITY", "ATTRIBUTES",
                DURATION, "INPUT_0_Y_PAD[LOGICAL]", "INPUT_0_MEMORY", "INPUT_1_LAYOUT", "OUTPUT_0_X_PAD[LOGICAL]",
                "OUTPUT_0_DATATYPE", "OUTPUT_0_MEMORY"):
        assert col in header, col


def test_l1_resident_matmul_operands_round_trip_and_l1_weights_are_skipped(tmp_path):
    """An L1-interleaved activation / output is written as ``DEV_0_L1_INTERLEAVED`` and read back as such
    (priced without its DRAM bytes); weights in L1 are a form the model does not price: skipped, with why."""
    port = layer_op_specs(BlackholeConfig.for_expert(CFG), cfg=CFG)
    specs = [port["wqkv"], dataclasses.replace(port["wqkv"], in0_l1=True),
             dataclasses.replace(port["w2"], in0_l1=True, out_l1=True)]
    path = tmp_path / "l1.csv"
    write_csv(path, [(sp, 20.0) for sp in specs])
    assert [r.spec for r in read_rows(path)] == [KernelSpec(sp) for sp in specs]  # report rows: kernel-only
    recs = list(csv.DictReader(path.open()))
    assert [r["INPUT_0_MEMORY"] for r in recs] == ["DEV_0_DRAM_INTERLEAVED", "DEV_0_L1_INTERLEAVED",
                                                   "DEV_0_L1_INTERLEAVED"]
    recs[0]["INPUT_1_MEMORY"] = "DEV_0_L1_INTERLEAVED"
    with (tmp_path / "l1w.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs)
    rep = read_report(tmp_path / "l1w.csv")
    assert rep.rows[0].status.startswith("weights in L1 (L1_INTERLEAVED)")
    assert rep.rows[1].status == MODELLED


def test_matmul_attributes_carry_the_program_config_as_ttnn_prints_it(notes_csv):
    """The 1D config with its subblock / block fields, as in a real report (shared/data reports)."""
    recs = [r for r in csv.DictReader(notes_csv[0].open()) if r["OP CODE"] == "MatmulDeviceOperation"]
    assert recs
    for r in recs:
        attrs = r["ATTRIBUTES"]
        assert attrs.startswith("{'") and "'program_config': 'MatmulMultiCoreReuseMultiCast1DProgramConfig(" in attrs
        # the grid as ttnn 0.81.1 prints a CoreCoord (older reports, shared/data: '(x=11;y=10)')
        assert re.search(r"compute_with_storage_grid_size=(11-10|\(x=11;y=10\));", attrs)
        for field in ("in0_block_w=", "out_subblock_h=",
                      "out_subblock_w=", "out_block_h=", "out_block_w=", "per_core_M=", "per_core_N=", "mcast_in0=1"):
            assert field in attrs, field
        assert "," not in attrs  # the profiler writes ',' inside values as ';'


def _to_v1(src, dst):
    """The same report with V1 column names (no _PAD[LOGICAL], bare physical sizes)."""
    recs = list(csv.DictReader(src.open()))
    fields = [f.replace("_PAD[LOGICAL]", "") for f in recs[0]]
    with dst.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for r in recs:
            w.writerow([v.split("[")[0] if k.endswith("_PAD[LOGICAL]") else v for k, v in r.items()])
    return dst


def test_v1_column_names_read_the_same(notes_csv, tmp_path):
    v1 = _to_v1(notes_csv[0], tmp_path / "v1.csv")
    assert "INPUT_0_Y" in next(csv.reader(v1.open()))
    assert [r.spec for r in read_rows(v1)] == [r.spec for r in read_rows(notes_csv[0])]


@pytest.mark.slow  # compiles the residual Jacobian of every measured row (~10-20 s)
def test_csv_refits_to_the_json_parameters(notes_csv):
    path, ops = notes_csv
    from_json = fit.fit([dataclasses.replace(r, spec=KernelSpec(r.spec)) for r in ops], steps=30)
    from_csv = fit.fit(read_rows(path), steps=30)
    a, b = from_json.theta, from_csv.theta
    assert np.max(np.abs(a - b)) < 1e-3, dict(zip(PARAM_NAMES, a - b))
    assert from_csv.sigma == pytest.approx(from_json.sigma, rel=1e-3)


def test_emit_csv_writes_the_prediction(tmp_path, capsys):
    path = tmp_path / "pred.csv"
    result = main(["--smax", "5120", "--kv-dtype", "bfp8", "--emit-csv", str(path), "--json"])
    back = read_report(path)
    specs = layer_op_specs(BlackholeConfig.for_expert(CFG, smax=5120.0, cache="bfp8"), cfg=CFG)
    assert all(r.status == MODELLED for r in back.rows)
    assert [r.spec for r in back.rows] == list(specs.values())
    # kernel-only durations (DEVICE KERNEL DURATION has no dispatch): each op's time less its dispatch
    assert [r.duration_us for r in back.rows] == pytest.approx(list(result["kernel_us"].values()), rel=1e-6)
    gaps = [result["per_op_us"][k] - result["kernel_us"][k] for k in result["per_op_us"]]
    stored = fit.load_calibration().params
    assert all(stored.dispatch_us * (1 - 1e-5) <= g <= stored.dispatch_us + 110 * stored.dispatch_core_us + 1e-3
               for g in gaps)
    heads = next(r for r in csv.DictReader(path.open()) if r["OP CODE"] == "NlpCreateHeadsDeviceOperation")
    assert f"'num_q_heads': '{CFG.num_heads}'" in heads["ATTRIBUTES"]
    assert f"'head_dim': '{CFG.head_dim}'" in heads["ATTRIBUTES"]


# ---- the real tool ---------------------------------------------------------------------------------
def test_tt_perf_report_reads_emit_csv(tmp_path, capsys):
    path = tmp_path / "ops_perf_results_model.csv"
    result = main(["--emit-csv", str(path), "--json"])
    out = tt_perf_report(path, tmp_path)
    assert len(out) == len(result["per_op_us"])
    assert [float(r["Device Time"]) for r in out] == pytest.approx(list(result["kernel_us"].values()), rel=1e-6)
    specs = layer_op_specs(BlackholeConfig.for_expert(CFG), cfg=CFG)
    mm = [(s, result["kernel_us"][k]) for k, s in specs.items() if isinstance(s, MatmulSpec)]
    check_matmul_rows(out, blackhole("p150a"), mm)
    # the traced step's op-to-op gap (the real traced windows' median) on every row after the first,
    # which has 0 as the profiler writes a device's first op; the tool shows what was written (us),
    # and nothing on the first row (no previous op)
    gaps = [r[GAP] for r in csv.DictReader(path.open())]
    assert gaps[0] == "0" and [float(g) for g in gaps[1:]] == [traced_gap_median_ns()] * (len(gaps) - 1)
    assert out[0]["Op-to-Op Gap"] == ""
    assert [float(r["Op-to-Op Gap"]) * 1e3 for r in out[1:]] == pytest.approx([float(g) for g in gaps[1:]], rel=1e-12)


def test_tt_perf_report_gives_no_placeholder_advice_on_the_emitted_port(tmp_path, capsys):
    """Its advice on the emitted port report is the advice it would give on the chip's: each matmul's
    subblock is the one ttnn's helpers pick for the per-core block (``ttnn_subblock``), not a 1x1
    placeholder it would call small, and every block size is present."""
    pytest.importorskip("tt_perf_report", reason="tt-perf-report is in the dev extra")
    path = tmp_path / "ops_perf_results_model.csv"
    main(["--emit-csv", str(path), "--json"])
    capsys.readouterr()
    r = subprocess.run([sys.executable, "-m", "tt_perf_report.perf_report", str(path), "--no-color"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    advice = r.stdout[r.stdout.index("Matmul Optimization"):]
    specs = [s for s in layer_op_specs(BlackholeConfig.for_expert(CFG), cfg=CFG).values() if isinstance(s, MatmulSpec)]
    assert len(re.findall(r"MatmulDeviceOperation \d+ x \d+ x \d+", advice)) == len(specs) == 5
    for bad in ("is small, try out_subblock", "No output subblock size found", "No inner dim block size found"):
        assert bad not in advice, advice
    # the gaps written are a traced step's: no op is flagged for its gap, no "running with tracing" advice
    assert "High Op-to-Op Gap" not in r.stdout and "Running with tracing" not in r.stdout
    for s in specs:  # the subblock the tool read is the one ttnn picks (largest that divides the block, <= 4)
        h, w = ttnn_subblock(int(s.cfg.per_core_M), int(s.cfg.per_core_N))
        assert h * w >= 2 and f"output subblock {h}x{w}" in advice


def test_tt_perf_report_reads_the_notes_tables(notes_csv, tmp_path):
    """Default-heuristic and tuned configs, fused SiLU, all attention variants."""
    path, ops = notes_csv
    out = tt_perf_report(path, tmp_path)
    assert len(out) == len(ops)
    check_matmul_rows(out, blackhole("p150a"), [(r.spec, r.target) for r in ops if isinstance(r.spec, MatmulSpec)])
    assert not math.isnan(sum(float(r["Device Time"]) for r in out))
