"""A full 10-step Euler sample of the fp32 golden at ``alpamayo_tt`` shapes, within a shared machine's memory.

The model is ``jaxref.testing.packed_random_model`` (random bf16-valued weights and cache held as 16-bit
patterns, unpacked one layer at a time inside the scan; ``tests/test_expert_report.py`` checks that it
computes what ``jaxref.expert.velocity`` computes on the same weights).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from experiments.timing import time_call
from jaxref.action import UnicycleConfig, action_to_traj, euler_sample
from jaxref.config import ExpertConfig
from jaxref.testing import packed_random_model


def run_sample(cfg: ExpertConfig, *, seq_len: int, seed: int = 0, v0: float = 10.0) -> dict:
    """Sample one trajectory (random weights) and time it; returns plain numbers.

    Returns: init_s (weights + cache generation), sample_s (jit compile + 10 Euler steps), held_gib,
    per-step velocity RMS, and where the unicycle trajectory ends (x, y m; yaw rad).
    """
    cfg.check_seq_len(seq_len)
    k_model, k_noise = jax.random.split(jax.random.key(seed))
    (state, vfn), init_s, _ = time_call(packed_random_model, k_model, cfg, seq_len, 0)
    run = jax.jit(lambda st, x0: euler_sample(lambda x, t: vfn(st, x, t), x0, num_steps=cfg.num_steps))
    x0 = jax.random.normal(k_noise, (cfg.num_tokens, cfg.action_dim), jnp.float32)
    (action, vs), sample_s, _ = time_call(run, state, x0)
    xy, yaw = action_to_traj(action, v0, space=UnicycleConfig.alpamayo_r1())
    xy = np.asarray(xy)
    return {
        "layers": cfg.num_layers, "seq_len": seq_len, "steps": cfg.num_steps, "init_s": init_s,
        "sample_s": sample_s, "held_gib": sum(a.nbytes for a in jax.tree.leaves(state)) / 2**30,
        "velocity_rms": [float(np.sqrt(np.mean(np.square(v)))) for v in np.asarray(vs)],
        "end_x_m": float(xy[-1, 0]), "end_y_m": float(xy[-1, 1]), "end_yaw_rad": float(yaw[-1]),
        "finite": bool(np.isfinite(np.asarray(action)).all()),
    }
