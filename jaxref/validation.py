"""Input validation shared by the library and every CLI: typed choices, numeric CLI options, output
paths, strict JSON, atomic writes and the one CLI entry.

Choices are ``Literal`` types, declared once in ``jaxref.vocabulary`` (``CacheFormat``, ``AttnMode`` ...)
and read by ``choices_of``; one ``check_choice`` (alias ``check_dtype`` for formats) raises the one
message ``name='x' unknown; expected one of (...)``; ``check_int`` reads an integer knob held as a
float (the cost model's differentiable leaves). The CLIs use
argparse option types from here (``positive_int``, ``finite_float``, ``output_file``, ``output_dir``
...), so a bad number or an output path that cannot be written is refused by argparse itself before
any computation, and ``cli_main`` turns a ``ValueError`` raised later (a configuration the library
rejects) into the same form: ``<prog>: error: <message>`` on stderr, exit status 2, no traceback.
``dumps_strict`` is JSON without ``NaN`` / ``Infinity`` (``json_plain``: numpy values made plain, a
non-finite number an error naming its key path); ``atomic_write_text`` / ``atomic_output`` write a
file so that a reader sees the old or the new one, never a part.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import math
import os
import pathlib
import stat
import sys
import tempfile
import typing
from collections.abc import Callable, Iterable, Iterator


def choices_of(literal) -> tuple:
    """The allowed values of a ``Literal[...]`` type, in order."""
    values = typing.get_args(literal)
    if typing.get_origin(literal) is not typing.Literal or not values:
        raise TypeError(f"{literal!r} is not a Literal[...] type")
    return values


def check_choice(name: str, value, choices) -> None:
    """Raise ValueError unless ``value`` is one of ``choices`` (a ``Literal`` type or an iterable)."""
    allowed = choices_of(choices) if typing.get_origin(choices) is typing.Literal else tuple(choices)
    if value not in allowed:
        raise ValueError(f"{name}={value!r} unknown; expected one of {allowed}")


check_dtype = check_choice  # a storage format is a choice like any other


def check_int(name: str, value, *, lo: int | None = None) -> int:
    """``value`` (a concrete number, possibly a float leaf) as an int; ValueError unless it is an
    integer >= ``lo``."""
    v = float(value)
    if not v.is_integer():
        raise ValueError(f"{name}={value} must be an integer")
    if lo is not None and v < lo:
        raise ValueError(f"{name}={int(v)} must be >= {lo}")
    return int(v)


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``: the one range / shape check of the config classes
    (``jaxref.config``, ``costmodel.ahbm.config``, ``device.graph``). ``message`` names the argument,
    its value and what was expected: ``require(tile % 32 == 0, f"tile={tile} must be a multiple of 32")``."""
    if not ok:
        raise ValueError(message)


# ---- argparse option types (argparse reports: "argument --tile: 0: expected an integer >= 1") ----------
def _int_at_least(lo: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected an integer >= {lo}") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{v}: expected an integer >= {lo}")
        return v

    parse.__name__ = f"int >= {lo}"
    return parse


positive_int = _int_at_least(1)
nonnegative_int = _int_at_least(0)


def finite_float(text: str) -> float:
    """A finite float (no nan / inf)."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number")
    return v


def positive_float(text: str) -> float:
    """A finite float > 0."""
    v = finite_float(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number > 0")
    return v


# ---- output paths, checked before the work ---------------------------------------------------------------
MIN_FREE_BYTES = 1 << 20  # a file system with less free space than this is refused as full


def writable_output(path: str | os.PathLike, kind: str = "file", *, name: str | None = None) -> pathlib.Path:
    """``path`` as a ``pathlib.Path`` once it is known that ``kind`` ("file" or "dir") can be written there.

    Refused (ValueError naming ``name``, the path and what was expected): a dangling symlink, an existing
    path of the other kind or not a regular file / folder (a FIFO, a device, a socket), a path under a
    regular file, a missing parent folder, a folder in which no file can be created (permissions, an
    immutable or read-only folder: probed by creating and removing a temporary file, so it holds for
    root too) and a file system with less than ``MIN_FREE_BYTES`` free. A "file" needs an existing
    parent folder; a "dir" that does not exist yet is made by its writer with its missing parents
    (``mkdir(parents=True)``), so the nearest existing folder above it is the one probed.
    """
    if kind not in ("file", "dir"):
        raise ValueError(f"kind={kind!r} unknown; expected one of ('file', 'dir')")
    p = pathlib.Path(path)
    what = f"{name}={str(path)!r}" if name else repr(str(path))
    if p.is_symlink() and not p.exists():
        raise ValueError(f"{what} is a symlink to a missing target ({os.readlink(p)!r}); expected a "
                         f"{'file name' if kind == 'file' else 'folder'}")
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        mode = None
    except NotADirectoryError:
        mode = None  # a component of the path is a file: reported below
    except OSError as exc:
        raise ValueError(f"{what} cannot be examined ({exc.strerror})") from None
    if mode is not None:
        if kind == "dir" and not stat.S_ISDIR(mode):
            raise ValueError(f"{what} is an existing {_kind_of(mode)}; expected a folder (existing or new)")
        if kind == "file" and stat.S_ISDIR(mode):
            raise ValueError(f"{what} is a folder; expected a file name")
        if kind == "file" and not stat.S_ISREG(mode):
            raise ValueError(f"{what} is a {_kind_of(mode)}; expected a regular file (existing or new)")
    folder = p.resolve() if kind == "dir" and mode is not None else p.resolve().parent
    above = next((a for a in (folder, *folder.parents) if a.exists()), None)
    if above is not None and not above.is_dir():
        raise ValueError(f"{what} is under {str(above)!r}, which is a file; expected a path in a folder")
    if kind == "dir" and above is not None:
        folder = above  # a new folder is made with its missing parents (mkdir parents=True), in here
    if not folder.is_dir():
        raise ValueError(f"{what}: folder {str(p.parent)!r} does not exist (expected an existing parent folder)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"{what}: folder {str(folder)!r} cannot be written ({exc.strerror})") from None
    fs = os.statvfs(folder)
    if fs.f_bavail * fs.f_frsize < MIN_FREE_BYTES:
        raise ValueError(f"{what}: the file system of {str(folder)!r} is full "
                         f"({fs.f_bavail * fs.f_frsize} bytes free)")
    return p


def chosen_output(out: str | os.PathLike | None, write: bool, default: str | os.PathLike) -> pathlib.Path | None:
    """The file a command with ``--out FILE`` and ``--write`` (to ``default``) writes: ``out``, else
    ``default`` when ``write``, else None. Refused before any work (ValueError): both given, or a file
    that cannot be written (``writable_output``, named by the flag that chose it)."""
    if write and out is not None:
        raise ValueError(f"--write (writes {default}) and --out={str(out)!r} name two outputs; give one")
    path = pathlib.Path(out) if out is not None else pathlib.Path(default) if write else None
    if path is not None:
        writable_output(path, "file", name="--out" if out is not None else "--write")
    return path


def input_file(path: str | os.PathLike, *, name: str, expected: str, hint: str | None = None) -> pathlib.Path:
    """``path`` as a ``pathlib.Path`` once it is an existing regular file (a symlink's target); else ValueError
    naming ``name``, the path and ``expected``: 'no such file' (then ``hint``, what to do, where given) or
    what it is instead (a folder, a character device, ...: ``path_kind``)."""
    p = pathlib.Path(path)
    if not p.exists():
        raise ValueError(f"{name}={str(path)!r}: no such file; {hint or f'expected {expected}'}")
    if not p.is_file():
        raise ValueError(f"{name}={str(path)!r} is a {path_kind(p)}; expected {expected}")
    return p


def path_kind(path: str | os.PathLike) -> str:
    """What an existing ``path`` is (its target, for a symlink): 'file', 'folder', 'FIFO', 'socket',
    'character device', 'block device' or 'special file'; for messages that refuse an input."""
    return _kind_of(os.stat(path).st_mode)


def _kind_of(mode: int) -> str:
    return next((k for test, k in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"), (stat.S_ISFIFO, "FIFO"),
                                   (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                                   (stat.S_ISBLK, "block device")) if test(mode)), "special file")


def _argparse_type(kind: str) -> Callable[[str], pathlib.Path]:
    def parse(text: str) -> pathlib.Path:
        try:
            return writable_output(text, kind)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = f"writable {kind}"
    return parse


output_file = _argparse_type("file")  # argparse type: a file to write (``writable_output(text, "file")``)
output_dir = _argparse_type("dir")  # argparse type: a folder to write into, existing or new


class OutputError(OSError):
    """An output could not be written after the work (a full disk, a vanished folder); the message names it."""


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """Yield a temporary path in ``path``'s folder to write; on success it replaces ``path`` (``os.replace``),
    on any error it is removed and ``path`` is left as it was. A symlink to an existing file is followed
    (its target is replaced). Raises ``OutputError`` when the file cannot be written."""
    target = pathlib.Path(path)
    if target.is_symlink() and target.exists():
        target = target.resolve()
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise OutputError(exc.errno, f"cannot write {str(path)!r}: {exc.strerror}") from None
    os.close(fd)
    tmp = pathlib.Path(tmp)
    try:
        old = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
        yield tmp
        os.chmod(tmp, old)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OutputError):
            raise
        raise OutputError(exc.errno, f"cannot write {str(path)!r}: {exc.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (``atomic_output``), flushed to the disk before the rename."""
    with atomic_output(path) as tmp, open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (``atomic_output``)."""
    atomic_write_bytes(path, text.encode())


# ---- CLI error style and output ---------------------------------------------------------------------------
def cli_main(parser: argparse.ArgumentParser, argv: Iterable[str] | None,
             body: Callable[[argparse.Namespace], int | None]) -> int:
    """Parse ``argv`` and run ``body(args)``; return its exit status (None -> 0).

    An argparse error and a ``ValueError`` from ``body`` (bad input the library refused) are both
    ``<prog>: error: <message>`` on stderr and status 2, never a traceback; so is a closed standard
    output, checked before ``body`` runs (what it prints would be lost). An ``OutputError`` (a file
    that could not be written after the work) is ``<prog>: error: ...`` and status 1. Standard output
    closed by its reader (``... | head``: EPIPE) ends the run quietly with status 0, as a Unix filter
    whose reader has stopped; any other failure to write standard output is ``error:`` and status 1.
    """
    argv = sys.argv[1:] if argv is None else list(argv)

    def error(message: str, status: int) -> int:
        if status == 2:
            parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return status

    try:
        args = parser.parse_args(argv)
        if not stdout_writable():
            return error("standard output is closed; expected somewhere to print the results "
                         "(redirect it to a file or /dev/null)", 2)
        with guarded_stdout():
            status = body(args)
            sys.stdout.flush()
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 2
    except ValueError as e:
        return error(str(e), 2)
    except OutputError as e:
        return error(e.strerror or str(e), 1)
    except (StdoutError, BrokenPipeError) as e:
        return stdout_failed(e, error)
    return 0 if status is None else status


def cli_run(parser: argparse.ArgumentParser, argv: Iterable[str] | None, body: Callable[[argparse.Namespace], object]):
    """``cli_main`` for a command that Python callers also run: returns ``body(args)``'s result; bad input
    is ``<prog>: error: <message>`` on stderr and ``SystemExit(2)`` (``--help``: ``SystemExit(0)``)."""
    results = []
    status = cli_main(parser, argv, lambda args: results.append(body(args)))
    if status or not results:
        raise SystemExit(status)
    return results[0]


class StdoutError(OSError):
    """Standard output could not be written (raised by ``guarded_stdout``'s writes)."""


class _Guarded:
    """``sys.stdout`` whose write / flush failures are ``StdoutError`` (told apart from other files' errors)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from None

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as exc:
            raise StdoutError(exc.errno, exc.strerror) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def guarded_stdout():
    """Route ``sys.stdout`` through ``_Guarded`` for the duration (print and argparse write through it)."""
    stream = sys.stdout
    sys.stdout = _Guarded(stream)
    try:
        yield
    finally:
        sys.stdout = stream


def stdout_writable() -> bool:
    """False when standard output is closed (no file descriptor 1 behind ``sys.stdout``), True otherwise."""
    if sys.stdout is None:
        return False
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # a stream without a descriptor (a test's capture)
        return True
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def stdout_failed(exc: OSError, error: Callable[[str, int], int]) -> int:
    """Standard output could not be written: EPIPE (its reader stopped) is status 0, quietly; anything else
    is ``error: ...`` and status 1. Standard output is pointed at /dev/null, so that the interpreter's own
    flush at exit does not fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError, io.UnsupportedOperation):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if exc.errno == errno.EPIPE:
        return 0
    return error(f"cannot write standard output ({exc.strerror})", 1)


def board_argument(parser: argparse.ArgumentParser, boards: Iterable[str], *, default: str | None = None,
                   help: str | None = None) -> None:
    """The one ``--board`` option of every CLI that chooses a board (``boards``: the preset names)."""
    choices = sorted(boards)
    parser.add_argument("--board", default=default, choices=choices, metavar="BOARD",
                        help=help or f"board preset, one of {', '.join(choices)}"
                        + (f" (default {default})" if default else ""))


def json_plain(obj, path: str = "result"):
    """``obj`` as plain JSON values: numpy scalars and arrays through ``tolist``, tuples as lists.

    Raises TypeError naming the key path of anything that is not a number, string, bool, None, list or
    dict with string keys, and ValueError naming the key path of a non-finite number (a NaN in results
    is a failure to report, never a silent null).
    """
    if isinstance(obj, dict):
        bad = [k for k in obj if not isinstance(k, str)]
        if bad:
            raise TypeError(f"{path}: keys must be strings, got {bad[0]!r}")
        return {k: json_plain(v, f"{path}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_plain(v, f"{path}[{i}]") for i, v in enumerate(obj)]
    if hasattr(obj, "tolist") and type(obj).__module__.startswith("numpy"):
        return json_plain(obj.tolist(), path)
    if obj is None or isinstance(obj, (str, bool, int)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError(f"{path.split('[')[0]} has a non-finite number at {path} ({obj}); expected finite "
                             "numbers (an input outside the model's range?)")
        return obj
    raise TypeError(f"{path}: {type(obj).__name__} is not JSON-serialisable (numbers / strings only)")


def dumps_strict(obj, **kwargs) -> str:
    """``json.dumps`` of ``json_plain(obj)``: numpy values made plain; NaN / Infinity refused (ValueError
    naming the first non-finite key path)."""
    return json.dumps(json_plain(obj), allow_nan=False, **kwargs)
