"""Device-profiler op reports (``ops_perf_results_*.csv``) in and out of the cost model.

Out: ``spec_record`` turns an op spec (and its modelled or measured time) into an ``OpRecord`` of
the profiler's schema (``report_schema``): real op codes, ttnn's attribute text with the full program
config, input and output shapes / layouts / formats / memory, CORE COUNT as the model splits the
op. ``write_csv`` writes a list of them.

In: ``read_report`` reads a real report as tt-perf-report does (V1 or V2 column names, signposts
and host ops skipped, one device or all, rows with invalid device durations dropped with a
warning) and classifies every row: 'modelled' (with its op spec) or skipped with the reason
(op not modelled, program-config kind not modelled, batched operands, paged cache, ...). A
malformed cell of a row the model would fit is a ValueError naming the file, line and column.
"""

from __future__ import annotations

import collections
import csv
import dataclasses
import hashlib
import math
import pathlib
import re
from collections.abc import Iterator

from costmodel.blackhole import data_movement, minimal_matmul
from costmodel.blackhole.data_movement import (
    DataMovementSpec,
    busiest_core_loads,
    reshape_tile_work,
    tiles,
    transpose_hc_writes,
)
from costmodel.blackhole.matmul_auto_config import auto_config
from costmodel.blackhole.minimal_matmul import MinimalMatmulSpec, default_config
from costmodel.blackhole.ops import ACTIVATION_OPERANDS, SFPU_BINARY_BF16_CYCLES, dram_sharded_workers
from costmodel.blackhole.opspecs import (
    ChipSpec,
    EltwiseSpec,
    FillCacheSpec,
    HeadsSpec,
    KernelSpec,
    MatmulSpec,
    NormSpec,
    RopeSpec,
    SdpaCausalSpec,
    SdpaDecodeSpec,
    SdpaStandardSpec,
    SoftmaxSpec,
)
from costmodel.blackhole.program_config import (
    DRAM_SHARDED,
    IN0_SHARD_LAYOUT,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
)
from costmodel.blackhole.report_schema import (
    DIMS,
    DTYPE_OF_TTNN,
    DURATION,
    GAP,
    TTNN_OF_DTYPE,
    OpRecord,
    TensorDesc,
    format_config,
    write_report,
)
from costmodel.blackhole.row import Row
from costmodel.blackhole.sdpa_program_config import MAX_CORES_PER_HEAD, SdpaProgramConfig
from costmodel.hardware import FIDELITY_PASSES, TILE, Blackhole, blackhole
from jaxref.validation import choices_of
from jaxref.vocabulary import ActivationFormat, CacheFormat, MaskFormat, WeightFormat

MODELLED = "modelled"
# Op codes per op class; the first is written. ttnn renames device operations between versions.
OP_CODES = {
    "matmul": ("MatmulDeviceOperation", "Matmul"),
    "norm": ("LayerNormDeviceOperation", "LayerNorm"),
    "create_heads": ("NlpCreateHeadsDeviceOperation", "NLPCreateHeadsDeviceOperation", "NlpCreateHeads"),
    "concat_heads": ("NLPConcatHeadsDeviceOperation", "NlpConcatHeadsDeviceOperation", "NLPConcatHeads"),
    "rope": ("RotaryEmbeddingHfDeviceOperation", "RotaryEmbeddingHf"),
    "fill_cache": ("UpdateKVCacheOperation", "UpdateCacheDeviceOperation", "UpdateCache"),
    "eltwise": ("BinaryNgDeviceOperation", "BinaryDeviceOperation"),
    "sdpa_decode": ("SdpaDecodeDeviceOperation", "ScaledDotProductAttentionDecode"),
    "sdpa": ("SDPAOperation", "ScaledDotProductAttention", "SdpaDeviceOperation"),
    "minimal_matmul": minimal_matmul.OP_CODES,
    "softmax": ("SoftmaxDeviceOperation", "Softmax"),
    **{f"data_movement/{kind}": tuple(c for c, k in data_movement.OP_CODES.items() if k == kind)
       for kind in dict.fromkeys(data_movement.OP_CODES.values())},
}
CLASS_OF_CODE = {code: cls for cls, codes in OP_CODES.items() for code in codes}
KIND_NAMES = {"mcast_1d_in0": "1D in0-multicast", "mcast_1d_in1": "1D in1-multicast",
              "mcast_2d": "2D multicast", "dram_sharded": "DRAM-sharded"}
ARCH_HW = {"blackhole": "p150a", "p150": "p150a", "p150a": "p150a", "p150b": "p150a", "p150c": "p150a",
           "blackhole_p150": "p150a", "p100": "p100a", "p100a": "p100a", "blackhole_p100": "p100a",
           "blackhole_p100a": "p100a"}
DEVICE_OP_TYPES = ("tt_dnn_device", "")
# Ops that move data between chips (ttnn's CCL device operations and ring attention across devices):
# outside the one-chip model, set apart from the device time it should price.
COLLECTIVE_WORDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "RingJoint", "RingAttention",
                    "PointToPoint", "Ccl", "CCL", "SendAsync", "RecvAsync", "MeshPartition")
COLLECTIVE = "collective across chips (outside the one-chip model)"
# tt-perf-report's rule (perf_report.is_invalid_device_duration): a trace window's rows carry an
# op-to-op latency of minus the window, far larger than the op itself
INVALID_GAP_MIN_NS = 1_000_000


# ---- out: op spec -> report row --------------------------------------------------------------------
def _t(shape, dtype: str, layout: str = "TILE", memory: str = "DEV_0_DRAM_INTERLEAVED") -> TensorDesc:
    return TensorDesc(tuple(int(d) for d in shape), TTNN_OF_DTYPE[dtype], layout, memory)


def _compute_kernel(fidelity: str) -> str:
    return format_config("ComputeKernelConfig", [("math_fidelity", fidelity), ("math_approx_mode", 0),
                                                 ("fp32_dest_acc_en", 0), ("packer_l1_acc", 1),
                                                 ("dst_full_sync_en", 0)])


def matmul_program_config(c: MatmulProgramConfig) -> str:
    """A matmul program config as the profiler writes it: ttnn's repr with ',' written ';'."""
    return c.ttnn_repr().replace(",", ";")


def sdpa_program_config(a: SdpaProgramConfig, grid: tuple[int, int]) -> str:
    return format_config("SDPAProgramConfig", [
        ("compute_with_storage_grid_size", f"(x={grid[0]};y={grid[1]})"), ("sub_core_grids", "std::nullopt"),
        ("q_chunk_size", int(a.q_chunk)), ("k_chunk_size", int(a.k_chunk)), ("exp_approx_mode", int(a.exp_approx_mode)),
        ("max_cores_per_head_batch", int(a.cores_per_head))])


def model_cores(spec, hw: Blackhole) -> int:
    """Cores the model splits ``spec`` over (the op models' split in ``costmodel.blackhole.ops``:
    a matmul's N/32 / per_core_N, row-reducing ops their tile rows, each capped by the grid;
    elementwise ops and SDPA the grid; a ``ChipSpec`` on its own board)."""
    if isinstance(spec, ChipSpec):
        return model_cores(spec.inner, spec.board())
    g = hw.grid_cores
    if isinstance(spec, MatmulSpec):  # the split matmul_us / matmul_2d_us / matmul_dram_sharded_us price
        if spec.cfg.kind == DRAM_SHARDED:
            return dram_sharded_workers(hw, spec.cfg)
        return spec.cfg.num_cores(M=spec.M, N=spec.N)
    if isinstance(spec, MinimalMatmulSpec):
        return spec.cores()
    if isinstance(spec, DataMovementSpec):
        return spec.cores(hw)
    if isinstance(spec, SoftmaxSpec):  # sent to the whole grid (ops.softmax_us)
        return g
    if isinstance(spec, NormSpec | HeadsSpec):
        return min(math.ceil(spec.rows / TILE), g)
    if isinstance(spec, FillCacheSpec):
        return min(spec.kv_heads * math.ceil(spec.rows / TILE), g)
    if isinstance(spec, RopeSpec):
        return min(spec.heads * math.ceil(spec.rows / TILE) * (spec.head_dim // TILE), g)
    if isinstance(spec, EltwiseSpec):  # binary_ng sends its program to the whole grid (ops.eltwise_us)
        return g
    if isinstance(spec, SdpaDecodeSpec) and spec.grid_cores is not None:
        return int(spec.grid_cores)
    return g


def spec_record(spec, hw: Blackhole, duration_us: float | None, *, heads: tuple[int, int] | None = None) -> OpRecord:
    """The op report row of ``spec`` (``heads``: (q heads, kv heads) of a create-heads op; without
    it every head counts as a q head, num_kv_heads=0, as ttnn's q-only form). Raises ValueError
    for a spec without a report form."""
    fid = getattr(spec, "fidelity", "")
    ns = None if duration_us is None else float(duration_us) * 1e3

    def mk(code, attrs, ins, outs, fidelity=""):
        return OpRecord(code, attrs, tuple(ins), tuple(outs), fidelity, model_cores(spec, hw), ns, arch="blackhole",
                        available_cores=hw.grid_cores)

    if isinstance(spec, MatmulSpec):
        c = spec.cfg
        if spec.fused_activation != (c.fused_activation == "silu"):
            raise ValueError(f"fused_activation={spec.fused_activation} but the program config's is "
                             f"{c.fused_activation!r}; a report carries one (the config's)")
        if spec.batch > 1 and c.fuse_batch:
            raise ValueError(f"batch={spec.batch} with fuse_batch=True: a fused batch is one matmul of batch*M rows "
                             "(write it with batch=1)")
        b = int(spec.batch)
        attrs = {"program_config": matmul_program_config(c),
                 "compute_kernel_config": _compute_kernel(fid), "output_dtype": "DataType::BFLOAT16",
                 "bcast_batch": "true" if b == 1 else "false", "transpose_a": "false", "transpose_b": "false",
                 "user_run_batched": "false", "untilize_out": "false"}
        l1, dram = "DEV_0_L1_INTERLEAVED", "DEV_0_DRAM_INTERLEAVED"
        in0 = f"DEV_0_L1_{IN0_SHARD_LAYOUT[c.kind]}" if spec.in0_sharded else l1 if spec.in0_l1 else dram
        in0_desc = _t((1, b, spec.M, spec.K), spec.act_dtype, memory=in0)
        if spec.in0_last_ktile_w:  # the logical K whose last tile is ragged
            in0_desc = dataclasses.replace(in0_desc, logical=(1, b, spec.M, spec.K - TILE + spec.in0_last_ktile_w))
        return mk(OP_CODES["matmul"][0], attrs,
                  [in0_desc,
                   _t((1, b, spec.K, spec.N), spec.weight_dtype)],
                  [_t((1, b, spec.M, spec.N), spec.act_dtype, memory=l1 if spec.out_l1 else dram)], fid)
    if isinstance(spec, MinimalMatmulSpec):
        cfg = format_config("MinimalMatmulConfig", [
            ("M_block_size", spec.m_block), ("K_block_size", spec.k_block), ("N_block_size", spec.n_block),
            ("subblock_h", spec.subblock_h), ("subblock_w", spec.subblock_w),
            ("compute_with_storage_grid_size", f"(x={spec.grid_x};y={spec.grid_y})")])
        ckc = _compute_kernel(fid).replace("fp32_dest_acc_en=0", f"fp32_dest_acc_en={int(spec.fp32_dest_acc)}")
        attrs = {"compute_kernel_config": ckc, "config": cfg, "fused_activation": "std::nullopt"}
        ins = [_t((1, 1, spec.M, spec.K), spec.act_dtype), _t((1, 1, spec.K, spec.N), spec.weight_dtype)]
        if spec.bias:
            ins.append(_t((1, 1, TILE, spec.N), spec.act_dtype))
        return mk(minimal_matmul.OP_CODES[0], attrs, ins, [_t((1, 1, spec.M, spec.N), spec.act_dtype)], fid)
    if isinstance(spec, NormSpec):
        x = _t((1, 1, spec.rows, spec.width), spec.act_dtype)
        gamma = _t((1, 1, spec.width // TILE, TILE), spec.act_dtype, "ROW_MAJOR")
        attrs = {"norm_type": f"LayerNormType::{'LAYERNORM' if spec.layernorm else 'RMSNORM'}", "eps": "1e-05",
                 "program_config": "LayerNormDefaultProgramConfig(legacy_reduction=0;legacy_rsqrt=0;use_welford=0)",
                 "distributed_norm_stage": "DistributedLayerNormStage::NOT_DISTRIBUTED"}
        if spec.fp32_dest_acc:
            attrs["compute_kernel_config"] = _compute_kernel("HiFi4").replace("fp32_dest_acc_en=0", "fp32_dest_acc_en=1")
        ins = [x, x, gamma] if spec.fused_residual else [x, gamma]
        return mk(OP_CODES["norm"][0], attrs, ins + ([gamma] if spec.layernorm else []), [x], "HiFi4")
    if isinstance(spec, SoftmaxSpec):
        x = dataclasses.replace(_t((1, 1, spec.rows, spec.width), spec.act_dtype),
                                logical=(1, 1, spec.rows, spec.width - spec.pad_cols))
        ckc = _compute_kernel("HiFi4").replace("fp32_dest_acc_en=0", f"fp32_dest_acc_en={int(spec.fp32_dest_acc)}")
        attrs = {"compute_kernel_config": ckc, "dim": "3", "inplace": "false", "is_causal_mask": "false",
                 "numeric_stable": "true", "program_config": "SoftmaxDefaultProgramConfig()", "scale": "std::nullopt",
                 "softmax_type": "SoftmaxOperationType::Softmax"}
        return mk(OP_CODES["softmax"][0], attrs, [x], [x], "HiFi4")
    in_memory = "DEV_0_L1_INTERLEAVED" if getattr(spec, "in_l1", False) else "DEV_0_DRAM_INTERLEAVED"
    if isinstance(spec, HeadsSpec) and spec.kind == "create":
        total = spec.tiles_per_row * TILE // spec.head_dim
        nq, nkv = (total, 0) if heads is None else heads
        if nq + 2 * nkv != total:
            raise ValueError(f"heads={heads}: q + 2 kv heads must be the {total} heads of the input")
        outs = [_t((1, nq, spec.rows, spec.head_dim), spec.act_dtype)]
        if nkv:
            outs += [_t((1, nkv, spec.rows, spec.head_dim), spec.act_dtype)] * 2
        attrs = {"head_dim": str(spec.head_dim), "num_q_heads": str(nq), "num_kv_heads": str(nkv),
                 "transpose_k_heads": "false"}
        return mk(OP_CODES["create_heads"][0], attrs, [_t((1, 1, spec.rows, spec.tiles_per_row * TILE),
                                                           spec.act_dtype, memory=in_memory)], outs)
    if isinstance(spec, HeadsSpec):
        n = spec.tiles_per_row * TILE // spec.head_dim
        return mk(OP_CODES["concat_heads"][0], {}, [_t((1, n, spec.rows, spec.head_dim), spec.act_dtype,
                                                       memory=in_memory)],
                  [_t((1, 1, spec.rows, spec.tiles_per_row * TILE), spec.act_dtype)])
    if isinstance(spec, RopeSpec):
        x = _t((1, spec.heads, spec.rows, spec.head_dim), spec.act_dtype)
        cs = _t((1, 1, spec.rows, spec.head_dim), spec.act_dtype)
        return mk(OP_CODES["rope"][0], {}, [x, cs, cs], [x])
    if isinstance(spec, FillCacheSpec):
        cache = _t((1, spec.kv_heads, spec.rows, spec.head_dim), spec.kv_dtype)
        return mk(OP_CODES["fill_cache"][0], {"op_type": "UpdateCacheOpType::FILL", "batch_idx": "0",
                                              "update_idx": "0", "batch_offset": "0"},
                  [cache, _t((1, spec.kv_heads, spec.rows, spec.head_dim), spec.act_dtype)], [cache])
    if isinstance(spec, EltwiseSpec):
        x = _t((1, 1, spec.rows, spec.width), spec.act_dtype)
        scalar = spec.n_inputs == 1
        acts = {f"{o}_activations": _activation_text(op for operand, op in spec.activations if operand == o)
                for o in ACTIVATION_OPERANDS}
        return mk(OP_CODES["eltwise"][0], {"binary_op_type": f"BinaryOpType::{spec.kind.upper()}",
                                           "is_sfpu": "true" if spec.sfpu else "false", **acts,
                                           "scalar": "1.0" if scalar else "std::nullopt"},
                  [x] if scalar else [x, x], [x])
    if isinstance(spec, SdpaDecodeSpec | SdpaStandardSpec):
        rows = int(float(spec.smax_rows))
        if isinstance(spec, SdpaDecodeSpec):
            if spec.mask_dtype is None:
                raise ValueError("causal SDPA decode (no mask) has no op-report form: the decode position is "
                                 "not a column of the report")
            if spec.grid_cores is not None:
                raise ValueError(f"SDPA decode on a {spec.grid_cores}-core grid: only the chip's grid has an "
                                 "op-report form")
            q = _t((1, spec.users, spec.q_rows, spec.head_dim), spec.act_dtype)
            kv = _t((spec.users, 1, rows, spec.head_dim), spec.kv_dtype)
            code = OP_CODES["sdpa_decode"][0]
        else:
            q = _t((1, spec.q_heads, spec.q_rows, spec.head_dim), spec.act_dtype)
            kv = _t((1, spec.q_heads, rows, spec.head_dim), spec.kv_dtype)
            code = OP_CODES["sdpa"][0]
        attrs = {"program_config": sdpa_program_config(spec.attn, (hw.grid_x, hw.grid_y)), "is_causal": "false",
                 "paged_attention": "false", "compute_kernel_config": _compute_kernel(fid)}
        return mk(code, attrs, [q, kv, kv, _t((1, 1, spec.q_rows, rows), spec.mask_dtype)], [q], fid)
    if isinstance(spec, SdpaCausalSpec):
        q = _t((1, spec.q_heads, spec.rows, spec.head_dim), spec.act_dtype)
        kv = _t((1, spec.q_heads, spec.rows, spec.head_dim), spec.kv_dtype)
        attrs = {"program_config": sdpa_program_config(spec.attn, (hw.grid_x, hw.grid_y)), "is_causal": "true",
                 "chunk_start_idx": "std::nullopt", "compute_kernel_config": _compute_kernel(fid)}
        return mk(OP_CODES["sdpa"][0], attrs, [q, kv, kv], [q], fid)
    raise ValueError(f"{type(spec).__name__} has no op-report form")


def write_csv(path: str | pathlib.Path, entries: list[tuple[object, float | None]], *, hw: Blackhole | None = None,
              heads: tuple[int, int] | None = None) -> None:
    """Write (op spec, duration us or None) entries as an op report, the ops of one traced step: each
    op after the first ``hw.trace_op_gap_s`` after the previous one (OP TO OP LATENCY). ValueError
    names the entry it cannot encode."""
    hw = blackhole() if hw is None else hw
    records = []
    for i, (spec, us) in enumerate(entries):
        try:
            records.append(spec_record(spec, hw, us, heads=heads))
        except ValueError as e:
            raise ValueError(f"entries[{i}] ({type(spec).__name__}): {e}") from None
    write_report(path, records, op_gap_ns=hw.trace_op_gap_s * 1e9)  # the ops run as one traced step


# ---- in: report row -> classified row ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class ReportRow:
    """One data line of a report: ``status`` is 'modelled' (then ``spec`` is set) or the skip reason;
    ``duration_us`` the row's device kernel time (None where the report has no usable one, and on
    signpost, host-op and other-device rows); ``ideal_us`` tt-perf-report's ideal time of the row,
    whether modelled or not (None where tt-perf-report has none: every op but a matmul)."""

    line: int
    op_code: str
    device_id: int | None
    status: str
    spec: object | None = None
    duration_us: float | None = None
    ideal_us: float | None = None  # tt-perf-report's ideal of a matmul row (``tt_perf_report_ideal_us``)


@dataclasses.dataclass(frozen=True)
class Report:
    """A read report: every data line classified, the hardware it is fitted on, and warnings."""

    path: str
    hw: Blackhole
    arch: str
    rows: tuple[ReportRow, ...]
    warnings: tuple[str, ...]

    def measured_rows(self) -> list[Row]:
        """The modelled lines as fit rows (group ``profiler_csv/<op class>``), priced kernel-only
        (``KernelSpec``): the column read is DEVICE KERNEL DURATION, which has no dispatch time."""
        name = pathlib.Path(self.path).name
        return [Row("profiler_csv", f"{r.line:05d}_{r.op_code}", f"profiler_csv/{r.spec.op_class}", "calibration",
                    r.duration_us, r.duration_us, f"{name} line {r.line}", KernelSpec(r.spec))
                for r in self.rows if r.status == MODELLED]

    def timed_rows(self) -> list[ReportRow]:
        """The device-op rows of the kept device(s) with a usable duration: the report's device time
        (``ReportRow.duration_us`` is None on every other line)."""
        return [r for r in self.rows if r.duration_us is not None]

    def between(self, start: str | None, end: str | None = None) -> Report:
        """The rows inside a signpost window, as tt-perf-report's ``--start-signpost`` /
        ``--end-signpost``: after the first signpost named ``start`` (None: from the first row) and
        before the first ``end`` after it (None: to the last row; the same name as ``start``: its next
        instance). ValueError names the signpost and the ones the report has."""
        names = [(i, r.op_code) for i, r in enumerate(self.rows) if r.status == "signpost"]
        have = sorted({n for _, n in names})

        def first(name: str, after: int, option: str) -> int:
            at = next((i for i, n in names if n == name and i > after), None)
            if at is None:
                where = f" after line {self.rows[after].line}" if after >= 0 else ""
                expected = f"expected one of {have}" if have else "the report has no signposts"
                raise ValueError(f"{option}={name!r}: no such signpost in {self.path}{where}; {expected}")
            return at

        lo = -1 if start is None else first(start, -1, "start-signpost")
        hi = len(self.rows) if end is None else first(end, lo, "end-signpost")
        return dataclasses.replace(self, rows=self.rows[lo + 1:hi])

    def summary(self) -> dict[str, dict[str, int]]:
        """{status: {op code: lines}}, 'modelled' first, then reasons by count."""
        out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in self.rows:
            out[r.status][r.op_code] += 1
        order = sorted(out, key=lambda k: (k != MODELLED, -sum(out[k].values()), k))
        return {k: dict(out[k].most_common()) for k in order}


class _Skip(Exception):
    """A row the model does not cover (the message is the reason)."""


def _finite(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


class _Line:
    """One data row; V1 / V2 column names; errors name the file, line and column. Reads only the
    columns of a row's signature (``SIGNATURE``, INPUT_* / OUTPUT_*), on which classification is cached."""

    def __init__(self, cols: _Columns, cells: list[str], line: int, path: str):
        self.cols, self.cells, self.line, self.path = cols, cells, line, path
        self.v2 = cols.v2
        self.attrs = self.get("ATTRIBUTES")

    def fail(self, column: str, message: str) -> ValueError:
        return ValueError(f"{self.path}: line {self.line}, column {column!r}: {message}")

    def get(self, column: str) -> str:
        if not (column in SIGNATURE or column.startswith(("INPUT_", "OUTPUT_"))):
            raise KeyError(f"{column!r} is not a signature column: rows are classified once per signature")
        return self.cols.cell(self.cells, column)

    def dim_col(self, pre: str, d: str) -> str:
        return f"{pre}_{d}_PAD[LOGICAL]" if self.v2 else f"{pre}_{d}"

    def has(self, pre: str) -> bool:
        return bool(self.get(self.dim_col(pre, "X")))

    def shape(self, pre: str) -> tuple[int, int, int, int]:
        """Padded [W, Z, Y, X] of tensor ``pre`` ('INPUT_0', 'OUTPUT_0')."""
        dims = []
        for d in DIMS:
            col = self.dim_col(pre, d)
            text = self.get(col)
            m = re.fullmatch(r"(\d+)(?:\.0)?(?:\[(\d+)\])?", text)
            if m is None:
                raise self.fail(col, f"{text!r} is not a tensor dimension like '64[64]'")
            if int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
                raise self.fail(col, f"{text!r}: a dimension must be >= 1")
            dims.append(int(m.group(1)))
        return tuple(dims)

    def logical(self, pre: str) -> tuple[int, int, int, int]:
        """Logical [W, Z, Y, X] of tensor ``pre`` (the bracketed value of a V2 column, else the padded one)."""
        out = []
        for d, padded in zip(DIMS, self.shape(pre), strict=True):
            m = re.fullmatch(r"\d+(?:\.0)?\[(\d+)\]", self.get(self.dim_col(pre, d)))
            out.append(padded if m is None else int(m.group(1)))
        return tuple(out)

    def dtype(self, pre: str, allowed) -> str:
        col = f"{pre}_DATATYPE"
        text = self.get(col)
        if not text:
            raise self.fail(col, "empty; expected a ttnn data type such as 'BFLOAT16'")
        fmt = DTYPE_OF_TTNN.get(text)
        if fmt not in choices_of(allowed):
            raise _Skip(f"data type not modelled ({pre} {text or 'empty'})")
        return fmt

    def memory(self, pre: str) -> str:
        return self.get(f"{pre}_MEMORY")

    def attr(self, key: str) -> str | None:
        """An attribute's value text ('key': 'value'), or None."""
        m = re.search(rf"'{re.escape(key)}': '([^']*)'", self.attrs)
        return None if m is None else m.group(1)

    def config_int(self, config: str, key: str, *, default: int | None = None) -> int:
        """A positive integer field ``key=N`` of a program-config text."""
        m = re.search(rf"\b{key}=([^;)]*)", config)
        if m is None:
            if default is None:
                raise self.fail("ATTRIBUTES", f"program config lacks '{key}='")
            return default
        text = m.group(1).strip()
        if not re.fullmatch(r"\d+", text) or int(text) < 1:
            raise self.fail("ATTRIBUTES", f"program config {key}={text!r}; expected a positive integer")
        return int(text)

    def config_flag(self, config: str, key: str, *, default: int) -> int:
        """A 0 / 1 field ``key=N`` of a program-config text (``default`` when absent)."""
        m = re.search(rf"\b{key}=([^;)]*)", config)
        if m is None:
            return default
        text = m.group(1).strip().lower()
        if text not in ("0", "1", "true", "false"):
            raise self.fail("ATTRIBUTES", f"program config {key}={text!r}; expected 0 or 1")
        return int(text in ("1", "true"))

    def config_grid(self, config: str, hw: Blackhole) -> tuple[int, int] | None:
        m = re.search(r"compute_with_storage_grid_size=(?:\(x=(\d+);y=(\d+)\)|(\d+)-(\d+))", config)
        if m is None:
            return None
        gx, gy = (int(v) for v in (m.groups()[:2] if m.group(1) else m.groups()[2:]))
        if not (1 <= gx <= hw.grid_x and 1 <= gy <= hw.grid_y):
            raise self.fail("ATTRIBUTES", f"compute_with_storage_grid_size {gx}x{gy} must fit the {hw.name} "
                                          f"compute grid {hw.grid_x}x{hw.grid_y}")
        return gx, gy

    def fp32_dest_acc(self) -> bool:
        """``fp32_dest_acc_en`` of the row's compute kernel config (ttnn's default, on, when absent)."""
        ckc = self.attr("compute_kernel_config") or ""
        return bool(self.config_flag(ckc, "fp32_dest_acc_en", default=1))

    def fidelity(self) -> str:
        text = self.get("MATH FIDELITY")
        if text not in FIDELITY_PASSES:
            raise self.fail("MATH FIDELITY", f"{text!r}; expected one of {sorted(FIDELITY_PASSES)}")
        return text


def _no_sharding(ln: _Line, *pres: str) -> None:
    for pre in pres:
        if "SHARDED" in ln.memory(pre):
            raise _Skip(f"sharded operand ({pre} {ln.memory(pre).removeprefix('DEV_0_')}); the model "
                        "streams interleaved tensors")


def _in_l1(ln: _Line, pre: str) -> bool:
    """Whether an (interleaved) operand lives in L1, from its memory column ('DEV_0_L1_INTERLEAVED')."""
    return "L1" in ln.memory(pre).split("_")


def _unbatched(ln: _Line, pre: str) -> tuple[int, int, int, int]:
    s = ln.shape(pre)
    if s[0] * s[1] > 1:
        raise _Skip("batched operands")
    return s


def _batches(ln: _Line) -> tuple[int, int]:
    """(in0 batches, in1 batches) of a matmul row: the product of W and Z of each operand."""
    x, w = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    ba, bb = x[0] * x[1], w[0] * w[1]
    if bb > 1 and ba > 1 and (x[0], x[1]) != (w[0], w[1]):
        raise _Skip(f"batched operands broadcast over part of the batch dims ({x[:2]} x {w[:2]}); the model "
                    "prices equal batches or one side unbatched")
    return ba, bb


def _matmul(ln: _Line, hw: Blackhole) -> MatmulSpec:
    pc = ln.attr("program_config") or "std::nullopt"
    x, w = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    ba, bb = _batches(ln)
    name = pc.split("(")[0].strip()
    if name != "std::nullopt" and not name.startswith("MatmulMultiCoreReuse"):
        raise _Skip(f"program-config kind not modelled: {name}")
    act, wdt = ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", WeightFormat)
    M, K, N = x[2], x[3], w[3]
    if w[2] != K:
        raise ln.fail(ln.dim_col("INPUT_1", "Y"), f"K={w[2]} of the weights != K={K} of the activations")
    if name == "std::nullopt":
        memories = [ln.memory(p) for p in ("INPUT_0", "INPUT_1", "OUTPUT_0")]
        grid = (hw.grid_x, hw.grid_y)
        cfg = auto_config(M=M, K=K, N=N, batch_a=ba, batch_b=bb, grid=grid,
                          all_interleaved=all("INTERLEAVED" in m for m in memories),
                          all_dram=all("DRAM" in m for m in memories), fp32_dest_acc=ln.fp32_dest_acc())
        if cfg is None:
            raise _Skip("no program config, and ttnn's own choice for this shape (an L1-size estimate to a 2D "
                        "or non-multicast config) is not modelled")
        pc = matmul_program_config(cfg)  # the report form, read back below as a given config would be
        if _finite(ln.get("CORE COUNT")) not in (None, float(cfg.num_cores(M=M, N=N))):
            raise _Skip(f"no program config; CORE COUNT differs from the {cfg.num_cores(M=M, N=N)} cores of ttnn's "
                        f"choice as modelled ({KIND_NAMES[cfg.kind]})")
    ln.config_grid(pc, hw)  # a grid larger than the chip is an error, whatever the kind
    for key in ("in0_block_w", "per_core_M", "per_core_N"):
        ln.config_int(pc, key)
    try:
        cfg = MatmulProgramConfig.parse(pc)
    except ValueError as e:
        if "is not a matmul config this project models" in str(e):
            raise _Skip(f"program-config kind not modelled: {name}") from None
        raise ln.fail("ATTRIBUTES", str(e)) from None
    batch = max(ba, bb)
    if batch > 1 and cfg.kind == DRAM_SHARDED:
        raise _Skip("batched operands on a DRAM-sharded matmul")
    if batch > 1 and cfg.fuse_batch:
        if bb > 1:
            raise _Skip("fuse_batch with batched weights (ttnn folds the batch into M only for unbatched weights)")
        M, batch = M * ba, 1  # the batch folded into M: one matmul of ba*M rows
    if cfg.kind == DRAM_SHARDED:  # activation and output L1-sharded, weights DRAM width-sharded, by construction
        if "SHARDED" not in ln.memory("INPUT_1") or "DRAM" not in ln.memory("INPUT_1"):
            raise _Skip(f"DRAM-sharded config with weights in {ln.memory('INPUT_1').removeprefix('DEV_0_')} "
                        "(expected DRAM width-sharded)")
    else:
        _no_sharding(ln, "INPUT_1", "OUTPUT_0")
    in0_sharded = cfg.kind != DRAM_SHARDED and _in0_sharded(ln, cfg, M=M, N=N)
    if _in_l1(ln, "INPUT_1") and cfg.kind != DRAM_SHARDED:
        raise _Skip(f"weights in L1 ({ln.memory('INPUT_1').removeprefix('DEV_0_')}); the model streams the "
                    "weights from DRAM")
    if cfg.fused_activation not in (None, "silu"):
        raise _Skip(f"fused activation not modelled ({cfg.fused_activation})")
    if cfg.kind in (MCAST_2D, DRAM_SHARDED) and cfg.fused_activation is not None:
        raise _Skip(f"fused activation on a {KIND_NAMES[cfg.kind]} matmul not modelled ({cfg.fused_activation})")
    try:
        cfg.validate("matmul", hw, M=M, K=K, N=N, weight_dtype=wdt, act_dtype=act, fp32_dest_acc=ln.fp32_dest_acc())
    except ValueError as e:
        raise _Skip(f"program config outside the model's {KIND_NAMES[cfg.kind]} form ({e})") from None
    interleaved_l1 = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D)  # the L1 flags of the 1D and 2D models
    # the 1D factory's in0_last_ktile_w (logical K mod 32), zeroed by the interleaved in0 reader (ops.ktile_pad_us);
    # a transposed in0 pads rows instead (in0_last_ktile_h), not modelled
    ragged_1d = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1) and not in0_sharded and ln.attr("transpose_a") != "true"
    return MatmulSpec(M, K, N, cfg, wdt, act, ln.fidelity(), cfg.fused_activation == "silu",
                      in0_l1=interleaved_l1 and not in0_sharded and _in_l1(ln, "INPUT_0"),
                      out_l1=interleaved_l1 and _in_l1(ln, "OUTPUT_0"), batch=int(batch), in0_sharded=in0_sharded,
                      in0_last_ktile_w=ln.logical("INPUT_0")[3] % TILE if ragged_1d else 0)


def _in0_sharded(ln: _Line, cfg: MatmulProgramConfig, *, M: int, N: int) -> bool:
    """Whether a 1D / 2D multicast matmul row's in0 is L1-sharded the way its kind reads it
    (``IN0_SHARD_LAYOUT``); skips in0 sharded otherwise (in DRAM, or another layout than the kind's),
    and a 1D in0-multicast row whose CORE COUNT exceeds its output cores: the factory then runs
    in0 senders on cores without output work (num_cores = max(output cores, shard cores):
    matmul_multicore_reuse_mcast_1d_program_factory.cpp @ 00629f0f), which the model does not price."""
    memory = ln.memory("INPUT_0")
    if "SHARDED" not in memory:
        return False
    layout = IN0_SHARD_LAYOUT[cfg.kind]
    if memory.removeprefix("DEV_0_") != f"L1_{layout}":
        raise _Skip(f"sharded operand (INPUT_0 {memory.removeprefix('DEV_0_')}); the model reads an L1 {layout} in0 "
                    f"with a {KIND_NAMES[cfg.kind]} config and streams other operands interleaved")
    cores = _finite(ln.get("CORE COUNT"))
    if cfg.kind == MCAST_1D_IN0 and cores is not None and cores > cfg.num_cores(M=M, N=N):
        raise _Skip(f"in0 sharded over more cores ({cores:g} in CORE COUNT) than hold output blocks "
                    f"({cfg.num_cores(M=M, N=N)}): sender-only cores not modelled")
    return True


def _minimal_matmul(ln: _Line, hw: Blackhole) -> MinimalMatmulSpec:
    """A ``MinimalMatmulOp`` row: ``config`` MinimalMatmulConfig(M/K/N_block_size, subblock, grid), or
    std::nullopt for ttnn's defaults (``minimal_matmul.default_config``)."""
    cfg = ln.attr("config") or "std::nullopt"
    if cfg != "std::nullopt" and not cfg.startswith("MinimalMatmulConfig("):
        raise _Skip(f"minimal matmul config {cfg.split('(')[0]!r} not modelled")
    if (ln.attr("fused_activation") or "std::nullopt") != "std::nullopt":
        raise _Skip(f"fused activation not modelled ({ln.attr('fused_activation')})")
    x, w = _unbatched(ln, "INPUT_0"), _unbatched(ln, "INPUT_1")
    # DRAM width-sharded weights: read page by page through a TensorAccessor, as interleaved (minimal_matmul)
    if ln.memory("INPUT_1") != "DEV_0_DRAM_WIDTH_SHARDED":
        _no_sharding(ln, "INPUT_1")
    _no_sharding(ln, "INPUT_0", "OUTPUT_0", *(("INPUT_2",) if ln.has("INPUT_2") else ()))
    for pre in ("INPUT_0", "INPUT_1", "OUTPUT_0"):
        if _in_l1(ln, pre):
            raise _Skip(f"minimal matmul with {pre} in L1 (the model streams DRAM operands)")
    if w[2] != x[3]:
        raise ln.fail(ln.dim_col("INPUT_1", "Y"), f"K={w[2]} of the weights != K={x[3]} of the activations")
    act, wdt = ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", WeightFormat)
    if ln.has("INPUT_2"):
        ln.dtype("INPUT_2", ActivationFormat)
    if cfg == "std::nullopt":  # ttnn's defaults on the device's grid (the row's: ``hw`` is its board)
        grid = (hw.grid_x, hw.grid_y)
        blocks = default_config(M=x[2], N=w[3], fp32_dest_acc=ln.fp32_dest_acc())
    else:
        grid = ln.config_grid(cfg, hw)
        if grid is None:
            raise ln.fail("ATTRIBUTES", "MinimalMatmulConfig lacks compute_with_storage_grid_size")
        blocks = {"m_block": ln.config_int(cfg, "M_block_size"), "k_block": ln.config_int(cfg, "K_block_size"),
                  "n_block": ln.config_int(cfg, "N_block_size"),
                  "subblock_h": ln.config_int(cfg, "subblock_h", default=1),
                  "subblock_w": ln.config_int(cfg, "subblock_w", default=1)}
    spec = MinimalMatmulSpec(x[2], x[3], w[3], grid_x=grid[0], grid_y=grid[1], weight_dtype=wdt, act_dtype=act,
                             fidelity=ln.fidelity(), bias=ln.has("INPUT_2"), fp32_dest_acc=ln.fp32_dest_acc(),
                             **blocks)
    try:
        spec.validate(hw)
    except ValueError as e:
        raise _Skip(f"MinimalMatmulConfig outside the model's legality rule ({e})") from None
    return spec


def _data_movement(ln: _Line, hw: Blackhole, kind: str) -> DataMovementSpec:
    """Reshape / transpose / concat / slice rows (``data_movement``): the op's work unit and reads."""
    ins = [p for p in ("INPUT_0", "INPUT_1", "INPUT_2") if ln.has(p)]
    _no_sharding(ln, *ins, "OUTPUT_0")
    for pre in (*ins, "OUTPUT_0"):
        if ln.get(f"{pre}_LAYOUT") not in ("TILE", ""):
            raise _Skip(f"{kind} of a {ln.get(f'{pre}_LAYOUT')} tensor (the model moves tiles)")
    act = ln.dtype("INPUT_0", ActivationFormat)
    if ln.get("OUTPUT_0_DATATYPE") != ln.get("INPUT_0_DATATYPE"):
        raise _Skip(f"{kind} with a format conversion ({ln.get('INPUT_0_DATATYPE')} -> {ln.get('OUTPUT_0_DATATYPE')})")
    out = tiles(ln.shape("OUTPUT_0"))
    out_dram = 0 if _in_l1(ln, "OUTPUT_0") else out
    if kind == "reshape":
        try:
            reads, copies = reshape_tile_work(ln.logical("INPUT_0"), ln.logical("OUTPUT_0"))
        except ValueError as e:
            raise _Skip(f"reshape not modelled ({e})") from None
        in_l1 = _in_l1(ln, "INPUT_0")
        read_dram = 0 if in_l1 else round(float((reads - 1).sum()))
        # output tiles differ (a 33-row block straddles tile rows): the busiest core's own tiles bind
        loads = busiest_core_loads((reads, copies), hw.grid_cores)
        return DataMovementSpec("reshape", out, float(reads.mean()), read_dram + out_dram, act, in_l1,
                                small_writes_per_unit=float(copies.mean()), core_loads=loads)
    if kind == "transpose":
        dim = ln.attr("dim") or ""
        sub = {"TransposeOpDim::HC": "transpose_hc", "TransposeOpDim::WH": "transpose_wh"}.get(dim)
        if sub is None:
            raise _Skip(f"transpose dim not modelled ({dim or 'no dim'}; the model covers HC and WH)")
        n = tiles(ln.shape("INPUT_0"))
        in_l1 = _in_l1(ln, "INPUT_0")
        if sub == "transpose_wh":
            return DataMovementSpec(sub, n, 1.0, (0 if in_l1 else n) + out_dram, act, in_l1)
        per_tile, pad, per_pad = transpose_hc_writes(ln.logical("INPUT_0"))
        return DataMovementSpec(sub, n, 1.0, (0 if in_l1 else n) + out_dram, act, in_l1, small_writes_per_unit=per_tile,
                                pad_units=pad, small_writes_per_pad_unit=per_pad)
    if kind == "concat":
        for pre in ins[1:]:
            if ln.get(f"{pre}_DATATYPE") != ln.get("INPUT_0_DATATYPE"):
                raise _Skip("concat of tensors of different formats")
        read_dram = sum(tiles(ln.shape(p)) for p in ins if not _in_l1(ln, p))
        return DataMovementSpec("concat", out, 1.0, read_dram + out_dram, act, all(_in_l1(ln, p) for p in ins))
    step = ln.attr("step") or "Shape([1; 1; 1; 1])"
    if re.fullmatch(r"Shape\(\[1(?:; 1)*\]\)", step) is None:
        raise _Skip(f"strided slice not modelled (step {step})")
    in_l1 = _in_l1(ln, "INPUT_0")
    return DataMovementSpec("slice", out, 1.0, (0 if in_l1 else out) + out_dram, act, in_l1)


def _softmax(ln: _Line, hw: Blackhole) -> SoftmaxSpec:
    if (ln.attr("softmax_type") or "SoftmaxOperationType::Softmax") != "SoftmaxOperationType::Softmax":
        raise _Skip(f"softmax variant not modelled ({ln.attr('softmax_type')})")
    if (ln.attr("dim") or "3") not in ("3", "-1"):
        raise _Skip(f"softmax over dim {ln.attr('dim')} (the model reduces the last dim)")
    if (ln.attr("is_causal_mask") or "false") == "true" or ln.has("INPUT_1"):
        raise _Skip("softmax with a mask not modelled")
    if (ln.attr("scale") or "std::nullopt") != "std::nullopt":
        raise _Skip("scaled softmax not modelled")
    pc = ln.attr("program_config") or "SoftmaxDefaultProgramConfig()"
    if not pc.startswith("SoftmaxDefaultProgramConfig"):
        raise _Skip(f"program-config kind not modelled: {pc.split('(')[0]}")
    _no_sharding(ln, "INPUT_0", "OUTPUT_0")
    x = ln.shape("INPUT_0")  # a row-wise op: batch dims are more rows
    # a logical width short of the padded one makes the kernels build and add a padding mask
    pad_cols = x[3] - ln.logical("INPUT_0")[3]
    if not 0 <= pad_cols < TILE:
        raise _Skip(f"softmax row padded by {pad_cols} columns (the padding mask covers part of one tile)")
    return SoftmaxSpec(x[0] * x[1] * x[2], x[3], ln.dtype("INPUT_0", ActivationFormat), _row_fp32_dest_acc(ln),
                       pad_cols=pad_cols)


def _row_fp32_dest_acc(ln: _Line) -> bool:
    """``fp32_dest_acc_en`` of a norm / softmax row (off where the row has no compute kernel config)."""
    ckc = ln.attr("compute_kernel_config") or ""
    return bool(ln.config_flag(ckc, "fp32_dest_acc_en", default=0))


def _norm(ln: _Line, hw: Blackhole) -> NormSpec:
    kind = ln.attr("norm_type")
    if kind not in ("LayerNormType::RMSNORM", "LayerNormType::LAYERNORM"):
        raise _Skip(f"norm type not modelled ({kind or 'no norm_type'}; the model covers RMSNorm and LayerNorm)")
    pc = ln.attr("program_config") or ""
    if pc and not pc.startswith("LayerNormDefaultProgramConfig"):
        raise _Skip(f"program-config kind not modelled: {pc.split('(')[0]}")
    x = ln.shape("INPUT_0")  # a row-wise op: batch dims are more rows
    _no_sharding(ln, "INPUT_0", "OUTPUT_0")
    act = ln.dtype("INPUT_0", ActivationFormat)
    # a residual has x's logical shape; gamma is one logical row (its padded shape may equal x's: [32[1], W]).
    # When x is one logical row too (decode), the count tells: the op's tensors come as x, [residual], [gamma],
    # [beta], so a residual is followed by gamma (and beta): gpt-oss's one-row RMSNorm [x, gamma] lines measure
    # what its 17-row unfused lines do (tests/data/profiler_more/bh_gpt_oss_20b_fused_decode_b1.csv lines 16, 70)
    layernorm = kind == "LayerNormType::LAYERNORM"
    fused = ln.has("INPUT_1") and ln.logical("INPUT_1") == ln.logical("INPUT_0")
    if fused and ln.logical("INPUT_0")[2] == 1:
        fused = ln.has("INPUT_3" if layernorm else "INPUT_2")
    return NormSpec(x[0] * x[1] * x[2], x[3], act, fused, layernorm=layernorm,
                    fp32_dest_acc=_row_fp32_dest_acc(ln))


# ttnn's fused unary ops (UnaryOpType) of binary_ng that the SFPU path prices (ops.SFPU_ACTIVATION_BF16_CYCLES),
# with no parameter (param={}: the accurate, non-approximate kernels)
ACTIVATION_OF_TTNN = {"SIGMOID": "sigmoid", "SILU": "silu"}


def _activation_text(ops) -> str:
    """A binary_ng activation list as ttnn prints it (commas as ';'), of model activation names."""
    ttnn_of = {v: k for k, v in ACTIVATION_OF_TTNN.items()}
    return "{" + "; ".join(f"BasicUnaryWithParam<float; int; unsigned int>(base=BasicUnaryWithParam<float>("
                           f"op_type=UnaryOpType::{ttnn_of[op]};param={{}}))" for op in ops) + "}"


def _activations(ln: _Line) -> tuple[tuple[str, str], ...]:
    """binary_ng's fused activations as (operand, op) pairs ('lhs' / 'rhs' / 'post'), in the attributes'
    order; _Skip for one the model does not price."""
    out = []
    for operand in ACTIVATION_OPERANDS:
        text = ln.attr(f"{operand}_activations") or ""
        found = re.findall(r"op_type=UnaryOpType::(\w+);param=\{([^}]*)\}", text)
        if text.count("UnaryOpType") != len(found):
            raise _Skip(f"fused {operand} activation not read ({text})")
        for name, param in found:
            if name not in ACTIVATION_OF_TTNN or param.strip():
                raise _Skip(f"fused {operand} activation {name}{'(' + param + ')' if param.strip() else ''} not "
                            f"priced (SFPU costs are sourced for {sorted(ACTIVATION_OF_TTNN)} without a parameter)")
            out.append((operand, ACTIVATION_OF_TTNN[name]))
    return tuple(out)


def _eltwise(ln: _Line, hw: Blackhole) -> EltwiseSpec:
    op = ln.attr("binary_op_type") or "no binary_op_type"
    kind = {"BinaryOpType::ADD": "add", "BinaryOpType::MUL": "mul"}.get(op)
    if kind is None:
        raise _Skip(f"binary op type not modelled ({op})")
    scalar = (ln.attr("scalar") or "std::nullopt") != "std::nullopt"
    if ln.has("INPUT_1") == scalar:
        raise _Skip("both a scalar and a second tensor" if scalar else "no second operand and no scalar")
    sfpu = (ln.attr("is_sfpu") or "false") == "true"
    activations = _activations(ln)
    if activations and not sfpu:
        raise _Skip("fused activations on the FPU path: not priced (the model prices them on the SFPU path)")
    if sfpu and kind not in SFPU_BINARY_BF16_CYCLES:
        raise _Skip(f"binary {kind} on the SFPU path (is_sfpu): not priced (the SFPU path prices "
                    f"{sorted(SFPU_BINARY_BF16_CYCLES)})")
    if sfpu and re.search(r"fp32_dest_acc_en=(1|true)", ln.attr("compute_kernel_config") or ""):
        # (the tensors are bfloat16, ActivationFormat: Dest is bfloat16 unless the config asks for Float32)
        raise _Skip("binary op on the SFPU path with a Float32 Dest: only the bfloat16-Dest SFPU costs are sourced")
    x = ln.shape("INPUT_0")  # elementwise: batch dims are more rows
    # a row / column broadcast keeps the padded shape (a [32[1], W] row under a [32[17], W] input: binary_ng
    # runs eltwise_binary_row_bcast.cpp), so the logical shapes tell it
    if not scalar and (ln.shape("INPUT_1") != x or ln.logical("INPUT_1") != ln.logical("INPUT_0")):
        raise _Skip("broadcast operand")
    _no_sharding(ln, "INPUT_0", "OUTPUT_0", *(() if scalar else ("INPUT_1",)))
    act = ln.dtype("INPUT_0", ActivationFormat)
    if not scalar:
        ln.dtype("INPUT_1", ActivationFormat)
    return EltwiseSpec(kind, x[0] * x[1] * x[2], x[3], act, n_inputs=1 if scalar else 2, sfpu=sfpu,
                       activations=activations)


def _heads(ln: _Line, hw: Blackhole, cls: str) -> HeadsSpec:
    _no_sharding(ln, "INPUT_0", "OUTPUT_0")
    act = ln.dtype("INPUT_0", ActivationFormat)
    if cls == "create_heads":
        x = _unbatched(ln, "INPUT_0")
        hd = ln.attr("head_dim")
        if hd is None or not hd.isdigit() or int(hd) < 1:
            raise ln.fail("ATTRIBUTES", f"head_dim={hd!r}; expected a positive integer")
        return HeadsSpec("create", x[2], x[3] // TILE, act, int(hd), in_l1=_in_l1(ln, "INPUT_0"))
    x = ln.shape("INPUT_0")
    if x[0] > 1:
        raise _Skip("batched operands")
    return HeadsSpec("concat", x[2], x[1] * x[3] // TILE, act, x[3], in_l1=_in_l1(ln, "INPUT_0"))


def _rope(ln: _Line, hw: Blackhole) -> RopeSpec:
    x = ln.shape("INPUT_0")
    if x[0] > 1:
        raise _Skip("batched operands")
    _no_sharding(ln, "INPUT_0", "OUTPUT_0")
    return RopeSpec(x[1], x[2], x[3], ln.dtype("INPUT_0", ActivationFormat))


def _fill_cache(ln: _Line, hw: Blackhole) -> FillCacheSpec:
    op = ln.attr("op_type") or "UpdateCacheOpType::FILL"
    if op != "UpdateCacheOpType::FILL":
        raise _Skip(f"cache op type not modelled ({op}; the model covers fill_cache)")
    if "page_table" in ln.attrs or (ln.attr("paged") or "false") == "true":
        raise _Skip("paged cache")
    new = ln.shape("INPUT_1")
    if new[0] > 1:
        raise _Skip("batched operands")
    _no_sharding(ln, "INPUT_0", "INPUT_1")
    return FillCacheSpec(new[1], new[2], new[3], ln.dtype("INPUT_0", CacheFormat), ln.dtype("INPUT_1", ActivationFormat))


def _sdpa(ln: _Line, hw: Blackhole, cls: str):
    if (ln.attr("paged_attention") or "false") == "true":
        raise _Skip("paged cache")
    if (ln.attr("is_causal") or "false") == "true":
        return _sdpa_causal(ln, hw, cls)
    if not ln.has("INPUT_3"):
        raise _Skip("SDPA without a mask input")
    _no_sharding(ln, "INPUT_0", "INPUT_1", "INPUT_2", "INPUT_3", "OUTPUT_0")
    pc = ln.attr("program_config") or ""
    x, k = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    act, kv, mask = (ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", CacheFormat),
                     ln.dtype("INPUT_3", MaskFormat))
    fid = ln.fidelity()
    grid = ln.config_grid(pc, hw)
    k_chunk = float(ln.config_int(pc, "k_chunk_size"))
    if cls == "sdpa_decode":
        if k[1] != 1:
            raise _Skip("decode with several kv heads per user (the model's decode view has one)")
        attn = SdpaProgramConfig(k_chunk, 32.0, float(ln.config_int(pc, "max_cores_per_head_batch",
                                                                    default=MAX_CORES_PER_HEAD)))
        cores = None if grid is None or grid == (hw.grid_x, hw.grid_y) else grid[0] * grid[1]
        return SdpaDecodeSpec(attn, float(k[2]), x[1], x[2], x[3], kv, mask, act, fid, grid_cores=cores)
    attn = SdpaProgramConfig(k_chunk, float(ln.config_int(pc, "q_chunk_size")), attn_mode="standard")
    return SdpaStandardSpec(attn, float(k[2]), x[1], x[2], x[3], kv, mask, act, fid)


# q and k chunk rows of an SDPA op without a program config (sdpa_program_factory.cpp and the device
# operation's get_q_chunk_size / get_k_chunk_size: ``program_config ? program_config->q_chunk_size : 32``)
SDPA_DEFAULT_CHUNK = 32


def _sdpa_causal(ln: _Line, hw: Blackhole, cls: str) -> SdpaCausalSpec:
    """A causal standard-SDPA row over a whole prefill (``sdpa.sdpa_causal_us``): query rows = key rows,
    no mask input, no chunk offset, window or MLA; other causal forms are skipped with the reason."""
    if cls != "sdpa":
        raise _Skip("causal SDPA decode (the decode position is not in the report)")
    for name in ("chunk_start_idx", "chunk_start_idx_tensor", "sliding_window_size", "head_dim_v"):
        if (ln.attr(name) or "std::nullopt") != "std::nullopt":
            raise _Skip(f"causal SDPA with {name} {ln.attr(name)} (the model prices a whole prefill)")
    for name in ("is_windowed", "use_mla"):
        if (ln.attr(name) or "false") != "false":
            raise _Skip(f"causal SDPA with {name} (the model prices a whole prefill)")
    if ln.has("INPUT_3"):
        raise _Skip("causal SDPA with a mask input")
    _no_sharding(ln, "INPUT_0", "INPUT_1", "INPUT_2", "OUTPUT_0")
    x, k, v = ln.shape("INPUT_0"), ln.shape("INPUT_1"), ln.shape("INPUT_2")
    if x[0] != 1 or k[0] != 1:
        raise _Skip("batched causal SDPA (the model prices batch 1)")
    if x[2] != k[2] or v[2] != k[2]:
        raise _Skip(f"causal SDPA with {x[2]} query rows over {k[2]} key rows (the model prices a whole "
                    "prefill)")
    if k[3] != x[3] or v[3] != x[3]:
        raise ln.fail(ln.dim_col("INPUT_1", "X"), f"head dim {k[3]} of K (V {v[3]}) != {x[3]} of Q")
    kv = ln.dtype("INPUT_1", CacheFormat)
    if ln.dtype("INPUT_2", CacheFormat) != kv:
        raise _Skip("K and V in different formats")
    pc = ln.attr("program_config") or "std::nullopt"
    if pc == "std::nullopt":  # ttnn's chunks without a config ("program_config ? ...->q_chunk_size : 32")
        attn = SdpaProgramConfig(float(SDPA_DEFAULT_CHUNK), float(SDPA_DEFAULT_CHUNK), attn_mode="standard")
    else:
        ln.config_grid(pc, hw)
        attn = SdpaProgramConfig(float(ln.config_int(pc, "k_chunk_size")),
                                 float(ln.config_int(pc, "q_chunk_size")), attn_mode="standard")
    if x[2] % int(attn.q_chunk) or (x[2] // int(attn.q_chunk)) % 2:
        raise _Skip(f"causal SDPA of {x[2]} rows in q chunks of {int(attn.q_chunk)}: not an even number of "
                    "chunks (the program's pair split is not modelled)")
    return SdpaCausalSpec(attn, x[2], x[1], x[3], kv, ln.dtype("INPUT_0", ActivationFormat), ln.fidelity())


def _classify(ln: _Line, hw: Blackhole, code: str):
    cls = CLASS_OF_CODE.get(code)
    if cls is None and any(word in code for word in COLLECTIVE_WORDS):
        raise _Skip(COLLECTIVE)
    if cls is None:
        raise _Skip(f"op not modelled ({code})")
    if cls == "matmul":
        return _matmul(ln, hw)
    if cls == "norm":
        return _norm(ln, hw)
    if cls == "eltwise":
        return _eltwise(ln, hw)
    if cls in ("create_heads", "concat_heads"):
        return _heads(ln, hw, cls)
    if cls == "rope":
        return _rope(ln, hw)
    if cls == "fill_cache":
        return _fill_cache(ln, hw)
    if cls == "minimal_matmul":
        return _minimal_matmul(ln, hw)
    if cls == "softmax":
        return _softmax(ln, hw)
    if cls.startswith("data_movement/"):
        return _data_movement(ln, hw, cls.removeprefix("data_movement/"))
    return _sdpa(ln, hw, cls)


def invalid_duration(record: dict) -> bool:
    """tt-perf-report's test of an unusable device duration: missing, non-finite or negative, or
    a row inside a trace window (op-to-op latency of minus far more than the op)."""
    return _invalid(record.get(DURATION) or "", record.get(GAP) or "")


def _invalid(duration: str, gap: str) -> bool:
    d = _finite(duration.strip())
    if d is None or d < 0:
        return True
    g = _finite(gap.strip())
    return g is not None and g < -INVALID_GAP_MIN_NS and abs(g) > max(d * 0.5, INVALID_GAP_MIN_NS)


# The columns an op's classification reads, besides its tensors' INPUT_* / OUTPUT_* columns: rows
# equal in these are classified once (a real report repeats each layer's ops thousands of times).
SIGNATURE = ("OP CODE", "ATTRIBUTES", "MATH FIDELITY", "CORE COUNT", "AVAILABLE WORKER CORE COUNT")


def _records(path: pathlib.Path) -> Iterator[list[str]]:
    """The CSV records of ``path``, streamed (header first); ValueError names the file for binary data."""
    if not path.exists():
        raise ValueError(f"ops-csv={str(path)!r}: no such file; expected an ops_perf_results CSV")
    if not path.is_file():
        raise ValueError(f"ops-csv={str(path)!r} is a directory; expected an ops_perf_results CSV file")

    def lines(f):
        for text in f:
            if "\x00" in text:
                raise ValueError(f"{path}: binary data (NUL bytes); expected an ops_perf_results CSV")
            yield text

    with path.open(encoding="utf-8-sig", newline="") as f:
        try:
            yield from csv.reader(lines(f))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not a text CSV ({e.reason}); expected an ops_perf_results CSV") from None
        except csv.Error as e:
            raise ValueError(f"{path}: not a CSV ({e})") from None


def _header(path: pathlib.Path, cells: list[str] | None) -> list[str]:
    if cells is None:
        raise ValueError(f"{path}: empty; expected a header line and op rows")
    header = [h.strip() for h in cells]
    counts = collections.Counter(h for h in header if h)
    twice = {h: [i + 1 for i, c in enumerate(header) if c == h] for h, k in counts.items() if k > 1}
    if twice:
        h, at = next(iter(twice.items()))
        raise ValueError(f"{path}: line 1 (header): column {h!r} appears {len(at)} times (columns {at}); expected "
                         f"each column once (which one holds the data?)"
                         + (f"; also duplicated: {sorted(twice)[1:]}" if len(twice) > 1 else ""))
    required = ("OP CODE", "OP TYPE", DURATION)
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"{path}: line 1 (header): missing column(s) {missing}; an ops_perf_results CSV has "
                         f"{list(required)}")
    return header


class _Columns:
    """Cell access by column name for one header (missing columns read as '')."""

    def __init__(self, header: list[str]):
        self.index = {h: i for i, h in enumerate(header)}
        self.signature = [i for i, h in enumerate(header) if h in SIGNATURE or h.startswith(("INPUT_", "OUTPUT_"))]
        self.v2 = any(h.endswith("_PAD[LOGICAL]") for h in header)  # tt-metal's newer tensor column names

    def cell(self, cells: list[str], column: str) -> str:
        i = self.index.get(column)
        return cells[i].strip() if i is not None and i < len(cells) else ""


def _device(cols: _Columns, cells: list[str]) -> int | None:
    d = _finite(cols.cell(cells, "DEVICE ID"))
    return int(d) if d is not None and d.is_integer() else None


def _is_device_op(op_type: str, code: str) -> bool:
    return op_type in DEVICE_OP_TYPES and "(torch)" not in code


def read_report(path: str | pathlib.Path, *, hw: Blackhole | None = None, device_id: int | str = "first",
                force_arch: bool = False, require_durations: bool = True) -> Report:
    """Read and classify a profiler op report, streamed in one pass (nothing of a row kept but its
    ``ReportRow``; rows equal in op, attributes and tensors are classified once).

    Args:
      hw: the hardware fitted (default: from DEVICE ARCH, 'blackhole' -> p150a, 'p100*' -> p100a).
      device_id: 'first' (the lowest DEVICE ID in the file), 'all', or a DEVICE ID.
      force_arch: fit a report of another architecture (Wormhole) with the Blackhole model anyway.
      require_durations: False classifies rows without a usable duration too (``duration_us`` None).
    Raises ValueError naming the file (and line / column) for unusable input.
    """
    path = pathlib.Path(path)
    records = _records(path)
    header = _header(path, next(records, None))
    cols = _Columns(header)
    warnings: list[str] = []
    rows, invalid_lines, seen, codes = [], [], {}, {}
    archs: dict[str, int] = {}  # arch -> first line
    ids: set[int] = set()
    most_cores = (0, 0.0)  # (line, AVAILABLE WORKER CORE COUNT) of the largest grid
    fitted = hw
    for i, cells in enumerate(records):
        n = i + 2
        if len(cells) > len(header):
            raise ValueError(f"{path}: line {n}: {len(cells)} cells for {len(header)} header columns")
        if not any(c.strip() for c in cells):
            continue
        code = cols.cell(cells, "OP CODE") or "(empty)"
        code = codes.setdefault(code, code)  # one string per op code, not one per row
        op_type = cols.cell(cells, "OP TYPE")
        dev = _device(cols, cells)
        if "signpost" in op_type:
            rows.append(ReportRow(n, code, dev, "signpost"))
            continue
        if not _is_device_op(op_type, code):
            rows.append(ReportRow(n, code, dev, "host op"))
            continue
        arch = cols.cell(cells, "DEVICE ARCH").lower()
        if arch and arch not in archs:
            archs[arch] = n
            if len(archs) > 1:
                raise ValueError(f"{path}: column 'DEVICE ARCH': several architectures {sorted(archs)} (line "
                                 f"{n}); expected one per report")
            assumed, fitted = fitted, _fitted_hw(path, arch, hw, force_arch, warnings)
            if assumed is not None and assumed != fitted:
                raise ValueError(f"{path}: line {n}, column 'DEVICE ARCH': {arch!r} after device rows without an "
                                 f"architecture (read as {assumed.name}); expected one DEVICE ARCH on every row")
        if dev is not None:
            ids.add(dev)
        cores = _finite(cols.cell(cells, "AVAILABLE WORKER CORE COUNT"))
        if cores is not None and cores > most_cores[1]:
            most_cores = (n, cores)
        bad = _invalid(cols.cell(cells, DURATION), cols.cell(cells, GAP))
        if bad and require_durations:
            invalid_lines.append(n)
            rows.append(ReportRow(n, code, dev, "invalid device duration"))
            continue
        us = None if bad else float(cols.cell(cells, DURATION)) / 1e3
        if us is not None and us <= 0:
            rows.append(ReportRow(n, code, dev, "zero device duration"))
            continue
        if fitted is None:  # no DEVICE ARCH so far: a Blackhole report is assumed (warned below)
            fitted = _fitted_hw(path, "", hw, force_arch, warnings)
        # a digest, not the cells: a report of unique rows would otherwise keep every row's text
        key = hashlib.blake2b("\x1f".join([cells[j] if j < len(cells) else "" for j in cols.signature]).encode(),
                              digest_size=16).digest()
        if key not in seen:
            ln = _Line(cols, cells, n, str(path))
            seen[key] = (*_classified(ln, fitted, code), tt_perf_report_ideal_us(ln, fitted))
        spec, status, ideal = seen[key]
        rows.append(ReportRow(n, code, dev, status, spec, us, ideal))
    if not rows:
        raise ValueError(f"{path}: no data rows")
    if not archs:
        warnings.insert(0, "no DEVICE ARCH in the report: assumed a Blackhole report")
    arch = next(iter(archs), "blackhole")
    fitted = fitted or _fitted_hw(path, arch, hw, force_arch, warnings)
    n, cores = most_cores
    if cores > fitted.grid_cores and not force_arch:
        raise ValueError(f"{path}: line {n}, column 'AVAILABLE WORKER CORE COUNT': {cores:g} cores exceed "
                         f"{fitted.name}'s {fitted.grid_cores}-core grid; wrong --hw?")
    if device_id == "first":  # the lowest DEVICE ID (tt-perf-report merges devices; the model is one chip)
        keep = min(ids) if ids else None
    elif device_id == "all":
        keep = None
    else:
        keep = int(device_id)
        if keep not in ids:
            raise ValueError(f"device-id={device_id}: not in the report (DEVICE IDs {sorted(ids)})")
    if keep is not None and len(ids) > 1:
        other = f"other device (DEVICE ID != {keep}; --device-id all keeps them)"
        rows = [ReportRow(r.line, r.op_code, r.device_id, other)
                if r.device_id != keep and r.status not in ("signpost", "host op") else r for r in rows]
        invalid_lines = [r.line for r in rows if r.status == "invalid device duration"]
    if invalid_lines:
        shown = ", ".join(map(str, invalid_lines[:8])) + (", ..." if len(invalid_lines) > 8 else "")
        warnings.append(f"{len(invalid_lines)} rows had invalid device durations (column {DURATION!r} missing, "
                        f"non-finite or negative, or the row inside a trace window) and were dropped: lines {shown}")
    return Report(str(path), fitted, arch, tuple(rows), tuple(warnings))


def _fitted_hw(path: pathlib.Path, arch: str, hw: Blackhole | None, force_arch: bool, warnings: list[str]) -> Blackhole:
    """The hardware a report of DEVICE ARCH ``arch`` ('' if none) is fitted on; ValueError if refused."""
    arch = arch or "blackhole"
    if arch not in ARCH_HW and not force_arch:
        raise ValueError(f"{path}: column 'DEVICE ARCH' is {arch!r}; expected a Blackhole report ('blackhole', "
                         "'p150*', 'p100*'): the model is of Blackhole, so another architecture's timings are "
                         "refused (pass --force-arch to fit them anyway)")
    if arch not in ARCH_HW:
        warnings.append(f"DEVICE ARCH {arch!r} fitted with the Blackhole model (--force-arch)")
    if hw is None:
        return blackhole(ARCH_HW.get(arch, "p150a"))
    if arch in ARCH_HW and ARCH_HW[arch] == "p100a" and hw.name != "p100a":
        raise ValueError(f"{path}: column 'DEVICE ARCH' is {arch!r} (a p100) but the hardware fitted is {hw.name}")
    return hw


def tt_perf_report_ideal_us(ln: _Line, hw: Blackhole) -> float | None:
    """tt-perf-report's ideal time (us) of a row, its DRAM % and FLOPs % read as a time: for an op code
    containing 'Matmul' (not 'SparseMatmul', whose work needs the active experts), the larger of the
    padded bytes of the operands in DRAM (input 0, input 1, output; bytes per element = the digits of
    the data type / 8, else 4) at the board's DRAM peak and 2*M*K*N*W*Z at the per-fidelity matmul rate
    of CORE COUNT cores (a DRAM-sharded config: one worker per DRAM bank). None for other ops, and,
    as tt-perf-report, for a row whose shape or fidelity it cannot read (never an error)."""
    code = ln.get("OP CODE")
    if "Matmul" not in code or "SparseMatmul" in code:
        return None
    tensors = ("INPUT_0", "INPUT_1", "OUTPUT_0")
    try:
        shapes = {pre: ln.shape(pre) for pre in tensors}
    except ValueError:
        return None
    (w0, z0, m, k), (w1, z1, _, n) = shapes["INPUT_0"], shapes["INPUT_1"]

    def size(pre: str) -> float:
        digits = re.search(r"\d+", ln.get(f"{pre}_DATATYPE"))
        return int(digits.group()) / 8 if digits else 4.0
    dram = sum(math.prod(shapes[pre]) * size(pre) for pre in tensors if "DRAM" in ln.memory(pre))
    times = [dram / hw.dram_peak_bytes_per_s] if dram > 0 else []
    cores = _finite(ln.get("CORE COUNT"))
    if "MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig" in ln.attrs:
        cores = float(hw.dram_banks)
    fidelity = ln.get("MATH FIDELITY")
    if cores and fidelity in FIDELITY_PASSES:
        rate = hw.matmul_flops_per_cycle_per_core * hw.clock_hz / FIDELITY_PASSES[fidelity] * cores
        times.append(2 * m * k * n * max(w0, w1) * max(z0, z1) / rate)
    return 1e6 * max(times) if times else None


def _classified(ln: _Line, hw: Blackhole, code: str) -> tuple[object | None, str]:
    """(spec, 'modelled') or (None, skip reason) of one row. A row that ran on a smaller worker grid
    than the chip's (AVAILABLE WORKER CORE COUNT) is classified and priced on that grid (``ChipSpec``)."""
    grid = _report_grid(ln, hw)
    board = hw if grid is None else dataclasses.replace(hw, grid_x=grid[0], grid_y=grid[1])
    try:
        spec = _classify(ln, board, code)
    except _Skip as s:
        return None, str(s)
    cores = _finite(ln.get("CORE COUNT"))
    if cores is not None and cores < model_cores(spec, board):
        return None, "core split differs from the model's (CORE COUNT below the cores the model splits over)"
    return (spec if grid is None else ChipSpec(spec, hw.name, grid)), MODELLED


GRID_IN_ATTRS = (r"compute_with_storage_grid_size=\(x=(\d+);y=(\d+)\)",
                 r"worker_grid': '\{\[\(x=0;y=0\) - \(x=(\d+);y=(\d+)\)\]\}")


def _report_grid(ln: _Line, hw: Blackhole) -> tuple[int, int] | None:
    """The (x, y) worker grid a row ran on when its AVAILABLE WORKER CORE COUNT is not the chip's:
    the grid its attributes name (a program config's, a binary op's worker grid) when that many
    cores, else the widest x <= the chip's that divides the count. None on the chip's own grid."""
    avail = _finite(ln.get("AVAILABLE WORKER CORE COUNT"))
    if avail is None or avail >= hw.grid_cores:  # more than the chip: refused for the file (read_report)
        return None
    if not (avail.is_integer() and avail >= 1):
        raise ln.fail("AVAILABLE WORKER CORE COUNT", f"{avail:g}: expected an integer in [1, {hw.grid_cores}]")
    n = int(avail)
    for i, pattern in enumerate(GRID_IN_ATTRS):
        m = re.search(pattern, ln.attrs)
        if m is not None:
            gx, gy = int(m.group(1)) + i, int(m.group(2)) + i  # worker_grid names the last core (inclusive)
            if gx * gy == n and gx <= hw.grid_x and gy <= hw.grid_y:
                return gx, gy
    for gx in range(hw.grid_x, 0, -1):
        if n % gx == 0 and n // gx <= hw.grid_y:
            return gx, n // gx
    raise ln.fail("AVAILABLE WORKER CORE COUNT", f"{n} cores do not form a grid within {hw.name}'s "
                                                 f"{hw.grid_x}x{hw.grid_y}")


def read_rows(path: str | pathlib.Path, *, hw: Blackhole | None = None, **kwargs) -> list[Row]:
    """The modelled rows of a report as fit rows (see ``read_report``)."""
    return read_report(path, hw=hw, **kwargs).measured_rows()
