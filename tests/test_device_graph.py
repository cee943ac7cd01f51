"""The ttnn graph (device/graph.py) on the emulation backend vs the fp32 golden (jaxref).

Targets (issue 10): per-layer PCC >= 0.9999 with bfp8 weights, >= 0.99999 with bf16 weights, and
max-abs <= 1e-4 with every rounding off; both attention modes; garbage (7.0) in cache rows
[S, Smax - 64). Each layer is fed the golden's input of that layer. The tiny model uses H = 32
(ttnn's rotary_embedding_hf needs head_dim 32 or a multiple of 64) and weights of std 0.1, so a
layer's update is a sizeable part of its output (as at alpamayo_tt width with HF's 0.02) and a
PCC threshold sees a wrong head order or rope table (``test_faults_are_caught``).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _device_util import Model

from costmodel.blackhole.port import Port
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.hardware import blackhole_p150a
from device.graph import check_graph
from device.host import model_from_params, rope_host
from device.recorder import DEVICE_OPS, Recorder
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope
from jaxref.layers import decoder_layer
from jaxref.numerics import compare
from jaxref.options import ExpertOptions
from jaxref.param_table import device_shapes
from jaxref.precision import Precision

TARGET = {"bfp8": ("pcc", 0.9999), "bf16": ("pcc", 0.99999), "exact": ("max_abs", 1e-4)}
CASES = [(w, mode) for w in TARGET for mode in ("decode", "standard")]


def meets(errors, kind: str) -> bool:
    metric, bound = TARGET[kind]
    return all((e.pcc >= bound) if metric == "pcc" else (e.max_abs <= bound) for e in errors)


def run_case(model: Model, kind: str, mode: str, **kw):
    port = Port.for_expert(model.cfg, weights="bf16" if kind == "exact" else kind, attn_mode=mode)
    ex, caches = model.expert(port, rounding=kind != "exact", **kw)
    return ex, caches


@pytest.fixture(scope="module")
def tiny():
    return Model.build(ExpertConfig.tiny(head_dim=32), seq_len=100, std=0.1)


@pytest.mark.parametrize("kind,mode", CASES, ids=[f"{k}-{m}" for k, m in CASES])
def test_tiny_layers_meet_targets(tiny, kind, mode):
    ex, caches = run_case(tiny, kind, mode)
    errors = tiny.layer_errors(ex, caches)
    assert meets(errors, kind), [str(e) for e in errors]


def _wrong_head_order(model: Model):
    """q heads of the fused wqkv reversed (q head n then reads the wrong kv head and wo columns)."""
    cfg = model.cfg
    N, H, D = cfg.num_heads, cfg.head_dim, cfg.hidden
    layers, _ = model_from_params(model.params, cfg)
    for layer in layers:
        w = layer["wqkv"].copy()
        w[:, : N * H] = w[:, : N * H].reshape(D, N, H)[:, ::-1].reshape(D, N * H)
        layer["wqkv"] = w
    return layers


@pytest.mark.parametrize("fault", ["head order", "rope table", "cache offset"])
@pytest.mark.parametrize("kind", ["bfp8", "exact"])
def test_faults_are_caught(tiny, fault, kind):
    layers = _wrong_head_order(tiny) if fault == "head order" else None
    ex, caches = run_case(tiny, kind, "decode", layers=layers)
    if fault == "rope table":  # positions i + rope_delta, forgetting the + S offset
        cos, sin = rope_host(0, 0, tiny.cfg)
        ex._write(ex.cos, cos, "bf16")
        ex._write(ex.sin, sin, "bf16")
    elif fault == "cache offset":  # own K/V one tile too early: hidden by the mask, garbage read instead
        ex.tail_row -= 32
    assert not meets(tiny.layer_errors(ex, caches), kind)


def test_against_device_precision_golden(tiny):
    """The graph and ``Precision.device()`` (tail-slot attention) differ only where ttnn's fused ops
    round once and the golden (HF bf16 semantics) twice: per layer they agree far more closely than
    either agrees with the fp32 golden (measured PCC 0.9999962 vs 0.99998; max-abs one bf16 ulp)."""
    ex, caches = run_case(tiny, "bfp8", "decode")
    cfg, S = tiny.cfg, tiny.seq_len
    prec = Precision.device()
    rope = expert_rope(S, 0, cfg=cfg, precision=prec)
    for i, (x, y) in enumerate(tiny.golden):
        layer = jax.tree.map(lambda a, i=i: a[i], tiny.params.layers)
        gold = decoder_layer(layer, x, (tiny.cache.k[i], tiny.cache.v[i]), S, rope, cfg=cfg,
                             options=ExpertOptions(attention="tail_slot", precision=prec))
        got = ex.run_layer(i, x, caches)
        c_dev, c_fp32 = compare(gold, got), compare(y, got)
        assert c_dev.pcc > 0.999995 and c_dev.rel_fro < 0.5 * c_fp32.rel_fro, (str(c_dev), str(c_fp32))


def test_trace_replays_eager_and_recaptures_on_new_buffers(tiny):
    ex, caches = run_case(tiny, "bfp8", "decode")
    emb = np.asarray(tiny.golden[0][0])
    eager = ex.forward(emb, caches, traced=False)
    np.testing.assert_array_equal(ex.forward(emb, caches), eager)
    first = ex._trace[0]
    ex.forward(emb * 0.5, caches)  # a replay reads the new input from the persistent buffer
    np.testing.assert_array_equal(ex.forward(emb * 0.5, caches), ex.forward(emb * 0.5, caches, traced=False))
    fresh = [ex.upload_cache(np.asarray(tiny.cache.k[i]) * 0.5, np.asarray(tiny.cache.v[i]))
             for i in range(tiny.cfg.num_layers)]
    out = ex.forward(emb, fresh)
    assert ex._trace[0] != first  # re-captured: the cache addresses changed
    np.testing.assert_array_equal(out, ex.forward(emb, fresh, traced=False))
    assert not np.array_equal(out, eager)
    ex.ns.begin_trace_capture(ex.device)  # every persistent buffer must exist before a capture
    with pytest.raises(ValueError, match="during trace capture"):
        ex.upload_cache(np.asarray(tiny.cache.k[0]), np.asarray(tiny.cache.v[0]))


def test_nineteen_ops_per_layer(tiny):
    ex, caches = run_case(tiny, "bfp8", "decode")
    rec = Recorder(ex.ns)
    ex.ns = rec
    ex.run_layer(0, tiny.golden[0][0], caches)
    ops = [c.name for c in rec.state.log if c.name in DEVICE_OPS and c.name != "reshape"]
    assert len(ops) == 19, ops


def test_bad_configurations_are_rejected(tiny):
    with pytest.raises(ValueError, match="seq_len"):
        tiny.expert().__getitem__(0).set_context(tiny.cfg.max_seq_len - 63)
    with pytest.raises(ValueError, match="in0_block_w=5 must divide K/32=48"):
        MatmulProgramConfig(5.0, 2.0).validate("wqkv", blackhole_p150a(), M=64, K=1536, N=4096, weight_dtype="bfp8")
    with pytest.raises(ValueError, match=r"ceil\(128/1\) = 128 cores exceeds"):  # 128 tiles on 110 cores
        MatmulProgramConfig(8.0, 1.0).validate("wqkv", blackhole_p150a(), M=64, K=1536, N=4096, weight_dtype="bfp8")
    with pytest.raises(ValueError, match="attn_mode='paged' unknown"):
        Port.for_expert(tiny.cfg, attn_mode="paged")
    with pytest.raises(ValueError, match="head_dim"):
        check_graph(Port.for_expert(ExpertConfig.tiny()), ExpertConfig.tiny())  # H = 16: not a tile multiple
    with pytest.raises(ValueError, match="k_chunk=96 must divide smax"):  # the port's rule, at construction
        tiny.expert(Port.for_expert(tiny.cfg, k_chunk=96.0))


def test_tuned_matmul_configs_at_alpamayo_tt():
    cfg = ExpertConfig.alpamayo_tt()
    m, shapes = Port.for_expert(cfg).matmuls, device_shapes(cfg)
    got = {k: (c.in0_block_w, c.per_core_N, c.num_cores(M=64, N=shapes[k][1]), c.fused_activation) for k, c in m.items()}
    assert got == {"wqkv": (8, 2, 64, None), "wo": (8, 1, 48, None), "w1": (8, 2, 96, "silu"),
                   "w3": (8, 2, 96, None), "w2": (48, 1, 48, None)}


@pytest.mark.slow
def test_alpamayo_tt_width_two_layers():
    """2 layers at alpamayo_tt widths, S = 4600, Smax = 8192: both attention modes, each precision target
    (the full matrix runs at tiny; ~1 min here on one core, most of it building the random model)."""
    model = Model.build(ExpertConfig.alpamayo_tt(num_layers=2), seq_len=4600)
    for kind, mode in [("bfp8", "decode"), ("bf16", "standard"), ("exact", "decode"), ("exact", "standard")]:
        errors = model.layer_errors(*run_case(model, kind, mode))
        assert meets(errors, kind), (kind, mode, [str(e) for e in errors])
