"""Device-profiler op reports (``ops_perf_results_*.csv``) in and out of the cost model.

Each op kind reads and writes its own rows (``costmodel.blackhole.kinds``); this module is the file
side around them.

Out: ``spec_record`` turns an op spec (and its modelled or measured time) into an ``OpRecord`` of
the profiler's schema (``report_schema``) through its kind: real op codes, ttnn's attribute text with
the full program config, input and output shapes / layouts / formats / memory, CORE COUNT as the
kind splits the op (``kinds.cores``, the split its price assumes). ``write_csv`` writes a list of them.

In: ``read_report`` reads a real report as tt-perf-report does (V1 or V2 column names, signposts
and host ops skipped, one device or all, rows with invalid device durations dropped with a
warning) and classifies every row by its op code's kind: 'modelled' (with its op spec) or skipped
with the reason (op not modelled, program-config kind not modelled, batched operands, paged cache,
...). A malformed cell of a row the model would fit is a ValueError naming the file, line and column.
"""

from __future__ import annotations

import argparse
import collections
import csv
import dataclasses
import hashlib
import math
import pathlib
import re
from collections.abc import Iterator

from costmodel.blackhole import kinds
from costmodel.blackhole.kinds import CLASS_OF_CODE
from costmodel.blackhole.opspecs import (
    ChipSpec,
    KernelSpec,
)
from costmodel.blackhole.report_build import older_kernel_warning
from costmodel.blackhole.report_line import SIGNATURE, ReportLine, Skip, finite
from costmodel.blackhole.report_schema import (
    DURATION,
    GAP,
    OpRecord,
    write_report,
)
from costmodel.blackhole.row import Row
from costmodel.hardware import FIDELITY_PASSES, Blackhole, blackhole
from jaxref.validation import input_file

MODELLED = "modelled"
ARCH_HW = {"blackhole": "p150a", "p150": "p150a", "p150a": "p150a", "p150b": "p150a", "p150c": "p150a",
           "blackhole_p150": "p150a", "p100": "p100a", "p100a": "p100a", "blackhole_p100": "p100a",
           "blackhole_p100a": "p100a"}
DEVICE_OP_TYPES = ("tt_dnn_device", "")
# Ops that move data between chips (ttnn's CCL device operations and ring attention across devices):
# outside the one-chip model, set apart from the device time it should price.
COLLECTIVE_WORDS = ("AllGather", "ReduceScatter", "AllReduce", "AllToAll", "RingJoint", "RingAttention",
                    "PointToPoint", "Ccl", "CCL", "SendAsync", "RecvAsync", "MeshPartition")
COLLECTIVE = "collective across chips (outside the one-chip model)"
# tt-perf-report's rule (perf_report.is_invalid_device_duration): a trace window's rows carry an
# op-to-op latency of minus the window, far larger than the op itself
INVALID_GAP_MIN_NS = 1_000_000


def model_cores(spec, hw: Blackhole) -> int:
    """Cores the model splits ``spec`` over: its op kind's ``cores`` (``kinds.cores``), the split its price
    assumes and the CORE COUNT its report row is written with."""
    return kinds.cores(spec, hw)


def spec_record(spec, hw: Blackhole, duration_us: float | None, *, heads: tuple[int, int] | None = None) -> OpRecord:
    """The op report row of ``spec`` (its op kind's ``record``, ``kinds.record``; ``heads``: (q heads, kv
    heads) of a create-heads op). Raises ValueError for a spec without a report form."""
    return kinds.record(spec, hw, duration_us, heads=heads)


def write_csv(path: str | pathlib.Path, entries: list[tuple[object, float | None]], *, hw: Blackhole | None = None,
              heads: tuple[int, int] | None = None) -> None:
    """Write (op spec, duration us or None) entries as an op report, the ops of one traced step: each
    op after the first ``hw.trace_op_gap_s`` after the previous one (OP TO OP LATENCY). ValueError
    names the entry it cannot encode."""
    hw = blackhole() if hw is None else hw
    records = []
    for i, (spec, us) in enumerate(entries):
        try:
            records.append(spec_record(spec, hw, us, heads=heads))
        except ValueError as e:
            raise ValueError(f"entries[{i}] ({type(spec).__name__}): {e}") from None
    write_report(path, records, op_gap_ns=hw.trace_op_gap_s * 1e9)  # the ops run as one traced step


# ---- in: report row -> classified row ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True, slots=True)
class ReportRow:
    """One data line of a report: ``status`` is 'modelled' (then ``spec`` is set) or the skip reason;
    ``duration_us`` the row's device kernel time (None where the report has no usable one, and on
    signpost, host-op and other-device rows); ``ideal_us`` tt-perf-report's ideal time of the row,
    whether modelled or not (None where tt-perf-report has none: every op but a matmul)."""

    line: int
    op_code: str
    device_id: int | None
    status: str
    spec: object | None = None
    duration_us: float | None = None
    ideal_us: float | None = None  # tt-perf-report's ideal of a matmul row (``tt_perf_report_ideal_us``)


@dataclasses.dataclass(frozen=True)
class Report:
    """A read report: every data line classified, the hardware it is fitted on, and warnings."""

    path: str
    hw: Blackhole
    arch: str
    rows: tuple[ReportRow, ...]
    warnings: tuple[str, ...]

    def measured_rows(self) -> list[Row]:
        """The modelled lines as fit rows (group ``profiler_csv/<op class>``), priced kernel-only
        (``KernelSpec``): the column read is DEVICE KERNEL DURATION, which has no dispatch time."""
        name = pathlib.Path(self.path).name
        return [Row("profiler_csv", f"{r.line:05d}_{r.op_code}", f"profiler_csv/{r.spec.op_class}", "calibration",
                    r.duration_us, r.duration_us, f"{name} line {r.line}", KernelSpec(r.spec))
                for r in self.rows if r.status == MODELLED]

    def timed_rows(self) -> list[ReportRow]:
        """The device-op rows of the kept device(s) with a usable duration: the report's device time
        (``ReportRow.duration_us`` is None on every other line)."""
        return [r for r in self.rows if r.duration_us is not None]

    def between(self, start: str | None, end: str | None = None) -> Report:
        """The rows inside a signpost window, as tt-perf-report's ``--start-signpost`` /
        ``--end-signpost``: after the first signpost named ``start`` (None: from the first row) and
        before the first ``end`` after it (None: to the last row; the same name as ``start``: its next
        instance). ValueError names the signpost and the ones the report has."""
        names = [(i, r.op_code) for i, r in enumerate(self.rows) if r.status == "signpost"]
        have = sorted({n for _, n in names})

        def first(name: str, after: int, option: str) -> int:
            at = next((i for i, n in names if n == name and i > after), None)
            if at is None:
                where = f" after line {self.rows[after].line}" if after >= 0 else ""
                expected = f"expected one of {have}" if have else "the report has no signposts"
                raise ValueError(f"{option}={name!r}: no such signpost in {self.path}{where}; {expected}")
            return at

        lo = -1 if start is None else first(start, -1, "start-signpost")
        hi = len(self.rows) if end is None else first(end, lo, "end-signpost")
        return dataclasses.replace(self, rows=self.rows[lo + 1:hi])

    def summary(self) -> dict[str, dict[str, int]]:
        """{status: {op code: lines}}, 'modelled' first, then reasons by count."""
        out: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for r in self.rows:
            out[r.status][r.op_code] += 1
        order = sorted(out, key=lambda k: (k != MODELLED, -sum(out[k].values()), k))
        return {k: dict(out[k].most_common()) for k in order}


def _classify(ln: ReportLine, hw: Blackhole, code: str):
    cls = CLASS_OF_CODE.get(code)
    if cls is None and any(word in code for word in COLLECTIVE_WORDS):
        raise Skip(COLLECTIVE)
    if cls is None:
        raise Skip(f"op not modelled ({code})")
    return kinds.read(ln, hw, cls)


def invalid_duration(record: dict) -> bool:
    """tt-perf-report's test of an unusable device duration: missing, non-finite or negative, or
    a row inside a trace window (op-to-op latency of minus far more than the op)."""
    return _invalid(record.get(DURATION) or "", record.get(GAP) or "")


def _invalid(duration: str, gap: str) -> bool:
    d = finite(duration.strip())
    if d is None or d < 0:
        return True
    g = finite(gap.strip())
    return g is not None and g < -INVALID_GAP_MIN_NS and abs(g) > max(d * 0.5, INVALID_GAP_MIN_NS)


def _records(path: pathlib.Path) -> Iterator[list[str]]:
    """The CSV records of ``path``, streamed (header first); ValueError names the file for binary data."""
    input_file(path, name="ops-csv", expected="an ops_perf_results CSV file")

    def lines(f):
        for text in f:
            if "\x00" in text:
                raise ValueError(f"{path}: binary data (NUL bytes); expected an ops_perf_results CSV")
            yield text

    with path.open(encoding="utf-8-sig", newline="") as f:
        try:
            yield from csv.reader(lines(f))
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: not a text CSV ({e.reason}); expected an ops_perf_results CSV") from None
        except csv.Error as e:
            raise ValueError(f"{path}: not a CSV ({e})") from None


def _header(path: pathlib.Path, cells: list[str] | None) -> list[str]:
    if cells is None:
        raise ValueError(f"{path}: empty; expected a header line and op rows")
    header = [h.strip() for h in cells]
    counts = collections.Counter(h for h in header if h)
    twice = {h: [i + 1 for i, c in enumerate(header) if c == h] for h, k in counts.items() if k > 1}
    if twice:
        h, at = next(iter(twice.items()))
        raise ValueError(f"{path}: line 1 (header): column {h!r} appears {len(at)} times (columns {at}); expected "
                         f"each column once (which one holds the data?)"
                         + (f"; also duplicated: {sorted(twice)[1:]}" if len(twice) > 1 else ""))
    required = ("OP CODE", "OP TYPE", DURATION)
    missing = [c for c in required if c not in header]
    if missing:
        raise ValueError(f"{path}: line 1 (header): missing column(s) {missing}; an ops_perf_results CSV has "
                         f"{list(required)}")
    return header


class _Columns:
    """Cell access by column name for one header (missing columns read as '')."""

    def __init__(self, header: list[str]):
        self.index = {h: i for i, h in enumerate(header)}
        self.signature = [i for i, h in enumerate(header) if h in SIGNATURE or h.startswith(("INPUT_", "OUTPUT_"))]
        self.v2 = any(h.endswith("_PAD[LOGICAL]") for h in header)  # tt-metal's newer tensor column names

    def cell(self, cells: list[str], column: str) -> str:
        i = self.index.get(column)
        return cells[i].strip() if i is not None and i < len(cells) else ""


def _device(cols: _Columns, cells: list[str]) -> int | None:
    d = finite(cols.cell(cells, "DEVICE ID"))
    return int(d) if d is not None and d.is_integer() else None


def _is_device_op(op_type: str, code: str) -> bool:
    return op_type in DEVICE_OP_TYPES and "(torch)" not in code


DEVICE_ID_WORDS = ("first", "all", "max")  # read_report's device_id besides a DEVICE ID


def decode_position(text: str) -> int:
    """The command lines' ``--decode-position`` parsed (an argparse type): an integer >= 0, else an
    argparse error naming the value."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"--decode-position={text!r}: expected an integer >= 0 (the cur_pos of the "
                                         "report's decode)")
    return int(text)


def add_decode_position_argument(p: argparse.ArgumentParser, *, of: str = "the reports'") -> None:
    """``--decode-position`` (parsed by ``decode_position``): the cur_pos ``of`` causal SDPA decode rows ran at
    (a device tensor, not a column of the report); without it the rows whose price depends on it are skipped
    with that reason."""
    p.add_argument("--decode-position", type=decode_position, default=None, metavar="POS",
                   help=f"the decode position (cur_pos, the same for every user) {of} causal SDPA decode rows ran "
                        "at: prices the rows that depend on it (default: those rows are skipped)")


def read_report(path: str | pathlib.Path, *, hw: Blackhole | None = None, device_id: int | str = "first",
                force_arch: bool = False, require_durations: bool = True,
                decode_position: int | None = None) -> Report:
    """Read and classify a profiler op report, streamed in one pass (nothing of a row kept but its
    ``ReportRow``; rows equal in op, attributes and tensors are classified once).

    Args:
      hw: the hardware fitted (default: from DEVICE ARCH, 'blackhole' -> p150a, 'p100*' -> p100a).
      device_id: 'first' (the lowest DEVICE ID in the file), 'all', 'max' (each op's slowest device, as
        tt-perf-report merges a multi-device report: ``slowest_device_rows``), or a DEVICE ID.
      force_arch: fit a report of another architecture (Wormhole) with the Blackhole model anyway.
      require_durations: False classifies rows without a usable duration too (``duration_us`` None).
      decode_position: the decode position (cur_pos, the same for every user) the report's causal
        SDPA decode rows ran at: a device tensor, not in the report; without it the rows whose price
        depends on it are skipped with that reason.
    Raises ValueError naming the file (and line / column) for unusable input.
    """
    if device_id not in DEVICE_ID_WORDS and not (isinstance(device_id, int) and not isinstance(device_id, bool)
                                                 and device_id >= 0):
        raise ValueError(f"device_id={device_id!r}: expected one of {list(DEVICE_ID_WORDS)} or a DEVICE ID "
                         "(an integer >= 0)")
    if decode_position is not None and (isinstance(decode_position, bool) or not isinstance(decode_position, int)
                                        or decode_position < 0):
        raise ValueError(f"decode_position={decode_position!r}: expected None or an integer >= 0 (the cur_pos "
                         "of the report's decode)")
    path = pathlib.Path(path)
    records = _records(path)
    header = _header(path, next(records, None))
    cols = _Columns(header)
    warnings: list[str] = []
    rows, invalid_lines, seen, codes = [], [], {}, {}
    archs: dict[str, int] = {}  # arch -> first line
    ids: set[int] = set()
    most_cores = (0, 0.0)  # (line, AVAILABLE WORKER CORE COUNT) of the largest grid
    fitted = hw
    for i, cells in enumerate(records):
        n = i + 2
        if len(cells) > len(header):
            raise ValueError(f"{path}: line {n}: {len(cells)} cells for {len(header)} header columns")
        if not any(c.strip() for c in cells):
            continue
        code = cols.cell(cells, "OP CODE") or "(empty)"
        code = codes.setdefault(code, code)  # one string per op code, not one per row
        op_type = cols.cell(cells, "OP TYPE")
        dev = _device(cols, cells)
        if "signpost" in op_type:
            rows.append(ReportRow(n, code, dev, "signpost"))
            continue
        if not _is_device_op(op_type, code):
            rows.append(ReportRow(n, code, dev, "host op"))
            continue
        arch = cols.cell(cells, "DEVICE ARCH").lower()
        if arch and arch not in archs:
            archs[arch] = n
            if len(archs) > 1:
                raise ValueError(f"{path}: column 'DEVICE ARCH': several architectures {sorted(archs)} (line "
                                 f"{n}); expected one per report")
            assumed, fitted = fitted, _fitted_hw(path, arch, hw, force_arch, warnings)
            if assumed is not None and assumed != fitted:
                raise ValueError(f"{path}: line {n}, column 'DEVICE ARCH': {arch!r} after device rows without an "
                                 f"architecture (read as {assumed.name}); expected one DEVICE ARCH on every row")
        if dev is not None:
            ids.add(dev)
        cores = finite(cols.cell(cells, "AVAILABLE WORKER CORE COUNT"))
        if cores is not None and cores > most_cores[1]:
            most_cores = (n, cores)
        bad = _invalid(cols.cell(cells, DURATION), cols.cell(cells, GAP))
        if bad and require_durations:
            invalid_lines.append(n)
            rows.append(ReportRow(n, code, dev, "invalid device duration"))
            continue
        us = None if bad else float(cols.cell(cells, DURATION)) / 1e3
        if us is not None and us <= 0:
            rows.append(ReportRow(n, code, dev, "zero device duration"))
            continue
        if fitted is None:  # no DEVICE ARCH so far: a Blackhole report is assumed (warned below)
            fitted = _fitted_hw(path, "", hw, force_arch, warnings)
        # a digest, not the cells: a report of unique rows would otherwise keep every row's text
        key = hashlib.blake2b("\x1f".join([cells[j] if j < len(cells) else "" for j in cols.signature]).encode(),
                              digest_size=16).digest()
        if key not in seen:
            ln = ReportLine(cols, cells, n, str(path), decode_position=decode_position)
            seen[key] = (*_classified(ln, fitted, code), tt_perf_report_ideal_us(ln, fitted))
        spec, status, ideal = seen[key]
        rows.append(ReportRow(n, code, dev, status, spec, us, ideal))
    if not rows:
        raise ValueError(f"{path}: no data rows")
    if not archs:
        warnings.insert(0, "no DEVICE ARCH in the report: assumed a Blackhole report")
    arch = next(iter(archs), "blackhole")
    fitted = fitted or _fitted_hw(path, arch, hw, force_arch, warnings)
    n, cores = most_cores
    if cores > fitted.grid_cores and not force_arch:
        raise ValueError(f"{path}: line {n}, column 'AVAILABLE WORKER CORE COUNT': {cores:g} cores exceed "
                         f"{fitted.name}'s {fitted.grid_cores}-core grid; wrong --hw?")
    if device_id == "first":  # the lowest DEVICE ID (tt-perf-report merges devices; the model is one chip)
        keep = min(ids) if ids else None
    elif device_id == "all":
        keep = None
    elif device_id == "max":  # each op once, from its slowest device
        keep, rows = None, slowest_device_rows(rows, warnings)
    else:
        keep = int(device_id)
        if keep not in ids:
            raise ValueError(f"device-id={device_id}: not in the report (DEVICE IDs {sorted(ids)})")
    if keep is not None and len(ids) > 1:
        other = f"other device (DEVICE ID != {keep}; --device-id all keeps them)"
        rows = [ReportRow(r.line, r.op_code, r.device_id, other)
                if r.device_id != keep and r.status not in ("signpost", "host op") else r for r in rows]
        invalid_lines = [r.line for r in rows if r.status == "invalid device duration"]
    # rows a kernel change prices differently, in a report of a build that may predate it
    warnings += older_kernel_warning(header, [getattr(r.spec, "inner", r.spec) for r in rows if r.status == MODELLED])
    if invalid_lines:
        shown = ", ".join(map(str, invalid_lines[:8])) + (", ..." if len(invalid_lines) > 8 else "")
        warnings.append(f"{len(invalid_lines)} rows had invalid device durations (column {DURATION!r} missing, "
                        f"non-finite or negative, or the row inside a trace window) and were dropped: lines {shown}")
    return Report(str(path), fitted, arch, tuple(rows), tuple(warnings))


FASTER_COPY = "other device (a faster device's copy of the op; --device-id max keeps each op's slowest)"
# op codes whose merged duration tt-perf-report takes as the devices' mean, not their maximum (merge_device_rows)
MEAN_MERGED = ("AllGather", "ReduceScatter", "AllReduce")


def slowest_device_rows(rows: list[ReportRow], warnings: list[str]) -> list[ReportRow]:
    """A multi-device report's rows merged as tt-perf-report merges them (``merge_device_rows``,
    tt_perf_report/perf_report.py): each device's device-op rows in report order are stepped through
    together; at each step the devices whose next op is the first device's op give one row each, and the
    slowest of them (a row without a duration counts as faster than any) is kept, for the gathers and
    reductions (``MEAN_MERGED``) the first device's row with the devices' mean duration instead; the other
    copies become ``FASTER_COPY``. A device whose next op differs waits for a later step (a warning names
    the first such op). Signposts and host ops are kept."""
    queues: dict[int, list[ReportRow]] = {}
    for r in rows:
        if r.status not in ("signpost", "host op") and r.device_id is not None:
            queues.setdefault(r.device_id, []).append(r)
    if len(queues) < 2:
        return rows
    devices, heads, out = sorted(queues), dict.fromkeys(queues, 0), {}
    mismatch = None
    while any(heads[d] < len(queues[d]) for d in devices):
        block, code = [], None
        for d in devices:
            if heads[d] >= len(queues[d]):
                continue
            r = queues[d][heads[d]]
            if code is None:
                code = r.op_code
            elif r.op_code != code:
                mismatch = mismatch or (code, r.line)
                continue
            block.append(r)
            heads[d] += 1
        if any(name in code for name in MEAN_MERGED):
            src = block[0]
            us = [r.duration_us for r in block if r.duration_us is not None]
            kept = dataclasses.replace(src, duration_us=sum(us) / len(us) if us else None)
        else:
            src = kept = max(block, key=lambda r: -1.0 if r.duration_us is None else r.duration_us)
        for r in block:
            out[r.line] = kept if r is src else ReportRow(r.line, r.op_code, r.device_id, FASTER_COPY)
    if mismatch is not None:
        warnings.append(f"--device-id max: the devices' op sequences differ (first at line {mismatch[1]}, where "
                        f"another device runs {mismatch[0]}): merged as tt-perf-report merges them")
    return [out.get(r.line, r) for r in rows]


def _fitted_hw(path: pathlib.Path, arch: str, hw: Blackhole | None, force_arch: bool, warnings: list[str]) -> Blackhole:
    """The hardware a report of DEVICE ARCH ``arch`` ('' if none) is fitted on; ValueError if refused."""
    arch = arch or "blackhole"
    if arch not in ARCH_HW and not force_arch:
        raise ValueError(f"{path}: column 'DEVICE ARCH' is {arch!r}; expected a Blackhole report ('blackhole', "
                         "'p150*', 'p100*'): the model is of Blackhole, so another architecture's timings are "
                         "refused (pass --force-arch to fit them anyway)")
    if arch not in ARCH_HW:
        warnings.append(f"DEVICE ARCH {arch!r} fitted with the Blackhole model (--force-arch)")
    if hw is None:
        return blackhole(ARCH_HW.get(arch, "p150a"))
    if arch in ARCH_HW and ARCH_HW[arch] == "p100a" and hw.name != "p100a":
        raise ValueError(f"{path}: column 'DEVICE ARCH' is {arch!r} (a p100) but the hardware fitted is {hw.name}")
    return hw


def tt_perf_report_ideal_us(ln: ReportLine, hw: Blackhole) -> float | None:
    """tt-perf-report's ideal time (us) of a row, its DRAM % and FLOPs % read as a time: for an op code
    containing 'Matmul' (not 'SparseMatmul', whose work needs the active experts), the larger of the
    padded bytes of the operands in DRAM (input 0, input 1, output; bytes per element = the digits of
    the data type / 8, else 4) at the board's DRAM peak and 2*M*K*N*W*Z at the per-fidelity matmul rate
    of CORE COUNT cores (a DRAM-sharded config: one worker per DRAM bank). None for other ops, and,
    as tt-perf-report, for a row whose shape or fidelity it cannot read (never an error)."""
    code = ln.get("OP CODE")
    if "Matmul" not in code or "SparseMatmul" in code:
        return None
    tensors = ("INPUT_0", "INPUT_1", "OUTPUT_0")
    try:
        shapes = {pre: ln.shape(pre) for pre in tensors}
    except ValueError:
        return None
    (w0, z0, m, k), (w1, z1, _, n) = shapes["INPUT_0"], shapes["INPUT_1"]

    def size(pre: str) -> float:
        digits = re.search(r"\d+", ln.get(f"{pre}_DATATYPE"))
        return int(digits.group()) / 8 if digits else 4.0
    dram = sum(math.prod(shapes[pre]) * size(pre) for pre in tensors if "DRAM" in ln.memory(pre))
    times = [dram / hw.dram_peak_bytes_per_s] if dram > 0 else []
    cores = finite(ln.get("CORE COUNT"))
    if "MatmulMultiCoreReuseMultiCastDRAMShardedProgramConfig" in ln.attrs:
        cores = float(hw.dram_banks)
    fidelity = ln.get("MATH FIDELITY")
    if cores and fidelity in FIDELITY_PASSES:
        rate = hw.matmul_flops_per_cycle_per_core * hw.clock_hz / FIDELITY_PASSES[fidelity] * cores
        times.append(2 * m * k * n * max(w0, w1) * max(z0, z1) / rate)
    return 1e6 * max(times) if times else None


def _classified(ln: ReportLine, hw: Blackhole, code: str) -> tuple[object | None, str]:
    """(spec, 'modelled') or (None, skip reason) of one row. A row that ran on a smaller worker grid
    than the chip's (AVAILABLE WORKER CORE COUNT) is classified and priced on that grid (``ChipSpec``)."""
    grid = _report_grid(ln, hw)
    board = hw if grid is None else dataclasses.replace(hw, grid_x=grid[0], grid_y=grid[1])
    try:
        spec = _classify(ln, board, code)
    except Skip as s:
        return None, str(s)
    cores = finite(ln.get("CORE COUNT"))
    if cores is not None and cores < model_cores(spec, board):
        return None, "core split differs from the model's (CORE COUNT below the cores the model splits over)"
    return (spec if grid is None else ChipSpec(spec, hw.name, grid)), MODELLED


GRID_IN_ATTRS = (r"compute_with_storage_grid_size=\(x=(\d+);y=(\d+)\)",
                 r"worker_grid': '\{\[\(x=0;y=0\) - \(x=(\d+);y=(\d+)\)\]\}")


def _report_grid(ln: ReportLine, hw: Blackhole) -> tuple[int, int] | None:
    """The (x, y) worker grid a row ran on when its AVAILABLE WORKER CORE COUNT is not the chip's:
    the grid its attributes name (a program config's, a binary op's worker grid) when that many
    cores, else the widest x <= the chip's that divides the count. None on the chip's own grid."""
    avail = finite(ln.get("AVAILABLE WORKER CORE COUNT"))
    if avail is None or avail >= hw.grid_cores:  # more than the chip: refused for the file (read_report)
        return None
    if not (avail.is_integer() and avail >= 1):
        raise ln.fail("AVAILABLE WORKER CORE COUNT", f"{avail:g}: expected an integer in [1, {hw.grid_cores}]")
    n = int(avail)
    for i, pattern in enumerate(GRID_IN_ATTRS):
        m = re.search(pattern, ln.attrs)
        if m is not None:
            gx, gy = int(m.group(1)) + i, int(m.group(2)) + i  # worker_grid names the last core (inclusive)
            if gx * gy == n and gx <= hw.grid_x and gy <= hw.grid_y:
                return gx, gy
    for gx in range(hw.grid_x, 0, -1):
        if n % gx == 0 and n // gx <= hw.grid_y:
            return gx, n // gx
    raise ln.fail("AVAILABLE WORKER CORE COUNT", f"{n} cores do not form a grid within {hw.name}'s "
                                                 f"{hw.grid_x}x{hw.grid_y}")


def read_rows(path: str | pathlib.Path, *, hw: Blackhole | None = None, **kwargs) -> list[Row]:
    """The modelled rows of a report as fit rows (see ``read_report``)."""
    return read_report(path, hw=hw, **kwargs).measured_rows()
