"""``simulate(cfg, hw)``: the event simulation of ``costmodel.ahbm.sim`` (kept as this module's name
for the CLI's ``--simulate`` and the study)."""

from costmodel.ahbm.sim import MAX_PLAN_CELLS, simulate

__all__ = ["MAX_PLAN_CELLS", "simulate"]
