"""Peak resident memory and wall time of ``python -m device.parity --backend emulation``.

  python -m experiments.bench_parity_memory                       # tiny, then alpamayo_tt at 4 layers
  python -m experiments.bench_parity_memory --full                # + the default 64-layer alpamayo_tt run
  python -m experiments.bench_parity_memory --full --before /tmp/old-checkout   # old vs new, back to back
  python -m experiments.bench_parity_memory --checkpoint-layers 8,16   # only --checkpoint runs on generated files

Each run is a subprocess watched by polling ``/proc/<pid>/status`` of the process and its children
every 0.2 s; a run above ``--limit-gb`` (default 7, the shared machine's safety margin) is killed and
reported as such, as is a run past ``--timeout-s`` (a stalled child fails the row, not the
benchmark). Prints one table row per run: preset, layers, peak resident size (GB) as the kernel
keeps it (VmHWM, the largest seen) and as sampled, split into its anonymous part (RssAnon: heap,
arrays) and its file-backed part (RssFile: mapped files, e.g. an mmap'd checkpoint's touched
pages, which the kernel may drop under pressure), each the largest sample, and wall (s).
``--before DIR`` runs each case first with ``DIR`` (another checkout of the project) on
``PYTHONPATH``, then with this one, and adds the wall-time ratio of the pair (measured back to back:
on a shared machine the ratio is steadier than either time) and whether the per-layer PCCs of the
two ``parity.json`` files are identical. ``--checkpoint-layers`` writes an alpamayo_tt-width
checkpoint of each depth (random, float32) and runs ``--checkpoint`` on it (one layer compared, no
sample): peak RSS flat in the depth is what the streaming reader promises.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from experiments.report.render import md_table
from jaxref.validation import cli_main, positive_float

MEMORY_FIELDS = ("VmRSS", "RssAnon", "RssFile", "VmHWM")  # /proc/<pid>/status lines, kB


def memory_kb(pid: int) -> dict[str, int]:
    """``MEMORY_FIELDS`` of ``pid``, each summed over it and all its descendants, kB (0 once gone).
    VmRSS = RssAnon + RssFile + RssShmem; VmHWM is the kernel's peak VmRSS of each process."""
    total, todo = dict.fromkeys(MEMORY_FIELDS, 0), [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    key = line.split(":", 1)[0]
                    if key in total:
                        total[key] += int(line.split()[1])
            with open(f"/proc/{p}/task/{p}/children") as f:
                todo += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def measure(args: list[str], *, limit_gb: float, timeout_s: float = 3600.0, root: str | None = None) -> dict:
    """Run ``python -m device.parity --backend emulation ARGS`` under the watchdog (``root``: the checkout
    on PYTHONPATH and the working directory; default: this process's)."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "device.parity", "--backend", "emulation", "--out", os.path.join(out, "o"), *args]
        env = os.environ | ({"PYTHONPATH": root} if root else {})
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                cwd=root or None)
        peak, killed = dict.fromkeys(MEMORY_FIELDS, 0), None  # killed: None, or why: "memory" | "time"
        while proc.poll() is None:
            peak = {k: max(v, n) for (k, v), n in zip(peak.items(), memory_kb(proc.pid).values(), strict=True)}
            over = ("memory" if peak["VmRSS"] > limit_gb * 1024**2
                    else "time" if time.perf_counter() - t0 > timeout_s else None)
            if over:
                proc.kill()
                killed = over
                break
            time.sleep(0.2)
        tail = proc.communicate()[0][-2000:]
        wall = time.perf_counter() - t0
        res_path = os.path.join(out, "o", "parity.json")
        layers = None
        if os.path.exists(res_path):
            with open(res_path) as f:
                layers = [(x["layer"], x["vs_fp32"]["pcc"], x["vs_device_golden"]["pcc"]) for x in json.load(f)["layers"]]
        return {"args": " ".join(args), "peak_gb": {k: v / 1024**2 for k, v in peak.items()}, "wall_s": wall,
                "rc": proc.returncode, "killed": killed, "tail": tail, "layers": layers}


def write_checkpoint(path: str, num_layers: int) -> None:
    """A random alpamayo_tt-width checkpoint of ``num_layers`` layers (float32, HF names)."""
    import jax

    from jaxref.config import ExpertConfig
    from jaxref.weights import init_params, save_safetensors

    cfg = ExpertConfig.alpamayo_tt(num_layers=num_layers)
    save_safetensors(path, init_params(jax.random.PRNGKey(0), cfg), cfg)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_parity_memory",
                                 description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m experiments.bench_parity_memory --no-sample --limit-gb 4")
    ap.add_argument("--full", action="store_true", help="also the default 64-layer alpamayo_tt run")
    ap.add_argument("--only-full", action="store_true", help="only the default 64-layer alpamayo_tt run")
    ap.add_argument("--limit-gb", type=positive_float, default=7.0, help="kill a run above this resident size")
    ap.add_argument("--timeout-s", type=positive_float, default=3600.0, help="kill a run after this many seconds")
    ap.add_argument("--no-sample", action="store_true", help="pass --no-sample to every run")
    ap.add_argument("--before", default=None, help="another checkout: run each case with it first (old vs new)")
    ap.add_argument("--checkpoint-layers", default=None, help="e.g. 8,16: --checkpoint runs at these depths")
    return ap


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input is ``error: ...``, status 2."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(a: argparse.Namespace) -> int:
    extra = ["--no-sample"] if a.no_sample else []
    # --checkpoint-layers alone: only its runs (each is minutes)
    runs = [] if a.only_full or a.checkpoint_layers else [["--preset", "tiny"], ["--preset", "alpamayo_tt", "--num-layers", "4"]]
    if a.full or a.only_full:
        runs.append([])
    rows = []
    tmp = tempfile.TemporaryDirectory()
    for n in ([int(x) for x in a.checkpoint_layers.split(",")] if a.checkpoint_layers else []):
        path = os.path.join(tmp.name, f"L{n}.safetensors")
        write_checkpoint(path, n)
        runs.append(["--preset", "alpamayo_tt", "--num-layers", str(n), "--checkpoint", path, "--layers", "0"]
                    + ([] if a.no_sample else ["--no-sample"]))  # --no-sample once (``extra`` may add it)
    for r in runs:
        pair = [("before", a.before), ("after", None)] if a.before else [("", None)]
        got = {}
        for label, root in pair:
            m = got[label] = measure(r + extra, limit_gb=a.limit_gb, timeout_s=a.timeout_s, root=root)
            status = {"memory": f"killed above {a.limit_gb} GB",
                      "time": f"killed after {a.timeout_s:g} s"}.get(m["killed"], str(m["rc"]))
            name = (m["args"] or "default (alpamayo_tt, 64 layers)").replace(tmp.name + "/", "")
            gb = m["peak_gb"]
            rows.append([name, label or "-", f"{gb['VmHWM']:.2f}", f"{gb['VmRSS']:.2f}", f"{gb['RssAnon']:.2f}",
                         f"{gb['RssFile']:.2f}", f"{m['wall_s']:.0f}", status, "-", "-"])
            print(f"done: {name} {label} ({rows[-1][6]} s)", file=sys.stderr, flush=True)  # runs take minutes
            if m["rc"] not in (0, None) and not m["killed"]:
                print(m["tail"], file=sys.stderr)
        if a.before:
            b, n = got["before"], got["after"]
            rows[-1][8] = f"{b['wall_s'] / n['wall_s']:.2f}"
            rows[-1][9] = "identical" if b["layers"] == n["layers"] else f"DIFFER: {b['layers']} vs {n['layers']}"
    tmp.cleanup()
    print(md_table(["run", "code", "peak RSS, VmHWM (GB)", "peak RSS, sampled (GB)", "peak RssAnon (GB)",
                    "peak RssFile (GB)", "wall (s)", "exit", "before / after wall", "per-layer PCCs"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
