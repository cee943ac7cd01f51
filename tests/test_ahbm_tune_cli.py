"""AHBM tuner vs exhaustive search, elasticities, and the command line."""

import json
import subprocess
import sys

import pytest

from costmodel.ahbm import cli
from costmodel.ahbm.config import AhbmConfig, knob_space
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.sensitivity import elasticities, with_overrides
from costmodel.ahbm.simulate import simulate
from costmodel.ahbm.tune import exhaustive, tune, valid_configs
from costmodel.hardware import ahbm_sip, float_fields


@pytest.mark.parametrize("case,S", [("decode_sp", 1024), ("decode_sp", 1 << 20), ("decode", 1 << 15)])
def test_tuner_within_2pct_of_exhaustive_with_10x_fewer_evaluations(case, S):
    res = tune(case, S)
    best, lat, n = exhaustive(case, S)
    assert res.latency_us <= 1.02 * lat, (res.best, best)
    assert n >= 10 * res.evaluations
    # the exhaustive optimum is the minimum of the exact evaluator over every feasible config
    lats = []
    for cfg in valid_configs(case, S)[:: max(1, n // 12)]:
        try:
            lats.append(evaluate(cfg)["latency_us"])
        except ValueError:
            continue
    assert lat <= min(lats) * (1 + 1e-6)
    assert n == len(valid_configs(case, S)) == len(knob_space(case)["tile"]) * len(knob_space(case)["cubes"]) \
        * len(knob_space(case)["pes"]) * 3


def test_elasticities_cover_every_parameter_and_predict_small_changes():
    cfg = AhbmConfig("decode", 1 << 15, tile=128)
    e = elasticities(cfg)
    assert set(e) == set(float_fields(ahbm_sip()))
    # a parameter's elasticity predicts the latency change of a small change of it
    base = evaluate(cfg)["latency_us"]
    for name in ("dma_local_latency_s", "gemm_flops_per_cycle_per_pe", "pe_controller_bytes_per_s"):
        hw = with_overrides(ahbm_sip(), {f"ahbm.{name}": float(getattr(ahbm_sip(), name)) * 1.001})
        assert (evaluate(cfg, hw)["latency_us"] / base - 1) / 0.001 == pytest.approx(e[name], rel=0.02, abs=1e-3)


def test_cli_eval_json_and_simulate_in_process(capsys):
    rc = cli.main(["eval", "--case", "decode_sp", "--seq-len", "131072", "--batch", "1", "--tile", "128", "--cubes",
                   "8", "--pes", "8", "--pipeline", "opt3", "--simulate", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    # the CLI reports the event simulation of the same config (model vs simulation: test_ahbm_simulate*)
    cfg = AhbmConfig(**out["config"])
    assert out["simulated_latency_us"] == simulate(cfg, ahbm_sip())["latency_us"]
    assert {"sweep_us", "reduce_us", "io_us"} <= set(out["breakdown"])


@pytest.mark.parametrize("argv,match", [
    (["eval", "--case", "prefill", "--seq-len", "4096", "--tile", "256"], "tile=256 infeasible"),
    (["eval", "--case", "decode", "--seq-len", "4096", "--tile", "100"], "tile=100 must be a power of two"),
    (["eval", "--case", "decode_sp", "--seq-len", "-5"], "seq_len=-5 must be a positive int"),
    (["eval", "--case", "decode", "--seq-len", "64", "--hw", "warp_drive=3"], "names no AHBM field"),
])
def test_cli_clear_errors(argv, match, capsys):
    assert cli.main(argv) == 2
    assert match in capsys.readouterr().err


def test_cli_tune_json(capsys):
    assert cli.main(["tune", "--case", "decode_sp", "--seq-len", "1024", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["latency_us"] <= 1.02 * out["exhaustive"]["latency_us"]
    assert out["exhaustive"]["evaluations"] >= 10 * out["evaluations"]
    assert out["gradient_steps"] > 0


def test_module_entry_point_rejects_unknown_case():
    bad = subprocess.run([sys.executable, "-m", "costmodel.ahbm", "tune", "--case", "nope", "--seq-len", "1"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr
