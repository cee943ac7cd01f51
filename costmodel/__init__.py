"""Differentiable roofline cost models in JAX.

Blackhole (the expert port of seeds/EXPERT_NOTES.md):
  hardware       Blackhole p150a / p100a and AHBM specs as pytrees (unit and source in each field)
  smooth         exact / relaxed max, min, ceil (``Relax`` temperatures)
  blackhole      op models, the layer graph, 64-layer step, 10-step sample; fit with covariance,
                 prediction intervals, profiler CSVs, roofline, tuning, what-if CLI (see its docstring)

AHBM (the ADR-0060 kernels):
  ahbm           latency of the four cases, SimPy event check, TILE / C / P tuning vs exhaustive,
                 elasticities, CLI (``python -m costmodel.ahbm``)
"""

from costmodel.blackhole import (
    AttnConfig,
    BlackholeConfig,
    FitParams,
    MatmulProgramConfig,
    evaluate,
    layer_op_us,
    load_fitted,
    step_breakdown,
    step_us,
    sweep_step_us,
)
from costmodel.hardware import (
    AHBM,
    Blackhole,
    ahbm_sip,
    blackhole,
    blackhole_p100a,
    blackhole_p150a,
    tile_bytes,
)
from costmodel.smooth import Relax

__all__ = [
    "AHBM",
    "AttnConfig",
    "Blackhole",
    "BlackholeConfig",
    "FitParams",
    "MatmulProgramConfig",
    "Relax",
    "ahbm_sip",
    "blackhole",
    "blackhole_p100a",
    "blackhole_p150a",
    "evaluate",
    "layer_op_us",
    "load_fitted",
    "step_breakdown",
    "step_us",
    "sweep_step_us",
    "tile_bytes",
]
