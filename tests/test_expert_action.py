"""action_in_proj / action_out_proj vs an independent torch implementation of the reference formula,
the Euler sampler vs closed forms, velocity / sample batching, and the unicycle integration vs a
step-by-step loop and exact kinematics."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from _expert_util import max_abs, tiny_setup, torch_action_in_proj, walk_jaxpr_shapes

from jaxref.action import (
    UnicycleConfig,
    action_in_proj,
    action_out_proj,
    action_to_traj,
    euler_sample,
    flow_times,
    fourier_freqs,
)
from jaxref.config import ActionInConfig, ExpertConfig
from jaxref.expert import sample, sample_jit, velocity, velocity_jit
from jaxref.options import ExpertOptions
from jaxref.weights import init_action_in_params, to_hf_state_dict, zeros_params


# ---- action_in_proj ------------------------------------------------------------------------
def test_fourier_freqs_exact_and_bf16_rounded():
    cfg = ActionInConfig()
    exact = fourier_freqs(cfg, bf16=False)
    np.testing.assert_array_equal(exact, torch.logspace(0, math.log10(100), steps=10).numpy())
    assert exact[8] == pytest.approx(59.948, abs=1e-3)
    rounded = fourier_freqs(cfg)  # the port's default: bf16-rounded buffer
    np.testing.assert_array_equal(
        rounded, [1.0, 1.671875, 2.78125, 4.65625, 7.75, 12.9375, 21.5, 36.0, 60.0, 100.0]
    )


@pytest.mark.parametrize(
    "hidden,num_layers,out_dim",
    [(32, 2, 64), (512, 2, 1536), (1024, 4, 1536), (48, 1, 40)],
    ids=["tiny", "port-h512", "upstream-h1024-n4", "one-layer"],
)
@pytest.mark.parametrize("bf16_freqs", [False, True], ids=["exact-freqs", "bf16-freqs"])
def test_action_in_proj_matches_torch_reference_formula(hidden, num_layers, out_dim, bf16_freqs):
    ain_cfg = ActionInConfig(hidden=hidden, num_layers=num_layers, bf16_freqs=bf16_freqs)
    cfg = ExpertConfig.tiny(hidden=out_dim, action_in=ain_cfg)
    params = init_action_in_params(jax.random.key(0), cfg)
    ref_mod = torch_action_in_proj(
        action_dim=2, out_dim=out_dim, hidden=hidden, num_layers=num_layers, bf16_freqs=bf16_freqs
    )
    full = dataclasses.replace(zeros_params(cfg), action_in=params)  # only the action_in_proj.* names matter
    sd = {
        k[len("action_in_proj.") :]: torch.from_numpy(v)
        for k, v in to_hf_state_dict(full, cfg, with_freqs=False).items()
        if k.startswith("action_in_proj.")
    }
    ref_mod.load_state_dict(sd, strict=False)  # the module keeps its own freqs buffers
    x = 1.5 * jax.random.normal(jax.random.key(1), (3, 64, 2), jnp.float32)
    t = jnp.array([0.0, 0.3, 0.9], jnp.float32)
    with torch.no_grad():
        ref = ref_mod(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(t))).numpy()
    assert max_abs(_proj(params, x, t, ain_cfg), ref) <= 1e-5
    # The other frequency choice is measurably different (so the flag is honoured).
    assert max_abs(_proj(params, x, t, dataclasses.replace(ain_cfg, bf16_freqs=not bf16_freqs)), ref) > 1e-3


@functools.partial(jax.jit, static_argnames="cfg")
def _proj(params, x, t, cfg):
    return jax.vmap(lambda xx, tt: action_in_proj(params, xx, tt, cfg=cfg))(x, t)


def test_action_in_proj_rejects_bad_inputs():
    cfg = ExpertConfig.tiny()
    params = init_action_in_params(jax.random.key(0), cfg)
    with pytest.raises(ValueError, match="input features"):
        action_in_proj(params, jnp.zeros((64, 3)), 0.0, cfg=cfg.action_in)
    with pytest.raises(ValueError, match="t must be a scalar"):
        action_in_proj(params, jnp.zeros((64, 2)), jnp.zeros(2), cfg=cfg.action_in)


def test_action_out_proj_matches_numpy():
    _cfg, params, _, x = tiny_setup()
    w, b = np.asarray(params.action_out.w, np.float64), np.asarray(params.action_out.b, np.float64)
    np.testing.assert_allclose(
        action_out_proj(params.action_out, x), np.asarray(x, np.float64) @ w + b, rtol=1e-5, atol=1e-6
    )


# ---- Euler sampler -------------------------------------------------------------------------
def test_euler_sample_closed_forms():
    x0 = jnp.arange(6.0).reshape(3, 2)
    x, vs = euler_sample(lambda x, t: -x, x0, num_steps=10)  # x_{n+1} = 0.9 x_n
    np.testing.assert_allclose(x, x0 * 0.9**10, rtol=1e-5)
    np.testing.assert_allclose(vs[3], -x0 * 0.9**3, rtol=1e-5)
    x, vs = euler_sample(lambda x, t: jnp.full_like(x, t), x0, num_steps=4)  # left Riemann sum of t
    np.testing.assert_allclose(x, x0 + (0 + 0.25 + 0.5 + 0.75) * 0.25, rtol=1e-6)
    np.testing.assert_allclose(vs[:, 0, 0], [0, 0.25, 0.5, 0.75])
    np.testing.assert_allclose(flow_times(10), np.linspace(0, 1, 11), atol=1e-7)
    with pytest.raises(ValueError, match="num_steps=0"):
        flow_times(0)


# ---- velocity / sample ---------------------------------------------------------------------
def test_jit_equals_eager_and_sample_follows_its_velocities():
    cfg, params, cache, _ = tiny_setup()
    key = jax.random.key(7)
    x = jax.random.normal(key, (cfg.num_tokens, cfg.action_dim))  # sample's x0 for this key
    v_eager = velocity(params, x, 0.0, cache, cfg=cfg)  # no outer jit (disable_jit: test_expert_hf_parity)
    np.testing.assert_allclose(velocity_jit(params, x, 0.0, cache, cfg=cfg), v_eager, rtol=1e-5, atol=1e-6)
    a_jit, vs_jit = sample_jit(params, cache, key, cfg=cfg)
    # Step 0 sees x0 at t = 0. Later steps are not compared across jit / eager because the 100-cycle
    # Fourier features amplify last-bit differences of x (d sin(2 pi 100 x)/dx ~ 600).
    np.testing.assert_allclose(vs_jit[0], v_eager, rtol=1e-5, atol=1e-6)
    # Teacher forcing: step i's velocity is velocity(x_i, t_i) at the sampler's own x_i.
    xi = x
    for i in range(cfg.num_steps):
        v = velocity_jit(params, xi, jnp.float32(i) / cfg.num_steps, cache, cfg=cfg)
        np.testing.assert_allclose(v, vs_jit[i], rtol=1e-3, atol=1e-4)
        xi = xi + jnp.float32(1.0 / cfg.num_steps) * vs_jit[i]
    np.testing.assert_allclose(xi, a_jit, rtol=1e-5, atol=1e-5)


def test_vmap_over_trajectories_equals_loop_and_shares_the_cache():
    cfg, params, cache, _ = tiny_setup()
    keys = jax.random.split(jax.random.key(1), 3)
    batched = jax.jit(jax.vmap(lambda k: sample(params, cache, k, cfg=cfg)))
    a_b, v_b = batched(keys)
    for i, k in enumerate(keys):
        _, v = sample_jit(params, cache, k, cfg=cfg, num_steps=1)
        np.testing.assert_allclose(v_b[i, 0], v[0], rtol=1e-5, atol=1e-6)  # same x0 (see the jit test)
        x0 = jax.random.normal(k, (cfg.num_tokens, cfg.action_dim))
        np.testing.assert_allclose(a_b[i], x0 + 0.1 * v_b[i].sum(0), rtol=1e-5, atol=1e-5)
    # velocity on [B, T, A] is the same vmap; the exact formulation never materialises a per-trajectory
    # copy of a cache layer ([B, K, Smax, H]); the tail-slot one writes own K/V into it, so it must.
    xs = jax.random.normal(jax.random.key(2), (3, cfg.num_tokens, cfg.action_dim))
    vb = velocity_jit(params, xs, 0.4, cache, cfg=cfg)
    np.testing.assert_allclose(vb[1], velocity_jit(params, xs[1], 0.4, cache, cfg=cfg), rtol=1e-5, atol=1e-6)
    per_traj_cache = (3, cfg.num_kv_heads, cache.max_seq_len, cfg.head_dim)
    for attention, copies in (("exact", False), ("tail_slot", True)):
        jaxpr = jax.make_jaxpr(lambda x, a=attention: velocity(params, x, 0.4, cache, cfg=cfg, options=ExpertOptions(attention=a)))(
            xs
        )
        assert (per_traj_cache in walk_jaxpr_shapes(jaxpr)) == copies, attention


def test_velocity_rejects_bad_shapes():
    cfg, params, cache, _ = tiny_setup()
    with pytest.raises(ValueError, match="x_t must be"):
        velocity(params, jnp.zeros((10, 2)), 0.0, cache, cfg=cfg)
    with pytest.raises(ValueError, match="x0 must be"):
        sample(params, cache, jax.random.key(0), cfg=cfg, x0=jnp.zeros((3, 2)))
    bad = type(cache)(k=cache.k[:1], v=cache.v[:1], seq_len=cache.seq_len, rope_delta=cache.rope_delta)
    with pytest.raises(ValueError, match="cache.k / cache.v must be"):
        velocity(params, jnp.zeros((64, 2)), 0.0, bad, cfg=cfg)


# ---- unicycle ------------------------------------------------------------------------------
def _loop_unicycle(action, v0, sp: UnicycleConfig):
    """Step-by-step float64 integration written from the model equations."""
    a = action[:, 0] * sp.accel_std + sp.accel_mean
    k = action[:, 1] * sp.curvature_std + sp.curvature_mean
    v, th, x, y, dt = float(v0), 0.0, 0.0, 0.0, sp.dt
    out, yaw = [], []
    for i in range(len(a)):
        v1 = v + a[i] * dt
        th1 = th + k[i] * (v * dt + 0.5 * a[i] * dt * dt)
        x += 0.5 * dt * (v * math.cos(th) + v1 * math.cos(th1))
        y += 0.5 * dt * (v * math.sin(th) + v1 * math.sin(th1))
        v, th = v1, th1
        out.append((x, y))
        yaw.append(th)
    return np.array(out), np.array(yaw)


def test_action_to_traj_matches_step_by_step_loop():
    sp = UnicycleConfig.alpamayo_r1()
    action = np.asarray(jax.random.normal(jax.random.key(0), (64, 2)), np.float64)
    xy, yaw = action_to_traj(jnp.asarray(action, jnp.float32), 8.0, space=sp)
    want_xy, want_yaw = _loop_unicycle(action, 8.0, sp)
    np.testing.assert_allclose(xy, want_xy, atol=2e-4)
    np.testing.assert_allclose(yaw, want_yaw, atol=1e-5)


def test_action_to_traj_exact_kinematics_and_batching():
    sp = UnicycleConfig(dt=0.1)
    t = 0.1 * np.arange(1, 65)
    straight = jnp.stack([jnp.full(64, 0.5), jnp.zeros(64)], -1)  # constant accel, no curvature
    xy, yaw = action_to_traj(straight, 4.0, space=sp)
    np.testing.assert_allclose(xy[:, 0], 4.0 * t + 0.25 * t**2, rtol=1e-5)
    np.testing.assert_allclose(xy[:, 1], 0.0, atol=1e-6)
    circle = jnp.stack([jnp.zeros(64), jnp.full(64, 0.05)], -1)  # constant speed and curvature: radius 20 m
    xy, yaw = action_to_traj(circle, 5.0, space=sp)
    np.testing.assert_allclose(yaw, 0.05 * 5.0 * t, rtol=1e-5)
    radius = np.hypot(np.asarray(xy[:, 0]), np.asarray(xy[:, 1]) - 20.0)
    np.testing.assert_allclose(radius, 20.0, rtol=2e-3)  # trapezoid rule on a circle: O(dt^2)
    both, _ = action_to_traj(jnp.stack([straight, circle]), jnp.array([4.0, 5.0]), space=sp)
    np.testing.assert_allclose(both[1], xy, atol=1e-6)
    with pytest.raises(ValueError, match="action must be"):
        action_to_traj(jnp.zeros((64, 3)), 1.0)
    with pytest.raises(ValueError, match="accel_std=0"):
        UnicycleConfig(accel_std=0)
