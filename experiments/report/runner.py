"""The report runner: run the sections, isolate their failures, write REPORT.md / results.json.

Every section is a module with the report contract

    report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult

returning ``experiments.report.render.SectionResult(markdown, results, figures)``: its text, JSON-able numbers
(finite: a NaN in the results fails the section, ``jaxref.validation.json_plain``) and the PNG file names it
wrote into out_dir, checked here (``check_result``) and nowhere else. The sections live in
``experiments.report.sections`` (one module each); ``SECTIONS`` below is the one table of them.
The module is imported when its section runs, so a section whose module is missing (or raises,
or breaks the contract) is reported in its own place with the error and its traceback tail; the
other sections are still run and written, and ``main`` returns 1. SIGINT and SIGTERM stop the run the
same way: the finished sections are kept (``keep_partial``), the previous report is not touched.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import fcntl
import gc
import importlib
import json
import os
import pathlib
import platform
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import types

from costmodel.overrides import add_set_argument, parse_overrides
from experiments.report.progress import Progress
from experiments.report.render import SectionResult, md_table
from jaxref.validation import cli_main, dumps_strict, json_plain, output_dir, writable_output

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
    Section("golden", "Golden parity", "experiments.report.sections.golden_parity"),
    Section("precision", "Device precision", "experiments.report.sections.device_precision"),
    Section("blackhole", "Blackhole cost model", "experiments.report.sections.blackhole"),
    Section("ahbm", "AHBM attention kernels", "experiments.report.sections.ahbm"),
    Section("device", "Device parity", "experiments.report.sections.device_parity"),
    Section("performance", "Performance of the references", "experiments.report.sections.performance"),
)


def check_result(res, out_dir: pathlib.Path) -> dict:
    """Validate a ``report_section`` return value (a ``SectionResult``: its fields' types are checked when
    it is made); returns the results.json entry, ``results`` made JSON-plain."""
    if not isinstance(res, SectionResult):
        raise TypeError(f"report_section must return a experiments.report.render.SectionResult; got {type(res).__name__}")
    for name in res.figures:
        if not isinstance(name, str) or not inside(out_dir, name) or not name.endswith(".png"):
            raise ValueError(f"figure {name!r} must be a .png file name relative to the output folder")
        path = out_dir / name
        if not path.is_file():
            raise FileNotFoundError(f"figure {name!r} listed by the section was not written to {out_dir}")
        with open(path, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                raise ValueError(f"figure {name!r} is not a PNG file")
    return {"markdown": res.markdown, "results": json_plain(dict(res.results), "results"), "figures": list(res.figures)}


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


LOCK_NAME = ".report.lock"
REPORT_FILES = ("REPORT.md", "results.json")  # results.json moved last: its presence marks a finished report


class ReportBusy(ValueError):
    """Another run holds the lock of the output folder."""


class Interrupted(Exception):
    """The run was interrupted (SIGINT or SIGTERM); the message says what was kept where."""


@contextlib.contextmanager
def locked(out_dir: pathlib.Path):
    """Hold an exclusive lock on ``out_dir/.report.lock`` for the run (the kernel drops it if the process dies)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(out_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise ReportBusy(f"--out {out_dir}: another report run (pid {holder}) is writing into this folder; "
                             "expected one run per folder (wait for it to finish or choose another --out)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        remove_stale_partials(out_dir)
        yield
    finally:
        os.close(fd)


def partial_prefix(out_dir: pathlib.Path) -> str:
    """Name prefix of the temporary folders a run into ``out_dir`` writes its sections into (next to it)."""
    return f".{out_dir.name}.partial-"


def remove_stale_partials(out_dir: pathlib.Path) -> None:
    """Remove the temporary folders of earlier runs into ``out_dir`` that died without cleaning up (SIGKILL,
    a power cut): called under the folder's lock, so no live run is writing into them; a killed run wrote
    no report there (its sections are finished only in results.json, written at the end or on interrupt)."""
    for path in out_dir.parent.glob(partial_prefix(out_dir) + "*"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


def previous_figures(out_dir: pathlib.Path) -> list[pathlib.Path]:
    """The PNGs an earlier report in ``out_dir`` listed (its own figures: ``.png`` names inside the folder,
    regular files); anything else its results.json names (a user's notes, data, folders) is not ours."""
    try:
        sections = json.loads((out_dir / "results.json").read_text())["sections"].values()
        names = [f for s in sections for f in s.get("figures", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return []
    return [out_dir / f for f in names if isinstance(f, str) and f.endswith(".png") and inside(out_dir, f)
            and (out_dir / f).is_file() and not (out_dir / f).is_symlink()]


def write_report_files(folder: pathlib.Path, payload: dict) -> None:
    """results.json (strict JSON) and REPORT.md of ``payload`` into ``folder``."""
    (folder / "results.json").write_text(dumps_strict(payload, indent=1) + "\n")
    (folder / "REPORT.md").write_text(render_markdown(payload))


def figures_of(payload: dict) -> list[str]:
    return [f for e in payload["sections"].values() for f in e["figures"]]


def commit(tmp: pathlib.Path, out_dir: pathlib.Path, payload: dict) -> None:
    """Move the finished report from ``tmp`` into ``out_dir``, then drop the previous report's own figures
    that the new one does not have. SIGINT / SIGTERM wait until the files are in place."""
    blocked = {signal.SIGINT, signal.SIGTERM}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        stale = previous_figures(out_dir)
        new = figures_of(payload)
        for name in [*new, *REPORT_FILES]:
            (out_dir / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp / name, out_dir / name)
        keep = {(out_dir / n).resolve() for n in new}
        for path in stale:
            if path.resolve() not in keep:
                path.unlink(missing_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def keep_partial(tmp: pathlib.Path, out_dir: pathlib.Path, payload: dict, stopped: str) -> str:
    """After an interrupt (``stopped``: "in section 'x'"): keep the finished sections, never touching a
    previous report; returns the one line that says where they are."""
    done = [k for k in payload["sections"]]
    listed = {(tmp / n).resolve() for n in [*figures_of(payload), *REPORT_FILES]}
    for path in sorted(tmp.rglob("*"), reverse=True):  # the unfinished section's files
        if path.is_file() and path.resolve() not in listed:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    if not done:
        shutil.rmtree(tmp, ignore_errors=True)
        where = "nothing was written"
        return f"interrupted {stopped} before any section finished: {where}; " + (
            f"the previous report in {out_dir} is unchanged" if (out_dir / "results.json").is_file() else
            f"{out_dir} has no report")
    if not (out_dir / "results.json").is_file():  # no earlier report to protect: the partial one goes in place
        commit(tmp, out_dir, payload)
        return (f"interrupted {stopped}: the {len(done)} finished section(s) "
                f"({', '.join(done)}) are in {out_dir / 'REPORT.md'}")
    stamp = datetime.datetime.now().strftime("%Y%m%dT%H%M%S")
    kept = out_dir.parent / f"{out_dir.name}.interrupted-{stamp}"
    tmp.rename(kept)
    return (f"interrupted {stopped}: the previous report in {out_dir} is unchanged; the "
            f"{len(done)} finished section(s) of this run ({', '.join(done)}) are in {kept / 'REPORT.md'}")


def inside(out_dir: pathlib.Path, name) -> bool:
    """True when ``out_dir / name`` stays inside ``out_dir`` (no absolute path, no '..')."""
    root = pathlib.Path(out_dir).resolve()
    return root in (root / name).resolve().parents


def run_report(out_dir: pathlib.Path, *, sections: tuple[Section, ...] | list[Section], quick: bool,
               overrides: dict[str, float], command: str = "python -m experiments.report") -> dict:
    """Run ``sections`` in order; write results.json and REPORT.md into ``out_dir``; return the payload.

    The sections write into a temporary folder next to ``out_dir``; the finished report is moved into
    place at the end, so ``out_dir`` always holds a complete report (the previous one until then).
    A second run into the same folder raises ``ReportBusy``; a KeyboardInterrupt (SIGINT, or SIGTERM:
    ``signals_noted``) raises ``Interrupted`` after keeping the finished sections (``keep_partial``).
    """
    out_dir = writable_output(out_dir, "dir", name="--out")
    if out_dir.is_dir():  # the temporary folder of the sections goes next to it
        writable_output(out_dir.parent, "dir", name="--out's parent folder")
    with locked(out_dir), signals_noted() as sigint:
        tmp = pathlib.Path(tempfile.mkdtemp(prefix=partial_prefix(out_dir), dir=out_dir.parent))
        try:
            return _run_into(tmp, out_dir, sigint, sections=sections, quick=quick, overrides=overrides,
                             command=command)
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)  # both stop a run like Ctrl-C: the finished sections are kept


@contextlib.contextmanager
def signals_noted():
    """SIGINT and SIGTERM raise KeyboardInterrupt (SIGTERM would otherwise kill the process with the
    finished sections unsaved) and are also noted (``.hit``): a KeyboardInterrupt raised inside a callback
    that swallows it (JAX's gc callback does) still stops the run after that section, and the swallowed
    one is not printed as a traceback."""
    state = types.SimpleNamespace(hit=False)

    def handler(signum, frame):
        state.hit = True
        raise KeyboardInterrupt

    def hook(unraisable):
        if not isinstance(unraisable.exc_value, KeyboardInterrupt):
            default_hook(unraisable)

    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield state
        return
    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    default_hook = sys.unraisablehook
    sys.unraisablehook = hook
    try:
        yield state
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        sys.unraisablehook = default_hook


def _run_into(tmp, out_dir, sigint, *, sections, quick, overrides, command) -> dict:
    started = datetime.datetime.now(datetime.timezone.utc)
    progress = Progress([s.title for s in sections])
    done: dict[str, dict] = {}

    def payload(status: str) -> dict:
        return {"report": {"command": command, "quick": quick, "overrides": overrides,
                           "sections": [s.key for s in sections], "started_utc": started.isoformat(timespec="seconds"),
                           "wall_s": round(time.perf_counter() - progress.t0, 1), "status": status,
                           "machine": machine_info()},
                "sections": done}

    for i, section in enumerate(sections):
        try:
            progress.start(i, section.title)
            t0 = time.perf_counter()
            try:
                entry = {"status": "ok", **run_section(section, tmp, quick=quick, overrides=overrides)}
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
            if sigint.hit:  # interrupted, but the KeyboardInterrupt was swallowed on its way
                raise KeyboardInterrupt
        except KeyboardInterrupt:
            progress.close()
            partial = payload("interrupted")
            write_report_files(tmp, partial)
            stopped = f"{'after' if section.key in done else 'in'} section {section.key!r}"
            raise Interrupted(keep_partial(tmp, out_dir, partial, stopped)) from None
    progress.close()
    final = payload("ok" if all(e["status"] == "ok" for e in done.values()) else "error")
    write_report_files(tmp, final)
    commit(tmp, out_dir, final)
    return final


def free_memory() -> None:
    """Drop compiled executables and garbage between sections (a section's buffers die with it)."""
    gc.collect()
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()


def machine_info() -> dict:
    """Python, platform, cores and (once a section imported it) JAX's backend; a backend that cannot start
    (``JAX_PLATFORMS=tpu`` without one) is named as such: its sections fail in their own place."""
    info = {"python": platform.python_version(), "platform": platform.platform(),
            "cpu_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    if "jax" in sys.modules:
        jax = sys.modules["jax"]
        try:
            info.update(jax=jax.__version__, jax_backend=jax.default_backend(), jax_devices=jax.device_count())
        except RuntimeError as exc:
            info.update(jax=jax.__version__, jax_backend=f"unavailable ({str(exc).splitlines()[0][:200]})",
                        jax_devices=0)
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
    rows = [[e["number"], f"[{e['title']}](#{e['number']}-{anchor(e['title'])}) (`{key}`)",
             "ok" if e["status"] == "ok" else f"**failed** ({e['error'].split(':')[0]})", f"{e['wall_s']:.1f} s"]
            for key, e in secs.items()]
    lines += ["", md_table(["#", "section", "status", "time"], rows)]
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


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.report",
        description="The main job: write the project's report (Markdown, JSON, PNG plots).",
        epilog="example: python -m experiments.report --quick --sections blackhole --out /tmp/rep "
               "--set blackhole.dram_peak_bytes_per_s=448e9")
    ap.add_argument("--quick", action="store_true", help="small shapes everywhere (about 2 minutes)")
    ap.add_argument("--out", type=output_dir, default="report",
                    help="output folder, existing or new (default report/)")
    ap.add_argument("--sections", nargs="+", choices=[s.key for s in SECTIONS], default=None, metavar="NAME",
                    help="run only these sections, in report order: " + ", ".join(s.key for s in SECTIONS))
    add_set_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> int:
    """The report's command line (``jaxref.validation.cli_main``): 0 when every section is ok, 1 when one
    failed, 2 on bad input (the output folder checked before any section runs), 130 when interrupted."""
    return cli_main(build_parser(), argv, lambda args: run_cli(args, argv))


def run_cli(args: argparse.Namespace, argv: list[str] | None) -> int:
    overrides = parse_overrides(args.overrides)
    chosen = SECTIONS if args.sections is None else tuple(s for s in SECTIONS if s.key in args.sections)
    use_fake_cpu_devices()
    command = " ".join(["python -m experiments.report", *(sys.argv[1:] if argv is None else argv)])
    try:
        payload = run_report(args.out, sections=chosen, quick=args.quick, overrides=overrides, command=command)
    except Interrupted as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 130
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
