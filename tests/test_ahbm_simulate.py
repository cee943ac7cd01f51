"""The AHBM event simulation (``costmodel.ahbm.sim``): independence from the analytic model, its
engines against SimPy's own resources, its aggregation against full simulation, and its results
against hand-counted rooflines, byte counts and link loads from the geometry and the spec."""

import ast
import dataclasses
import json
import math
import pathlib
import subprocess
import sys

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.ahbm import cli
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.sim import simulate
from costmodel.ahbm.sim.engines import FifoServer
from costmodel.ahbm.sim.kernels import ring_cycle
from costmodel.ahbm.sim.rates import SimRates
from costmodel.ahbm.sim.tile_loop import run_visit
from costmodel.ahbm.sim.visits import EXACT_TILES, VisitCache
from costmodel.hardware import ahbm_sip
from jaxref.attention import Flash

HW = ahbm_sip()
OPT2 = ("composite", "ex_composite")
SIM_DIR = pathlib.Path(__file__).resolve().parents[1] / "costmodel" / "ahbm" / "sim"
MODEL_MODULES = {"costmodel.ahbm.model", "costmodel.ahbm.cases", "costmodel.ahbm.counts", "costmodel.ahbm.pipeline",
                 "costmodel.ahbm.config", "costmodel.ahbm.tune", "costmodel.ahbm.sensitivity", "costmodel.ahbm.cli"}


# ---- independence ----------------------------------------------------------------------------------
def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            names.add(node.module or "")
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_simulation_imports_nothing_from_the_model():
    files = sorted(SIM_DIR.glob("*.py"))
    assert len(files) >= 5
    for f in files:
        for name in _imports(f):
            assert name.startswith(("costmodel.ahbm.sim", "costmodel.hardware", "jaxref.attention", "simpy")) \
                or not name.startswith(("costmodel", "jaxref", "experiments")), (f.name, name)
    # and at run time: importing the simulation loads none of the model's modules
    code = ("import sys, costmodel.ahbm.sim, costmodel.ahbm.simulate; "
            "print(sorted(m for m in sys.modules if m.startswith('costmodel.ahbm')))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120,
                         cwd=SIM_DIR.parents[2]).stdout
    loaded = set(eval(out))
    assert loaded & MODEL_MODULES == set(), loaded


# ---- engines ----------------------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 5), st.floats(0.01, 3)), min_size=1, max_size=25))
def test_fifo_server_books_exactly_like_a_simpy_resource(stream):
    """Requests (arrival, service): grant / release times of a FIFO simpy.Resource(1)."""
    def run(use_resource):
        env = simpy.Environment()
        res, srv, ends = simpy.Resource(env, 1), FifoServer(env), {}

        def customer(i, arrive, service):
            yield env.timeout(arrive)
            if use_resource:
                with res.request() as r:
                    yield r
                    yield env.timeout(service)
            else:
                yield env.timeout(srv.reserve(service) - env.now)
            ends[i] = env.now

        for i, (a, s) in enumerate(stream):
            env.process(customer(i, a, s))
        env.run()
        return ends

    a, b = run(True), run(False)
    assert a.keys() == b.keys()
    for i in a:
        assert b[i] == pytest.approx(a[i], abs=1e-9)


# ---- aggregation ------------------------------------------------------------------------------------
@pytest.mark.parametrize("pipeline", ["opt1", "opt2", "opt3"])
@pytest.mark.parametrize("rows,keys,tail", [(8, 64, (17,)), (8, 128, ()), (64, 64, (64,))])
def test_periodic_extension_equals_the_full_simulation(pipeline, rows, keys, tail):
    rates = SimRates.of(dataclasses.replace(HW, cpu_issue_s=7e-9, cpu_issue_composite_s=30e-9, commands=OPT2))
    n = EXACT_TILES + 29  # odd, past the exact range
    ks = (keys,) * n + tail
    ms = (False,) * n + (True,) * len(tail)
    cache = VisitCache(rates, 128, pipeline)
    got = cache.stats(rows, ks, ms, "flash")
    assert cache.extrapolated == 1 and cache.simulated_tiles < 20 * n
    full = run_visit(rates, rows=rows, d=128, keys=ks, masked=ms, pipeline=pipeline, kind="flash")
    for k in full:
        assert got[k] == pytest.approx(full[k], rel=1e-9), k


# ---- hand-counted oracles ----------------------------------------------------------------------------
def _engine_tiles(m, kd, n, hw=HW):
    return math.ceil(m / hw.gemm_tile_m) * math.ceil(kd / hw.gemm_tile_k) * math.ceil(n / hw.gemm_tile_n)


@pytest.mark.parametrize("S,tile", [(129, 64), (1000, 128), (3000, 256), (8193, 64)])
@pytest.mark.parametrize("pipeline", ["opt1", "opt2", "opt3"])
def test_ragged_decode_moves_real_bytes_and_runs_padded_engine_tiles(S, tile, pipeline):
    """One PE: K and V bytes are the real S keys (not whole tiles); the GEMM engine runs every
    engine tile of the real (ragged) tiles, padded; latency is above each resource's roofline."""
    G, d = 8, 128
    rates = SimRates.of(dataclasses.replace(HW, commands=OPT2))
    tiles = [tile] * (S // tile) + ([S % tile] if S % tile else [])
    st_ = run_visit(rates, rows=G, d=d, keys=tuple(tiles), masked=(False,) * len(tiles), pipeline=pipeline,
                    kind="decode")
    assert st_["hbm_bytes"] == 2 * S * d * 2 + G * d * 2  # K, V and the Q rows
    gemm_tiles = sum(_engine_tiles(G, d, k) + _engine_tiles(G, k, d) for k in tiles)
    sub_us = 2 * HW.gemm_tile_m * HW.gemm_tile_k * HW.gemm_tile_n / (HW.gemm_flops_per_cycle_per_pe * HW.pe_clock_hz) * 1e6
    assert st_["gemm_busy_us"] == pytest.approx(gemm_tiles * sub_us, rel=1e-9)
    hbm_roof = st_["hbm_bytes"] / (float(HW.pe_controller_bytes_per_s) * float(HW.hbm_efficiency)) * 1e6
    assert st_["us"] >= max(hbm_roof, st_["gemm_busy_us"], st_["math_busy_us"]) - 1e-9
    total = simulate(AhbmConfig("decode", S, tile=tile, pipeline=pipeline), dataclasses.replace(HW, commands=OPT2))
    assert total["plan_tiles"] == len(tiles)
    assert total["latency_us"] > st_["us"]  # plus the normalise and store


def test_hbm_bound_sweep_streams_at_the_controller_rate():
    """With fast engines and a deep run-ahead a long sweep runs at the HBM controller's rate: its
    time tends to bytes / (controller x efficiency) (the only exposed extra is the pipeline fill)."""
    hw = dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=HW.gemm_flops_per_cycle_per_pe * 1e3,
                             math_elems_per_cycle_per_pe=HW.math_elems_per_cycle_per_pe * 1e3,
                             tcm_bytes_per_s=HW.tcm_bytes_per_s * 1e3, commands=OPT2)
    rates = dataclasses.replace(SimRates.of(hw), run_ahead=64)
    S, tile = 1 << 16, 256
    out = VisitCache(rates, 128, "opt2").stats(8, (tile,) * (S // tile), (False,) * (S // tile), "decode")
    roof = (2 * S * 128 * 2 + 8 * 128 * 2) / (float(HW.pe_controller_bytes_per_s) * float(HW.hbm_efficiency)) * 1e6
    assert roof <= out["us"] <= roof * 1.02 + 1.0


@pytest.mark.parametrize("pipeline", ["opt2", "opt3"])  # opt1 waits for each Q.K^T: MATH idles by design
def test_math_bound_sweep_keeps_math_busy(pipeline):
    """With MATH the binding engine (GEMM and HBM 10x faster, the TCM port as specified) the
    steady tile period of a prefill-sized sweep is MATH's own work per tile: the ready-order TCM
    port never holds a P.V's write-back behind a Q.K^T write-back still waiting for its scale
    epilogue (booked ahead, it left MATH idle 25% of the time under opt3)."""
    fast = 10.0
    hw = dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=HW.gemm_flops_per_cycle_per_pe * fast,
                             pe_controller_bytes_per_s=HW.pe_controller_bytes_per_s * fast,
                             pseudo_channel_bytes_per_s=HW.pseudo_channel_bytes_per_s * fast)
    rates = SimRates.of(dataclasses.replace(hw, commands=OPT2))
    runs = {n: run_visit(rates, rows=256, d=128, keys=(32,) * n, masked=(False,) * n, pipeline=pipeline, kind="flash")
            for n in (8, 16)}
    period = (runs[16]["us"] - runs[8]["us"]) / 8
    math_per_tile = (runs[16]["math_busy_us"] - runs[8]["math_busy_us"]) / 8
    assert math_per_tile * (1 - 1e-9) <= period <= 1.02 * math_per_tile


def test_run_ahead_hides_dma_latency():
    """Sub-tiles of 8 / 16 KiB take 40 / 80 ns on the controller but land 77 ns later: with one
    operand buffer a composite exposes the latency on every sub-tile, with more it streams."""
    hw = dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=HW.gemm_flops_per_cycle_per_pe * 1e3,
                             math_elems_per_cycle_per_pe=HW.math_elems_per_cycle_per_pe * 1e3)
    n, tile = 40, 256
    t = {depth: run_visit(dataclasses.replace(SimRates.of(hw), run_ahead=depth), rows=8, d=128, keys=(tile,) * n,
                          masked=(False,) * n, pipeline="opt1", kind="decode")["us"] for depth in (1, 2, 8, 32)}
    assert t[1] > t[2] > t[8] >= t[32]
    bw = float(HW.pe_controller_bytes_per_s) * float(HW.hbm_efficiency) / 1e6  # B/us
    lat = float(HW.dma_local_latency_s) * 1e6
    qk_sub, pv_sub = tile // HW.gemm_tile_n, tile // HW.gemm_tile_k  # sub-tiles per composite
    serial = n * (qk_sub * (HW.gemm_tile_n * 128 * 2 / bw + lat) + pv_sub * (HW.gemm_tile_k * 128 * 2 / bw + lat))
    assert t[1] >= serial  # depth 1: no overlap of a sub-tile's DMA with the previous one
    assert t[32] < 0.6 * serial


def test_all_reduce_contention_on_cube_links():
    """all_reduce at C = 8 (2 x 4 sub-mesh), P = 8: recursive doubling pairs rank r with r ^ 16 in
    one round, i.e. CUBE c with c ^ 2, two hops along a row; CUBEs 0 -> 2 and 1 -> 3 both cross the
    link (0, 1) -> (0, 2), each with its 8 PEs' (O, m, l): that link carries 16 partials in one
    round, the busiest of the reduce. The CUBE's shared injection port serialises its 8 PEs'
    messages in every cross-CUBE round, so the reduce is slower than the same rounds at P = 1."""
    base = {"tile": 128, "cubes": 8, "pipeline": "opt3", "reduce": "all_reduce"}
    S = 8 * 8 * 128
    p8 = simulate(AhbmConfig("decode_sp", S, pes=8, **base), HW)
    p1 = simulate(AhbmConfig("decode_sp", S, pes=1, **base), HW)
    G, d = 8, 128
    partial = G * d * 4 + 2 * G * 4  # O, m, l in fp32
    bw = float(HW.cube_noc_bytes_per_s) / 1e6  # B/us
    assert p8["link_busy_us"] == pytest.approx(16 * partial / bw, rel=1e-9)
    assert p1["link_busy_us"] == pytest.approx(2 * partial / bw, rel=1e-9)
    cross_rounds = 3  # 8 CUBEs: partners c ^ 1, c ^ 2, c ^ 4
    assert p8["reduce_us"] - p1["reduce_us"] >= cross_rounds * 7 * partial / bw


def test_contiguous_placement_with_spare_capacity_loads_only_frontier_ranks():
    """Contiguous, capacity 4 S over R = 32 ranks: only the first R / 4 ranks hold keys, each a
    full block of capacity / R; the critical sweep is that block's, slower than round-robin's."""
    S = 4096
    cfg = AhbmConfig("decode_sp", S, tile=64, cubes=4, pes=8, pipeline="opt3")
    rr = simulate(cfg, HW)
    ct = simulate(cfg.replace(placement="contiguous", capacity=4 * S), HW)
    one = simulate(AhbmConfig("decode_sp", 4 * S // 32, tile=64, pipeline="opt3"), HW)  # R = 1
    assert ct["sweep_us"] == pytest.approx(one["sweep_us"], rel=1e-12)
    assert ct["sweep_us"] > 3.5 * rr["sweep_us"]


def test_prefill_reaches_32k_and_ring_sends_every_block():
    pre = simulate(AhbmConfig("prefill", 32768, tile=128, pipeline="opt3"), HW)
    n = 32768 // 128
    assert pre["plan_tiles"] == n * (n + 1) // 2 and pre["simulated_tiles"] < pre["plan_tiles"] / 20
    ring = simulate(AhbmConfig("prefill_sp", 4096, tile=64, cubes=8, pes=4, pipeline="opt3"), HW)
    assert ring["messages"] == 8 * 7  # K and V in one message, C - 1 hand-offs per CUBE
    assert ring["latency_us"] >= ring["sweep_us"]


@pytest.mark.parametrize("S,tile", [(129, 64), (1000, 32), (3000, 64)])
def test_ragged_prefill_moves_the_schedules_bytes(S, tile):
    """HBM bytes of a ragged causal prefill: the K / V bytes jaxref's schedule counts for one kv
    head (real keys of every computed tile) + each q block's Q rows in and O rows out."""
    sched = Flash(tile, tile).schedule(S, S, causal=True)
    G, d = 8, 128
    out = simulate(AhbmConfig("prefill", S, tile=tile, pipeline="opt3"), HW)
    assert out["hbm_bytes"] == sched.kv_bytes // sched.num_kv_heads + 2 * S * G * d * 2
    assert out["plan_tiles"] == sched.tiles_computed


@pytest.mark.parametrize("mesh", [(1, 2), (2, 2), (2, 4), (4, 2), (4, 4), (2, 3), (3, 2)])
def test_ring_cycle_neighbours_are_one_hop_apart(mesh):
    order = ring_cycle(mesh)
    assert sorted(order) == list(range(mesh[0] * mesh[1]))
    xy = [divmod(c, mesh[1]) for c in order]
    for a, b in zip(xy, xy[1:] + xy[:1]):
        assert abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1, (mesh, order)


def test_ring_receive_depth_and_tcm_staging():
    """One block buffer per CUBE serialises receive and compute (slower than ping-pong, and no
    deadlock); at S = 16k two 1 MiB K/V blocks cannot sit in 1 MiB of TCM and are staged in HBM, at
    S = 1000 it is held in TCM; the staging's contention lies between the two bounds."""
    cfg = AhbmConfig("prefill_sp", 16384, tile=128, cubes=8, pes=8, pipeline="opt3")  # 1 MiB blocks: HBM
    slow_noc = dataclasses.replace(HW, cube_noc_bytes_per_s=4e9)
    one = simulate(cfg, dataclasses.replace(slow_noc, ring_recv_depth=1))
    two = simulate(cfg, slow_noc)
    assert not one["blocks_in_tcm"] and not two["blocks_in_tcm"]
    assert one["latency_us"] > two["latency_us"]
    big = simulate(cfg, HW)
    small = simulate(AhbmConfig("prefill_sp", 1000, tile=64, cubes=8, pes=8, pipeline="opt3"), HW)
    assert not big["blocks_in_tcm"] and small["blocks_in_tcm"]
    assert big["latency_lower_us"] <= big["latency_us"] <= 1.02 * big["latency_lower_us"]
    assert small["latency_lower_us"] == small["latency_us"]


def test_gemm_order_matters_only_with_concurrent_composites():
    """opt1 never has two composites in flight, so the GEMM arbitration cannot change it; opt3 on a
    GEMM-bound decode (8 rows, tile 128: 16 engine tiles of 64 ns per tile) runs within 3% of the
    GEMM roofline when sub-tiles are served as they land, slower in strict issue order."""
    cfg = AhbmConfig("decode", 8192, tile=128, pipeline="opt1")
    assert simulate(cfg, HW)["latency_us"] == simulate(cfg, HW, gemm_order="issue")["latency_us"]
    cfg = cfg.replace(pipeline="opt3")
    sub_us = 2 * HW.gemm_tile_m * HW.gemm_tile_k * HW.gemm_tile_n / (HW.gemm_flops_per_cycle_per_pe * HW.pe_clock_hz) * 1e6
    roof = 8192 // 128 * (_engine_tiles(8, 128, 128) + _engine_tiles(8, 128, 128)) * sub_us
    ready, issue = simulate(cfg, HW)["latency_us"], simulate(cfg, HW, gemm_order="issue")["latency_us"]
    assert roof <= ready <= 1.03 * roof < issue
    with pytest.raises(ValueError, match="gemm_order='fifo' unknown"):
        simulate(cfg, HW, gemm_order="fifo")


def test_refuses_absurd_sizes_quickly():
    with pytest.raises(ValueError, match=r"seq_len=99999999999 \(capacity None\) with tile=128 is too large to simulate"):
        simulate(AhbmConfig("decode", 99999999999, tile=128), HW)
    with pytest.raises(ValueError, match="too large to simulate"):
        simulate(AhbmConfig("prefill", 1 << 20, tile=32), HW)


def test_cli_simulate_refuses_absurd_size(capsys):
    # an HBM large enough for its KV (else the capacity check refuses it first)
    assert cli.main(["eval", "--case", "decode", "--seq-len", "99999999999", "--simulate",
                     "--set", "ahbm.hbm_bytes_per_cube=1e15"]) == 2
    err = capsys.readouterr().err
    assert "error: --simulate: seq_len=99999999999 (capacity None) with tile=128 is too large to simulate" in err
    assert "Traceback" not in err


def test_cli_simulate_reports_the_simulation_of_its_config(capsys):
    argv = ["eval", "--case", "decode_sp", "--seq-len", "3000", "--tile", "64", "--cubes", "4", "--pes", "8",
            "--placement", "contiguous", "--capacity", "6000", "--simulate", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = AhbmConfig(**out["config"])
    assert cfg.placement == "contiguous" and cfg.capacity == 6000
    assert out["simulated_latency_us"] == simulate(cfg, HW)["latency_us"]
