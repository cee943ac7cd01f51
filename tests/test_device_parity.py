"""``python -m device.parity``: the no-chip path, the emulation run's files, the report section,
and the chip run itself (``blackhole`` marker: skipped here, with the reason)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import jax
import pytest

from device import parity
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
    # the eager stack: 2 layers x (19 ops + 4 zero-copy views around the decode attention) + the final norm
    assert len(rows) == res["csv_rows"] == 2 * 23 + 1
    assert [r["OP CODE"] for r in rows[:3]] == ["rms_norm", "linear", "nlp_create_qkv_heads"]
    assert rows[1]["INPUT_1_DATATYPE"] == "BFLOAT8_B" and rows[0]["TAG"] == "layer 0"
    assert all(r["DEVICE KERNEL DURATION [ns]"] == "" and r["HOST DURATION [ns]"] == "" for r in rows)


def test_report_section_contract(tmp_path):
    sec = parity.report_section(tmp_path, quick=True, overrides={"blackhole.dram_peak_bytes_per_s": 1.0})
    assert set(sec) == {"markdown", "results", "figures"} and sec["figures"] == ["device_parity_layers.png"]
    assert (tmp_path / "device_parity_layers.png").read_bytes().startswith(b"\x89PNG")
    assert f"]({sec['figures'][0]})" in sec["markdown"]
    json.dumps(sec["results"])
    assert "Chip run:" in sec["markdown"] and "| layer 1 |" in sec["markdown"]
    if NO_CHIP is not None:
        assert "skipped" in sec["markdown"]


@pytest.mark.blackhole
@pytest.mark.skipif(NO_CHIP is not None, reason=f"needs a Blackhole chip: {NO_CHIP}")
def test_chip_parity(tmp_path):
    assert parity.main(["--preset", "alpamayo_tt", "--num-layers", "4", "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "parity.json").read_text())
    assert all(x["vs_fp32"]["pcc"] >= 0.9999 for x in res["layers"]), res["layers"]
    assert res["traced_vs_eager_max_abs"] == 0.0


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
    (lambda t: ["--out", str(t / "file.txt")], r"--out='.*file.txt' is an existing file; expected a directory"),
    (lambda t: ["--checkpoint", str(t / "missing.safetensors")], r"--checkpoint='.*missing.safetensors': no such file"),
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
    with pytest.raises(SystemExit) as e:
        parity.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and "error: " in err and re.search(message, err), err
    assert "Traceback" not in err and not (tmp_path / "parity_out").exists()
    assert (tmp_path / "file.txt").read_text() == "keep"
