"""One row of a device-profiler op report as the op kinds read it, and the pieces of a row they write.

``ReportLine`` reads a data row's signature columns (V1 or V2 names; errors name the file, line and
column); ``Skip`` is a row the model does not cover, its message the reason. The helpers below are
the checks and text forms several op kinds share (``costmodel.blackhole.kinds``): interleaved vs
sharded operands, batch dims, the compute kernel config, tensor descriptions and program-config text.
"""

from __future__ import annotations

import math
import re

from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.report_schema import DIMS, DTYPE_OF_TTNN, TTNN_OF_DTYPE, TensorDesc, format_config
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import FIDELITY_PASSES, Blackhole
from jaxref.validation import choices_of


class Skip(Exception):
    """A row the model does not cover (the message is the reason)."""


def finite(text: str) -> float | None:
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


# The columns an op's classification reads, besides its tensors' INPUT_* / OUTPUT_* columns: rows
# equal in these are classified once (a real report repeats each layer's ops thousands of times). The
# dataflow kernels name the program a factory chose (tilize / untilize: split-rows or block), which the
# shapes and attributes fix, so they split no signature.
SIGNATURE = ("OP CODE", "ATTRIBUTES", "MATH FIDELITY", "CORE COUNT", "AVAILABLE WORKER CORE COUNT",
             "DATA MOVEMENT KERNEL SOURCE")


class ReportLine:
    """One data row; V1 / V2 column names; errors name the file, line and column. Reads only the
    columns of a row's signature (``SIGNATURE``, INPUT_* / OUTPUT_*), on which classification is cached."""

    def __init__(self, cols, cells: list[str], line: int, path: str, *, decode_position: int | None = None):
        self.cols, self.cells, self.line, self.path = cols, cells, line, path
        self.decode_position = decode_position  # the run's cur_pos where the caller knows it (a device tensor)
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
            raise Skip(f"data type not modelled ({pre} {text or 'empty'})")
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


def no_sharding(ln: ReportLine, *pres: str) -> None:
    for pre in pres:
        if "SHARDED" in ln.memory(pre):
            raise Skip(f"sharded operand ({pre} {ln.memory(pre).removeprefix('DEV_0_')}); the model "
                        "streams interleaved tensors")


def l1_resident(ln: ReportLine, pre: str) -> bool:
    """Whether an (interleaved) operand lives in L1, from its memory column ('DEV_0_L1_INTERLEAVED')."""
    return "L1" in ln.memory(pre).split("_")


def unbatched(ln: ReportLine, pre: str) -> tuple[int, int, int, int]:
    s = ln.shape(pre)
    if s[0] * s[1] > 1:
        raise Skip("batched operands")
    return s


def batches(ln: ReportLine) -> tuple[int, int]:
    """(in0 batches, in1 batches) of a matmul row: the product of W and Z of each operand."""
    x, w = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    ba, bb = x[0] * x[1], w[0] * w[1]
    if bb > 1 and ba > 1 and (x[0], x[1]) != (w[0], w[1]):
        raise Skip(f"batched operands broadcast over part of the batch dims ({x[:2]} x {w[:2]}); the model "
                    "prices equal batches or one side unbatched")
    return ba, bb


def row_fp32_dest_acc(ln: ReportLine) -> bool:
    """``fp32_dest_acc_en`` of a norm / softmax row (off where the row has no compute kernel config)."""
    ckc = ln.attr("compute_kernel_config") or ""
    return bool(ln.config_flag(ckc, "fp32_dest_acc_en", default=0))


# ---- out: op spec -> report row --------------------------------------------------------------------
def tensor(shape, dtype: str, layout: str = "TILE", memory: str = "DEV_0_DRAM_INTERLEAVED") -> TensorDesc:
    return TensorDesc(tuple(int(d) for d in shape), TTNN_OF_DTYPE[dtype], layout, memory)


def compute_kernel(fidelity: str, *, fp32_dest_acc: bool = False) -> str:
    """A row's compute kernel config, as the profiler writes it."""
    return format_config("ComputeKernelConfig", [("math_fidelity", fidelity), ("math_approx_mode", 0),
                                                 ("fp32_dest_acc_en", int(fp32_dest_acc)), ("packer_l1_acc", 1),
                                                 ("dst_full_sync_en", 0)])


def matmul_program_config(c: MatmulProgramConfig) -> str:
    """A matmul program config as the profiler writes it: ttnn's repr with ',' written ';'."""
    return c.ttnn_repr().replace(",", ";")


def sdpa_program_config(a: SdpaProgramConfig, grid: tuple[int, int]) -> str:
    return format_config("SDPAProgramConfig", [
        ("compute_with_storage_grid_size", f"(x={grid[0]};y={grid[1]})"), ("sub_core_grids", "std::nullopt"),
        ("q_chunk_size", int(a.q_chunk)), ("k_chunk_size", int(a.k_chunk)), ("exp_approx_mode", int(a.exp_approx_mode)),
        ("max_cores_per_head_batch", int(a.cores_per_head))])

