"""``Row``: one measured number, where it comes from, and the op spec that predicts it (the loaders of
the stored rows are in ``rows``; the report reader builds rows of a report's lines)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from costmodel.blackhole.opspecs import OpSpec
    from costmodel.blackhole.rows import StepSpec


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured number and what predicts it.

    Attributes:
      table: data file stem the row comes from ('op_times', ..., 'profiler_csv').
      name: row id within the table.
      group: leave-one-group-out group.
      role: 'calibration' (fitted), 'validation' (predicted only) or 'scope_gap' (predicted, but a
        quantity the model does not express: reported apart, not used to estimate the discrepancy).
      lo, hi: measured value or range, us (lo == hi for a single number).
      source: repository / file / line the number comes from.
      spec: the op spec (or ``StepSpec``) whose modelled time is compared with it.
    """

    table: str
    name: str
    group: str
    role: str
    lo: float
    hi: float
    source: str
    spec: OpSpec | StepSpec

    @property
    def target(self) -> float:
        """Fit target: the value, or the middle of a range."""
        return 0.5 * (self.lo + self.hi)

    def error(self, predicted: float) -> float:
        """Relative error of ``predicted`` vs the nearest end of the measured range (0 inside it)."""
        if self.lo <= predicted <= self.hi:
            return 0.0
        ref = self.lo if predicted < self.lo else self.hi
        return predicted / ref - 1.0


__all__ = ["Row"]
