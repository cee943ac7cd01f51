"""costmodel.compile_options: the cost models' XLA options change compile time, not numbers, and a
jitted model function still composes under a caller's jit / grad / vmap."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.tune import stack_knobs, sweep_batch_of, sweep_latency, valid_configs
from costmodel.blackhole import BlackholeConfig, sweep_step_us
from costmodel.blackhole.fit import from_unconstrained, load_calibration, residuals_and_jacobian
from costmodel.blackhole.opspecs import EltwiseSpec, KernelSpec
from costmodel.blackhole.rows import predict
from costmodel.compile_options import jit
from costmodel.hardware import ahbm_sip, blackhole_p150a
from jaxref.config import ExpertConfig

# XLA's own defaults (xla/debug_options_flags.cc), given explicitly: the suite's XLA_FLAGS
# (tests/conftest.py) lower the level for every other compile, not for these references
XLA_DEFAULTS = {"xla_cpu_use_fusion_emitters": True, "xla_backend_optimization_level": 3,
                "xla_llvm_disable_expensive_passes": False}


def test_ahbm_sweep_equals_default_xla_and_eager():
    """Every valid decode-SP config at a ragged S (ragged tiles, empty ranks, the reduce tables):
    the exhaustive search's sweep (``FAST_COMPILE``, padded batch) equals plain ``jax.jit`` at the
    batch's own size and the eager evaluator."""
    hw = ahbm_sip()
    cfgs = valid_configs("decode_sp", 3001)[::7]
    knobs = stack_knobs(cfgs)
    ours = np.asarray(sweep_latency(hw, knobs, case="decode_sp", once=True)[0])
    plain = jax.jit(sweep_batch_of, static_argnames=("case", "model", "reduce", "placement", "mesh", "chunk"),
                    compiler_options=XLA_DEFAULTS)
    ref = np.asarray(plain(hw, knobs, case="decode_sp")[0])
    np.testing.assert_allclose(ours, ref, rtol=1e-6)
    one = {k: v[5] for k, v in knobs.items()}
    np.testing.assert_allclose(ours[5], float(case_latency(hw, one, case="decode_sp")["total"]), rtol=1e-6)


def test_blackhole_sweep_equals_default_xla():
    cfg = ExpertConfig.alpamayo_tt()
    hw, fit = blackhole_p150a(), load_calibration().params
    port = BlackholeConfig.for_expert(cfg)
    batch = jax.tree_util.tree_map(lambda v: jnp.stack([jnp.asarray(v, jnp.float32)] * 2), port)
    ours = np.asarray(sweep_step_us(hw, fit, batch, cfg=cfg))
    plain = jax.jit(sweep_step_us.__wrapped__, static_argnames=("cfg",), compiler_options=XLA_DEFAULTS)
    np.testing.assert_allclose(ours, np.asarray(plain(hw, fit, batch, cfg=cfg)), rtol=1e-6)


def test_jitted_model_function_nests_under_a_callers_transforms():
    f = jit(lambda x, *, k: jnp.sin(x) * k, static_argnames=("k",))
    g = jax.jit(jax.vmap(jax.grad(lambda x: f(x, k=3.0))))
    x = jnp.linspace(0.0, 1.0, 5)
    np.testing.assert_allclose(g(x), 3.0 * jnp.cos(x), rtol=1e-6)
    np.testing.assert_allclose(f(x, k=2.0), 2.0 * jnp.sin(x), rtol=1e-6)


def test_small_compile_keeps_a_programs_memory_mappings_few_and_its_numbers():
    """The fit's per-op-spec programs (``SMALL_COMPILE``: one LLVM module each) add a few memory mappings
    per program, not XLA's ~90 (a process would run out of them after ~750 programs), and price as the
    eager model does."""
    maps = pathlib.Path("/proc/self/maps")
    if not maps.is_file():
        pytest.skip("no /proc/self/maps: the memory mappings of a process are not readable here")
    cfg, hw = ExpertConfig.alpamayo_tt(), blackhole_p150a()
    theta = jnp.asarray(load_calibration().theta, jnp.float32)
    # shapes no other test prices, so each is a program compiled here, not one found in the jit cache
    specs = tuple(KernelSpec(EltwiseSpec("add", 32 * (211 + i), 32 * 3)) for i in range(20))
    before = len(maps.read_text().splitlines())
    r, J = residuals_and_jacobian(theta, hw, np.ones(len(specs)), specs=specs, cfg=cfg)
    per_program = (len(maps.read_text().splitlines()) - before) / len(specs)
    assert per_program < 20, f"{per_program:.0f} new memory mappings per compiled program"
    eager = lambda th: jnp.log(predict(hw, from_unconstrained(th), specs, cfg=cfg))
    np.testing.assert_allclose(r, np.asarray(eager(theta)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(J, np.asarray(jax.jacfwd(eager)(theta)), rtol=1e-4, atol=1e-5)
