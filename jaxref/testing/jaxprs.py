"""What a traced program holds: the shapes of its intermediates (e.g. to check that ``vmap`` over
trajectories never copies the shared cache per trajectory)."""

from __future__ import annotations

from jax.extend import core as jcore


def walk_jaxpr_shapes(jaxpr) -> list[tuple[int, ...]]:
    """Shapes of every intermediate of a (closed) jaxpr, recursing into scan / cond / pjit bodies."""
    inner = jaxpr.jaxpr if hasattr(jaxpr, "jaxpr") else jaxpr
    shapes = []
    for eqn in inner.eqns:
        shapes += [tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape")]
        for p in eqn.params.values():
            for sub in p if isinstance(p, (tuple, list)) else (p,):
                if isinstance(sub, (jcore.ClosedJaxpr, jcore.Jaxpr)):
                    shapes += walk_jaxpr_shapes(sub)
    return shapes
