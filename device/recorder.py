"""A recording proxy around an op namespace (``ttnn`` or ``device.emulation.Emulation``).

``Recorder(ns)`` forwards every attribute; every call made through it (ops, transfers, trace calls,
config constructors, host tensors) is logged by dotted name, positional count and keyword names,
so a test can check each against the installed ttnn, and device ops additionally log their tensor
shapes / dtypes / layouts and non-tensor keyword values (program configs) - the rows of a
profiler op report ``device.recorded_report`` writes, and what ``tests/test_device_costmodel_graph.py``
compares with the cost model's layer op list. With ``sync`` (a chip run's eager profiling pass)
each device op is bracketed by ``synchronize_device`` and its host wall time recorded.
"""

from __future__ import annotations

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
    config objects, ``num_heads``, ``epsilon``, ...), the op report's ATTRIBUTES; ``positional``: its
    non-tensor positional arguments by index (``fill_cache``'s batch index)."""

    name: str
    num_args: int
    keywords: tuple[str, ...]
    tensors_in: list[tuple[tuple[int, ...], str, str]] = dataclasses.field(default_factory=list)
    tensors_out: list[tuple[tuple[int, ...], str, str]] = dataclasses.field(default_factory=list)
    host_ns: int | None = None
    tag: str = ""
    attributes: dict[str, object] = dataclasses.field(default_factory=dict)
    positional: dict[int, object] = dataclasses.field(default_factory=dict)


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
            call.positional = {i: a for i, a in enumerate(args) if _describe(a) is None}
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
