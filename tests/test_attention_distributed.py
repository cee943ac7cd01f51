"""Sharded attention on 8 fake CPU devices: ring and decode-SP against the dense reference, ring
gradients, and the collectives of the lowered program against hand-derived counts.

Everything runs in ONE subprocess (the device count is fixed when JAX starts, and other test modules
must keep seeing one device); the tests below assert on its JSON output."""

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

from jaxref.attention import AttentionGeometry, Ring
from jaxref.attention.distributed import fake_cpu_env
from jaxref.attention.registry import sharded

SCRIPT = textwrap.dedent("""
    import json
    import jax, jax.numpy as jnp, numpy as np
    from jaxref.testing.collectives import program_collectives, summarize
    import functools, sys
    sys.path.insert(0, "tests")
    from _attention_util import dense_bf16, numpy_attention
    from jaxref.attention import RingSharded, SplitKVSharded, attention_reference, causal_mask
    from jaxref.attention.registry import sharded
    assert jax.device_count() == 8, jax.devices()
    rng = np.random.default_rng(0)
    out = {"ring": [], "decode": [], "grad": [], "program": [], "errors": [], "contract": {}}

    def qkv(T, S, N, K, H):
        return tuple(jnp.asarray(rng.standard_normal(s), jnp.float32) for s in ((T, N, H), (S, K, H), (S, K, H)))

    def mesh(C, P, explicit=False):
        t = jax.sharding.AxisType.Explicit if explicit else jax.sharding.AxisType.Auto
        return jax.make_mesh((C, P), ("cube", "pe"), axis_types=(t, t), devices=jax.devices()[:C * P])

    def err(a, b):
        return float(jnp.abs(a - b).max())

    # Ring: C = 2, 4, 8 (P = 8 / C PEs split the query rows) x every ordering, causal and not in turn:
    # every pair of the three options' values is run (each program compiles for seconds on 8 devices).
    q, k, v = qkv(16, 21, 16, 2, 8)  # G = 8; T = 16 < S = 21 (chunked prefill, bottom-right causal)
    for i, C in enumerate((2, 4, 8)):
        for j, ordering in enumerate(("contiguous", "zigzag", "striped")):
            causal = (i + j) % 2 == 1
            m = mesh(C, 8 // C, explicit=C == 4 and causal)
            f = jax.jit(functools.partial(RingSharded.on(m, ordering=ordering, tile=4, q_block=4), causal=causal))
            o, l = f(q, k, v)
            ro, rl = attention_reference(q, k, v, causal=causal)
            out["ring"].append(dict(C=C, causal=causal, ordering=ordering, out=err(o, ro), lse=err(l, rl)))
    # Gradients through the ring (C < G: 2 q heads per CUBE) against the dense reference's.
    q, k, v = qkv(8, 8, 8, 2, 8)
    w = jnp.asarray(rng.standard_normal((8, 8, 8)), jnp.float32)
    for C, P, ordering in ((2, 4, "zigzag"), (4, 2, "contiguous")):
        m = mesh(C, P)
        def loss(fn):
            return lambda q, k, v: jnp.sum(jnp.sin(fn(q, k, v)[0]) * w)
        ring = loss(functools.partial(RingSharded.on(m, ordering=ordering, tile=2), causal=True))
        dense = loss(lambda q, k, v: attention_reference(q, k, v, causal=True))
        # q and (k, v) in two programs: each then ends in one collective off the mesh (XLA:CPU may
        # order independent collectives differently per fake device and stall).
        g1 = jax.jit(jax.grad(ring, 0))(q, k, v), *jax.jit(jax.grad(ring, (1, 2)))(q, k, v)
        g2 = jax.jit(jax.grad(dense, (0, 1, 2)))(q, k, v)
        out["grad"].append(dict(C=C, P=P, err=max(err(a, b) for a, b in zip(g1, g2)),
                                scale=max(float(jnp.abs(b).max()) for b in g2)))
    # Decode-SP: every (cube, pe) mesh of 8 devices x every reduce.
    q, k, v = qkv(2, 45, 8, 2, 16)
    for C, P in ((1, 8), (2, 4), (4, 2), (8, 1)):
        for reduce in ("tree", "all_to_all", "all_reduce"):
            m = mesh(C, P)
            f = jax.jit(functools.partial(SplitKVSharded.on(m, tile=4, placement="contiguous", start_cube=C - 1,
                                                            reduce=reduce), causal=True))
            o, l = f(q, k, v)
            ro, rl = attention_reference(q, k, v, causal=True)
            out["decode"].append(dict(C=C, P=P, reduce=reduce, out=err(o, ro), lse=err(l, rl)))
            text = f.lower(q, k, v).as_text()
            out["program"].append(dict(kind="decode", C=C, P=P, reduce=reduce,
                                       **summarize(program_collectives(text), C * P)))
    # Ring programs: permutes, their pairs and the conds of per-device skips (contiguous causal, T = S).
    q, k, v = qkv(16, 16, 16, 2, 8)
    for C, P in ((2, 4), (4, 2), (8, 1)):
        m = mesh(C, P)
        text = jax.jit(functools.partial(RingSharded.on(m, tile=4), causal=True)).lower(q, k, v).as_text()
        out["program"].append(dict(kind="ring", C=C, P=P, conds=text.count('"stablehlo.case"')
                                   + text.count('"stablehlo.if"'),
                                   **summarize(program_collectives(text), C * P)))
    # Clear errors.
    q, k, v = qkv(6, 16, 16, 2, 8)
    for name, fn in [
            ("axes", lambda: RingSharded.on(jax.make_mesh((8,), ("x",)))(q, k, v)),
            ("divide_G", lambda: RingSharded.on(mesh(2, 1))(*qkv(6, 16, 12, 4, 8))),  # G = 3
            ("divide_T", lambda: RingSharded.on(mesh(2, 4))(q, k, v)),  # T = 6, P = 4
            ("causal_T", lambda: RingSharded.on(mesh(2, 1))(q, k[:4], v[:4], causal=True)),
            ("reduce", lambda: SplitKVSharded.on(mesh(2, 4), reduce="ring")(q, k, v)),
            ("cube_mesh", lambda: SplitKVSharded.on(mesh(2, 4), cube_mesh=(2, 2))(q, k, v)),
            ("pes", lambda: SplitKVSharded.on(jax.make_mesh((1, 8), ("pe", "cube")))(q, k, v)),
            ("unbound", lambda: SplitKVSharded()(q, k, v)),
            ("mesh_mismatch", lambda: SplitKVSharded(num_cubes=4, pes_per_cube=2, mesh=mesh(2, 4)))]:
        try:
            fn()
            out["errors"].append(dict(name=name, raised=None))
        except ValueError as e:
            out["errors"].append(dict(name=name, raised=str(e)))
    # The contract of every sharded registry entry (as test_attention_contract.py's single-device one).
    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))

    def nan_pattern_equal(a, b):
        return bool(np.array_equal(np.isnan(np.asarray(a)), np.isnan(np.asarray(b))))

    T, S, N, K, H = 12, 29, 8, 2, 8
    for name, impl in sharded().items():
        attn = impl.bind(mesh(*impl.mesh))
        row = {}
        q, k, v = qkv(T, S, N, K, H)
        for causal in (False, True):
            o, l = jax.jit(functools.partial(attn, causal=causal))(q, k, v)
            ro, rl = attention_reference(q, k, v, causal=causal)
            no, nl = numpy_attention(q, k, v, np.asarray(causal_mask(T, S))[None] if causal else None)
            row[f"causal={causal}"] = dict(ref=max(rel(o, ro), rel(l, rl)), numpy=max(rel(o, no), rel(l, nl)))
        kn = k.at[19, 1, 2].set(jnp.nan)
        o, l = jax.jit(functools.partial(attn, causal=True))(q, kn, v)
        ro, rl = attention_reference(q, kn, v, causal=True)
        row["nan"] = dict(same_pattern=nan_pattern_equal(o, ro) and nan_pattern_equal(l, rl),
                          any_nan=bool(np.isnan(np.asarray(o)).any()))
        qb, kb, vb = (x.astype(jnp.bfloat16) for x in qkv(24, 61, N, K, 64))
        ro, _ = attention_reference(*(x.astype(jnp.float32) for x in (qb, kb, vb)), causal=True)
        o, _ = jax.jit(functools.partial(attn, causal=True))(qb, kb, vb)
        row["bf16"] = dict(err=rel(o, ro), dense=rel(dense_bf16(qb, kb, vb, causal=True), ro))
        raised = {}
        for what, fn in (("int", lambda: attn(q.astype(jnp.int32), k, v)),
                         ("mask", lambda: attn(q, k, v, mask=np.ones((N, T, S), bool))),
                         ("float_mask", lambda: attn(q, k, v, mask=np.zeros((N, T, S), np.float32))),
                         ("bool_bias", lambda: attn(q, k, v, bias=np.zeros((N, T, S), bool)))):
            try:
                fn()
                raised[what] = None
            except (ValueError, TypeError) as e:
                raised[what] = f"{type(e).__name__}: {e}"
        row["raised"] = raised
        # Extreme / non-finite scores against the reference (one compile, three inputs of one shape).
        f = jax.jit(functools.partial(attn, scale=1.0))
        G = N // K
        extreme = {}
        qa, ka = np.abs(np.asarray(q)), np.asarray(k).copy()
        qa[:, G:, 0], ka[:, 1, 0] = -1.0, np.inf  # kv head 1: every score -inf
        qf, kf = np.zeros_like(qa), np.zeros_like(ka)
        qf[..., 0], kf[..., 0] = -2e19, 1e19  # every score -2e38 (below -1.19e38)
        vh = np.sign(np.asarray(v)) * 3e38
        for case, args in (("neg_inf", (qa, ka, v)), ("below_floor", (qf, kf, v)), ("huge_v", (q, k, vh))):
            args = tuple(jnp.asarray(x, jnp.float32) for x in args)
            o, l = f(*args)
            ro, rl = attention_reference(*args, scale=1.0)
            fin = np.isfinite(np.asarray(ro))
            extreme[case] = dict(pattern=nan_pattern_equal(o, ro) and nan_pattern_equal(l, rl)
                                 and bool(np.array_equal(np.isfinite(np.asarray(o)), fin)),
                                 ref_nan=bool(np.isnan(np.asarray(ro)).any()),
                                 err=rel(np.asarray(o)[fin], np.asarray(ro)[fin]) if fin.any() else 0.0)
        row["extreme"] = extreme
        out["contract"][name] = row
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def results():
    env = fake_cpu_env(8)
    res = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                         timeout=900, check=False, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert res.returncode == 0, res.stderr[-4000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_ring_on_a_mesh_equals_dense_reference(results):
    rows = results["ring"]
    assert len(rows) == 9
    pairs = lambda a, b: {(r[a], r[b]) for r in rows}
    assert len(pairs("C", "ordering")) == 9 and len(pairs("C", "causal")) == 6 and len(pairs("ordering", "causal")) == 6
    for r in rows:
        assert r["out"] <= 1e-5 and r["lse"] <= 1e-5, r


def test_ring_gradients_equal_dense_reference(results):
    assert len(results["grad"]) == 2
    for r in results["grad"]:
        assert r["scale"] > 0.1 and r["err"] <= 1e-5 * max(1.0, r["scale"]), r


def test_decode_sp_on_every_mesh_and_reduce_equals_dense_reference(results):
    rows = results["decode"]
    assert len(rows) == 12
    for r in rows:
        assert r["out"] <= 1e-5 and r["lse"] <= 1e-5, r


def _decode_program(results, C, P, reduce):
    return next(r for r in results["program"] if r["kind"] == "decode" and (r["C"], r["P"], r["reduce"]) == (C, P, reduce))


@pytest.mark.parametrize("C,P", [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_decode_program_collectives_match_the_reduce_schedule(results, C, P):
    from jaxref.attention.reduce import cube_mesh_shape

    rows, cols = cube_mesh_shape(C)
    # Tree: ceil(log2 P) PE rounds + center-root depth cols // 2 + rows // 2 (hand formula, ADR section 4).
    tree = _decode_program(results, C, P, "tree")
    assert tree["rounds"] == math.ceil(math.log2(P)) + cols // 2 + rows // 2
    assert tree["permute_pairs"] == C * P - 1 and tree["all_reduces"] == 0  # every rank but the root sends once
    fan = _decode_program(results, C, P, "all_to_all")
    assert fan["rounds"] == fan["permutes"] == C * P - 1 and fan["permute_pairs"] == (C * P) * (C * P - 1)
    assert fan["bytes_per_device_max"] == (C * P - 1) * tree["bytes_per_device_max"]
    ar = _decode_program(results, C, P, "all_reduce")
    # pmax of m, then psum of the rescaled (O, l): one partial's (H + 2) floats per row in all.
    assert (ar["permutes"], ar["all_reduces"], ar["all_reduce_depth"]) == (0, 2, 2)
    assert ar["all_reduce_bytes"] == tree["bytes_per_device_max"] == 2 * 2 * 4 * (16 + 2) * 4  # K T G (H+2) fp32


def _ring_skips(C, P, T=16, S=16):
    """Independent oracle (contiguous causal, T = S): device (c, p) at step s holds block (c - s) mod C
    = positions [b B, (b + 1) B); it skips when the block starts after its last query row."""
    B, rows = -(-S // C), T // P
    return [[[((c - s) % C) * B > (p + 1) * rows - 1 + (S - T) for p in range(P)] for c in range(C)]
            for s in range(C)]


@pytest.mark.parametrize("C,P", [(2, 4), (4, 2), (8, 1)])
def test_ring_program_has_c_minus_1_handoffs_and_a_cond_per_mixed_step(results, C, P):
    prog = next(r for r in results["program"] if r["kind"] == "ring" and (r["C"], r["P"]) == (C, P))
    skip = _ring_skips(C, P)
    mixed = sum(0 < sum(map(sum, skip[s])) < C * P for s in range(C))
    # C - 1 hand-offs, each c -> c + 1 on every PE; no (m, l, O) reduce (the one all-reduce gathers the
    # per-device outputs off the mesh); one cond per step some devices skip.
    assert (prog["permutes"], prog["permute_pairs"], prog["all_reduces"]) == (C - 1, P * C * (C - 1), 1)
    assert prog["conds"] == mixed
    # The single-device ring's schedule: C - 1 rotations; a CUBE sends its K and V blocks (fp32 here).
    sched = Ring(tile=4, num_cubes=C).schedule(16, 16, AttentionGeometry(16, 2, 8), causal=True, dtype_bytes=4)
    assert sched.kv_rotations == prog["permutes"] and prog["bytes_per_device_max"] * C == sched.ring_bytes
    if P > 1:  # query rows split over PEs: early rows skip whole future blocks
        assert sum(map(sum, (map(sum, st) for st in skip))) > 0 and mixed > 0
    else:  # one device holds all rows of its heads: no block is wholly future for it
        assert mixed == 0


def test_sharded_attention_rejects_bad_meshes_and_lengths(results):
    errs = {r["name"]: r["raised"] for r in results["errors"]}
    assert "mesh.axis_names=('x',)" in errs["axes"]
    assert "num_cubes=2 must divide the group size G=3" in errs["divide_G"]
    assert "q.shape[0]=6 query rows must divide evenly over the mesh's pe axis of size 4" in errs["divide_T"]
    assert "causal=True needs q.shape[0]=6 <= S=4" in errs["causal_T"]
    assert "reduce='ring' unknown" in errs["reduce"]
    assert "cube_mesh=(2, 2) holds 4 CUBEs, expected num_cubes=2" in errs["cube_mesh"]
    assert "mesh.axis_names=('pe', 'cube')" in errs["pes"]
    assert "mesh=None: bind" in errs["unbound"]
    assert "mesh shape (2, 4) must equal (num_cubes, pes_per_cube)=(4, 2)" in errs["mesh_mismatch"]


@pytest.mark.parametrize("name", list(sharded()))
def test_sharded_entry_keeps_the_attention_contract(results, name):
    """Forward + lse vs the reference and the numpy oracle (causal and not), NaN in one valid key
    propagates as in the reference, bf16 within 2x of dense bf16, integer inputs and masks refused,
    extreme scores / values as the reference (issue 30)."""
    row = results["contract"][name]
    for causal in ("causal=False", "causal=True"):
        assert row[causal]["ref"] <= 1e-5 and row[causal]["numpy"] <= 1e-5, row
    assert row["nan"]["same_pattern"] and row["nan"]["any_nan"], row
    assert 1e-4 < row["bf16"]["err"] <= 2 * row["bf16"]["dense"], row
    assert "q.dtype=int32 must be a floating dtype" in row["raised"]["int"]
    assert "takes no bias / mask" in row["raised"]["mask"]
    # One meaning for masks and biases (issue 30): a float mask / bool bias is a TypeError here too.
    assert row["raised"]["float_mask"].startswith("TypeError: mask.dtype=float32 must be bool"), row
    assert row["raised"]["bool_bias"].startswith("TypeError: bias.dtype=bool must be a floating dtype"), row
    # Extreme / non-finite scores as the reference: all -inf -> NaN, below -1.19e38 -> mean(v), 3e38 stays.
    ext = row["extreme"]
    assert ext["neg_inf"]["ref_nan"] and not ext["below_floor"]["ref_nan"] and not ext["huge_v"]["ref_nan"], ext
    for case in ext.values():
        assert case["pattern"] and case["err"] <= 1e-5, ext

