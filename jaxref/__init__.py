"""Pure-JAX references: the Alpamayo action expert golden, ADR-0060 attention algorithms, TT numerics."""

from jaxref.config import ActionInConfig, ExpertConfig
from jaxref.precision import Precision

__all__ = ["ActionInConfig", "ExpertConfig", "Precision"]
