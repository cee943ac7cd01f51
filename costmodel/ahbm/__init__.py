"""Differentiable latency model of the ADR-0060 AHBM attention kernels, checked by a SimPy event
simulation; gradient tuning of TILE / C / P / pipelining and hardware elasticities.

The physical specification both implement is ``costmodel.ahbm.physics``'s docstring. This package
only re-exports the entry points, lazily: importing the simulation (``costmodel.ahbm.sim``) must
not load the model's modules (the simulation is the model's independent check).
"""

import importlib

_EXPORTS = {"AhbmConfig": "costmodel.ahbm.config", "evaluate": "costmodel.ahbm.model", "tune": "costmodel.ahbm.tune"}
__all__ = ["AhbmConfig", "evaluate", "tune"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'costmodel.ahbm' has no attribute {name!r}")
