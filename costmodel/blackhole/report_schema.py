"""The ``ops_perf_results`` op-report schema of tt-metal's device profiler, and its one writer.

One row per device op, columns as the profiler writes them (V2 names, as read by
tenstorrent/tt-perf-report): ``OP CODE`` (the C++ device-operation name), ``OP TYPE``
(``tt_dnn_device``), ``DEVICE ID``, ``DEVICE ARCH``, ``ATTRIBUTES`` (the operation's attributes
as ttnn prints them: ``{'key': 'value'; ...}``, keys sorted, commas inside values printed as
``;``), ``MATH FIDELITY``, ``CORE COUNT``, ``AVAILABLE WORKER CORE COUNT``, ``DEVICE KERNEL
DURATION [ns]`` and, per tensor, ``INPUT_i_{W,Z,Y,X}_PAD[LOGICAL]`` (``padded[logical]``),
``_LAYOUT``, ``_DATATYPE``, ``_MEMORY`` and the same for ``OUTPUT_0``, and ``OP TO OP LATENCY [ns]``
(the device's idle time between the previous op's kernel end and this one's kernel start; the first op
on a device 0, as tt-metal's tools/tracy/process_ops_logs.py writes it). Both the cost model's
``--emit-csv`` and the parity script's ``ops.csv`` write through ``write_report``.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import pathlib

from jaxref.validation import atomic_output

DURATION = "DEVICE KERNEL DURATION [ns]"
GAP = "OP TO OP LATENCY [ns]"
DIMS = ("W", "Z", "Y", "X")
TENSOR_FIELDS = ("LAYOUT", "DATATYPE", "MEMORY")
HEAD = ("OP CODE", "OP TYPE", "GLOBAL CALL COUNT", "DEVICE ID", "DEVICE ARCH", "ATTRIBUTES", "MATH FIDELITY",
        "CORE COUNT", "AVAILABLE WORKER CORE COUNT", "HOST START TS", GAP, DURATION)
# ttnn's DataType names and the cost model's format names
DTYPE_OF_TTNN = {"BFLOAT16": "bf16", "BFLOAT8_B": "bfp8", "BFLOAT4_B": "bfp4", "FLOAT32": "fp32"}
TTNN_OF_DTYPE = {v: k for k, v in DTYPE_OF_TTNN.items()}


@dataclasses.dataclass(frozen=True)
class TensorDesc:
    """One tensor of an op row.

    Attributes:
      shape: padded [W, Z, Y, X] (rank < 4 shapes left-padded with 1).
      logical: logical [W, Z, Y, X] (default: the padded shape).
      dtype: ttnn DataType name ('BFLOAT16', 'BFLOAT8_B', ...).
      layout: 'TILE' or 'ROW_MAJOR'.
      memory: 'DEV_<id>_<DRAM|L1>_<INTERLEAVED|..._SHARDED>'.
    """

    shape: tuple[int, int, int, int]
    dtype: str
    layout: str = "TILE"
    memory: str = "DEV_0_DRAM_INTERLEAVED"
    logical: tuple[int, int, int, int] | None = None

    def __post_init__(self):
        if len(self.shape) != 4 or any(int(d) < 1 for d in self.shape):
            raise ValueError(f"shape={self.shape} must be 4 positive dims [W, Z, Y, X]")


def shape4(shape) -> tuple[int, int, int, int]:
    """A tensor shape as [W, Z, Y, X]: left-padded with 1, leading dims beyond 4 folded into W."""
    dims = [int(d) for d in shape]
    if len(dims) > 4:
        w = 1
        for d in dims[:-3]:
            w *= d
        dims = [w, *dims[-3:]]
    return tuple([1] * (4 - len(dims)) + dims)


@dataclasses.dataclass(frozen=True)
class OpRecord:
    """One row of an op report.

    Attributes:
      op_code: device-operation name ('MatmulDeviceOperation', ...).
      attributes: attribute name -> value text, as ttnn prints them.
      inputs, outputs: the op's tensors in op order.
      math_fidelity: 'LoFi' | 'HiFi2' | 'HiFi3' | 'HiFi4' or '' (ops without a matrix engine).
      core_count: cores the program runs on.
      duration_ns: device kernel duration, or None (not measured and not modelled: empty cell).
      device_id, arch, available_cores: the device.
    """

    op_code: str
    attributes: dict
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]
    math_fidelity: str
    core_count: int
    duration_ns: float | None
    device_id: int = 0
    arch: str = "blackhole"
    available_cores: int = 110


def format_attributes(attributes: dict) -> str:
    """``{'a': '1'; 'b': 'x'}`` with keys sorted, as the profiler prints an operation's attributes."""
    return "{" + "; ".join(f"'{k}': '{attributes[k]}'" for k in sorted(attributes)) + "}"


def format_config(name: str, fields: list[tuple[str, object]]) -> str:
    """A program config as ttnn prints it: ``Name(a=1;b=x)`` (the profiler writes ',' as ';')."""
    def text(v):
        return str(int(v)) if isinstance(v, bool) else str(v)
    return f"{name}(" + ";".join(f"{k}={text(v)}" for k, v in fields) + ")"


def columns(n_inputs: int, n_outputs: int = 1) -> list[str]:
    cols = list(HEAD)
    for pre in [f"INPUT_{i}" for i in range(n_inputs)] + [f"OUTPUT_{i}" for i in range(n_outputs)]:
        cols += [f"{pre}_{d}_PAD[LOGICAL]" for d in DIMS] + [f"{pre}_{f}" for f in TENSOR_FIELDS]
    return cols


def _number(v: float) -> str:
    return f"{v:.3f}".rstrip("0").rstrip(".")


def write_report(path: str | pathlib.Path, records: list[OpRecord], *, op_gap_ns: float | None) -> None:
    """Write ``records`` as an ops_perf_results CSV (at least 3 input column groups, as the profiler).

    ``op_gap_ns``: the OP TO OP LATENCY [ns] of every op after a device's first (which gets 0, as
    the profiler writes it); None leaves the column empty (a gap neither measured nor modelled).
    """
    if op_gap_ns is not None and not (math.isfinite(op_gap_ns) and op_gap_ns >= 0):
        raise ValueError(f"{op_gap_ns=}: expected a finite gap >= 0 ns, or None")
    n_in = max([3, *(len(r.inputs) for r in records)])
    n_out = max([1, *(len(r.outputs) for r in records)])
    started: set[int] = set()  # devices with an op written
    # replaced atomically: a write that fails part-way leaves no truncated report behind
    with atomic_output(path) as tmp, tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns(n_in, n_out))
        w.writeheader()
        for i, r in enumerate(records):
            gap = None if op_gap_ns is None else (op_gap_ns if r.device_id in started else 0.0)
            started.add(r.device_id)
            rec = {"OP CODE": r.op_code, "OP TYPE": "tt_dnn_device", "GLOBAL CALL COUNT": str(1024 * (i + 1)),
                   "DEVICE ID": str(r.device_id), "DEVICE ARCH": r.arch, "ATTRIBUTES": format_attributes(r.attributes),
                   "MATH FIDELITY": r.math_fidelity, "CORE COUNT": str(r.core_count),
                   "AVAILABLE WORKER CORE COUNT": str(r.available_cores), "HOST START TS": str(1000 * (i + 1)),
                   GAP: "" if gap is None else _number(gap),
                   DURATION: "" if r.duration_ns is None else _number(r.duration_ns)}
            for pre, tensors in (("INPUT", r.inputs), ("OUTPUT", r.outputs)):
                for j, t in enumerate(tensors):
                    logical = t.shape if t.logical is None else t.logical
                    for d, v, lv in zip(DIMS, t.shape, logical):
                        rec[f"{pre}_{j}_{d}_PAD[LOGICAL]"] = f"{v}[{lv}]"
                    rec[f"{pre}_{j}_LAYOUT"], rec[f"{pre}_{j}_DATATYPE"] = t.layout, t.dtype
                    rec[f"{pre}_{j}_MEMORY"] = t.memory
            w.writerow(rec)
