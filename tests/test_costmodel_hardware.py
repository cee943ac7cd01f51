"""Hardware specs: numbers against REFERENCE.md, provenance for every field, pytree behaviour."""

import dataclasses

import jax
import numpy as np
import pytest

from costmodel import hardware as H


def test_tile_bytes_are_bytes_not_elements():
    # tt-metal tile sizes: 32x32 values; bfp: 1 B (bfp8) / 0.5 B (bfp4) per value + one exponent
    # byte per 16-value face row (4 faces x 16 rows = 64)
    assert H.tile_bytes("fp32") == 32 * 32 * 4
    assert H.tile_bytes("bf16") == 32 * 32 * 2
    assert H.tile_bytes("bfp8") == 32 * 32 * 1 + 64
    assert H.tile_bytes("bfp4") == 32 * 32 // 2 + 64


@pytest.mark.parametrize("bad", ["fp8", "bfloat8_b", ""])
def test_unknown_dtype_raises(bad):
    with pytest.raises(ValueError, match="dtype="):
        H.tile_bytes(bad)


def test_p150a_numbers_match_reference():
    hw = H.blackhole_p150a()
    assert hw.dram_peak_bytes_per_s == 512e9
    assert hw.grid_cores == 110
    assert hw.l1_bytes_per_core == 1464 * 1024
    # ~86 GB/s per NoC link at 1.35 GHz, 64 B/cycle
    assert abs(float(hw.noc_link_bytes_per_s) - 86.4e9) < 1e6
    # 16 cycles per 32x32x32 tile at LoFi, HiFi4 = 4x
    assert float(hw.tile_matmul_cycles("LoFi")) == 16.0
    assert float(hw.tile_matmul_cycles("HiFi4")) == 64.0


def test_p100a_differs_only_in_memory():
    a, b = H.blackhole_p150a(), H.blackhole_p100a()
    assert b.dram_peak_bytes_per_s == 448e9 and b.dram_capacity_bytes == 28e9
    same = {f.name for f in dataclasses.fields(a)} - {"dram_peak_bytes_per_s", "dram_capacity_bytes", "name",
                                                       "dram_banks"}
    assert all(getattr(a, n) == getattr(b, n) for n in same)


def test_every_field_has_unit_and_source():
    for hw in (H.blackhole_p150a(), H.ahbm_sip()):
        rows = H.spec_table(hw)
        assert len(rows) == len(dataclasses.fields(hw)) - (1 if hasattr(hw, "name") else 0)
        for name, _, unit, source in rows:
            assert unit and source.startswith("["), name


def test_ahbm_derived_numbers():
    a = H.ahbm_sip()
    assert a.cubes == 16 and a.pes == 128
    assert float(a.hbm_cube_bytes_per_s) == 2048e9  # 8 PEs x 8 pch x 32 GB/s
    # each PE's controller carries its 8 pseudo-channels
    assert a.pe_controller_bytes_per_s == a.pseudo_channels_per_pe * a.pseudo_channel_bytes_per_s
    assert a.gemm_tile_m == 32 and a.gemm_tile_k == 64 and a.gemm_tile_n == 32
    assert "[assumed]" in H.SOURCES["gemm_flops_per_cycle_per_pe"][1]


def test_leaves_are_floats_and_grid_is_static():
    hw = H.blackhole_p150a()
    leaves = jax.tree_util.tree_leaves(hw)
    assert len(leaves) == 17 and all(isinstance(v, float) for v in leaves)
    doubled = jax.tree_util.tree_map(lambda v: 2 * v, hw)
    assert doubled.grid_x == 11 and doubled.dram_peak_bytes_per_s == 1024e9


def test_preset_lookup():
    assert H.blackhole("p100a").name == "p100a"
    with pytest.raises(ValueError, match="hw='p200'"):
        H.blackhole("p200")


def test_units_and_sources_live_in_the_field_definitions():
    for cls in (H.Blackhole, H.AHBM):
        for f in dataclasses.fields(cls):
            assert H.field_spec(cls, f.name) == (f.metadata["unit"], f.metadata["source"])
            if f.name != "name":
                assert H.SOURCES[f.name] == H.field_spec(cls, f.name)
    with pytest.raises(ValueError, match="field='nope' unknown"):
        H.field_spec(H.AHBM, "nope")


def test_ahbm_kernel_model_fields():
    a = H.ahbm_sip()
    assert a.cpu_issue_s == 0.0  # kernbench's dispatch_cycles = 0
    # per-hop CUBE latency: the measured worst remote-CUBE DMA less the local one, over 6 hops of a 4x4 mesh
    assert a.cube_hop_latency_s * 6 + a.dma_local_latency_s == pytest.approx(a.dma_remote_cube_latency_s)
    assert H.field_spec(H.AHBM, "ipcq_bytes_per_s")[1].startswith("[assumed]")
    assert "cpu_issue_s" in H.float_fields(a) and "mesh_x" not in H.float_fields(a)


# ---- the worker grid by board / firmware (REFERENCE §9: 11x10, 12x10, 13x10) ----------------------
def test_worker_grid_is_set_by_an_integer_inside_the_die():
    from costmodel.overrides import apply_overrides, parse_overrides, settable_fields

    assert {"grid_x", "grid_y", "clock_hz", "dram_request_cycles"} <= set(settable_fields("blackhole"))
    hw = apply_overrides(H.blackhole_p150a(), parse_overrides(["blackhole.grid_x=13"]))
    assert hw.grid_x == 13 and isinstance(hw.grid_x, int) and hw.grid_cores == 130
    for item, message in [("blackhole.grid_x=12.5", r"grid_x=12.5: expected an integer in \[1, 14\]"),
                          ("blackhole.grid_x=15", r"grid_x=15.0: expected an integer in \[1, 14\]"),
                          ("blackhole.grid_y=0", r"grid_y=0.0: expected an integer in \[1, 10\]"),
                          ("blackhole.grid_y=nan", r"grid_y=nan: expected an integer")]:
        with pytest.raises(ValueError, match=message):
            parse_overrides([item])
    with pytest.raises(ValueError, match=r"settable=True\) needs static=True and bounds"):
        H.spec("cores", "x", settable=True)


def test_a_wider_grid_changes_only_what_it_splits():
    """Flash decode over 8 users gets min(16, grid // 8) cores per user: 13 on 11x10, 16 on 13x10, so its
    time moves; a 64-row rms_norm (2 tile rows on 2 cores) does not."""
    from costmodel.blackhole import load_fitted
    from costmodel.blackhole.opspecs import NormSpec, SdpaDecodeSpec
    from costmodel.blackhole.sdpa import decode_cores_per_user
    from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig

    fit = load_fitted()
    hw11, hw13 = H.blackhole_p150a(), dataclasses.replace(H.blackhole_p150a(), grid_x=13)
    attn = SdpaProgramConfig(128.0, 32.0, 16.0)
    assert [float(decode_cores_per_user(h, attn, users=8)) for h in (hw11, hw13)] == [13.0, 16.0]
    decode, small = SdpaDecodeSpec(attn, 8192.0, 8, 128, 128, "bf16", "bfp4"), NormSpec(64, 1536)
    assert abs(float(decode.us(hw13, fit)) / float(decode.us(hw11, fit)) - 1.0) > 0.02
    assert float(small.us(hw13, fit)) == pytest.approx(float(small.us(hw11, fit)), rel=1e-6)


@pytest.mark.parametrize("field,value", [("mask_ops_per_partial_tile", -1), ("ring_recv_depth", 0),
                                         ("composite_runahead_subtiles", 0), ("composite_runahead_subtiles", 2.0),
                                         ("pes_per_cube", True), ("sips", 0), ("gemm_tile_k", -64)])
def test_ahbm_static_integers_are_checked_when_built(field, value):
    """A static integer of the AHBM spec out of range is refused with its name and value (a
    negative mask count would otherwise price negative MATH time, a zero depth an empty loop)."""
    with pytest.raises(ValueError, match=rf"AHBM\.{field}={value!r}: expected an int >= "):
        dataclasses.replace(H.ahbm_sip(), **{field: value})


def test_ahbm_commands_must_hold_the_composite_and_nothing_unknown():
    for bad in (("ex_composite",), ("composite", "fused_softmax"), ["composite"]):
        with pytest.raises(ValueError, match=r"AHBM\.commands="):
            dataclasses.replace(H.ahbm_sip(), commands=bad)
    hw = dataclasses.replace(H.ahbm_sip(), commands=("composite", "ex_composite"), mask_ops_per_partial_tile=0)
    assert jax.jit(lambda h: h.cube_noc_bytes_per_s)(hw) == hw.cube_noc_bytes_per_s  # still a pytree


def test_element_bytes_are_the_stick_formats_itemsizes_and_block_floats_are_refused():
    """A ROW_MAJOR stick's bytes per element (the layout and row-major concat kinds): numpy's / ml_dtypes'
    itemsize of the format; a block-float format (exponent shared per 16 elements) has none."""
    import jax.numpy as jnp

    from costmodel.hardware import STICK_FORMATS, element_bytes

    assert {f: element_bytes(f) for f in STICK_FORMATS} == {"fp32": np.dtype(np.float32).itemsize,
                                                            "bf16": np.dtype(jnp.bfloat16).itemsize}
    for bad in ("bfp8", "bfp4", "int8"):
        with pytest.raises(ValueError, match=f"dtype={bad!r} unknown"):
            element_bytes(bad)
