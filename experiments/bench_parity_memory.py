"""Peak resident memory and wall time of ``python -m device.parity --backend emulation``.

  python -m experiments.bench_parity_memory                       # tiny, then alpamayo_tt at 4 layers
  python -m experiments.bench_parity_memory --full                # + the default 64-layer alpamayo_tt run

Each run is a subprocess watched by polling ``/proc/<pid>/status`` (VmRSS of the process and its
children) every 0.2 s; a run above ``--limit-gb`` (default 7, the shared machine's safety margin) is
killed and reported as such. Prints one table row per run: preset, layers, peak RSS (GB), wall (s).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from experiments.report.render import md_table
from jaxref.validation import cli_main, positive_float


def _rss_kb(pid: int) -> int:
    """VmRSS of ``pid`` and all its descendants, kB (0 once gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(args: list[str], *, limit_gb: float) -> dict:
    """Run ``python -m device.parity --backend emulation ARGS`` under the watchdog."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "device.parity", "--backend", "emulation", "--out", os.path.join(out, "o"), *args]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        peak, killed = 0, False
        while proc.poll() is None:
            peak = max(peak, _rss_kb(proc.pid))
            if peak > limit_gb * 1024**2:
                proc.kill()
                killed = True
                break
            time.sleep(0.2)
        tail = proc.communicate()[0][-2000:]
        return {"args": " ".join(args), "peak_gb": peak / 1024**2, "wall_s": time.perf_counter() - t0,
                "rc": proc.returncode, "killed": killed, "tail": tail}


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_parity_memory",
                                 description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m experiments.bench_parity_memory --no-sample --limit-gb 4")
    ap.add_argument("--full", action="store_true", help="also the default 64-layer alpamayo_tt run")
    ap.add_argument("--limit-gb", type=positive_float, default=7.0, help="kill a run above this resident size")
    ap.add_argument("--no-sample", action="store_true", help="pass --no-sample to every run")
    return ap


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input is ``error: ...``, status 2."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(a: argparse.Namespace) -> int:
    extra = ["--no-sample"] if a.no_sample else []
    runs = [["--preset", "tiny"], ["--preset", "alpamayo_tt", "--num-layers", "4"]]
    if a.full:
        runs.append([])
    rows = []
    for r in runs:
        m = measure(r + extra, limit_gb=a.limit_gb)
        status = f"killed above {a.limit_gb} GB" if m["killed"] else str(m["rc"])
        rows.append([m["args"] or "default (alpamayo_tt, 64 layers)", f"{m['peak_gb']:.2f}", f"{m['wall_s']:.0f}", status])
        print(f"done: {rows[-1][0]} ({rows[-1][2]} s)", file=sys.stderr, flush=True)  # runs take minutes
        if m["rc"] not in (0, None) and not m["killed"]:
            print(m["tail"], file=sys.stderr)
    print(md_table(["run", "peak RSS (GB)", "wall (s)", "exit"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
