"""Hardware elasticities: d log(latency) / d log(parameter) for every float field of the AHBM spec.

One ``jax.grad`` of the exact evaluator per configuration gives all of them at once: the share of
latency a 1% change of each parameter moves (1 = fully bound by it, 0 = hidden). At a kink of a
max (two paths equally critical) the gradient is the one JAX's ``max`` picks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import knobs_of, static_of
from costmodel.hardware import AHBM, ahbm_sip, float_fields


def elasticities(cfg: AhbmConfig, hw: AHBM | None = None) -> dict[str, float]:
    """{AHBM float field: d log latency / d log field} at ``cfg`` (exact evaluator)."""
    hw = ahbm_sip() if hw is None else hw
    knobs = knobs_of(cfg)

    def log_lat(h):
        return jnp.log(case_latency(h, knobs, **static_of(cfg))["total"])  # every static option of cfg

    g = jax.grad(log_lat)(hw)
    return {name: float(getattr(g, name)) * float(getattr(hw, name)) for name in float_fields(hw)}
