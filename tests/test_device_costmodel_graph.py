"""The cost model's layer op list equals the ops the device graph actually calls.

One decoder layer of ``device.graph.TTExpert`` runs on the emulation backend behind a
``device.recorder.Recorder``; every recorded device op (name, input shapes, dtypes, program /
compute-kernel configs as passed) is turned into the op spec it is, by the mapping below (written
from ttnn's op signatures, independent of ``costmodel.blackhole.graph``), and the list must equal
``layer_op_specs`` of the cost model's configuration derived from the same port description, in
order, field for field. A changed shape, dtype, config, op order or an added / dropped op in
either the device graph or the cost model's hand-written graph fails here.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from costmodel.blackhole.graph import BlackholeConfig, layer_op_specs
from costmodel.blackhole.opspecs import (
    EltwiseSpec,
    FillCacheSpec,
    HeadsSpec,
    MatmulSpec,
    NormSpec,
    RopeSpec,
    SdpaDecodeSpec,
    SdpaStandardSpec,
)
from costmodel.blackhole.port import Port
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from device.emulation import Emulation
from device.graph import TTExpert
from device.host import model_from_params
from device.recorder import DEVICE_OPS, Recorder
from jaxref.config import ExpertConfig
from jaxref.weights import zeros_params

DTYPE = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4", "FLOAT32": "fp32"}


def _rows(shape) -> int:
    return math.prod(shape[:-1])


def spec_of_call(call):
    """The op spec of one recorded ttnn call (reshape views are not ops)."""
    ins = [(s, DTYPE[d]) for s, d, _ in call.tensors_in]
    (x, act), at = ins[0], call.attributes
    name = call.name
    fid = at["compute_kernel_config"].math_fidelity.name if "compute_kernel_config" in at else None
    if name == "rms_norm":
        return NormSpec(_rows(x), x[-1], act, fidelity=fid)
    if name == "linear":
        w, wd = ins[1]
        pc = MatmulProgramConfig.from_ttnn(at["program_config"])
        return MatmulSpec(_rows(x), x[-1], w[-1], pc, wd, act, fid, pc.fused_activation is not None)
    if name == "experimental.nlp_create_qkv_heads":
        return HeadsSpec("create", _rows(x), x[-1] // 32, act, x[-1] // (at["num_heads"] + 2 * at["num_kv_heads"]))
    if name == "experimental.nlp_concat_heads":
        return HeadsSpec("concat", x[2], x[1] * x[3] // 32, act, x[3])
    if name == "experimental.rotary_embedding_hf":
        return RopeSpec(x[1], x[2], x[3], act)
    if name == "fill_cache":  # (cache, rows written)
        (new, nd) = ins[1]
        return FillCacheSpec(new[1], new[2], new[3], DTYPE[call.tensors_in[0][1]], nd)
    if name in ("add", "mul"):
        return EltwiseSpec(name, _rows(x), x[-1], act)
    pc = at["program_config"]
    (k, kd), (_, md) = ins[1], ins[3]  # inputs: q, k, v, mask
    g = pc.compute_with_storage_grid_size
    sdpa = {"k_chunk": pc.k_chunk_size, "q_chunk": pc.q_chunk_size, "cores_per_head": pc.max_cores_per_head_batch,
            "grid_x": g.x, "grid_y": g.y, "exp_approx_mode": bool(pc.exp_approx_mode)}
    if name == "transformer.scaled_dot_product_attention_decode":  # q [1, users, rows, H], k [users, 1, Smax, H]
        attn = SdpaProgramConfig(**sdpa, attn_mode="decode")
        return SdpaDecodeSpec(attn, k[2], x[1], x[2], x[3], kd, md, act, fid)
    if name == "transformer.scaled_dot_product_attention":
        attn = SdpaProgramConfig(**sdpa, attn_mode="standard")
        return SdpaStandardSpec(attn, k[2], x[1], x[2], x[3], kd, md, act, fid)
    raise AssertionError(f"unmapped device op {name}")


def recorded_layer(cfg: ExpertConfig, port: Port):
    """The recorded device ops of layer 0 (zero weights: only shapes, dtypes and configs matter)."""
    emu = Emulation()
    layers, final_norm = model_from_params(zeros_params(cfg), cfg)
    ex = TTExpert(emu, emu.open_device(0), layers, final_norm, cfg=cfg, port=port)
    zeros = np.zeros((cfg.num_kv_heads, cfg.max_seq_len, cfg.head_dim), np.float32)
    caches = [ex.upload_cache(zeros, zeros)]
    ex.set_context(cfg.max_seq_len - cfg.num_tokens - 32)
    rec = Recorder(emu)
    ex.ns = rec
    ex.run_layer(0, np.zeros((cfg.num_tokens, cfg.hidden), np.float32), caches)
    return [c for c in rec.state.log if c.name in DEVICE_OPS and c.name != "reshape"]


@pytest.mark.parametrize("preset,mode,weights", [("alpamayo_tt", "decode", "bfp8"), ("alpamayo_tt", "standard", "bf16"),
                                                 ("tiny", "decode", "bfp8")])
def test_cost_model_layer_ops_equal_the_recorded_device_calls(preset, mode, weights):
    cfg = ExpertConfig.alpamayo_tt(num_layers=1) if preset == "alpamayo_tt" else ExpertConfig.tiny(head_dim=32,
                                                                                                   num_layers=1)
    port = Port.for_expert(cfg, weights=weights, attn_mode=mode)
    recorded = [spec_of_call(c) for c in recorded_layer(cfg, port)]
    modelled = list(layer_op_specs(BlackholeConfig(port=port, smax=float(cfg.max_seq_len), seq_len=100.0),
                                   cfg=cfg).values())
    assert len(recorded) == len(modelled) == 19
    for i, (got, want) in enumerate(zip(recorded, modelled, strict=True)):
        assert got == want, f"op {i}: device graph calls {got}, the cost model prices {want}"


def test_a_drift_is_caught():
    """The comparison sees a config change: a w2 config the cost model does not know differs."""
    cfg = ExpertConfig.tiny(head_dim=32, num_layers=1)
    port = Port.for_expert(cfg)
    other = dataclasses.replace(port.matmuls["w2"], out_subblock_w=1, in0_block_w=1.0)
    drifted = port.replace(matmuls=port.matmuls.replace(w2=other))
    recorded = [spec_of_call(c) for c in recorded_layer(cfg, drifted)]
    modelled = list(layer_op_specs(BlackholeConfig(port=port, smax=float(cfg.max_seq_len), seq_len=100.0),
                                   cfg=cfg).values())
    assert [i for i, (a, b) in enumerate(zip(recorded, modelled, strict=True)) if a != b] == [17]
