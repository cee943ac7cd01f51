"""The what-if CLI: JSON output, consistency with the evaluator, clear errors on bad input."""

import json
import subprocess
import sys

import pytest

from costmodel.blackhole import LAYER_OPS, BlackholeConfig, evaluate, load_fitted
from costmodel.blackhole.cli import main
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

ISSUE_EXAMPLE = ["--smax", "5120", "--seq-len", "4700", "--kv-dtype", "bfp8", "--weight-dtype", "bfp8",
                 "--attn-mode", "decode", "--k-chunk", "128", "--json"]


def test_json_output_matches_evaluator(capsys):
    result = main(ISSUE_EXAMPLE)
    printed = json.loads(capsys.readouterr().out)
    assert list(printed["per_op_us"]) == list(LAYER_OPS) and "attention" in printed["per_op_us"]
    cfg = ExpertConfig.alpamayo_tt()
    ref = evaluate(blackhole_p150a(), load_fitted(), BlackholeConfig.for_expert(cfg, smax=5120.0, cache="bfp8"), cfg=cfg)
    assert printed["step_ms"] == pytest.approx(ref["step_ms"]) and printed["sample_ms"] == pytest.approx(ref["sample_ms"])
    assert printed["per_op_us"] == pytest.approx(ref["per_op_us"])
    assert result["setting"]["cache"] == "bfp8" and printed["setting"]["smax"] == 5120


def test_standard_mode_flags(capsys):
    main(["--attn-mode", "standard", "--q-chunk", "64", "--fold-heads", "--json"])
    printed = json.loads(capsys.readouterr().out)
    cfg = ExpertConfig.alpamayo_tt()
    bc = BlackholeConfig.for_expert(cfg, attn_mode="standard", fold_heads=True, mask="bf16", q_chunk=64.0)
    assert printed["per_op_us"]["attention"] == pytest.approx(
        evaluate(blackhole_p150a(), load_fitted(), bc, cfg=cfg)["per_op_us"]["attention"])
    assert printed["setting"]["fold_heads"] is True and printed["setting"]["mask"] == "bf16"


@pytest.mark.parametrize("argv,message", [
    (["--matmul-config", "wqkv=8,1"], "ceil(128/1) = 128 cores exceeds the 11x10 grid"),
    (["--grid", "8x8"], "exceeds the 8x8 grid"),
    (["--k-chunk", "100"], "k_chunk=100 must be a multiple of 32"),
    (["--attn-mode", "standard", "--q-chunk", "48"], "q_chunk=48 must be a multiple of 32"),
    (["--smax", "4736"], "smax=4736 must be >= seq_len + num_tokens = 4700 + 64"),
    (["--kv-dtype", "fp8"], "argument --kv-dtype: invalid choice: 'fp8'"),
    (["--weight-dtype", "int4"], "argument --weight-dtype: invalid choice: 'int4'"),
    (["--matmul-config", "w9=1,1"], "matmul-config='w9=1,1' must look like"),
])
def test_bad_input_exits_with_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_module_entry_point():
    ok = subprocess.run([sys.executable, "-m", "costmodel.blackhole", *ISSUE_EXAMPLE], capture_output=True,
                        text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["per_op_us"]["attention"] > 0
    bad = subprocess.run([sys.executable, "-m", "costmodel.blackhole", "--k-chunk", "100"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "k_chunk=100 must be a multiple of 32" in bad.stderr


def test_json_keeps_its_keys_and_adds_intervals(capsys):
    main(ISSUE_EXAMPLE)
    printed = json.loads(capsys.readouterr().out)
    for key in ("per_op_us", "layer_us", "layer_trace_us", "step_ms", "step_full_ms", "sample_ms", "setting"):
        assert key in printed
    assert set(printed["interval_us"]) == {*LAYER_OPS, "layer_us"}
    for op, t in printed["per_op_us"].items():
        lo, hi = printed["interval_us"][op]
        assert lo < t < hi
    for key in ("step_ms", "step_full_ms", "sample_ms"):
        lo, hi = printed["interval_ms"][key]
        assert lo < printed[key] < hi


@pytest.mark.parametrize("argv,base,changed", [
    (["--smax", "5120"], "", "attention"),
    (["--kv-dtype", "bfp8"], "--kv-dtype bf16", "attention"),
])
def test_vs_prints_a_delta_with_its_interval(argv, base, changed, capsys):
    result = main([*argv, "--vs", base, "--json"])
    printed = json.loads(capsys.readouterr().out)
    ref = main(["--json"])
    capsys.readouterr()
    vs = printed["vs"]
    assert vs["setting"]["smax"] == 8192 and vs["setting"]["cache"] == "bf16"
    assert vs["delta_ms"]["step_ms"] == pytest.approx(result["step_ms"] - ref["step_ms"], rel=1e-5)
    lo, hi = vs["delta_interval_ms"]["step_ms"]
    assert lo < vs["delta_ms"]["step_ms"] < hi < 0
    assert vs["delta_us"][changed] < 0 and vs["delta_us"]["wqkv"] == 0.0


def test_vs_text_output_and_bad_base(capsys):
    main(["--smax", "5120", "--vs"])
    out = capsys.readouterr().out
    assert "delta vs the base setting" in out and "step_ms" in out and "90% interval" in out
    with pytest.raises(SystemExit):
        main(["--vs", "--smax 96"])
    assert "vs='--smax 96': smax=96 must be >= seq_len + num_tokens" in capsys.readouterr().err
