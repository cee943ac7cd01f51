"""Decisions over the uncertain rates: which option of a decision wins where, on a grid of two of
the rates the ADR does not publish (GEMM, MATH, the CUBE-NOC / IPCQ link rate: multipliers of the
defaults; the CPU issue cost: ns per primitive op, a composite push 4x that).

``rate_grid(options, hw, x, y)`` evaluates each option (label, config, hardware) at every grid
point with one vmapped graph per option (the model is a JAX function of every float field of the
spec); ``verdict`` names the winner per point, and calls a decision *robust* when one option wins
(within ``TIE``) everywhere, else a *crossover* with the share of the grid each option wins.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import constraints, knobs_of, static_of
from costmodel.compile_options import jit
from costmodel.hardware import AHBM

# the rate axes: the AHBM fields each one multiplies ('issue' sets cpu_issue_s in ns instead)
AXES = {"gemm": ("gemm_flops_per_cycle_per_pe",), "math": ("math_elems_per_cycle_per_pe",),
        "links": ("cube_noc_bytes_per_s", "ipcq_bytes_per_s"), "issue": ()}
AXIS_LABELS = {"gemm": "GEMM rate (x assumed)", "math": "MATH rate (x assumed)",
               "links": "CUBE-NOC / IPCQ rate (x assumed)", "issue": "CPU issue cost per primitive op (ns)"}
TIE = 0.005  # an option within 0.5% of the best counts as winning too (the model's resolution)


def at_rates(hw: AHBM, axis: str, value) -> AHBM:
    """``hw`` with one rate axis moved (``value``: a multiplier, or ns per primitive op for 'issue')."""
    if axis == "issue":
        return dataclasses.replace(hw, cpu_issue_s=value * 1e-9, cpu_issue_composite_s=4.0 * value * 1e-9)
    if axis not in AXES:
        raise ValueError(f"axis={axis!r} unknown; expected one of {tuple(AXES)}")
    return dataclasses.replace(hw, **{f: getattr(hw, f) * value for f in AXES[axis]})


@functools.partial(jit, fast=True, static_argnames=("static", "x_axis", "y_axis"))  # compile-bound: one run per decision
def _grid(hw, knobs, xs, ys, *, static, x_axis, y_axis):
    def one(xv, yv):
        h = at_rates(at_rates(hw, x_axis, xv), y_axis, yv)
        out = case_latency(h, knobs, **dict(static))
        bad = jnp.max(jnp.stack(jnp.broadcast_arrays(*constraints(h, out).values()))) > 0
        return jnp.where(bad, jnp.inf, out["total"])
    return jax.vmap(lambda yv: jax.vmap(lambda xv: one(xv, yv))(xs))(ys)


def rate_grid(options: list[tuple[str, AhbmConfig, AHBM]], x: tuple[str, list], y: tuple[str, list]) -> np.ndarray:
    """Latency (us) [option, y, x] of each (label, config, hardware) over the x-by-y rate grid
    (inf where the option is infeasible there)."""
    (xa, xv), (ya, yv) = x, y
    xs, ys = jnp.asarray(xv, jnp.float32), jnp.asarray(yv, jnp.float32)
    return np.stack([np.asarray(_grid(h, knobs_of(c), xs, ys, static=tuple(sorted(static_of(c).items())),
                                      x_axis=xa, y_axis=ya)) for _, c, h in options])


def verdict(lat: np.ndarray, labels: list[str], handicap: dict[str, float] | None = None) -> dict:
    """{'kind': 'robust' | 'crossover', 'labels' (distinct, in order), 'winner' [y, x] (index into
    'labels' of the fastest), 'share': {label: fraction of the grid it wins within TIE}, 'choice':
    the option that wins everywhere (robust) or most often, 'worst_regret': the most the choice
    loses anywhere (relative)}. Options sharing a label (e.g. one per TILE) count by their best;
    ``handicap`` {label: h} multiplies that option's latency by 1 + h before comparing (an option
    that needs new hardware must win by h)."""
    names = list(dict.fromkeys(labels))
    lat = np.stack([np.min(lat[[i for i, lab in enumerate(labels) if lab == n]], axis=0)
                    * (1 + (handicap or {}).get(n, 0.0)) for n in names])
    labels = names
    best = np.min(lat, axis=0)
    wins = lat <= best[None] * (1 + TIE)
    share = {lab: float(wins[i].mean()) for i, lab in enumerate(labels)}
    everywhere = [lab for i, lab in enumerate(labels) if wins[i].all()]
    choice = everywhere[0] if everywhere else max(share, key=share.get)
    regret = float(np.max(lat[labels.index(choice)] / best - 1))
    return {"kind": "robust" if everywhere else "crossover", "labels": labels, "winner": np.argmin(lat, axis=0),
            "share": share,
            "choice": choice, "worst_regret": regret}
