"""The collectives of a lowered StableHLO program, to check a sharded algorithm's schedule against
what the program really sends.

``program_collectives`` reads the text of ``jax.jit(f).lower(...).as_text()``:

* ``collective_permute`` ops: their source-target pairs and operand bytes give the bytes each
  device sends; rounds = max(dependency depth of the permutes, permutes one device sends in) - a
  device sends one message per round, and a message that needs an earlier one waits for it;
* ``all_reduce`` ops: how many (their dependency chain) and their operand bytes per device.

``decode_rows`` lowers ``SplitKVSharded`` (T = 1, Llama3-70B heads: K = 8, G = 8,
H = 128) on C x P devices for every reduce (``tree`` = 2-level reduce-to-root, ``all_to_all`` =
fan-out, ``all_reduce`` = one ``pmax`` + one ``psum``) and puts the program's counts next to
``SplitKV.schedule``'s plan (``ReducePlan``): rounds and, per device, the messages it sends x
``payload_bytes``. For ``all_reduce`` the plan models the collective as recursive doubling; the
program fixes only the operand bytes (the runtime picks the algorithm).
"""

from __future__ import annotations

import re

import numpy as np

from jaxref.attention.reduce import REDUCES

DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4, "i64": 8, "i1": 1}


def tensor_bytes(t: str) -> int:
    """Bytes of a StableHLO type ``tensor<1x2x18xf32>``."""
    *dims, dtype = t.split("x")
    n = 1
    for d in dims:
        n *= int(d)
    return n * DTYPE_BYTES[dtype]


def source_target_pairs(attr: str) -> list[tuple[int, int]]:
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
            pending["bytes"] = sum(tensor_bytes(t) for t in re.findall(r"tensor<([^>]*)>", line.split("->")[0]))
            found.append(pending)
            pending = None
        if not m:
            continue
        results = re.findall(r"%[\w]+", m.group(1))
        rhs = m.group(2)
        d = max((depth.get(x, 0) for x in re.findall(r"%[\w]+", rhs.split("<{")[0].split("({")[0])), default=0)
        if '"stablehlo.collective_permute"' in rhs:
            d += 1
            pairs = source_target_pairs(rhs.split("source_target_pairs = ")[1])
            arg_types = rhs.rsplit(" : (", 1)[1].split(")")[0]
            found.append({"op": "collective_permute", "pairs": pairs, "depth": d,
                          "bytes": sum(tensor_bytes(t) for t in re.findall(r"tensor<([^>]*)>", arg_types))})
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
    """Lower every (C, reduce) and compare with the schedule (needs C * P devices, ``max(cubes) * pes``).

    One dict per (C, reduce): ``C``, ``P``, ``reduce`` and either ``rejected`` (the schedule's error:
    C without a rectangular CUBE-group sub-mesh) or ``program_*`` (``summarize``) and ``schedule_rounds``,
    ``schedule_payload_bytes``, ``schedule_bytes_per_device_max``.
    """
    import jax
    import jax.numpy as jnp

    from jaxref.attention import AttentionGeometry, SplitKV, SplitKVSharded

    g = AttentionGeometry.llama3_70b()
    q = jax.ShapeDtypeStruct(g.q_shape(1), jnp.float32)
    kv = jax.ShapeDtypeStruct(g.kv_shape(seq_len), jnp.float32)
    rows = []
    for C in cubes:
        for kind in REDUCES:
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
