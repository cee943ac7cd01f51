"""One ttnn op instance as data: its kind, shapes, formats and program config, and its modelled time.

The expert's layer graph (``graph.layer_op_specs``), a measured row of ``costmodel/data`` and a
row of a device-profiler CSV all become one of these, so the fit, the what-if model and the CSV
reader/writer share one mapping from an op to its roofline (``spec.us(hw, fit)``). Fields may be
tracers inside the differentiable model; concrete specs are hashable (jit static arguments).

Each op spec lives in its op kind's module (``costmodel.blackhole.kinds``: spec, price, core split,
op codes, report row) and is re-exported here; this module adds the two measurement wrappers
(``KernelSpec``: device kernel time only; ``ChipSpec``: another board) and ``OpSpec``.
"""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.kinds.data_movement import DataMovementSpec
from costmodel.blackhole.kinds.dram_read import DramReadSpec
from costmodel.blackhole.kinds.eltwise import EltwiseSpec
from costmodel.blackhole.kinds.fill_cache import FillCacheSpec
from costmodel.blackhole.kinds.heads import HeadsDecodeSpec, HeadsSpec
from costmodel.blackhole.kinds.matmul import MatmulSpec
from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.kinds.norm import NormSpec
from costmodel.blackhole.kinds.rope import RopeSpec
from costmodel.blackhole.kinds.sdpa import SdpaCausalSpec, SdpaDecodeSpec, SdpaStandardSpec
from costmodel.blackhole.kinds.softmax import SoftmaxSpec
from costmodel.blackhole.kinds.unary import UnarySpec
from costmodel.blackhole.ops import kernel_only
from costmodel.blackhole.params import FitParams
from costmodel.hardware import Blackhole, blackhole
from costmodel.smooth import Relax


@dataclasses.dataclass(frozen=True)
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


@dataclasses.dataclass(frozen=True)
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


OpSpec = (MatmulSpec | MinimalMatmulSpec | NormSpec | SoftmaxSpec | RopeSpec | HeadsSpec | HeadsDecodeSpec | FillCacheSpec | EltwiseSpec
          | UnarySpec | DataMovementSpec | SdpaDecodeSpec
          | SdpaStandardSpec | SdpaCausalSpec | DramReadSpec | KernelSpec | ChipSpec)


__all__ = ["ChipSpec", "DataMovementSpec", "DramReadSpec", "EltwiseSpec", "FillCacheSpec", "HeadsDecodeSpec", "HeadsSpec",
           "KernelSpec",
           "MatmulSpec", "MinimalMatmulSpec", "NormSpec", "OpSpec", "RopeSpec", "SdpaCausalSpec", "SdpaDecodeSpec",
           "SdpaStandardSpec", "SoftmaxSpec", "UnarySpec"]
