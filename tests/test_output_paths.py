"""Outputs checked before the work, every write atomic, standard output that cannot be written, SIGTERM:
``jaxref.validation.writable_output`` / ``atomic_output`` / ``cli_main`` and the report runner.

The command-line runs use the report runner with small section modules written here (no JAX work), so
each takes a second or two; ``device.parity`` and ``plan_accuracy`` are refused before any computation.
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

from device import parity
from experiments import plan_accuracy
from jaxref.validation import OutputError, atomic_output, atomic_write_text, writable_output

ROOT = pathlib.Path(__file__).resolve().parents[1]
AS_ROOT = os.geteuid() == 0


def bad_paths(tmp_path: pathlib.Path) -> dict[str, tuple[pathlib.Path, str]]:
    """name -> (path, the words of its refusal), for both kinds of output."""
    (tmp_path / "regular").write_text("keep")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    return {"under a file": (tmp_path / "regular" / "out", "which is a file"),
            "deep under a file": (tmp_path / "regular" / "a" / "b", "which is a file"),
            "dangling symlink": (tmp_path / "dangling", "is a symlink to a missing target"),
            "FIFO": (tmp_path / "fifo", "FIFO")}


@pytest.mark.parametrize("kind", ["file", "dir"])
def test_unwritable_outputs_are_refused_with_the_reason(tmp_path, kind):
    for path, words in bad_paths(tmp_path).values():
        with pytest.raises(ValueError, match=words):
            writable_output(path, kind, name="--out")
    missing = tmp_path / "no" / "such" / "out"
    if kind == "file":  # a file needs its folder; a new folder is made with its parents
        with pytest.raises(ValueError, match="folder .*no/such' does not exist"):
            writable_output(missing, kind)
    else:
        assert writable_output(missing, kind) == missing
    with pytest.raises(ValueError, match="--out=.*fifo' is a FIFO; expected a regular file" if kind == "file"
                       else "is an existing FIFO; expected a folder"):
        writable_output(tmp_path / "fifo", kind, name="--out")
    other = tmp_path / "regular" if kind == "dir" else tmp_path
    with pytest.raises(ValueError, match="is an existing file; expected a folder" if kind == "dir" else "is a folder"):
        writable_output(other, kind)
    assert writable_output(tmp_path / "new", kind) == tmp_path / "new"  # new, in an existing folder
    assert not (tmp_path / "no").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "dangling", "fifo", "regular"]  # the write probe leaves nothing behind


def test_a_folder_that_cannot_be_written_is_refused(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if AS_ROOT:  # root writes through the mode bits: the probe must agree with what a write does
            writable_output(ro / "out.json", "file")
            (ro / "x").write_text("root can")
        else:
            with pytest.raises(ValueError, match="cannot be written"):
                writable_output(ro / "out.json", "file")
    finally:
        ro.chmod(0o700)
    if os.path.isdir("/proc/self"):  # a folder nobody can create files in, root included
        with pytest.raises(ValueError, match="cannot be written"):
            writable_output("/proc/self/out.json", "file")


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o640)
    atomic_write_text(target, "new")
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o640
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "new"
    link = tmp_path / "link.json"
    link.symlink_to(target)
    atomic_write_text(link, "through the link")
    assert link.is_symlink() and target.read_text() == "through the link"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "r.json"]  # no temporary file left
    (tmp_path / "gone").mkdir()
    os.rmdir(tmp_path / "gone")
    with pytest.raises(OutputError, match="cannot write"):
        atomic_write_text(tmp_path / "gone" / "x.json", "{}")


@pytest.mark.parametrize("case", ["under a file", "dangling symlink", "FIFO"])
def test_device_parity_refuses_its_output_folder_before_the_comparison(tmp_path, case, capsys):
    path, words = bad_paths(tmp_path)[case]
    t0 = time.perf_counter()
    assert parity.main(["--backend", "emulation", "--preset", "tiny", "--out", str(path)]) == 2
    err = capsys.readouterr().err
    assert "python -m device.parity: error: argument --out:" in err and words in err and "Traceback" not in err
    assert time.perf_counter() - t0 < 5  # refused at entry: the emulated run takes far longer


def test_plan_accuracy_imports_and_refuses_its_output_before_the_golden(tmp_path, capsys):
    os.mkfifo(tmp_path / "fifo")
    assert plan_accuracy.main(["--out", str(tmp_path / "fifo")]) == 2
    assert "is a FIFO; expected a regular file" in capsys.readouterr().err


# ---- the report runner in a subprocess, with small section modules -------------------------------------------
SECTION_SRC = textwrap.dedent('''
    import time
    from matplotlib.figure import Figure
    from experiments.report.render import SectionResult

    def report_section(out_dir, *, quick, overrides):
        if {jax}:
            import jax.numpy as jnp
            jnp.ones(2).block_until_ready()
        fig = Figure(figsize=(2, 2))
        fig.subplots().plot([0, 1], [1, 0])
        fig.savefig(out_dir / "{name}.png")
        if {sleep}:
            time.sleep(60)  # until interrupted
        return SectionResult("{name} ![x]({name}.png)", {{"name": "{name}"}}, ["{name}.png"])
''')

DRIVER = textwrap.dedent('''
    import sys
    sys.path.insert(0, sys.argv[1])
    from experiments.report import runner
    runner.SECTIONS = tuple(runner.Section(k, k.title(), k + "_section") for k in ("fast", "slow", "jax"))
    raise SystemExit(runner.main(sys.argv[2:]))
''')


@pytest.fixture()
def fake(tmp_path):
    mods = tmp_path / "mods"
    mods.mkdir()
    for name, sleep, jax in (("fast", False, False), ("slow", True, False), ("jax", False, True)):
        (mods / f"{name}_section.py").write_text(SECTION_SRC.format(name=name, sleep=sleep, jax=jax))
    return mods


def command(mods: pathlib.Path, *args: str) -> list[str]:
    return [sys.executable, "-c", DRIVER, str(mods), *args]


def env(**extra) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": "cpu", **extra}


def test_sigterm_keeps_the_finished_sections_like_ctrl_c(fake, tmp_path):
    out = tmp_path / "rep"
    proc = subprocess.Popen(command(fake, "--out", str(out), "--sections", "fast", "slow"), cwd=ROOT, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if "[2/2] Slow ..." in line:
            break
    time.sleep(0.3)  # inside the slow section
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert f"are in {out / 'REPORT.md'}" in err
    payload = json.loads((out / "results.json").read_text())
    assert payload["report"]["status"] == "interrupted" and list(payload["sections"]) == ["fast"]
    assert sorted(p.name for p in out.iterdir() if p.name != ".report.lock") == ["REPORT.md", "fast.png",
                                                                                "results.json"]
    assert not [p for p in tmp_path.iterdir() if ".partial-" in p.name]  # nothing hidden left behind


def test_a_killed_runs_hidden_folder_is_removed_by_the_next_run(fake, tmp_path):
    out = tmp_path / "rep"
    stale = tmp_path / ".rep.partial-killed"
    stale.mkdir()
    (stale / "fast.png").write_bytes(b"half")
    res = subprocess.run(command(fake, "--out", str(out), "--sections", "fast"), cwd=ROOT, env=env(),
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert not stale.exists() and (out / "REPORT.md").is_file()


def test_unavailable_jax_platform_fails_in_its_section_and_the_report_is_written(fake, tmp_path):
    out = tmp_path / "rep"
    res = subprocess.run(command(fake, "--out", str(out), "--sections", "fast", "jax"), cwd=ROOT,
                         env=env(JAX_PLATFORMS="tpu"), capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1, res.stderr[-3000:]
    payload = json.loads((out / "results.json").read_text())
    assert [e["status"] for e in payload["sections"].values()] == ["ok", "error"]
    assert "tpu" in payload["sections"]["jax"]["error"]
    assert payload["report"]["machine"]["jax_backend"].startswith("unavailable")
    assert "**This section failed**" in (out / "REPORT.md").read_text()


def test_closed_pipe_ends_quietly_after_the_report_is_written(fake, tmp_path):
    out = tmp_path / "rep"
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line: ``... | head -0``
    proc = subprocess.Popen(command(fake, "--out", str(out), "--sections", "fast"), cwd=ROOT, env=env(),
                            stdout=write, stderr=subprocess.PIPE, text=True)
    os.close(write)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in err and "Error" not in err, err
    assert (out / "REPORT.md").is_file()


def test_closed_or_full_stdout_is_an_error(fake, tmp_path):
    out = tmp_path / "rep"
    closed = subprocess.run(command(fake, "--out", str(out), "--sections", "fast"), cwd=ROOT, env=env(),
                            stdout=None, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
                            preexec_fn=lambda: os.close(1))
    assert closed.returncode == 2 and "error: standard output is closed" in closed.stderr, closed.stderr
    assert not out.exists()  # refused before any section ran
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            res = subprocess.run(command(fake, "--out", str(out), "--sections", "fast"), cwd=ROOT, env=env(),
                                 stdout=full, stderr=subprocess.PIPE, text=True, timeout=60, check=False)
        assert res.returncode == 1 and "error: cannot write standard output" in res.stderr, res.stderr
        assert "Traceback" not in res.stderr and (out / "REPORT.md").is_file()
