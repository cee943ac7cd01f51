"""Section 1's decode-SP collectives table: the lowered program's rounds and bytes next to the schedule.

``jaxref.testing.collectives.decode_rows`` lowers ``SplitKVSharded`` on C x P fake CPU
devices (P = 8) for every reduce and reads the collectives back from the StableHLO text. It runs in
a fresh process (``python -m experiments.report.sections.collectives C,C,... P S``, printing the rows as
JSON): the device count is fixed when JAX starts. C = 5 and 7 have no rectangular CUBE-Group
sub-mesh in the 4x4 SIP and are reported as rejected.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from experiments.report.render import md_table
from jaxref.attention.distributed import fake_cpu_env
from jaxref.validation import dumps_strict

PES = 8


def problem(quick: bool) -> dict:
    """C = 1, 2, 4, 8 at S = 1024 (``quick``) or C = 1..8 at S = 4096; P = 8."""
    return {"pes": PES, "cubes": [1, 2, 4, 8] if quick else list(range(1, 9)), "seq_len": 1024 if quick else 4096}


def run_subprocess(pes: int, cubes: list[int], seq_len: int) -> list[dict]:
    """``decode_rows`` in a fresh process with ``pes * max(cubes)`` fake CPU devices."""
    n = pes * max(cubes)
    env = fake_cpu_env(n)
    args = [sys.executable, "-m", "experiments.report.sections.collectives", ",".join(map(str, cubes)), str(pes), str(seq_len)]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False,
                         cwd=pathlib.Path(__file__).resolve().parents[3])
    if res.returncode:
        raise RuntimeError(f"collectives subprocess failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    """One Markdown row per (C, reduce)."""
    cells = []
    for r in rows:
        head = [r["C"], r["P"], r["reduce"]]
        if "rejected" in r:
            cells.append([*head, "rejected", "", r["rejected"][:60]])
        elif r["reduce"] == "all_reduce":
            rounds = f"{r['program_all_reduce_depth']} chained all-reduces / {r['schedule_rounds']} doubling rounds"
            sent = (f"{r['program_all_reduce_bytes']} per pass / payload {r['schedule_payload_bytes']} "
                    f"(x {r['schedule_rounds']} rounds = {r['schedule_bytes_per_device_max']})")
            cells.append([*head, rounds, sent, f"{r['program_all_reduces']} all_reduce"])
        else:
            cells.append([*head, f"{r['program_rounds']} / {r['schedule_rounds']}",
                          f"{r['program_bytes_per_device_max']} / {r['schedule_bytes_per_device_max']}",
                          f"{r['program_permutes']} collective_permute ({r['program_permute_pairs']} pairs)"])
    return md_table(["C", "P", "reduce", "rounds: program / schedule",
                     "bytes sent per device (max): program / schedule", "collectives in program"], cells)


def collectives_part(quick: bool) -> tuple[str, dict]:
    """(Markdown, results) of the decode-SP reduce table; ``ok`` when every non-rejected row's program
    matches its schedule (rounds and bytes for tree / fan-out, one payload per pass for all-reduce)."""
    p = problem(quick)
    rows = run_subprocess(p["pes"], p["cubes"], p["seq_len"])
    ok = all("rejected" in r or (r["program_all_reduce_bytes"] == r["schedule_payload_bytes"]
                                 if r["reduce"] == "all_reduce" else
                                 (r["program_rounds"], r["program_bytes_per_device_max"])
                                 == (r["schedule_rounds"], r["schedule_bytes_per_device_max"])) for r in rows)
    text = "\n".join([
        "### Decode-SP collectives: lowered program vs schedule", "",
        (f"Reduce of the (m, l, O) partials of `SplitKVSharded` (T = 1, Llama3-70B heads, "
         f"S = {p['seq_len']}) on a ('cube', 'pe') mesh of fake CPU devices, P = {p['pes']}, read from the lowered "
         "StableHLO, next to `SplitKV.schedule`'s plan. For all-reduce the plan models recursive doubling; the "
         "program fixes only the operand bytes."), "",
        table(rows), "",
        f"**Program matches schedule: {'yes' if ok else 'no'}.**"])
    return text, {"rows": rows, "all_met": ok, **p}


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: ``CUBES PES SEQ_LEN`` -> the rows as one JSON line (needs the devices)."""
    from jaxref.testing.collectives import decode_rows

    cubes, pes, seq_len = (sys.argv[1:] if argv is None else argv)
    print(dumps_strict(decode_rows(int(pes), [int(c) for c in cubes.split(",")], int(seq_len))))


if __name__ == "__main__":
    main()
