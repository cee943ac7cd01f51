"""split_kv_attention_sharded on 8 fake CPU devices (a subprocess, so this test module cannot
change the device count other test modules see)."""

import json
import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jaxref.attention import attention_reference, split_kv_attention_sharded
    assert jax.device_count() == 8, jax.devices()
    rng = np.random.default_rng(0)
    rows = []
    for C, P, T, S, causal, placement, reduce, axis_type in [
            (4, 2, 1, 37, True, "round_robin", "tree", "Explicit"),
            (2, 4, 6, 29, True, "contiguous", "all_to_all", "Auto")]:
        mesh = jax.make_mesh((C, P), ("cube", "pe"), axis_types=(getattr(jax.sharding.AxisType, axis_type),) * 2)
        q, k, v = (jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((T, 8, 16), (S, 2, 16), (S, 2, 16)))
        kw = dict(causal=causal, tile=3, q_block=2, placement=placement, start_cube=1, start_pe=1, reduce=reduce)
        out, lse = jax.jit(lambda q, k, v: split_kv_attention_sharded(q, k, v, mesh=mesh, **kw))(q, k, v)
        ref, ref_lse = jax.jit(lambda q, k, v: attention_reference(q, k, v, causal=causal))(q, k, v)
        rows.append(dict(C=C, P=P, out=float(jnp.abs(out - ref).max() / jnp.abs(ref).max()),
                         lse=float(jnp.abs(lse - ref_lse).max() / jnp.abs(ref_lse).max())))
    print(json.dumps(rows))
""")


def test_shard_map_split_kv_matches_reference_on_8_fake_devices():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len(rows) == 2
    for row in rows:
        assert row["out"] <= 1e-5 and row["lse"] <= 1e-5, row
