"""Every CLI: a bad argument, file or path is exit 2 with ``error: ...`` naming it, before any long computation."""

import dataclasses
import json
import os
import time

import pytest

from costmodel.blackhole import BlackholeConfig, evaluate, holdout
from costmodel.blackhole import cli as bh_cli
from costmodel.blackhole.discrepancy import load_discrepancy, write_discrepancy
from costmodel.blackhole.fit import load_calibration, write_calibration
from costmodel.blackhole.kinds.norm import NormSpec
from costmodel.blackhole.report_reader import write_csv
from costmodel.hardware import blackhole_p100a, blackhole_p150a
from experiments import ahbm_sim_check, bench_expert, bench_flash
from experiments.report import runner
from jaxref.config import ExpertConfig
from jaxref.validation import OutputError


def refused(main, argv, capsys) -> str:
    """Run ``main(argv)``; assert exit status 2 (returned, as ``jaxref.validation.cli_main`` does, or raised
    by argparse) and no traceback; return stderr."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "error: " in err and "Traceback" not in err
    return err


@pytest.mark.parametrize("main, argv, message", [
    (bench_flash.main, ["--tile", "0"], "argument --tile: 0: expected an integer >= 1"),
    (bench_flash.main, ["--sizes", "4096", "-3"], "argument --sizes: -3: expected an integer >= 1"),
    (bench_flash.main, ["--dense-max-gib", "nan"], "argument --dense-max-gib: 'nan': expected a finite number"),
    (bench_expert.main, ["--seq-len", "-5"], "argument --seq-len: -5: expected an integer >= 1"),
    (bench_expert.main, ["--seq-len", "9000"], "--seq-len: seq_len=9000"),
    (runner.main, ["--sections", "blackhole", "--set", "blackhole.bogus=1"],
     "'bogus' is not a field of costmodel.hardware.Blackhole"),
    (runner.main, ["--sections", "blackhole", "--set", "blackhole.clock_hz=-1"],
     "clock_hz=-1.0: expected a finite number in"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_experiment_clis_refuse_bad_numbers(main, argv, message, capsys):
    assert message in refused(main, argv, capsys)


@pytest.mark.parametrize("main", [runner.main], ids=["report"])
def test_study_out_an_existing_file_is_refused(main, tmp_path, capsys):
    target = tmp_path / "results.txt"
    target.write_text("keep")
    assert "is an existing file; expected a folder" in refused(main, ["--out", str(target)], capsys)
    assert target.read_text() == "keep"


@pytest.mark.parametrize("argv, message", [
    (["--emit-csv", "{tmp}"], "argument --emit-csv: '{tmp}' is a folder; expected a file name"),
    (["--emit-csv", "{tmp}/missing/ops.csv"], "folder '{tmp}/missing' does not exist"),
    (["--preset", "tiny", "--matmuls", "default", "--seq-len", "100"],
     "head_dim=16 of the expert geometry: expected a multiple of the 32-element tile"),
    (["--smax", "10000000"], ("smax=10000000: weights + KV cache of 64 layers need 2.62e+03 GB of DRAM; "
                              "expected <= dram_capacity_bytes=32 GB")),
    (["--set", "blackhole.dram_capacity_bytes=1e9"], "expected <= dram_capacity_bytes=1 GB"),
    (["--vs", "--calibration missing.json"], "--calibration configure the run, not the base setting"),
    (["--vs", "--json --draws 5 --emit-csv x.csv"], "--draws, --emit-csv, --json configure the run"),
    (["--set", "blackhole.bogus=1"], "'bogus' is not a field of costmodel.hardware.Blackhole"),
    (["--set", "blackhole.eth_bytes_per_s=1e9"], "is not modelled"),
    (["--set", "ahbm.pe_clock_hz=2e9"], "ahbm overrides would change nothing here"),
    (["--matmul-config", "w2=48,1", "--matmul-config", "w2=24,1"],
     "w2 is already set by --matmul-config w2=48,1; expected each matmul at most once"),
    (["--board", "p200"], "argument --board: invalid choice: 'p200'"),
    (["--draws", "-1"], "argument --draws: -1: expected an integer >= 0"),
    (["--seq-len", "0"], "argument --seq-len: 0: expected an integer >= 1"),
])
def test_blackhole_cli_refuses_before_computing(argv, message, tmp_path, capsys):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    t0 = time.perf_counter()
    err = refused(bh_cli.main, argv, capsys)
    assert message.replace("{tmp}", str(tmp_path)) in err
    assert time.perf_counter() - t0 < 20  # refused at entry, not after the intervals (about 30 s)


def test_blackhole_deprecated_hw_is_the_board(capsys):
    old = bh_cli.main(["--hw", "p100a", "--json"])
    captured = capsys.readouterr()
    assert "deprecated" in captured.err
    assert json.loads(captured.out, parse_constant=pytest.fail) == old  # strict JSON
    cfg, cal = ExpertConfig.alpamayo_tt(), load_calibration()
    want = evaluate(blackhole_p100a(), cal.params, BlackholeConfig.for_expert(cfg), cfg=cfg)
    assert old["setting"]["hw"] == "p100a" and old["step_ms"] == pytest.approx(want["step_ms"], rel=1e-6)


def test_blackhole_set_is_applied_and_shown_in_the_setting(capsys):
    got = bh_cli.main(["--set", "blackhole.dram_peak_bytes_per_s=448e9", "--json"])
    capsys.readouterr()
    cfg, cal = ExpertConfig.alpamayo_tt(), load_calibration()
    hw = dataclasses.replace(blackhole_p150a(), dram_peak_bytes_per_s=448e9)
    want = evaluate(hw, cal.params, BlackholeConfig.for_expert(cfg), cfg=cfg)
    assert got["step_ms"] == pytest.approx(want["step_ms"], rel=1e-6)
    assert got["setting"]["hw_overrides"] == {"blackhole.dram_peak_bytes_per_s": 448e9}


@pytest.mark.parametrize("argv, message", [
    (["--out", "/proc/discrepancy.json"], "argument --out: '/proc/discrepancy.json': folder '/proc' cannot be written"),
    (["--out", "{tmp}"], "argument --out: '{tmp}' is a folder; expected a file name"),
    (["--write", "--out", "{tmp}/d.json"], "--write (writes "),
], ids=["unwritable", "folder", "two-outputs"])
def test_validate_refuses_its_output_before_the_refits(argv, message, tmp_path, capsys, monkeypatch):
    """``validate`` takes about a minute of refits: an output it cannot write is refused first."""
    monkeypatch.setattr(holdout, "validate_rows", lambda *a, **k: pytest.fail("refits ran before the refusal"))
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert message.replace("{tmp}", str(tmp_path)) in refused(bh_cli.main, ["validate", *argv], capsys)


@pytest.mark.parametrize("writer", ["discrepancy", "calibration"])
def test_stored_model_files_are_replaced_whole_or_not_at_all(writer, tmp_path, monkeypatch):
    """The stored calibration and discrepancy are rewritten atomically: a write that fails part-way
    (here: the rename onto the old file) leaves the old file as it was and no stray file beside it."""
    target = tmp_path / f"{writer}.json"
    target.write_text("old")
    write = ((lambda: write_discrepancy(load_discrepancy(), target)) if writer == "discrepancy"
             else (lambda: write_calibration(load_calibration(), [], target)))

    def fail(*a, **k):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", fail)
        with pytest.raises(OutputError, match="No space left on device"):
            write()
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    write()  # and a write that succeeds replaces it with the whole document, which loads back the same
    load = load_discrepancy if writer == "discrepancy" else load_calibration
    assert load(target).to_json() == load().to_json()


def test_sim_check_refuses_its_json_output_before_simulating(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(ahbm_sim_check, "compare", lambda *a, **k: pytest.fail("simulated before the refusal"))
    err = refused(ahbm_sim_check.main, ["--quick", "--json", str(tmp_path)], capsys)
    assert f"argument --json: '{tmp_path}' is a folder; expected a file name" in err


def test_written_op_report_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """``write_report`` (``--emit-csv``, the parity run's ops.csv): a failed write keeps the old file."""
    target = tmp_path / "ops.csv"
    target.write_text("old")
    entries = [(NormSpec(64, 1536), 17.3)]
    with monkeypatch.context() as m:
        m.setattr(os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError(28, "No space left on device")))
        with pytest.raises(OutputError, match="No space left on device"):
            write_csv(target, entries)
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["ops.csv"]
    write_csv(target, entries)
    assert target.read_text().startswith("OP CODE,") and "LayerNormDeviceOperation" in target.read_text()
