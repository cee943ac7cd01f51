"""AHBM tuner vs exhaustive search, elasticities, and the command line."""

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.ahbm import cli
from costmodel.ahbm.config import AhbmConfig, is_tile, knob_space
from costmodel.ahbm.model import evaluate, knobs_of, static_of
from costmodel.ahbm.sensitivity import elasticities
from costmodel.ahbm.tune import (
    allowed_pipelines,
    exhaustive,
    latency_and_margin,
    tune,
    valid_configs,
)
from costmodel.hardware import ahbm_sip, float_fields
from costmodel.overrides import apply_overrides

RAGGED_S = (1000, 3000, 50000, 777777)


def exact_latencies(cfgs: list[AhbmConfig], hw=None) -> np.ndarray:
    """[n] latency (us) of configs, inf where a constraint is violated: the model op by op (not
    compiled), one config at a time, as ``evaluate`` prices it (its own pipelining option only)."""
    hw = ahbm_sip() if hw is None else hw
    out = [latency_and_margin(hw, knobs_of(c), **static_of(c)) for c in cfgs]
    return np.array([float(lat) if float(margin) <= 0 else np.inf for lat, margin in out])


def _check_tuner(case, S, model="llama3_70b"):
    res = tune(case, S, model=model, method="descent")
    best, lat, n = exhaustive(case, S, model=model)
    assert res.latency_us <= 1.02 * lat, (res.best, best)
    assert n >= 10 * res.evaluations
    evaluate(res.best)  # legal: validates and satisfies every constraint
    # the exhaustive optimum is the minimum of the exact model over every feasible config (a sample)
    cfgs = valid_configs(case, S, model=model, pipelines=("opt1", "opt3"))
    lats = exact_latencies(cfgs[:: max(1, len(cfgs) // 12)])
    assert np.isfinite(lats).any() and lat <= np.min(lats) * (1 + 1e-5)
    return res


@pytest.mark.parametrize("S", RAGGED_S)
@pytest.mark.parametrize("case", ["decode", "decode_sp", "prefill"])
def test_tuner_within_2pct_of_exhaustive_with_10x_fewer_evaluations(case, S):
    _check_tuner(case, S)


@pytest.mark.parametrize("S", RAGGED_S[::3])
def test_ring_tuner_within_2pct_of_exhaustive(S):
    """prefill_sp on the 2-CUBE ring of the alpamayo geometry (the 8-CUBE Llama ring's relaxed
    graph compiles for a minute; the report's AHBM section runs it)."""
    _check_tuner("prefill_sp", S, model="alpamayo")


@settings(max_examples=6, deadline=None)
@given(case=st.sampled_from(["decode", "decode_sp", "prefill"]), S=st.integers(1, 500_000),
       B=st.integers(1, 4), placement=st.sampled_from(["round_robin", "contiguous"]))
def test_tuner_never_returns_an_illegal_config(case, S, B, placement):
    res = tune(case, S, batch=B, placement=placement if case == "decode_sp" else "round_robin", method="descent")
    assert is_tile(res.best.tile) and res.best.cubes in knob_space(case)["cubes"]
    evaluate(res.best)  # raises on any violated constraint
    assert res.best.pipeline != "opt2"  # ex_composite is not built in the default hardware


def test_tuner_names_the_excluding_constraint():
    tiny = dataclasses.replace(ahbm_sip(), tcm_bytes_per_pe=1024.0)
    with pytest.raises(ValueError, match=r"no legal config.*tcm: tile=\d+ infeasible"):
        tune("decode", 4096, hw=tiny, method="descent")
    with pytest.raises(ValueError, match=r"no feasible config.*tcm: tile=\d+ infeasible"):
        tune("decode", 4096, hw=tiny)  # auto: the exhaustive search names it too
    with pytest.raises(ValueError, match=r"batch=0 must be a positive int"):
        tune("decode", 4096, batch=0)


def test_opt2_only_where_ex_composite_is_built():
    built = dataclasses.replace(ahbm_sip(), commands=("composite", "ex_composite"))
    assert all(c.pipeline != "opt2" for c in valid_configs("decode", 3000, pipelines=allowed_pipelines(ahbm_sip())))
    assert any(c.pipeline == "opt2" for c in valid_configs("decode", 3000, pipelines=allowed_pipelines(built)))
    slow_cpu = dataclasses.replace(built, cpu_issue_s=100e-9)  # 11 primitive issues per tile under opt1 / opt3
    best, _, _ = exhaustive("decode", 3000, hw=slow_cpu)
    assert best.pipeline == "opt2"  # it wins where primitive issue is costly (2 issues per tile, no CPU wait)


def test_elasticities_cover_every_parameter_and_predict_small_changes():
    cfg = AhbmConfig("decode", 1 << 15, tile=128)
    e = elasticities(cfg)
    assert set(e) == set(float_fields(ahbm_sip()))
    # a parameter's elasticity predicts the latency change of a small change of it
    base = evaluate(cfg)["latency_us"]
    for name in ("dma_local_latency_s", "gemm_flops_per_cycle_per_pe", "pe_controller_bytes_per_s"):
        hw = apply_overrides(ahbm_sip(), {f"ahbm.{name}": float(getattr(ahbm_sip(), name)) * 1.001})
        assert (evaluate(cfg, hw)["latency_us"] / base - 1) / 0.001 == pytest.approx(e[name], rel=0.02, abs=1e-3)


def test_cli_eval_json_names_bound_and_rooflines(capsys):
    rc = cli.main(["eval", "--case", "decode_sp", "--seq-len", "131071", "--batch", "1", "--tile", "128", "--cubes",
                   "8", "--pes", "8", "--pipeline", "opt3", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert {"sweep_us", "reduce_us", "io_us"} <= set(out["breakdown"])
    assert set(out["rooflines_us"]) == {"hbm", "gemm", "math", "tcm", "cpu_issue", "links"}
    assert out["bound"] == max(out["rooflines_us"], key=out["rooflines_us"].get) == "gemm"
    # the GEMM roofline is the critical rank's 16 tiles x 2 GEMMs of 32 padded rows x 128 x 128 at 2048 GFLOP/s
    assert out["rooflines_us"]["gemm"] == pytest.approx(16 * 2 * 2 * 32 * 128 * 128 / 2.048e12 * 1e6, rel=1e-6)
    assert max(out["rooflines_us"].values()) <= out["latency_us"]


@pytest.mark.parametrize("argv,match", [
    (["eval", "--case", "prefill", "--seq-len", "4096", "--tile", "256"], "tile=256 infeasible"),
    (["eval", "--case", "decode", "--seq-len", "4096", "--tile", "100"], "tile=100 must be 32 or a multiple of 64"),
    (["tune", "--case", "decode", "--seq-len", "4096", "--batch", "0"], "argument --batch: 0: expected an integer >= 1"),
    (["eval", "--case", "decode", "--seq-len", "99999999999", "--simulate", "--set", "ahbm.hbm_bytes_per_cube=1e15"],
     "--simulate: seq_len=99999999999 (capacity None) with tile=128 is too large to simulate"),
    (["eval", "--case", "decode_sp", "--seq-len", "3000", "--placement", "contiguous", "--capacity", "20000000000",
      "--set", "ahbm.hbm_bytes_per_cube=1e15", "--simulate"], "capacity 20000000000) with tile=128 is too large"),
    (["eval", "--case", "decode_sp", "--seq-len", "9200000000000000000", "--cubes", "8", "--pes", "8"],
     "hbm_capacity: seq_len=9200000000000000000"),
    (["eval", "--case", "decode", "--seq-len", "64", "--reduce", "tree"], "--reduce has no effect on --case decode"),
    (["eval", "--case", "decode", "--seq-len", "64", "--placement", "contiguous", "--capacity", "128"],
     "--placement, --capacity has no effect on --case decode"),
    (["tune", "--case", "prefill_sp", "--seq-len", "64", "--reduce", "all_reduce"], "--reduce has no effect"),
    (["eval", "--case", "decode_sp", "--seq-len", "-5"], "argument --seq-len: -5: expected an integer >= 1"),
    (["eval", "--case", "decode", "--seq-len", "64", "--hw", "warp_drive=3"], "not a field of costmodel.hardware.AHBM"),
    (["eval", "--case", "decode", "--seq-len", "64", "--set", "blackhole.clock_hz=1.2e9"],
     "blackhole overrides would change nothing here"),
])
def test_cli_clear_errors(argv, match, capsys):
    assert cli.main(argv) == 2
    assert match in capsys.readouterr().err


def test_cli_tune_off_the_grid(capsys):
    """The issue's failures: decode_sp at S 3000 (an illegal projected tile) and prefill at S 3000
    / 50 (no feasible neighbour; a tile nobody gave)."""
    for case, S in (("decode_sp", 3000), ("prefill", 3000), ("prefill", 50)):
        assert cli.main(["tune", "--case", case, "--seq-len", str(S), "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["latency_us"] <= 1.02 * out["exhaustive"]["latency_us"]
        assert out["bound"] in out["rooflines_us"]


def test_cli_tune_json(capsys):
    assert cli.main(["tune", "--case", "decode_sp", "--seq-len", "1024", "--method", "descent", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["method"] == "descent"
    assert out["latency_us"] <= 1.02 * out["exhaustive"]["latency_us"]
    assert out["exhaustive"]["evaluations"] >= 10 * out["evaluations"]
    assert out["gradient_steps"] > 0


def test_module_entry_point_rejects_unknown_case():
    bad = subprocess.run([sys.executable, "-m", "costmodel.ahbm", "tune", "--case", "nope", "--seq-len", "1"],
                         check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "invalid choice: 'nope'" in bad.stderr


def test_cli_eval_text_says_attention_only(capsys):
    """The text output names what x layers means: attention alone, not the model's token time."""
    assert cli.main(["eval", "--case", "decode", "--seq-len", "4096"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("attention latency") and "of attention over the model's 80 layers" in first


@pytest.mark.parametrize("S,cap", [(3000, 1 << 17), (4097, 1 << 20), (65537, 1 << 20)])
def test_tuner_on_plateaus_is_exhaustive_and_takes_the_fewest_ranks(S, cap):
    """Contiguous placement with capacity >> S is flat in C and P (only frontier ranks hold keys):
    'auto' searches exhaustively (descent collapsed there, +41% .. +297%), and of the configs
    within TIE_REL of the best it takes the fewest ranks. Oracle: the exact model on every config
    with fewer ranks (``exact_latencies``; each must be slower than the tie margin)."""
    from costmodel.ahbm.tune import TIE_REL

    res = tune("decode_sp", S, placement="contiguous", capacity=cap)
    assert res.method == "exhaustive" and res.gradient_steps == 0
    fewer = [c for c in valid_configs("decode_sp", S, placement="contiguous", capacity=cap, pipelines=("opt3",))
             if c.ranks < res.best.ranks and c.tile in (64, 256, 1024, 4096)]
    if fewer:
        lats = exact_latencies(fewer)
        slower = lats > res.latency_us * (1 + TIE_REL)  # inf (infeasible) counts as slower
        assert slower.all(), [(c, lat) for c, lat, ok in zip(fewer, lats, slower) if not ok]
    assert evaluate(res.best)["latency_us"] == pytest.approx(res.latency_us, rel=1e-6)
