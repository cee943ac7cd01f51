"""``IMPLEMENTATIONS``: every attention algorithm config with what it supports (one map).

The contract tests (``tests/test_attention_contract.py``; sharded entries in
``tests/test_attention_distributed.py``'s subprocess), the report's attention rows and
``jaxref.checks`` iterate this read-only map. Adding an algorithm = one frozen config class (callable as
``cfg(q, k, v, *, bias, mask, causal, scale) -> (out, lse)``) + one entry here.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable, Mapping

import jax

from jaxref.attention.distributed import SplitKVSharded
from jaxref.attention.flash import Flash
from jaxref.attention.reference import Reference
from jaxref.attention.ring import Ring
from jaxref.attention.ring_sharded import RingSharded
from jaxref.attention.split_kv import SplitKV


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One registered algorithm: a config (small test-sized knobs) and its capability flags."""

    name: str
    config: Callable  # a frozen, hashable config: config(q, k, v, *, bias, mask, causal, scale)
    mask: bool = True  # takes a user bias / boolean mask
    causal: bool = True  # supports causal=True
    grad: bool = True  # differentiable (jax.grad matches the reference's)
    vmap: bool = True  # works under jax.vmap over a batch axis
    mesh: tuple[int, int] | None = None  # (C, P) devices of a ('cube', 'pe') mesh it needs; None = one device
    group_multiple: int = 1  # G = N // K must be a multiple of this (ring: C CUBEs split the group)

    def bind(self, mesh: jax.sharding.Mesh | None = None) -> Callable:
        """The config ready to call: sharded ones bound to ``mesh`` (shape ``self.mesh``)."""
        if self.mesh is None:
            return self.config
        if mesh is None:
            raise ValueError(f"{self.name} needs a ('cube', 'pe') mesh of shape {self.mesh}")
        return self.config.with_mesh(mesh)


def _entries(*impls: Implementation) -> Mapping[str, Implementation]:
    """A read-only name -> entry map (a ``MappingProxyType``): no caller can add, replace or drop an entry."""
    entries = {impl.name: impl for impl in impls}
    if len(entries) != len(impls):
        raise ValueError(f"duplicate implementation names in {[impl.name for impl in impls]}")
    return types.MappingProxyType(entries)


IMPLEMENTATIONS: Mapping[str, Implementation] = _entries(
    Implementation("reference", Reference()),
    Implementation("flash", Flash(tile=7, q_block=5)),
    Implementation("split_kv", SplitKV(tile=3, q_block=4, num_cubes=2, pes_per_cube=2, placement="contiguous",
                                       start_cube=1, start_pe=1)),
    Implementation("ring", Ring(tile=3, q_block=4, ordering="zigzag")),  # C = G CUBEs: any G
    Implementation("split_kv_sharded", SplitKVSharded(tile=4, num_cubes=2, pes_per_cube=4, placement="contiguous",
                                                      start_cube=1), mask=False, grad=False, vmap=False,
                   mesh=(2, 4)),
    Implementation("split_kv_sharded_all_reduce", SplitKVSharded(tile=4, num_cubes=8, pes_per_cube=1,
                                                                 reduce="all_reduce"),
                   mask=False, grad=False, vmap=False, mesh=(8, 1)),
    Implementation("ring_sharded", RingSharded(tile=4, q_block=4, num_cubes=4, pes_per_cube=2, ordering="zigzag"),
                   mask=False, vmap=False, mesh=(4, 2), group_multiple=4),
)


def single_device() -> dict[str, Implementation]:
    """The entries that run on one device."""
    return {name: impl for name, impl in IMPLEMENTATIONS.items() if impl.mesh is None}


def sharded() -> dict[str, Implementation]:
    """The entries that need a ('cube', 'pe') mesh."""
    return {name: impl for name, impl in IMPLEMENTATIONS.items() if impl.mesh is not None}
