"""AHBM kernel model: ADR properties, ragged tiles against jaxref's plans, the mechanisms, gradients vs
differences. (The model-vs-event-simulation grid is tests of ``costmodel.ahbm.simulate``.)"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import evaluate, knobs_of, static_of
from costmodel.hardware import ahbm_sip, float_fields
from costmodel.smooth import Relax
from jaxref.attention import Flash, KVPlacement, SplitKV

HW = ahbm_sip()
FULL_HW = dataclasses.replace(HW, commands=("composite", "ex_composite"), sips=8)  # opt2 built, C = 16 fits
SLOW_HW = dataclasses.replace(FULL_HW, cpu_issue_s=20e-9, cpu_issue_composite_s=60e-9,
                              cube_noc_bytes_per_s=4e9)  # issue-bound, ring comm exposed

GRID = [
    AhbmConfig("decode", 8192, tile=64, pipeline="opt1"),
    AhbmConfig("decode", 8193, batch=2, tile=256, pipeline="opt2"),
    AhbmConfig("decode", 2048, tile=32, pipeline="opt3"),
    AhbmConfig("decode_sp", 65536, tile=128, cubes=8, pes=8, pipeline="opt3"),
    AhbmConfig("decode_sp", 4099, tile=32, cubes=4, pes=2, pipeline="opt2", reduce="all_to_all"),
    AhbmConfig("decode_sp", 1024, tile=64, cubes=16, pes=8, pipeline="opt1", reduce="all_reduce"),
    AhbmConfig("prefill", 1000, tile=32, pipeline="opt3"),
    AhbmConfig("prefill", 1024, tile=32, pipeline="opt2"),
    AhbmConfig("prefill_sp", 1024, tile=64, cubes=8, pes=4, pipeline="opt3"),
    AhbmConfig("prefill_sp", 1024, tile=32, cubes=8, pes=2, pipeline="opt2"),
    AhbmConfig("prefill_sp", 512, tile=64, cubes=2, pes=1, pipeline="opt1", model="alpamayo"),
]


def test_eager_discrete_config_equals_the_batched_graph_bit_for_bit():
    """An eager evaluation of a discrete config traces only its own pipelining option
    (``cases._per_option``); a vmapped batch traces all three and weighs them. Every output agrees
    bit for bit. (Not decode-SP: at concrete values its reduce's queue order is replayed from the
    ranks' own sweep ends, which traced configs cannot do: ``tune.exhaustive``.)"""
    hw = FULL_HW  # opt2 built: every option legal
    # decode (decode-SP's sweep is the same code), prefill and a small ring, with options 2 and 3
    for cfg in (GRID[1], GRID[2], GRID[7], GRID[10]):
        knobs, static = knobs_of(cfg), static_of(cfg)
        eager = case_latency(hw, knobs, **static)
        batched = jax.vmap(lambda k, st=static: case_latency(hw, k, **st))(jax.tree.map(lambda x: jnp.asarray(x)[None], knobs))
        assert set(eager) == set(batched)
        for key in eager:
            np.testing.assert_array_equal(np.asarray(eager[key]), np.asarray(batched[key])[0], err_msg=f"{cfg} {key}")


@pytest.mark.parametrize("cfg,relax", [
    (AhbmConfig("decode_sp", 4099, tile=64, cubes=4, pes=2, pipeline="opt3"), None),  # a second rank's ragged sweep
    (AhbmConfig("decode_sp", 3001, tile=64, cubes=2, pes=4, pipeline="opt1", placement="contiguous", capacity=4096),
     None),
    (AhbmConfig("prefill", 1000, tile=32, pipeline="opt3"), None),  # five tile kinds, ragged rows and keys
    (AhbmConfig("prefill", 1000, tile=32, pipeline="opt3"), Relax()),  # (the descent's graph batches them too)
    (AhbmConfig("prefill_sp", 1000, tile=32, cubes=2, pes=2, pipeline="opt3", model="alpamayo"), None),  # a ragged ring
], ids=lambda x: f"{x.case}-{x.seq_len}-{x.placement}" if isinstance(x, AhbmConfig) else ("relaxed" if x else "exact"))
def test_the_staged_graph_equals_the_eager_evaluation(cfg, relax):
    """Staged for compiling (``jit``, ``make_jaxpr``), the model traces its repeated terms once,
    batched (``cases._each``: a second rank's sweep, the tile kinds, a tile and its masked twin, the
    ring's full and last q blocks); eagerly it calls them one by one. The staged program, run op by
    op (``jax.core.eval_jaxpr``: no compiler rewrites), gives every output bit for bit."""
    knobs = knobs_of(cfg) if relax is None else {**knobs_of(cfg), "w": jnp.full((3,), 1.0 / 3)}
    fn = lambda k: case_latency(FULL_HW, k, **static_of(cfg), relax=relax)
    closed, shape = jax.make_jaxpr(fn, return_shape=True)(knobs)
    staged = jax.tree.unflatten(jax.tree.structure(shape),
                                jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *jax.tree.leaves(knobs)))
    eager = fn(knobs)
    assert set(eager) == set(staged)
    for key in eager:
        np.testing.assert_array_equal(np.asarray(staged[key]), np.asarray(eager[key]), err_msg=key)


@pytest.mark.parametrize("case,kw", [("decode", {}), ("decode_sp", {"cubes": 4, "pes": 8}), ("prefill", {}),
                                     ("prefill_sp", {"cubes": 8, "pes": 2})])
def test_latency_monotone_in_seq_len(case, kw):
    Ss = [2**k + 7 * k for k in range(10, 21, 2)]  # ragged (not powers of two)
    tile = 32 if case == "prefill" else 64
    lats = [evaluate(AhbmConfig(case, S, tile=tile, **kw))["latency_us"] for S in Ss]
    assert all(b > a for a, b in itertools.pairwise(lats)), lats


def test_causal_skip_roughly_halves_prefill_compute():
    on = evaluate(AhbmConfig("prefill", 8192, tile=32))
    off = evaluate(AhbmConfig("prefill", 8192, tile=32, causal_skip=False))
    n = 8192 // 32
    assert on["rooflines_us"]["gemm"] / off["rooflines_us"]["gemm"] == pytest.approx((n + 1) / (2 * n), rel=1e-5)
    assert 0.45 < on["breakdown"]["sweep_us"] / off["breakdown"]["sweep_us"] < 0.6


@pytest.mark.parametrize("S,tile,C,P", [(129, 64, 1, 1), (8193, 128, 1, 1), (12288, 1024, 1, 1), (3000, 64, 8, 8),
                                        (777777, 448, 4, 8), (1000, 32, 2, 4)])
def test_ragged_decode_tiles_and_keys_match_the_plan(S, tile, C, P):
    """Tile count and charged KV bytes equal the real ones of SplitKV.schedule's critical rank."""
    case = "decode" if C * P == 1 else "decode_sp"
    sched = SplitKV(tile=tile, num_cubes=C, pes_per_cube=P).schedule(1, S)
    r = evaluate(AhbmConfig(case, S, tile=tile, cubes=C, pes=P))
    assert r["breakdown"]["tiles"] == sched.critical_path_tiles
    keys = -(-S // (C * P))  # the longest rank's keys, read K and V once each
    rate = float(HW.pe_controller_bytes_per_s * HW.hbm_efficiency)
    io = 2 * 8 * 128 * 2  # Q load and O store
    assert r["rooflines_us"]["hbm"] == pytest.approx(1e6 * (2 * keys * 128 * 2 + io) / rate, rel=1e-5)


@pytest.mark.parametrize("S,tile", [(129, 32), (1000, 64), (8193, 32), (2999, 64)])
def test_ragged_prefill_tiles_match_flash_schedule(S, tile):
    sched = Flash(tile, tile).schedule(S, S, causal=True)
    assert evaluate(AhbmConfig("prefill", S, tile=tile, pipeline="opt1"))["breakdown"]["tiles"] == sched.tiles_computed


@settings(max_examples=25, deadline=None)
@given(case=st.sampled_from(["decode", "decode_sp", "prefill"]), logS=st.integers(10, 20), ragged=st.integers(0, 63),
       logT=st.integers(5, 10), scale=st.lists(st.floats(0.25, 4.0), min_size=4, max_size=4),
       issue_ns=st.floats(0.0, 50.0), composite_ns=st.floats(0.0, 200.0))
# counterexamples hypothesis found against earlier opt3 closed forms (prefill with fast GEMM and MATH)
@example(case="prefill", logS=10, ragged=0, logT=5, scale=[1.0, 4.0, 2.0, 1.0], issue_ns=0.0, composite_ns=0.0)
@example(case="prefill", logS=10, ragged=0, logT=5, scale=[1.0, 2.0, 1.25, 1.0], issue_ns=0.0, composite_ns=0.0)
def test_opt3_never_slower_than_opt1(case, logS, ragged, logT, scale, issue_ns, composite_ns):
    hw = dataclasses.replace(HW, pe_controller_bytes_per_s=HW.pe_controller_bytes_per_s * scale[0],
                             gemm_flops_per_cycle_per_pe=HW.gemm_flops_per_cycle_per_pe * scale[1],
                             math_elems_per_cycle_per_pe=HW.math_elems_per_cycle_per_pe * scale[2],
                             dma_local_latency_s=HW.dma_local_latency_s * scale[3], cpu_issue_s=issue_ns * 1e-9,
                             cpu_issue_composite_s=composite_ns * 1e-9)
    kw = {"cubes": 4, "pes": 8} if case == "decode_sp" else {}
    tile = min(2**logT, 32) if case == "prefill" else 2**logT
    lat = {p: float(case_latency(hw, knobs_of(AhbmConfig(case, 2**logS + ragged, tile=tile, pipeline=p, **kw)),
                                 case=case)["total"]) for p in ("opt1", "opt3")}
    assert lat["opt3"] <= lat["opt1"] * (1 + 1e-6), lat


# C 16 x P 8 at one S only: its all-to-all replay (16 k messages) is most of this test's time
@pytest.mark.parametrize("S,C,P", [(S, C, P) for S in (1000, 65536, 1048576)
                                   for C, P in ((2, 8), (4, 4), (8, 2), (1, 8), (8, 8))] + [(1000, 16, 8)])
def test_reduce_to_root_never_slower_than_fan_out(S, C, P):
    lat = {r: evaluate(AhbmConfig("decode_sp", S, tile=128, cubes=C, pes=P, reduce=r), FULL_HW)["breakdown"]
           ["reduce_us"] for r in ("tree", "all_to_all", "all_reduce")}
    assert lat["tree"] <= lat["all_to_all"] and lat["tree"] <= lat["all_reduce"], lat


def test_link_contention_slows_all_reduce_by_the_shared_port():
    """all_reduce at C 8 P 8: P messages share a CUBE's NOC port per cross-CUBE round, so its
    reduce grows by about (P - 1) payload transfers per such round against an uncontended link."""
    cfg = AhbmConfig("decode_sp", 4096, tile=64, cubes=8, pes=8, reduce="all_reduce")
    base = evaluate(cfg)["breakdown"]["reduce_us"]
    slow = evaluate(cfg, dataclasses.replace(HW, cube_noc_bytes_per_s=HW.cube_noc_bytes_per_s / 2))
    xfer = 1e6 * 8 * 130 * 4 / HW.cube_noc_bytes_per_s  # one payload at the default rate
    assert slow["breakdown"]["reduce_us"] - base >= 3 * 8 * xfer * 0.99  # 3 cross-CUBE rounds, 8 messages each
    assert evaluate(cfg)["bound"] == "links"


def test_contiguous_placement_uses_only_frontier_ranks():
    """At S < capacity only ceil(S / B) ranks hold keys (KVPlacement.valid_len), so the sweep is
    longer than round-robin's; at S = capacity the two charge the same critical rank."""
    S, cap, C, P = 3000, 32768, 8, 8
    pl = KVPlacement(num_cubes=C, pes_per_cube=P, capacity=cap, layout="contiguous")
    keys = max(pl.valid_len(S, r) for r in range(C * P))
    cont = evaluate(AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P, placement="contiguous", capacity=cap))
    rr = evaluate(AhbmConfig("decode_sp", S, tile=64, cubes=C, pes=P))
    assert cont["breakdown"]["tiles"] == -(-keys // 64)
    assert cont["latency_us"] > 2 * rr["latency_us"]
    full = evaluate(AhbmConfig("decode_sp", cap, tile=64, cubes=C, pes=P, placement="contiguous"))
    assert full["latency_us"] == pytest.approx(evaluate(AhbmConfig("decode_sp", cap, tile=64, cubes=C, pes=P))
                                               ["latency_us"], rel=1e-6)


def test_streaming_depth_and_bound():
    """Run-ahead depth 1 (no overlap inside a composite) is slower than double buffering, deeper
    never slower; long decode is GEMM-bound at the assumed rate and HBM-bound at 8x it."""
    cfg = AhbmConfig("decode", 1 << 17, tile=512)
    lat = [evaluate(cfg, dataclasses.replace(HW, composite_runahead_subtiles=k))["latency_us"] for k in (1, 2, 4, 8)]
    assert lat[0] > 1.2 * lat[1] and all(b <= a * (1 + 1e-6) for a, b in itertools.pairwise(lat)), lat
    r = evaluate(cfg)
    assert r["bound"] == "gemm" and all(v <= r["latency_us"] * (1 + 1e-6) for v in r["rooflines_us"].values())
    fast = evaluate(cfg, dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=8 * HW.gemm_flops_per_cycle_per_pe))
    assert fast["bound"] == "hbm" and 0.5 < fast["bound_fraction"] <= 1 + 1e-6  # never below its roofline


def test_ring_blocks_in_tcm_or_staged_in_hbm():
    """A ring block is 2 x S / C x d x 2 B: 2 MiB at S = 32k, C = 8 (staged in HBM, at a cost);
    at S = 2k they fit next to the working set and stay in TCM."""
    big = evaluate(AhbmConfig("prefill_sp", 32768, tile=64, cubes=8, pes=8))
    small = evaluate(AhbmConfig("prefill_sp", 2048, tile=64, cubes=8, pes=8))
    assert 2 * 32768 // 8 * 128 * 2 > HW.tcm_bytes_per_pe and not big["breakdown"]["ring_blocks_in_tcm"]
    assert small["breakdown"]["ring_blocks_in_tcm"]
    deep = evaluate(AhbmConfig("prefill_sp", 32768, tile=64, cubes=8, pes=8),
                    dataclasses.replace(HW, ring_recv_depth=3))["latency_us"]
    assert deep <= big["latency_us"] * (1 + 1e-6)


def test_infeasible_configs_raise_clear_errors():
    with pytest.raises(ValueError, match=r"tcm: tile=256 infeasible.*TCM"):
        evaluate(AhbmConfig("prefill", 4096, tile=256))
    with pytest.raises(ValueError, match=r"tile=48 must be 32 or a multiple of 64"):
        AhbmConfig("decode", 4096, tile=48)
    with pytest.raises(ValueError, match=r"cubes=4 must equal the group size G=8"):
        AhbmConfig("prefill_sp", 4096, cubes=4)
    with pytest.raises(ValueError, match=r"case='decode' runs on one PE"):
        AhbmConfig("decode", 4096, cubes=2)
    with pytest.raises(ValueError, match=r"case='encode' unknown"):
        AhbmConfig("encode", 4096)
    with pytest.raises(ValueError, match=r"capacity=100 must be an int >= seq_len=4096"):
        AhbmConfig("decode_sp", 4096, placement="contiguous", capacity=100)
    with pytest.raises(ValueError, match=r"commands: pipeline='opt2' needs the ex_composite command"):
        evaluate(AhbmConfig("decode", 4096, pipeline="opt2"))
    with pytest.raises(ValueError, match=r"sips: 8 kv heads x cubes=16 need 128 CUBEs, more than sips=4"):
        evaluate(AhbmConfig("decode_sp", 4096, cubes=16, pes=8))
    with pytest.raises(ValueError, match=r"ring_recv_depth=1 deadlocks"):
        evaluate(AhbmConfig("prefill_sp", 4096, cubes=8), dataclasses.replace(HW, ring_recv_depth=1))


def _fd_check(f, x, names):
    """jax.grad of f at x (float64) vs central differences, skipping kinks (where the forward and
    backward differences disagree: a max or ceil switches inside the step)."""
    # op by op, not compiled: one value-and-grad and every difference in one vmapped pass (an eager
    # op costs its dispatch, whatever the batch) take seconds, where XLA takes 10-40 s to compile
    # the value-and-grad of these graphs (14k-31k operations)
    f0, g = jax.value_and_grad(f)(x)
    f0 = float(f0)
    steps = 1e-6 * np.abs(np.asarray(x))
    shifted = np.asarray(x)[None, :] + np.concatenate([np.diag(steps), -np.diag(steps)])  # [2 n, n]: x + e_i, x - e_i
    vals = np.asarray(jax.vmap(f)(jnp.asarray(shifted)))
    checked = 0
    for i, name in enumerate(names):
        h = float(steps[i])
        fwd, bwd = (float(vals[i]) - f0) / h, (f0 - float(vals[len(names) + i])) / h
        assert np.isfinite(float(g[i])), name
        if abs(fwd - bwd) > 1e-3 * max(abs(fwd), abs(bwd), 1e-9):
            continue
        fd = (fwd + bwd) / 2
        assert abs(float(g[i]) - fd) <= 0.01 * abs(fd) + 1e-9, (name, float(g[i]), fd)
        checked += 1
    return checked


@pytest.mark.parametrize("cfg", [GRID[0], GRID[3], GRID[6], GRID[10]], ids=lambda c: c.case)
def test_grad_wrt_hardware_matches_finite_differences(cfg):
    names = float_fields(HW)
    static = static_of(cfg)
    with jax.enable_x64(True):
        base = jnp.asarray([float(getattr(SLOW_HW, n)) for n in names], jnp.float64)
        knobs = {k: jnp.asarray(v, jnp.float64) for k, v in knobs_of(cfg).items()}

        def f(x):
            hw = dataclasses.replace(SLOW_HW, **{n: x[i] for i, n in enumerate(names)})
            return jnp.log(case_latency(hw, knobs, **static)["total"])

        assert _fd_check(f, base, names) >= 6


@pytest.mark.parametrize("case,kw", [("decode_sp", {"cubes": 5.3, "pes": 3.1}), ("prefill", {}),
                                     ("prefill_sp", {"cubes": 2.0, "pes": 2.6})])
def test_grad_wrt_relaxed_knobs_matches_finite_differences(case, kw):
    names = ["tile", "pes", "seq_len"]
    with jax.enable_x64(True):
        x0 = jnp.asarray([50.3, kw.get("pes", 1.0), 3000.37], jnp.float64)  # off the integers (ceil kinks)

        def f(x):
            knobs = {"tile": x[0], "pes": x[1], "seq_len": x[2], "batch": jnp.float64(1), "capacity": x[2],
                     "cubes": jnp.float64(kw.get("cubes", 1.0)), "w": jnp.asarray([0.2, 0.5, 0.3], jnp.float64)}
            model = "alpamayo" if case == "prefill_sp" else "llama3_70b"  # C = G = 2: a small ring, quick to compile
            return jnp.log(case_latency(FULL_HW, knobs, case=case, model=model, relax=Relax())["total"])

        assert _fd_check(f, x0, names) >= 2
