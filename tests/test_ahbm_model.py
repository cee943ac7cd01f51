"""AHBM kernel model: ADR properties, gradients vs differences (model vs event simulation: test_ahbm_simulate*)."""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import evaluate, knobs_of
from costmodel.hardware import ahbm_sip, float_fields
from costmodel.smooth import Relax

HW = ahbm_sip()
SLOW_HW = dataclasses.replace(HW, cpu_issue_s=20e-9, ucie_bytes_per_s=4e9)  # issue-bound, ring comm exposed

GRID = [
    AhbmConfig("decode", 8192, tile=64, pipeline="opt1"),
    AhbmConfig("decode", 8192, batch=2, tile=256, pipeline="opt2"),
    AhbmConfig("decode", 2048, tile=32, pipeline="opt3"),
    AhbmConfig("decode_sp", 65536, tile=128, cubes=8, pes=8, pipeline="opt3"),
    AhbmConfig("decode_sp", 4096, tile=32, cubes=4, pes=2, pipeline="opt2", reduce="all_to_all"),
    AhbmConfig("decode_sp", 1024, tile=64, cubes=16, pes=8, pipeline="opt1", reduce="all_reduce"),
    AhbmConfig("prefill", 1024, tile=64, pipeline="opt3"),
    AhbmConfig("prefill", 1024, tile=32, pipeline="opt2"),
    AhbmConfig("prefill_sp", 1024, tile=64, cubes=8, pes=4, pipeline="opt3"),
    AhbmConfig("prefill_sp", 1024, tile=32, cubes=8, pes=2, pipeline="opt2"),
    AhbmConfig("prefill_sp", 512, tile=64, cubes=2, pes=1, pipeline="opt1", model="alpamayo"),
]


@pytest.mark.parametrize("case,kw", [("decode", {}), ("decode_sp", {"cubes": 4, "pes": 8}), ("prefill", {}),
                                     ("prefill_sp", {"cubes": 8, "pes": 2})])
def test_latency_monotone_in_seq_len(case, kw):
    lats = [evaluate(AhbmConfig(case, 2**k, tile=64, **kw))["latency_us"] for k in range(10, 21, 2)]
    assert all(b > a for a, b in itertools.pairwise(lats)), lats


def test_causal_skip_roughly_halves_prefill_compute():
    on = evaluate(AhbmConfig("prefill", 8192, tile=64))["breakdown"]
    off = evaluate(AhbmConfig("prefill", 8192, tile=64, causal_skip=False))["breakdown"]
    n = 8192 // 64
    assert on["gemm_busy_us"] / off["gemm_busy_us"] == pytest.approx((n + 1) / (2 * n), rel=1e-5)
    assert 0.45 < on["sweep_us"] / off["sweep_us"] < 0.6


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(["decode", "decode_sp", "prefill"]), logS=st.integers(10, 20),
       logT=st.integers(5, 10), scale=st.lists(st.floats(0.25, 4.0), min_size=4, max_size=4),
       issue_ns=st.floats(0.0, 50.0))
def test_opt3_never_slower_than_opt1(case, logS, logT, scale, issue_ns):
    hw = dataclasses.replace(HW, pe_controller_bytes_per_s=HW.pe_controller_bytes_per_s * scale[0],
                             gemm_flops_per_cycle_per_pe=HW.gemm_flops_per_cycle_per_pe * scale[1],
                             math_elems_per_cycle_per_pe=HW.math_elems_per_cycle_per_pe * scale[2],
                             dma_local_latency_s=HW.dma_local_latency_s * scale[3], cpu_issue_s=issue_ns * 1e-9)
    kw = {"cubes": 4, "pes": 8} if case == "decode_sp" else {}
    tile = min(2**logT, 64) if case == "prefill" else 2**logT
    lat = {p: float(case_latency(hw, knobs_of(AhbmConfig(case, 2**logS, tile=tile, pipeline=p, **kw)),
                                 case=case)["total"]) for p in ("opt1", "opt3")}
    assert lat["opt3"] <= lat["opt1"] * (1 + 1e-6), lat


@pytest.mark.parametrize("S", [1024, 65536, 1048576])
@pytest.mark.parametrize("C,P", [(2, 8), (4, 4), (8, 2), (16, 8), (1, 8)])
def test_reduce_to_root_never_slower_than_fan_out(S, C, P):
    lat = {r: evaluate(AhbmConfig("decode_sp", S, tile=128, cubes=C, pes=P, reduce=r))["breakdown"]["reduce_us"]
           for r in ("tree", "all_to_all", "all_reduce")}
    assert lat["tree"] <= lat["all_to_all"] and lat["tree"] <= lat["all_reduce"], lat


def test_infeasible_tile_raises_clear_error():
    with pytest.raises(ValueError, match=r"tile=256 infeasible.*TCM"):
        evaluate(AhbmConfig("prefill", 4096, tile=256))
    with pytest.raises(ValueError, match=r"tile=48 must be a power of two"):
        AhbmConfig("decode", 4096, tile=48)
    with pytest.raises(ValueError, match=r"cubes=4 must equal the group size G=8"):
        AhbmConfig("prefill_sp", 4096, cubes=4)
    with pytest.raises(ValueError, match=r"case='decode' runs on one PE"):
        AhbmConfig("decode", 4096, cubes=2)
    with pytest.raises(ValueError, match=r"case='encode' unknown"):
        AhbmConfig("encode", 4096)


def _fd_check(f, x, names):
    """jax.grad of f at x (float64) vs central differences, skipping kinks (where the forward and
    backward differences disagree: a max or ceil switches inside the step)."""
    f = jax.jit(f)
    g = jax.grad(f)(x)
    f0 = float(f(x))
    checked = 0
    for i, name in enumerate(names):
        h = 1e-6 * float(x[i])
        e = jnp.zeros_like(x).at[i].set(h)
        fwd, bwd = (float(f(x + e)) - f0) / h, (f0 - float(f(x - e))) / h
        assert np.isfinite(float(g[i])), name
        if abs(fwd - bwd) > 1e-3 * max(abs(fwd), abs(bwd), 1e-9):
            continue
        fd = (fwd + bwd) / 2
        assert abs(float(g[i]) - fd) <= 0.01 * abs(fd) + 1e-9, (name, float(g[i]), fd)
        checked += 1
    return checked


@pytest.mark.parametrize("cfg", [GRID[0], GRID[3], GRID[6], GRID[10]], ids=lambda c: c.case)
def test_grad_wrt_hardware_matches_finite_differences(cfg):
    names = float_fields(HW)
    with jax.enable_x64(True):
        base = jnp.asarray([float(getattr(SLOW_HW, n)) for n in names], jnp.float64)
        knobs = {k: jnp.asarray(v, jnp.float64) for k, v in knobs_of(cfg).items()}

        def f(x):
            hw = dataclasses.replace(SLOW_HW, **{n: x[i] for i, n in enumerate(names)})
            return jnp.log(case_latency(hw, knobs, case=cfg.case, reduce=cfg.reduce, model=cfg.model)["total"])

        assert _fd_check(f, base, names) >= 6


@pytest.mark.parametrize("case,kw", [("decode_sp", {"cubes": 5.3, "pes": 3.1}), ("prefill", {}),
                                     ("prefill_sp", {"cubes": 2.0, "pes": 2.6})])
def test_grad_wrt_relaxed_knobs_matches_finite_differences(case, kw):
    names = ["tile", "pes", "seq_len"]
    with jax.enable_x64(True):
        x0 = jnp.asarray([50.3, kw.get("pes", 1.0), 3000.37], jnp.float64)  # off the integers (ceil kinks)

        def f(x):
            knobs = {"tile": x[0], "pes": x[1], "seq_len": x[2], "batch": jnp.float64(1),
                     "cubes": jnp.float64(kw.get("cubes", 1.0)), "w": jnp.asarray([0.2, 0.5, 0.3], jnp.float64)}
            model = "alpamayo" if case == "prefill_sp" else "llama3_70b"  # C = G = 2: a small ring, quick to compile
            return jnp.log(case_latency(HW, knobs, case=case, model=model, relax=Relax())["total"])

        assert _fd_check(f, x0, names) >= 2
