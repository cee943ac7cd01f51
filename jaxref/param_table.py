"""The one table of decoder parameters: golden field, HF key, shapes and the device layout.

Every place that enumerates the expert's per-layer parameters reads this table: random init
(``jaxref.weights.init_layer_params``), the shape checks (``jaxref.layers.layer_param_shapes``),
HF import / export (``jaxref.weights``) and the device's host-side weight preparation
(``device.host``). Rows are in device order: the fused ``wqkv`` is the column concatenation of
its rows in table order (q heads 0..N-1, then k heads 0..K-1, then v heads 0..K-1 - HF
``cat(q, k, v)``), as ``nlp_create_qkv_heads`` splits it.

Layouts (seeds/EXPERT_NOTES.md "Layouts"):

  golden        HF ``nn.Linear`` ``[out, in]`` with the head axes split out (``wq [N, H, D]``)
  HF            2-D ``[out, in]`` for Linear weights, 1-D ``[W]`` for RMSNorm gammas
  device        Linear weights transposed, ``[in, out]`` (``linear(x, w)`` = ``x @ w``), fused where
                ``device_name`` repeats; gammas ``[1, 1, 1, W]`` (``ttnn.rms_norm`` needs gamma width ==
                input width), bf16; Linear weights in the weight format (bfloat8_b or bf16), TILE.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxref.config import ExpertConfig
from jaxref.validation import check_choice

LINEAR = "linear"  # a matmul weight: HF [out, in]; init N(0, std^2); device [in, out] in the weight format
NORM = "norm"  # an RMSNorm gamma: [W]; init 1 + jitter N(0, 1); device [1, 1, 1, W] bf16


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One decoder-layer parameter.

    Attributes:
      field: ``LayerParams`` field name (the golden).
      hf_suffix: HF state-dict key under ``layers.{i}.`` (``Qwen3VLTextDecoderLayer``).
      kind: ``LINEAR`` or ``NORM``.
      golden_shape: cfg -> shape of one layer's golden array.
      device_name: name of the device tensor it goes into (rows sharing a name are fused by
        column concatenation in table order).
      transpose: the device stores the HF 2-D array transposed ([in, out]).
    """

    field: str
    hf_suffix: str
    kind: str
    golden_shape: Callable[[ExpertConfig], tuple[int, ...]]
    device_name: str
    transpose: bool

    def hf_shape(self, cfg: ExpertConfig) -> tuple[int, ...]:
        """HF's shape: 2-D [out, in] for Linear weights (heads merged), [W] for gammas."""
        s = self.golden_shape(cfg)
        if self.kind == NORM:
            return s
        if self.field == "wo":  # [D, N, H] -> [D, N*H]
            return (s[0], s[1] * s[2])
        return (s[0] * s[1], s[2]) if len(s) == 3 else s  # [heads, H, D] -> [heads*H, D]


LAYER_PARAMS: tuple[ParamSpec, ...] = (
    ParamSpec("input_norm", "input_layernorm.weight", NORM, lambda c: (c.hidden,), "input_norm", False),
    ParamSpec("wq", "self_attn.q_proj.weight", LINEAR,
              lambda c: (c.num_heads, c.head_dim, c.hidden), "wqkv", True),
    ParamSpec("wk", "self_attn.k_proj.weight", LINEAR,
              lambda c: (c.num_kv_heads, c.head_dim, c.hidden), "wqkv", True),
    ParamSpec("wv", "self_attn.v_proj.weight", LINEAR,
              lambda c: (c.num_kv_heads, c.head_dim, c.hidden), "wqkv", True),
    ParamSpec("q_norm", "self_attn.q_norm.weight", NORM, lambda c: (c.head_dim,), "q_norm", False),
    ParamSpec("k_norm", "self_attn.k_norm.weight", NORM, lambda c: (c.head_dim,), "k_norm", False),
    ParamSpec("wo", "self_attn.o_proj.weight", LINEAR,
              lambda c: (c.hidden, c.num_heads, c.head_dim), "wo", True),
    ParamSpec("post_norm", "post_attention_layernorm.weight", NORM, lambda c: (c.hidden,), "post_norm", False),
    ParamSpec("w_gate", "mlp.gate_proj.weight", LINEAR, lambda c: (c.ffn, c.hidden), "w1", True),
    ParamSpec("w_up", "mlp.up_proj.weight", LINEAR, lambda c: (c.ffn, c.hidden), "w3", True),
    ParamSpec("w_down", "mlp.down_proj.weight", LINEAR, lambda c: (c.hidden, c.ffn), "w2", True),
)

# The final RMSNorm after the stack: HF ``norm.weight`` [D]; on device a [1, 1, 1, D] bf16 gamma.
FINAL_NORM_HF = "norm.weight"
FINAL_NORM_DEVICE = "final_norm"


def spec(field: str) -> ParamSpec:
    """The table row of a ``LayerParams`` field."""
    for s in LAYER_PARAMS:
        if s.field == field:
            return s
    check_choice("field", field, [s.field for s in LAYER_PARAMS])
    raise AssertionError(field)


def device_names() -> tuple[str, ...]:
    """Device tensor names of one layer, in first-appearance order (wqkv fused once)."""
    return tuple(dict.fromkeys(s.device_name for s in LAYER_PARAMS))


def device_shapes(cfg: ExpertConfig) -> dict[str, tuple[int, ...]]:
    """Shape of every per-layer device tensor: Linear [in, out_total], gammas [1, 1, 1, W]."""
    out: dict[str, tuple[int, ...]] = {}
    for name in device_names():
        rows = [s for s in LAYER_PARAMS if s.device_name == name]
        hf = [s.hf_shape(cfg) for s in rows]
        if rows[0].kind == NORM:
            out[name] = (1, 1, 1, hf[0][0])
        else:
            out[name] = (hf[0][1], sum(h[0] for h in hf))
    return out
