"""Decode-SP collectives on a ('cube', 'pe') mesh, read from the lowered program, next to the schedule.

``python -m experiments.attention_collectives [--pes 8] [--max-cubes 8] [--seq-len 4096]`` lowers
``SplitKVSharded`` (T = 1, Llama3-70B heads: K = 8, G = 8, H = 128) on C x P fake CPU
devices for every reduce (``tree`` = 2-level reduce-to-root, ``all_to_all`` = fan-out,
``all_reduce`` = one ``pmax`` + one ``psum``) and reads the StableHLO text:

* ``collective_permute`` ops: their source-target pairs and operand bytes give the bytes each
  device sends; rounds = max(dependency depth of the permutes, permutes one device sends in) - a
  device sends one message per round, and a message that needs an earlier one waits for it;
* ``all_reduce`` ops: how many (their dependency chain) and their operand bytes per device.

The schedule column is ``split_kv_schedule``'s plan (``ReducePlan``): rounds and, per device, the
messages it sends x ``payload_bytes``. For ``all_reduce`` the plan models the collective as
recursive doubling (every round each device sends its accumulated partial); the program fixes only
the operand bytes (the runtime picks the algorithm), so its bytes column there is the operand
bytes of one all-reduce pass and the comparison is against ``payload_bytes``.
C = 5 and 7 have no rectangular CUBE-Group sub-mesh in the 4x4 SIP and are reported as rejected.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np

_DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "i1": 1}
REDUCE_KINDS = ("tree", "all_to_all", "all_reduce")


def _tensor_bytes(t: str) -> int:
    """Bytes of a StableHLO type ``tensor<1x2x18xf32>``."""
    *dims, dtype = t.split("x")
    n = 1
    for d in dims:
        n *= int(d)
    return n * _DTYPE_BYTES[dtype]


def _pairs(attr: str) -> list[tuple[int, int]]:
    """``dense<[[0, 1], [2, 3]]> : tensor<2x2xi64>`` or, for large ones, the hex form
    ``dense<"0x...">`` (little-endian int64) -> [(0, 1), (2, 3)]."""
    hexed = re.match(r'dense<"0x([0-9A-Fa-f]+)">', attr)
    if hexed:
        flat = np.frombuffer(bytes.fromhex(hexed.group(1)), "<i8")
        return [(int(a), int(b)) for a, b in flat.reshape(-1, 2)]
    return [(int(a), int(b)) for a, b in re.findall(r"\[(\d+), (\d+)\]", attr.split(">")[0])]


def program_collectives(text: str) -> list[dict]:
    """Collectives of a lowered StableHLO module, in program order: dicts with ``op``
    ('collective_permute' | 'all_reduce'), ``pairs`` (source, target) for permutes, ``bytes``
    (operand bytes per device) and ``depth`` (collectives on the longest def-use chain up to and
    including this one)."""
    depth: dict[str, int] = {}
    found: list[dict] = []
    pending = None  # an all_reduce whose operand types follow its reduction region
    for line in text.splitlines():
        m = re.match(r"\s*((?:%[\w]+(?::\d+)?(?:, )?)+) = (.*)$", line)
        if pending is not None and line.lstrip().startswith("})") and " : (" in line:
            pending["bytes"] = sum(_tensor_bytes(t) for t in re.findall(r"tensor<([^>]*)>", line.split("->")[0]))
            found.append(pending)
            pending = None
        if not m:
            continue
        results = re.findall(r"%[\w]+", m.group(1))
        rhs = m.group(2)
        d = max((depth.get(x, 0) for x in re.findall(r"%[\w]+", rhs.split("<{")[0].split("({")[0])), default=0)
        if '"stablehlo.collective_permute"' in rhs:
            d += 1
            pairs = _pairs(rhs.split("source_target_pairs = ")[1])
            arg_types = rhs.rsplit(" : (", 1)[1].split(")")[0]
            found.append({"op": "collective_permute", "pairs": pairs, "depth": d,
                          "bytes": sum(_tensor_bytes(t) for t in re.findall(r"tensor<([^>]*)>", arg_types))})
        elif '"stablehlo.all_reduce"' in rhs:
            d += 1
            pending = {"op": "all_reduce", "pairs": [], "depth": d}
        for r in results:
            depth[r] = d
    return found


def summarize(colls: list[dict], num_devices: int) -> dict:
    """Rounds and bytes per device of a program's collectives (see the module docstring)."""
    perms = [c for c in colls if c["op"] == "collective_permute"]
    sent_bytes, sent_msgs = [0] * num_devices, [0] * num_devices
    for c in perms:
        for src, _ in c["pairs"]:
            sent_bytes[src] += c["bytes"]
            sent_msgs[src] += 1
    ars = [c for c in colls if c["op"] == "all_reduce"]
    return {"permutes": len(perms), "permute_pairs": sum(len(c["pairs"]) for c in perms),
            "rounds": max([max(sent_msgs)] + [c["depth"] for c in perms]) if perms else 0,
            "bytes_per_device_max": max(sent_bytes), "all_reduces": len(ars),
            "all_reduce_depth": max((c["depth"] for c in ars), default=0),
            "all_reduce_bytes": sum(c["bytes"] for c in ars)}


def decode_rows(pes: int, cubes: list[int], seq_len: int) -> list[dict]:
    """Lower every (C, reduce) and compare with the schedule (needs C * P devices)."""
    import jax
    import jax.numpy as jnp

    from jaxref.attention import AttentionGeometry, SplitKV, SplitKVSharded

    g = AttentionGeometry.llama3_70b()
    q = jax.ShapeDtypeStruct(g.q_shape(1), jnp.float32)
    kv = jax.ShapeDtypeStruct(g.kv_shape(seq_len), jnp.float32)
    rows = []
    for C in cubes:
        for kind in REDUCE_KINDS:
            row = {"C": C, "P": pes, "reduce": kind}
            try:
                sched = SplitKV(num_cubes=C, pes_per_cube=pes, reduce=kind).schedule(1, seq_len, g, acc_bytes=4)
            except ValueError as e:
                rows.append({**row, "rejected": str(e)})
                continue
            mesh = jax.make_mesh((C, pes), ("cube", "pe"), devices=jax.devices()[: C * pes])
            fn = jax.jit(SplitKVSharded.on(mesh, reduce=kind))
            prog = summarize(program_collectives(fn.lower(q, kv, kv).as_text()), C * pes)
            row.update({f"program_{k}": v for k, v in prog.items()})
            row.update(schedule_rounds=sched.reduce_rounds, schedule_payload_bytes=sched.payload_bytes,
                       schedule_bytes_per_device_max=max(sched.reduce.sends_per_rank()) * sched.payload_bytes)
            rows.append(row)
    return rows


def markdown(rows: list[dict]) -> str:
    head = ("| C | P | reduce | rounds: program / schedule | bytes sent per device (max): program / schedule "
            "| collectives in program |\n|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        if "rejected" in r:
            lines.append(f"| {r['C']} | {r['P']} | {r['reduce']} | rejected | | {r['rejected'][:60]} |")
        elif r["reduce"] == "all_reduce":
            lines.append(f"| {r['C']} | {r['P']} | all_reduce | {r['program_all_reduce_depth']} chained all-reduces"
                         f" / {r['schedule_rounds']} doubling rounds | {r['program_all_reduce_bytes']} per pass / "
                         f"payload {r['schedule_payload_bytes']} (x {r['schedule_rounds']} rounds = "
                         f"{r['schedule_bytes_per_device_max']}) | {r['program_all_reduces']} all_reduce |")
        else:
            lines.append(f"| {r['C']} | {r['P']} | {r['reduce']} | {r['program_rounds']} / {r['schedule_rounds']} | "
                         f"{r['program_bytes_per_device_max']} / {r['schedule_bytes_per_device_max']} | "
                         f"{r['program_permutes']} collective_permute ({r['program_permute_pairs']} pairs) |")
    return head + "\n".join(lines) + "\n"


def run_subprocess(pes: int, cubes: list[int], seq_len: int) -> list[dict]:
    """``decode_rows`` in a fresh process with C * P fake CPU devices (the device count is fixed
    when JAX starts)."""
    n = pes * max(cubes)
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}", "JAX_PLATFORMS": "cpu"}
    args = [sys.executable, "-m", "experiments.attention_collectives", "--json", "--pes", str(pes),
            "--seq-len", str(seq_len), "--cubes", ",".join(map(str, cubes))]
    res = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, check=False,
                         cwd=pathlib.Path(__file__).resolve().parents[1])
    if res.returncode:
        raise RuntimeError(f"attention_collectives subprocess failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> dict:
    """Report section: the decode-SP reduce table (no hardware numbers: ``overrides`` unused)."""
    cubes = [1, 2, 4, 8] if quick else list(range(1, 9))
    rows = run_subprocess(8, cubes, 1024 if quick else 4096)
    text = ("Decode-SP reduce of the (m, l, O) partials on a ('cube', 'pe') mesh, P = 8, read from the "
            "lowered StableHLO of `SplitKVSharded` next to `SplitKV.schedule`'s plan.\n\n"
            + markdown(rows))
    return {"markdown": text, "results": {"rows": rows}, "figures": []}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pes", type=int, default=8)
    ap.add_argument("--max-cubes", type=int, default=8)
    ap.add_argument("--cubes", type=str, default=None, help="comma-separated C values (default 1..max-cubes)")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON (in-process; needs the devices)")
    args = ap.parse_args(argv)
    for name in ("pes", "max_cubes", "seq_len"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"--{name.replace('_', '-')}={getattr(args, name)} must be a positive int")
    cubes = [int(c) for c in args.cubes.split(",")] if args.cubes else list(range(1, args.max_cubes + 1))
    if args.json:
        print(json.dumps(decode_rows(args.pes, cubes, args.seq_len)))
        return
    print(markdown(run_subprocess(args.pes, cubes, args.seq_len)))


if __name__ == "__main__":
    main()
