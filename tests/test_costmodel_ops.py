"""Op models against hand-derived limits (REFERENCE.md formulas), and the discrete evaluator's errors."""

import dataclasses

import pytest

from costmodel.blackhole import (
    BlackholeConfig,
    FitParams,
    MatmulProgramConfig,
    evaluate,
    initial_params,
    load_fitted,
    matmul_configs,
    ops,
    sdpa,
)
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()


def _ideal_fit(**kw) -> FitParams:
    """No latency, no launch, no compute cost, ideal overlap (q-norm ~ max), unlimited core rate."""
    base = {"dram_eff": 1.0, "core_read_tiles_per_s": 1e30, "dram_latency_us": 0.0, "overlap_exponent": 400.0,
                "mm_block_sync_us": 0.0, "eltwise_cycles_per_tile": 0.0, "dispatch_us": 0.0, "dispatch_core_us": 0.0,
                "launch_matmul_us": 0.0, "launch_norm_us": 0.0, "launch_rope_us": 0.0, "launch_heads_us": 0.0,
                "launch_fill_cache_us": 0.0, "launch_eltwise_us": 0.0, "launch_sdpa_us": 0.0, "trace_overlap_us": 0.0,
                "host_bytes_per_s": 1e30, "host_proj_us": 0.0}
    return FitParams(**{**base, **kw})


@pytest.mark.parametrize("name,K,N,ibw,pcn", [("wqkv", 1536, 4096, 8, 2), ("w2", 6144, 1536, 48, 1),
                                              ("wo", 2048, 1536, 2, 1)])
def test_matmul_dram_roofline_limit(name, K, N, ibw, pcn):
    """Unlimited core rate, no latency: time = all bytes / peak (weights bfp8, act in/out bf16)."""
    M = 64
    t = ops.matmul_us(HW, _ideal_fit(), MatmulProgramConfig(ibw, pcn, 2.0), M=M, K=K, N=N, weight_dtype="bfp8")
    bytes_ = K * N * 1088 / 1024 + M * K * 2 + M * N * 2
    assert float(t) == pytest.approx(bytes_ / 512e9 * 1e6, rel=1e-4)


@pytest.mark.parametrize("fidelity,passes", [("LoFi", 1), ("HiFi2", 2), ("HiFi4", 4)])
def test_matmul_compute_limit_matches_tt_metal_op_model(fidelity, passes):
    """With infinite bandwidth the op is its math: tt-metal's ideal_cycles = 2MNK / (cores*4096) x fidelity."""
    hw = dataclasses.replace(HW, dram_peak_bytes_per_s=1e30)
    M, K, N, pcn = 64, 1536, 4096, 2
    t = ops.matmul_us(hw, _ideal_fit(), MatmulProgramConfig(8.0, float(pcn), 2.0), M=M, K=K, N=N,
                      weight_dtype="bfp8", fidelity=fidelity)
    cores = N // 32 // pcn
    ideal_cycles = 2 * M * N * K / (cores * 4096) * passes
    assert float(t) == pytest.approx(ideal_cycles / 1.35e9 * 1e6, rel=0.01)  # q-norm(400) ~ max within 1%


@pytest.mark.parametrize("kv_dtype,elem_bytes", [("bf16", 2.0), ("bfp8", 1088 / 1024)])
def test_flash_decode_bytes_limit(kv_dtype, elem_bytes):
    """DRAM-bound flash decode reads K and V: 2*b*d*Hkv*S*elem bytes (FlashDecode.md), + mask + Q once per user."""
    hw = dataclasses.replace(HW, noc_bytes_per_cycle_per_link=1e30, noc_hop_cycles=0.0,
                             matmul_flops_per_cycle_per_core=1e30)
    smax_rows, users, H = 8192.0, 8, 128
    t = sdpa.sdpa_decode_us(hw, _ideal_fit(), sdpa.AttnConfig(128.0, 32.0, 16.0), smax_rows=smax_rows, users=users,
                           q_rows=128, head_dim=H, kv_dtype=kv_dtype, mask_dtype="bfp4")
    kv = 2 * 1 * H * users * smax_rows * elem_bytes
    mask = users * 128 * smax_rows * 576 / 1024  # each user's cores read the shared mask
    q = users * 128 * H * 2
    assert float(t) == pytest.approx((kv + mask + q) / 512e9 * 1e6, rel=1e-3)


def test_standard_sdpa_few_items_is_core_bound():
    """Folded heads, q_chunk 128: 8 work items on 8 cores; each streams every K/V/mask page of its head."""
    rate = 5e6
    fit = _ideal_fit(core_read_tiles_per_s=rate)
    t = sdpa.sdpa_standard_us(HW, fit, sdpa.AttnConfig(128.0, 128.0, 16.0), smax_rows=8192.0, q_heads=8, q_rows=128,
                             head_dim=128, kv_dtype="bf16", mask_dtype="bf16")
    chunks = 8192 // 128
    pages_per_chunk = 2 * (128 // 32) * (128 // 32) + (128 // 32) * (128 // 32)  # K, V, mask tiles
    q_pages = (128 // 32) * (128 // 32)
    assert float(t) == pytest.approx((chunks * pages_per_chunk + q_pages) / rate * 1e6, rel=1e-4)


def test_head_split_is_latency_bound():
    """nlp_create_qkv_heads on 64 rows: 2 cores, (16+2*8)*128/32 = 128 tiles each, one round trip per tile."""
    fit = _ideal_fit(dram_latency_us=0.4, launch_heads_us=3.0)
    t = ops.heads_us(HW, fit, rows=64, tiles_per_row=128)
    assert float(t) == pytest.approx(3.0 + 128 * 0.4, rel=1e-3)


@pytest.mark.parametrize("name,expected", [("wqkv", (2, 2)), ("wo", (2, 1)), ("w1", (2, 2)), ("w2", (2, 1))])
def test_default_heuristic(name, expected):
    # get_mcast_1d_config: per_core_N = ceil(ceil(N/110)/32), in0_block_w = 2 for even K/32
    m = matmul_configs(CFG, "default")[name]
    assert (m.in0_block_w, m.per_core_N, m.per_core_M) == (*map(float, expected), 2.0)


def test_overlap_lies_between_max_and_sum():
    fit = initial_params()
    stages = (1.0, 2.0, 3.0)
    got = float(ops.overlap(fit, *stages))
    assert max(stages) < got < sum(stages)
    assert float(ops.overlap(dataclasses.replace(fit, overlap_exponent=1.0), *stages)) == pytest.approx(6.0)


# ---- the discrete evaluator rejects illegal settings ------------------------------------------------
PORT = BlackholeConfig.port(CFG)


@pytest.mark.parametrize("change,match", [
    ({"wqkv": dataclasses.replace(PORT.wqkv, kind="mcast_1d_in1")},
     r"wqkv.per_core_N=2 must equal N/32=128 for the mcast_1d_in1 config"),
    ({"wo": dataclasses.replace(PORT.wo, out_subblock_w=3)}, r"wo: out_subblock \(1, 3\) must divide out_block \(2, 1\)"),
    ({"w2": dataclasses.replace(PORT.w2, in0_block_w=5.0)}, r"w2.in0_block_w=5 must divide K/32=192"),
    ({"wo": dataclasses.replace(PORT.wo, in0_block_w=7.5)}, r"wo.in0_block_w=7.5 must be an integer"),
    ({"wqkv": dataclasses.replace(PORT.wqkv, per_core_N=1.0)}, r"128 cores exceeds the 11x10 grid"),
    ({"w1": dataclasses.replace(PORT.w1, grid_x=12)}, r"core grid 12x10 must fit"),
    ({"w1": dataclasses.replace(PORT.w1, per_core_M=1.0)}, r"per_core_M=1 must equal M/32=2"),
    ({"w2": dataclasses.replace(PORT.w2, in0_block_w=192.0)}, r"w2: circular buffers need"),
    ({"attn": sdpa.AttnConfig(100.0, 32.0, 16.0)}, r"k_chunk=100 must be a multiple of 32"),
    ({"attn": sdpa.AttnConfig(96.0, 32.0, 16.0)}, r"k_chunk=96 must divide smax=8192"),
    ({"attn": sdpa.AttnConfig(128.0, 32.0, 17.0)}, r"cores_per_head=17 must be <= 16"),
    ({"attn": sdpa.AttnConfig(2048.0, 32.0, 16.0)}, r"k_chunk=2048: SDPA circular buffers need"),
    ({"attn_mode": "standard", "attn": sdpa.AttnConfig(128.0, 48.0, 16.0)}, r"q_chunk=48 must be a multiple of 32"),
    ({"attn_mode": "standard", "attn": sdpa.AttnConfig(128.0, 128.0, 16.0)}, r"q_chunk=128 must divide the 64"),
    ({"fold_heads": True}, r"fold_heads=True needs attn_mode='standard'"),
    ({"attn_mode": "prefill"}, r"attn_mode='prefill' unknown"),
    ({"smax": 4736.0}, r"smax=4736 must be >= seq_len \+ num_tokens = 4700 \+ 64"),
    ({"smax": 8200.0}, r"smax=8200 must be a multiple of 32"),
    ({"seq_len": -1.0}, r"seq_len=-1 must be >= 0"),
    ({"kv_dtype": "fp8"}, r"kv_dtype='fp8' unknown"),
    ({"weight_dtype": "int8"}, r"weight_dtype='int8' unknown"),
    ({"mask_dtype": "bool"}, r"mask_dtype='bool' unknown"),
    ({"fidelity": "HiFi8"}, r"fidelity='HiFi8' unknown"),
])
def test_discrete_evaluator_rejects(change, match):
    with pytest.raises(ValueError, match=match):
        evaluate(HW, load_fitted(), PORT.replace(**change), cfg=CFG)


def test_decode_l1_limit_matches_the_notes():
    """Notes: 1024 q "heads" in one user overflow L1 (tested on device); the 8-user view (128) fits."""
    l1 = HW.l1_bytes_per_core
    common = {"k_chunk": 128, "head_dim": 128, "kv_dtype": "bf16", "mask_dtype": "bfp4"}
    assert sdpa.sdpa_l1_bytes(q_rows=1024, **common) > l1
    assert sdpa.sdpa_l1_bytes(q_rows=128, **common) < l1


def test_vmapped_sweep_equals_evaluator():
    import jax
    import jax.numpy as jnp

    from costmodel.blackhole import sweep_step_us

    fit = load_fitted()
    settings = [PORT, PORT.replace(smax=5120.0), PORT.replace(w2=dataclasses.replace(PORT.w2, in0_block_w=6.0)),
                PORT.replace(attn=sdpa.AttnConfig(512.0, 32.0, 8.0))]
    batch = jax.tree_util.tree_map(lambda *xs: jnp.asarray(xs), *settings)
    got = sweep_step_us(HW, fit, batch, cfg=CFG)
    want = [evaluate(HW, fit, s, cfg=CFG)["step_ms"] * 1e3 for s in settings]
    assert got.tolist() == pytest.approx(want, rel=1e-5)
    assert len(set(want)) == len(want)
