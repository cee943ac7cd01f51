"""The one port description (``costmodel.blackhole.port.Port``) and the readers that take its parts.

Oracles: the notes' tuned matmul table and formats (seeds/EXPERT_NOTES.md, written out here),
``jaxref.precision.Precision.device`` (the golden's own preset: the port's default *is* it), the
device graph's recorded ttnn calls, and the cost model's op specs.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from costmodel._pytree import pytree_dataclass, static_field
from costmodel.blackhole import BlackholeConfig, layer_op_specs
from costmodel.blackhole.port import MATMULS, ComputeConfig, Port
from costmodel.blackhole.program_config import MCAST_1D_IN0, MatmulProgramConfig
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from device.emulation import Emulation
from jaxref.config import ExpertConfig
from jaxref.param_table import LAYER_PARAMS, LINEAR
from jaxref.precision import Precision

CFG = ExpertConfig.alpamayo_tt()
NOTES_TUNED = {"wqkv": (8, 2), "wo": (8, 1), "w1": (8, 2), "w3": (8, 2), "w2": (48, 1)}


def test_matmul_names_are_the_parameter_tables_linear_device_tensors():
    assert set(MATMULS) == {s.device_name for s in LAYER_PARAMS if s.kind == LINEAR}


def test_the_port_is_the_notes_port_and_the_goldens_device_precision():
    port = Port.for_expert(CFG)
    assert {n: (int(c.in0_block_w), int(c.per_core_N), int(c.per_core_M)) for n, c in port.matmuls.items()} == \
        {n: (*v, 2) for n, v in NOTES_TUNED.items()}
    assert all(c.kind == MCAST_1D_IN0 and c.grid == (11, 10) for c in port.matmuls.values())
    assert port.matmuls["w1"].fused_activation == "silu"
    att = port.attention
    assert (att.attn_mode, att.k_chunk, att.cores_per_head, att.grid) == ("decode", 128, 16, (11, 10))
    assert port.precision == Precision.device()  # the port's formats are the golden's preset object
    assert port.compute.fidelity == "HiFi2" and port.compute.fp32_dest_acc_en
    for weights, cache in [("bf16", "bfp8"), ("bfp8", "bf16")]:
        p = Port.for_expert(CFG, weights=weights, cache=cache, attn_mode="standard")
        assert p.precision == Precision.device(weights=weights, cache=cache, mask="bf16")


@pytest.mark.parametrize("mode", ["decode", "standard"])
def test_cost_model_reads_the_ports_parts(mode):
    over = {"wo": MatmulProgramConfig(4.0, 2.0, 2.0)}
    port = Port.for_expert(CFG, attn_mode=mode, matmuls=over, weights="bf16", k_chunk=256.0)
    assert port.matmuls["wo"] == over["wo"] and port.attention.k_chunk == 256.0
    assert port.precision.mask == ("bfp4" if mode == "decode" else "bf16")
    assert port.mask_rows(CFG) == (CFG.group * 64 if mode == "decode" else 64)
    bc = BlackholeConfig(port=port, smax=8192.0, seq_len=4700.0)
    specs = layer_op_specs(bc, cfg=CFG)
    assert {n: specs[n].cfg for n in MATMULS} == dict(port.matmuls)  # the part itself, not a copy
    assert specs["attention"].attn is port.attention
    assert {specs[n].weight_dtype for n in MATMULS} == {"bf16"} and specs["fill_cache_k"].kv_dtype == "bf16"
    assert BlackholeConfig.for_expert(CFG) == BlackholeConfig(port=Port.for_expert(CFG), smax=8192.0, seq_len=4700.0)


def test_replace_routes_a_field_to_the_one_part_that_declares_it():
    port = Port.for_expert(CFG)
    p = port.replace(cache="bfp8", k_chunk=256.0, fidelity="HiFi4")
    assert (p.precision.cache, p.attention.k_chunk, p.compute.fidelity) == ("bfp8", 256.0, "HiFi4")
    assert p.precision.name == "device(w=bfp8,kv=bfp8,mask=bfp4)"  # the label follows the formats
    assert p.matmuls == port.matmuls and p.precision.weights == port.precision.weights
    with pytest.raises(ValueError, match="warp=3: expected a part of the port"):
        port.replace(warp=3)


def test_other_geometries_fall_back_to_a_legal_heuristic():
    for cfg in (ExpertConfig.tiny(head_dim=32), ExpertConfig.alpamayo_r1()):
        Port.for_expert(cfg).check(cfg)
        Port.for_expert(cfg, matmuls="default").check(cfg)


def test_the_port_is_frozen_hashable_and_a_pytree():
    port = Port.for_expert(CFG)
    with pytest.raises(dataclasses.FrozenInstanceError):
        port.precision = Precision.fp32()
    with pytest.raises(TypeError):
        port.matmuls["wo"] = port.matmuls["wqkv"]
    assert hash(port) == hash(Port.for_expert(CFG)) and port != port.replace(cache="bfp8")
    # the knobs are the leaves (3 per matmul, 3 of the SDPA); the choices are tree structure
    assert len(jax.tree.leaves(port)) == 3 * len(MATMULS) + 3
    assert jax.tree.structure(port) != jax.tree.structure(port.replace(cache="bfp8"))
    doubled = jax.tree.map(lambda x: 2 * x, port)
    assert doubled.attention.k_chunk == 256.0 and doubled.matmuls["w2"].in0_block_w == 96.0


def test_bad_ports_are_rejected_naming_the_field():
    base = Port.for_expert(CFG)
    mm = dict(base.matmuls)
    cases = [(lambda: base.replace(weights="int8"), "weights='int8' unknown"),
             (lambda: base.replace(activations="fp32"), "activations='fp32' unknown"),
             (lambda: base.replace(attn_mode="paged"), "attn_mode='paged' unknown"),
             (lambda: base.replace(fidelity="HiFi9"), "fidelity='HiFi9' unknown"),
             (lambda: base.replace(matmuls={k: v for k, v in mm.items() if k != "w2"}), "expected the weight matmuls"),
             (lambda: base.replace(matmuls={**mm, "w1": dataclasses.replace(mm["w1"], fused_activation=None)}),
              r"matmuls\['w1'\].fused_activation=None; the graph needs 'silu'"),
             (lambda: Port.for_expert(CFG, matmuls={"w9": mm["wo"]}), r"overrides \['w9'\] unknown"),
             (lambda: Port.for_expert(CFG, matmuls="fast"), "matmuls='fast' unknown")]
    for make, match in cases:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(TypeError, match="compute is a dict"):
        base.replace(compute={"fidelity": "HiFi2"})
    # the leaves' legality: on check, the one rule (construction accepts relaxed reals)
    checks = [(base.replace(matmuls={**mm, "w2": dataclasses.replace(mm["w2"], in0_block_w=5.0)}),
               "w2.in0_block_w=5 must divide K/32=192"),
              (base.replace(k_chunk=96.0), "k_chunk=96 must divide smax=8192"),
              (base.replace(k_chunk=100.0), "k_chunk=100 must be a multiple of 32"),
              (base.replace(k_chunk=120.5), "k_chunk=120.5 must be an integer"),
              (base.replace(cores_per_head=17.0), "cores_per_head=17 must be <= 16"),
              (base.replace(attn_mode="standard", q_chunk=128.0), "q_chunk=128 must divide the 64 query rows")]
    for port, match in checks:
        with pytest.raises(ValueError, match=match):
            port.check(CFG)


# ---- a throwaway option: one field on one part, seen by the golden, the graph and the cost model ----
@dataclasses.dataclass(frozen=True)
class ProbePrecision(Precision):
    """A precision with one option more: activations scaled by ``act_scale`` where they are rounded."""

    act_scale: float = 1.0

    def act(self, x):
        return super().act(x) * self.act_scale


@pytree_dataclass
class ProbeAttention(SdpaProgramConfig):
    """An SDPA config with one option more, which its ttnn object carries (as exp_approx_mode)."""

    probe: bool = static_field(default=False)

    def build(self, ns):
        return dataclasses.replace(super().build(ns), exp_approx_mode=self.probe)  # the stand-in is a dataclass


@pytest.fixture(scope="module")
def tiny_model():
    from _device_util import Model

    return Model.build(ExpertConfig.tiny(head_dim=32, num_layers=1), seq_len=40)


def test_a_new_attention_option_reaches_the_graph_and_the_cost_model(tiny_model):
    from device.recorder import Recorder

    cfg = tiny_model.cfg
    base = Port.for_expert(cfg)
    probe = base.replace(attention=ProbeAttention(**{f.name: getattr(base.attention, f.name)
                                                    for f in dataclasses.fields(SdpaProgramConfig)}))
    flipped = probe.replace(probe=True)  # routed by its own name to the part that declares it
    assert flipped.attention.probe and not probe.attention.probe

    def recorded(port):  # the device graph on the emulation: the SDPA call's program config
        rec = Recorder(Emulation())
        ex, caches = tiny_model.expert(port, ns=rec)
        ex.run_layer(0, tiny_model.golden[0][0], caches)
        (call,) = [c for c in rec.state.log if c.name == "transformer.scaled_dot_product_attention_decode"]
        return call.attributes["program_config"].exp_approx_mode

    assert (recorded(probe), recorded(flipped)) == (False, True)
    bcs = [BlackholeConfig(port=p, smax=float(cfg.max_seq_len), seq_len=40.0) for p in (probe, flipped)]
    assert [bc.setting()["probe"] for bc in bcs] == [False, True]
    assert jax.tree.structure(bcs[0]) != jax.tree.structure(bcs[1])  # a new jit key
    assert layer_op_specs(bcs[1], cfg=cfg)["attention"].attn.probe is True


def test_a_new_precision_option_reaches_the_golden_the_graph_and_the_cost_model(tiny_model):
    from jaxref.expert import expert_rope
    from jaxref.layers import decoder_layer
    from jaxref.options import ExpertOptions

    cfg, S = tiny_model.cfg, tiny_model.seq_len
    base = Port.for_expert(cfg)
    fields = {f.name: getattr(base.precision, f.name) for f in dataclasses.fields(Precision)}
    ports = [base.replace(precision=ProbePrecision(**fields, act_scale=s)) for s in (1.0, 2.0)]
    layer = jax.tree.map(lambda a: a[0], tiny_model.params.layers)
    x = tiny_model.golden[0][0]
    kv = (tiny_model.cache.k[0], tiny_model.cache.v[0])
    outs = [np.asarray(decoder_layer(layer, x, kv, S, expert_rope(S, 0, cfg=cfg), cfg=cfg,
                                     options=ExpertOptions(attention="tail_slot", precision=p.precision)))
            for p in ports]
    assert np.all(np.isfinite(outs[0])) and not np.allclose(outs[0], outs[1])  # the golden rounds with it
    ex, _ = tiny_model.expert(ports[1])
    assert ex.port.precision.act_scale == 2.0  # the graph holds the port, not a copy of its fields
    bcs = [BlackholeConfig(port=p, smax=float(cfg.max_seq_len), seq_len=float(S)) for p in ports]
    assert [bc.setting()["act_scale"] for bc in bcs] == [1.0, 2.0]
    assert jax.tree.structure(bcs[0]) != jax.tree.structure(bcs[1])


def test_compute_config_builds_the_kernel_config():
    ns = Emulation()
    ck = ComputeConfig(fidelity="HiFi4", fp32_dest_acc_en=False).build(ns)
    assert ck.math_fidelity == ns.MathFidelity.HiFi4 and ck.fp32_dest_acc_en is False and ck.packer_l1_acc is True
