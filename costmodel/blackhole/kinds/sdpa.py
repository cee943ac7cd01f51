"""``ttnn.transformer.scaled_dot_product_attention`` (decode with a mask, standard with a mask, causal
prefill): the specs, their prices (``costmodel.blackhole.sdpa``), their core split, their op codes and
their op-report rows (read and written)."""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.params import FitParams
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    compute_kernel,
    no_sharding,
    sdpa_program_config,
    tensor,
)
from costmodel.blackhole.sdpa import sdpa_causal_us, sdpa_decode_us, sdpa_standard_us
from costmodel.blackhole.sdpa_program_config import MAX_CORES_PER_HEAD, SdpaProgramConfig
from costmodel.hardware import Blackhole
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat, CacheFormat, MaskFormat


@dataclasses.dataclass(frozen=True)
class SdpaDecodeSpec:
    """``scaled_dot_product_attention_decode``: ``users`` (batch x kv heads) of ``q_rows`` rows over
    ``smax_rows`` cache rows; ``mask_dtype=None`` is causal decode without a mask."""

    attn: SdpaProgramConfig
    smax_rows: float
    users: int
    q_rows: int
    head_dim: int
    kv_dtype: str
    mask_dtype: str | None
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    grid_cores: int | None = None
    op_class = "attention"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return sdpa_decode_us(hw, fit, self.attn, smax_rows=self.smax_rows, users=self.users, q_rows=self.q_rows,
                              head_dim=self.head_dim, kv_dtype=self.kv_dtype, mask_dtype=self.mask_dtype,
                              act_dtype=self.act_dtype, fidelity=self.fidelity, grid_cores=self.grid_cores,
                              relax=relax)


@dataclasses.dataclass(frozen=True)
class SdpaStandardSpec:
    """``scaled_dot_product_attention`` (non-causal, additive mask) of ``q_heads`` heads x ``q_rows`` rows."""

    attn: SdpaProgramConfig
    smax_rows: float
    q_heads: int
    q_rows: int
    head_dim: int
    kv_dtype: str
    mask_dtype: str
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    op_class = "attention"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return sdpa_standard_us(hw, fit, self.attn, smax_rows=self.smax_rows, q_heads=self.q_heads,
                                q_rows=self.q_rows, head_dim=self.head_dim, kv_dtype=self.kv_dtype,
                                mask_dtype=self.mask_dtype, act_dtype=self.act_dtype, fidelity=self.fidelity,
                                relax=relax)


@dataclasses.dataclass(frozen=True)
class SdpaCausalSpec:
    """``scaled_dot_product_attention`` with ``is_causal=True`` over a prefill: ``q_heads`` heads x ``rows``
    query rows attending to as many key rows, no mask input (``sdpa.sdpa_causal_us``)."""

    attn: SdpaProgramConfig
    rows: int
    q_heads: int
    head_dim: int
    kv_dtype: str
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    op_class = "attention"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return sdpa_causal_us(hw, fit, self.attn, rows=self.rows, q_heads=self.q_heads, head_dim=self.head_dim,
                              kv_dtype=self.kv_dtype, act_dtype=self.act_dtype, fidelity=self.fidelity)


def read(ln: ReportLine, hw: Blackhole, cls: str):
    """An SDPA row (``cls``: 'sdpa_decode' or 'sdpa') as a decode, standard or causal spec."""
    if (ln.attr("paged_attention") or "false") == "true":
        # the kernel reads the cache up to each user's position (cur_pos), a device tensor, not a report column
        raise Skip("paged cache (the decode position, a device tensor, is not in the report)")
    if (ln.attr("is_causal") or "false") == "true":
        return read_causal(ln, hw, cls)
    if not ln.has("INPUT_3"):
        raise Skip("SDPA without a mask input")
    no_sharding(ln, "INPUT_0", "INPUT_1", "INPUT_2", "INPUT_3", "OUTPUT_0")
    pc = ln.attr("program_config") or ""
    x, k = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    act, kv, mask = (ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", CacheFormat),
                     ln.dtype("INPUT_3", MaskFormat))
    fid = ln.fidelity()
    grid = ln.config_grid(pc, hw)
    k_chunk = float(ln.config_int(pc, "k_chunk_size"))
    if cls == "sdpa_decode":
        if k[1] != 1:
            raise Skip("decode with several kv heads per user (the model's decode view has one)")
        attn = SdpaProgramConfig(k_chunk, 32.0, float(ln.config_int(pc, "max_cores_per_head_batch",
                                                                    default=MAX_CORES_PER_HEAD)))
        cores = None if grid is None or grid == (hw.grid_x, hw.grid_y) else grid[0] * grid[1]
        return SdpaDecodeSpec(attn, float(k[2]), x[1], x[2], x[3], kv, mask, act, fid, grid_cores=cores)
    attn = SdpaProgramConfig(k_chunk, float(ln.config_int(pc, "q_chunk_size")), attn_mode="standard")
    return SdpaStandardSpec(attn, float(k[2]), x[1], x[2], x[3], kv, mask, act, fid)


# q and k chunk rows of an SDPA op without a program config (sdpa_program_factory.cpp and the device
# operation's get_q_chunk_size / get_k_chunk_size: ``program_config ? program_config->q_chunk_size : 32``)
SDPA_DEFAULT_CHUNK = 32


def read_causal(ln: ReportLine, hw: Blackhole, cls: str) -> SdpaCausalSpec:
    """A causal standard-SDPA row over a whole prefill (``sdpa.sdpa_causal_us``): query rows = key rows,
    no mask input, no chunk offset, window or MLA; other causal forms are skipped with the reason."""
    if cls != "sdpa":
        raise Skip("causal SDPA decode (the decode position is not in the report)")
    for name in ("chunk_start_idx", "chunk_start_idx_tensor", "sliding_window_size", "head_dim_v"):
        if (ln.attr(name) or "std::nullopt") != "std::nullopt":
            raise Skip(f"causal SDPA with {name} {ln.attr(name)} (the model prices a whole prefill)")
    for name in ("is_windowed", "use_mla"):
        if (ln.attr(name) or "false") != "false":
            raise Skip(f"causal SDPA with {name} (the model prices a whole prefill)")
    if ln.has("INPUT_3"):
        raise Skip("causal SDPA with a mask input")
    no_sharding(ln, "INPUT_0", "INPUT_1", "INPUT_2", "OUTPUT_0")
    x, k, v = ln.shape("INPUT_0"), ln.shape("INPUT_1"), ln.shape("INPUT_2")
    if x[0] != 1 or k[0] != 1:
        raise Skip("batched causal SDPA (the model prices batch 1)")
    if x[2] != k[2] or v[2] != k[2]:
        raise Skip(f"causal SDPA with {x[2]} query rows over {k[2]} key rows (the model prices a whole "
                    "prefill)")
    if k[3] != x[3] or v[3] != x[3]:
        raise ln.fail(ln.dim_col("INPUT_1", "X"), f"head dim {k[3]} of K (V {v[3]}) != {x[3]} of Q")
    kv = ln.dtype("INPUT_1", CacheFormat)
    if ln.dtype("INPUT_2", CacheFormat) != kv:
        raise Skip("K and V in different formats")
    pc = ln.attr("program_config") or "std::nullopt"
    if pc == "std::nullopt":  # ttnn's chunks without a config ("program_config ? ...->q_chunk_size : 32")
        attn = SdpaProgramConfig(float(SDPA_DEFAULT_CHUNK), float(SDPA_DEFAULT_CHUNK), attn_mode="standard")
    else:
        ln.config_grid(pc, hw)
        attn = SdpaProgramConfig(float(ln.config_int(pc, "k_chunk_size")),
                                 float(ln.config_int(pc, "q_chunk_size")), attn_mode="standard")
    if x[2] % int(attn.q_chunk) or (x[2] // int(attn.q_chunk)) % 2:
        raise Skip(f"causal SDPA of {x[2]} rows in q chunks of {int(attn.q_chunk)}: not an even number of "
                    "chunks (the program's pair split is not modelled)")
    return SdpaCausalSpec(attn, x[2], x[1], x[3], kv, ln.dtype("INPUT_0", ActivationFormat), ln.fidelity())


OP_CLASSES = {"sdpa_decode": ("SdpaDecodeDeviceOperation", "ScaledDotProductAttentionDecode"),
              "sdpa": ("SDPAOperation", "ScaledDotProductAttention", "SdpaDeviceOperation")}  # first: written
SPECS = (SdpaDecodeSpec, SdpaStandardSpec, SdpaCausalSpec)


def cores(spec, hw: Blackhole) -> int:
    """The whole grid, or a decode program's own smaller grid."""
    if isinstance(spec, SdpaDecodeSpec) and spec.grid_cores is not None:
        return int(spec.grid_cores)
    return hw.grid_cores


def record(spec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    fid = spec.fidelity
    if isinstance(spec, SdpaCausalSpec):
        q = tensor((1, spec.q_heads, spec.rows, spec.head_dim), spec.act_dtype)
        kv = tensor((1, spec.q_heads, spec.rows, spec.head_dim), spec.kv_dtype)
        attrs = {"program_config": sdpa_program_config(spec.attn, (hw.grid_x, hw.grid_y)), "is_causal": "true",
                 "chunk_start_idx": "std::nullopt", "compute_kernel_config": compute_kernel(fid)}
        return OP_CLASSES["sdpa"][0], attrs, [q, kv, kv], [q], fid
    rows = int(float(spec.smax_rows))
    if isinstance(spec, SdpaDecodeSpec):
        if spec.mask_dtype is None:
            raise ValueError("causal SDPA decode (no mask) has no op-report form: the decode position is "
                             "not a column of the report")
        if spec.grid_cores is not None:
            raise ValueError(f"SDPA decode on a {spec.grid_cores}-core grid: only the chip's grid has an "
                             "op-report form")
        q = tensor((1, spec.users, spec.q_rows, spec.head_dim), spec.act_dtype)
        kv = tensor((spec.users, 1, rows, spec.head_dim), spec.kv_dtype)
        code = OP_CLASSES["sdpa_decode"][0]
    else:
        q = tensor((1, spec.q_heads, spec.q_rows, spec.head_dim), spec.act_dtype)
        kv = tensor((1, spec.q_heads, rows, spec.head_dim), spec.kv_dtype)
        code = OP_CLASSES["sdpa"][0]
    attrs = {"program_config": sdpa_program_config(spec.attn, (hw.grid_x, hw.grid_y)), "is_causal": "false",
             "paged_attention": "false", "compute_kernel_config": compute_kernel(fid)}
    return code, attrs, [q, kv, kv, tensor((1, 1, spec.q_rows, rows), spec.mask_dtype)], [q], fid
