"""Input validation shared by the library and every CLI: typed choices, numeric CLI options, strict JSON.

Choices are ``Literal`` types, declared once in ``jaxref.vocabulary`` (``CacheFormat``, ``AttnMode`` ...)
and read by ``choices_of``; one ``check_choice`` (alias ``check_dtype`` for formats) raises the one
message ``name='x' unknown; expected one of (...)``; ``check_int`` reads an integer knob held as a
float (the cost model's differentiable leaves). The CLIs use
argparse option types from here (``positive_int``, ``finite_float`` ...), so a bad number is refused
by argparse itself before any computation, and ``cli_main`` turns a ``ValueError`` raised later
(a configuration the library rejects) into the same form: ``<prog>: error: <message>`` on stderr,
exit status 2, no traceback. ``dumps_strict`` is JSON without ``NaN`` / ``Infinity``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import typing
from collections.abc import Callable, Iterable


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


def output_dir(text: str) -> pathlib.Path:
    """A folder to write into: it may not exist yet (it is created), but it may not be a file."""
    path = pathlib.Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is an existing file; expected a folder (existing or new)")
    return path


def output_file(text: str) -> pathlib.Path:
    """A file to write: not a folder, and its parent folder exists."""
    path = pathlib.Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder; expected a file name")
    if not path.parent.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r}: folder {str(path.parent)!r} does not exist")
    return path


# ---- CLI error style and output ---------------------------------------------------------------------------
def cli_main(parser: argparse.ArgumentParser, argv: Iterable[str] | None,
             body: Callable[[argparse.Namespace], int | None]) -> int:
    """Parse ``argv`` and run ``body(args)``; return its exit status (None -> 0).

    An argparse error and a ``ValueError`` from ``body`` (bad input the library refused) are both
    ``<prog>: error: <message>`` on stderr and status 2, never a traceback.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parser.parse_args(argv)
        status = body(args)
    except SystemExit as e:  # argparse: --help (0) or a usage error (2), already printed
        return e.code if isinstance(e.code, int) else 2
    except ValueError as e:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    return 0 if status is None else status


def cli_run(parser: argparse.ArgumentParser, argv: Iterable[str] | None, body: Callable[[argparse.Namespace], object]):
    """``cli_main`` for a command that Python callers also run: returns ``body(args)``'s result; bad input
    is ``<prog>: error: <message>`` on stderr and ``SystemExit(2)`` (``--help``: ``SystemExit(0)``)."""
    results = []
    status = cli_main(parser, argv, lambda args: results.append(body(args)))
    if status or not results:
        raise SystemExit(status)
    return results[0]


def dumps_strict(obj, **kwargs) -> str:
    """``json.dumps`` that refuses NaN / Infinity (ValueError naming the first non-finite key path)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        raise ValueError(f"result has a non-finite number at {_first_non_finite(obj, 'result')}; "
                         "expected finite numbers (an input outside the model's range?)") from None


def _first_non_finite(obj, path: str) -> str | None:
    if isinstance(obj, float):
        return None if math.isfinite(obj) else path
    if isinstance(obj, dict):
        items = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    else:
        return None
    for k, v in items:
        hit = _first_non_finite(v, f"{path}[{k!r}]")
        if hit:
            return hit
    return None
