"""The 10-step sample compared three ways: teacher-forced, free-running, and the golden's own baseline.

Euler flow matching is very sensitive to its input (the Fourier action embedding turns a 3.5e-4
relative change of x into a 7.7e-2 change of its output), so two implementations that agree to
rounding drift apart along their own trajectories after a few steps. Hence per step k:

* **teacher-forced**: the graph's velocity at the *golden's* x_k, t_k against the golden's velocity
  there - the port error of one step, on a target (``device.parity_checks.TARGETS['velocity']``);
* **free-running**: each side's velocity along its own trajectory (reported, no target);
* **baseline**: the fp32 golden against itself started from x_0 moved by one bf16 rounding step
  (``one_ulp``): what the sampler does to any difference of that size (reported, no target).

A free-running PCC as low as the baseline's says "the sampler amplifies", not "the port is wrong".
"""

from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np

from device.parity_checks import TARGETS, metric
from jaxref.action import euler_sample, flow_times


def one_ulp(x: np.ndarray) -> np.ndarray:
    """x moved up by one bf16 ulp per element (2^(floor(log2 |x|) - 7); zeros by the smallest normal)."""
    x = np.asarray(x, np.float32)
    mag = np.where(x == 0, np.float32(2.0**-126), np.abs(x))
    return (x + np.exp2(np.floor(np.log2(mag)) - 7)).astype(np.float32)


def golden_pair(velocity_fn, x0: np.ndarray, *, num_steps: int):
    """The golden trajectory from x0 and from ``one_ulp(x0)``, batched (the cache is read once per layer).

    velocity_fn: (x [B, T, A], t) -> v, the fp32 golden's batched velocity.
    Returns (final actions [2, T, A], per-step velocities [steps, 2, T, A]) as numpy.
    """
    x = jnp.stack([jnp.asarray(x0, jnp.float32), jnp.asarray(one_ulp(x0))])
    a, vs = euler_sample(velocity_fn, x, num_steps=num_steps)
    return np.asarray(a), np.asarray(vs)


def golden_states(x0: np.ndarray, velocities: np.ndarray) -> list[np.ndarray]:
    """x_k, k = 0 .. steps - 1, of the Euler trajectory with these per-step velocities."""
    ts = np.asarray(flow_times(len(velocities)))
    xs, x = [], np.asarray(x0, np.float32)
    for (t0, t1), v in zip(itertools.pairwise(ts), velocities, strict=True):
        xs.append(x)
        x = (x + (t1 - t0) * v).astype(np.float32)
    return xs


def teacher_forced_points(x0: np.ndarray, gold_vs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where the graph is teacher-forced: (x_k [steps - 1, T, A], t_k [steps - 1]), k = 1 .. steps - 1, the
    golden trajectory from x0 (``gold_vs`` [steps, 2, T, A] from ``golden_pair``, index 0). Step 0 is
    (x0, t = 0), the free-running sample's first step: not repeated here."""
    ts = np.asarray(flow_times(len(gold_vs)))
    xs = golden_states(x0, gold_vs[:, 0])[1:]
    return np.stack(xs) if xs else np.zeros((0, *np.shape(x0)), np.float32), ts[1:len(xs) + 1]


def compare_sample(tf_vs: np.ndarray, gold_actions: np.ndarray, gold_vs: np.ndarray,
                   dev_action: np.ndarray, dev_vs: np.ndarray) -> dict:
    """The three comparisons of the module docstring.

    tf_vs: the graph's velocities [steps - 1, T, A] at ``teacher_forced_points`` (``TTExpert.steps``);
    gold_actions / gold_vs: from ``golden_pair`` (index 0: from x0, 1: perturbed); dev_action, dev_vs:
    the graph's own sample. Step 0 of the teacher-forced and free-running comparisons is the same input
    (x0, t = 0): the free-running velocity is reused there.
    """
    ts = np.asarray(flow_times(len(gold_vs)))
    v_tf = [dev_vs[0], *tf_vs]
    if len(v_tf) != len(gold_vs):
        raise ValueError(f"tf_vs holds {len(tf_vs)} velocities; the {len(gold_vs)}-step sample needs {len(gold_vs) - 1}")
    steps = []
    for k in range(len(gold_vs)):
        steps.append({"step": k, "t": float(ts[k]),
                      "teacher_forced": metric(gold_vs[k, 0], v_tf[k], TARGETS["velocity"]),
                      "free_running": metric(gold_vs[k, 0], dev_vs[k], None),
                      "baseline": metric(gold_vs[k, 0], gold_vs[k, 1], None)})
    return {"steps": steps,
            "action_free_running": metric(gold_actions[0], dev_action, None),
            "action_baseline": metric(gold_actions[0], gold_actions[1], None)}
