"""A JAX emulation of exactly the ttnn 0.81.1 ops the expert graph calls (same names and keywords).

``Emulation(rounding=True)`` is an op namespace the graph uses in place of ``ttnn``: ``ns.rms_norm``,
``ns.linear``, ``ns.experimental.nlp_create_qkv_heads``, ``ns.transformer.scaled_dot_product_attention_decode``,
the trace calls, host tensors (``ns.Tensor(array, ns.bfloat8_b)``), dtypes, layouts and stand-ins of the
program / compute-kernel config classes with ttnn's field names. Semantics follow ttnn's docstrings and
its own golden functions (``ttnn.get_golden_function``; ``ttnn/operations/{normalization,matmul,
transformer,transformer_golden,data_movement}.py`` of the installed package). Math is float32 (a
matmul of bf16 values as a bf16 dot with exact products and float32 sums, ``_dot``); each
op's output is rounded to its output dtype with ``jaxref.numerics`` (bf16 round-to-nearest-even,
bfloat8_b / bfloat4_b bit-exact), as are host tensors on creation. ``rounding=False`` switches every
rounding off (the graph's logic alone, comparable with the fp32 golden to float32 round-off).

The SDPA ops read the key chunks their mask leaves visible (``device.sdpa_math``): a chunk the mask
hides contributes exact zeros on the device too, and a run-time check poisons the output with NaN
wherever a skipped row could matter.

What is *not* emulated: math fidelity inside the matmul / SDPA kernels (the device multiplies fewer
mantissa bits than float32, and its SDPA keeps bf16 score tiles): those errors come only from a chip.
A trace records the ops issued between ``begin_trace_capture`` and ``end_trace_capture`` and replays
them on the same tensor objects (inputs read from the persistent buffers at replay time), as a
device trace replays on fixed buffer addresses.
"""

from __future__ import annotations

import functools
import math
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.compile_options import jit
from costmodel.hardware import blackhole_p150a
from device.emulation_types import (
    CoreCoord,
    DataType,
    Device,
    Layout,
    MathFidelity,
    MatmulMultiCoreReuseMultiCast1DProgramConfig,
    MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig,
    MatmulMultiCoreReuseMultiCastProgramConfig,
    MemoryConfig,
    Rolled,
    SDPAProgramConfig,
    Tensor,
    UnaryOpType,
    UnaryWithParam,
    WormholeComputeKernelConfig,
)
from device.sdpa_math import KeySpan, attend, attend_over_runs, key_span
from jaxref.numerics import einsum_f32
from jaxref.precision import cast


# XLA:CPU options of every program that evaluates the ops' float32 math: each op's math run eagerly
# (``compiled`` below) and a whole layer compiled as one program (``device.fast_twin``), so both give
# the same bits. Without them they do not: XLA:CPU's YNNPACK fusions (on by default) fuse a scale,
# mask add, softmax and the next matmul of the attention into one library kernel with its own exp
# and reduction order when the layer is one program, but not when each op runs alone (1 bf16 ulp on
# 45-80 of 98304 layer outputs at alpamayo_tt widths); and XLA may keep float32 across an f32 -> bf16
# -> f32 round trip inside a fusion (excess precision), dropping an op's output rounding. YNNPACK is
# kept for single dots (``INDIVIDUAL_DOT``: a dot alone, the same kernel in either program), whose
# bf16 kernels run the matmuls of bf16 values (``_dot``).
def _known_to_xla(options: dict) -> dict:
    """The options this jaxlib's XLA accepts (an older one, as the ttnn venv's, has no YNNPACK and no
    flag for it: passing the flag there is an error, leaving it out changes nothing)."""
    out = {}
    for key, value in options.items():
        try:
            jax.jit(lambda x: x + 1.0, compiler_options={key: value}).lower(1.0).compile()
        except Exception as exc:  # jaxlib's XlaRuntimeError; its class moved between versions
            if "No such compile option" not in str(exc):
                raise
            continue
        out[key] = value
    return out


COMPILER_OPTIONS = _known_to_xla({"xla_allow_excess_precision": False,
                                  "xla_cpu_experimental_ynn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"})


def compiled(fn=None, /, **jit_kwargs):
    """``fn`` jitted with ``COMPILER_OPTIONS`` (``costmodel.compile_options.jit``: inside another trace,
    the fast twin's, a plain nested jit; XLA takes the outermost program's options, the same set)."""
    return jit(fn, options=COMPILER_OPTIONS, **jit_kwargs)


def _to(x, fmt: str | None):
    """x rounded to the storage format ``fmt`` (``jaxref.precision.cast``), or float32 where ``fmt`` is None."""
    return jnp.asarray(x, jnp.float32) if fmt is None else cast(x, fmt)


@functools.partial(compiled, static_argnames=("eps", "gamma_fmt"))
def _rms_math(x, gamma, *, eps: float, gamma_fmt: str | None):
    """x [.., D] * rsqrt(mean(x^2) + eps), rounded to ``gamma_fmt`` then times gamma [D] (None: no gamma)."""
    y = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps)
    return y if gamma is None else _to(y, gamma_fmt) * gamma


def _dot(a, b, *, bf16: bool):
    """a [.., M, K] @ b [.., K, N] with float32 sums; ``bf16``: both hold bf16 values (the device formats'
    values, rounding on), so it runs as a bf16 dot with exact products (``einsum_f32``)."""
    return einsum_f32("...mk,...kn->...mn", a, b, bf16_values=bf16)


@functools.partial(compiled, static_argnames=("silu", "bf16"))
def _linear_math(a, b, *, silu: bool, bf16: bool):
    """``_dot(a, b)``, then SiLU."""
    y = _dot(a, b, bf16=bf16)
    return jax.nn.silu(y) if silu else y


@functools.partial(compiled, static_argnames=("silu", "bf16"))
def _rolled_linear_math(a, base, rows, cols, *, silu: bool, bf16: bool):
    """``_linear_math(a, Rolled(base, rows, cols)())`` without producing the rolled weight: a @ roll(W)
    = roll(roll(a, -rows) @ W, cols) over the last axes (``emulation_types.Rolled``)."""
    y = jnp.roll(_dot(jnp.roll(a, -rows, axis=-1), base, bf16=bf16), cols, axis=-1)
    return jax.nn.silu(y) if silu else y


@compiled
def _rope_math(x, cos, sin):
    """HF rotate_half RoPE ``x cos + cat(-x2, x1) sin`` over the last axis."""
    h = x.shape[-1] // 2
    return x * cos + jnp.concatenate([-x[..., h:], x[..., :h]], axis=-1) * sin


_attend_math = compiled(attend, static_argnames=("scale", "bf16"))
_attend_runs_math = compiled(attend_over_runs, static_argnames=("scale", "span", "bf16"))


def _round(ns, x, dtype: DataType):
    return cast(x, dtype.value) if ns.rounding else jnp.asarray(x, jnp.float32)


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _dev(*tensors) -> Device:
    for t in tensors:
        if isinstance(t, Tensor):
            _check(t.device is not None, "op input must be a device tensor (ttnn.to_device first)")
            _check(not t.deallocated or t.device.replaying, "op input was deallocated")
            return t.device
    raise ValueError("op needs at least one tensor input")


class Emulation:
    """The op namespace (``ttnn``-compatible names). ``rounding``: round op outputs and host tensors to
    their dtype (True: device numerics; False: float32 everywhere, the graph's logic alone).
    ``known_masks``: host values of SDPA mask buffers, by buffer address, whose values this namespace
    sees traced (``device.fast_twin``): the SDPA ops plan their key span on them (``device.sdpa_math``)
    as they do on a concrete mask."""

    bfloat16, bfloat8_b, bfloat4_b, float32 = DataType.BFLOAT16, DataType.BFLOAT8_B, DataType.BFLOAT4_B, DataType.FLOAT32
    TILE_LAYOUT, ROW_MAJOR_LAYOUT = Layout.TILE, Layout.ROW_MAJOR
    DRAM_MEMORY_CONFIG, L1_MEMORY_CONFIG = MemoryConfig("DRAM"), MemoryConfig("L1")
    MathFidelity, UnaryOpType, UnaryWithParam, CoreCoord = MathFidelity, UnaryOpType, UnaryWithParam, CoreCoord
    MatmulMultiCoreReuseMultiCast1DProgramConfig = MatmulMultiCoreReuseMultiCast1DProgramConfig
    MatmulMultiCoreReuseMultiCastProgramConfig = MatmulMultiCoreReuseMultiCastProgramConfig
    MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig = MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig
    SDPAProgramConfig, WormholeComputeKernelConfig = SDPAProgramConfig, WormholeComputeKernelConfig
    # Not a ttnn attribute: a capture here runs each op as it records it (compiling its program then),
    # so the graph needs no compiling pass before a capture, as ttnn does, and the capture's outputs
    # already hold the results (``TTExpert.forward``).
    CAPTURE_RUNS_OPS = True

    def __init__(self, *, rounding: bool = True, known_masks: dict[int, np.ndarray] | None = None):
        self.rounding = rounding
        self.known_masks = dict(known_masks or {})
        self._spans: dict = {}  # chunk -> (the last concrete mask value planned on, its KeySpan or None)
        self.experimental = SimpleNamespace(
            nlp_create_qkv_heads=self._op(self._nlp_create_qkv_heads), rotary_embedding_hf=self._op(self._rope_hf),
            nlp_concat_heads=self._op(self._nlp_concat_heads))
        self.transformer = SimpleNamespace(
            scaled_dot_product_attention_decode=self._op(self._sdpa_decode),
            scaled_dot_product_attention=self._op(self._sdpa))
        for name in ("rms_norm", "linear", "add", "mul", "reshape", "fill_cache"):
            setattr(self, name, self._op(getattr(self, "_" + name)))

    def _op(self, fn):
        """Run ``fn``; while a trace is being captured also record it for replay."""

        def op(*args, **kwargs):
            out = fn(*args, **kwargs)
            dev = _dev(*args)
            if dev.capturing is not None:
                dev.capturing.append((fn, args, kwargs, out))
            return out

        op.__doc__ = fn.__doc__
        return op

    def emulated_op(self, fn):
        """An emulation-only op (not a ttnn call; ``device.fast_twin``'s compiled layer): ``fn`` run like
        the ttnn ops here, recorded by an open trace capture and replayed by ``execute_trace``."""
        return self._op(fn)

    # ---- host side, transfers, trace ----------------------------------------------------
    def Tensor(self, data, dtype: DataType) -> Tensor:
        """Host tensor: block formats come out in TILE layout, others ROW_MAJOR (as ttnn's constructor)."""
        layout = Layout.TILE if dtype in (DataType.BFLOAT8_B, DataType.BFLOAT4_B) else Layout.ROW_MAJOR
        return Tensor(_round(self, np.asarray(data, np.float32), dtype), dtype, layout)

    def to_layout(self, tensor: Tensor, layout: Layout) -> Tensor:
        """Same values in another layout (block formats exist only in TILE)."""
        _check(layout == Layout.TILE or tensor.dtype not in (DataType.BFLOAT8_B, DataType.BFLOAT4_B),
               f"{tensor.dtype} exists only in TILE layout")
        return Tensor(tensor.value, tensor.dtype, layout, tensor.device)

    def to_dtype(self, tensor: Tensor, dtype: DataType) -> Tensor:
        _check(tensor.device is None, "to_dtype works on host tensors")
        return Tensor(_round(self, tensor.value, dtype), dtype, tensor.layout)

    def open_device(self, device_id: int = 0, **_) -> Device:
        return Device(device_id)

    def close_device(self, device: Device) -> None:
        device.open = False

    def synchronize_device(self, device: Device) -> None:
        """Ops run eagerly here: nothing is in flight."""

    def generated_tensor(self, device: Device, generate, shape: tuple[int, ...], dtype: DataType) -> Tensor:
        """A device buffer (TILE layout) whose values ``generate()`` produces on every read, already
        rounded to ``dtype`` (not a ttnn call: the emulation's way to hold a full-size model in
        bounded memory; ``fill_cache`` rows are kept and laid over the generated values)."""
        _check(device.capturing is None, "allocating a device buffer during trace capture")
        return Tensor(None, dtype, Layout.TILE, device, generate=generate, shape=shape)

    def to_device(self, tensor: Tensor, device: Device, memory_config: MemoryConfig | None = None) -> Tensor:
        """Allocate a device buffer (a new address) holding the host tensor's values."""
        _check(device.capturing is None, "allocating a device buffer during trace capture")
        return Tensor(tensor.value, tensor.dtype, tensor.layout, device)

    def from_device(self, tensor: Tensor) -> Tensor:
        return Tensor(tensor.value, tensor.dtype, tensor.layout)

    def copy_host_to_device_tensor(self, host_tensor: Tensor, device_tensor: Tensor) -> None:
        """Overwrite a device buffer in place (same shape, dtype and layout required, as in ttnn)."""
        _check((host_tensor.shape, host_tensor.dtype, host_tensor.layout)
               == (device_tensor.shape, device_tensor.dtype, device_tensor.layout),
               f"host {host_tensor.shape} {host_tensor.dtype} {host_tensor.layout} != device "
               f"{device_tensor.shape} {device_tensor.dtype} {device_tensor.layout}")
        device_tensor.value = host_tensor.value

    def deallocate(self, tensor: Tensor, force: bool = True) -> None:
        tensor.deallocated = True

    def begin_trace_capture(self, device: Device, cq_id: int = 0) -> int:
        _check(device.capturing is None, "a trace capture is already open")
        device.capturing = []
        return next(device.trace_ids)

    def end_trace_capture(self, device: Device, trace_id: int, cq_id: int = 0) -> None:
        device.traces[trace_id], device.capturing = device.capturing, None

    def execute_trace(self, device: Device, trace_id: int, cq_id: int = 0, blocking: bool = True) -> None:
        """Replay the captured ops in order, writing each result into the captured output tensors."""
        device.replaying = True
        try:
            for fn, args, kwargs, out in device.traces[trace_id]:
                res = fn(*args, **kwargs)
                for o, r in zip(out if isinstance(out, tuple) else (out,), res if isinstance(res, tuple) else (res,),
                                strict=True):
                    if o is not r and o.view_of is None:  # views follow their source
                        o.value = r.value
        finally:
            device.replaying = False

    def release_trace(self, device: Device, trace_id: int) -> None:
        del device.traces[trace_id]

    # ---- ops ------------------------------------------------------------------------------
    def _bf16_values(self, *tensors: Tensor) -> bool:
        """Whether these buffers hold bf16 values: every device format's values are, once rounded
        (rounding on); a float32 buffer's are not."""
        return self.rounding and all(t.dtype != DataType.FLOAT32 for t in tensors)

    def _out(self, x, dtype: DataType, like: Tensor) -> Tensor:
        return Tensor(_round(self, x, dtype), dtype, Layout.TILE, like.device)

    def _rms_norm(self, input_tensor, *, epsilon=1e-12, weight=None, memory_config=None, compute_kernel_config=None):
        """``x * rsqrt(mean(x^2) + epsilon)`` in float32, rounded to the gamma's dtype (bf16) before the
        gamma multiply, output in x's dtype (golden: ``ttnn/operations/normalization.py``)."""
        x, gamma, gamma_fmt = input_tensor.value, None, None
        if weight is not None:
            _check(weight.shape == (1, 1, 1, x.shape[-1]),
                   f"rms_norm weight must be [1, 1, 1, {x.shape[-1]}] (gamma width == input width), got {weight.shape}")
            gamma = weight.value.reshape(-1)
            if weight.dtype == DataType.BFLOAT16 and self.rounding:
                gamma_fmt = DataType.BFLOAT16.value
        y = _rms_math(x, gamma, eps=float(epsilon), gamma_fmt=gamma_fmt)
        return self._out(y, input_tensor.dtype, input_tensor)

    def _linear(self, input_tensor_a, input_tensor_b, *, program_config=None, activation=None, dtype=None,
                memory_config=None, compute_kernel_config=None):
        """``a @ b`` (b is [K, N]: weights stored transposed), a fused SiLU (program config or
        ``activation``), output in ``dtype`` or a's dtype (golden: ``ttnn/operations/matmul.py``).
        A program config must pass the project's one legality rule (``MatmulProgramConfig.validate``
        on a p150a) for these shapes and dtypes."""
        a, b_shape = input_tensor_a.value, input_tensor_b.shape
        _check(a.shape[-1] == b_shape[-2], f"linear: a {a.shape} and b {b_shape} have different K")
        m, (k, n) = math.prod(a.shape[:-1]), b_shape[-2:]
        if program_config is not None:
            fp32_acc = True if compute_kernel_config is None else compute_kernel_config.fp32_dest_acc_en
            MatmulProgramConfig.from_ttnn(program_config).validate(
                "linear program_config", blackhole_p150a(), M=m, K=k, N=n, weight_dtype=input_tensor_b.dtype.value,
                act_dtype=input_tensor_a.dtype.value, fp32_dest_acc=fp32_acc)
        fused = program_config.fused_activation if program_config is not None else None
        if fused is not None or activation is not None:
            name = fused.op_type.value if fused is not None else activation
            _check(name == "silu", f"activation={name!r}: the emulation implements 'silu'")
        silu, bf16 = fused is not None or activation is not None, self._bf16_values(input_tensor_a, input_tensor_b)
        rolled = input_tensor_b.generate
        if isinstance(rolled, Rolled) and not input_tensor_b.patches:
            y = _rolled_linear_math(a, rolled.base, rolled.rows, rolled.cols, silu=silu, bf16=bf16)
        else:
            y = _linear_math(a, input_tensor_b.value, silu=silu, bf16=bf16)
        return self._out(y, dtype or input_tensor_a.dtype, input_tensor_a)

    def _add(self, input_tensor_a, input_tensor_b, *, dtype=None, memory_config=None):
        """Elementwise sum in float32, output in a's dtype."""
        _check(input_tensor_a.shape == input_tensor_b.shape, f"add: {input_tensor_a.shape} != {input_tensor_b.shape}")
        return self._out(input_tensor_a.value + input_tensor_b.value, dtype or input_tensor_a.dtype, input_tensor_a)

    def _mul(self, input_tensor_a, input_tensor_b, *, dtype=None, memory_config=None):
        """Elementwise product in float32, output in a's dtype."""
        _check(input_tensor_a.shape == input_tensor_b.shape, f"mul: {input_tensor_a.shape} != {input_tensor_b.shape}")
        return self._out(input_tensor_a.value * input_tensor_b.value, dtype or input_tensor_a.dtype, input_tensor_a)

    def _reshape(self, input_tensor, shape):
        """A view (same buffer address): row-major reshape; the graph only reshapes where the tile
        order is unchanged (the last dim is kept, tile rows stay whole), i.e. ttnn's zero-cost views."""
        shape = tuple(shape)
        _check(shape[-1] == input_tensor.shape[-1] and math.prod(shape) == math.prod(input_tensor.shape),
               f"reshape {input_tensor.shape} -> {shape} is not a zero-cost view (last dim must stay)")
        # a view reads its source on every access: a trace holds no copy of a viewed cache
        return Tensor(None, input_tensor.dtype, input_tensor.layout, input_tensor.device, address=input_tensor.address,
                      shape=shape, view_of=input_tensor)

    def _fill_cache(self, cache_tensor, input_tensor, batch_idx, *, update_idx=0):
        """In place: ``cache[batch_idx, :, update_idx : update_idx + S, :] = input`` (rounded to the
        cache's dtype); update_idx must be tile aligned (golden: ``ttnn/operations/data_movement.py``)."""
        _check(update_idx % 32 == 0, f"fill_cache update_idx={update_idx} must be a multiple of 32")
        b, nkv, smax, dh = cache_tensor.shape
        _, n_in, s, d_in = input_tensor.shape
        _check((n_in, d_in) == (nkv, dh) and 0 <= batch_idx < b and update_idx + s <= smax,
               f"fill_cache: input {input_tensor.shape} at batch {batch_idx}, row {update_idx} does not fit "
               f"cache {cache_tensor.shape}")
        cache_tensor.write_rows(batch_idx, update_idx, _round(self, input_tensor.value[0], cache_tensor.dtype))
        return cache_tensor

    def _nlp_create_qkv_heads(self, input, input_kv=None, *, num_heads, num_kv_heads=None, transpose_k_heads=True,
                              memory_config=None):
        """[B, 1, S, (nh + 2 nkv) dh] -> Q [B, nh, S, dh], K [B, nkv, S, dh] (or [B, nkv, dh, S] with
        ``transpose_k_heads``), V [B, nkv, S, dh]; columns are q heads, then k heads, then v heads."""
        _check(input_kv is None, "the emulation implements the fused-input form (input_kv=None)")
        nkv = num_heads if num_kv_heads is None else num_kv_heads
        B, one, S, W = input.shape
        _check(one == 1 and W % (num_heads + 2 * nkv) == 0, f"input {input.shape} is not [B, 1, S, (nh + 2 nkv) dh]")
        dh = W // (num_heads + 2 * nkv)
        heads = input.value.reshape(B, S, num_heads + 2 * nkv, dh).transpose(0, 2, 1, 3)
        q, k, v = heads[:, :num_heads], heads[:, num_heads:num_heads + nkv], heads[:, num_heads + nkv:]
        if transpose_k_heads:
            k = k.transpose(0, 1, 3, 2)
        return tuple(self._out(a, input.dtype, input) for a in (q, k, v))

    def _rope_hf(self, input_tensor, cos_cache, sin_cache, *, is_decode_mode=False, memory_config=None,
                 compute_kernel_config=None):
        """HF rotate_half RoPE ``x cos + cat(-x2, x1) sin`` (prefill mode: x [1, nh, S, dh], cos/sin
        [1, 1, S, dh]); dh must be 32 or a multiple of 64 (ttnn's docstring)."""
        _check(not is_decode_mode, "the graph uses the prefill mode of rotary_embedding_hf")
        x = input_tensor.value
        dh = x.shape[-1]
        _check(dh == 32 or dh % 64 == 0, f"rotary_embedding_hf head_dim={dh} must be 32 or a multiple of 64")
        _check(cos_cache.shape == sin_cache.shape == (1, 1, x.shape[2], dh),
               f"cos/sin must be [1, 1, {x.shape[2]}, {dh}], got {cos_cache.shape} / {sin_cache.shape}")
        return self._out(_rope_math(x, cos_cache.value, sin_cache.value), input_tensor.dtype, input_tensor)

    def _nlp_concat_heads(self, input_tensor, *, memory_config=None):
        """[B, nh, S, dh] -> [B, 1, S, nh * dh]."""
        B, nh, S, dh = input_tensor.shape
        y = input_tensor.value.transpose(0, 2, 1, 3).reshape(B, 1, S, nh * dh)
        return self._out(y, input_tensor.dtype, input_tensor)

    def _attend(self, q, k: Tensor, v: Tensor, mask, scale, *, bf16: bool, mask_tensor: Tensor | None = None,
                chunk: int | None = None):
        """softmax(q k^T scale + mask) v in float32; q [b, nh, sq, dh], k/v buffers [b, nkv, s, dh], mask
        broadcastable to [b, nh, sq, s]. GQA: q head h reads kv head h // (nh / nkv) (ttnn's
        ``repeat_interleave``), evaluated with the G heads of a kv head side by side (no K/V copies).
        ``mask_tensor`` (the attn_mask buffer ``mask`` was read from) and the kernel's k ``chunk``:
        only the chunks it leaves visible are read (``device.sdpa_math``: the same numbers up to the
        order of the softmax sums; NaN where a skipped row could matter), each run of rows read from
        the buffers as it is (``Tensor.row_runs``). ``bf16``: q and k hold bf16 values (their scores
        run as a bf16 dot, ``einsum_f32``)."""
        nh, nkv = q.shape[1], k.shape[1]
        _check(nh % nkv == 0, f"q heads {nh} not a multiple of kv heads {nkv}")
        span = None if mask_tensor is None or chunk is None else self._span(mask_tensor, chunk)
        if span is None:
            return _attend_math(q, k.value, v.value, mask, scale=float(scale), bf16=bf16)
        runs = span.runs + span.hidden(k.shape[2])
        return _attend_runs_math(q, k.row_runs(runs), v.row_runs(runs), mask, scale=float(scale), span=span, bf16=bf16)

    def _span(self, mask_tensor: Tensor, chunk: int) -> KeySpan | None:
        """The key span of a mask buffer: planned on its concrete value, or on its ``known_masks``
        entry where it is traced (None: read every chunk)."""
        value = mask_tensor.value
        if isinstance(value, jax.core.Tracer):
            host = self.known_masks.get(mask_tensor.address)
            return None if host is None else key_span(host, chunk=chunk)
        hit = self._spans.get(chunk)
        if hit is None or hit[0] is not value:  # a mask is rewritten as a new array: planned again
            hit = self._spans[chunk] = (value, key_span(np.asarray(value), chunk=chunk))
        return hit[1]

    def _sdpa_decode(self, input_tensor_q, input_tensor_k, input_tensor_v, *, is_causal=True, attn_mask=None,
                     cur_pos=None, scale=None, memory_config=None, program_config=None, compute_kernel_config=None):
        """Flash-decode: q [1, b, nh, dh] (b users, nh "heads" each), k/v [b, nkv, s, dh]; mask
        [1 or b, 1, nh, s] broadcast over users, only with is_causal=False; causal: user i sees keys
        [0, cur_pos[i]]. Output [1, b, nh, dh] in q's dtype (golden: ``transformer_golden.py``)."""
        q, k_shape = input_tensor_q.value, input_tensor_k.shape  # k and v are read by run (``_attend``)
        _, b, nh, dh = q.shape
        s = k_shape[2]
        _check(k_shape[0] == b and input_tensor_v.shape == k_shape, f"k/v {k_shape} do not match q {q.shape}")
        k_chunk = program_config.k_chunk_size if program_config is not None else min(512, s & -s)
        _check(s % k_chunk == 0, f"cache length s={s} must be a multiple of k_chunk_size={k_chunk}")
        if is_causal:
            _check(attn_mask is None and cur_pos is not None and len(cur_pos) == b,
                   "causal decode takes cur_pos (one position per user) and no attn_mask")
            mask = jnp.where(jnp.arange(s)[None, :] <= jnp.asarray(cur_pos)[:, None], 0.0, -jnp.inf)[:, None, None, :]
        else:
            _check(attn_mask is not None and attn_mask.shape[1:] == (1, nh, s) and attn_mask.shape[0] in (1, b),
                   f"non-causal decode needs attn_mask [1 or {b}, 1, {nh}, {s}], got "
                   f"{None if attn_mask is None else attn_mask.shape}")
            mask = attn_mask.value.transpose(0, 2, 1, 3)  # [b|1, nh, 1, s]
        qb = q.transpose(1, 2, 0, 3)  # [b, nh, 1, dh]
        out = self._attend(qb, input_tensor_k, input_tensor_v, mask, dh**-0.5 if scale is None else scale,
                           bf16=self._bf16_values(input_tensor_q, input_tensor_k),
                           mask_tensor=None if is_causal else attn_mask, chunk=k_chunk)
        return self._out(out.transpose(2, 0, 1, 3), input_tensor_q.dtype, input_tensor_q)

    def _sdpa(self, input_tensor_q, input_tensor_k, input_tensor_v, *, attn_mask=None, is_causal=True, scale=None,
              memory_config=None, program_config=None, compute_kernel_config=None):
        """FlashAttention-2 SDPA: q [b, nqh, sq, dh], k/v [b, nkv, s, dh], additive mask [b|1, nqh|1, sq, s]
        (only with is_causal=False); chunk sizes must divide sq / s. Output in q's dtype."""
        q = input_tensor_q.value
        _check(not (is_causal and attn_mask is not None), "is_causal=True and attn_mask are mutually exclusive")
        sq, s, dh = q.shape[2], input_tensor_k.shape[2], q.shape[3]
        if program_config is not None:
            _check(sq % program_config.q_chunk_size == 0 and s % program_config.k_chunk_size == 0,
                   f"q_chunk_size={program_config.q_chunk_size} / k_chunk_size={program_config.k_chunk_size} must "
                   f"divide sq={sq} / s={s}")
        if is_causal:
            mask = jnp.where(jnp.arange(s)[None, :] <= jnp.arange(sq)[:, None] + s - sq, 0.0, -jnp.inf)
        else:
            _check(attn_mask is None or attn_mask.shape[2:] == (sq, s),
                   f"attn_mask must be [.., .., {sq}, {s}], got {attn_mask.shape if attn_mask is not None else None}")
            mask = None if attn_mask is None else attn_mask.value
        out = self._attend(q, input_tensor_k, input_tensor_v, mask, dh**-0.5 if scale is None else scale,
                           bf16=self._bf16_values(input_tensor_q, input_tensor_k), mask_tensor=attn_mask,
                           chunk=None if program_config is None else program_config.k_chunk_size)
        return self._out(out, input_tensor_q.dtype, input_tensor_q)
