"""The report's memory-saving golden sample (``jaxref.testing.packed_random_model``: bf16 bit patterns
unpacked inside the layer scan) computes exactly what the library's ``velocity`` computes on the same
(bf16-valued) weights and cache."""

import dataclasses

import jax
import numpy as np

from jaxref.config import ExpertConfig
from jaxref.expert import KVCache, velocity
from jaxref.testing import packed_random_model, unpack_bf16


def test_packed_bf16_model_equals_library_velocity():
    cfg = ExpertConfig.tiny()
    state, vfn = packed_random_model(jax.random.key(0), cfg, 100, 3)
    small, packed = state
    layers, (k, v) = jax.tree.map(unpack_bf16, packed)
    params = dataclasses.replace(small, layers=layers)
    cache = KVCache.create(k, v, 100, 3)
    x = jax.random.normal(jax.random.key(1), (cfg.num_tokens, cfg.action_dim))
    np.testing.assert_allclose(
        jax.jit(vfn)(state, x, 0.3), velocity(params, x, 0.3, cache, cfg=cfg), rtol=1e-6, atol=1e-6
    )
    # The weights really are bf16 values (the packing is not a no-op float32 copy).
    assert packed[0].wq.dtype == np.uint16
    np.testing.assert_array_equal(layers.wq, layers.wq.astype("bfloat16").astype("float32"))
