"""Messages between PEs and CUBEs with contention: per-port and per-link SimPy resources.

* Inside a CUBE (PE IPCQ, a PE_DMA; ``AHBM.ipcq_bytes_per_s``): a message holds the sender PE's tx
  port and the receiver PE's rx port for payload / rate and lands ``dma_local_latency_s`` after.
* Between CUBEs (CUBE NOC; ``AHBM.cube_noc_bytes_per_s``): CUBEs sit on the SIP's 2D mesh; a
  message is routed X (columns) then Y (rows) and holds, cut-through, the sending CUBE's injection
  port, every directed link of its route and the receiving CUBE's ejection port (a CUBE's PEs
  share one of each) for payload / rate; it lands ``cube_noc_transaction_s + hops x
  cube_hop_latency_s`` after. The resources are taken in route order (injection, links, ejection),
  which cannot deadlock under dimension-ordered routing.

Every port and link is a ``simpy.Resource`` (FIFO): messages that share one queue, which is the
contention. Eight PEs of a CUBE sending to the eight PEs of the partner CUBE in one all-reduce
round serialise on the injection port, the links and the ejection port.

Ports and links are arbitrated per packet, not per message: a message moves as packets of
``PACKET_BYTES`` (at most ``MAX_PACKETS`` of them), each taking the route's resources in turn
(``transfer``), so messages that share a port interleave. A network that held a port for a whole
multi-MB DMA would make a small message wait behind a large one for the large one's whole
transfer (a 4 MB all-gather chunk holds a CUBE NOC port for ~10 us); no NoC arbitrates at that
grain. Real packets are a few KB; the two constants set
the simulation's arbitration grain, chosen to bound its event count, and
``tests/test_ahbm_layer.py`` checks that an 8x finer grain moves the simulated collectives by < 3%.
"""

from __future__ import annotations

import math

import simpy

# the arbitration grain (see the module docstring): a resolution of the simulation, not a hardware rate
PACKET_BYTES = 64 * 1024
MAX_PACKETS = 64


def packets(nbytes: float) -> list[float]:
    """Equal packet sizes (bytes) of an ``nbytes`` message: ``PACKET_BYTES`` each, or
    ``MAX_PACKETS`` of them when that is more (a message never waits behind more than 1 / 64 of
    another's transfer, and a 4 GB prefill chunk stays 64 events)."""
    n = min(max(1, math.ceil(nbytes / PACKET_BYTES)), MAX_PACKETS)
    return [nbytes / n] * n


def transfer(env: simpy.Environment, held: list, nbytes: float, bytes_per_us: float):
    """Process body: move ``nbytes`` through the FIFO resources ``held`` (a route's ports and links,
    taken in order) packet by packet, each packet holding all of them for its bytes / rate."""
    for size in packets(nbytes):
        reqs = []
        for res in held:
            req = res.request()
            yield req
            reqs.append(req)
        yield env.timeout(size / bytes_per_us)
        for res, req in zip(held, reqs):
            res.release(req)


class Noc:
    """IPCQ ports of the PEs (``pes_per_cube`` per CUBE) and the CUBE NOC of the CUBEs at ``cube_xy``."""

    def __init__(self, env: simpy.Environment, rates, *, cube_xy: dict[int, tuple[int, int]], pes_per_cube: int):
        self.env, self.rates = env, rates
        self.cube_xy, self.P = cube_xy, pes_per_cube
        n = len(cube_xy) * pes_per_cube
        self.tx = [simpy.Resource(env, 1) for _ in range(n)]
        self.rx = [simpy.Resource(env, 1) for _ in range(n)]
        self.inject = {c: simpy.Resource(env, 1) for c in cube_xy}
        self.eject = {c: simpy.Resource(env, 1) for c in cube_xy}
        self.links: dict[tuple, simpy.Resource] = {}
        self.link_busy_us: dict[tuple, float] = {}
        self.messages = 0

    def route(self, cube_a: int, cube_b: int) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Directed mesh links from CUBE a to CUBE b, X (column) first, then Y (row)."""
        (ra, ca), (rb, cb) = self.cube_xy[cube_a], self.cube_xy[cube_b]
        path, r, c = [], ra, ca
        while c != cb:
            nc = c + (1 if cb > c else -1)
            path.append(((r, c), (r, nc)))
            c = nc
        while r != rb:
            nr = r + (1 if rb > r else -1)
            path.append(((r, c), (nr, c)))
            r = nr
        return path

    def _link(self, key):
        if key not in self.links:
            self.links[key] = simpy.Resource(self.env, 1)
            self.link_busy_us[key] = 0.0
        return self.links[key]

    def send(self, src_pe: int, dst_pe: int, nbytes: float, arrived: simpy.Event, left: simpy.Event | None = None):
        """Process: move ``nbytes`` from PE ``src_pe`` to PE ``dst_pe`` (global ids, CUBE = id // P);
        ``left`` fires when its transfer ends (the sender's buffer is free), ``arrived`` when it lands."""
        env, rates = self.env, self.rates
        self.messages += 1
        ca, cb = src_pe // self.P, dst_pe // self.P
        if ca == cb:
            held, path = [self.tx[src_pe], self.rx[dst_pe]], []
            rate, lat = rates.ipcq_bytes_per_us, rates.dma_latency_us
        else:
            path = self.route(ca, cb)
            held = [self.inject[ca]] + [self._link(k) for k in path] + [self.eject[cb]]
            rate = rates.noc_bytes_per_us
            lat = rates.noc_transaction_us + len(path) * rates.noc_hop_us
        yield from transfer(env, held, nbytes, rate)
        for k in path:
            self.link_busy_us[k] += nbytes / rate
        if left is not None:
            left.succeed()
        yield env.timeout(lat)
        arrived.succeed()
