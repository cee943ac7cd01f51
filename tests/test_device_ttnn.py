"""The device graph against the installed ttnn (CPython 3.12 venv of ``make test-ttnn``; no chip, no torch).

* weight preparation builds real ``ttnn.Tensor``s in TILE layout, bfloat8_b (values equal
  ``quantize_bfp``) and bf16 gammas;
* every program / compute-kernel config the graph uses constructs as a real ttnn object;
* every call the graph makes on the emulation backend (recorded by name and keywords) names a
  function / class that exists in ttnn and accepts those keywords (nanobind signatures).

Without ttnn the whole file skips and says why.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

MOCK_DESC = Path(__file__).resolve().parents[1] / "device" / "mock" / "blackhole_p150.yaml"
os.environ.setdefault("TT_METAL_MOCK_CLUSTER_DESC_PATH", str(MOCK_DESC))

try:  # lazy: only this file needs ttnn, and only in the ttnn venv
    import ttnn
except (ImportError, OSError, RuntimeError) as exc:
    pytest.skip(f"ttnn not importable here ({type(exc).__name__}: {exc}); run `make test-ttnn` "
                "(CPython 3.12 venv with ttnn 0.81.1)", allow_module_level=True)

import jax  # after the skip: the main env never gets here

from costmodel.blackhole.port import Port
from costmodel.blackhole.program_config import (
    CLASS_NAMES,
    DRAM_SHARDED,
    KINDS,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
)
from device.emulation import Emulation
from device.graph import TTExpert
from device.host import host_tensor, model_from_params
from device.recorder import Recorder
from jaxref.config import ExpertConfig
from jaxref.numerics import quantize_bfp, round_bf16
from jaxref.weights import init_cache, init_params

pytestmark = pytest.mark.ttnn
CFG = ExpertConfig.tiny(head_dim=32)


def _read(t) -> np.ndarray:
    return np.asarray(ttnn.to_dtype(t, ttnn.float32).to_numpy(), np.float32)


def test_no_torch_in_this_env():
    assert "torch" not in sys.modules


def test_prepared_weights_are_ttnn_tile_tensors_equal_to_quantize_bfp():
    layers, final_norm = model_from_params(init_params(jax.random.PRNGKey(0), CFG), CFG)
    for name, a in layers[1].items():
        fmt = "bf16" if name.endswith("norm") else "bfp8"
        t = host_tensor(ttnn, a, fmt)
        assert isinstance(t, ttnn.Tensor) and t.layout == ttnn.TILE_LAYOUT, name
        assert t.dtype == (ttnn.bfloat16 if fmt == "bf16" else ttnn.bfloat8_b), name
        want = np.asarray(round_bf16(a) if fmt == "bf16" else quantize_bfp(a, 7))
        np.testing.assert_array_equal(_read(t).reshape(a.shape).view(np.uint32), want.view(np.uint32), err_msg=name)
    assert host_tensor(ttnn, final_norm, "bf16").shape == ttnn.Shape([1, 1, 1, CFG.hidden])


@pytest.mark.parametrize("preset", ["tiny", "alpamayo_tt"])
def test_configs_construct_as_ttnn_objects(preset):
    cfg = CFG if preset == "tiny" else ExpertConfig.alpamayo_tt()
    port = Port.for_expert(cfg)
    for name, c in port.matmuls.items():
        pc = c.build(ttnn)
        assert isinstance(pc, ttnn.MatmulMultiCoreReuseMultiCast1DProgramConfig), name
        assert (pc.in0_block_w, pc.per_core_M, pc.per_core_N) == (c.in0_block_w, c.per_core_M, c.per_core_N)
        assert (pc.fused_activation is not None) == (name == "w1") and pc.mcast_in0 and pc.fuse_batch
        assert MatmulProgramConfig.from_ttnn(pc) == c and repr(pc) == c.ttnn_repr()
    sdpa = port.attention.build(ttnn)
    assert isinstance(sdpa, ttnn.SDPAProgramConfig) and sdpa.k_chunk_size == 128
    assert sdpa.max_cores_per_head_batch == 16
    ck = port.compute.build(ttnn)
    assert isinstance(ck, ttnn.WormholeComputeKernelConfig) and ck.math_fidelity == ttnn.MathFidelity.HiFi2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("activation", [None, "silu"])
def test_program_config_round_trips_through_the_real_ttnn_object(kind, activation):
    """``build(ttnn)`` makes ttnn's class for the kind; reading it back, ttnn's ``repr`` of it and
    parsing that repr (or a report's ';' form of it) all give the same config (odd sizes)."""
    extra = {} if kind == DRAM_SHARDED else {"grid_x": 9, "grid_y": 7, "out_subblock_h": 1, "out_subblock_w": 7,
                                                  "out_block_w": 7 if kind != MCAST_1D_IN1 else None,
                                                  "fuse_batch": False, "transpose_mcast": kind == MCAST_2D}
    c = MatmulProgramConfig(3.0, 21.0 if kind != MCAST_1D_IN1 else 7.0, 5.0, kind=kind, fused_activation=activation,
                            **extra)
    pc = c.build(ttnn)
    assert type(pc).__name__ == CLASS_NAMES[kind]
    assert (pc.in0_block_w, pc.per_core_M, pc.per_core_N) == (3, 5, int(c.per_core_N))
    if kind != DRAM_SHARDED:
        assert (pc.compute_with_storage_grid_size.x, pc.compute_with_storage_grid_size.y) == (9, 7)
        assert (pc.out_block_h, pc.out_block_w) == (5, 7)  # ttnn fills in the default out_block_h
    if kind in (MCAST_1D_IN0, MCAST_1D_IN1):
        assert pc.mcast_in0 == (kind == MCAST_1D_IN0)
    assert (pc.fused_activation is None) == (activation is None)
    assert MatmulProgramConfig.from_ttnn(pc) == c
    assert repr(pc) == c.ttnn_repr()
    assert MatmulProgramConfig.parse(repr(pc)) == c == MatmulProgramConfig.parse(repr(pc).replace(",", ";"))


def _split_top(s: str) -> list[str]:
    """Split a parameter list at commas outside brackets / quotes."""
    out, depth, cur, quote = [], 0, "", None
    for ch in s:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return out + ([cur.strip()] if cur.strip() else [])


def _params(sig: str) -> tuple[list[str], set[str], bool]:
    """(positional-capable names, keyword-capable names, has **kwargs) of one nanobind signature."""
    inner = sig[sig.index("(") + 1: sig.rindex(") ->") if ") ->" in sig else sig.rindex(")")]
    pos, kw, kwonly, var_kw = [], set(), False, False
    names = _split_top(inner)
    posonly = "/" in names
    seen_slash = False
    for p in names:
        if p == "/":
            seen_slash = True
            continue
        if p == "*" or p.startswith("*") and not p.startswith("**"):
            kwonly = True
            continue
        if p.startswith("**"):
            var_kw = True
            continue
        name = p.split(":")[0].split("=")[0].strip()
        if name == "self":
            continue
        if not kwonly:
            pos.append(name)
        if not posonly or seen_slash:
            kw.add(name)
    return pos, kw, var_kw


def _signatures(obj) -> list[str]:
    """nanobind signature strings of a ttnn op, function or class constructor."""
    if hasattr(obj, "function"):  # a ttnn FastOperation wrapping a nanobind op object
        fn = obj.function
        call = type(fn).__call__
        return [s[0] for s in getattr(call, "__nb_signature__", None) or getattr(fn, "__nb_signature__", ())]
    if isinstance(obj, type):
        return [s[0] for s in getattr(obj.__init__, "__nb_signature__", ())]
    if hasattr(obj, "__nb_signature__"):
        return [s[0] for s in obj.__nb_signature__]
    import inspect

    return ["def f(" + ", ".join(str(p) for p in inspect.signature(obj).parameters.values()) + ")"]


def _accepts(obj, num_args: int, keywords: tuple[str, ...]) -> bool:
    for sig in _signatures(obj):
        pos, kw, var_kw = _params(sig)
        if num_args <= len(pos) and (var_kw or set(keywords) <= kw - set(pos[:num_args])):
            return True
    return False


@pytest.mark.parametrize("mode", ["decode", "standard"])
def test_every_recorded_call_exists_in_ttnn_with_its_keywords(mode):
    params = init_params(jax.random.PRNGKey(0), CFG)
    cache = init_cache(jax.random.PRNGKey(1), CFG, 100, max_seq_len=CFG.max_seq_len, fill=7.0)
    emu = Emulation()
    rec = Recorder(emu)
    layers, final_norm = model_from_params(params, CFG)
    ex = TTExpert(rec, emu.open_device(0), layers, final_norm, cfg=CFG, port=Port.for_expert(CFG, attn_mode=mode))
    caches = [ex.upload_cache(np.asarray(cache.k[i]), np.asarray(cache.v[i])) for i in range(CFG.num_layers)]
    x0 = np.zeros((CFG.num_tokens, CFG.action_dim), np.float32)
    ex.sample(params.action_in, params.action_out, x0, caches, seq_len=100)
    ex.forward(np.zeros((CFG.num_tokens, CFG.hidden), np.float32), caches, traced=False)
    calls = {(c.name, c.num_args, c.keywords) for c in rec.state.log}
    names = {c[0] for c in calls}
    assert {"linear", "transformer.scaled_dot_product_attention" + ("_decode" if mode == "decode" else ""),
            "begin_trace_capture", "execute_trace", "copy_host_to_device_tensor", "SDPAProgramConfig"} <= names
    bad = []
    for name, n, kws in sorted(calls):
        obj = ttnn
        try:
            for part in name.split("."):
                obj = getattr(obj, part)
        except AttributeError:
            bad.append(f"ttnn.{name} does not exist")
            continue
        if not _accepts(obj, n, kws):
            bad.append(f"ttnn.{name}({n} positional, keywords {kws}) matches no signature: {_signatures(obj)[:1]}")
    assert not bad, "\n".join(bad)
