"""Differentiable roofline cost models in JAX (a package face: it re-exports the shared pieces only).

Shared:
  hardware         Blackhole p150a / p100a and AHBM specs as pytrees (unit and source in each field)
  smooth           exact / relaxed max, min, ceil (``Relax`` temperatures)
  tuning           projection of relaxed knobs onto discrete configs, Adam descent (both tuners)
  compile_options  the one jit of every model
  overrides        ``--set HW.FIELD=VALUE`` hardware what-ifs

Models (import them by package; each has its own ``evaluate``):
  blackhole        the expert port on one Blackhole chip (``costmodel.blackhole``; CLI ``python -m costmodel.blackhole``)
  ahbm             the ADR-0060 kernels (``costmodel.ahbm``; CLI ``python -m costmodel.ahbm``)
"""

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
    "Blackhole",
    "Relax",
    "ahbm_sip",
    "blackhole",
    "blackhole_p100a",
    "blackhole_p150a",
    "tile_bytes",
]
