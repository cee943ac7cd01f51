"""``python -m device.parity``: the no-chip path, the emulation run's files, the report section,
and the chip run itself (``blackhole`` marker: skipped here, with the reason)."""

from __future__ import annotations

import csv
import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest
from _report_util import check_matmul_rows, records, traced_gap_median_ns, tt_perf_report

from device import parity
from device.emulation import Emulation
from experiments.report.render import SectionResult
from experiments.report.sections import device_parity
from jaxref.config import ExpertConfig
from jaxref.weights import init_params, save_safetensors

ROOT = Path(__file__).resolve().parents[1]
NO_CHIP = parity.chip_status()


@pytest.mark.skipif(NO_CHIP is None, reason="a device is visible: the no-chip path cannot be exercised")
def test_no_chip_says_so_exits_nonzero_and_prints_no_numbers(tmp_path):
    r = subprocess.run([sys.executable, "-m", "device.parity", "--preset", "tiny", "--out", str(tmp_path / "o")],
                       check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "no Blackhole chip" in r.stderr and "--backend emulation" in r.stderr
    assert r.stdout == ""
    assert not re.search(r"\d\.\d|PCC|max-abs", r.stdout + r.stderr), r.stderr
    assert not (tmp_path / "o").exists()


def test_emulation_run_writes_json_markdown_and_op_csv(tmp_path):
    """From an HF-format checkpoint (device weights straight from its keys), as a chip run would."""
    cfg = ExpertConfig.tiny(head_dim=32)
    save_safetensors(tmp_path / "expert.safetensors", init_params(jax.random.PRNGKey(5), cfg), cfg,
                     expert_prefix="expert.")
    out = tmp_path / "o"
    assert parity.main(["--backend", "emulation", "--preset", "tiny", "--no-sample", "--layers", "0,1",
                        "--checkpoint", str(tmp_path / "expert.safetensors"), "--expert-prefix", "expert.",
                        "--out", str(out)]) == 0
    res = json.loads((out / "parity.json").read_text())
    assert res["backend"] == "emulation" and [x["layer"] for x in res["layers"]] == [0, 1]
    assert all(x["vs_fp32"]["pcc"] >= 0.9999 for x in res["layers"])
    assert res["traced_vs_eager_max_abs"] == 0.0
    assert "trace_replay_ms" not in res  # no device timing without a device
    assert "| layer 0 |" in (out / "parity.md").read_text()
    rows = list(csv.DictReader((out / "ops.csv").open()))
    # the eager stack as a profiler report: 2 layers x 19 device ops + the final norm (views have no row)
    assert len(rows) == res["csv_rows"] == 2 * 19 + 1
    assert [r["OP CODE"] for r in rows[:3]] == ["LayerNormDeviceOperation", "MatmulDeviceOperation",
                                                 "NlpCreateHeadsDeviceOperation"]
    qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
    assert rows[1]["INPUT_1_DATATYPE"] == "BFLOAT8_B" and rows[1]["OUTPUT_0_X_PAD[LOGICAL]"] == f"{qkv}[{qkv}]"
    assert {r["DEVICE ID"] for r in rows} == {"0"} and {r["DEVICE ARCH"] for r in rows} == {"blackhole"}
    # emulation: durations are the cost model's (said so in parity.json), never a measurement
    assert res["csv_durations"] == "cost model (not measured)"
    assert all(float(r["DEVICE KERNEL DURATION [ns]"]) > 0 for r in rows)


def test_emulation_op_report_round_trips_and_tt_perf_report_reads_it(tmp_path):
    """The parity CSV read back by calibrate's reader gives the cost model's own layer op specs for
    the same port (graph config, geometry), and tt-perf-report reads it: DRAM / FLOP % per matmul."""
    from costmodel.blackhole import BlackholeConfig, layer_op_specs
    from costmodel.blackhole.opspecs import MatmulSpec, NormSpec
    from costmodel.blackhole.port import Port
    from costmodel.blackhole.report_reader import MODELLED, read_report
    from costmodel.hardware import blackhole

    out = tmp_path / "o"
    assert parity.main(["--backend", "emulation", "--preset", "tiny", "--no-sample", "--layers", "0",
                        "--out", str(out)]) == 0
    cfg = ExpertConfig.tiny(head_dim=32)
    bc = BlackholeConfig(port=Port.for_expert(cfg), smax=float(cfg.max_seq_len), seq_len=100.0)
    model = list(layer_op_specs(bc, cfg=cfg).values())
    report = read_report(out / "ops.csv")
    assert all(r.status == MODELLED for r in report.rows), report.summary()
    specs = [r.spec for r in report.rows]
    # The twin hands the port's compute kernel config (fp32_dest_acc_en on) to its norms and the CSV
    # says so; the cost model prices the port's norms with bf16 intermediates, the form its measured
    # port tables fit (tests/test_costmodel_fit.py). That one field is the known gap, asserted as such.
    fp32 = bc.port.compute.fp32_dest_acc_en
    assert fp32 and all(s.fp32_dest_acc for s in specs if isinstance(s, NormSpec))
    specs = [dataclasses.replace(s, fp32_dest_acc=False) if isinstance(s, NormSpec) else s for s in specs]
    final = NormSpec(cfg.num_tokens, cfg.hidden, fidelity=bc.port.compute.fidelity)
    assert specs == model * cfg.num_layers + [final]
    # durations supplied by the model: each row's is its spec's modelled time
    back = tt_perf_report(out / "ops.csv", tmp_path)
    assert len(back) == len(specs)
    # the port's step runs traced: every row after the first carries the real traced windows' median
    # gap, the first 0 (a device's first op); the tool's op-to-op gap (us) is what was written
    gaps = [r["OP TO OP LATENCY [ns]"] for r in records(out / "ops.csv")]
    assert gaps[0] == "0" and [float(g) for g in gaps[1:]] == [traced_gap_median_ns()] * (len(gaps) - 1)
    assert back[0]["Op-to-Op Gap"] == ""
    assert [float(r["Op-to-Op Gap"]) * 1e3 for r in back[1:]] == pytest.approx([float(g) for g in gaps[1:]], rel=1e-12)
    check_matmul_rows(back, blackhole("p150a"), [(r.spec, r.duration_us) for r in report.rows
                                                 if isinstance(r.spec, MatmulSpec)])


def test_emulated_op_report_holds_kernel_only_times_and_refits_to_the_same_port(tmp_path, capsys):
    """DEVICE KERNEL DURATION holds the kernel only: each emulated row's duration is its spec's
    kernel-only price (not the traced per-op time with dispatch), so calibrating on the file moves the
    port's predicted step by < 1% (with dispatch written in, the launch constants absorbed it)."""
    from costmodel.blackhole.cli import main as costmodel_main
    from costmodel.blackhole.fit import load_calibration
    from costmodel.blackhole.opspecs import KernelSpec
    from costmodel.blackhole.report_reader import MODELLED, read_report

    out = tmp_path / "o"
    assert parity.main(["--backend", "emulation", "--preset", "tiny", "--no-sample", "--out", str(out)]) == 0
    report, params = read_report(out / "ops.csv"), load_calibration().params
    for r in report.rows:
        assert r.status == MODELLED
        assert r.duration_us == pytest.approx(float(KernelSpec(r.spec).us(report.hw, params)), rel=1e-4)
        assert r.duration_us < float(r.spec.us(report.hw, params))  # the traced time includes dispatch
    capsys.readouterr()
    costmodel_main(["calibrate", "--ops-csv", str(out / "ops.csv"), "--out", str(tmp_path / "cal.json")])
    text = capsys.readouterr().out
    new, old = (float(x) for x in re.search(r"port step \(p150a\): ([\d.]+) ms with this calibration, ([\d.]+) ms",
                                             text).groups())
    assert abs(new / old - 1) < 0.01, text[-400:]


def test_report_section_contract(tmp_path):
    sec = device_parity.report_section(tmp_path, quick=True, overrides={"blackhole.dram_peak_bytes_per_s": 1.0})
    assert isinstance(sec, SectionResult) and sec.figures == ("device_parity_layers.png",)
    assert (tmp_path / "device_parity_layers.png").read_bytes().startswith(b"\x89PNG")
    assert f"]({sec.figures[0]})" in sec.markdown
    json.dumps(sec.results)
    assert "Chip run:" in sec.markdown and "| layer 1 |" in sec.markdown
    # the quick section holds the teacher-forced per-step table of the 10-step sample, the baseline
    # column next to it, and the rolled-layer caveat of the random model
    steps = sec.results["runs"][0]["sample"]["steps"]
    assert [x["step"] for x in steps] == list(range(10))
    assert all(x["teacher_forced"]["pass"] for x in steps), steps
    golden_self = sec.results["runs"][0]["golden_self"]  # the fp32 golden agrees with itself
    assert golden_self["pass"] and golden_self["pcc"] > 1 - 1e-6
    assert "fp32 golden vs itself" in sec.markdown
    assert "teacher-forced PCC" in sec.markdown and "golden baseline PCC" in sec.markdown
    assert "| 9 | 0.9 |" in sec.markdown and "rolled by layer-dependent shifts" in sec.markdown
    if NO_CHIP is not None:
        assert "skipped" in sec.markdown


@pytest.mark.blackhole
@pytest.mark.skipif(NO_CHIP is not None, reason=f"needs a Blackhole chip: {NO_CHIP}")
def test_chip_parity(tmp_path):
    assert parity.main(["--preset", "alpamayo_tt", "--num-layers", "4", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "parity.json").read_text())
    assert all(x["vs_fp32"]["pcc"] >= 0.9999 for x in res["layers"]), res["layers"]
    assert res["traced_vs_eager_max_abs"] == 0.0


@pytest.mark.blackhole
@pytest.mark.skipif(NO_CHIP is not None, reason=f"needs a Blackhole chip: {NO_CHIP}")
def test_chip_op_report_carries_measured_durations_into_calibrate(tmp_path, monkeypatch):
    """On a chip with the device profiler on, ops.csv carries ttnn's measured kernel durations and
    goes straight into calibrate --ops-csv."""
    from costmodel.blackhole.cli import main as costmodel_main
    from costmodel.blackhole.report_reader import MODELLED, read_report

    monkeypatch.setenv("TT_METAL_DEVICE_PROFILER", "1")
    assert parity.main(["--preset", "alpamayo_tt", "--num-layers", "2", "--no-sample", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "parity.json").read_text())
    assert res["csv_durations"] == "device profiler"
    report = read_report(tmp_path / "ops.csv")
    assert all(r.duration_us > 0 for r in report.rows if r.status == MODELLED)
    costmodel_main(["calibrate", "--ops-csv", str(tmp_path / "ops.csv"), "--out", str(tmp_path / "cal.json")])


def _ckpt(tmp_path, **geometry):
    cfg = ExpertConfig.tiny(head_dim=32, **geometry)
    path = tmp_path / "ckpt.safetensors"
    save_safetensors(path, init_params(jax.random.PRNGKey(1), cfg), cfg)
    return path


def _truncated(tmp_path):
    path = _ckpt(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


@pytest.mark.parametrize("make_argv,message", [
    (lambda t: ["--preset", "huge"], r"--preset: preset='huge' unknown; expected one of"),
    (lambda t: ["--layers", "99"], r"--layers='99': entries \[99\] outside \[0, 2\)"),
    (lambda t: ["--layers", "a,b"], r"--layers='a,b' must be comma-separated layer indices"),
    (lambda t: ["--seq-len", "-1"], r"--seq-len: seq_len=-1 must satisfy 0 <= seq_len"),
    (lambda t: ["--num-layers", "0"], r"--num-layers=0 must be >= 1"),
    (lambda t: ["--out", str(t / "file.txt")], r"argument --out: '.*file.txt' is an existing file; expected a folder"),
    (lambda t: ["--checkpoint", str(t / "missing.safetensors")], r"--checkpoint='.*missing.safetensors': no such file"),
    (lambda t: ["--checkpoint", str(t)], r"--checkpoint='.*' is a folder; expected an HF-format .safetensors file"),
    (lambda t: ["--checkpoint", str(_truncated(t))], r"--checkpoint='.*' is not a readable safetensors file"),
    (lambda t: ["--checkpoint", str(_ckpt(t, hidden=96))],
     r"'layers.0.input_layernorm.weight' has shape \[96\], this geometry needs \[64\] \(19 tensors differ"),
    (lambda t: ["--checkpoint", str(_ckpt(t)), "--num-layers", "3"], r"lacks 11 of the 34 decoder tensors"),
])
def test_bad_arguments_exit_2_naming_argument_value_and_expectation(make_argv, message, tmp_path, monkeypatch, capsys):
    """Checked before anything runs (the emulation would take seconds; a chip run minutes), and
    nothing is written: no ./parity_out appears."""
    (tmp_path / "file.txt").write_text("keep")
    monkeypatch.chdir(tmp_path)
    argv = ["--backend", "emulation", "--preset", "tiny", *make_argv(tmp_path)]
    try:
        status = parity.main(argv)
    except SystemExit as e:  # argparse's own refusals
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and "error: " in err and re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "parity_out").exists()
    assert (tmp_path / "file.txt").read_text() == "keep"


def test_a_golden_that_disagrees_with_itself_fails_the_run(tmp_path, monkeypatch, capsys):
    """The fp32 golden computes v(x0, 0) twice (its layer-input stack, its sample's first step); a run
    where the two differ (here the stack's output is nudged by 1%, the size of the corruption seen under
    glibc malloc tunables) fails, naming the check. (Untouched, the two agree to float32 rounding:
    ``test_report_section_contract``'s run.)"""
    real = parity.expert_stack

    def nudged(*args, **kw):
        res = real(*args, **kw)
        if not kw.get("return_hidden"):
            return res
        h, hidden = res
        return h * (1 + 0.01 * jax.random.normal(jax.random.PRNGKey(3), h.shape)), hidden

    monkeypatch.setattr(parity, "expert_stack", nudged)
    out = tmp_path / "bad"
    assert parity.main(["--backend", "emulation", "--preset", "tiny", "--layers", "0", "--out", str(out)]) == 1
    res = json.loads((out / "parity.json").read_text())
    assert res["golden_self"]["pass"] is False
    assert any(f.startswith("golden_self: PCC") for f in res["failures"]), res["failures"]
    assert "fp32 golden vs itself" in (out / "parity.md").read_text()
    assert "golden_self" in capsys.readouterr().err


def test_passes_one_after_another_give_the_overlapped_numbers():
    """``run(overlap=False)`` (the benchmark's --one-at-a-time) and the default, where the golden and the
    op report run in threads beside the device's passes: every number equal, the sample's included (the
    threads share no array but the read-only model)."""
    p = parity.problem_from_args(parity.parse_args(["--backend", "emulation", "--preset", "tiny", "--num-layers", "1"]))
    out = {}
    for overlap in (True, False):
        ns = Emulation()
        dev = ns.open_device(0)
        out[overlap] = parity.run(p, ns, dev, backend="emulation", overlap=overlap)
    assert out[True]["sample"]["steps"] and out[True] == out[False]
