"""The report runner: run the sections, isolate their failures, write REPORT.md / results.json.

Every section is a module with the report contract

    report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> dict

returning {"markdown": str, "results": JSON-able dict, "figures": [PNG file names in out_dir]}.
The module is imported when its section runs, so a section whose module is missing (or raises,
or breaks the contract) is reported in its own place with the error and its traceback tail; the
other sections are still run and written, and ``main`` returns 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib
import json
import math
import os
import pathlib
import platform
import sys
import time
import traceback

from costmodel.overrides import add_set_argument, parse_overrides
from experiments.report.progress import Progress

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FAKE_CPU_DEVICES = 8  # the sharded attention rows run on a ('cube', 'pe') mesh of fake CPU devices
TRACEBACK_LINES = 12


@dataclasses.dataclass(frozen=True)
class Section:
    """One report section: ``key`` selects it on the command line; ``module`` holds ``report_section``."""

    key: str
    title: str
    module: str


SECTIONS: tuple[Section, ...] = (
    Section("golden", "Golden parity", "experiments.report.golden_parity"),
    Section("precision", "Device precision", "experiments.report.device_precision"),
    Section("blackhole", "Blackhole cost model", "experiments.blackhole_study"),
    Section("ahbm", "AHBM attention kernels", "experiments.ahbm_study"),
    Section("device", "Device parity", "device.parity"),
    Section("performance", "Performance of the references", "experiments.report.performance"),
)


def jsonable(obj, path: str = "results"):
    """``obj`` with numpy scalars / arrays made plain and non-finite floats made None.

    Raises TypeError naming the key path of anything that is not a number, string, bool, None,
    list or dict with string keys.
    """
    if isinstance(obj, dict):
        bad = [k for k in obj if not isinstance(k, str)]
        if bad:
            raise TypeError(f"{path}: keys must be strings, got {bad[0]!r}")
        return {k: jsonable(v, f"{path}.{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if hasattr(obj, "tolist") and type(obj).__module__.startswith("numpy"):
        return jsonable(obj.tolist(), path)
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    raise TypeError(f"{path}: {type(obj).__name__} is not JSON-serialisable (numbers / strings only)")


def check_result(res, out_dir: pathlib.Path) -> dict:
    """Validate a ``report_section`` return value; returns it with ``results`` made JSON-plain."""
    if not isinstance(res, dict) or not {"markdown", "results", "figures"} <= set(res):
        got = sorted(res) if isinstance(res, dict) else type(res).__name__
        raise TypeError(f"report_section must return a dict with markdown, results, figures; got {got}")
    if not isinstance(res["markdown"], str):
        raise TypeError(f"markdown must be a str, got {type(res['markdown']).__name__}")
    if not isinstance(res["results"], dict):
        raise TypeError(f"results must be a dict, got {type(res['results']).__name__}")
    figures = list(res["figures"])
    for name in figures:
        if not isinstance(name, str) or not inside(out_dir, name) or not name.endswith(".png"):
            raise ValueError(f"figure {name!r} must be a .png file name relative to the output folder")
        path = out_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"figure {name!r} listed by the section was not written to {out_dir}")
        with open(path, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                raise ValueError(f"figure {name!r} is not a PNG file")
    return {"markdown": res["markdown"], "results": jsonable(res["results"]), "figures": [str(n) for n in figures]}


def error_text(exc: BaseException, section: Section) -> str:
    """One line saying what failed; a missing section module is named as not built yet."""
    if isinstance(exc, ModuleNotFoundError) and exc.name and section.module.startswith(exc.name):
        return (f"not built yet: module `{section.module}` (its `report_section`) is not in this checkout "
                f"({type(exc).__name__}: {exc})")
    return f"{type(exc).__name__}: {exc}"


def run_section(section: Section, out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> dict:
    """Import the section's module, call ``report_section`` and check what it returns."""
    module = importlib.import_module(section.module)
    res = module.report_section(out_dir, quick=quick, overrides=dict(overrides))
    return check_result(res, out_dir)


def remove_previous(out_dir: pathlib.Path) -> None:
    """Delete what an earlier report wrote here (its files only), so nothing stale survives a rerun."""
    old = out_dir / "results.json"
    try:
        sections = json.loads(old.read_text())["sections"].values()
        stale = [out_dir / f for s in sections for f in s.get("figures", []) if inside(out_dir, f)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        stale = []
    for path in [*stale, old, out_dir / "REPORT.md"]:
        if path.is_file():
            path.unlink()


def inside(out_dir: pathlib.Path, name) -> bool:
    """True when ``out_dir / name`` stays inside ``out_dir`` (no absolute path, no '..')."""
    root = pathlib.Path(out_dir).resolve()
    return root in (root / name).resolve().parents


def run_report(out_dir: pathlib.Path, *, sections: tuple[Section, ...] | list[Section], quick: bool,
               overrides: dict[str, float], command: str = "python -m experiments.report") -> dict:
    """Run ``sections`` in order into ``out_dir``; write results.json and REPORT.md; return the payload."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_previous(out_dir)
    started = datetime.datetime.now(datetime.timezone.utc)
    progress = Progress([s.title for s in sections])
    done: dict[str, dict] = {}
    for i, section in enumerate(sections):
        progress.start(i, section.title)
        t0 = time.perf_counter()
        try:
            entry = {"status": "ok", **run_section(section, out_dir, quick=quick, overrides=overrides)}
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure stays in its section
            tb = traceback.format_exc().rstrip().splitlines()
            entry = {"status": "error", "error": error_text(exc, section),
                     "traceback_tail": "\n".join(tb[-TRACEBACK_LINES:]), "markdown": "", "results": {},
                     "figures": []}
        entry = {"number": i + 1, "title": section.title, "module": section.module,
                 "wall_s": round(time.perf_counter() - t0, 2), **entry}
        done[section.key] = entry
        progress.done(i, section.title, entry["status"], entry["wall_s"])
        free_memory()
    wall_s = progress.close()
    payload = {
        "report": {
            "command": command, "quick": quick, "overrides": overrides, "sections": [s.key for s in sections],
            "started_utc": started.isoformat(timespec="seconds"), "wall_s": round(wall_s, 1),
            "status": "ok" if all(e["status"] == "ok" for e in done.values()) else "error",
            "machine": machine_info(),
        },
        "sections": done,
    }
    (out_dir / "results.json").write_text(json.dumps(payload, indent=1, allow_nan=False) + "\n")
    (out_dir / "REPORT.md").write_text(render_markdown(payload))
    return payload


def free_memory() -> None:
    """Drop compiled executables and garbage between sections (a section's buffers die with it)."""
    gc.collect()
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


def machine_info() -> dict:
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        info.update(jax=jax.__version__, jax_backend=jax.default_backend(), jax_devices=jax.device_count())
    return info


def render_markdown(payload: dict) -> str:
    """REPORT.md: run line, a status table, then every section (or its error)."""
    rep, secs = payload["report"], payload["sections"]
    m = rep["machine"]
    lines = [
        "# alpamayo-bh report", "",
        f"`{rep['command']}` — {'quick' if rep['quick'] else 'default'} run started {rep['started_utc']}, "
        f"{rep['wall_s']:.0f} s on {m['cpu_cores']} CPU cores ({m['platform']}, Python {m['python']}"
        + (f", jax {m['jax']} {m['jax_backend']} x{m['jax_devices']}" if "jax" in m else "") + ").",
        ("Every number below was computed in this run; device numbers are quoted from the notes only where "
        "marked as such. No Blackhole chip was used unless the device-parity section says so."),
    ]
    if rep["overrides"]:
        lines.append("Hardware overrides: " + ", ".join(f"`{k}={v:g}`" for k, v in rep["overrides"].items()) + ".")
    lines += ["", "| # | section | status | time |", "|---|---|---|---|"]
    for key, e in secs.items():
        status = "ok" if e["status"] == "ok" else f"**failed** ({e['error'].split(':')[0]})"
        lines.append(f"| {e['number']} | [{e['title']}](#{e['number']}-{anchor(e['title'])}) (`{key}`) | "
                     f"{status.replace('|', '/')} | {e['wall_s']:.1f} s |")
    for e in secs.values():
        lines += ["", f"## {e['number']}. {e['title']}", ""]
        if e["status"] == "ok":
            lines.append(e["markdown"].rstrip())
        else:
            lines += [f"**This section failed**: {e['error']}", "", "Traceback (last lines):", "",
                      "```text", e["traceback_tail"], "```"]
    return "\n".join(lines) + "\n"


def anchor(title: str) -> str:
    """GitHub's heading anchor of a title (lower case, spaces to dashes, punctuation dropped)."""
    return "".join(c for c in title.lower().replace(" ", "-") if c.isalnum() or c == "-")


def use_fake_cpu_devices(n: int = FAKE_CPU_DEVICES) -> None:
    """Give JAX ``n`` CPU devices (must run before any JAX computation initialises the backend)."""
    import jax

    jax.config.update("jax_num_cpu_devices", n)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.report",
                                 description="The main job: write the project's report (Markdown, JSON, PNG plots).")
    ap.add_argument("--quick", action="store_true", help="small shapes everywhere (about 2 minutes)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("report"), help="output folder (default report/)")
    ap.add_argument("--sections", nargs="+", choices=[s.key for s in SECTIONS], default=None, metavar="NAME",
                    help="run only these sections, in report order: " + ", ".join(s.key for s in SECTIONS))
    add_set_argument(ap)
    args = ap.parse_args(argv)
    try:
        overrides = parse_overrides(args.overrides)
    except ValueError as exc:
        ap.error(str(exc))
    chosen = SECTIONS if args.sections is None else tuple(s for s in SECTIONS if s.key in args.sections)
    use_fake_cpu_devices()
    command = " ".join(["python -m experiments.report", *(sys.argv[1:] if argv is None else argv)])
    payload = run_report(args.out, sections=chosen, quick=args.quick, overrides=overrides, command=command)
    secs = payload["sections"]
    figures = sum(len(e["figures"]) for e in secs.values())
    print(f"\nreport: {args.out / 'REPORT.md'} (+ results.json, {figures} figures) in "
          f"{payload['report']['wall_s']:.0f} s")
    for key, e in secs.items():
        print(f"  {e['number']} {key:<12} {e['status']:<6} {e['wall_s']:7.1f} s"
              + ("" if e["status"] == "ok" else f"  {e['error']}"))
    failed = [k for k, e in secs.items() if e["status"] != "ok"]
    if failed:
        print(f"{len(failed)} section(s) failed: {', '.join(failed)} (see their entries in REPORT.md)")
    return 1 if failed else 0
