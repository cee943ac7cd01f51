"""The one matmul program-config type (``costmodel.blackhole.program_config``) against real reports.

Oracles: the configs of a real Blackhole op report (``data/profiler_reports``, measured on
devices: each config there ran, so the legality rule must accept it for its row's shapes), the
literal strings of that report, and hand-counted splits. The round trip through the real ttnn
objects and ttnn's own ``repr`` is in ``tests/test_device_ttnn.py`` (ttnn venv).
"""

from __future__ import annotations

import csv
import dataclasses
import re

import jax
import numpy as np
import pytest
from _shared_data import profiler_reports_dir

from costmodel.blackhole.program_config import (
    DRAM_SHARDED,
    KINDS,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
)
from costmodel.hardware import blackhole_p150a
from device.emulation import Emulation

HW = blackhole_p150a()
DEEPSEEK = profiler_reports_dir() / "bh_8xp150_deepseek_v3_d_p.csv"
needs_reports = pytest.mark.skipif(not DEEPSEEK.exists(), reason=f"{DEEPSEEK} not present")


@needs_reports
def test_parses_the_literal_configs_of_a_real_report():
    text = DEEPSEEK.read_text()
    in1 = ("MatmulMultiCoreReuseMultiCast1DProgramConfig(compute_with_storage_grid_size=(x=11;y=10);in0_block_w=4;"
           "out_subblock_h=1;out_subblock_w=8;out_block_h=1;out_block_w=16;per_core_M=1;per_core_N=16;fuse_batch=0;"
           "fused_activation=std::nullopt;mcast_in0=0;gather_in0=0;hop_cores={};num_global_cb_receivers=1;"
           "untilize_out=0)")
    two_d = ("MatmulMultiCoreReuseMultiCastProgramConfig(compute_with_storage_grid_size=(x=11;y=10);in0_block_w=14;"
             "out_subblock_h=5;out_subblock_w=1;out_block_h=10;out_block_w=5;per_core_M=10;per_core_N=5;"
             "transpose_mcast=0;fused_activation=std::nullopt;fuse_batch=0)")
    assert in1 in text and two_d in text
    assert MatmulProgramConfig.parse(f"{{'program_config': '{in1}'; 'x': 1}}") == MatmulProgramConfig(
        4.0, 16.0, 1.0, kind=MCAST_1D_IN1, out_subblock_w=8, fuse_batch=False)
    got = MatmulProgramConfig.parse(two_d)
    assert got == MatmulProgramConfig(14.0, 5.0, 10.0, kind=MCAST_2D, out_subblock_h=5, fuse_batch=False)
    assert got.mcast_in0 is None and MatmulProgramConfig(1.0, 1.0).mcast_in0 is True


def _matmul_rows():
    for r in csv.DictReader(DEEPSEEK.open()):
        a = r.get("ATTRIBUTES") or ""
        if r["OP CODE"] == "MatmulDeviceOperation" and "MatmulMultiCoreReuse" in a and r["DEVICE ID"] == "0":
            yield r


def _dim(r, key):  # 'a[b]' -> logical b
    return int(re.fullmatch(r"\d+\[(\d+)\]", r[key]).group(1))


@needs_reports
def test_every_config_a_real_device_ran_is_legal_for_its_shapes():
    """Device 0 of the 8-chip report: 2 1D in1-multicast and 4 2D configs; each ran on a p150, so ``validate`` accepts it for
    its row's M (one batch: Y), K, N, weight dtype and fp32-accumulation setting, and the cores
    it implies equal the row's CORE COUNT."""
    kinds = {}
    for r in _matmul_rows():
        pc = MatmulProgramConfig.parse(r["ATTRIBUTES"])
        kinds[pc.kind] = kinds.get(pc.kind, 0) + 1
        M, K, N = _dim(r, "INPUT_0_Y_PAD[LOGICAL]"), _dim(r, "INPUT_0_X_PAD[LOGICAL]"), _dim(r, "INPUT_1_X_PAD[LOGICAL]")
        fp32 = re.search(r"fp32_dest_acc_en=(\d)", r["ATTRIBUTES"]).group(1) == "1"
        pc.validate("row", HW, M=M, K=K, N=N, weight_dtype={"BFLOAT8_B": "bfp8"}[r["INPUT_1_DATATYPE"]],
                    fp32_dest_acc=fp32)
        assert pc.num_cores(M=M, N=N) == int(r["CORE COUNT"]), (r["GLOBAL CALL COUNT"], pc)
    assert kinds == {MCAST_1D_IN1: 2, MCAST_2D: 4}


PORT_W2 = MatmulProgramConfig(48.0, 1.0, 2.0)  # the notes' w2: [64, 6144] x [6144, 1536]


@pytest.mark.parametrize("change,match", [
    ({"in0_block_w": 5.0}, r"w2.in0_block_w=5 must divide K/32=192"),
    ({"in0_block_w": 2.5}, r"w2.in0_block_w=2.5 must be an integer"),
    ({"per_core_M": 3.0}, r"w2.per_core_M=3 must equal M/32=2 for the mcast_1d_in0 config"),
    ({"per_core_N": 0.0}, r"w2.per_core_N=0 must be >= 1"),
    ({"grid_x": 13}, r"core grid 13x10 must fit the p150a compute grid 11x10"),
    ({"kind": MCAST_1D_IN1}, r"w2.per_core_N=1 must equal N/32=48 for the mcast_1d_in1 config"),
    ({"kind": MCAST_2D}, r"1 x 48 output blocks .* exceed the 10 x 11 grid"),
    ({"kind": DRAM_SHARDED, "per_core_N": 1.0, "grid_x": 4, "grid_y": 4}, r"ceil\(48/1\) = 48 cores exceeds the 4x4"),
    ({"out_subblock_w": 2}, r"out_subblock \(1, 2\) must divide out_block \(2, 1\)"),
    ({"per_core_N": 6.0, "out_subblock_h": 1, "out_subblock_w": 6}, r"= 6 > 4 destination tiles"),
    ({"out_block_w": 4}, r"out_block \(2, 4\) must divide per_core \(M 2, N 1\)"),
    ({"per_core_N": 48.0}, r"w2: circular buffers need \d+ KB of L1 per core"),
])
def test_illegal_configs_are_rejected_naming_the_field(change, match):
    pc = dataclasses.replace(PORT_W2, **change)
    with pytest.raises(ValueError, match=match):
        pc.validate("w2", HW, M=64, K=6144, N=1536, weight_dtype="bfp8")


def test_legal_splits_of_each_kind_and_their_cores():
    """Hand-counted: 1D in0 per_core_N=5 on N/32=47 -> 10 cores (last block partial); 1D in1
    per_core_M=3 on M/32=31 -> 11; 2D 4 x 7 blocks of [96*32, 49*32] on the 11x10 grid; DRAM-sharded."""
    cases = [(MatmulProgramConfig(3.0, 5.0, 2.0), (64, 96, 47 * 32), 10),
             (MatmulProgramConfig(1.0, 3.0, 3.0, kind=MCAST_1D_IN1), (31 * 32, 96, 96), 11),
             (MatmulProgramConfig(2.0, 7.0, 24.0, kind=MCAST_2D, out_subblock_h=2, out_subblock_w=1),
              (96 * 32, 64, 49 * 32), 4 * 7),
             (MatmulProgramConfig(4.0, 6.0, 1.0, kind=DRAM_SHARDED), (32, 256, 48 * 32), 8)]
    for pc, (M, K, N), cores in cases:
        pc.validate("mm", HW, M=M, K=K, N=N, weight_dtype="bfp8")
        assert pc.num_cores(M=M, N=N) == cores, pc


def test_static_fields_are_checked_and_leaves_stay_differentiable():
    for bad, match in [({"kind": "mcast_3d"}, "kind='mcast_3d' unknown"),
                       ({"fused_activation": "tanh"}, "fused_activation='tanh' unknown"),
                       ({"out_subblock_h": 0}, "out_subblock_h=0 must be None or an integer >= 1"),
                       ({"out_block_w": 1.5}, "out_block_w=1.5 must be None or an integer >= 1")]:
        with pytest.raises(ValueError, match=match):
            MatmulProgramConfig(1.0, 1.0, **bad)
    assert len(jax.tree.leaves(PORT_W2)) == 3  # in0_block_w, per_core_N, per_core_M
    grad = jax.grad(lambda pc: pc.l1_bytes(weight_dtype="bfp8"))(PORT_W2)
    # d/d per_core_N of 2 * ibw * pcn * 1088 + pcm * pcn * 2048 (bf16 output tiles)
    assert float(grad.per_core_N) == pytest.approx(2 * 48 * 1088 + 2 * 2048)


def test_parse_rejects_what_it_cannot_read():
    for text, match in [("LayerNormDefaultProgramConfig(legacy_reduction=0)", "no matmul program config"),
                        (("MatmulMultiCoreReuseMultiCast1DProgramConfig(in0_block_w=2;per_core_M=2;per_core_N=1;"
                         "compute_with_storage_grid_size=(x=11;y=10);out_subblock_h=1;out_subblock_w=1)"),
                         "without mcast_in0"),
                        ("MatmulMultiCoreReuseMultiCastProgramConfig(in0_block_w=x;per_core_M=2;per_core_N=1)",
                         "in0_block_w='x' is not a non-negative integer"),
                        ("MatmulMultiCoreReuseMultiCastProgramConfig(in0_block_w=2;per_core_M=2",
                         "unbalanced parentheses"),
                        ("MatmulMultiCoreReuseMultiCastGatherProgramConfig(in0_block_w=2)",
                         "'MatmulMultiCoreReuseMultiCastGatherProgramConfig' is not a matmul config")]:
        with pytest.raises(ValueError, match=match):
            MatmulProgramConfig.parse(text)


@pytest.mark.parametrize("kind", KINDS)
def test_repr_parse_and_emulation_objects_round_trip(kind):
    pc = MatmulProgramConfig(3.0, 7.0, 5.0, kind=kind, grid_x=9, grid_y=7, out_subblock_w=7 if kind != DRAM_SHARDED
                             else 1, fused_activation="silu", fuse_batch=False, transpose_mcast=kind == MCAST_2D)
    if kind == DRAM_SHARDED:  # no grid / subblock / batch fields in ttnn's class
        pc = dataclasses.replace(pc, grid_x=11, grid_y=10, fuse_batch=True, transpose_mcast=False)
    emu = Emulation()
    assert MatmulProgramConfig.from_ttnn(pc.build(emu)) == pc
    assert MatmulProgramConfig.parse(pc.ttnn_repr()) == pc
    assert MatmulProgramConfig.parse(pc.ttnn_repr().replace(",", ";")) == pc  # a report's ATTRIBUTES form


def test_the_emulation_applies_the_same_rule():
    """``linear`` with an illegal program config fails with ``validate``'s message (one rule)."""
    emu = Emulation()
    dev = emu.open_device(0)
    a = emu.to_device(emu.Tensor(np.ones((1, 1, 64, 96), np.float32), emu.bfloat16), dev)
    b = emu.to_device(emu.Tensor(np.ones((96, 64), np.float32), emu.bfloat8_b), dev)
    bad = MatmulProgramConfig(2.0, 1.0, 2.0)  # K/32 = 3
    with pytest.raises(ValueError, match=r"in0_block_w=2 must divide K/32=3"):
        bad.validate("linear program_config", HW, M=64, K=96, N=64, weight_dtype="bfp8")
    with pytest.raises(ValueError, match=r"linear program_config.in0_block_w=2 must divide K/32=3"):
        emu.linear(a, b, program_config=bad.build(emu))
    out = emu.linear(a, b, program_config=MatmulProgramConfig(3.0, 1.0, 2.0).build(emu))
    np.testing.assert_allclose(out.to_numpy(), 96.0)
