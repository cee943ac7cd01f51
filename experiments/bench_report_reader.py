"""Seconds and peak memory to read and classify 10^4 - 10^6 op-report rows (issue 30 benchmark).

    python -m experiments.bench_report_reader [--rows 10000 100000 1000000] [--source FILE] [--unique]

A report of N rows is made by cycling the data rows of a template report (``--source``: default
the real CLIP-encoder Blackhole report in ``../shared/data/profiler_reports`` when it is there, else
the port's own emitted layer report), with GLOBAL CALL COUNT renumbered, as a real multi-layer,
multi-iteration capture repeats its ops. ``--unique`` appends a distinct dummy attribute to every
row so that no two rows share a signature: the reader's per-signature cache never hits (its worst
case).

Each size is read in a fresh process (so the peak RSS is that read's): ours
(``costmodel.blackhole.report_reader.read_report``, read and classify) and, side by side on the same
file, tt-perf-report's own reader (``tt_perf_report.perf_report.merge_perf_traces``: pandas
``read_csv`` of the whole file, no classification). Printed: median seconds over ``--reps`` runs,
peak RSS above the process's RSS after its imports, and ours / tt-perf-report's.
"""

from __future__ import annotations

import argparse
import csv
import json
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

from experiments.report.render import format_table
from jaxref.validation import cli_main, positive_int

SHARED_REPORT = (pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "profiler_reports"
                 / "bh_64_clip_encoder_1.csv")


def port_report(path: pathlib.Path) -> pathlib.Path:
    """The port's one-layer report as the model emits it (``python -m costmodel.blackhole --emit-csv``)."""
    subprocess.run([sys.executable, "-m", "costmodel.blackhole", "--emit-csv", str(path), "--json"],
                   stdout=subprocess.DEVNULL, check=True)
    return path


def make_report(template: pathlib.Path, rows: int, out: pathlib.Path, *, unique: bool) -> int:
    """Write ``rows`` data rows cycled from ``template`` to ``out``; returns the file's bytes."""
    with template.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.reader(f)
        header = next(reader)
        data = [r for r in reader if any(c.strip() for c in r)]
    call, attrs = header.index("GLOBAL CALL COUNT"), header.index("ATTRIBUTES")
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i in range(rows):
            r = list(data[i % len(data)])
            r[call] = str(i + 1)
            if unique:
                r[attrs] = r[attrs].rstrip("}") + f"; 'bench_row': '{i}'}}"
            w.writerow(r)
    return out.stat().st_size


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker(reader: str, path: str) -> dict:
    """One read in this process: seconds, peak RSS above the post-import RSS, rows and modelled rows."""
    if reader == "ours":
        from costmodel.blackhole.report_reader import MODELLED, read_report

        def run():
            rep = read_report(path)
            return len(rep.rows), sum(r.status == MODELLED for r in rep.rows)
    else:
        from tt_perf_report.perf_report import merge_perf_traces

        def run():
            return len(merge_perf_traces([path])), None
    base = _rss_mb()
    t0 = time.perf_counter()
    n, modelled = run()
    return {"seconds": time.perf_counter() - t0, "peak_mb": _rss_mb() - base, "rows": n, "modelled": modelled}


def measure(path: pathlib.Path, reader: str, reps: int) -> dict:
    runs = []
    for _ in range(reps):
        res = subprocess.run([sys.executable, "-m", "experiments.bench_report_reader", "--worker", reader, str(path)],
                             capture_output=True, text=True, check=False)
        if res.returncode != 0:
            raise RuntimeError(f"{reader} reader on {path}: exit {res.returncode}\n{res.stderr[-2000:]}")
        runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
    return {"seconds": statistics.median(r["seconds"] for r in runs), "peak_mb": max(r["peak_mb"] for r in runs),
            "rows": runs[0]["rows"], "modelled": runs[0]["modelled"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments.bench_report_reader", description=__doc__.split("\n")[0],
                                epilog="example: python -m experiments.bench_report_reader --rows 10000 100000")
    p.add_argument("--rows", type=positive_int, nargs="+", default=[10_000, 100_000, 1_000_000])
    p.add_argument("--source", type=pathlib.Path, default=None, help="template op report (default: see above)")
    p.add_argument("--unique", action="store_true", help="no two rows alike (the classification cache never hits)")
    p.add_argument("--reps", type=positive_int, default=1, help="runs per size and reader (median seconds)")
    p.add_argument("--no-reference", action="store_true", help="skip tt-perf-report's reader")
    p.add_argument("--worker", nargs=2, metavar=("READER", "FILE"), help=argparse.SUPPRESS)

    def body(args) -> int:
        if args.worker:
            print(json.dumps(worker(*args.worker)))
            return 0
        with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
            tmp = pathlib.Path(tmp)
            source = args.source or (SHARED_REPORT if SHARED_REPORT.is_file() else port_report(tmp / "port.csv"))
            if not source.is_file():
                raise ValueError(f"--source={str(source)!r}: no such file; expected an ops_perf_results CSV")
            print(f"template: {source}{' (every row made unique)' if args.unique else ''}")
            table = []
            for n in args.rows:
                path = tmp / f"ops_{n}.csv"
                size = make_report(source, n, path, unique=args.unique)
                ours = measure(path, "ours", args.reps)
                ref = None if args.no_reference else measure(path, "tt-perf-report", args.reps)
                table.append([f"{n:,}", f"{size / 2**20:,.0f}", f"{ours['seconds']:.2f}", f"{ours['peak_mb']:,.0f}",
                              f"{ours['modelled']:,}",
                              "-" if ref is None else f"{ref['seconds']:.2f}",
                              "-" if ref is None else f"{ref['peak_mb']:,.0f}",
                              "-" if ref is None else f"{ours['seconds'] / ref['seconds']:.2f}"])
                path.unlink()
            print(format_table(["rows", "file MiB", "ours s", "ours peak MiB", "modelled", "tt-perf-report s",
                                "tt-perf-report peak MiB", "ours / tt-perf-report"], table))
        return 0

    return cli_main(p, argv, body)


if __name__ == "__main__":
    sys.exit(main())
