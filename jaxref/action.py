"""Action projections, the Euler flow-matching sampler and the unicycle trajectory integration.

Semantics: ``shared/REFERENCE.md`` section 1 (alpamayo ``PerWaypointActionInProjV2``,
``Linear(hidden, 2)`` action_out_proj, ``flow_matching`` Euler sampler,
``UnicycleAccelCurvatureActionSpace.action_to_traj``). Weights are held ``[in, out]`` (``x @ W``):
these small host-side Linears are not worth the decoder's [out, in] GEMM layout.

Precision hooks (identity under fp32): ``p.weight`` on the Linear weights, ``p.norm_weight`` on
gammas *and biases* (the small non-matmul parameters, bf16 in an HF bf16 model), ``p.act`` on the
Fourier features (HF casts them to the trunk dtype) and on every op output. The device port runs
these projections on the host in fp32 (``seeds/EXPERT_NOTES.md``), which is why ``velocity``
takes a separate ``proj_precision``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.config import ActionInConfig
from jaxref.layers import rms_norm
from jaxref.precision import FP32, Precision

_HI = jax.lax.Precision.HIGHEST


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ActionInParams:
    """``action_in_proj`` (Fourier -> MLP trunk -> LayerNorm). n = ``ActionInConfig.num_layers``.

    Attributes (alpamayo state-dict name under ``action_in_proj.`` -> shape here; trunk index j):
      w_in, b_in: ``encoder.trunk.0.{weight,bias}`` -> [C_in, h], [h]   (C_in = 2 F (A + 1))
      hidden_norm: ``encoder.trunk.{2+3i}.weight`` -> [n-1, h]           (RMSNorm, eps 1e-5)
      hidden_w, hidden_b: ``encoder.trunk.{3+3i}.{weight,bias}`` -> [n-1, h, h], [n-1, h]
      out_norm: ``encoder.trunk.{3n-1}.weight`` -> [h]
      w_out, b_out: ``encoder.trunk.{3n}.{weight,bias}`` -> [h, D], [D]
      ln_scale, ln_bias: ``norm.{weight,bias}`` -> [D], [D]                (LayerNorm, eps 1e-5)
    """

    w_in: jax.Array
    b_in: jax.Array
    hidden_norm: jax.Array
    hidden_w: jax.Array
    hidden_b: jax.Array
    out_norm: jax.Array
    w_out: jax.Array
    b_out: jax.Array
    ln_scale: jax.Array
    ln_bias: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ActionOutParams:
    """``action_out_proj = Linear(D, A)``: w [D, A] (HF ``weight`` [A, D] transposed), b [A]."""

    w: jax.Array
    b: jax.Array


def action_in_shapes(cfg: ActionInConfig, *, action_dim: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """Shape of every ``ActionInParams`` field."""
    h, n = cfg.hidden, cfg.num_layers
    c_in = 2 * cfg.num_freqs * (action_dim + 1)
    return {
        "w_in": (c_in, h),
        "b_in": (h,),
        "hidden_norm": (n - 1, h),
        "hidden_w": (n - 1, h, h),
        "hidden_b": (n - 1, h),
        "out_norm": (h,),
        "w_out": (h, hidden),
        "b_out": (hidden,),
        "ln_scale": (hidden,),
        "ln_bias": (hidden,),
    }


# ---- action_in_proj ------------------------------------------------------------------------
def fourier_freqs(cfg: ActionInConfig, *, bf16: bool | None = None) -> np.ndarray:
    """``logspace(0, log10(max_freq), num_freqs)`` as float32 [F] (1.0 ... 59.948, 100 for the defaults).

    Computed in float64 and rounded once, which reproduces ``torch.logspace(..., dtype=float32)``.
    ``bf16`` (default ``cfg.bf16_freqs``) rounds to bf16 as loading a checkpoint in bf16 does
    (59.948 -> 60.0): the stored ``freqs`` buffer is rounded even though the arithmetic is fp32.
    """
    bf16 = cfg.bf16_freqs if bf16 is None else bf16
    f = np.logspace(0.0, np.log10(cfg.max_freq), cfg.num_freqs).astype(np.float32)
    return f.astype(jnp.bfloat16).astype(np.float32) if bf16 else f


def fourier_encode(s: jax.Array, freqs: np.ndarray) -> jax.Array:
    """``cat(sin(2 pi f s), cos(2 pi f s)) * sqrt(2)`` per scalar: [...] -> [..., 2F] float32.

    The products run in the reference's order ((s * f) * 2) * pi, each rounded to fp32.
    """
    arg = jnp.asarray(s, jnp.float32)[..., None] * jnp.asarray(freqs, jnp.float32) * 2 * math.pi
    return jnp.concatenate([jnp.sin(arg), jnp.cos(arg)], axis=-1) * math.sqrt(2)


def layer_norm(
    x: jax.Array, scale: jax.Array, bias: jax.Array, *, eps: float, precision: Precision = FP32
) -> jax.Array:
    """``torch.nn.LayerNorm`` over the last axis (biased variance, affine); one rounding at the output."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    return precision.act(y * precision.norm_weight(scale) + precision.norm_weight(bias))


def _linear(x, w, b, precision: Precision):
    return precision.act(
        jnp.einsum("Ti,io->To", x, precision.weight(w), precision=_HI) + precision.norm_weight(b)
    )


def action_in_proj(
    params: ActionInParams, x: jax.Array, t, *, cfg: ActionInConfig, precision: Precision = FP32
) -> jax.Array:
    """``PerWaypointActionInProjV2``: per-token Fourier features of (accel, curvature, t) -> MLP -> LayerNorm.

    Input per token: ``[enc(x[:, 0]) | ... | enc(x[:, A-1]) | enc(t)]`` (C_in = 2F(A+1) = 60 for A = 2);
    trunk ``Linear(C_in, h), SiLU``, (n-1) x ``[RMSNorm(h), Linear(h, h), SiLU]``,
    ``RMSNorm(h), Linear(h, D)``; then ``LayerNorm(D)``.

    Args:
      x: [T, A] noisy action (normalized accel, curvature), cast to fp32.
      t: scalar flow time (same for every token).
    Returns:
      [T, D] float32 expert input embedding.
    """
    if x.ndim != 2:
        raise ValueError(f"x must be [T, A], got shape {x.shape}")
    T, A = x.shape
    c_in = 2 * cfg.num_freqs * (A + 1)
    if params.w_in.shape[0] != c_in:
        raise ValueError(
            f"action_in_proj w_in has {params.w_in.shape[0]} input features, expected "
            f"2 * num_freqs * (A + 1) = {c_in} for x {x.shape}"
        )
    if jnp.ndim(t) != 0:
        raise ValueError(f"t must be a scalar flow time, got shape {jnp.shape(t)}")
    freqs = fourier_freqs(cfg)
    feats = [fourier_encode(x[:, c], freqs) for c in range(A)]
    feats.append(jnp.broadcast_to(fourier_encode(t, freqs), (T, 2 * cfg.num_freqs)))
    h = precision.act(jnp.concatenate(feats, axis=-1))  # [T, C_in]
    h = precision.act(jax.nn.silu(_linear(h, params.w_in, params.b_in, precision)))
    for i in range(params.hidden_w.shape[0]):
        h = rms_norm(h, params.hidden_norm[i], eps=cfg.norm_eps, precision=precision)
        h = precision.act(jax.nn.silu(_linear(h, params.hidden_w[i], params.hidden_b[i], precision)))
    h = rms_norm(h, params.out_norm, eps=cfg.norm_eps, precision=precision)
    h = _linear(h, params.w_out, params.b_out, precision)  # [T, D]
    return layer_norm(h, params.ln_scale, params.ln_bias, eps=cfg.norm_eps, precision=precision)


def action_out_proj(params: ActionOutParams, h: jax.Array, *, precision: Precision = FP32) -> jax.Array:
    """``Linear(D, A)`` with bias on the final-normed hidden: h [T, D] -> velocity [T, A] float32."""
    if h.ndim != 2 or h.shape[-1] != params.w.shape[0]:
        raise ValueError(f"h must be [T, D] with D={params.w.shape[0]}, got shape {h.shape}")
    return _linear(h, params.w, params.b, precision)


# ---- Euler flow-matching sampler -----------------------------------------------------------
def flow_times(num_steps: int) -> jax.Array:
    """``linspace(0, 1, num_steps + 1)``: t = 0 is noise, t = 1 is data. float32 [steps + 1]."""
    if num_steps < 1:
        raise ValueError(f"num_steps={num_steps} must be >= 1")
    return jnp.linspace(0.0, 1.0, num_steps + 1, dtype=jnp.float32)


def euler_sample(
    velocity_fn: Callable[[jax.Array, jax.Array], jax.Array], x0: jax.Array, *, num_steps: int
) -> tuple[jax.Array, jax.Array]:
    """Integrate ``dx/dt = v(x, t)`` from t = 0 to 1 with Euler: ``x <- x + (t[i+1] - t[i]) v(x, t[i])``.

    Args:
      velocity_fn: ``(x, t) -> v`` with v shaped like x; t a float32 scalar.
      x0: initial noise, any shape.
    Returns:
      (x at t = 1, per-step velocities [num_steps, *x0.shape]).
    """
    ts = flow_times(num_steps)

    def step(x, t01):
        t0, t1 = t01
        v = velocity_fn(x, t0)
        return x + (t1 - t0) * v, v

    return jax.lax.scan(step, jnp.asarray(x0, jnp.float32), (ts[:-1], ts[1:]))


# ---- unicycle action space -----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class UnicycleConfig:
    """``UnicycleAccelCurvatureActionSpace`` constants: action channels are (accel, curvature)
    normalized as ``(value - mean) / std``; waypoints every ``dt`` seconds."""

    accel_mean: float = 0.0  # m/s^2
    accel_std: float = 1.0  # m/s^2
    curvature_mean: float = 0.0  # 1/m
    curvature_std: float = 1.0  # 1/m
    dt: float = 0.1  # s between waypoints

    def __post_init__(self):
        for name in ("accel_std", "curvature_std", "dt"):
            v = getattr(self, name)
            if not v > 0:
                raise ValueError(f"{name}={v} must be > 0")

    @classmethod
    def alpamayo_r1(cls) -> UnicycleConfig:
        """Normalization quoted for the Alpamayo-R1-10B checkpoint by a third-party port (unverified)."""
        return cls(
            accel_mean=0.02902694707164455,
            accel_std=0.6810426736454882,
            curvature_mean=0.0002692167976330542,
            curvature_std=0.026148280660833106,
            dt=0.1,
        )


def action_to_traj(
    action: jax.Array, v0, *, space: UnicycleConfig = UnicycleConfig()
) -> tuple[jax.Array, jax.Array]:
    """Integrate the unicycle model from the current pose (origin, heading 0, speed v0).

    ``v[i+1] = v[i] + a[i] dt``; ``theta[i+1] = theta[i] + kappa[i] (v[i] dt + a[i] dt^2 / 2)``;
    positions by the trapezoid rule on ``v (cos theta, sin theta)``.

    Args:
      action: [..., T, 2] normalized (accel, curvature).
      v0: [...] initial speed (m/s), broadcast against the batch axes.
    Returns:
      xy [..., T, 2] (m) and yaw [..., T] (rad) of the T future waypoints.
    """
    if action.ndim < 2 or action.shape[-1] != 2:
        raise ValueError(f"action must be [..., T, 2], got shape {action.shape}")
    dt = space.dt
    accel = action[..., 0] * space.accel_std + space.accel_mean  # [..., T]
    kappa = action[..., 1] * space.curvature_std + space.curvature_mean
    v0 = jnp.broadcast_to(jnp.asarray(v0, jnp.float32), accel.shape[:-1])[..., None]  # [..., 1]
    vel = jnp.concatenate([v0, v0 + jnp.cumsum(accel * dt, axis=-1)], axis=-1)  # [..., T+1]
    dtheta = kappa * vel[..., :-1] * dt + kappa * accel * (0.5 * dt * dt)
    theta = jnp.concatenate([jnp.zeros_like(v0), jnp.cumsum(dtheta, axis=-1)], axis=-1)  # [..., T+1]
    vx, vy = vel * jnp.cos(theta), vel * jnp.sin(theta)
    x = jnp.cumsum((vx[..., :-1] + vx[..., 1:]) * (0.5 * dt), axis=-1)
    y = jnp.cumsum((vy[..., :-1] + vy[..., 1:]) * (0.5 * dt), axis=-1)
    return jnp.stack([x, y], axis=-1), theta[..., 1:]
