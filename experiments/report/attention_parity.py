"""Every ADR-0060 attention algorithm against the dense reference, on single-device emulations and
on a ('cube', 'pe') mesh of fake CPU devices (``jax.shard_map``).

Each row runs one algorithm on one problem and compares its (out [T, N, H], lse [N, T]) with
``attention_reference`` on the same float32 inputs: max-abs of out and of lse, and the PCC of out.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention import (
    attention_reference,
    flash_attention,
    ring_attention,
    ring_attention_sharded,
    split_kv_attention,
    split_kv_attention_sharded,
)
from jaxref.numerics import pcc

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


# (label, problem, fn(q, k, v, p: Problem) -> (out, lse), also in quick). Quick runs one variant of
# each algorithm: every row costs an XLA compile of an unrolled sweep, seconds each on CPU.
ALGORITHMS: tuple[tuple[str, str, Callable, bool], ...] = (
    ("flash", "prefill",
     lambda q, k, v, p: flash_attention(q, k, v, causal=p.causal, tile=p.tile, q_block=p.q_block), True),
    ("flash", "decode",
     lambda q, k, v, p: flash_attention(q, k, v, causal=p.causal, tile=p.tile, q_block=p.q_block), True),
    ("split-KV 4x8 ranks, round-robin, tree reduce", "decode",
     lambda q, k, v, p: split_kv_attention(q, k, v, causal=p.causal, tile=p.tile // 4, num_cubes=4,
                                           pes_per_cube=8), True),
    ("split-KV 4x8 ranks, contiguous, all-to-all", "decode",
     lambda q, k, v, p: split_kv_attention(q, k, v, causal=p.causal, tile=p.tile // 4, num_cubes=4,
                                           pes_per_cube=8, placement="contiguous", reduce="all_to_all"), False),
    ("split-KV 2x4 ranks, tree reduce", "prefill",
     lambda q, k, v, p: split_kv_attention(q, k, v, causal=p.causal, tile=p.tile // 4, q_block=p.q_block,
                                           num_cubes=2, pes_per_cube=4), False),
    *((f"ring C=8, {o}", "prefill",
       functools.partial(lambda q, k, v, p, o: ring_attention(q, k, v, causal=p.causal, tile=p.tile // 4,
                                                              q_block=p.q_block, ordering=o), o=o), o == "zigzag")
      for o in ("contiguous", "zigzag", "striped")),
)


@dataclasses.dataclass(frozen=True)
class ShardedCase:
    """A multi-device row: ``fn(q, k, v, *, mesh, p: Problem)`` on a mesh of ``shape`` over ``axes``."""

    label: str
    problem: str
    shape: tuple[int, ...]
    axes: tuple[str, ...]
    fn: Callable
    in_quick: bool = True


SHARDED: tuple[ShardedCase, ...] = (
    ShardedCase("split-KV sharded, 4x2 mesh, tree reduce", "decode", (4, 2), ("cube", "pe"),
                lambda q, k, v, *, mesh, p: split_kv_attention_sharded(q, k, v, mesh=mesh, causal=p.causal,
                                                                       tile=p.tile // 4)),
    ShardedCase("split-KV sharded, 2x4 mesh, contiguous, all-to-all", "prefill", (2, 4), ("cube", "pe"),
                lambda q, k, v, *, mesh, p: split_kv_attention_sharded(
                    q, k, v, mesh=mesh, causal=p.causal, tile=p.tile // 4, q_block=p.q_block,
                    placement="contiguous", reduce="all_to_all"), in_quick=False),
    ShardedCase("split-KV sharded, 8x1 mesh, one-shot all-reduce", "decode", (8, 1), ("cube", "pe"),
                lambda q, k, v, *, mesh, p: split_kv_attention_sharded(q, k, v, mesh=mesh, causal=p.causal,
                                                                       tile=p.tile // 4, reduce="all_reduce"),
                in_quick=False),
    ShardedCase("ring sharded, 4x2 mesh (C=4 < G, 2 q heads per CUBE), zigzag", "prefill", (4, 2), ("cube", "pe"),
                lambda q, k, v, *, mesh, p: ring_attention_sharded(q, k, v, mesh=mesh, causal=p.causal,
                                                                   ordering="zigzag", tile=p.tile // 4)),
    ShardedCase("ring sharded, 8x1 mesh (C=G), striped", "prefill", (8, 1), ("cube", "pe"),
                lambda q, k, v, *, mesh, p: ring_attention_sharded(q, k, v, mesh=mesh, causal=p.causal,
                                                                   ordering="striped", tile=p.tile // 4),
                in_quick=False),
)


def inputs(p: Problem, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32)
                 for shape in ((p.T, p.N, p.H), (p.S, p.K, p.H), (p.S, p.K, p.H)))


def compare_row(label: str, p: Problem, got, ref, kind: str) -> dict:
    (out, lse), (r_out, r_lse) = (tuple(np.asarray(a) for a in x) for x in (got, ref))
    row = {"algorithm": label, "problem": p.name, "kind": kind, "out_max_abs": float(np.abs(out - r_out).max()),
           "out_pcc": pcc(r_out, out), "lse_max_abs": float(np.abs(lse - r_lse).max())}
    row["ok"] = row["out_max_abs"] <= MAX_ABS_TOL and row["lse_max_abs"] <= MAX_ABS_TOL
    return row


def sharded_rows(probs: dict[str, Problem], refs: dict, data: dict, quick: bool) -> list[dict]:
    """The ``SHARDED`` rows; each needs prod(shape) JAX devices (the report starts JAX with 8 CPU ones)."""
    rows = []
    for case in SHARDED:
        if quick and not case.in_quick:
            continue
        need = int(np.prod(case.shape))
        # The default backend's devices if there are enough (a real mesh), else the fake CPU ones.
        devices = jax.devices() if jax.device_count() >= need else jax.devices("cpu")
        if len(devices) < need:
            raise ValueError(f"{case.label}: needs {need} devices, JAX has {len(devices)} (set "
                             f"jax.config.update('jax_num_cpu_devices', {need}) before JAX starts)")
        mesh = jax.make_mesh(case.shape, case.axes, devices=devices[:need])
        p = probs[case.problem]
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        got = jax.jit(functools.partial(case.fn, mesh=mesh, p=p))(*jax.device_put(data[p.name], replicated))
        rows.append(compare_row(case.label, p, got, refs[p.name], f"{need} {devices[0].platform} devices"))
    return rows


def attention_rows(quick: bool) -> tuple[dict[str, Problem], list[dict]]:
    """(problems, one row per algorithm and sharded case; one variant of each algorithm in ``quick``)."""
    probs = problems(quick)
    data = {name: inputs(p) for name, p in probs.items()}
    refs = {name: jax.jit(functools.partial(attention_reference, causal=p.causal))(*data[name])
            for name, p in probs.items()}
    rows = []
    for label, name, fn, in_quick in ALGORITHMS:
        if quick and not in_quick:
            continue
        p = probs[name]
        got = jax.jit(functools.partial(fn, p=p))(*data[name])
        rows.append(compare_row(label, p, got, refs[name], "1 device (emulated ranks)"))
    return probs, rows + sharded_rows(probs, refs, data, quick)
