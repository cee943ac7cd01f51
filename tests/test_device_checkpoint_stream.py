"""``device.checkpoint_stream``: a safetensors checkpoint read one layer at a time, same numbers.

Oracles: the whole file loaded at once (``jaxref.weights.load_safetensors`` for the golden,
``device.host.layer_from_hf`` on the loaded dict for the device arrays). Memory flatness is checked
by counting the tensors read per layer and the order they are read in (timings and resident size
are the benchmark's: ``experiments.bench_parity_memory --checkpoint``).
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from device import parity
from device.checkpoint_stream import CheckpointStream
from device.emulation import Emulation
from device.host import layer_from_hf
from device.parity_model import GeneratedModel
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, velocity
from jaxref.param_table import LAYER_PARAMS
from jaxref.weights import init_params, load_safetensors, save_safetensors

CFG = ExpertConfig.tiny(head_dim=32, num_layers=4)
PER_LAYER = len(LAYER_PARAMS)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "expert.safetensors"
    save_safetensors(path, init_params(jax.random.PRNGKey(4), CFG), CFG)
    return path


def test_golden_reads_one_layer_at_a_time_and_matches_the_loaded_file(ckpt):
    stream = CheckpointStream(ckpt, CFG)
    cache = GeneratedModel.build(jax.random.PRNGKey(1), CFG, 100, fill=7.0)
    order = []
    read = stream.tensor
    stream.tensor = lambda k: (order.append(stream._layer_of(k)), read(k))[1]
    params = stream.rest()
    order.clear()
    x = jax.random.normal(jax.random.PRNGKey(2), (CFG.num_tokens, CFG.action_dim))
    ctx = CacheContext.create(100)
    got = velocity(params, x, 0.0, ctx, cfg=CFG, layers=stream.layer_source(cache.cache_layer))
    # every layer's tensors read once, layer after layer: never two layers in memory at once
    assert order == [i for i in range(CFG.num_layers) for _ in range(PER_LAYER)]
    full = load_safetensors(ckpt, CFG)

    def stacked(i):
        return (jax.tree.map(lambda a: a[i], full.layers), *cache.cache_layer(i))

    want = velocity(full, x, 0.0, ctx, cfg=CFG, layers=stacked)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_emulation_buffers_read_one_layer_at_a_time_and_match_the_loaded_file(ckpt):
    stream = CheckpointStream(ckpt, CFG)
    ns = Emulation()
    layers = stream.emulation_layers(ns, ns.open_device(0), weights="bfp8")
    assert sum(stream.reads.values()) == 0  # nothing read until a buffer is read
    state = load_file(str(ckpt))
    for i in (2, 0):
        want = layer_from_hf(state, i, CFG)
        before = dict(stream.reads)
        for name, t in layers[i].items():
            np.testing.assert_array_equal(np.asarray(t.value), np.asarray(
                ns.Tensor(want[name], t.dtype).value), err_msg=f"layer {i} {name}")
        new = {k: v - before.get(k, 0) for k, v in stream.reads.items() if v - before.get(k, 0)}
        assert new == {i: PER_LAYER}  # one read of layer i's tensors serves all its buffers


def test_nonfinite_weights_are_counted(tmp_path, ckpt):
    state = load_file(str(ckpt))
    state["layers.1.mlp.down_proj.weight"][0, :3] = [np.nan, np.inf, -np.inf]
    bad = tmp_path / "bad.safetensors"
    save_file(state, str(bad))
    assert CheckpointStream(bad, CFG).nonfinite() == {"layers.1.mlp.down_proj.weight": 3}
    assert CheckpointStream(ckpt, CFG).nonfinite() == {}


def test_a_nan_checkpoint_through_device_parity_exits_nonzero_with_the_count(tmp_path, capsys):
    cfg = dataclasses.replace(CFG, num_layers=2)
    path = tmp_path / "nan.safetensors"
    save_safetensors(path, init_params(jax.random.PRNGKey(4), cfg), cfg)
    state = load_file(str(path))
    state["layers.0.self_attn.q_proj.weight"][5, 7] = np.nan
    save_file(state, str(path))
    status = parity.main(["--backend", "emulation", "--preset", "tiny", "--checkpoint", str(path), "--no-sample",
                          "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert status == 2
    assert "holds 1 non-finite values" in err and "layers.0.self_attn.q_proj.weight" in err, err
    assert not (tmp_path / "o").exists()
