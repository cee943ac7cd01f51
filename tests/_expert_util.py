"""Shared helpers of the expert tests: max-abs, and an independent torch ``PerWaypointActionInProjV2``
written from the reference formula (shared/REFERENCE.md section 1), not from ``jaxref.action``.
The small-model fixture ``tiny_setup`` and ``walk_jaxpr_shapes`` live in ``jaxref.testing`` (shared
with the report and the benchmarks) and are re-exported here; PCC is ``jaxref.numerics.pcc``."""

from __future__ import annotations

import math

import numpy as np

from jaxref.testing import tiny_setup, walk_jaxpr_shapes

__all__ = ["max_abs", "tiny_setup", "torch_action_in_proj", "walk_jaxpr_shapes"]


def max_abs(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


# ---- independent torch action_in_proj (from the formula) -----------------------------------
def torch_action_in_proj(
    *,
    action_dim: int,
    out_dim: int,
    hidden: int,
    num_layers: int,
    num_freqs: int = 10,
    max_freq: float = 100.0,
    eps: float = 1e-5,
    bf16_freqs: bool = False,
):
    """A torch module with alpamayo's structure and parameter names:
    ``sinus.{c}.freqs``, ``timestep_fourier_encoder.freqs``, ``encoder.trunk.{j}``, ``norm``.
    ``forward(x [B, T, A], t [B]) -> [B, T, out_dim]`` in float32."""
    import torch
    from torch import nn

    class Fourier(nn.Module):
        def __init__(self):
            super().__init__()
            f = torch.logspace(0, math.log10(max_freq), steps=num_freqs)
            if bf16_freqs:
                f = f.to(torch.bfloat16).float()
            self.register_buffer("freqs", f[None, :])

        def forward(self, s):
            arg = s[..., None] * self.freqs * 2 * torch.pi
            return torch.cat([torch.sin(arg), torch.cos(arg)], -1) * math.sqrt(2)

    class RMSNorm(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
            return y.type_as(x) * self.weight

    class Encoder(nn.Module):
        def __init__(self, c_in):
            super().__init__()
            mods = [nn.Linear(c_in, hidden), nn.SiLU()]
            for i in range(num_layers):
                if i < num_layers - 1:
                    mods += [RMSNorm(hidden), nn.Linear(hidden, hidden), nn.SiLU()]
                else:
                    mods += [RMSNorm(hidden), nn.Linear(hidden, out_dim)]
            self.trunk = nn.Sequential(*mods)

    class ActionInProj(nn.Module):
        def __init__(self):
            super().__init__()
            self.sinus = nn.ModuleList([Fourier() for _ in range(action_dim)])
            self.timestep_fourier_encoder = Fourier()
            self.encoder = Encoder(2 * num_freqs * (action_dim + 1))
            self.norm = nn.LayerNorm(out_dim, eps=eps)

        def forward(self, x, t):
            B, T, _ = x.shape
            feats = [s(x[:, :, i]) for i, s in enumerate(self.sinus)]
            feats.append(self.timestep_fourier_encoder(t)[:, None, :].expand(B, T, -1))
            h = self.encoder.trunk(torch.cat(feats, -1).flatten(0, 1))
            return self.norm(h.reshape(B, T, -1))

    return ActionInProj().eval()
