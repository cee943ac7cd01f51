"""``device.checkpoint_stream``: a safetensors checkpoint read one layer at a time, same numbers.

Oracles: the whole file loaded at once (``jaxref.weights.load_safetensors`` for the golden,
``device.host.layer_from_hf`` on the loaded dict for the device arrays). Memory flatness is checked
by counting the tensors read per layer and the order they are read in, by weak references to every
array read (no earlier layer's still alive when a layer is read) and by the kernel's list of the
process's mappings (no mapping of the file left after a read: a mapped page once read stays
resident). Timings and resident size are the benchmark's: ``experiments.bench_parity_memory
--checkpoint-layers``.
"""

from __future__ import annotations

import dataclasses
import os
import weakref

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


def _owner(a: np.ndarray) -> np.ndarray:
    """The array at the bottom of ``a``'s chain of views: alive while any view of ``a``'s memory is."""
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _mapped(path) -> bool:
    """Whether ``path`` is mapped into this process (Linux's /proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").endswith(str(path)) for line in f)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs Linux's /proc/self/maps")
def test_a_layer_read_leaves_no_other_layer_alive_and_the_file_unmapped(ckpt):
    """Through the golden's scan and every emulation buffer: when layer i is read, no array read for
    (or made by ``host_layer`` from) another layer is alive, and after each read the file is not
    mapped. Either failing would make the resident size grow with the depth."""
    stream = CheckpointStream(ckpt, CFG)
    refs: list[tuple[int, weakref.ref]] = []  # (layer, the owner of an array read or made for it)
    stale, mapped = set(), []  # stale: (layer read, another layer still alive)
    read_tensor, read_layer = stream.tensor, stream.host_layer

    def track(i, arrays):
        refs.extend((i, weakref.ref(_owner(a))) for a in arrays)

    def tensor(k):
        i = stream._layer_of(k)
        if i is not None:  # the action projections and the final norm are kept for the run
            stale.update((i, j) for j, r in refs if j != i and r() is not None)
        a = read_tensor(k)
        mapped.append(_mapped(ckpt))
        if i is not None:
            track(i, [a])
        return a

    def host_layer(i):
        out = read_layer(i)
        track(i, out.values())
        return out

    stream.tensor, stream.host_layer = tensor, host_layer
    params = stream.rest()
    cache = GeneratedModel.build(jax.random.PRNGKey(1), CFG, 100, fill=7.0)
    x = jax.random.normal(jax.random.PRNGKey(2), (CFG.num_tokens, CFG.action_dim))
    velocity(params, x, 0.0, CacheContext.create(100), cfg=CFG, layers=stream.layer_source(cache.cache_layer))
    ns = Emulation()
    for layer in stream.emulation_layers(ns, ns.open_device(0), weights="bfp8"):
        for t in layer.values():
            t.value  # noqa: B018 - a read generates the buffer from the file
    assert {i for i, _ in refs} == set(range(CFG.num_layers))
    assert not stale, f"(layer read, layer still alive): {sorted(stale)}"
    assert mapped and not any(mapped) and not _mapped(ckpt)


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
