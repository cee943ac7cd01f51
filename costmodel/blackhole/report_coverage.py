"""How much of a real op report the Blackhole model prices: rows and share of device time modelled,
collectives across chips set apart, skipped rows by reason.

    python -m costmodel.blackhole coverage ops_perf_results.csv [more.csv ...] [--device-id all] [--json]

Device time is the DEVICE KERNEL DURATION of the kept device's ops (``read_report``'s device
selection); the share modelled is of the one-chip time, i.e. without the collectives (which move
data between chips and are outside a one-chip model).
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib

from costmodel.blackhole.report_reader import COLLECTIVE, MODELLED, Report


@dataclasses.dataclass(frozen=True)
class Coverage:
    """One report's coverage.

    Attributes:
      path: the report.
      rows: device-op rows of the kept device(s) with a usable duration.
      device_us: their summed device kernel time.
      collective_us: of which collectives across chips.
      modelled_rows / modelled_us: rows the model prices and their time.
      skipped: {reason: (rows, us)}, by time, largest first.
    """

    path: str
    rows: int
    device_us: float
    collective_us: float
    modelled_rows: int
    modelled_us: float
    skipped: dict[str, tuple[int, float]]

    @property
    def share(self) -> float:
        """Modelled share of the one-chip device time (collectives apart); 0 with no such time."""
        chip = self.device_us - self.collective_us
        return self.modelled_us / chip if chip > 0 else 0.0

    def to_json(self) -> dict:
        return {"path": self.path, "rows": self.rows, "device_us": self.device_us, "collective_us": self.collective_us,
                "modelled_rows": self.modelled_rows, "modelled_us": self.modelled_us, "share": self.share,
                "skipped": {k: {"rows": n, "us": us} for k, (n, us) in self.skipped.items()}}


def coverage(report: Report) -> Coverage:
    """The coverage of a read report (``read_report``)."""
    timed = report.timed_rows()
    skipped: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    for r in timed:
        if r.status != MODELLED:
            skipped[r.status][0] += 1
            skipped[r.status][1] += r.duration_us
    modelled = [r for r in timed if r.status == MODELLED]
    return Coverage(report.path, len(timed), sum(r.duration_us for r in timed),
                    sum(r.duration_us for r in timed if r.status == COLLECTIVE), len(modelled),
                    sum(r.duration_us for r in modelled),
                    {k: (n, us) for k, (n, us) in sorted(skipped.items(), key=lambda kv: -kv[1][1])})


def format_coverage(covs: list[Coverage], *, reasons: int = 6) -> str:
    """A table per report: rows, device time, modelled share (collectives apart), top skip reasons by time."""
    lines = [(f"{'report':40s} {'rows':>6s} {'device ms':>10s} {'collectives ms':>15s} {'modelled rows':>14s} "
              f"{'modelled time':>14s}")]
    for c in covs:
        lines.append(f"{pathlib.Path(c.path).name[:40]:40s} {c.rows:6d} {c.device_us / 1e3:10.3f} "
                     f"{c.collective_us / 1e3:15.3f} {c.modelled_rows:14d} {100 * c.share:13.1f}%")
        chip = max(c.device_us - c.collective_us, 1e-12)
        for reason, (n, us) in [kv for kv in c.skipped.items() if kv[0] != COLLECTIVE][:reasons]:
            lines.append(f"    {100 * us / chip:5.1f}%  {n:5d} rows  skipped: {reason}")
    return "\n".join(lines)
