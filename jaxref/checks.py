"""Every registered attention algorithm against the dense reference, as ``Comparison`` results.

``check_implementations(q, k, v, causal=...)`` runs each ``jaxref.attention.IMPLEMENTATIONS``
entry (sharded ones on the meshes given) and compares its (out, lse) with ``attention_reference``
through ``jaxref.numerics.compare`` (tt-metal PCC, max-abs, non-finite counts): the one place
the report's attention rows and ad-hoc checks get their numbers from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import jax
import numpy as np

from jaxref.attention import IMPLEMENTATIONS, Implementation, attention_reference
from jaxref.numerics import Comparison, compare


@dataclasses.dataclass(frozen=True)
class AttentionCheck:
    """One algorithm on one problem against the dense reference."""

    name: str
    out: Comparison  # out [T, N, H] vs the reference's
    lse: Comparison  # lse [N, T] vs the reference's

    def ok(self, max_abs: float) -> bool:
        """Both within ``max_abs`` and no non-finite value the reference lacks (NaN never passes)."""
        return all(c.finite and c.max_abs <= max_abs for c in (self.out, self.lse))


def check_against_reference(attn: Callable, q, k, v, *, causal: bool = False, name: str = "",
                            reference=None) -> AttentionCheck:
    """Run ``attn(q, k, v, causal=causal)`` jitted and compare with the dense reference.

    Args:
      attn: an attention config (or any callable with its signature) returning (out, lse).
      q [T, N, H], k / v [S, K, H]: float inputs (the reference sees the same arrays).
      reference: optional precomputed ``attention_reference`` (out, lse) for these inputs.
    """
    if reference is None:
        reference = jax.jit(lambda q, k, v: attention_reference(q, k, v, causal=causal))(q, k, v)
    got = jax.jit(lambda q, k, v: attn(q, k, v, causal=causal))(q, k, v)
    (out, lse), (r_out, r_lse) = (tuple(np.asarray(a) for a in x) for x in (got, reference))
    if out.shape != r_out.shape or lse.shape != r_lse.shape:
        raise ValueError(f"{name or attn}: returned out {out.shape}, lse {lse.shape}; the reference "
                         f"returns out {r_out.shape}, lse {r_lse.shape}")
    return AttentionCheck(name, compare(r_out, out), compare(r_lse, lse))


def check_implementations(q, k, v, *, causal: bool = False,
                          implementations: Mapping[str, Implementation] | None = None,
                          meshes: Mapping[tuple[int, int], jax.sharding.Mesh] | None = None,
                          configure: Callable[[Implementation], Callable] | None = None) -> list[AttentionCheck]:
    """``check_against_reference`` for every registry entry that supports the problem.

    Args:
      implementations: the entries (default ``IMPLEMENTATIONS``); skipped are entries without
        causal support on a causal problem, entries whose ``group_multiple`` does not divide
        G = N // K, and sharded entries without a mesh of their shape in ``meshes``.
      meshes: (C, P) -> a ('cube', 'pe') mesh for the sharded entries.
      configure: optional ``impl -> config`` (e.g. tiles resized to the problem); default
        ``impl.config``. Sharded configs are then bound to their mesh.
    """
    impls = IMPLEMENTATIONS if implementations is None else implementations
    G = q.shape[1] // k.shape[1]
    reference = jax.jit(lambda q, k, v: attention_reference(q, k, v, causal=causal))(q, k, v)
    checks = []
    for name, impl in impls.items():
        if G % impl.group_multiple or (causal and not impl.causal):
            continue
        mesh = None
        if impl.mesh is not None:
            mesh = (meshes or {}).get(impl.mesh)
            if mesh is None:
                continue
        cfg = impl.config if configure is None else configure(impl)
        if mesh is not None:
            cfg = cfg.with_mesh(mesh)
        checks.append(check_against_reference(cfg, q, k, v, causal=causal, name=name, reference=reference))
    return checks
