"""A recording proxy around an op namespace (``ttnn`` or ``device.emulation.Emulation``).

``Recorder(ns)`` forwards every attribute; every call made through it (ops, transfers, trace calls,
config constructors, host tensors) is logged by dotted name, positional count and keyword names,
so a test can check each against the installed ttnn, and device ops additionally log their tensor
shapes / dtypes / layouts and non-tensor keyword values (program configs) - the rows of a
ttnn-profiler-style per-op CSV, and what ``tests/test_device_costmodel_graph.py`` compares with the
cost model's layer op list. With ``sync`` (a chip
run's eager profiling pass) each device op is bracketed by ``synchronize_device`` and its host
wall time recorded; the device-kernel duration column stays empty unless a chip's device profiler
fills it (this module never invents one).
"""

from __future__ import annotations

import csv
import dataclasses
import time

# The compute ops of the layer graph (and the zero-cost views) - the rows of the per-op CSV.
DEVICE_OPS = ("rms_norm", "linear", "add", "mul", "reshape", "fill_cache", "experimental.nlp_create_qkv_heads",
              "experimental.rotary_embedding_hf", "experimental.nlp_concat_heads",
              "transformer.scaled_dot_product_attention_decode", "transformer.scaled_dot_product_attention")
SUBMODULES = ("experimental", "transformer")


@dataclasses.dataclass
class Call:
    """One call through the proxy. ``tensors_in`` / ``tensors_out``: (shape, dtype, layout) strings;
    ``attributes``: a device op's non-tensor keyword values as passed (program / compute-kernel
    config objects, ``num_heads``, ``epsilon``, ...), the op report's ATTRIBUTES."""

    name: str
    num_args: int
    keywords: tuple[str, ...]
    tensors_in: list[tuple[tuple[int, ...], str, str]] = dataclasses.field(default_factory=list)
    tensors_out: list[tuple[tuple[int, ...], str, str]] = dataclasses.field(default_factory=list)
    host_ns: int | None = None
    tag: str = ""
    attributes: dict[str, object] = dataclasses.field(default_factory=dict)


def _describe(x) -> tuple[tuple[int, ...], str, str] | None:
    if hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "layout"):
        return tuple(int(d) for d in x.shape), str(x.dtype).split(".")[-1], str(x.layout).split(".")[-1]
    return None


class _Recorded:
    """A callable (function or class) that logs its calls and forwards attribute access."""

    def __init__(self, fn, name: str, rec: Recorder):
        self._fn, self._name, self._rec = fn, name, rec

    def __getattr__(self, attr):
        return getattr(self._fn, attr)

    def __call__(self, *args, **kwargs):
        rec = self._rec
        call = Call(self._name, len(args), tuple(sorted(kwargs)), tag=rec.state.tag)
        is_op = self._name in DEVICE_OPS
        if is_op:
            call.tensors_in = [d for d in map(_describe, list(args) + list(kwargs.values())) if d is not None]
            call.attributes = {k: v for k, v in sorted(kwargs.items()) if _describe(v) is None}
        if is_op and rec.state.sync is not None:
            rec.state.sync()
            t0 = time.perf_counter_ns()
        out = self._fn(*args, **kwargs)
        if is_op and rec.state.sync is not None:
            rec.state.sync()
            call.host_ns = time.perf_counter_ns() - t0
        if is_op:
            call.tensors_out = [d for d in map(_describe, out if isinstance(out, tuple) else (out,)) if d is not None]
        rec.state.log.append(call)
        return out


@dataclasses.dataclass
class _State:
    log: list[Call] = dataclasses.field(default_factory=list)
    sync: object = None  # () -> None, waits for the device (set for a timed eager pass)
    tag: str = ""  # free label copied into each call (e.g. "layer 3")


class Recorder:
    """Proxy of ``ns`` that logs calls into ``self.state.log`` (shared with its sub-namespaces)."""

    def __init__(self, ns, *, prefix: str = "", state: _State | None = None):
        self._ns, self._prefix = ns, prefix
        self.state = _State() if state is None else state

    def __getattr__(self, name):
        attr = getattr(self._ns, name)
        full = self._prefix + name
        if full in SUBMODULES:
            return Recorder(attr, prefix=full + ".", state=self.state)
        return _Recorded(attr, full, self) if callable(attr) else attr


PROFILE_COLUMNS = ["GLOBAL CALL COUNT", "OP CODE", "OP TYPE", "TAG", "ATTRIBUTES", "HOST DURATION [ns]",
                   "DEVICE KERNEL DURATION [ns]"]


def write_op_csv(path, calls: list[Call], *, backend: str) -> int:
    """Write the device-op calls as a ttnn-profiler-style CSV (``INPUT_i_{W,Z,Y,X,LAYOUT,DATATYPE}``,
    ``OUTPUT_0_...``); host durations only where measured. Returns the number of rows."""
    ops = [c for c in calls if c.name in DEVICE_OPS]
    n_in = max((len(c.tensors_in) for c in ops), default=0)
    cols = list(PROFILE_COLUMNS)
    for pre in [f"INPUT_{i}" for i in range(n_in)] + ["OUTPUT_0"]:
        cols += [f"{pre}_{s}" for s in ("W", "Z", "Y", "X", "LAYOUT", "DATATYPE")]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for k, c in enumerate(ops):
            row = [k, c.name.split(".")[-1], f"{backend}:{c.name}", c.tag, ";".join(c.keywords),
                   "" if c.host_ns is None else c.host_ns, ""]
            for i in range(n_in + 1):
                d = (c.tensors_in[i] if i < n_in and i < len(c.tensors_in) else None) if i < n_in else \
                    (c.tensors_out[0] if c.tensors_out else None)
                if d is None:
                    row += [""] * 6
                else:
                    shape = (1,) * (4 - len(d[0])) + d[0][-4:]
                    row += [*shape, d[2], d[1]]
            w.writerow(row)
    return len(ops)
