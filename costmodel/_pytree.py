"""A frozen dataclass that is also a JAX pytree.

Fields are pytree leaves (differentiable, vmappable numbers) unless declared with
``static_field()``; static fields are part of the tree structure, so they must be hashable and a
change recompiles a jitted function (the jax ``static_argnames`` contract, carried by the tree).
"""

from __future__ import annotations

import dataclasses

import jax


def static_field(**kwargs):
    """A dataclass field that is tree metadata (hashable, not traced)."""
    metadata = dict(kwargs.pop("metadata", {}) or {})
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def pytree_dataclass(cls):
    """Make ``cls`` a frozen dataclass registered as a pytree (static fields -> treedef)."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get("static", False)]
    meta = [f.name for f in fields if f.metadata.get("static", False)]
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)


def leaf_names(tree) -> list[str]:
    """Dotted names of the leaves of a pytree of dataclasses, in ``tree_leaves`` order."""
    paths, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(p, simple=True, separator=".") for p, _ in paths]
