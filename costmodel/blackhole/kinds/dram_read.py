"""A read-only DRAM stream (the DRAM microbenchmark's rows): the spec and its price (``ops.read_us``,
the building block of every op's reads). No op code: a microbenchmark is not a ttnn op."""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.ops import (
    barrier_read_us,
    read_us,
)
from costmodel.blackhole.params import FitParams
from costmodel.hardware import Blackhole
from costmodel.smooth import Relax


@dataclasses.dataclass(frozen=True)
class DramReadSpec:
    """A read-only DRAM stream (microbenchmark): ``readers`` cores each read ``total_bytes / readers``
    in pages of ``page_bytes``; the shared building block ``ops.read_us`` of every op kind's reads.

    ``pages_per_barrier``: None, the reader keeps reads in flight (double-buffered: the round trip is
    hidden); n, it issues n pages and waits for them, so each group of n pages costs the overlap of a
    DRAM round trip and their read, the same block cost as a matmul reader's (``ops.overlap``)."""

    readers: int
    total_bytes: float
    page_bytes: float
    pages_per_barrier: int | None = None
    op_class = "dram_read"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        per_reader = self.total_bytes / self.readers
        pages = per_reader / self.page_bytes
        if self.pages_per_barrier is None:
            return read_us(hw, fit, pages, per_reader, self.readers, relax=relax)
        return barrier_read_us(hw, fit, pages, per_reader, self.readers, groups=pages / self.pages_per_barrier,
                               relax=relax)


OP_CLASSES: dict[str, tuple[str, ...]] = {}
SPECS = (DramReadSpec,)


def cores(spec: DramReadSpec, hw: Blackhole) -> int:
    """The readers."""
    return int(spec.readers)
