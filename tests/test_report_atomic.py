"""The report never loses data: interrupted runs (SIGINT), concurrent runs, stale-output cleanup.

The subprocess runs use the real runner with two small section modules written here (a fast one and
one that sleeps until interrupted), so each run takes about a second; one run interrupts the real
``python -m experiments.report --quick --sections blackhole``.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from experiments.report import runner
from experiments.report.render import SectionResult

ROOT = pathlib.Path(__file__).resolve().parents[1]

SECTION_SRC = textwrap.dedent('''
    import os, time
    from matplotlib.figure import Figure
    from experiments.report.render import SectionResult

    def report_section(out_dir, *, quick, overrides):
        fig = Figure(figsize=(2, 2))
        fig.subplots().plot([0, 1], [1, 0])
        fig.savefig(out_dir / "{name}.png")
        if {sleep}:
            time.sleep(60)  # until interrupted
        tag = os.environ.get("TAG", "")
        return SectionResult("{name} " + tag + " ![x]({name}.png)", {{"tag": tag}}, ["{name}.png"])
''')

DRIVER = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    from experiments.report import runner
    runner.SECTIONS = (runner.Section("first", "First", "fast_section"),
                       runner.Section("second", "Second", "slow_section"))
    runner.use_fake_cpu_devices = lambda: None
    raise SystemExit(runner.main(sys.argv[2:]))
''')


@pytest.fixture()
def fake(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "fast_section.py").write_text(SECTION_SRC.format(name="fast", sleep=False))
    (mods / "slow_section.py").write_text(SECTION_SRC.format(name="slow", sleep=True))
    return mods


def start(mods: pathlib.Path, *args: str, tag: str = "") -> subprocess.Popen:
    env = {**os.environ, "TAG": tag, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    return subprocess.Popen([sys.executable, "-c", DRIVER, str(mods), *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(proc: subprocess.Popen, text: str, timeout: float = 120.0) -> list[str]:
    """Read the child's stderr lines until one contains ``text``; returns the lines read."""
    lines, t0 = [], time.monotonic()
    while time.monotonic() - t0 < timeout:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    proc.kill()
    raise AssertionError(f"never saw {text!r}; stderr: {''.join(lines)}")


def snapshot(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != runner.LOCK_NAME}


def previous_report(mods: pathlib.Path, out: pathlib.Path) -> dict[str, bytes]:
    proc = start(mods, "--out", str(out), "--sections", "first", tag="previous")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    before = snapshot(out)
    assert set(before) == {"REPORT.md", "results.json", "fast.png"}
    return before


def interrupt(proc: subprocess.Popen) -> tuple[int, str]:
    """SIGINT the child; returns its status and the rest of its stderr without progress lines."""
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    return proc.returncode, "".join(line + "\n" for line in rest.splitlines() if line and line[0] != "[")


def test_interrupt_keeps_the_previous_report_and_the_finished_sections(fake, tmp_path):
    out = tmp_path / "rep"
    before = previous_report(fake, out)
    proc = start(fake, "--out", str(out), tag="new")
    seen = wait_for(proc, "[2/2] Second ...")
    assert any("[1/2] First: ok" in line for line in seen)
    time.sleep(0.3)  # inside the slow section (its figure written)
    rc, rest = interrupt(proc)
    assert rc == 130
    assert "Traceback" not in rest and len(rest.strip().splitlines()) == 1, rest
    assert "the previous report in" in rest and "is unchanged" in rest
    assert snapshot(out) == before  # byte for byte
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("rep.interrupted-")]
    assert len(kept) == 1 and str(kept[0] / "REPORT.md") in rest
    assert set(snapshot(kept[0])) == {"REPORT.md", "results.json", "fast.png"}  # no orphan slow.png
    payload = json.loads((kept[0] / "results.json").read_text())
    assert payload["report"]["status"] == "interrupted" and list(payload["sections"]) == ["first"]
    assert payload["sections"]["first"]["results"] == {"tag": "new"}
    assert "fast new" in (kept[0] / "REPORT.md").read_text()
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]  # no temporary folder left


def test_interrupt_without_a_previous_report_writes_the_finished_sections_in_place(fake, tmp_path):
    out = tmp_path / "rep"
    proc = start(fake, "--out", str(out), tag="new")
    wait_for(proc, "[2/2] Second ...")
    rc, rest = interrupt(proc)
    assert rc == 130 and "Traceback" not in rest, rest
    assert set(snapshot(out)) == {"REPORT.md", "results.json", "fast.png"}
    assert json.loads((out / "results.json").read_text())["report"]["status"] == "interrupted"


def test_a_second_run_into_the_same_folder_is_refused(fake, tmp_path):
    out = tmp_path / "rep"
    before = previous_report(fake, out)
    first = start(fake, "--out", str(out), tag="a")
    wait_for(first, "[2/2] Second ...")
    second = start(fake, "--out", str(out), "--sections", "first", tag="b")
    _, err = second.communicate(timeout=120)
    assert second.returncode == 2, err
    assert f"error: --out {out}: another report run (pid {first.pid}) is writing into this folder" in err
    assert "Traceback" not in err
    interrupt(first)
    assert snapshot(out) == before
    # the lock dies with its holder: the next run proceeds
    third = start(fake, "--out", str(out), "--sections", "first", tag="c")
    _, err = third.communicate(timeout=120)
    assert third.returncode == 0, err
    assert json.loads((out / "results.json").read_text())["sections"]["first"]["results"] == {"tag": "c"}


def test_interrupting_the_real_report_loses_nothing(fake, tmp_path):
    out = tmp_path / "rep"
    before = previous_report(fake, out)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-m", "experiments.report", "--quick", "--sections", "blackhole",
                             "--out", str(out)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    wait_for(proc, "[1/1] Blackhole cost model ...")
    time.sleep(1.0)
    rc, rest = interrupt(proc)
    assert rc == 130, rest
    assert "Traceback" not in rest and len(rest.strip().splitlines()) == 1, rest
    assert "is unchanged" in rest
    assert snapshot(out) == before


def test_cleanup_removes_only_the_previous_reports_own_figures(tmp_path, monkeypatch):
    def section(out_dir, *, quick, overrides):
        (out_dir / "new.png").write_bytes(runner.PNG_SIGNATURE + b"new")
        return SectionResult("", {}, ["new.png"])

    mod = type(sys)("cleanup_section")
    mod.report_section = section
    monkeypatch.setitem(sys.modules, "cleanup_section", mod)
    user = {"notes.txt": b"mine", "data.csv": b"1,2", "sub/keep.txt": b"keep", "sub/plot.png": b"user's own"}
    for name, data in user.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(data)
    (tmp_path / "old.png").write_bytes(runner.PNG_SIGNATURE + b"old")
    listed = ["notes.txt", "data.csv", "sub/keep.txt", "sub", "old.png", "../outside.png"]
    (tmp_path / "results.json").write_text(json.dumps({"sections": {"x": {"figures": listed}}}))
    (tmp_path.parent / "outside.png").write_bytes(runner.PNG_SIGNATURE)

    runner.run_report(tmp_path, sections=(runner.Section("s", "S", "cleanup_section"),), quick=True, overrides={})

    for name, data in user.items():
        assert (tmp_path / name).read_bytes() == data, name
    assert (tmp_path.parent / "outside.png").is_file()
    assert not (tmp_path / "old.png").exists()  # the previous report's own figure
    assert (tmp_path / "new.png").is_file() and (tmp_path / "REPORT.md").is_file()


def test_out_an_existing_file_is_an_input_error(tmp_path, capsys):
    target = tmp_path / "file.txt"
    target.write_text("keep")
    assert runner.main(["--out", str(target), "--sections", "golden"]) == 2
    assert "is an existing file; expected a folder" in capsys.readouterr().err
    assert target.read_text() == "keep"
