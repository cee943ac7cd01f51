"""HF transformers oracle glue: the expert golden's reference models in torch.

Builds HF ``Qwen3VLTextModel`` / ``Qwen3VLTextDecoderLayer`` modules holding a golden's
``ExpertParams`` (copied through ``jaxref.weights.to_hf_state_dict``, which also checks the export
names), feeds them the golden's ``KVCache`` through HF's ``DynamicCache`` and runs the expert
tokens non-causally (4-D additive mask of zeros, eager attention, fp32 by default).

Used by the tests and the report (section 1's parity table, section 6's timings). Needs the
``oracle`` extra (torch + transformers); they are imported when a function here is first called,
so importing this module (and ``jaxref``) works without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxref.config import ExpertConfig
from jaxref.expert import ExpertParams, KVCache
from jaxref.weights import to_hf_state_dict

if TYPE_CHECKING:
    import torch
    from transformers.cache_utils import DynamicCache
    from transformers.models.qwen3_vl.modeling_qwen3_vl import (
        Qwen3VLTextConfig,
        Qwen3VLTextDecoderLayer,
        Qwen3VLTextModel,
    )


def hf_text_config(cfg: ExpertConfig, *, num_layers: int | None = None,
                   attn_implementation: str = "eager") -> Qwen3VLTextConfig:
    """``Qwen3VLTextConfig`` with the geometry of ``cfg``; ``attn_implementation`` 'eager' (the oracle:
    plain matmul + softmax) or 'sdpa' (torch's fused ``scaled_dot_product_attention``).

    ``mrope_section`` must sum to H/2; any split gives plain 1-D RoPE here because the expert's
    three position rows are equal (alpamayo_tt uses Qwen3-VL's [24, 20, 20]).
    """
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextConfig

    half = cfg.head_dim // 2
    section = [24, 20, 20] if half == 64 else [half - 2 * (half // 4), half // 4, half // 4]
    hf_cfg = Qwen3VLTextConfig(
        vocab_size=16,
        hidden_size=cfg.hidden,
        intermediate_size=cfg.ffn,
        num_hidden_layers=cfg.num_layers if num_layers is None else num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim,
        rms_norm_eps=cfg.rms_eps,
        max_position_embeddings=1 << 20,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": cfg.rope_theta, "mrope_section": section},
    )
    if attn_implementation not in ("eager", "sdpa"):
        raise ValueError(f"attn_implementation={attn_implementation!r}: expected 'eager' or 'sdpa'")
    hf_cfg._attn_implementation = attn_implementation
    return hf_cfg


def hf_text_model(params: ExpertParams, cfg: ExpertConfig, *, dtype=None) -> Qwen3VLTextModel:
    """A ``Qwen3VLTextModel`` holding ``params`` (copied through ``to_hf_state_dict``: this also
    checks the export names, ``load_state_dict`` is strict up to the unused token embedding)."""
    import torch
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel

    model = Qwen3VLTextModel(hf_text_config(cfg)).eval()
    sd = {
        k: torch.from_numpy(v)
        for k, v in to_hf_state_dict(params, cfg, with_freqs=False).items()
        if k.startswith(("layers.", "norm."))
    }
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if unexpected or set(missing) != {"embed_tokens.weight"}:
        raise ValueError(f"HF name mismatch: missing {missing}, unexpected {unexpected}")
    return model.to(dtype or torch.float32)


def hf_decoder_layer(params: ExpertParams, cfg: ExpertConfig, *, layer: int,
                     attn_implementation: str = "eager") -> Qwen3VLTextDecoderLayer:
    """A ``Qwen3VLTextDecoderLayer`` holding layer ``layer`` of ``params`` (loaded strictly, fp32)."""
    import torch
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextDecoderLayer

    if not 0 <= layer < cfg.num_layers:
        raise ValueError(f"layer={layer} must satisfy 0 <= layer < num_layers={cfg.num_layers}")
    hf_cfg = hf_text_config(cfg, num_layers=1, attn_implementation=attn_implementation)
    mod = Qwen3VLTextDecoderLayer(hf_cfg, 0).eval()
    prefix = f"layers.{layer}."
    sd = to_hf_state_dict(params, cfg, with_freqs=False)
    mod.load_state_dict(
        {k[len(prefix) :]: torch.from_numpy(v) for k, v in sd.items() if k.startswith(prefix)}, strict=True
    )
    return mod


def hf_cache(cache: KVCache, *, dtype=None, layers: int | None = None) -> DynamicCache:
    """A ``DynamicCache`` pre-filled with rows [0, S) of every layer (or the first ``layers``):
    HF layout [1, K, S, H], which is the ``KVCache`` layout [L, K, Smax, H] sliced (no transpose)."""
    import torch
    from transformers.cache_utils import DynamicCache

    s = int(cache.seq_len)
    k, v = np.asarray(cache.k[:, :, :s]), np.asarray(cache.v[:, :, :s])
    n = k.shape[0] if layers is None else layers
    to = lambda a: torch.from_numpy(np.array(a, order="C", copy=True))[None].to(dtype or torch.float32)
    return DynamicCache(ddp_cache_data=[(to(k[i]), to(v[i])) for i in range(n)])


def hf_position_ids(cache: KVCache, num_tokens: int) -> torch.Tensor:
    """Qwen3-VL position ids [4, 1, T] (text row + 3 equal M-RoPE rows): ``i + rope_delta + S``."""
    import torch

    pos = torch.arange(num_tokens) + int(cache.rope_delta) + int(cache.seq_len)
    return pos.view(1, 1, -1).expand(4, 1, -1)


def hf_expert_outputs(model, x, cache: KVCache, *, num_tokens: int, dtype=None):
    """Run HF's text model on the expert tokens over the VLM cache.

    Non-causal: a 4-D additive mask of zeros [1, 1, T, S + T] (every cache row and every own token
    visible). Returns (per-layer outputs [L, T, D], final-normed hidden [T, D]) as float32 numpy.
    """
    import torch

    dtype = dtype or torch.float32
    s = int(cache.seq_len)
    outs: list = []
    hooks = [layer.register_forward_hook(lambda _m, _i, o: outs.append(o)) for layer in model.layers]
    try:
        with torch.no_grad():
            res = model(
                inputs_embeds=torch.from_numpy(np.array(x, np.float32))[None].to(dtype),
                attention_mask=torch.zeros(1, 1, num_tokens, s + num_tokens, dtype=dtype),
                position_ids=hf_position_ids(cache, num_tokens),
                cache=hf_cache(cache, dtype=dtype, layers=len(model.layers)),
                use_cache=True,
            )
    finally:
        for h in hooks:
            h.remove()
    per_layer = np.stack([o[0].float().numpy() for o in outs])
    return per_layer, res.last_hidden_state[0].float().numpy()
