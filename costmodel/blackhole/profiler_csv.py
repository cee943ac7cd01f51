"""ttnn device-profiler op reports (``ops_perf_results_*.csv``) in and out.

Columns are those of tt-metal's op report as read by tenstorrent/tt-perf-report (``OP CODE``,
``DEVICE KERNEL DURATION [ns]``, ``CORE COUNT``, ``MATH FIDELITY``, ``ATTRIBUTES`` with the
program config, ``INPUT_i_{W,Z,Y,X}_PAD[LOGICAL]`` / ``INPUT_i_DATATYPE``); a subset is written
and read, other columns are ignored. ``read_rows`` turns each row into a measured ``Row`` whose
op spec comes from the op code, shapes, dtypes and attributes; ``write_csv`` writes op specs with
the model's (or a measured) duration in the same format, so the two round-trip exactly.

Op codes: ttnn renames device operations between versions, so each op class accepts the names
in ``OP_CODES`` (the first is written). A row the model does not cover raises a ValueError
naming the line and column.
"""

from __future__ import annotations

import csv
import pathlib
import re

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
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.rows import Row
from costmodel.blackhole.sdpa import AttnConfig
from costmodel.hardware import Blackhole, blackhole_p150a

DURATION = "DEVICE KERNEL DURATION [ns]"
DIMS = ("W", "Z", "Y", "X")
N_INPUTS = 4
COLUMNS = (["OP CODE", "OP TYPE", "GLOBAL CALL COUNT", "DEVICE ID", "DEVICE ARCH", "ATTRIBUTES", "MATH FIDELITY",
            "CORE COUNT", DURATION]
           + [f"INPUT_{i}_{c}" for i in range(N_INPUTS) for c in (*(f"{d}_PAD[LOGICAL]" for d in DIMS), "DATATYPE")]
           + [f"OUTPUT_0_{d}_PAD[LOGICAL]" for d in DIMS] + ["OUTPUT_0_DATATYPE"])
REQUIRED = ("OP CODE", DURATION, "ATTRIBUTES", *(f"INPUT_0_{d}_PAD[LOGICAL]" for d in DIMS), "INPUT_0_DATATYPE")
OP_CODES = {
    "matmul": ("MatmulDeviceOperation", "Matmul"),
    "norm": ("LayerNormDeviceOperation", "LayerNorm"),
    "create_heads": ("NlpCreateHeadsDeviceOperation", "NLPCreateHeadsDeviceOperation", "NlpCreateHeads"),
    "concat_heads": ("NLPConcatHeadsDeviceOperation", "NlpConcatHeadsDeviceOperation", "NLPConcatHeads"),
    "rope": ("RotaryEmbeddingHfDeviceOperation", "RotaryEmbeddingHf"),
    "fill_cache": ("UpdateCacheDeviceOperation", "FillCacheDeviceOperation", "UpdateCache"),
    "eltwise": ("BinaryNgDeviceOperation", "BinaryDeviceOperation"),
    "sdpa_decode": ("ScaledDotProductAttentionDecode", "SdpaDecodeDeviceOperation"),
    "sdpa": ("ScaledDotProductAttention", "SDPAOperation", "SdpaDeviceOperation"),
}
_CLASS_OF_CODE = {code: cls for cls, codes in OP_CODES.items() for code in codes}
DTYPES = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4", "FLOAT32": "fp32"}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}


class _Line:
    """One CSV data row with errors that name its line and column."""

    def __init__(self, record: dict, line: int, path: str):
        self.record, self.line, self.path = record, line, path

    def fail(self, column: str, message: str) -> ValueError:
        return ValueError(f"{self.path}: line {self.line}, column {column!r}: {message}")

    def text(self, column: str) -> str:
        value = (self.record.get(column) or "").strip()
        if not value:
            raise self.fail(column, "empty; expected a value")
        return value

    def number(self, column: str) -> float:
        value = self.text(column)
        try:
            return float(value)
        except ValueError:
            raise self.fail(column, f"{value!r} is not a number") from None

    def shape(self, i: int) -> tuple[int, ...]:
        dims = []
        for d in DIMS:
            col = f"INPUT_{i}_{d}_PAD[LOGICAL]"
            value = self.text(col)
            m = re.fullmatch(r"(\d+)(\[\d+\])?", value)
            if m is None:
                raise self.fail(col, f"{value!r} is not a padded size like '64[64]'")
            dims.append(int(m.group(1)))
        return tuple(dims)

    def dtype(self, i: int) -> str:
        col = f"INPUT_{i}_DATATYPE"
        value = self.text(col)
        if value not in DTYPES:
            raise self.fail(col, f"data type {value!r} unknown; expected one of {sorted(DTYPES)}")
        return DTYPES[value]

    def has_input(self, i: int) -> bool:
        return bool((self.record.get(f"INPUT_{i}_X_PAD[LOGICAL]") or "").strip())

    def attr(self, key: str, default: int | None = None) -> int:
        m = re.search(rf"\b{key}=(\d+)", self.record.get("ATTRIBUTES") or "")
        if m is None:
            if default is None:
                raise self.fail("ATTRIBUTES", f"no '{key}=' in the program config / attributes")
            return default
        return int(m.group(1))

    def grid(self) -> tuple[int, int] | None:
        m = re.search(r"compute_with_storage_grid_size=\(x=(\d+);y=(\d+)\)", self.record.get("ATTRIBUTES") or "")
        return None if m is None else (int(m.group(1)), int(m.group(2)))


def _spec_of(ln: _Line, hw: Blackhole):
    code = ln.text("OP CODE")
    if code not in _CLASS_OF_CODE:
        raise ln.fail("OP CODE", f"unknown op code {code!r}; the model covers {sorted(_CLASS_OF_CODE)}")
    cls, x = _CLASS_OF_CODE[code], ln.shape(0)
    act = ln.dtype(0)
    if cls == "matmul":
        w = ln.shape(1)
        M, K, N = x[0] * x[1] * x[2], x[3], w[3]
        fid = (ln.record.get("MATH FIDELITY") or "").strip() or "HiFi2"
        grid = ln.grid() or (hw.grid_x, hw.grid_y)
        attrs = ln.record.get("ATTRIBUTES") or ""
        if "MatmulMultiCoreReuse" in attrs:
            try:
                cfg = MatmulProgramConfig.parse(attrs)
            except ValueError as exc:
                raise ln.fail("ATTRIBUTES", str(exc)) from None
        else:  # no program config: ttnn's heuristic (modelled by MatmulProgramConfig.default_heuristic)
            cfg = MatmulProgramConfig.default_heuristic(M=M, K=K, N=N, grid_x=grid[0], grid_y=grid[1])
        fused = re.search(r"fused_activation=(?!std::nullopt|None)\w+", attrs) is not None
        return MatmulSpec(M, K, N, cfg, ln.dtype(1), act, fid, fused)
    if cls == "norm":
        fused = ln.has_input(1) and ln.shape(1) == x  # a residual input of the same shape (gamma is one row)
        return NormSpec(x[0] * x[1] * x[2], x[3], act, fused)
    if cls == "create_heads":
        return HeadsSpec("create", x[0] * x[1] * x[2], x[3] // 32, act, ln.attr("head_dim", 32))
    if cls == "concat_heads":
        return HeadsSpec("concat", x[2], x[1] * x[3] // 32, act, x[3])
    if cls == "rope":
        return RopeSpec(x[1], x[2], x[3], act)
    if cls == "fill_cache":  # input 0: the cache, input 1: the rows written
        new = ln.shape(1)
        return FillCacheSpec(new[1], new[2], new[3], act, ln.dtype(1))
    if cls == "eltwise":
        kind = "mul" if re.search(r"BinaryOpType::MUL\b", ln.record.get("ATTRIBUTES") or "") else "add"
        return EltwiseSpec(kind, x[0] * x[1] * x[2], x[3], act)
    k = ln.shape(1)
    if not ln.has_input(3):
        raise ln.fail("INPUT_3_DATATYPE", "SDPA row without a mask: causal rows need the decode position, "
                                          "which the op report does not carry")
    mask = ln.dtype(3)
    if cls == "sdpa_decode":
        grid = ln.grid()
        attn = AttnConfig(float(ln.attr("k_chunk_size")), 32.0, float(ln.attr("max_cores_per_head_batch", 16)))
        return SdpaDecodeSpec(attn, float(k[2]), x[1], x[2], x[3], ln.dtype(1), mask, act,
                              grid_cores=None if grid is None else grid[0] * grid[1])
    attn = AttnConfig(float(ln.attr("k_chunk_size")), float(ln.attr("q_chunk_size")), 16.0)
    return SdpaStandardSpec(attn, float(k[2]), x[1], x[2], x[3], ln.dtype(1), mask, act)


def read_rows(path: str | pathlib.Path, *, hw: Blackhole | None = None) -> list[Row]:
    """Measured rows of a profiler CSV (one per data line; group ``profiler_csv/<op class>``)."""
    hw = blackhole_p150a() if hw is None else hw
    path = pathlib.Path(path)
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: line 1 (header): missing column(s) {missing}; an ops_perf_results CSV "
                             f"needs {list(REQUIRED)}")
        rows = []
        for i, record in enumerate(reader):
            ln = _Line(record, i + 2, str(path))
            spec = _spec_of(ln, hw)
            us = ln.number(DURATION) / 1e3
            if not us > 0:
                raise ln.fail(DURATION, f"{us * 1e3} ns must be > 0")
            name = f"{i + 1:04d}_{record['OP CODE'].strip()}"
            rows.append(Row("profiler_csv", name, f"profiler_csv/{spec.op_class}", "calibration", us, us,
                            f"{path.name} line {i + 2}", spec))
    if not rows:
        raise ValueError(f"{path}: no data rows")
    return rows


def _inputs(spec) -> list[tuple[tuple[int, ...], str]]:
    """(shape [W,Z,Y,X], dtype) of the inputs the reader needs, in op-report order."""
    if isinstance(spec, MatmulSpec):
        return [((1, 1, spec.M, spec.K), spec.act_dtype), ((1, 1, spec.K, spec.N), spec.weight_dtype)]
    if isinstance(spec, NormSpec):
        gamma = ((1, 1, spec.width // 32, 32), spec.act_dtype)
        return [((1, 1, spec.rows, spec.width), spec.act_dtype)] + (
            [((1, 1, spec.rows, spec.width), spec.act_dtype), gamma] if spec.fused_residual else [gamma])
    if isinstance(spec, HeadsSpec) and spec.kind == "create":
        return [((1, 1, spec.rows, spec.tiles_per_row * 32), spec.act_dtype)]
    if isinstance(spec, HeadsSpec):
        return [((1, spec.tiles_per_row * 32 // spec.head_dim, spec.rows, spec.head_dim), spec.act_dtype)]
    if isinstance(spec, RopeSpec):
        return [((1, spec.heads, spec.rows, spec.head_dim), spec.act_dtype)]
    if isinstance(spec, FillCacheSpec):
        return [((1, spec.kv_heads, spec.rows, spec.head_dim), spec.kv_dtype),
                ((1, spec.kv_heads, spec.rows, spec.head_dim), spec.act_dtype)]
    if isinstance(spec, EltwiseSpec):
        return [((1, 1, spec.rows, spec.width), spec.act_dtype)] * 2
    rows = int(float(spec.smax_rows))
    if isinstance(spec, SdpaDecodeSpec):
        kv = ((spec.users, 1, rows, spec.head_dim), spec.kv_dtype)
        return [((1, spec.users, spec.q_rows, spec.head_dim), spec.act_dtype), kv, kv,
                ((1, 1, spec.q_rows, rows), spec.mask_dtype)]
    kv = ((1, spec.q_heads, rows, spec.head_dim), spec.kv_dtype)
    return [((1, spec.q_heads, spec.q_rows, spec.head_dim), spec.act_dtype), kv, kv,
            ((1, 1, spec.q_rows, rows), spec.mask_dtype)]


def _attributes(spec) -> str:
    if isinstance(spec, MatmulSpec):
        # ttnn's repr of the config, with ';' for ',' as op reports print it
        return f"{{'program_config': '{spec.cfg.ttnn_repr().replace(',', ';')}'}}"
    if isinstance(spec, EltwiseSpec):
        return f"{{'binary_op_type': 'BinaryOpType::{spec.kind.upper()}'}}"
    if isinstance(spec, HeadsSpec) and spec.kind == "create":
        return f"{{'head_dim': 'head_dim={spec.head_dim}'}}"
    if isinstance(spec, SdpaDecodeSpec):
        a = spec.attn
        if spec.grid_cores is not None:
            raise ValueError(f"SDPA decode on a {spec.grid_cores}-core grid: only the chip's grid has an op-report form")
        return (f"{{'program_config': 'SDPAProgramConfig(k_chunk_size={int(a.k_chunk)};"
                f"max_cores_per_head_batch={int(a.cores_per_head)})'; 'is_causal': 'false'}}")
    if isinstance(spec, SdpaStandardSpec):
        a = spec.attn
        return (f"{{'program_config': 'SDPAProgramConfig(q_chunk_size={int(a.q_chunk)};"
                f"k_chunk_size={int(a.k_chunk)})'; 'is_causal': 'false'}}")
    return "{}"


_WRITE_CODE = {MatmulSpec: "matmul", NormSpec: "norm", RopeSpec: "rope", FillCacheSpec: "fill_cache",
               EltwiseSpec: "eltwise", SdpaDecodeSpec: "sdpa_decode", SdpaStandardSpec: "sdpa"}


def write_csv(path: str | pathlib.Path, entries: list[tuple[object, float]], *, arch: str = "blackhole") -> None:
    """Write (op spec, duration us) entries as an op report; raises ValueError for a spec it cannot encode."""
    with pathlib.Path(path).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for i, (spec, us) in enumerate(entries):
            if isinstance(spec, HeadsSpec):
                cls = "create_heads" if spec.kind == "create" else "concat_heads"
            elif type(spec) in _WRITE_CODE:
                cls = _WRITE_CODE[type(spec)]
            else:
                raise ValueError(f"entries[{i}]: {type(spec).__name__} has no op-report form")
            if isinstance(spec, SdpaDecodeSpec) and spec.mask_dtype is None:
                raise ValueError(f"entries[{i}]: causal SDPA decode (no mask) has no op-report form")
            rec = {"OP CODE": OP_CODES[cls][0], "OP TYPE": "tt_dnn_device", "GLOBAL CALL COUNT": str(1024 * (i + 1)),
                   "DEVICE ID": "0", "DEVICE ARCH": arch, "ATTRIBUTES": _attributes(spec),
                   "MATH FIDELITY": getattr(spec, "fidelity", ""), DURATION: f"{us * 1e3:.3f}".rstrip("0").rstrip(".")}
            for j, (shape, dtype) in enumerate(_inputs(spec)):
                for d, v in zip(DIMS, shape):
                    rec[f"INPUT_{j}_{d}_PAD[LOGICAL]"] = f"{v}[{v}]"
                rec[f"INPUT_{j}_DATATYPE"] = _DTYPE_NAMES[dtype]
            w.writerow(rec)
