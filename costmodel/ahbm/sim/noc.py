"""Messages between PEs and CUBEs with contention: per-port and per-link SimPy resources.

* Inside a CUBE (PE IPCQ, a PE_DMA): a message holds the sender's IPCQ egress port and the
  receiver's ingress port for ``bytes / ipcq`` and lands ``dma_local_latency`` later.
* Between CUBEs (CUBE NOC): the CUBEs sit on the SIP's 2D mesh; a message is routed X then Y
  (dimension order, deadlock free) and holds, like a wormhole, the sender's egress, every
  directed link on its path and the receiver's ingress for ``bytes / noc`` plus the per-message
  transaction time; its head arrives ``dma_local_latency + hops x cube_hop_latency`` after the
  transfer started (the measured remote-CUBE DMA is the local one plus its hops). Messages that
  share a port or a link queue FIFO (``simpy.Resource``), which is the contention: eight PEs of
  one CUBE sending to the eight PEs of the partner CUBE in one all-reduce round serialise on the
  links between them.
"""

from __future__ import annotations

import simpy


class Noc:
    """Ports of ``num_pes`` PEs (P per CUBE) and the directed links of the CUBE mesh."""

    def __init__(self, env: simpy.Environment, rates, *, cube_xy: dict[int, tuple[int, int]], pes_per_cube: int):
        self.env, self.rates = env, rates
        self.cube_xy, self.P = cube_xy, pes_per_cube
        n = len(cube_xy) * pes_per_cube
        self.egress = [simpy.Resource(env, 1) for _ in range(n)]
        self.ingress = [simpy.Resource(env, 1) for _ in range(n)]
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

    def send(self, src_pe: int, dst_pe: int, nbytes: float, arrived: simpy.Event, *, cube_of=None):
        """Process: move ``nbytes`` from global PE ``src_pe`` to ``dst_pe``; ``arrived`` fires on landing."""
        env, rates = self.env, self.rates
        self.messages += 1
        ca, cb = (src_pe // self.P, dst_pe // self.P) if cube_of is None else cube_of
        held = [self.egress[src_pe]]
        if ca == cb:
            hold = nbytes / rates.ipcq_bytes_per_us
            lat = rates.dma_latency_us
            path = []
        else:
            path = self.route(ca, cb)
            held += [self._link(k) for k in path]
            hold = nbytes / rates.noc_bytes_per_us + rates.noc_transaction_us
            lat = rates.dma_latency_us + len(path) * rates.noc_hop_us
        held.append(self.ingress[dst_pe])
        reqs = []
        for res in held:  # acquired in path order: wormhole blocking, deadlock free under XY routing
            req = res.request()
            yield req
            reqs.append(req)
        start = env.now
        yield env.timeout(hold)
        for k in path:
            self.link_busy_us[k] += hold
        for res, req in zip(held, reqs):
            res.release(req)
        rest = start + lat + hold - env.now
        if rest > 0:
            yield env.timeout(rest)
        arrived.succeed()
