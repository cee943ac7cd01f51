"""The AHBM model is never faster than any resource allows: on random hardware (the GEMM, MATH,
HBM, link rates and the CPU issue cost 0.25-16x of the defaults) and random cases / knobs, the
latency is >= the roofline (busy time on the critical PE / link) of every resource. The oracle is
the rooflines themselves: each is a sum of one resource's work at its rate, which no schedule
can beat."""

import dataclasses
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import evaluate
from costmodel.ahbm.sim_check import base_hardware, scaled

MULT = st.floats(0.25, 16.0)


@st.composite
def points(draw):
    mult = {g: draw(MULT) for g in ("gemm", "math", "hbm", "links")}
    issue = draw(st.sampled_from([0.0, 1e-9])) * draw(MULT)  # 0 (the default) or 0.25-16 ns per primitive op
    hw = scaled(base_hardware(), mult, issue)
    case = draw(st.sampled_from(["decode", "decode_sp", "prefill", "prefill_sp"]))
    S = draw(st.integers(64, 200_000))
    pipe = draw(st.sampled_from(["opt1", "opt2", "opt3"]))
    B = draw(st.sampled_from([1, 3]))
    if case == "decode":
        cfg = AhbmConfig("decode", S, batch=B, tile=draw(st.sampled_from([32, 64, 256, 1024])), pipeline=pipe)
    elif case == "decode_sp":
        cfg = AhbmConfig("decode_sp", S, batch=B, tile=draw(st.sampled_from([64, 512])),
                         cubes=draw(st.sampled_from([1, 2, 8])), pes=draw(st.sampled_from([1, 4, 8])), pipeline=pipe,
                         placement=draw(st.sampled_from(["round_robin", "contiguous"])))
    elif case == "prefill":
        cfg = AhbmConfig("prefill", min(S, 20_000), batch=B, tile=32, pipeline=pipe)
    else:
        cfg = AhbmConfig("prefill_sp", max(min(S, 50_000), 8), tile=draw(st.sampled_from([32, 64])), cubes=8,
                         pes=draw(st.sampled_from([2, 8])), pipeline=pipe)
    return hw, cfg


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(points())
def test_latency_is_at_least_every_resources_roofline(point):
    hw, cfg = point
    try:
        r = evaluate(cfg, hw)
    except ValueError as e:  # infeasible (TCM): nothing to bound
        assert "tcm" in str(e) or "sips" in str(e), e
        return
    lat = r["latency_us"]
    assert math.isfinite(lat) and lat > 0
    below = {k: v for k, v in r["rooflines_us"].items() if v > lat * (1 + 1e-5)}
    assert not below, f"{cfg}: latency {lat:.4g} us below the rooflines {below}"
    assert r["bound_fraction"] <= 1 + 1e-5


def test_bound_fraction_is_at_most_one_when_hbm_bound():
    """At 8x the assumed GEMM rate long decode is HBM-bound: the bound's roofline is at most the
    latency (a fraction of 1.32 meant the model was faster than the HBM could stream the KV)."""
    hw = base_hardware()
    fast = evaluate(AhbmConfig("decode", 1 << 17, tile=512),
                    dataclasses.replace(hw, gemm_flops_per_cycle_per_pe=8 * hw.gemm_flops_per_cycle_per_pe))
    assert fast["bound"] == "hbm"
    assert 0.5 < fast["bound_fraction"] <= 1 + 1e-6
    assert fast["latency_us"] >= fast["rooflines_us"]["hbm"] == pytest.approx(
        1e6 * (2 * (1 << 17) * 128 * 2 + 2 * 8 * 128 * 2) / (256e9 * 0.8), rel=1e-5)


def test_elasticities_follow_placement_and_mesh():
    """The GEMM elasticity of a contiguous-placement decode-SP config is the one of its own graph:
    a finite difference of the evaluator (the oracle) at +-1% GEMM rate, not the round-robin
    graph's (-0.27 was reported where the contiguous placement's is about -0.65)."""
    from costmodel.ahbm.sensitivity import elasticities

    hw = base_hardware()
    cfg = AhbmConfig("decode_sp", 3000, tile=512, cubes=8, pes=8, placement="contiguous", capacity=131072)
    f = "gemm_flops_per_cycle_per_pe"
    lat = [evaluate(cfg, dataclasses.replace(hw, **{f: float(getattr(hw, f)) * k}))["latency_us"]
           for k in (0.99, 1.01)]
    fd = (math.log(lat[1]) - math.log(lat[0])) / (math.log(1.01) - math.log(0.99))
    got = elasticities(cfg, hw)[f]
    assert got == pytest.approx(fd, abs=0.03), (got, fd)
    rr = elasticities(cfg.replace(placement="round_robin", capacity=None), hw)[f]
    assert abs(rr - got) > 0.1  # the two placements bind differently here


def test_more_query_tokens_pack_into_the_engine_tile_and_match_the_simulation():
    """Decode M-folds G = 8 heads into 32-row engine tiles: T = 4 query tokens per step fill that
    padding (nearly free: the GEMM work is the same padded tile, only MATH and the output grow),
    while B = 4 requests cost ~4x (their KV differ). Oracle: the event simulation at T = 4."""
    from costmodel.ahbm.simulate import simulate

    hw = base_hardware()
    one = evaluate(AhbmConfig("decode", 8192, tile=256), hw)["latency_us"]
    t4 = AhbmConfig("decode", 8192, tile=256, queries=4)
    four = evaluate(t4, hw)["latency_us"]
    b4 = evaluate(AhbmConfig("decode", 8192, tile=256, batch=4), hw)["latency_us"]
    assert four < 1.25 * one and b4 > 3.5 * one, (one, four, b4)
    assert four == pytest.approx(simulate(t4, hw)["latency_us"], rel=0.10)
    sp = AhbmConfig("decode_sp", 8193, tile=128, cubes=4, pes=8, queries=3)
    assert evaluate(sp, hw)["latency_us"] == pytest.approx(simulate(sp, hw)["latency_us"], rel=0.10)
    with pytest.raises(ValueError, match="queries=2 applies to decode only"):
        AhbmConfig("prefill", 1000, tile=32, queries=2)
