"""``ttnn.transformer.scaled_dot_product_attention`` (decode with a mask, standard with a mask, causal
prefill): the specs, their prices (``costmodel.blackhole.sdpa``), their core split, their op codes and
their op-report rows (read and written)."""

from __future__ import annotations

import dataclasses
import math

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
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat, CacheFormat, MaskFormat


@dataclasses.dataclass(frozen=True)
class SdpaDecodeSpec:
    """``scaled_dot_product_attention_decode``: ``users`` (batch x kv heads) of ``q_rows`` rows over
    ``smax_rows`` cache rows; ``mask_dtype=None`` is causal decode without a mask; ``pairs_per_core`` > 1:
    more pairs than cores, each core runs that many one after another (``decode_split``)."""

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
    pairs_per_core: int = 1
    op_class = "attention"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return sdpa_decode_us(hw, fit, self.attn, smax_rows=self.smax_rows, users=self.users, q_rows=self.q_rows,
                              head_dim=self.head_dim, kv_dtype=self.kv_dtype, mask_dtype=self.mask_dtype,
                              act_dtype=self.act_dtype, fidelity=self.fidelity, grid_cores=self.grid_cores,
                              pairs_per_core=self.pairs_per_core, relax=relax)


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
    causal = (ln.attr("is_causal") or "false") == "true"
    if cls == "sdpa_decode" and causal:
        return read_causal_decode(ln, hw)
    if (ln.attr("paged_attention") or "false") == "true":
        raise Skip("paged cache without is_causal (the model prices a paged decode by its position bound)")
    if causal:
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


def decode_split(*, grid_cores: int, max_cores_per_head: int, batch: int, kv_heads: int) -> tuple[int, int]:
    """(cores per (batch, kv head) pair, pairs per core) of ttnn's decode factory
    (``sdpa_decode_program_factory.cpp`` @ 007f92d0: num_cores_per_batch = min(grid, max x B x kv) / B,
    num_cores_per_head = max(1, that / kv), num_heads_per_core = max(1, ceil(kv / that)))."""
    per_batch = min(grid_cores, max_cores_per_head * batch * kv_heads) // batch
    return max(1, per_batch // kv_heads), max(1, math.ceil(kv_heads / max(per_batch, 1)))


def dynamic_chunk_tiles(cur_pos: int, *, fp32_dest_acc: bool) -> int:
    """Tiles of K rows per chunk the decode kernels pick when ``k_chunk_size`` is 0: the next power of two
    of cur_pos // 32 + 1, at most the Destination register's tiles (4 with fp32 accumulation, else 8)
    (``rt_args_common.hpp`` @ 0cb8f4da79a217558a0e6f6e06dcdbb2d97005b4: ``nearest_pow_of_2_up_to_8``)."""
    need = cur_pos // TILE + 1
    return min(4 if fp32_dest_acc else 8, 1 << (need - 1).bit_length())


def chunk_rows(k_chunk_size: int, cur_pos: int, *, fp32_dest_acc: bool) -> int:
    """K rows per chunk of a causal decode at ``cur_pos``: ``k_chunk_size``, or where it is 0 the kernels'
    own (``dynamic_chunk_tiles``)."""
    return k_chunk_size or TILE * dynamic_chunk_tiles(cur_pos, fp32_dest_acc=fp32_dest_acc)


def position_chunks(cur_pos: int, k_chunk: int) -> int:
    """K chunks each pair reads at ``cur_pos``: up to and including the one holding it."""
    return cur_pos // k_chunk + 1


def causal_decode_spec(*, k_chunk: int, chunks: int, batch: int, kv_heads: int, q_rows: int, head_dim: int,
                       kv_dtype: str, act_dtype: str, fidelity: str, max_cores_per_head: int, grid_cores: int | None,
                       pairs_per_core: int) -> SdpaDecodeSpec:
    """The ``SdpaDecodeSpec`` of a causal decode reading ``chunks`` chunks of ``k_chunk`` rows per (batch, kv
    head) pair, split over at most ``max_cores_per_head`` cores (the price's at most ``MAX_CORES_PER_HEAD``);
    ``grid_cores``: the program's own grid where it is smaller than the chip's, else None."""
    attn = SdpaProgramConfig(float(k_chunk), 32.0, float(min(max_cores_per_head, MAX_CORES_PER_HEAD)))
    return SdpaDecodeSpec(attn, float(chunks * k_chunk), batch * kv_heads, q_rows, head_dim, kv_dtype, None,
                          act_dtype, fidelity, grid_cores=grid_cores, pairs_per_core=pairs_per_core)


def read_causal_decode(ln: ReportLine, hw: Blackhole) -> SdpaDecodeSpec:
    """A causal flash-decode row (the position ``cur_pos`` a device tensor, contiguous or paged cache) as a
    ``SdpaDecodeSpec`` without a mask.

    The position sets how many k chunks each (batch, kv head) pair reads, up to and including the one
    holding cur_pos (every tile of that chunk is read), and, with ``k_chunk_size`` 0, the chunk's size
    (``dynamic_chunk_tiles``). Where the caller gives it (``ln.decode_position``, the same for every
    user) the row is priced at it. Without it, the row is priced over the cache's capacity (its rows,
    or a paged cache's blocks per user x block rows) where that does not depend on the position: the
    capacity is one chunk, or its chunks are no more than the pair's cores, each then on a core of its
    own, the position only setting how many partials the reducer merges (an upper bound); the rows whose
    chunks would queue on a core, whose cores run several pairs one after another, or whose chunk size
    is dynamic are skipped with that reason. So are the forms the model has no term for (a sink or mask
    input, MLA, a shared cache). Q and the output may be sharded (the decode program reads each user's
    few Q tiles once, priced as one DRAM read per user)."""
    for name in ("use_mla", "share_cache"):
        if (ln.attr(name) or "std::nullopt") not in ("std::nullopt", "false"):
            raise Skip(f"SDPA decode with {name}={ln.attr(name)}")
    for name in ("head_dim_v", "cache_position_modulo"):
        if (ln.attr(name) or "std::nullopt") != "std::nullopt":
            raise Skip(f"SDPA decode with {name}={ln.attr(name)}")
    paged = (ln.attr("paged_attention") or "false") == "true"
    extra = "INPUT_5" if paged else "INPUT_4"
    if ln.has(extra) or not ln.has("INPUT_3") or (paged and not ln.has("INPUT_4")):
        raise Skip("SDPA decode with an attention sink or a mask input (the model prices q, k, v, cur_pos and "
                   "a page table)")
    no_sharding(ln, "INPUT_1", "INPUT_2")
    x, k, v = ln.shape("INPUT_0"), ln.shape("INPUT_1"), ln.shape("INPUT_2")
    batch, kv_heads = x[1], k[1]
    override = ln.attr("num_kv_heads_override") or "std::nullopt"
    if override != "std::nullopt" and override != str(kv_heads):
        raise Skip(f"SDPA decode with num_kv_heads_override {override} != the cache's {kv_heads} heads")
    if v[:2] != k[:2] or k[3] != x[3] or v[3] != x[3]:
        raise ln.fail(ln.dim_col("INPUT_2", "X"), f"K {k} and V {v} do not match Q {x}'s head dim {x[3]}")
    if paged:
        pt = ln.shape("INPUT_4")
        if pt[2] != batch:
            raise ln.fail(ln.dim_col("INPUT_4", "Y"), f"page table of {pt[2]} users != Q's batch {batch}")
        capacity = pt[3] * k[2]  # blocks per user x rows per block
    else:
        if k[0] != batch:
            raise ln.fail(ln.dim_col("INPUT_1", "W"), f"cache batch {k[0]} != Q's batch {batch}")
        capacity = k[2]
    window = ln.attr("sliding_window_size") or "std::nullopt"
    if window != "std::nullopt":
        raise Skip(f"SDPA decode with a sliding window of {window} rows")
    pos = ln.decode_position
    if pos is not None and pos >= capacity:
        raise ValueError(f"decode_position={pos}: the cache of line {ln.line} of {ln.path} holds {capacity} rows "
                         f"per user; expected a position below {capacity}")
    unknown = "the decode position, a device tensor not in the report (give it: --decode-position)"
    text = ln.attr("k_chunk_size") or "0"
    if not text.isdigit():
        raise ln.fail("ATTRIBUTES", f"k_chunk_size={text!r}; expected a non-negative integer")
    k_chunk = int(text)
    if k_chunk == 0:  # the paged path's default when the program config gives none either
        if pos is None:
            raise Skip(f"SDPA decode with k_chunk_size 0: its kernels size each k chunk from {unknown} (32 x "
                       "min(8, the next power of 2 of cur_pos / 32 + 1) rows)")
        k_chunk = chunk_rows(k_chunk, pos, fp32_dest_acc=ln.fp32_dest_acc())
    if k_chunk % TILE:
        raise Skip(f"SDPA decode with k_chunk_size {k_chunk} (the model prices whole-tile chunks)")
    pc = ln.attr("program_config") or "std::nullopt"
    grid = None if pc == "std::nullopt" else ln.config_grid(pc, hw)
    grid_cores = hw.grid_cores if grid is None else grid[0] * grid[1]
    max_per_head = grid_cores if pc == "std::nullopt" else ln.config_int(pc, "max_cores_per_head_batch",
                                                                           default=MAX_CORES_PER_HEAD)
    per_pair, pairs_per_core = decode_split(grid_cores=grid_cores, max_cores_per_head=max_per_head, batch=batch,
                                            kv_heads=kv_heads)
    if pos is None:
        chunks = math.ceil(capacity / k_chunk)
        if pairs_per_core > 1:
            raise Skip(f"SDPA decode with {pairs_per_core} (batch, kv head) pairs per core, one after another, each "
                       f"reading the k chunks up to {unknown}")
        if chunks > per_pair:
            raise Skip(f"paged or contiguous cache of {chunks} k chunks over {per_pair} cores per head: {unknown}, "
                       "sets how many each core reads")
    else:
        chunks = position_chunks(pos, k_chunk)
    if min(chunks, per_pair) > MAX_CORES_PER_HEAD:  # ttnn gives each its core; the price splits over at most 16
        raise Skip(f"{min(chunks, per_pair)} k chunks on as many cores per head: the price splits a head over at "
                   f"most {MAX_CORES_PER_HEAD} cores")
    return causal_decode_spec(k_chunk=k_chunk, chunks=chunks, batch=batch, kv_heads=kv_heads, q_rows=x[2],
                              head_dim=x[3], kv_dtype=ln.dtype("INPUT_1", CacheFormat),
                              act_dtype=ln.dtype("INPUT_0", ActivationFormat), fidelity=ln.fidelity(),
                              max_cores_per_head=max_per_head,
                              grid_cores=None if grid is None or grid == (hw.grid_x, hw.grid_y) else grid_cores,
                              pairs_per_core=pairs_per_core)


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
