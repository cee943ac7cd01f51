"""Tune the Blackhole graph's integer knobs by gradient descent; check against exhaustive search.

Knobs: (in0_block_w, per_core_N) of each weight matmul, k_chunk of the attention, and q_chunk in
standard mode. The gradient path relaxes them to positive reals (optimised in log space with
Adam on the relaxed model, ``Relax`` temperatures) with smooth penalties for leaving the feasible
region (L1 capacity, grid size, knob ranges); the result is projected to the valid discrete
configs: the nearest valid config in log space and its valid neighbours, each scored by the
exact model. The exhaustive search scores every valid config with the exact model (vmapped).

The step time is a sum over ops and each knob belongs to one op, so the joint optimum is the
per-op optimum; the exhaustive search enumerates each op's valid configs (and reports the size of
the joint product it stands for).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from costmodel import tuning
from costmodel.blackhole.graph import BlackholeConfig, attention_us, attn_q_rows
from costmodel.blackhole.kinds.matmul import matmul_us
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.port import MATMULS, matmul_shapes
from costmodel.blackhole.sdpa_program_config import sdpa_l1_bytes
from costmodel.compile_options import jit
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax
from costmodel.tuning import Axis
from jaxref.config import ExpertConfig


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def valid_matmul_configs(name: str, hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig) -> list[tuple[int, int]]:
    """Every (in0_block_w, per_core_N) that ``MatmulProgramConfig.validate`` accepts for weight ``name``."""
    M, K, N = matmul_shapes(cfg)[name]
    base, prec = bc.port.matmuls[name], bc.port.precision
    out = []
    for ibw, pcn in itertools.product(_divisors(K // TILE), _divisors(N // TILE)):
        m = dataclasses.replace(base, in0_block_w=float(ibw), per_core_N=float(pcn))
        try:
            m.validate(name, hw, M=M, K=K, N=N, weight_dtype=prec.weights, act_dtype=prec.activations)
        except ValueError:
            continue
        out.append((ibw, pcn))
    return out


def valid_attention_configs(hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig) -> list[tuple[int, int]]:
    """Every (k_chunk, q_chunk) that ``SdpaProgramConfig.validate`` accepts (q_chunk fixed in decode mode)."""
    smax_i = int(bc.smax)
    q_rows = attn_q_rows(bc, cfg)
    attn, prec = bc.port.attention, bc.port.precision
    k_opts = [k for k in range(TILE, smax_i + 1, TILE) if smax_i % k == 0]
    q_opts = [q for q in range(TILE, q_rows + 1, TILE) if q_rows % q == 0] if attn.attn_mode == "standard" \
        else [int(attn.q_chunk)]
    out = []
    for k, q in itertools.product(k_opts, q_opts):
        a = dataclasses.replace(attn, k_chunk=float(k), q_chunk=float(q))
        try:
            a.validate(hw, smax=bc.smax, num_tokens=cfg.num_tokens, group=cfg.group, head_dim=cfg.head_dim,
                       kv_dtype=prec.cache, mask_dtype=prec.mask, act_dtype=prec.activations, fold_heads=bc.fold_heads)
        except ValueError:
            continue
        out.append((k, q))
    return out


# ---- per-op cost functions (exact or relaxed), vmappable over the knob arrays ----------------------
def _matmul_cost(hw, fit, ibw, pcn, *, name, bc, cfg, relax):
    M, K, N = matmul_shapes(cfg)[name]
    m = dataclasses.replace(bc.port.matmuls[name], in0_block_w=ibw, per_core_N=pcn)
    prec = bc.port.precision
    return matmul_us(hw, fit, m, M=M, K=K, N=N, weight_dtype=prec.weights, act_dtype=prec.activations,
                     fidelity=bc.port.compute.fidelity, fused_activation=(name == "w1"), relax=relax)


def _attn_cost(hw, fit, k_chunk, q_chunk, *, bc, cfg, relax):
    b = bc.replace(attention=dataclasses.replace(bc.port.attention, k_chunk=k_chunk, q_chunk=q_chunk))
    return attention_us(hw, fit, b, cfg=cfg, relax=relax)


@functools.partial(jit, fast=True, static_argnames=("name", "bc_static", "cfg"))  # compile-bound: one sweep per op
def _matmul_sweep(hw, fit, ibw, pcn, bc_leaves, *, name, bc_static, cfg):
    bc = jax.tree_util.tree_unflatten(bc_static, bc_leaves)
    return jax.vmap(lambda a, b: _matmul_cost(hw, fit, a, b, name=name, bc=bc, cfg=cfg, relax=None))(ibw, pcn)


@functools.partial(jit, fast=True, static_argnames=("bc_static", "cfg"))  # compile-bound: one sweep
def _attn_sweep(hw, fit, k, q, bc_leaves, *, bc_static, cfg):
    bc = jax.tree_util.tree_unflatten(bc_static, bc_leaves)
    return jax.vmap(lambda a, b: _attn_cost(hw, fit, a, b, bc=bc, cfg=cfg, relax=None))(k, q)


def _score(hw, fit, bc, cfg, op: str, configs: list[tuple[int, int]]) -> np.ndarray:
    """Exact op time (us) of each discrete config."""
    leaves, treedef = jax.tree_util.tree_flatten(bc)
    a = jnp.asarray([c[0] for c in configs], jnp.float32)
    b = jnp.asarray([c[1] for c in configs], jnp.float32)
    if op == "attention":
        return np.asarray(_attn_sweep(hw, fit, a, b, leaves, bc_static=treedef, cfg=cfg))
    return np.asarray(_matmul_sweep(hw, fit, a, b, leaves, name=op, bc_static=treedef, cfg=cfg))


def exhaustive(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig) -> dict:
    """Best valid config per op by scoring every valid config with the exact model.

    Returns {"per_op": {op: {"config", "us", "n_valid"}}, "evaluations": total configs scored,
    "joint_configs": size of the joint space (product of the per-op counts)}.
    """
    per_op, evals, joint = {}, 0, 1
    for op in (*MATMULS, "attention"):
        configs = (valid_attention_configs(hw, bc, cfg=cfg) if op == "attention"
                   else valid_matmul_configs(op, hw, bc, cfg=cfg))
        t = _score(hw, fit, bc, cfg, op, configs)
        i = int(np.argmin(t))
        per_op[op] = {"config": configs[i], "us": float(t[i]), "n_valid": len(configs)}
        evals += len(configs)
        joint *= len(configs)
    return {"per_op": per_op, "evaluations": evals, "joint_configs": joint}


# ---- gradient path ------------------------------------------------------------------------------------
def _penalty_us(x, *, scale_us: float = 1e3):
    """Smooth hinge: 0 for x <= 0 (feasible), grows as scale_us * x^2 beyond."""
    return scale_us * jnp.square(jax.nn.relu(x))


def relaxed_objective(log_knobs: dict, hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
                      relax: Relax) -> jax.Array:
    """Relaxed layer time of the tuned ops (us) plus feasibility penalties; ``log_knobs`` maps
    'wqkv'... -> log([in0_block_w, per_core_N]) and 'attention' -> log([k_chunk, q_chunk])."""
    total = 0.0
    l1 = hw.l1_bytes_per_core
    prec, attn = bc.port.precision, bc.port.attention
    for name in MATMULS:
        _, K, N = matmul_shapes(cfg)[name]
        ibw, pcn = jnp.exp(log_knobs[name][0]), jnp.exp(log_knobs[name][1])
        total = total + _matmul_cost(hw, fit, ibw, pcn, name=name, bc=bc, cfg=cfg, relax=relax)
        base = bc.port.matmuls[name]
        m = dataclasses.replace(base, in0_block_w=ibw, per_core_N=pcn)
        Kt, Nt, cores = K // TILE, N // TILE, base.grid_x * base.grid_y
        total = total + _penalty_us(m.l1_bytes(weight_dtype=prec.weights, act_dtype=prec.activations) / l1 - 1.0)
        total = total + _penalty_us(Nt / pcn / cores - 1.0) + _penalty_us(ibw / Kt - 1.0)
        total = total + _penalty_us(1.0 - ibw) + _penalty_us(1.0 - pcn) + _penalty_us(pcn / Nt - 1.0)
    k, q = jnp.exp(log_knobs["attention"][0]), jnp.exp(log_knobs["attention"][1])
    total = total + _attn_cost(hw, fit, k, q, bc=bc, cfg=cfg, relax=relax)
    q_rows = attn_q_rows(bc, cfg)
    sdpa_rows = q_rows if attn.attn_mode == "decode" else q
    total = total + _penalty_us(sdpa_l1_bytes(q_rows=sdpa_rows, k_chunk=k, head_dim=cfg.head_dim, kv_dtype=prec.cache,
                                              mask_dtype=prec.mask, act_dtype=prec.activations) / l1 - 1.0)
    total = total + _penalty_us(TILE / k - 1.0) + _penalty_us(k / bc.smax - 1.0)
    if attn.attn_mode == "standard":
        total = total + _penalty_us(TILE / q - 1.0) + _penalty_us(q / q_rows - 1.0)
    return total


def project(op: str, relaxed: tuple[float, float], valid: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Candidate discrete configs for a relaxed point (``costmodel.tuning.project``): the valid
    configs whose coordinates are each the nearest valid value below or above (at most 4), or,
    if none of those combinations is valid, the valid config nearest in log space."""
    axes = (Axis("a", tuple(sorted({c[0] for c in valid}))), Axis("b", tuple(sorted({c[1] for c in valid}))))
    ok = set(valid)
    cands = tuning.project({"a": relaxed[0], "b": relaxed[1]}, axes,
                           lambda c: None if (c["a"], c["b"]) in ok else "not a valid config of " + op,
                           radii=(1,), everything=lambda: [{"a": a, "b": b} for a, b in valid], what=f"{op} config")
    return [(c["a"], c["b"]) for c in cands]


@functools.partial(jit, fast=True, static_argnames=("bc_static", "cfg", "relax", "steps", "lr"))  # compile-bound: one run per tune
def _descend(log_knobs, hw, fit, bc_leaves, *, bc_static, cfg, relax, steps, lr):
    bc = jax.tree_util.tree_unflatten(bc_static, bc_leaves)
    return tuning.descend(lambda x: relaxed_objective(x, hw, fit, bc, cfg=cfg, relax=relax), log_knobs,
                          steps=steps, lr=lr)


def gradient_tune(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
                  relax: Relax | None = None, steps: int = 300, lr: float = 0.05) -> dict:
    """Gradient descent on the relaxed knobs from ``bc``'s values, then projection.

    Returns {"per_op": {op: {"start", "relaxed", "config", "us"}}, "gradient_steps",
    "evaluations" (gradient steps + discrete candidates scored), "objective" (relaxed values)}.
    ``relax`` defaults to ``Relax()``.
    """
    relax = Relax() if relax is None else relax
    attn = bc.port.attention
    start = {name: (float(m.in0_block_w), float(m.per_core_N)) for name, m in bc.port.matmuls.items()}
    start["attention"] = (float(attn.k_chunk), float(attn.q_chunk))
    x0 = {k: jnp.log(jnp.asarray(v, jnp.float32)) for k, v in start.items()}
    leaves, treedef = jax.tree_util.tree_flatten(bc)
    x, vals = _descend(x0, hw, fit, leaves, bc_static=treedef, cfg=cfg, relax=relax, steps=steps, lr=lr)
    per_op, evals = {}, steps
    for op in (*MATMULS, "attention"):
        relaxed = tuple(float(v) for v in jnp.exp(x[op]))
        valid = (valid_attention_configs(hw, bc, cfg=cfg) if op == "attention"
                 else valid_matmul_configs(op, hw, bc, cfg=cfg))
        if op == "attention" and attn.attn_mode == "decode":
            relaxed = (relaxed[0], float(attn.q_chunk))  # q_chunk is unused by the decode kernel
        cand = project(op, relaxed, valid)
        t = _score(hw, fit, bc, cfg, op, cand)
        i = int(np.argmin(t))
        per_op[op] = {"start": start[op], "relaxed": relaxed, "config": cand[i], "us": float(t[i]),
                      "candidates": len(cand)}
        evals += len(cand)
    return {"per_op": per_op, "gradient_steps": steps, "evaluations": evals,
            "objective": (float(vals[0]), float(vals[-1]))}


def apply_configs(bc: BlackholeConfig, per_op: dict) -> BlackholeConfig:
    """``bc`` with the tuned configs of ``per_op`` ({op: {"config": (a, b)}}) applied."""
    matmuls = bc.port.matmuls.replace(**{
        name: dataclasses.replace(bc.port.matmuls[name], in0_block_w=float(per_op[name]["config"][0]),
                                  per_core_N=float(per_op[name]["config"][1])) for name in MATMULS})
    k, q = per_op["attention"]["config"]
    return bc.replace(matmuls=matmuls, k_chunk=float(k), q_chunk=float(q))


__all__ = [
    "apply_configs",
    "exhaustive",
    "gradient_tune",
    "project",
    "relaxed_objective",
    "valid_attention_configs",
    "valid_matmul_configs",
]
