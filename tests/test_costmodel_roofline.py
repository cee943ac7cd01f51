"""DRAM floor against hand arithmetic; the gap table adds up to the step."""

import pytest

from costmodel.blackhole import BlackholeConfig, load_fitted
from costmodel.blackhole.roofline import (
    floor_us,
    gap_table,
    layer_kv_bytes,
    layer_weight_bytes,
    measured_op_times,
)
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()


@pytest.mark.parametrize("weight_dtype,bytes_per_elem", [("bfp8", 1088 / 1024), ("bf16", 2.0), ("bfp4", 576 / 1024)])
def test_weight_bytes(weight_dtype, bytes_per_elem):
    elems = 1536 * 4096 + 2048 * 1536 + 3 * 1536 * 6144  # wqkv, wo, w1/w3/w2 of alpamayo_tt
    bc = BlackholeConfig.for_expert(CFG, weights=weight_dtype)
    assert layer_weight_bytes(bc, cfg=CFG) == pytest.approx(elems * bytes_per_elem)


def test_step_floor():
    bc = BlackholeConfig.for_expert(CFG)
    assert layer_kv_bytes(8192, bc, cfg=CFG) == 2 * 8 * 8192 * 128 * 2  # K and V, bf16
    fl = floor_us(blackhole_p150a(), bc, cfg=CFG)
    per_layer = 40_108_032 + 33_554_432
    assert sum(fl.values()) == pytest.approx(64 * per_layer / 512e9 * 1e6)
    valid = floor_us(blackhole_p150a(), bc, cfg=CFG, kv_rows="valid")
    assert valid["attention"] == pytest.approx(fl["attention"] * (4700 + 64) / 8192)
    with pytest.raises(ValueError, match="kv_rows='all'"):
        floor_us(blackhole_p150a(), bc, cfg=CFG, kv_rows="all")


def test_gap_table_adds_up_and_stays_above_the_floor():
    rows = gap_table(blackhole_p150a(), load_fitted(), BlackholeConfig.for_expert(CFG), cfg=CFG,
                     measured_ops=measured_op_times())
    step = rows[-1]
    assert step["class"] == "step" and step["measured_ms"] == 32.5
    assert sum(r["predicted_ms"] for r in rows[:-1]) == pytest.approx(step["predicted_ms"], rel=1e-5)
    assert all(r["predicted_ms"] >= r["floor_ms"] for r in rows[:-1] if r["floor_ms"] > 0)
    measured_classes = [r for r in rows if r["measured_ms"] is not None and r["class"] != "step"]
    assert sum(r["measured_ms"] for r in measured_classes) == pytest.approx(64 * 521.0 / 1e3, rel=2e-3)
