"""The parity run's per-op report: recorded device-op calls as a tt-metal profiler op report.

``records_of_calls`` turns the calls a ``device.recorder.Recorder`` logged (one eager pass) into
``costmodel.blackhole.report_schema.OpRecord`` rows: real op codes, ``ATTRIBUTES`` with the program /
compute-kernel configs the graph passed (printed as ttnn prints them), input / output shapes,
formats and memory. Views (``reshape``) launch no device program and have no row. Durations:

  * chip: the device profiler's kernel durations (``chip_kernel_durations``: ttnn's
    ``ReadDeviceProfiler`` + ``get_latest_programs_perf_data``, matched to the ops in launch order),
    so the file goes straight into ``calibrate --ops-csv``;
  * emulation: the cost model's prediction of each row (``model_durations``, stored calibration),
    empty for a row the model does not cover. Never a measurement.

OP TO OP LATENCY [ns]: on emulation the traced gap of the port's step (``Blackhole.trace_op_gap_s``,
measured on a real traced decode window), the first row 0; on a chip empty (the eager pass is not the
traced step and its gaps are not read from the profiler).
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib

from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds import OP_CODES
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.report_line import matmul_program_config
from costmodel.blackhole.report_reader import MODELLED, model_cores, read_report
from costmodel.blackhole.report_schema import (
    DURATION,
    OpRecord,
    TensorDesc,
    format_config,
    shape4,
    write_report,
)
from costmodel.hardware import blackhole

# the graph's ttnn calls by the op class (``costmodel.blackhole.kinds``) whose first op code a report names them by
OP_CLASS_OF_CALL = {"rms_norm": "norm", "linear": "matmul", "add": "eltwise", "mul": "eltwise", "fill_cache": "fill_cache",
                    "experimental.nlp_create_qkv_heads": "create_heads", "experimental.rotary_embedding_hf": "rope",
                    "experimental.nlp_concat_heads": "concat_heads",
                    "transformer.scaled_dot_product_attention_decode": "sdpa_decode",
                    "transformer.scaled_dot_product_attention": "sdpa"}
OP_CODE = {call: OP_CODES[cls][0] for call, cls in OP_CLASS_OF_CALL.items()}
VIEWS = ("reshape",)
MEMORY = "DEV_0_DRAM_INTERLEAVED"  # the graph keeps every tensor in interleaved DRAM (device.graph)


def config_text(obj) -> str:
    """A config object as ttnn prints it in ATTRIBUTES (the emulation's dataclass stand-ins by their
    fields; a real ttnn object by its repr, with ',' written ';' as the profiler does)."""
    if obj is None:
        return "std::nullopt"
    if isinstance(obj, bool):
        return str(int(obj))
    if isinstance(obj, enum.Enum):  # ttnn prints fidelities bare, other enums qualified
        return obj.name if type(obj).__name__ == "MathFidelity" else f"{type(obj).__name__}::{obj.name}"
    if dataclasses.is_dataclass(obj):
        name = type(obj).__name__
        if name == "CoreCoord":
            return f"(x={obj.x};y={obj.y})"
        return format_config(name, [(f.name, config_text(getattr(obj, f.name))) for f in dataclasses.fields(obj)])
    if isinstance(obj, int | float | str):
        return str(obj)
    return repr(obj).replace(",", ";")


def _fidelity(options: dict) -> str:
    ck = options.get("compute_kernel_config")
    f = getattr(ck, "math_fidelity", None)
    return "" if f is None else str(getattr(f, "name", f)).split(".")[-1]


def _tensor(d) -> TensorDesc:
    shape, dtype, layout = d
    return TensorDesc(shape4(shape), dtype, layout, MEMORY)


def _attributes(call) -> dict:
    o, name = {**{f"arg{i}": a for i, a in call.positional.items()}, **call.attributes}, call.name
    attrs = {k: config_text(o[k]) for k in ("program_config", "compute_kernel_config") if k in o}
    if name == "linear" and o.get("program_config") is not None:  # the one matmul config type prints it
        attrs["program_config"] = matmul_program_config(MatmulProgramConfig.from_ttnn(o["program_config"]))
    if name == "rms_norm":
        attrs |= {"norm_type": "LayerNormType::RMSNORM", "eps": config_text(o.get("epsilon")),
                  "distributed_norm_stage": "DistributedLayerNormStage::NOT_DISTRIBUTED"}
        attrs.setdefault("program_config", "LayerNormDefaultProgramConfig(legacy_reduction=0;legacy_rsqrt=0;"
                                           "use_welford=0)")
    elif name in ("add", "mul"):
        attrs |= {"binary_op_type": f"BinaryOpType::{name.upper()}", "scalar": "std::nullopt",
                  "post_activations": "SmallVector([])"}
    elif name == "linear":
        attrs |= {"bcast_batch": "true", "transpose_a": "false", "transpose_b": "false",
                  "user_run_batched": "false", "output_dtype": f"DataType::{config_text(o.get('dtype')).split('::')[-1]}"}
    elif name == "fill_cache":
        attrs |= {"op_type": "UpdateCacheOpType::FILL", "batch_idx": config_text(o.get("arg0", 0)),
                  "update_idx": config_text(o.get("update_idx", 0)), "batch_offset": "0"}
    elif name == "experimental.nlp_create_qkv_heads":
        head_dim = call.tensors_out[0][0][-1] if call.tensors_out else 0
        attrs |= {"num_q_heads": config_text(o.get("num_heads")), "num_kv_heads": config_text(o.get("num_kv_heads")),
                  "head_dim": str(head_dim), "transpose_k_heads": str(bool(o.get("transpose_k_heads", False))).lower()}
    elif name.startswith("transformer."):
        attrs |= {"is_causal": str(bool(o.get("is_causal", True))).lower(), "paged_attention": "false",
                  "scale": config_text(o.get("scale"))}
    return attrs


def records_of_calls(calls, *, arch: str = "blackhole", core_count: int = 110, device_id: int = 0) -> list[OpRecord]:
    """Profiler rows of the device-op calls in ``calls`` (views dropped), durations empty.

    ``core_count``: CORE COUNT written for every row (the grid the graph's programs run on;
    a chip run overwrites it with the profiler's per-program count).
    """
    out = []
    for c in calls:
        if c.name not in OP_CODE:
            continue
        out.append(OpRecord(OP_CODE[c.name], _attributes(c), tuple(map(_tensor, c.tensors_in)),
                            tuple(map(_tensor, c.tensors_out[:1])), _fidelity(c.attributes), core_count, None,
                            device_id=device_id, arch=arch, available_cores=core_count))
    return out


def model_durations(path: str | pathlib.Path, records: list[OpRecord]) -> list[OpRecord]:
    """``records`` (as written at ``path``) with the cost model's predicted kernel-only time of each
    row the model covers (``KernelSpec``: what DEVICE KERNEL DURATION holds, no host dispatch; stored
    calibration, hardware from the report); other rows stay empty."""
    report = read_report(path, require_durations=False)
    params = load_calibration().params
    modelled = [r for r in report.rows if r.status == MODELLED]
    if len(report.rows) != len(records):
        raise ValueError(f"{path}: {len(report.rows)} rows read back for {len(records)} written")
    by_line = {r.line: r for r in modelled}
    out = []
    for i, rec in enumerate(records):
        row = by_line.get(i + 2)
        if row is None:
            out.append(rec)
            continue
        us = float(KernelSpec(row.spec).us(report.hw, params))  # DEVICE KERNEL DURATION: no dispatch
        out.append(dataclasses.replace(rec, duration_ns=us * 1e3, core_count=model_cores(row.spec, report.hw)))
    return out


def chip_kernel_durations(ttnn, device, n_ops: int) -> list[tuple[float, int]] | None:
    """(device kernel duration ns, core count) of the last ``n_ops`` programs the device ran, in
    launch order, from ttnn's device profiler (needs TT_METAL_DEVICE_PROFILER=1); None when the
    profiler has no such data (profiling off, or a different program count)."""
    ttnn.ReadDeviceProfiler(device)
    data = ttnn.get_latest_programs_perf_data()
    programs = sorted(data.get(getattr(device, "id", lambda: 0)(), []) if isinstance(data, dict) else [],
                      key=lambda p: p.program_execution_uid.runtime_id)
    if len(programs) < n_ops:
        return None
    out = []
    for p in programs[-n_ops:]:
        res = p.program_analyses_results.get(DURATION)
        if res is None:
            return None
        out.append((float(res.duration), int(p.core_count)))
    return out


def write_op_report(path: str | pathlib.Path, calls, *, backend: str, ttnn=None, device=None) -> dict:
    """Write the device-op calls of one eager pass as ``path`` (an op report). Returns
    {"rows": n, "durations": "device profiler" | "cost model (not measured)" | "none"}."""
    records = records_of_calls(calls)
    source = "none"
    if backend == "chip" and ttnn is not None:
        measured = chip_kernel_durations(ttnn, device, len(records))
        if measured is not None:
            records = [dataclasses.replace(r, duration_ns=d, core_count=c) for r, (d, c) in zip(records, measured)]
            source = "device profiler"
        # an eager pass, not the traced step: its gaps are not read from the profiler, so none is written
        write_report(path, records, op_gap_ns=None)
    else:
        # the model's report of the port's step, which runs traced: the traced op-to-op gap
        gap_ns = blackhole().trace_op_gap_s * 1e9
        write_report(path, records, op_gap_ns=gap_ns)
        records = model_durations(path, records)
        write_report(path, records, op_gap_ns=gap_ns)
        source = "cost model (not measured)"
    return {"rows": len(records), "durations": source}
