"""Tensors, the device and the stand-in config / enum types of ``device.emulation`` (ttnn's names).

The config classes carry exactly the keyword names of their ttnn 0.81.1 counterparts (nanobind
constructors, keyword-only) that the port's configs set in ``build`` (``MatmulProgramConfig``: 1D, 2D and
DRAM-sharded matmul configs; ``SdpaProgramConfig``; ``ComputeConfig``); ``tests/test_device_ttnn.py``
builds the real ttnn objects from the same dataclasses.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools

import jax.numpy as jnp
import numpy as np


class DataType(enum.Enum):
    BFLOAT16 = "bf16"
    BFLOAT8_B = "bfp8"
    BFLOAT4_B = "bfp4"
    FLOAT32 = "fp32"


class Layout(enum.Enum):
    ROW_MAJOR = 0
    TILE = 1


class MathFidelity(enum.Enum):
    LoFi = 0
    HiFi2 = 2
    HiFi3 = 3
    HiFi4 = 4


class UnaryOpType(enum.Enum):
    SILU = "silu"
    GELU = "gelu"
    RELU = "relu"


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    buffer_type: str  # 'DRAM' or 'L1'


# ---- stand-ins of ttnn's config classes (same keyword names; built by the port's configs) ----
@dataclasses.dataclass(frozen=True)
class CoreCoord:
    x: int
    y: int


@dataclasses.dataclass(frozen=True)
class UnaryWithParam:
    op_type: UnaryOpType


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulMultiCoreReuseMultiCast1DProgramConfig:
    compute_with_storage_grid_size: CoreCoord
    in0_block_w: int
    out_subblock_h: int
    out_subblock_w: int
    out_block_h: int | None = None
    out_block_w: int | None = None
    per_core_M: int
    per_core_N: int
    fuse_batch: bool
    fused_activation: UnaryWithParam | None = None
    mcast_in0: bool


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulMultiCoreReuseMultiCastProgramConfig:
    compute_with_storage_grid_size: CoreCoord
    in0_block_w: int
    out_subblock_h: int
    out_subblock_w: int
    out_block_h: int | None = None
    out_block_w: int | None = None
    per_core_M: int
    per_core_N: int
    transpose_mcast: bool
    fused_activation: UnaryWithParam | None = None
    fuse_batch: bool = True


@dataclasses.dataclass(frozen=True, kw_only=True)
class MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig:
    in0_block_w: int
    per_core_M: int
    per_core_N: int
    fused_activation: UnaryWithParam | None = None
    num_workers_per_dram_bank: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class SDPAProgramConfig:
    compute_with_storage_grid_size: CoreCoord
    q_chunk_size: int
    k_chunk_size: int
    exp_approx_mode: bool | None = None
    max_cores_per_head_batch: int = 16


@dataclasses.dataclass(frozen=True, kw_only=True)
class WormholeComputeKernelConfig:
    math_fidelity: MathFidelity = MathFidelity.LoFi
    math_approx_mode: bool = True
    fp32_dest_acc_en: bool = False
    packer_l1_acc: bool = False


# ---- tensors and the device -------------------------------------------------------------
_addresses = itertools.count(1 << 20, 1 << 12)


@dataclasses.dataclass(frozen=True)
class Rolled:
    """A generated buffer's values held as one stored array: ``base`` [.., R, C] rolled cyclically by
    ``rows`` along R and by ``cols`` along C (``jnp.roll``). ``base`` is float32, or bfloat16 where its
    values are bf16 values (every device format's are: stored at half the bytes, read by a bf16 dot
    without a conversion); ``rows`` / ``cols`` are int32 arrays (traced in the fast twin, whose one
    program then serves every layer).

    Called, it gives the values [.., R, C] as float32. ``Emulation.linear`` does not: for a rolled
    weight, a @ roll(W) = roll(roll(a, -rows) @ W, cols) along the last axes (the same products, the
    sum over K taken in rotated order), so no layer's weights are ever produced.
    """

    base: jnp.ndarray
    rows: jnp.ndarray
    cols: jnp.ndarray

    def __post_init__(self):
        if self.base.ndim < 2 or self.base.dtype not in (jnp.float32, jnp.bfloat16):
            raise ValueError(f"Rolled: base must be a float32 or bfloat16 array of rank >= 2, got "
                             f"{self.base.dtype} {self.base.shape}")
        for name in ("rows", "cols"):
            v = getattr(self, name)
            if getattr(v, "dtype", None) != jnp.int32 or getattr(v, "ndim", None) != 0:
                raise ValueError(f"Rolled: {name} must be an int32 scalar array (a Python int would make the "
                                 f"fast twin compile once per value), got {v!r}")

    def __call__(self) -> jnp.ndarray:
        v = jnp.asarray(self.base, jnp.float32)
        return jnp.roll(jnp.roll(v, self.rows, axis=-2), self.cols, axis=-1)


class Tensor:
    """An emulated ttnn tensor: float32 values already rounded to ``dtype``, a layout, an optional
    device and a buffer address (views share their source's address). Mutable: ``fill_cache``,
    ``copy_host_to_device_tensor`` and trace replay write into it in place.

    A *generated* tensor (``generate``: () -> values, already in ``dtype``) holds no values: they
    are produced on every read, with the row blocks written by ``fill_cache`` laid over them
    (``patches``), so 64 layers of weights and caches need not exist at once (the parity script's
    full-size emulation). A view (``view_of``) reads its source on every read."""

    def __init__(self, value, dtype: DataType, layout: Layout, device=None, address: int | None = None, *,
                 generate=None, shape: tuple[int, ...] | None = None, view_of: Tensor | None = None):
        self.dtype, self.layout, self.device = dtype, layout, device
        self.address = next(_addresses) if address is None else address
        self.deallocated = False
        self.generate, self.view_of, self.patches = generate, view_of, {}
        self._shape = None if shape is None else tuple(int(d) for d in shape)
        self._value = None if value is None else jnp.asarray(value, jnp.float32)

    @property
    def value(self):
        if self.view_of is not None:
            return self.view_of.value.reshape(self._shape)
        if self.generate is None:
            return self._value
        if not self.patches:
            return jnp.asarray(self.generate(), jnp.float32)
        return self.row_runs([(0, self.shape[2])])[0]  # the written rows laid over the generated ones

    def row_runs(self, runs) -> list:
        """``[self.value[:, :, lo:hi] for lo, hi in runs]`` (rows along axis 2) without the rest: a
        generated buffer's values are produced once, sliced, and only the ``fill_cache`` rows inside a
        run are laid over it, so no whole buffer is assembled (the emulated SDPA reads the key runs its
        mask leaves visible, ``device.sdpa_math``)."""
        view = self.view_of
        if view is not None and view.shape[2:] == self._shape[2:]:  # a reshape of the leading axes: by run too
            return [r.reshape(*self._shape[:2], hi - lo, *self._shape[3:])
                    for r, (lo, hi) in zip(view.row_runs(runs), runs, strict=True)]
        if view is not None or self.generate is None:
            v = self.value
            return [v[:, :, lo:hi] for lo, hi in runs]
        v = jnp.asarray(self.generate(), jnp.float32)
        out = []
        for lo, hi in runs:
            part, at, pieces = v[:, :, lo:hi], lo, []
            inside = [k for k in self.patches if k[1] < hi and k[2] > lo]  # in write order: a later write wins
            spans = sorted(inside)
            if spans and v.shape[0] == 1 and all(a[2] <= b[1] for a, b in itertools.pairwise(spans)):
                # one batch entry, disjoint row blocks: stitched in row order (a concatenation: faster
                # than updating a copy in the fast twin's batched layer)
                for key in spans:
                    _, start, stop = key
                    a, z = max(start, lo), min(stop, hi)
                    pieces += [v[:, :, at:a], jnp.asarray(self.patches[key], jnp.float32)[None, :, a - start:z - start]]
                    at = z
                part = jnp.concatenate([*pieces, v[:, :, at:hi]], axis=2)
            else:
                for b, start, stop in inside:
                    a, z = max(start, lo), min(stop, hi)
                    part = part.at[b, :, a - lo:z - lo, :].set(self.patches[(b, start, stop)][:, a - start:z - start])
            out.append(part)
        return out

    @value.setter
    def value(self, v):
        if self.view_of is not None or self.generate is not None:
            raise ValueError("a view or generated tensor is written through fill_cache / its source only")
        self._value = jnp.asarray(v, jnp.float32)

    def write_rows(self, batch: int, start: int, rows) -> None:
        """In place: ``self[batch, :, start : start + rows.shape[1], :] = rows`` (rows already in dtype)."""
        if self.generate is not None:
            self.patches[(batch, start, start + rows.shape[1])] = jnp.asarray(rows, jnp.float32)
        else:
            self._value = self._value.at[batch, :, start:start + rows.shape[1], :].set(rows)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape if self._shape is not None else tuple(self._value.shape)

    def buffer_address(self) -> int:
        return self.address

    def to_numpy(self) -> np.ndarray:
        return np.asarray(self.value, np.float32)


class Device:
    """An emulated device: trace bookkeeping and the addresses of the buffers it holds."""

    def __init__(self, device_id: int):
        self.device_id = device_id
        self.capturing: list | None = None
        self.traces: dict[int, list] = {}
        self.replaying = False
        self.open = True
        self.trace_ids = itertools.count(1)
