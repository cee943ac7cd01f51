"""The decode-SP reduce on meshes of up to 64 fake CPU devices (P = 8, C = 1, 2, 4, 8; its own process):
``jaxref.testing.collectives.decode_rows`` reads the lowered program's rounds and bytes per device, which
equal the schedule's for tree and fan-out; the all-reduce moves exactly one (m, l, O) payload per pass
in two chained collectives. (The 8-device mesh checks against hand formulas are in
``test_attention_distributed.py``.)"""

import json
import math
import subprocess
import sys

from jaxref.attention.distributed import fake_cpu_env
from jaxref.attention.reduce import cube_mesh_shape

CODE = ("import json; from jaxref.testing.collectives import decode_rows; "
        "print(json.dumps(decode_rows(8, [1, 2, 4, 8], 1024)))")


def test_decode_reduce_program_reads_back_its_schedule_up_to_64_devices():
    env = fake_cpu_env(64)
    res = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=600,
                         check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert [(r["C"], r["reduce"]) for r in rows] == [(c, k) for c in (1, 2, 4, 8)
                                                     for k in ("tree", "all_to_all", "all_reduce")]
    for r in rows:
        if r["reduce"] == "all_reduce":
            assert (r["program_all_reduces"], r["program_all_reduce_depth"]) == (2, 2)
            assert r["program_all_reduce_bytes"] == r["schedule_payload_bytes"] == 8 * 1 * 8 * 130 * 4  # K T G (H+2)
        else:
            assert r["program_rounds"] == r["schedule_rounds"] > 0
            assert r["program_bytes_per_device_max"] == r["schedule_bytes_per_device_max"]
    for r in rows:  # tree: ceil(log2 P) PE rounds + the CUBE mesh's center-root depth (hand formula)
        if r["reduce"] == "tree":
            rows_c, cols_c = cube_mesh_shape(r["C"])
            assert r["program_rounds"] == math.ceil(math.log2(8)) + cols_c // 2 + rows_c // 2
