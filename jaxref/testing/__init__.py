"""Shared fixtures and oracles of the tests and the report's sections (not part of the model API).

* ``random_models``: random expert models at any preset's shapes: ``random_setup`` / ``tiny_setup``
  (params, cache, input; the second cached for the tests), ``packed_random_model`` (bf16 bit patterns
  unpacked inside the layer scan, for a full-size sample on a small machine) and ``LayerwiseBf16Model``
  (bf16-valued weights generated per layer inside the scan, run under any precision policy).
* ``hf_oracle`` (needs the ``oracle`` extra: torch + transformers, imported on first use): HF
  ``Qwen3VLTextModel`` / decoder layers holding a golden's weights, fed its cache.
* ``jaxprs``: ``walk_jaxpr_shapes``, the shapes of a traced program's intermediates (no per-trajectory
  cache copy under ``vmap``).
* ``collectives``: the collectives of a lowered StableHLO program (rounds, bytes per device), to
  check a sharded algorithm's schedule against what it really sends.

``import jaxref.testing`` imports neither torch nor transformers.
"""

from jaxref.testing.jaxprs import walk_jaxpr_shapes
from jaxref.testing.random_models import (
    LayerwiseBf16Model,
    init_packed_layers,
    pack_bf16,
    packed_random_model,
    random_setup,
    tiny_setup,
    unpack_bf16,
)

__all__ = [
    "LayerwiseBf16Model",
    "init_packed_layers",
    "pack_bf16",
    "packed_random_model",
    "random_setup",
    "tiny_setup",
    "unpack_bf16",
    "walk_jaxpr_shapes",
]
