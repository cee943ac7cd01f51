"""Plan search: legal, never-worse searched matmul configs (against a brute-force loop), P(reach)
against the linearised correlated delta, monotone in the target, and bad input rejected."""

import math

import pytest
from scipy import stats

from costmodel.blackhole import BlackholeConfig, fit
from costmodel.blackhole.cli import main
from costmodel.blackhole.graph import matmul_configs
from costmodel.blackhole.intervals import delta_intervals
from costmodel.blackhole.opspecs import MatmulSpec
from costmodel.blackhole.plans import (
    OPTIONS,
    PORT_PLAN,
    check_plan,
    plan_config,
    search,
    searched_matmul_configs,
)
from costmodel.blackhole.port import matmul_shapes
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.hardware import TILE, blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()


@pytest.fixture(scope="module")
def cal():
    return fit.load_calibration()


def test_searched_configs_are_the_brute_force_minimum(cal):
    got = searched_matmul_configs(HW, cal.params, CFG, weight_dtype="bfp8")
    port, default = matmul_configs(CFG, "tuned"), matmul_configs(CFG, "default")
    for name in ("wo", "w2"):  # an odd divisor set (K/32 = 64, 192) is enough; every legal config tried
        M, K, N = matmul_shapes(CFG)[name]
        best = math.inf
        for ibw in range(1, K // TILE + 1):
            for pcn in range(1, N // TILE + 1):
                c = MatmulProgramConfig(float(ibw), float(pcn), float(M // TILE))
                try:
                    c.validate(name, HW, M=M, K=K, N=N, weight_dtype="bfp8")
                except ValueError:
                    continue
                best = min(best, float(MatmulSpec(M, K, N, c, "bfp8").us(HW, cal.params)))
        t = float(MatmulSpec(M, K, N, got[name], "bfp8").us(HW, cal.params))
        assert t == pytest.approx(best, rel=1e-5)
        for ref in (port[name], default[name]):
            assert t <= float(MatmulSpec(M, K, N, ref, "bfp8").us(HW, cal.params)) + 1e-4


def test_plan_probabilities_against_the_linearised_delta(cal):
    opts = {**{k: (v,) for k, v in PORT_PLAN.items()}, "smax": ("8192", "5120")}
    res = {t: search(t, cal=cal, draws=128, options=opts) for t in (29.0, 30.0, 31.0, 40.0)}
    for t, r in res.items():
        port = next(p for p in r["plans"] if not p["changes"])
        assert port["interval_ms"] == pytest.approx([32.5, 32.5]) and port["p_reach"] == (1.0 if t >= 32.5 else 0.0)
    small = {t: next(p for p in r["plans"] if p["changes"] == {"smax": "5120"}) for t, r in res.items()}
    ps = [small[t]["p_reach"] for t in sorted(small)]
    assert ps == sorted(ps) and ps[-1] == 1.0  # monotone in the target
    bc = plan_config({**PORT_PLAN, "smax": "5120"}, HW, cal.params, CFG)
    d, lo, hi = delta_intervals(cal, HW, bc, BlackholeConfig.for_expert(CFG), cfg=CFG)["step_us"]
    sd = (hi - lo) / 2 / stats.norm.ppf(0.95)
    assert small[30.0]["step_ms"] - res[30.0]["port_step_ms"] == pytest.approx(d / 1e3, abs=0.02)
    for t in (29.0, 30.0, 31.0):
        p_lin = stats.norm.cdf((t * 1e3 - 32500.0 - d) / sd)
        assert small[t]["p_reach"] == pytest.approx(p_lin, abs=0.2), t


def test_bad_plans_and_targets_are_rejected(capsys):
    with pytest.raises(ValueError, match="plan cache='fp8' unknown"):
        check_plan({**PORT_PLAN, "cache": "fp8"})
    with pytest.raises(ValueError, match="missing or unknown"):
        check_plan({k: v for k, v in PORT_PLAN.items() if k != "smax"})
    with pytest.raises(ValueError, match="must include the port's value"):
        search(30.0, options={**OPTIONS, "smax": ("5120",)})
    with pytest.raises(ValueError, match="target_ms=nan"):
        search(float("nan"))
    with pytest.raises(SystemExit) as e:
        main(["plan", "--target-ms", "-3"])
    assert e.value.code == 2 and "target_ms=-3.0 must be a finite time > 0" in capsys.readouterr().err
