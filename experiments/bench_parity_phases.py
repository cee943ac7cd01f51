"""Where the time of ``python -m device.parity --backend emulation`` goes, phase by phase.

  python -m experiments.bench_parity_phases                          # the default 64-layer run
  python -m experiments.bench_parity_phases --num-layers 4 --out /tmp/p4   # any device.parity arguments
  python -m experiments.bench_parity_phases --one-at-a-time           # each phase alone: its own CPU

Runs ``device.parity.run`` in this process on the emulation (the arguments are ``device.parity``'s,
``--backend emulation`` implied) with an ``experiments.timing.PhaseClock`` and prints wall and
process-CPU seconds per phase, the total and the peak resident size (``ru_maxrss``), then writes
``parity.json`` (without the timings) into ``--out`` as the parity script does, so two runs'
numbers can be compared file to file. The golden's phases and the op report's run in threads beside
the graph's ("device: ...") phases: their walls overlap, and a phase's CPU seconds are the whole
process's over its wall (every thread's), so only the total's CPU is a sum of work. With
``--one-at-a-time`` every phase runs alone (``device.parity.run(overlap=False)``: the same numbers),
so each row's CPU is that phase's own; the total's wall is then the sum of the phases'.
"""

from __future__ import annotations

import resource
import sys
import time

from device import parity
from device.emulation import Emulation
from experiments.report.render import md_table
from experiments.timing import PhaseClock
from jaxref.validation import atomic_write_text, dumps_strict


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overlap = "--one-at-a-time" not in argv
    a = parity.parse_args(["--backend", "emulation", *(x for x in argv if x != "--one-at-a-time")])
    p = parity.problem_from_args(a)
    ns = Emulation()
    device = ns.open_device(0)
    a.out.mkdir(parents=True, exist_ok=True)
    clock = PhaseClock()
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        res = parity.run(p, ns, device, backend="emulation", out_dir=a.out, clock=clock, overlap=overlap)
    finally:
        ns.close_device(device)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    rows = [[name, f"{w:.1f}", f"{c:.1f}"] for name, (w, c) in clock.phases.items()]
    rows.append(["total", f"{wall:.1f}", f"{cpu:.1f}"])
    print(md_table(["phase", "wall (s)", "CPU (s)"], rows))
    print(f"peak RSS (ru_maxrss): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2:.2f} GB; "
          f"fast twin compilations: {res.get('compilations')}")
    atomic_write_text(a.out / "parity.json", dumps_strict(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
