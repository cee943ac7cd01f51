"""A full 10-step Euler sample of the fp32 golden at ``alpamayo_tt`` shapes, within a shared machine's memory.

64 layers of fp32 weights are ~9.7 GB and the fp32 cache another ~2.4 GB. Here the random weights
and cache are rounded to bf16 (the dtype of the real checkpoint and of a bf16 VLM's cache) and
held as 16-bit patterns (~5.6 GB); layer i is unpacked to float32 inside the layer scan
(``jaxref.expert.run_layers``), so every operation is float32 and one layer exists in float32 at a
time. ``tests/test_expert_report.py`` checks that this computes what ``jaxref.expert.velocity``
computes on the same bf16-valued weights.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.action import UnicycleConfig, action_in_proj, action_out_proj, action_to_traj, euler_sample
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope, run_layers
from jaxref.layers import rms_norm
from jaxref.weights import init_cache_layer, init_layer_params, init_params


def pack_bf16(a):
    """float array -> its bf16 rounding as uint16 bit patterns."""
    return jax.lax.bitcast_convert_type(a.astype(jnp.bfloat16), jnp.uint16)


def unpack_bf16(a):
    """uint16 bf16 bit patterns -> float32."""
    return jax.lax.bitcast_convert_type(a, jnp.bfloat16).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len"))
def init_packed_layers(k_layers, k_cache, *, cfg: ExpertConfig, seq_len: int):
    """Per-layer random weights and cache rows [L, ...], rounded to bf16 and stored as uint16 bit patterns.

    uint16, not bf16: XLA's CPU backend upcasts bf16 dynamic-slices by converting the *whole*
    stacked operand to float32 up front, which would double the memory this exists to save.
    """

    def one(keys):
        p = init_layer_params(keys[0], cfg)
        return jax.tree.map(pack_bf16, (p, init_cache_layer(keys[1], cfg, seq_len)))

    keys = jnp.stack([jax.random.split(k_layers, cfg.num_layers), jax.random.split(k_cache, cfg.num_layers)], 1)
    return jax.lax.map(one, keys)


def packed_random_model(key, cfg: ExpertConfig, seq_len: int, rope_delta: int):
    """(state, velocity(state, x_t [T, A], t) -> [T, A]); ``state`` is a jit argument, never baked in.

    state = (small float32 params: action projections and final norm, packed layers + cache).
    """
    k_p, k_layers, k_cache = jax.random.split(key, 3)
    small = dataclasses.replace(init_params(k_p, dataclasses.replace(cfg, num_layers=1)), layers=None)
    rope = expert_rope(seq_len, rope_delta, cfg=cfg)
    state = (small, init_packed_layers(k_layers, k_cache, cfg=cfg, seq_len=seq_len))

    def vfn(st, x_t, t):
        def layer_at(i):  # layer i's weights [..] and cache rows [K, S, H], unpacked inside the scan
            p, (ck, cv) = jax.tree.map(lambda a: unpack_bf16(a[i]), st[1])
            return p, ck, cv

        emb = action_in_proj(st[0].action_in, x_t, t, cfg=cfg.action_in)
        h = run_layers(layer_at, emb, seq_len, rope, cfg=cfg)
        return action_out_proj(st[0].action_out, rms_norm(h, st[0].final_norm, eps=cfg.rms_eps))

    return state, vfn


def run_sample(cfg: ExpertConfig, *, seq_len: int, seed: int = 0, v0: float = 10.0) -> dict:
    """Sample one trajectory (random weights) and time it; returns plain numbers.

    Returns: init_s (weights + cache generation), sample_s (jit compile + 10 Euler steps), held_gib,
    per-step velocity RMS, and where the unicycle trajectory ends (x, y m; yaw rad).
    """
    cfg.check_seq_len(seq_len)
    k_model, k_noise = jax.random.split(jax.random.key(seed))
    t0 = time.perf_counter()
    state, vfn = packed_random_model(k_model, cfg, seq_len, 0)
    state = jax.block_until_ready(state)
    init_s = time.perf_counter() - t0
    run = jax.jit(lambda st, x0: euler_sample(lambda x, t: vfn(st, x, t), x0, num_steps=cfg.num_steps))
    x0 = jax.random.normal(k_noise, (cfg.num_tokens, cfg.action_dim), jnp.float32)
    t0 = time.perf_counter()
    action, vs = jax.block_until_ready(run(state, x0))
    sample_s = time.perf_counter() - t0
    xy, yaw = action_to_traj(action, v0, space=UnicycleConfig.alpamayo_r1())
    xy = np.asarray(xy)
    return {
        "layers": cfg.num_layers, "seq_len": seq_len, "steps": cfg.num_steps, "init_s": init_s,
        "sample_s": sample_s, "held_gib": sum(a.nbytes for a in jax.tree.leaves(state)) / 2**30,
        "velocity_rms": [float(np.sqrt(np.mean(np.square(v)))) for v in np.asarray(vs)],
        "end_x_m": float(xy[-1, 0]), "end_y_m": float(xy[-1, 1]), "end_yaw_rad": float(yaw[-1]),
        "finite": bool(np.isfinite(np.asarray(action)).all()),
    }
