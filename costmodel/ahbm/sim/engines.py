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

    __slots__ = ("env", "free_at", "busy_us")

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
    """A PE's HBM: ``n`` pseudo-channels, each a FIFO server at ``bytes_per_us``. A transfer is
    address-interleaved over all channels at fine grain: each channel moves an equal share, and
    the data is usable ``latency_us`` after the last share ends (the access latency overlaps
    other transfers: only the transfer occupies a channel)."""

    def __init__(self, env: simpy.Environment, n: int, bytes_per_us: float, latency_us: float):
        self.env = env
        self.channels = [FifoServer(env) for _ in range(n)]
        self.bytes_per_us = bytes_per_us
        self.latency_us = latency_us
        self.bytes_moved = 0.0

    def transfer(self, nbytes: float, *, earliest: float | None = None) -> float:
        """Book a read or write of ``nbytes``; return the time its data is usable."""
        self.bytes_moved += nbytes
        share = nbytes / len(self.channels) / self.bytes_per_us
        return max(ch.reserve(share, earliest=earliest) for ch in self.channels) + self.latency_us


class PE:
    """One PE: HBM pseudo-channels, a GEMM and a MATH engine (FIFO servers) and counters.

    The kernel's CPU is the process that drives the PE (see ``tile_loop``); it is not a server.
    """

    def __init__(self, env: simpy.Environment, rates):
        self.env = env
        self.rates = rates
        self.hbm = Hbm(env, rates.pseudo_channels, rates.channel_bytes_per_us, rates.dma_latency_us)
        self.gemm = FifoServer(env)
        self.math = FifoServer(env)
        self.cpu_busy_us = 0.0

    def math_op(self, elems: float, *, earliest: float | None = None) -> float:
        """Book one element-wise / reduction op over ``elems`` elements on MATH; its end time."""
        return self.math.reserve(elems / self.rates.math_elems_per_us, earliest=earliest)

    def issue(self, kind: str):
        """The CPU's issue cost of one op of ``kind`` ('composite' | 'ex_composite' | 'primitive' |
        'send' | 'recv'), as a timeout (None when free)."""
        c = self.rates.issue_us[kind]
        self.cpu_busy_us += c
        return self.env.timeout(c) if c else None
