"""The expert on one Blackhole chip: per-op table of a layer, the 64-layer step, the 10-step sample.

``step_breakdown(hw, fit, bc, cfg=...)`` is the pure, jit/vmap/grad-able model (exact with
``relax=None``, relaxed with a ``Relax``); ``evaluate(...)`` validates a concrete configuration
and runs the exact model (the discrete evaluator). The what-if CLI is ``costmodel.blackhole.cli``.

Graph (seeds/EXPERT_NOTES.md, 19 ttnn ops per layer): rms_norm -> wqkv -> nlp_create_qkv_heads
-> q_norm, k_norm -> rope_q, rope_k -> fill_cache_k, fill_cache_v -> attention -> concat_heads ->
wo -> add -> rms_norm2 -> w1 (silu), w3 -> mul -> w2 -> add2. The 64 layers plus the final
RMSNorm replay as one trace; per step the host uploads the 64x1536 bf16 embedding and downloads
the final hidden state, and runs action_in_proj / action_out_proj; sample() re-uploads cos/sin and
the mask once, then runs 10 Euler steps.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax

from costmodel._pytree import pytree_dataclass, static_field
from costmodel.blackhole.opspecs import (
    EltwiseSpec,
    FillCacheSpec,
    HeadsSpec,
    MatmulSpec,
    NormSpec,
    OpSpec,
    RopeSpec,
    SdpaDecodeSpec,
    SdpaStandardSpec,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.port import FUSED_ACTIVATION, Port, matmul_shapes, port_matmuls
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.compile_options import jit
from costmodel.hardware import GRID, TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax
from jaxref.config import ExpertConfig
from jaxref.validation import check_int

LAYER_OPS = ("rms_norm", "wqkv", "nlp_create_qkv_heads", "q_norm", "k_norm", "rope_q", "rope_k",
             "fill_cache_k", "fill_cache_v", "attention", "concat_heads", "wo", "add", "rms_norm2",
             "w1", "w3", "mul", "w2", "add2")
# add + rms_norm2 and add2 + the next layer's rms_norm become one fused residual+norm op each
FUSED_LAYER_OPS = ("wqkv", "nlp_create_qkv_heads", "q_norm", "k_norm", "rope_q", "rope_k",
                   "fill_cache_k", "fill_cache_v", "attention", "concat_heads", "wo", "add_rms_norm2",
                   "w1", "w3", "mul", "w2", "add2_rms_norm")
OP_CLASS = {
    "rms_norm": "norm", "q_norm": "norm", "k_norm": "norm", "rms_norm2": "norm",
    "add_rms_norm2": "norm", "add2_rms_norm": "norm",
    "wqkv": "matmul", "wo": "matmul", "w1": "matmul", "w3": "matmul", "w2": "matmul",
    "nlp_create_qkv_heads": "heads", "concat_heads": "heads", "rope_q": "rope", "rope_k": "rope",
    "fill_cache_k": "fill_cache", "fill_cache_v": "fill_cache", "attention": "attention",
    "add": "eltwise", "mul": "eltwise", "add2": "eltwise",
}


@pytree_dataclass
class BlackholeConfig:
    """The cost model's setting: the port (``costmodel.blackhole.port.Port``: formats, SDPA and matmul
    program configs, fidelity) plus what is not the port.

    Attributes:
      port: the port; its matmul and SDPA knobs are float leaves (relaxable), the rest static.
      smax: Smax, cache rows per layer (the decode kernel reads all of them).
      seq_len: S, valid VLM rows (<= Smax - T; only constrains, the masked graph does not depend on S).
      fold_heads: standard SDPA with the G q heads of a kv head folded onto rows (G*T rows per head).
      fuse_add_norm: residual add fused into the following rms_norm (2 ops fewer per layer).
    """

    port: Port
    smax: float
    seq_len: float
    fold_heads: bool = static_field(default=False)
    fuse_add_norm: bool = static_field(default=False)

    @classmethod
    def for_expert(cls, cfg: ExpertConfig | None = None, *, matmuls: str = "tuned", grid: tuple[int, int] = GRID,
                   attn_mode: str = "decode", smax: float | None = None, seq_len: float = 4700.0,
                   **changes) -> BlackholeConfig:
        """The measured port (``Port.for_expert(cfg)``): Smax = cfg's (8192), S 4700, tuned matmuls,
        decode SDPA k_chunk 128, 16 cores/head, bf16 cache, bfp8 weights, bfp4 mask; ``matmuls='default'``
        uses ttnn's default heuristic; ``changes`` as in ``replace``."""
        cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
        port = Port.for_expert(cfg, matmuls=matmuls, grid=grid, attn_mode=attn_mode)
        bc = cls(port=port, smax=float(cfg.max_seq_len) if smax is None else float(smax), seq_len=float(seq_len))
        return bc.replace(**changes)

    def replace(self, **changes) -> BlackholeConfig:
        """A field of this config (``smax``, ``fold_heads`` ...) or, by its own name, of the port
        (``Port.replace``: ``cache='bfp8'``, ``attention=...``); validation happens in ``validate``."""
        own = {f.name for f in dataclasses.fields(self)}
        port_changes = {k: v for k, v in changes.items() if k not in own}
        mine = {k: v for k, v in changes.items() if k in own}
        if port_changes:
            mine["port"] = mine.get("port", self.port).replace(**port_changes)
        return dataclasses.replace(self, **mine)

    def setting(self) -> dict:
        """Plain-Python summary for reports and JSON: these fields and the port's (``Port.setting``)."""
        return {"smax": float(self.smax), "seq_len": float(self.seq_len), "fold_heads": self.fold_heads,
                "fuse_add_norm": self.fuse_add_norm, **self.port.setting()}


def matmul_configs(cfg: ExpertConfig, kind: str = "tuned", *, grid_x: int = GRID[0], grid_y: int = GRID[1]
                   ) -> dict[str, MatmulProgramConfig]:
    """The port's tuned configs or ttnn's default heuristic, per weight (``port.port_matmuls``)."""
    return port_matmuls(cfg, kind, grid=(grid_x, grid_y))


def attn_q_rows(bc: BlackholeConfig, cfg: ExpertConfig) -> int:
    """Query rows per attention head as the kernel sees them (``SdpaProgramConfig.query_rows``)."""
    return bc.port.attention.query_rows(group=cfg.group, num_tokens=cfg.num_tokens, fold_heads=bc.fold_heads)


def attention_spec(bc: BlackholeConfig, cfg: ExpertConfig) -> SdpaDecodeSpec | SdpaStandardSpec:
    """The attention op of one layer (decode or standard SDPA) as an op spec."""
    port, prec = bc.port, bc.port.precision
    common = {"attn": port.attention, "smax_rows": bc.smax, "q_rows": attn_q_rows(bc, cfg), "head_dim": cfg.head_dim,
              "kv_dtype": prec.cache, "mask_dtype": prec.mask, "act_dtype": prec.activations,
              "fidelity": port.compute.fidelity}
    if port.attention.attn_mode == "decode":
        return SdpaDecodeSpec(users=cfg.num_kv_heads, **common)
    return SdpaStandardSpec(q_heads=cfg.num_kv_heads if bc.fold_heads else cfg.num_heads, **common)


def attention_us(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
                 relax: Relax | None = None):
    """The attention op of one layer (decode or standard SDPA), us."""
    return attention_spec(bc, cfg).us(hw, fit, relax)


def layer_op_specs(bc: BlackholeConfig, *, cfg: ExpertConfig) -> dict[str, OpSpec]:
    """The ttnn ops of one decoder layer as op specs, in graph order (keys: ``LAYER_OPS``, or
    ``FUSED_LAYER_OPS`` with ``fuse_add_norm``)."""
    T, D, N, K, H = cfg.num_tokens, cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    port, prec = bc.port, bc.port.precision
    act, kv = prec.activations, prec.cache
    fid = port.compute.fidelity  # the one compute-kernel config the port passes its matmuls, norms and SDPA
    shapes = matmul_shapes(cfg)

    def mm(name, fused_activation=False):
        M, Kd, Nd = shapes[name]
        return MatmulSpec(M, Kd, Nd, port.matmuls[name], prec.weights, act, fid, fused_activation)

    specs = {
        "rms_norm": NormSpec(T, D, act, fidelity=fid),
        "wqkv": mm("wqkv"),
        "nlp_create_qkv_heads": HeadsSpec("create", T, (N + 2 * K) * H // TILE, act, H),
        "q_norm": NormSpec(N * T, H, act, fidelity=fid),
        "k_norm": NormSpec(K * T, H, act, fidelity=fid),
        "rope_q": RopeSpec(N, T, H, act),
        "rope_k": RopeSpec(K, T, H, act),
        "fill_cache_k": FillCacheSpec(K, T, H, kv, act),
        "fill_cache_v": FillCacheSpec(K, T, H, kv, act),
        "attention": attention_spec(bc, cfg),
        "concat_heads": HeadsSpec("concat", T, N * H // TILE, act, H),
        "wo": mm("wo"),
        "add": EltwiseSpec("add", T, D, act),
        "rms_norm2": NormSpec(T, D, act, fidelity=fid),
        "w1": mm("w1", fused_activation="w1" in FUSED_ACTIVATION),
        "w3": mm("w3"),
        "mul": EltwiseSpec("mul", T, cfg.ffn, act),
        "w2": mm("w2"),
        "add2": EltwiseSpec("add", T, D, act),
    }
    if not bc.fuse_add_norm:
        return specs
    specs["add_rms_norm2"] = NormSpec(T, D, act, fused_residual=True, fidelity=fid)
    specs["add2_rms_norm"] = NormSpec(T, D, act, fused_residual=True, fidelity=fid)
    return {name: specs[name] for name in FUSED_LAYER_OPS}


def layer_op_us(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
                relax: Relax | None = None) -> dict[str, jax.Array]:
    """Device time of each ttnn op of one decoder layer, us, in graph order (``layer_op_specs``)."""
    return {name: spec.us(hw, fit, relax) for name, spec in layer_op_specs(bc, cfg=cfg).items()}


def step_breakdown(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
                   relax: Relax | None = None, op_us=None) -> dict:
    """Per-op table, layer, step and sample times (pure; no validation).

    ``op_us`` (optional) maps an op spec to its time: a caller that has already evaluated some of
    the layer's specs (the fit, whose measured rows share them) passes a memoising evaluator.

    Returns a dict of arrays: ``ops`` (op name -> us), ``layer_us`` (sum of op device times, what
    a profiler table sums to), ``layer_trace_us`` (back-to-back trace replay), ``step_device_us``
    (64 layers + the one unfused norm), ``step_io_us`` (embedding upload + hidden download),
    ``step_us`` (traced step incl. I/O), ``step_full_us`` (+ host action projections),
    ``set_context_us`` (cos/sin + mask upload at the start of sample), ``sample_us``.
    """
    evaluate_op = (lambda spec: spec.us(hw, fit, relax)) if op_us is None else op_us
    ops = {name: evaluate_op(spec) for name, spec in layer_op_specs(bc, cfg=cfg).items()}
    layer_us = sum(ops.values())
    layer_trace_us = layer_us - len(ops) * fit.trace_overlap_us
    # the final RMSNorm (or, with fused add+norm, the first layer's input norm) stands alone
    prec = bc.port.precision
    lone_norm_us = evaluate_op(NormSpec(cfg.num_tokens, cfg.hidden, prec.activations,
                                        fidelity=bc.port.compute.fidelity)) - fit.trace_overlap_us
    step_device_us = cfg.num_layers * layer_trace_us + lone_norm_us
    act_elem_bytes = tile_bytes(prec.activations) / TILE**2
    io_bytes = 2 * cfg.num_tokens * cfg.hidden * act_elem_bytes  # bf16 upload of emb + download of hidden
    step_io_us = io_bytes / fit.host_bytes_per_s * 1e6
    step_us = step_device_us + step_io_us
    step_full_us = step_us + fit.host_proj_us
    mask_rows = attn_q_rows(bc, cfg)
    ctx_bytes = (math.ceil(mask_rows / TILE) * (bc.smax / TILE) * tile_bytes(prec.mask)
                 + 2 * cfg.num_tokens * cfg.head_dim * act_elem_bytes)
    set_context_us = ctx_bytes / fit.host_bytes_per_s * 1e6
    sample_us = set_context_us + cfg.num_steps * step_full_us
    return {"ops": ops, "layer_us": layer_us, "layer_trace_us": layer_trace_us, "step_device_us": step_device_us,
            "step_io_us": step_io_us, "step_us": step_us, "step_full_us": step_full_us,
            "set_context_us": set_context_us, "sample_us": sample_us}


def step_us(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
            relax: Relax | None = None):
    """Traced 64-layer step incl. host I/O (the notes' 32.5 ms), us; a scalar for ``jax.grad``."""
    return step_breakdown(hw, fit, bc, cfg=cfg, relax=relax)["step_us"]


@functools.partial(jit, static_argnames=("cfg",))
def sweep_step_us(hw: Blackhole, fit: FitParams, bc_batch: BlackholeConfig, *, cfg: ExpertConfig) -> jax.Array:
    """Exact traced-step time (us) of a batch of settings: every leaf of ``bc_batch`` has a leading
    axis [B]; returns [B]. No validation: feed it configs from ``costmodel.blackhole.knob_search``'s valid sets."""
    return jax.vmap(lambda b: step_us(hw, fit, b, cfg=cfg))(bc_batch)


def validate(hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig) -> None:
    """Raise ValueError (naming the argument, the value, what was expected) for an illegal setting:
    the port's one rule (``Port.check``) at Smax, the cache rows S + T fit, the stack fits DRAM."""
    for name in ("num_tokens", "hidden", "head_dim", "ffn"):  # the op models count whole 32x32 tiles
        if getattr(cfg, name) % TILE:
            raise ValueError(f"{name}={getattr(cfg, name)} of the expert geometry: expected a multiple of the "
                             f"{TILE}-element tile (the Blackhole op models count whole tiles)")
    smax_i, s_i = check_int("smax", bc.smax, lo=1), check_int("seq_len", bc.seq_len, lo=0)
    if smax_i < s_i + cfg.num_tokens:
        raise ValueError(f"smax={smax_i} must be >= seq_len + num_tokens = {s_i} + {cfg.num_tokens} = "
                         f"{s_i + cfg.num_tokens}: the last {cfg.num_tokens} cache rows hold the expert's own K/V")
    bc.port.check(cfg, hw, smax=bc.smax, fold_heads=bc.fold_heads)
    need = dram_bytes(bc, cfg=cfg)
    if need > float(hw.dram_capacity_bytes):
        raise ValueError(f"smax={int(bc.smax)}: weights + KV cache of {cfg.num_layers} layers need {need / 1e9:.3g} GB "
                         f"of DRAM; expected <= dram_capacity_bytes={float(hw.dram_capacity_bytes) / 1e9:.3g} GB")


def dram_bytes(bc: BlackholeConfig, *, cfg: ExpertConfig) -> float:
    """Bytes resident in DRAM for the whole stack: every layer's weights (tiles of the port's weight
    format) and its K and V cache of Smax rows (cache-format tiles, [K, Smax, H] each)."""
    weights = sum(math.ceil(K / TILE) * math.ceil(N / TILE) for _, K, N in matmul_shapes(cfg).values())
    cache = 2 * cfg.num_kv_heads * math.ceil(float(bc.smax) / TILE) * math.ceil(cfg.head_dim / TILE)
    prec = bc.port.precision
    return float(cfg.num_layers * (weights * tile_bytes(prec.weights) + cache * tile_bytes(prec.cache)))


@functools.partial(jit, fast=True, static_argnames=("cfg", "relax"))
def breakdown_jit(hw, fit, bc, *, cfg, relax=None):
    return step_breakdown(hw, fit, bc, cfg=cfg, relax=relax)


def evaluate(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig | None = None) -> dict:
    """The discrete evaluator: validate, run the exact model, return plain floats.

    Returns: {"per_op_us": {op: us}, "layer_us", "layer_trace_us", "step_ms", "step_full_ms",
    "sample_ms", "step_device_ms", "set_context_ms"}.
    """
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    validate(hw, bc, cfg=cfg)
    out = jax.device_get(breakdown_jit(hw, fit, bc, cfg=cfg))
    order = FUSED_LAYER_OPS if bc.fuse_add_norm else LAYER_OPS  # pytree dicts come back key-sorted
    return {"per_op_us": {k: float(out["ops"][k]) for k in order},
            "layer_us": float(out["layer_us"]), "layer_trace_us": float(out["layer_trace_us"]),
            "step_device_ms": float(out["step_device_us"]) / 1e3, "step_ms": float(out["step_us"]) / 1e3,
            "step_full_ms": float(out["step_full_us"]) / 1e3, "set_context_ms": float(out["set_context_us"]) / 1e3,
            "sample_ms": float(out["sample_us"]) / 1e3}
