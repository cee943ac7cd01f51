"""Host side of the device graph: weights in device layout, rope tables, masks, host tensors.

Everything here is numpy / JAX on the host (no ttnn, no torch at import). Layouts follow
``jaxref.param_table`` (seeds/EXPERT_NOTES.md "Layouts"):

* ``wqkv`` [D, (N + 2K) H] = HF ``cat(q, k, v).T`` (q heads 0..N-1, k heads, v heads), ``wo`` [N H, D],
  ``w1`` / ``w3`` [D, F], ``w2`` [F, D]: HF ``[out, in]`` transposed; bfloat8_b or bf16, TILE.
* RMSNorm gammas ``[1, 1, 1, W]`` bf16 (input_norm, q_norm, k_norm, post_norm, final_norm).
* cos / sin [1, 1, T, H] for positions ``i + rope_delta + S`` (``jaxref.expert.expert_rope``).
* the additive mask [1, 1, rows, Smax]: 0 on [0, S) and on the own-token tail [Smax - T, Smax),
  -1e9 on [S, Smax - T) (``jaxref.cache_attention.tail_slot_mask``); rows = G T (decode) or T (standard).
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np

from jaxref.cache_attention import tail_slot_mask
from jaxref.config import ExpertConfig
from jaxref.expert import ExpertParams, expert_rope
from jaxref.layers import LayerParams
from jaxref.param_table import (
    FINAL_NORM_DEVICE,
    FINAL_NORM_HF,
    LAYER_PARAMS,
    NORM,
    device_names,
    device_shapes,
)
from jaxref.validation import check_choice
from jaxref.weights import layer_to_hf

# Device dtype per host format name (attribute names of the op namespace: ttnn or the emulation).
DTYPE_ATTR = {"bf16": "bfloat16", "bfp8": "bfloat8_b", "bfp4": "bfloat4_b", "fp32": "float32"}


def _device_layer(hf: Mapping[str, np.ndarray], cfg: ExpertConfig) -> dict[str, np.ndarray]:
    """HF-shaped arrays of one layer, keyed by ``LayerParams`` field -> device arrays keyed by device name."""
    out = {}
    for name in device_names():
        rows = [s for s in LAYER_PARAMS if s.device_name == name]
        arrs = [np.asarray(hf[s.field], np.float32) for s in rows]
        if rows[0].kind == NORM:
            out[name] = arrs[0].reshape(1, 1, 1, -1)
        else:  # fuse along HF's out axis (table order), then transpose to [in, out]
            out[name] = np.ascontiguousarray(np.concatenate(arrs, axis=0).T if rows[0].transpose else np.concatenate(arrs, axis=0))
    shapes = device_shapes(cfg)
    for name, a in out.items():
        if a.shape != shapes[name]:
            raise ValueError(f"device tensor {name!r} has shape {a.shape}, expected {shapes[name]}")
    return out


def params_from_device(arrays: Mapping[str, object], cfg: ExpertConfig, *, xp=None) -> LayerParams:
    """The inverse of ``layer_from_params``: one layer's golden ``LayerParams`` from its device arrays
    (``xp``: the array namespace, default ``jax.numpy``, traceable: the parity script converts a
    generated layer inside the golden's scan; ``numpy`` inside a host callback, which must not run
    JAX ops: they can deadlock against the computation waiting on the callback).
    Fused tensors are split at their rows' HF output sizes, in table order (``params_from_fused``)."""
    if xp is None:
        import jax.numpy as xp

    transposed, fused = device_transposed(), {}
    for name in device_names():
        a = xp.asarray(arrays[name], xp.float32)
        fused[name] = a.T if transposed[name] else a
    return params_from_fused(fused, cfg, xp=xp)


def params_from_fused(fused: Mapping[str, object], cfg: ExpertConfig, *, xp=None) -> LayerParams:
    """One layer's golden ``LayerParams`` from its device tensors in HF orientation: each fused Linear
    weight [out_total, in] (the device array transposed, ``device_transposed``), gammas [1, 1, 1, W].
    Fused tensors are split along their rows at the HF output sizes, in table order (row slices and
    reshapes: no transpose, so a caller holding HF-oriented arrays pays no transposing copy).
    ``xp``: as ``params_from_device``."""
    if xp is None:
        import jax.numpy as xp

    fields = {}
    for name in device_names():
        rows = [s for s in LAYER_PARAMS if s.device_name == name]
        a = xp.asarray(fused[name], xp.float32)
        if rows[0].kind == NORM:
            fields[rows[0].field] = a.reshape(rows[0].golden_shape(cfg))
            continue
        start = 0  # a: [out_total, in]
        for s in rows:
            out = s.hf_shape(cfg)[0]
            fields[s.field] = a[start:start + out].reshape(s.golden_shape(cfg))  # HF -> golden: a reshape
            start += out
    return LayerParams(**fields)


def device_transposed() -> dict[str, bool]:
    """Per device tensor name: whether the device stores its HF array transposed ([in, out])."""
    return {s.device_name: s.transpose for s in LAYER_PARAMS}


def layer_from_params(layer: LayerParams, cfg: ExpertConfig) -> dict[str, np.ndarray]:
    """One layer's device arrays (float32, device layout) from the golden's unstacked ``LayerParams``."""
    return _device_layer({s.field: layer_to_hf(s.field, np.asarray(getattr(layer, s.field), np.float32), cfg)
                          for s in LAYER_PARAMS}, cfg)


def layer_from_hf(state: Mapping[str, object], i: int, cfg: ExpertConfig, *, expert_prefix: str = "") -> dict[str, np.ndarray]:
    """One layer's device arrays straight from an HF-format state dict (numpy / jax arrays; any float
    dtype is widened to float32). Raises ValueError naming a missing key."""
    hf = {}
    for s in LAYER_PARAMS:
        key = f"{expert_prefix}layers.{i}.{s.hf_suffix}"
        if key not in state:
            raise ValueError(f"state dict lacks {key!r}")
        hf[s.field] = np.asarray(state[key], np.float32)
    return _device_layer(hf, cfg)


def final_norm_from_hf(state: Mapping[str, object], *, expert_prefix: str = "") -> np.ndarray:
    """The final RMSNorm gamma [1, 1, 1, D] from an HF-format state dict."""
    return np.asarray(state[expert_prefix + FINAL_NORM_HF], np.float32).reshape(1, 1, 1, -1)


def model_from_params(params: ExpertParams, cfg: ExpertConfig) -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """(per-layer device arrays, final-norm gamma [1, 1, 1, D]) from stacked golden params."""
    layers = [layer_from_params(jax.tree.map(lambda a, i=i: a[i], params.layers), cfg) for i in range(cfg.num_layers)]
    return layers, np.asarray(params.final_norm, np.float32).reshape(1, 1, 1, -1)


def layer_formats(weights: str) -> dict[str, str]:
    """Host format of every per-layer device tensor: matmul weights in ``weights``, gammas bf16."""
    kind = {s.device_name: s.kind for s in LAYER_PARAMS}
    return {name: "bf16" if kind[name] == NORM else weights for name in device_names()} | {FINAL_NORM_DEVICE: "bf16"}


def rope_host(seq_len: int, rope_delta: int, cfg: ExpertConfig) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [1, 1, T, H] float32 for the expert positions ``i + rope_delta + S``."""
    cos, sin = expert_rope(seq_len, rope_delta, cfg=cfg)
    return tuple(np.asarray(a, np.float32)[None, None] for a in (cos, sin))


def mask_host(seq_len: int, cfg: ExpertConfig, *, rows: int) -> np.ndarray:
    """The additive mask [1, 1, rows, Smax] float32 (identical rows; see the module docstring)."""
    cfg.check_seq_len(seq_len)
    m = np.asarray(tail_slot_mask(seq_len, max_seq_len=cfg.max_seq_len, num_tokens=cfg.num_tokens), np.float32)
    return np.ascontiguousarray(np.broadcast_to(m, (1, 1, rows, cfg.max_seq_len)))


def host_tensor(ns, array: np.ndarray, fmt: str):
    """A host tensor of ``array`` in format ``fmt`` and TILE layout (``ns``: ttnn or the emulation).

    ``ns.Tensor(array, dtype)`` packs block formats into TILE directly (values equal
    ``jaxref.numerics.quantize_bfp``); bf16 / fp32 come out row-major and are tilized on the host.
    """
    check_choice("fmt", fmt, DTYPE_ATTR)
    t = ns.Tensor(np.array(array, np.float32, order="C"), getattr(ns, DTYPE_ATTR[fmt]))  # owned, writable
    return t if t.layout == ns.TILE_LAYOUT else ns.to_layout(t, ns.TILE_LAYOUT)


def read_host(ns, device_tensor) -> np.ndarray:
    """A device tensor's values as float32 numpy (``from_device`` -> float32 -> numpy)."""
    t = ns.to_dtype(ns.from_device(device_tensor), ns.float32)
    return np.asarray(t.to_numpy(), np.float32).reshape(tuple(device_tensor.shape))
