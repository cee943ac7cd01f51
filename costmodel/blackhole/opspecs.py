"""One ttnn op instance as data: its kind, shapes, formats and program config, and its modelled time.

The expert's layer graph (``graph.layer_op_specs``), a measured row of ``costmodel/data`` and a
row of a device-profiler CSV all become one of these, so the fit, the what-if model and the CSV
reader/writer share one mapping from an op to its roofline (``spec.us(hw, fit)``). Fields may be
tracers inside the differentiable model; concrete specs are hashable (jit static arguments).
"""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.ops import (
    barrier_read_us,
    eltwise_us,
    fill_cache_us,
    heads_us,
    kernel_only,
    matmul_2d_us,
    matmul_dram_sharded_us,
    matmul_us,
    read_us,
    rms_norm_us,
    rope_us,
    softmax_us,
    validate_sfpu_binary,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.program_config import (
    DRAM_SHARDED,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
)
from costmodel.blackhole.sdpa import sdpa_causal_us, sdpa_decode_us, sdpa_standard_us
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import Blackhole, blackhole
from costmodel.smooth import Relax

_frozen = dataclasses.dataclass(frozen=True)


@_frozen
class MatmulSpec:
    """``ttnn.linear([M,K] act, [K,N] weights)`` with a matmul program config, priced by ``cfg.kind``:
    ``mcast_1d_in0`` / ``mcast_1d_in1`` by ``ops.matmul_us``, ``mcast_2d`` by ``ops.matmul_2d_us``,
    ``dram_sharded`` by ``ops.matmul_dram_sharded_us``.
    ``in0_l1`` / ``out_l1``: activation input / output L1-interleaved (1D and 2D kinds; DRAM-interleaved
    otherwise). ``in0_sharded``: the activation is L1-sharded the way the kind reads it
    (``IN0_SHARD_LAYOUT``: width-sharded for 1D in0-multicast, height-sharded for 1D in1-multicast,
    block-sharded for 2D; exclusive with ``in0_l1``). ``batch``: batches of a batched matmul ([batch, M, K] x [batch or 1, K, N] with the
    per-batch split, ``fuse_batch=False``; 1D and 2D kinds): each batch runs the whole K loop.
    ``in0_last_ktile_w``: logical K mod 32 of the activation (ttnn's ``in0_last_ktile_w``; 0: K tile-aligned),
    whose last K tile the 1D kinds' interleaved in0 reader zeroes past the logical K (``ops.ktile_pad_us``)."""

    M: int
    K: int
    N: int
    cfg: MatmulProgramConfig
    weight_dtype: str
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    fused_activation: bool = False
    in0_l1: bool = False
    out_l1: bool = False
    batch: int = 1
    in0_sharded: bool = False
    in0_last_ktile_w: int = 0
    op_class = "matmul"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        c = self.cfg
        if not (isinstance(self.batch, int) and self.batch >= 1):
            raise ValueError(f"batch={self.batch!r} must be an integer >= 1")
        if self.in0_sharded and self.in0_l1:
            raise ValueError("in0_sharded=True and in0_l1=True: the activation is either L1-sharded or "
                             "L1-interleaved; expected at most one")
        if self.in0_last_ktile_w and (c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1) or self.in0_sharded):
            raise ValueError(f"in0_last_ktile_w={self.in0_last_ktile_w}: the ragged-K padding is modelled for the 1D "
                             f"kinds' interleaved in0 reader; got kind={c.kind!r}, in0_sharded={self.in0_sharded}")
        if c.kind == MCAST_2D:
            if self.fused_activation:
                raise ValueError("the mcast_2d matmul models no fused activation; got fused_activation=True")
            return matmul_2d_us(hw, fit, M=self.M, K=self.K, N=self.N, in0_block_w=c.in0_block_w,
                                per_core_M=c.per_core_M, per_core_N=c.per_core_N, weight_dtype=self.weight_dtype,
                                act_dtype=self.act_dtype, fidelity=self.fidelity, in0_l1=self.in0_l1,
                                in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch, relax=relax)
        if c.kind == DRAM_SHARDED:
            if self.batch != 1:
                raise ValueError(f"the dram_sharded matmul models one batch; got batch={self.batch}")
            if self.fused_activation or self.in0_l1 or self.out_l1 or self.in0_sharded:
                raise ValueError(f"the dram_sharded matmul takes its activation and output L1-sharded by "
                                 f"construction (not flagged) and models no fused activation; got "
                                 f"fused_activation={self.fused_activation}, in0_l1={self.in0_l1}, "
                                 f"in0_sharded={self.in0_sharded}, out_l1={self.out_l1}")
            return matmul_dram_sharded_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                                          act_dtype=self.act_dtype, fidelity=self.fidelity, relax=relax)
        if c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1):
            raise ValueError(f"matmul program config kind={c.kind!r} is not modelled; the cost model prices "
                             f"{[MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, DRAM_SHARDED]}")
        return matmul_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                         act_dtype=self.act_dtype, fidelity=self.fidelity, fused_activation=self.fused_activation,
                         in0_l1=self.in0_l1, in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch,
                         in0_last_ktile_w=self.in0_last_ktile_w, relax=relax)


@_frozen
class NormSpec:
    """``ttnn.rms_norm`` over [rows, width] (``fused_residual``: add + rms_norm in one op;
    ``layernorm``: ``ttnn.layer_norm``, mean statistic and beta as well; ``fp32_dest_acc``: the
    compute kernel config's ``fp32_dest_acc_en``, Float32 intermediates)."""

    rows: int
    width: int
    act_dtype: str = "bf16"
    fused_residual: bool = False
    layernorm: bool = False
    fp32_dest_acc: bool = False
    op_class = "norm"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return rms_norm_us(hw, fit, rows=self.rows, width=self.width, act_dtype=self.act_dtype,
                           fused_residual=self.fused_residual, layernorm=self.layernorm,
                           fp32_dest_acc=self.fp32_dest_acc, relax=relax)


@_frozen
class SoftmaxSpec:
    """``ttnn.softmax`` over the last dim of [rows, width] (interleaved, no mask; ``ops.softmax_us``);
    ``width`` is tile-padded; ``fp32_dest_acc``: Float32 intermediates (as ``NormSpec``); ``pad_cols``:
    columns of each row's last tile past the logical width (CLIP's [12, 19, 19] scores: 13), which make
    the kernels build and add a padding mask."""

    rows: int
    width: int
    act_dtype: str = "bf16"
    fp32_dest_acc: bool = False
    pad_cols: int = 0
    op_class = "norm"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return softmax_us(hw, fit, rows=self.rows, width=self.width, act_dtype=self.act_dtype,
                          fp32_dest_acc=self.fp32_dest_acc, pad_cols=self.pad_cols, relax=relax)


@_frozen
class RopeSpec:
    """``rotary_embedding_hf`` on [1, heads, rows, head_dim]."""

    heads: int
    rows: int
    head_dim: int
    act_dtype: str = "bf16"
    op_class = "rope"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return rope_us(hw, fit, heads=self.heads, rows=self.rows, head_dim=self.head_dim, act_dtype=self.act_dtype,
                       relax=relax)


@_frozen
class HeadsSpec:
    """``nlp_create_qkv_heads`` (kind 'create') / ``nlp_concat_heads`` ('concat') on [rows, tiles_per_row*32];
    ``head_dim`` only names the concat input's layout [1, heads, rows, head_dim] in a profiler CSV;
    ``in_l1``: the input is L1-interleaved."""

    kind: str
    rows: int
    tiles_per_row: int
    act_dtype: str = "bf16"
    head_dim: int = 32
    in_l1: bool = False
    op_class = "heads"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return heads_us(hw, fit, rows=self.rows, tiles_per_row=self.tiles_per_row, act_dtype=self.act_dtype,
                        in_l1=self.in_l1, relax=relax)


@_frozen
class FillCacheSpec:
    """``ttnn.fill_cache`` of [kv_heads, rows, head_dim] into a ``kv_dtype`` cache."""

    kv_heads: int
    rows: int
    head_dim: int
    kv_dtype: str
    act_dtype: str = "bf16"
    op_class = "fill_cache"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return fill_cache_us(hw, fit, kv_heads=self.kv_heads, rows=self.rows, head_dim=self.head_dim,
                             act_dtype=self.act_dtype, kv_dtype=self.kv_dtype, relax=relax)


@_frozen
class EltwiseSpec:
    """Binary ``ttnn.add`` (kind 'add') / ``ttnn.mul`` ('mul') on [rows, width]; ``n_inputs`` 1 for a
    scalar second operand (one tensor read per output tile). ``sfpu``: binary_ng's SFPU path
    (``is_sfpu``), with ``activations`` the fused unary ops as (operand, op) pairs, operand 'lhs' /
    'rhs' / 'post', op 'sigmoid' / 'silu' (``ops.sfpu_binary_tile_cycles``)."""

    kind: str
    rows: int
    width: int
    act_dtype: str = "bf16"
    n_inputs: int = 2
    sfpu: bool = False
    activations: tuple[tuple[str, str], ...] = ()

    def __post_init__(self):
        if self.sfpu:
            validate_sfpu_binary(self.kind, self.activations)
        elif self.activations:
            raise ValueError(f"activations={self.activations} on the FPU path: priced on the SFPU path only")

    @property
    def op_class(self) -> str:
        # the SFPU kernel is another program than the FPU eltwise: kept out of the eltwise rows that pin
        # launch_eltwise_us (costmodel/data/report_calibration.json lists the classes it fits)
        return "eltwise_sfpu" if self.sfpu else "eltwise"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return eltwise_us(hw, fit, rows=self.rows, width=self.width, n_inputs=self.n_inputs,
                          act_dtype=self.act_dtype, kind=self.kind, sfpu=self.sfpu, activations=self.activations,
                          relax=relax)


@_frozen
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


@_frozen
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


@_frozen
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


@_frozen
class DramReadSpec:
    """A read-only DRAM stream (microbenchmark): ``readers`` cores each read ``total_bytes / readers``
    in pages of ``page_bytes``; the shared building block ``ops.read_us`` of every op above.

    ``pages_per_barrier``: None, the reader keeps reads in flight (double-buffered: the round trip is
    hidden); n, it issues n pages and waits for them, so each group of n pages costs the overlap of a
    DRAM round trip and their read, the same block cost as a matmul reader's (``ops.overlap``)."""

    readers: int
    total_bytes: float
    page_bytes: float
    pages_per_barrier: int | None = None
    op_class = "dram_read"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        per_reader = self.total_bytes / self.readers
        pages = per_reader / self.page_bytes
        if self.pages_per_barrier is None:
            return read_us(hw, fit, pages, per_reader, self.readers, relax=relax)
        return barrier_read_us(hw, fit, pages, per_reader, self.readers, groups=pages / self.pages_per_barrier,
                               relax=relax)


@_frozen
class KernelSpec:
    """``inner`` measured as a profiler report's DEVICE KERNEL DURATION: the device kernel only,
    without the host/dispatch part of the launch that a traced per-op table includes
    (``ops.kernel_only``)."""

    inner: object
    scope = "kernel"

    @property
    def op_class(self) -> str:
        return self.inner.op_class

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return self.inner.us(hw, kernel_only(fit), relax=relax)


@_frozen
class ChipSpec:
    """``inner`` measured on another Blackhole board (``chip``: a ``hardware.blackhole`` preset name;
    ``grid``: (x, y) worker grid where the report's board ran a smaller one): priced on that board's
    spec with the same fitted parameters (the ``hw`` argument is ignored)."""

    inner: object
    chip: str
    grid: tuple[int, int] | None = None

    @property
    def op_class(self) -> str:
        return self.inner.op_class

    def board(self) -> Blackhole:
        hw = blackhole(self.chip)
        if self.grid is None:
            return hw
        gx, gy = self.grid
        if not (1 <= gx <= hw.grid_x and 1 <= gy <= hw.grid_y):
            raise ValueError(f"grid={self.grid}: expected a worker grid within {self.chip}'s "
                             f"{hw.grid_x}x{hw.grid_y}")
        return dataclasses.replace(hw, grid_x=int(gx), grid_y=int(gy))

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        return self.inner.us(self.board(), fit, relax=relax)


OpSpec = (MatmulSpec | NormSpec | SoftmaxSpec | RopeSpec | HeadsSpec | FillCacheSpec | EltwiseSpec | SdpaDecodeSpec
          | SdpaStandardSpec | SdpaCausalSpec | DramReadSpec | KernelSpec | ChipSpec)
