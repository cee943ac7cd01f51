"""Engines of one AHBM PE for the event simulation: FIFO servers, pseudo-channels, the DMA.

Every engine here is a non-preemptive FIFO server (a GEMM engine, a MATH engine, one HBM
pseudo-channel). ``FifoServer.reserve`` books the next service slot at request time: start =
max(now, previous end), end = start + service. For a FIFO server whose customers hold it for a
known time once granted, that booking gives exactly the grant / release times of a
``simpy.Resource(capacity=1)`` served in request order (``tests/test_ahbm_simulate.py`` checks
the two equal on random request streams) at the cost of one event per request instead of three.
Times are microseconds.
"""

from __future__ import annotations

import simpy


class FifoServer:
    """One non-preemptive FIFO server (capacity 1) booked by reservation."""

    __slots__ = ("busy_us", "env", "free_at")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.free_at = 0.0
        self.busy_us = 0.0

    def reserve(self, service_us: float, *, earliest: float | None = None) -> float:
        """Book ``service_us`` of service, starting no earlier than now (or ``earliest``, a time
        >= now at which the request's inputs are ready); return the end time."""
        t = self.env.now if earliest is None else max(self.env.now, earliest)
        start = max(t, self.free_at)
        self.free_at = start + service_us
        self.busy_us += service_us
        return self.free_at

    def until(self, t: float):
        """A timeout event firing at absolute time ``t`` (>= now)."""
        return self.env.timeout(max(t - self.env.now, 0.0))


class Hbm:
    """A PE's HBM: ``n`` pseudo-channels, each a FIFO server at ``bytes_per_us``. A PE's data is
    interleaved over the channels in ``interleave`` byte chunks (chunk i on channel i mod n; DMA
    buffers start on channel 0), so a transfer's chunks are served by their channels in parallel;
    its data is usable ``latency_us`` after the last chunk (the access latency overlaps other
    transfers: only the transfer occupies a channel)."""

    def __init__(self, env: simpy.Environment, n: int, bytes_per_us: float, latency_us: float,
                 interleave: float):
        self.env = env
        self.channels = [FifoServer(env) for _ in range(n)]
        self.bytes_per_us = bytes_per_us
        self.latency_us = latency_us
        self.interleave = interleave
        self.bytes_moved = 0.0

    def transfer(self, nbytes: float, *, earliest: float | None = None) -> float:
        """Book a read or write of ``nbytes``; return the time its data is usable."""
        self.bytes_moved += nbytes
        n = len(self.channels)
        full, rest = divmod(nbytes, self.interleave)
        rounds, extra = divmod(int(full), n)
        end = self.env.now
        for i, ch in enumerate(self.channels):
            share = (rounds + (i < extra)) * self.interleave + (rest if i == extra else 0.0)
            if share:
                end = max(end, ch.reserve(share / self.bytes_per_us, earliest=earliest))
        return end + self.latency_us


class PE:
    """One PE: HBM pseudo-channels, the TCM port, a GEMM and a MATH engine (FIFO servers).

    The kernel's CPU is the process that drives the PE (see ``tile_loop``); it is not a server.
    """

    def __init__(self, env: simpy.Environment, rates):
        self.env = env
        self.rates = rates
        self.hbm = Hbm(env, rates.pseudo_channels, rates.channel_bytes_per_us, rates.dma_latency_us,
                       rates.interleave_bytes)
        self.tcm = FifoServer(env)  # the TCM port: composite write-back, operand reads from TCM
        self.gemm = FifoServer(env)
        self.accumulator = simpy.Resource(env, 1)  # the GEMM engine's output accumulators (see composite)
        self.math = FifoServer(env)
        self.cpu_busy_us = 0.0
        self.last_composite = None  # the composite issued last (gemm_order='issue')

    def math_op(self, elems: float, *, earliest: float | None = None) -> float:
        """Book one element-wise / reduction op over ``elems`` elements on MATH; its end time."""
        return self.math.reserve(elems / self.rates.math_elems_per_us, earliest=earliest)

    def tcm_io(self, nbytes: float, *, earliest: float | None = None) -> float:
        """Book ``nbytes`` through the TCM port; its end time."""
        return self.tcm.reserve(nbytes / self.rates.tcm_bytes_per_us, earliest=earliest)

    def issue(self, kind: str):
        """The CPU's issue cost of one op of ``kind`` ('composite' | 'ex_composite' | 'primitive' |
        'send' | 'recv'), as a timeout (None when free)."""
        c = self.rates.issue_us[kind]
        self.cpu_busy_us += c
        return self.env.timeout(c) if c else None
