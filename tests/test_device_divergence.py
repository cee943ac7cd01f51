"""``device.divergence``: the first op of a layer that departs from the golden is named.

Oracle: the device-precision golden ``decoder_layer`` (its ``tap`` values at the op boundaries).
Faults are injected into the graph (a perturbed op output, a wrong program config, swapped K / V
caches); each test checks that the injected op - and no op before it - is named.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _device_util import Model

from costmodel.blackhole.graph import LAYER_OPS
from costmodel.blackhole.port import Port
from device.divergence import localise
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope
from jaxref.layers import decoder_layer
from jaxref.options import ExpertOptions
from jaxref.precision import cast

TINY = ExpertConfig.tiny(head_dim=32)
GRAPH = Port.for_expert(TINY, weights="bfp8")


@pytest.fixture(scope="module")
def tiny():
    return Model.build(TINY, seq_len=100, std=0.1)


def _localise(model: Model, ex, caches, i: int = 0):
    cfg, S = model.cfg, model.seq_len
    prec = GRAPH.precision
    opts = ExpertOptions(attention="tail_slot", precision=prec)
    layer = jax.tree.map(lambda a: a[i], model.params.layers)
    x = model.golden[i][0]

    def golden(tap):
        return decoder_layer(layer, jnp.asarray(x), (model.cache.k[i], model.cache.v[i]), S,
                             expert_rope(S, 0, cfg=cfg, precision=prec), cfg=cfg, options=opts, tap=tap)

    return localise(ex, i, x, caches, golden, kv_fmt_cast=lambda a: np.asarray(cast(jnp.asarray(a), GRAPH.precision.cache)))


def test_correct_graph_has_no_divergence(tiny):
    ex, caches = tiny.expert(GRAPH)
    res = _localise(tiny, ex, caches)
    assert [r["op"] for r in res["ops"]] == list(LAYER_OPS)
    assert res["first_divergence"] is None, res["ops"]


def test_a_perturbed_op_is_named(tiny):
    """The elementwise mul (SiLU(gate) * up) returns its output plus 5 % noise."""
    ex, caches = tiny.expert(GRAPH)
    mul = ex.ns.mul

    def wrong_mul(a, b, **kw):
        out = mul(a, b, **kw)
        noise = np.asarray(jax.random.normal(jax.random.PRNGKey(0), out.shape)) * 0.05 * float(np.std(out.to_numpy()))
        out.value = out.value + noise
        return out

    ex.ns.mul = wrong_mul
    first = _localise(tiny, ex, caches)["first_divergence"]
    assert first is not None and first["op"] == "mul", first
    assert first["pcc"] < 0.9999 and first["max_abs"] > 0


def test_a_wrong_program_config_is_named(tiny):
    """w1's program config without its fused SiLU: the gate matmul comes out without the activation."""
    ex, caches = tiny.expert(GRAPH)
    ex.matmul["w1"] = dataclasses.replace(ex.matmul["w1"], fused_activation=None)
    first = _localise(tiny, ex, caches)["first_divergence"]
    assert first is not None and first["op"] == "w1", first


def test_swapped_kv_caches_are_named(tiny):
    """K and V cache buffers passed the wrong way round: the writes look right, attention does not."""
    ex, caches = tiny.expert(GRAPH)
    swapped = [(v, k) for k, v in caches]
    first = _localise(tiny, ex, swapped)["first_divergence"]
    assert first is not None and first["op"] == "attention", first
