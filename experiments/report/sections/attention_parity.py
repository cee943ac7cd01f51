"""Every registered attention algorithm (``jaxref.attention.IMPLEMENTATIONS``) against the dense
reference, on single-device emulations and on a ('cube', 'pe') mesh of fake CPU devices.

Each row runs one registry entry (tiles sized to the problem) on one problem through
``jaxref.checks``: max-abs of out and of lse, the PCC of out, and the count of non-finite values.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention import IMPLEMENTATIONS, MESH_AXES, Flash, Implementation
from jaxref.checks import AttentionCheck, check_implementations

# fp32 online softmax vs the dense softmax: a few ulp of |out| <= max|v| ~ 4 and of lse ~ log S.
MAX_ABS_TOL = 2e-5


@dataclasses.dataclass(frozen=True)
class Problem:
    """One attention problem: q [T, N, H], k / v [S, K, H], float32 N(0, 1); the algorithms sweep
    ``tile`` keys at a time and ``q_block`` query rows at a time (None = all T)."""

    name: str
    T: int
    S: int
    N: int
    K: int
    H: int
    causal: bool
    tile: int
    q_block: int | None

    def label(self) -> str:
        kind = "causal" if self.causal else "non-causal"
        blocks = "" if self.q_block is None else f", q_block {self.q_block}"
        return f"{self.name}: T={self.T}, S={self.S}, N/K={self.N}/{self.K}, H={self.H}, {kind}, tile {self.tile}{blocks}"


def problems(quick: bool) -> dict[str, Problem]:
    """Prefill (causal, G = 8 so ring runs C = G = 8 CUBEs) and decode (one query over a long cache).

    Tiles are sized so that causal tile skips, ragged tails and rank-local partial tiles all occur;
    the numbers of tiles (which the sweeps unroll, hence compile time) stay small in ``quick``.
    """
    if quick:
        return {"prefill": Problem("prefill", 120, 120, 16, 2, 64, True, tile=32, q_block=64),
                "decode": Problem("decode", 1, 1000, 16, 2, 128, False, tile=256, q_block=None)}
    return {"prefill": Problem("prefill", 1000, 1000, 16, 2, 64, True, tile=96, q_block=128),
            "decode": Problem("decode", 1, 8000, 16, 2, 128, False, tile=512, q_block=None)}


def runs_on(name: str, quick: bool) -> tuple[str, ...]:
    """Problems a registry entry runs on. Every row costs an XLA compile (seconds on CPU), so
    ``quick`` runs split-KV on decode and the rest on prefill; the ring (prefill-SP, its PEs split
    the query rows) never runs decode."""
    if name.startswith("ring"):
        return ("prefill",)
    if quick:
        return ("decode",) if name.startswith("split_kv") else ("prefill",)
    return ("prefill", "decode")


def describe(cfg) -> str:
    """``Name(knob=value, ...)`` with the knobs that differ from their defaults (no mesh)."""
    knobs = [f"{f.name}={getattr(cfg, f.name)!r}" for f in dataclasses.fields(cfg)
             if f.name != "mesh" and getattr(cfg, f.name) != f.default]
    return f"{type(cfg).__name__}({', '.join(knobs)})"


def sized(impl: Implementation, p: Problem):
    """The registry config with tiles sized to the problem (flash sweeps p.tile keys per tile, the
    distributed forms a quarter of it per rank / block; q blocks as the problem says)."""
    cfg = impl.config
    if not hasattr(cfg, "tile"):
        return cfg
    tile = p.tile if isinstance(cfg, Flash) else p.tile // 4
    q_block = getattr(cfg, "q_block", None) and p.q_block
    return dataclasses.replace(cfg, tile=tile, q_block=q_block)


def inputs(p: Problem, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32)
                 for shape in ((p.T, p.N, p.H), (p.S, p.K, p.H), (p.S, p.K, p.H)))


def meshes_for(impls) -> dict[tuple[int, int], jax.sharding.Mesh]:
    """One ('cube', 'pe') mesh per shape the sharded entries need: the default backend's devices if
    there are enough (a real mesh), else the fake CPU ones (the report starts JAX with 8)."""
    out = {}
    for impl in impls.values():
        if impl.mesh is None or impl.mesh in out:
            continue
        need = int(np.prod(impl.mesh))
        devices = jax.devices() if jax.device_count() >= need else jax.devices("cpu")
        if len(devices) < need:
            raise ValueError(f"{impl.name}: needs {need} devices, JAX has {len(devices)} (set "
                             f"jax.config.update('jax_num_cpu_devices', {need}) before JAX starts)")
        out[impl.mesh] = jax.make_mesh(impl.mesh, MESH_AXES, devices=devices[:need])
    return out


def row(check: AttentionCheck, impl: Implementation, p: Problem) -> dict:
    kind = "1 device (emulated ranks)" if impl.mesh is None else f"{int(np.prod(impl.mesh))} devices"
    mesh = "" if impl.mesh is None else f" on a {impl.mesh[0]}x{impl.mesh[1]} mesh"
    return {"algorithm": f"{impl.name}: {describe(sized(impl, p))}{mesh}",
            "problem": p.name, "kind": kind, "out_max_abs": check.out.max_abs, "out_pcc": check.out.pcc,
            "lse_max_abs": check.lse.max_abs, "nonfinite": check.out.nonfinite + check.lse.nonfinite,
            "ok": check.ok(MAX_ABS_TOL)}


def attention_rows(quick: bool) -> tuple[dict[str, Problem], list[dict]]:
    """(problems, one row per registry entry (but the reference itself) and problem; in ``quick``
    each entry on one problem)."""
    probs = problems(quick)
    impls = {n: i for n, i in IMPLEMENTATIONS.items() if n != "reference"}
    meshes = meshes_for(impls)
    rows = []
    for name, p in probs.items():
        q, k, v = inputs(p)
        chosen = {n: i for n, i in impls.items() if name in runs_on(n, quick)}
        by_name = {c.name: c for c in check_implementations(q, k, v, causal=p.causal, implementations=chosen,
                                                            meshes=meshes, configure=lambda i, p=p: sized(i, p))}
        rows += [row(by_name[n], chosen[n], p) for n in chosen if n in by_name]
    return probs, rows
