"""The decoder layer on the AHBM mesh: the analytic model (costmodel.ahbm.layer) against hand-derived
numbers, its rooflines, monotonicity, the event simulation (costmodel.ahbm.sim.layer), bad input and
the HBM capacity check."""

from __future__ import annotations

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from costmodel.ahbm.layer import evaluate_layer, gemm_times, part_times
from costmodel.ahbm.layer_plan import Attention, Gemm, LayerConfig, MeshSpec, plan
from costmodel.ahbm.sim.layer import simulate_layer
from costmodel.hardware import ahbm_sip
from experiments import ahbm_token

HW = ahbm_sip()
MESH = MeshSpec()
K = 1024


def _non_attention(hw, layer):
    return {p.name: part_times(hw, p, MESH) for p in layer.parts if not isinstance(p, Attention)}


def test_one_sub_tile_gemm_is_dma_then_gemm_then_write_back():
    """32 x 64 x 32 on one PE, no DMA latency: 8 KB in (weights + activations, 4 chunks of 256 B on
    each of 8 pseudo-channels at 32 GB/s x 0.8), one engine tile (64 cycles at 1 GHz), 2 KB out."""
    hw = dataclasses.replace(HW, dma_local_latency_s=0.0)
    t = gemm_times(hw, Gemm("g", rows=32, k=64, n=32, m_block=32))
    ch = 32e9 * 0.8
    expect = (4 * 256 / ch + 64e-9 + 256 / ch) * 1e6
    assert float(t["total"]) == pytest.approx(expect, rel=1e-6)
    assert float(t["gemm"]) == pytest.approx(2 * 32 * 64 * 32 / 2048e9 * 1e6, rel=1e-6)
    assert float(t["hbm"]) == pytest.approx((64 * 32 * 2 + 32 * 64 * 2 + 32 * 32 * 2) / (256e9 * 0.8) * 1e6, rel=1e-6)


def test_decode_gemms_hand_numbers():
    """Llama-3-70B decode on 1 SIP: QKV is 8192 x 10240 over 128 PEs = 80 columns (padded to 96),
    M = 1 padded to 32: 2 x 32 x 8192 x 96 / 2.048 TFLOP/s = 24.576 us (GEMM-bound: its 1.31 MB of
    weights take 6.4 us at 204.8 GB/s); with a 16x engine the weight stream bounds it."""
    layer = plan(LayerConfig("decode", 8 * K, sips=1, attn_tile=512), HW, MESH)
    qkv = next(p for p in layer.parts if p.name == "qkv")
    assert (qkv.k, qkv.n) == (8192, 80)
    t = gemm_times(HW, qkv)
    assert float(t["gemm"]) == pytest.approx(24.576, rel=1e-6)
    assert 24.576 <= float(t["total"]) <= 24.576 * 1.02
    fast = dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=16 * HW.gemm_flops_per_cycle_per_pe)
    # 128 sub-tiles of 64 x 80 weights + 64 activations = 10368 B = 40 chunks of 256 B + 128 B: channel
    # 0 of 8 gets 5 chunks + the 128 B, 1408 B at 32 GB/s x 0.8 (55 ns); with 2 operand buffers a
    # sub-tile's buffer comes back after DMA + 77 ns latency + its 12 ns GEMM: (55 + 77 + 12) / 2 ns each
    a, e = 1408 / (32e9 * 0.8), 2 * 32 * 64 * 96 / (16 * 2048e9)
    cycle_us = 128 * (a + 77e-9 + e) / 2 * 1e6
    assert cycle_us <= float(gemm_times(fast, qkv)["total"]) <= cycle_us * 1.05


RATES = {"gemm_flops_per_cycle_per_pe": HW.gemm_flops_per_cycle_per_pe, "math_elems_per_cycle_per_pe": 64.0,
         "cube_noc_bytes_per_s": 128e9, "ucie_bytes_per_s": 128e9, "cube_hop_latency_s": HW.cube_hop_latency_s,
         "dma_local_latency_s": 77e-9, "dma_remote_sip_latency_s": 409e-9}
PLANS = [plan(LayerConfig("decode", 8 * K, batch=b, sips=n, attn_tile=512), HW, MESH) for b, n in ((1, 1), (4, 4))]
PLANS.append(plan(LayerConfig("prefill", 2 * K, sips=2, attn_tile=64), HW, MESH))


@settings(max_examples=10, deadline=None)
@given(st.lists(st.floats(0.25, 16.0), min_size=len(RATES) + 1, max_size=len(RATES) + 1), st.integers(0, 2))
def test_every_part_is_at_least_its_rooflines(scales, which):
    hbm = scales[-1] if scales[-1] <= 4 else scales[-1] / 4
    hw = dataclasses.replace(HW, pe_controller_bytes_per_s=256e9 * hbm, pseudo_channel_bytes_per_s=32e9 * hbm,
                             **{k: v * s for (k, v), s in zip(RATES.items(), scales)})
    for name, t in _non_attention(hw, PLANS[which]).items():
        total = float(t["total"])
        assert math.isfinite(total), name
        for r, v in t.items():
            assert total >= float(v) * (1 - 1e-6), (name, r, total, float(v))


def test_more_sips_never_slower_when_weight_streaming_bound():
    hw = dataclasses.replace(HW, gemm_flops_per_cycle_per_pe=16 * HW.gemm_flops_per_cycle_per_pe)
    sums = []
    for n in (1, 2, 4):
        layer = plan(LayerConfig("decode", 8 * K, sips=n, attn_tile=512), hw, MESH)
        t = _non_attention(hw, layer)
        assert next(p for p in layer.parts if p.name == "ffn_up") and \
            float(t["ffn_up"]["hbm"]) > float(t["ffn_up"]["gemm"])  # the regime: weight streaming bound
        sums.append(sum(float(v["total"]) for v in t.values()))
    assert sums[0] > sums[1] > sums[2]


@pytest.fixture(scope="module")
def decode_points():
    """evaluate_layer of decode S 8k on 4 SIPs, batch 1 and 4 (one attention compilation)."""
    return {b: evaluate_layer(LayerConfig("decode", 8 * K, batch=b, sips=4, attn_tile=512), HW, MESH) for b in (1, 4)}


def test_batch_four_costs_less_than_four_tokens(decode_points):
    one, four = decode_points[1]["token_us"], decode_points[4]["token_us"]
    assert one < four < 4 * one
    # the GEMMs pad M = 1 and M = 4 to the same 32-row engine tile
    g = lambda r: sum(p["us"] for p in r["parts"] if p["part"] in ("qkv", "out_proj", "ffn_up", "ffn_down"))
    assert g(decode_points[4]) < 1.05 * g(decode_points[1])


def test_model_matches_simulation_at_default_rates(decode_points):
    for r in decode_points.values():
        sim = simulate_layer(r["plan"], HW, MESH)
        for p in r["parts"]:
            s = sim[p["part"]]
            assert s is not None and math.isfinite(s), p["part"]
            assert s == pytest.approx(p["us"], rel=0.10, abs=1e-3), p["part"]
        assert sim["layer"] == pytest.approx(r["layer_us"], rel=0.02)


@pytest.mark.parametrize("regime", [{"gemm_flops_per_cycle_per_pe": 16 * 2048.0},  # HBM-bound GEMMs
                                    {"cube_noc_bytes_per_s": 16e9, "ucie_bytes_per_s": 16e9},  # link-bound
                                    {"math_elems_per_cycle_per_pe": 2.0}])  # MATH-heavy
def test_model_matches_simulation_off_default_rates(regime):
    hw = dataclasses.replace(HW, **regime)
    for cfg in (LayerConfig("decode", 8 * K, batch=4, sips=2, attn_tile=512), LayerConfig("prefill", 2 * K, sips=4,
                                                                                            attn_tile=64)):
        layer = plan(cfg, hw, MESH)
        model = _non_attention(hw, layer)
        sim = simulate_layer(dataclasses.replace(layer, parts=tuple(p for p in layer.parts
                                                                    if not isinstance(p, Attention))), hw, MESH)
        for name, t in model.items():
            assert sim[name] == pytest.approx(float(t["total"]), rel=0.10, abs=1e-3), (cfg.phase, name)


def test_gradients_and_jit_over_the_spec():
    # a small GEMM (a short unrolled stream keeps the compile short) and the 4-SIP all-reduce
    parts = [Gemm("g", rows=4, k=256, n=64, m_block=32), next(p for p in PLANS[1].parts if p.name == "all_reduce_1")]

    def total(hw):
        return sum(part_times(hw, p, MESH)["total"] for p in parts)

    g = jax.jit(jax.grad(total))(HW)
    assert math.isfinite(float(g.pe_clock_hz)) and float(g.pe_clock_hz) < 0  # a faster clock is faster
    assert float(g.cube_hop_latency_s) > 0
    other = dataclasses.replace(HW, pe_clock_hz=2e9, ucie_bytes_per_s=64e9)
    batch = jax.vmap(total)(jax.tree.map(lambda a, b: jnp.stack([a, b]), HW, other))
    for got, hw in zip(batch, (HW, other)):  # vmap over specs = one evaluation per spec
        assert float(got) == pytest.approx(float(total(hw)), rel=1e-5)


@pytest.mark.parametrize("kw, name", [({"phase": "train"}, "phase"), ({"sips": 3}, "sips"), ({"batch": 0}, "batch"),
                                      ({"phase": "prefill", "batch": 2}, "batch"), ({"attn_tile": 100}, "attn_tile"),
                                      ({"model": "gpt"}, "model"), ({"seq_len": 2.5}, "seq_len")])
def test_bad_input_is_refused(kw, name):
    args = {"phase": "decode", "seq_len": 8 * K, **kw}
    with pytest.raises(ValueError, match=name):
        LayerConfig(**args)


def test_capacity_refuses_what_does_not_fit():
    big = LayerConfig("decode", 1 << 20, batch=4, sips=2, attn_tile=512)
    with pytest.raises(ValueError, match="capacity: .* GB per CUBE .*hbm_bytes_per_cube"):
        plan(big, HW, MESH)
    cap = plan(big.replace(sips=4), HW, MESH).capacity  # 1.37 TB of KV + 137 GB of weights over 64 CUBEs
    assert cap["fits"] and cap["kv_bytes"] == 80 * 4 * (1 << 20) * 8 * 128 * 2 * 2
    with pytest.raises(ValueError, match="capacity"):
        plan(big.replace(sips=4), dataclasses.replace(HW, hbm_bytes_per_cube=16e9))


def test_a_point_too_big_for_any_tile_is_refused_for_its_capacity():
    """Without a tile given, a point that fits no HBM is refused with what it needs per CUBE (the tile
    search used to hide it behind 'no attention tile is feasible'), and the token table shows it."""
    big = LayerConfig("decode", 1 << 20, batch=4, sips=1)
    with pytest.raises(ValueError, match=r"capacity: .* needs [0-9.]+ GB per CUBE .*hbm_bytes_per_cube"):
        evaluate_layer(big, HW, MESH)
    rec = ahbm_token.run_point(big, HW, MESH, simulate=False)
    tab = ahbm_token.table([rec, {**rec, "refused": "no attention tile of (128,) is feasible for X; more"}])
    assert re.search(r"\| refused: [0-9.]+ GB per CUBE \(weights [0-9]+ GB \+ KV [0-9]+ GB over 16 CUBEs", tab)
    assert "refused: no attention tile of (128,) is feasible for X" in tab


def test_cli_refuses_bad_override(capsys):
    assert ahbm_token.main(["--set", "ahbm.no_such_field=1"]) == 2
    assert "error:" in capsys.readouterr().err


def test_report_points_cover_the_issue_table():
    """The report's token table (full mode): Llama-3-70B decode at batch 1 / 4, S 8k / 128k / 1M and
    prefill, each on 1, 2 and 4 SIPs; quick mode a small subset of it."""
    from experiments.ahbm_token import report_points

    full = {(c.model, c.phase, c.seq_len, c.batch, c.sips) for c in report_points(False)}
    for S in (8 * 1024, 128 * 1024, 1024 * 1024):
        for B in (1, 4):
            assert {("llama3_70b", "decode", S, B, n) for n in (1, 2, 4)} <= full
    assert {n for m, ph, *_, n in full if m == "llama3_70b" and ph == "prefill"} == {1, 2, 4}
    quick = {(c.model, c.phase, c.seq_len, c.batch, c.sips) for c in report_points(True)}
    assert quick < full and len(quick) <= 6


# link-rate points of ``sim_check.random_link_points(200, seed)`` (UCIe 0.25-4x and 1-100 ns, CUBE
# NOC 0.25-4x) whose 2-SIP prefill all-reduces the model put 11-16.6% below a simulation that held
# a port for a whole message (seeds 0 and 1), and the worst ones of two draws nobody looked at
# before packet arbitration (seeds 2 and 3: 12.3% and 12.2% low then): the CUBEs on one UCIe link
# leave it one transfer apart, and a late CUBE's column chunks queued behind its row predecessor's
# whole 4x larger row chunks. Arbitrated per packet (``sim.noc``), the ports interleave them.
LINK_POINTS = [(0, [0, 1, 2, 3, 4, 5, 180]), (1, [100, 103, 114, 142]), (2, [103, 115]), (3, [11, 80])]


@pytest.mark.parametrize("seed, points", LINK_POINTS)
def test_collectives_within_10_percent_of_simulation_at_random_link_rates(seed, points):
    from costmodel.ahbm.sim_check import collective_summary, compare_collectives, random_link_points

    pts = random_link_points(max(points) + 1, seed=seed)
    rows = compare_collectives([pts[i] for i in points], MESH)
    assert len(rows) >= 2 * len(points)
    for r in rows:
        assert math.isfinite(r["sim_us"]) and r["sim_us"] > 0
        assert abs(r["rel_diff"]) < 0.10, (r["hw"], r["part"], r["model_us"], r["sim_us"])
    # the CLI's summary (``ahbm_sim_check --links``): every part counted once under its shape
    summ = collective_summary(rows)
    assert summ["all"]["parts"] == len(rows) == sum(v["parts"] for k, v in summ.items() if k != "all")
    assert abs(summ["all"]["worst"]) == max(abs(r["rel_diff"]) for r in rows) and summ["all"]["off_10_percent"] == 0
    for k, v in summ.items():  # a shape's worst part has that shape's rings
        r = next(r for r in rows if f"{r['hw']} {r['part']}" == v["worst_point"])
        assert k == "all" or k.endswith(" x ".join(f"{a} {n}" for a, n in r["lines"])), (k, r["lines"])


def test_packet_grain_is_converged(monkeypatch):
    """The simulation's arbitration grain (``noc.PACKET_BYTES``, ``noc.MAX_PACKETS``) is a resolution:
    8x finer (8 KiB packets, a NoC burst), the staggered 2-SIP all-reduces move by < 3%; a
    whole-message grain (one packet per message, the old arbitration) moves them by > 5% (so the
    grain matters and is resolved)."""
    from costmodel.ahbm.sim import noc
    from costmodel.ahbm.sim.layer import collective
    from costmodel.ahbm.sim_check import random_link_points

    base, most = noc.PACKET_BYTES, noc.MAX_PACKETS
    for seed, i in ((0, 180), (3, 11)):
        _, hw, cfg = random_link_points(i + 1, seed=seed)[i]
        part = next(p for p in plan(cfg, hw, MESH).parts if p.name == "all_reduce_1")
        at = {}
        for grain, count in ((base, most), (base // 8, 8 * most), (1 << 40, 1)):
            monkeypatch.setattr(noc, "PACKET_BYTES", grain)
            monkeypatch.setattr(noc, "MAX_PACKETS", count)
            at[grain] = collective(part, hw, MESH)
        fine, whole = at[base // 8], at[1 << 40]
        assert at[base] == pytest.approx(fine, rel=0.03), (seed, i, at)
        assert whole > 1.05 * fine, (seed, i, at)
