"""The one port description (``costmodel.blackhole.port.Port``) and the three views derived from it.

Oracles: the notes' tuned matmul table and formats (seeds/EXPERT_NOTES.md, written out here),
``jaxref.precision.Precision.device`` (the golden's own preset, which must not drift from the port),
and round trips between the views.
"""

from __future__ import annotations

import dataclasses

import pytest

from costmodel.blackhole import BlackholeConfig
from costmodel.blackhole.port import MATMULS, Port
from costmodel.blackhole.program_config import MCAST_1D_IN0, MatmulProgramConfig
from device.configs import GraphConfig
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
    assert (port.weights, port.cache, port.mask, port.k_chunk, port.cores_per_head) == ("bfp8", "bf16", "bfp4", 128, 16)
    assert port.precision() == Precision.device()
    for weights, cache in [("bf16", "bfp8"), ("bfp8", "bf16")]:
        p = Port.for_expert(CFG, weights=weights, cache=cache, attn_mode="standard")
        assert p.precision() == Precision.device(weights=weights, cache=cache, mask="bf16")


@pytest.mark.parametrize("mode", ["decode", "standard"])
def test_device_and_cost_model_views_derive_from_one_port(mode):
    over = {"wo": MatmulProgramConfig(4.0, 2.0, 2.0)}
    port = Port.for_expert(CFG, attn_mode=mode, matmuls=over, weights="bf16", k_chunk=256)
    graph = GraphConfig.from_port(port)
    assert graph.port(CFG) == port  # the device view gives back the same description
    assert graph.matmuls(CFG) == dict(port.matmuls) and graph.sdpa().k_chunk_size == 256
    assert graph.mask_format == port.mask == ("bfp4" if mode == "decode" else "bf16")
    assert graph.mask_rows(CFG) == (CFG.group * 64 if mode == "decode" else 64)
    bc = BlackholeConfig.from_port(port, smax=8192, seq_len=4700)
    assert {n: getattr(bc, n) for n in MATMULS} == dict(port.matmuls)
    assert (bc.weight_dtype, bc.kv_dtype, bc.mask_dtype, bc.act_dtype, bc.attn_mode, bc.fidelity) == \
        (port.weights, port.cache, port.mask, port.activations, port.attn_mode, port.fidelity)
    assert (bc.attn.k_chunk, bc.attn.q_chunk, bc.attn.cores_per_head) == (256.0, 32.0, 16.0)
    assert BlackholeConfig.port(CFG) == BlackholeConfig.from_port(Port.for_expert(CFG), smax=8192, seq_len=4700)
    assert GraphConfig().matmuls(CFG) == {n: getattr(BlackholeConfig.port(CFG), n) for n in MATMULS}


def test_other_geometries_fall_back_to_a_legal_heuristic():
    for cfg in (ExpertConfig.tiny(head_dim=32), ExpertConfig.alpamayo_r1()):
        port = Port.for_expert(cfg)
        port.check(cfg)
        Port.for_expert(cfg, matmuls="default").check(cfg)


def test_the_port_is_frozen_and_hashable():
    port = Port.for_expert(CFG)
    with pytest.raises(dataclasses.FrozenInstanceError):
        port.weights = "bf16"
    with pytest.raises(TypeError):
        port.matmuls["wo"] = port.matmuls["wqkv"]
    assert hash(port) == hash(Port.for_expert(CFG)) and port != port.replace(cache="bfp8")


def test_bad_ports_are_rejected_naming_the_field():
    base = Port.for_expert(CFG)
    mm = dict(base.matmuls)
    cases = [(lambda: base.replace(weights="int8"), "weights='int8' unknown"),
             (lambda: base.replace(attn_mode="paged"), "attn_mode='paged' unknown"),
             (lambda: base.replace(k_chunk=100), "k_chunk=100 must be a positive multiple of 32"),
             (lambda: base.replace(cores_per_head=17), r"cores_per_head=17 must be an integer in \[1, 16\]"),
             (lambda: base.replace(matmuls={k: v for k, v in mm.items() if k != "w2"}), "expected the weight matmuls"),
             (lambda: base.replace(matmuls={**mm, "w1": dataclasses.replace(mm["w1"], fused_activation=None)}),
              r"matmuls\['w1'\].fused_activation=None; the graph needs 'silu'"),
             (lambda: Port.for_expert(CFG, matmuls={"w9": mm["wo"]}), r"overrides \['w9'\] unknown"),
             (lambda: Port.for_expert(CFG, matmuls="fast"), "matmuls='fast' unknown")]
    for make, match in cases:
        with pytest.raises(ValueError, match=match):
            make()
    with pytest.raises(ValueError, match="w2.in0_block_w=5 must divide K/32=192"):
        base.replace(matmuls={**mm, "w2": dataclasses.replace(mm["w2"], in0_block_w=5.0)}).check(CFG)
    with pytest.raises(ValueError, match="max_seq_len=8192 must be a multiple of k_chunk=96"):
        base.replace(k_chunk=96).check(CFG)
    with pytest.raises(ValueError, match="the device graph uploads a bfp4 mask"):
        GraphConfig.from_port(base.replace(mask="bf16"))
