"""``device.fast_twin``: the jit-compiled emulated layer against the eager emulation, bit for bit.

Oracle: the eager emulation itself (``TTExpert.layer`` one ttnn call at a time), on the parity
script's generated model (weights and caches generated inside the compiled layer) at the tiny
preset and on two layers at alpamayo_tt widths (S = 4600, Smax = 8192), both attention modes and
both weight formats; also the cache rows each writes, a traced stack replaying the twin, and
independent steps through its batched layer (``FastTwin.many``) against eager steps in order.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from costmodel.blackhole.port import Port
from device.emulation import Emulation
from device.fast_twin import FastTwin
from device.graph import TTExpert
from device.parity_model import GeneratedModel
from jaxref.config import ExpertConfig


def _expert(model: GeneratedModel, port: Port):
    ns = Emulation()
    dev = ns.open_device(0)
    cfg = model.cfg
    layers = model.emulation_layers(ns, dev, weights=port.precision.weights)
    final = np.asarray(model.params.final_norm, np.float32).reshape(1, 1, 1, -1)
    ex = TTExpert(ns, dev, layers, final, cfg=cfg, port=port)
    ex.set_context(model.seq_len)
    return ns, ex, model.emulation_caches(ns, dev, fmt=port.precision.cache)


def _x(cfg: ExpertConfig, seed: int) -> np.ndarray:
    return np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (cfg.num_tokens, cfg.hidden)), np.float32)


def _check_layers_bitwise(model: GeneratedModel, port: Port, layers):
    ns, ex, caches = _expert(model, port)
    _, ex_e, caches_e = _expert(model, port)
    twin = FastTwin(ex, ns)
    ex.layer_fn = twin
    for i in layers:
        x = _x(model.cfg, i)
        for _ in range(2):  # the second call: the caches already hold fill_cache rows
            got, want = ex.run_layer(i, x, caches), ex_e.run_layer(i, x, caches_e)
            np.testing.assert_array_equal(got, want, err_msg=f"layer {i}")
        for a, b in zip(caches[i], caches_e[i], strict=True):
            np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value), err_msg=f"cache of layer {i}")
    assert twin.compilations == 2  # one per cache state (no fill_cache rows yet / with them), for every layer
    return ex, ex_e, caches, caches_e


TINY = ExpertConfig.tiny(head_dim=32, num_layers=3)
CASES = [Port.for_expert(TINY, weights="bfp8"), Port.for_expert(TINY, weights="bf16", attn_mode="standard"),
         Port.for_expert(TINY, weights="bfp8", cache="bfp8")]


@pytest.fixture(scope="module")
def tiny():
    return GeneratedModel.build(jax.random.PRNGKey(2), TINY, 100, fill=7.0)


@pytest.mark.parametrize("port", CASES, ids=["bfp8-decode", "bf16-standard", "bfp8-cache"])
def test_twin_equals_eager_bit_for_bit_tiny(tiny, port):
    ex, ex_e, caches, caches_e = _check_layers_bitwise(tiny, port, range(TINY.num_layers))
    # a traced stack through the twin replays it: the same bits as the eager stack
    emb = _x(TINY, 9)
    np.testing.assert_array_equal(ex.forward(emb, caches), ex_e.forward(emb, caches_e, traced=False))
    np.testing.assert_array_equal(ex.forward(emb, caches), ex.forward(emb, caches, traced=False))


def _check_steps_bitwise(model: GeneratedModel, ex, ex_e, caches, caches_e, n: int):
    """``TTExpert.steps`` through the twin's batched layer (``FastTwin.many``) against the eager steps,
    one after another: the velocities and the cache rows the last one leaves."""
    cfg, p = model.cfg, model.params
    xs = np.asarray(jax.random.normal(jax.random.PRNGKey(7), (n, cfg.num_tokens, cfg.action_dim)), np.float32)
    ts = np.linspace(0.1, 0.9, n)
    got = ex.steps(p.action_in, p.action_out, xs, ts, caches)
    want = [ex_e.step(p.action_in, p.action_out, x, float(t), caches_e, traced=False) for x, t in zip(xs, ts)]
    np.testing.assert_array_equal(got, np.stack(want))
    for i in range(cfg.num_layers):
        for a, b in zip(caches[i], caches_e[i], strict=True):
            np.testing.assert_array_equal(np.asarray(a.value), np.asarray(b.value), err_msg=f"cache of layer {i}")


@pytest.mark.parametrize("port", CASES, ids=["bfp8-decode", "bf16-standard", "bfp8-cache"])
def test_twin_steps_equal_eager_steps_bit_for_bit_tiny(tiny, port):
    ns, ex, caches = _expert(tiny, port)
    _, ex_e, caches_e = _expert(tiny, port)
    ex.layer_fn = FastTwin(ex, ns)
    _check_steps_bitwise(tiny, ex, ex_e, caches, caches_e, 3)


def test_sample_from_a_given_first_velocity_is_the_sample(tiny):
    """``TTExpert.sample(v0=...)`` with the traced stack's velocity at (x0, 0) (what device.parity passes)
    gives the sample's bits: its first step would replay that same stack."""
    from jaxref.action import action_in_proj, action_out_proj

    port, p = CASES[0], tiny.params
    ns, ex, caches = _expert(tiny, port)
    ex.layer_fn = FastTwin(ex, ns)
    x0 = np.asarray(jax.random.normal(jax.random.PRNGKey(5), (TINY.num_tokens, TINY.action_dim)), np.float32)
    want_a, want_vs = ex.sample(p.action_in, p.action_out, x0, caches, seq_len=tiny.seq_len)
    emb = np.asarray(action_in_proj(p.action_in, x0, 0.0, cfg=TINY.action_in))
    v0 = np.asarray(action_out_proj(p.action_out, ex.forward(emb, caches)))
    got_a, got_vs = ex.sample(p.action_in, p.action_out, x0, caches, seq_len=tiny.seq_len, v0=v0)
    np.testing.assert_array_equal(got_vs, want_vs)
    np.testing.assert_array_equal(got_a, want_a)


def test_twin_equals_eager_bit_for_bit_alpamayo_tt_widths():
    cfg = dataclasses.replace(ExpertConfig.alpamayo_tt(), num_layers=2)
    model = GeneratedModel.build(jax.random.PRNGKey(0), cfg, 4600, fill=7.0)
    ex, ex_e, caches, caches_e = _check_layers_bitwise(model, Port.for_expert(cfg, weights="bfp8"), (0, 1))
    _check_steps_bitwise(model, ex, ex_e, caches, caches_e, 2)


def test_twin_rejects_a_recorder():
    from device.recorder import Recorder

    ns = Emulation()
    with pytest.raises(TypeError, match="ns must be a device.emulation.Emulation, got Recorder"):
        FastTwin(None, Recorder(ns))
