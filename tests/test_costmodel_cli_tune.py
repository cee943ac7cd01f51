"""``python -m costmodel.blackhole tune``: gradient tuning from a what-if setting against a
brute-force search, and clear errors on bad input."""

import dataclasses

import pytest

from costmodel.blackhole import MATMULS, BlackholeConfig, evaluate, load_fitted
from costmodel.blackhole.cli import main
from costmodel.blackhole.knob_search import valid_matmul_configs
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig


def test_tune_from_the_flags_setting_reaches_the_brute_force_optimum(capsys):
    """Start: ttnn's default matmul configs with a bfp8 cache (the what-if flags). Each matmul's exhaustive
    choice is the best of every valid config evaluated one by one through the discrete evaluator, and the
    gradient result is no better than it."""
    res = main(["tune", "--matmuls", "default", "--kv-dtype", "bfp8", "--steps", "60"])
    out = capsys.readouterr().out
    cfg, hw, fit = ExpertConfig.alpamayo_tt(), blackhole_p150a(), load_fitted()
    start = BlackholeConfig.for_expert(cfg, matmuls="default", cache="bfp8")
    assert res["step_ms"]["start"] == pytest.approx(evaluate(hw, fit, start, cfg=cfg)["step_ms"])
    name = MATMULS[1]  # wo: one op brute-forced here (all five would cost seconds)
    mms = start.port.matmuls

    def tried(a, b):
        return start.replace(matmuls=mms.replace(**{name: dataclasses.replace(mms[name], in0_block_w=float(a),
                                                                             per_core_N=float(b))}))

    best = min(evaluate(hw, fit, tried(a, b), cfg=cfg)["per_op_us"][name]
               for a, b in valid_matmul_configs(name, hw, start, cfg=cfg))
    assert res["exhaustive"]["per_op"][name]["us"] == pytest.approx(best, rel=1e-5)
    assert res["step_ms"]["exhaustive"] <= res["step_ms"]["gradient"] * (1 + 1e-6)
    assert res["step_ms"]["exhaustive"] < res["step_ms"]["start"]
    assert "gradient within" in out and name in out


@pytest.mark.parametrize("argv,message", [
    (["tune", "--steps", "0"], "argument --steps: 0: expected an integer >= 1"),
    (["tune", "--k-chunk", "100"], "k_chunk=100 must be a multiple of 32"),
    (["tune", "--vs", "--json"], "--vs, --json: what-if output flags, not used by tune"),
])
def test_bad_input_exits_2_with_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
