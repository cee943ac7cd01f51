"""Physical properties of predictions outside the fitted data, and gradients vs finite differences."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.blackhole import (
    BlackholeConfig,
    MatmulProgramConfig,
    Port,
    SdpaProgramConfig,
    evaluate,
    load_fitted,
    step_breakdown,
    step_us,
)
from costmodel.blackhole.params import PARAM_NAMES
from costmodel.compile_options import jit
from costmodel.hardware import blackhole_p100a, blackhole_p150a
from costmodel.smooth import Relax
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()
FIT = load_fitted()

MODES = {
    "decode_k128": {"attn_mode": "decode", "mask": "bfp4", "k_chunk": 128.0, "q_chunk": 32.0, "cores_per_head": 16.0},
    "decode_k256": {"attn_mode": "decode", "mask": "bfp4", "k_chunk": 256.0, "q_chunk": 32.0, "cores_per_head": 16.0},
    "decode_cph4": {"attn_mode": "decode", "mask": "bfp4", "k_chunk": 128.0, "q_chunk": 32.0, "cores_per_head": 4.0},
    "standard_q32": {"attn_mode": "standard", "mask": "bfp4", "k_chunk": 128.0, "q_chunk": 32.0,
                     "cores_per_head": 16.0},
    "standard_q64": {"attn_mode": "standard", "mask": "bf16", "k_chunk": 256.0, "q_chunk": 64.0,
                     "cores_per_head": 16.0},
    "folded_q128": {"attn_mode": "standard", "fold_heads": True, "mask": "bf16", "k_chunk": 128.0, "q_chunk": 128.0,
                    "cores_per_head": 16.0},
}
SMAX_GRID = np.arange(512, 16384 + 1, 256, dtype=np.float32)  # multiples of every k_chunk used above


@functools.partial(jit, static_argnames=("cfg",))
def _sweep_smax(hw, fit, bc, smaxes, *, cfg):
    def one(s):
        out = step_breakdown(hw, fit, bc.replace(smax=s, seq_len=jnp.zeros_like(s)), cfg=cfg)
        return out["ops"]["attention"], out["step_us"], out["sample_us"]
    return jax.vmap(one)(smaxes)


@pytest.mark.parametrize("kv_dtype", ["bf16", "bfp8"])
@pytest.mark.parametrize("mode", list(MODES))
def test_monotone_in_smax(mode, kv_dtype):
    bc = BlackholeConfig.for_expert(CFG, cache=kv_dtype, **MODES[mode])
    attn, step, sample = (np.asarray(v) for v in _sweep_smax(HW, FIT, bc, jnp.asarray(SMAX_GRID), cfg=CFG))
    for name, v in (("attention", attn), ("step", step), ("sample", sample)):
        assert np.all(np.diff(v) >= -1e-3 * v[1:]), (name, v)
    assert attn[-1] > 4 * attn[0]  # and it really grows: 32x the cache


def test_monotone_in_seq_len():
    """The masked graph reads all Smax rows, so S only constrains: time is non-decreasing (flat) in S."""
    bc = BlackholeConfig.for_expert(CFG)
    steps = [evaluate(HW, FIT, bc.replace(seq_len=float(s)), cfg=CFG)["step_ms"] for s in range(0, 8129, 508)]
    assert np.all(np.diff(steps) >= -1e-9)


@pytest.mark.parametrize("smax", [2048.0, 5120.0, 8192.0, 16384.0])
@pytest.mark.parametrize("mode", list(MODES))
def test_bfp8_cache_never_slower(mode, smax):
    bc16 = BlackholeConfig.for_expert(CFG, smax=smax, seq_len=0.0, cache="bf16", **MODES[mode])
    r16 = evaluate(HW, FIT, bc16, cfg=CFG)
    r8 = evaluate(HW, FIT, bc16.replace(cache="bfp8"), cfg=CFG)
    for op, t16 in r16["per_op_us"].items():
        assert r8["per_op_us"][op] <= t16 + 1e-6, op
    if mode in ("decode_k128", "decode_k256"):
        # DRAM-bound with 13 cores per kv head: fewer bytes is faster. With few busy cores (4 per
        # head, standard SDPA) each core's page-request rate bounds it and bfp8 pages do not help.
        assert r8["per_op_us"]["attention"] < r16["per_op_us"]["attention"]
        assert r8["step_ms"] < r16["step_ms"] and r8["sample_ms"] < r16["sample_ms"]


def test_slower_memory_is_never_faster():
    bc = BlackholeConfig.for_expert(CFG)
    a, b = evaluate(blackhole_p150a(), FIT, bc, cfg=CFG), evaluate(blackhole_p100a(), FIT, bc, cfg=CFG)
    assert all(b["per_op_us"][k] >= a["per_op_us"][k] - 1e-6 for k in a["per_op_us"])
    assert b["step_ms"] > a["step_ms"]


def _relaxed_point(mode: str) -> BlackholeConfig:
    # non-integer knobs, away from the integer kinks of the relaxed ceil (e.g. 128/2.3 cores)
    mm = MatmulProgramConfig
    mms = {"wqkv": mm(7.3, 2.3, 2.1), "wo": mm(6.7, 1.3, 1.9), "w1": mm(8.4, 2.2, 2.0), "w3": mm(5.9, 2.45, 2.05),
           "w2": mm(40.5, 1.1, 2.0)}
    mms["w1"] = mm(8.4, 2.2, 2.0, fused_activation="silu")  # the port's gate projection (not priced: static)
    if mode == "decode":
        port = Port(matmuls=mms, attention=SdpaProgramConfig(120.3, 32.0, 15.3))
    else:
        port = Port(matmuls=mms, attention=SdpaProgramConfig(120.3, 40.7, 16.0, attn_mode="standard")).replace(mask="bf16")
    return BlackholeConfig(port=port, smax=8100.5, seq_len=4700.3)


@pytest.mark.parametrize("mode", ["decode", "standard"])
def test_grad_matches_central_differences(mode):
    """d step / d leaf for every hardware, config and fitted leaf, relaxed model, float64."""
    relax = Relax(tau_us=0.5, tau_int=0.2)
    with jax.enable_x64(True):
        args = (HW, FIT, _relaxed_point(mode))
        args = jax.tree_util.tree_map(lambda v: jnp.asarray(v, jnp.float64), args)
        step = lambda a: step_us(*a, cfg=CFG, relax=relax)
        f = jit(step)  # the model's compile options
        f0 = float(f(args))
        grads = jax.tree_util.tree_leaves(jit(jax.grad(step), fast=True)(args))
        leaves, treedef = jax.tree_util.tree_flatten(args)
        # hardware (with dram_request_cycles, noc_write_issue_cycles, the two SFPU costs and the five NoC estimator
        # costs), fit, config leaves
        assert len(leaves) == 17 + len(PARAM_NAMES) + 2 + 15 + 3
        nonzero = 0
        for i, (x, g) in enumerate(zip(leaves, grads)):
            h = 1e-6 * abs(float(x))

            def at(v, i=i):
                return float(f(jax.tree_util.tree_unflatten(treedef, [*leaves[:i], v, *leaves[i + 1:]])))

            fd = (at(x + h) - at(x - h)) / (2 * h)
            g = float(g)
            assert np.isfinite(g), i
            scale = 1e-9 * f0 / abs(float(x))  # sensitivities below 1e-9 relative count as zero
            assert abs(g - fd) <= 0.01 * abs(fd) + scale, (i, g, fd)
            nonzero += abs(fd) > scale
        assert nonzero >= 30


def test_smax_terms_are_bytes_bounded_by_the_peak():
    """Every Smax-dependent term moves bytes or computes tiles: attention never beats its K+V bytes
    at the 512 GB/s peak, and the per-row slope at long context is lower with the smaller bfp8
    pages (bytes set it, not a free slope)."""
    slopes = {}
    for kv_dtype, elem_bytes in (("bf16", 2.0), ("bfp8", 1088 / 1024)):
        bc = BlackholeConfig.for_expert(CFG, cache=kv_dtype)
        attn = np.asarray(_sweep_smax(HW, FIT, bc, jnp.asarray(SMAX_GRID), cfg=CFG)[0])
        row_bytes = 2 * CFG.num_kv_heads * CFG.head_dim * elem_bytes
        assert np.all(attn * 1e-6 * 512e9 >= SMAX_GRID * row_bytes), kv_dtype
        slope = (attn[-1] - attn[-9]) / (SMAX_GRID[-1] - SMAX_GRID[-9]) * 1e-6  # s per cache row
        assert slope > row_bytes / 512e9
        slopes[kv_dtype] = slope
    assert slopes["bfp8"] < 0.8 * slopes["bf16"]
