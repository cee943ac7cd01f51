"""What an op report's header says of the tt-metal build that made it, and the kernel changes the model
prices at their newer version only.

tt-metal's op-report generator writes every column of its header list in every report (tools/tracy/
process_ops_logs.py, ``OPS_CSV_HEADER``), so a column added on a known date bounds the build that made a
report: with it, the build is at least that new; without it, older than the change that added it.
``BUILD_COLUMN`` is the column this module reads.

``KERNEL_CHANGES`` lists, each with its source, the kernel changes whose older version the model does not
price. A report made before ``BUILD_COLUMN`` existed may have run the older kernel; ``older_kernel_warning``
says so for the modelled rows a change affects (``read_report`` adds it to the report's warnings).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from costmodel.blackhole.kinds.data_movement import DataMovementSpec

BUILD_COLUMN = "MULTICAST NOC UTIL (%)"
BUILD_COLUMN_SINCE = "2026-02-19"
# 'Add multicast write noc util to perf report CSV' (opened 2026-02-19); the tt-npe field it writes,
# overall_avg_mcast_write_link_util, landed in tenstorrent/tt-npe f613dd0 on 2026-02-19
BUILD_COLUMN_PR = "tenstorrent/tt-metal pull request #38155"


@dataclasses.dataclass(frozen=True)
class KernelChange:
    """A kernel change the model prices at its newer version only.

    Attributes:
      merged: the date it reached tt-metal's main branch (ISO), before ``BUILD_COLUMN_SINCE``.
      pr: the pull request that made it.
      older: what the older kernel did, and what that means for the price of the rows it affects.
      source: the pull request's title and the kernel files (repository, path, commit).
      affects: whether a modelled row's spec is one whose price the change alters.
    """

    merged: str
    pr: str
    older: str
    source: str
    affects: Callable[[object], bool]


def pads_transpose_hc(spec) -> bool:
    """A tiled HC transpose whose writer fills padding tiles (C not a multiple of 32)."""
    return isinstance(spec, DataMovementSpec) and spec.kind == "transpose_hc" and spec.pad_units > 0


KERNEL_CHANGES = (
    KernelChange(
        merged="2026-01-31",
        pr="tenstorrent/tt-metal pull request #36896",
        older="the HC transpose writer filled each padding tile one face row at a time (26-62 NoC writes; priced "
              "at one per face, 2-4: data_movement.transpose_hc_writes), so these rows may take longer than priced",
        source="'Reduce number of noc writes using in padding path of "
               "transpose tile hc again': ttnn/cpp/ttnn/operations/data_movement/transpose/device/kernels/dataflow/"
               "writer_unary_transpose_hc_interleaved_tiled_padding_aware.cpp (older: myply/tt-metal @ b20ac21c; "
               "newer: tenstorrent/tt-metal @ 0d1a31f5)",
        affects=pads_transpose_hc),
)


def built_since_column(header) -> bool:
    """Whether the report was made by a build that writes ``BUILD_COLUMN`` (one at least as new as
    ``BUILD_COLUMN_SINCE``, after every change of ``KERNEL_CHANGES``)."""
    return BUILD_COLUMN in header


def older_kernel_warning(header, specs) -> list[str]:
    """Warnings for a report whose header lacks ``BUILD_COLUMN``: per kernel change, how many of its modelled
    rows (``specs``, one per row) the change affects, and what the older kernel did. Empty for a report of a
    newer build, or one without such rows."""
    if built_since_column(header):
        return []
    out = []
    for change in KERNEL_CHANGES:
        n = sum(1 for s in specs if change.affects(s))
        if n:
            out.append(f"{n} modelled rows may have run an older kernel than the model prices: the report has no "
                       f"{BUILD_COLUMN!r} column, which tt-metal writes since {BUILD_COLUMN_SINCE} ({BUILD_COLUMN_PR}), "
                       f"so an earlier build made it; before {change.merged} ({change.pr}) {change.older}")
    return out
