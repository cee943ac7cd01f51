"""Differentiable roofline cost models in JAX.

Blackhole (the expert port of seeds/EXPERT_NOTES.md):
  hardware       Blackhole p150a / p100a and AHBM specs as pytrees, units in names, sources
  smooth         exact / relaxed max, min, ceil (``Relax`` temperatures)
  blackhole_ops  ttnn op models (1D-multicast matmul, flash-decode / standard SDPA, norms, ...)
  blackhole      the layer graph, 64-layer step, 10-step sample; ``evaluate``; what-if CLI
  fitted         the fitted parameters (``FitParams``) and the stored calibration
  calibrate      optax fit to the measured tables in ``costmodel/data``
  roofline       DRAM floor per step and the gap per op class
  tune           gradient tuning of integer knobs with projection vs exhaustive search
"""

from costmodel.blackhole import BlackholeConfig, evaluate, layer_op_us, step_breakdown, step_us, sweep_step_us
from costmodel.blackhole_ops import AttnConfig, MatmulConfig
from costmodel.fitted import FitParams, load_fitted
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
    "MatmulConfig",
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
