"""The one hardware-override parser (costmodel.overrides): validation at entry, the fields it refuses, CLIs."""

import dataclasses
import json
import pathlib

import pytest

from costmodel.ahbm import cli as ahbm_cli
from costmodel.ahbm.config import AhbmConfig
from costmodel.ahbm.model import evaluate as ahbm_evaluate
from costmodel.blackhole import BlackholeConfig
from costmodel.blackhole import evaluate as bh_evaluate
from costmodel.blackhole.fit import load_calibration
from costmodel.hardware import AHBM, Blackhole, ahbm_sip, blackhole_p150a, field_bounds, float_fields
from costmodel.overrides import (
    NOT_MODELLED,
    apply_overrides,
    check_override,
    parse_overrides,
    settable_fields,
)
from jaxref.config import ExpertConfig


@pytest.mark.parametrize("item, message", [
    ("ahbm.cpu_issue_s=-1", r"cpu_issue_s=-1.0: expected a finite number in \[0, 0.001\]"),
    ("ahbm.pe_clock_hz=-1e9", "pe_clock_hz=-1000000000.0: expected a finite number in"),
    ("ahbm.pe_clock_hz=0", "pe_clock_hz=0.0: expected a finite number in"),
    ("ahbm.pe_clock_hz=1e-30", "pe_clock_hz=1e-30: expected a finite number in"),  # float32 overflow otherwise
    ("ahbm.hbm_efficiency=nan", r"hbm_efficiency=nan: expected a finite number in \[0.001, 1\]"),
    ("ahbm.hbm_efficiency=1.5", "hbm_efficiency=1.5: expected a finite number in"),
    ("blackhole.clock_hz=inf", "clock_hz=inf: expected a finite number"),
    ("ahbm.mesh_x=2", "'mesh_x' is static structure"),
    ("ahbm.pes_per_cube=4", "'pes_per_cube' is static structure"),
    ("ahbm.pseudo_channel_bytes_per_s=1e9", "is not modelled by this command: the kernel model reads the PE"),
    ("ahbm.dma_remote_cube_latency_s=1e-6", "is not modelled by this command: remote-CUBE traffic is priced"),
    ("blackhole.eth_bytes_per_s=1e9", "is not modelled"),
    ("blackhole.bogus=1", "'bogus' is not a field of costmodel.hardware.Blackhole; expected one of"),
    ("tpu.clock_hz=1", "HW one of"),
    ("clock_hz=1e9", "HW one of"),
    ("blackhole.clock_hz", "expected HW.FIELD=VALUE"),
    ("blackhole.clock_hz=fast", "clock_hz='fast': expected a number"),
], ids=lambda v: v if "=" in v or "." in v else None)
def test_bad_overrides_are_refused_with_the_reason(item, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides([item])


def test_parse_and_apply():
    got = parse_overrides(["blackhole.clock_hz=1.2e9", "ahbm.pe_clock_hz=2e9", "cpu_issue_s=1e-6"], default_hw="ahbm")
    assert got == {"blackhole.clock_hz": 1.2e9, "ahbm.pe_clock_hz": 2e9, "ahbm.cpu_issue_s": 1e-6}
    ahbm = apply_overrides(ahbm_sip(), got)
    assert ahbm == dataclasses.replace(ahbm_sip(), pe_clock_hz=2e9, cpu_issue_s=1e-6)
    assert apply_overrides(blackhole_p150a(), got) == dataclasses.replace(blackhole_p150a(), clock_hz=1.2e9)
    with pytest.raises(ValueError, match="given twice"):
        parse_overrides(["ahbm.pe_clock_hz=2e9", "pe_clock_hz=3e9"], default_hw="ahbm")
    # a dict built in code is validated too, also for the other hardware
    with pytest.raises(ValueError, match="pe_clock_hz=-1.0"):
        apply_overrides(blackhole_p150a(), {"ahbm.pe_clock_hz": -1.0})


@pytest.mark.parametrize("cls, preset", [(Blackhole, blackhole_p150a), (AHBM, ahbm_sip)], ids=["blackhole", "ahbm"])
def test_every_preset_value_lies_inside_its_bounds(cls, preset):
    hw = preset()
    prefix = "blackhole" if cls is Blackhole else "ahbm"
    for name in float_fields(hw):
        lo, hi = field_bounds(cls, name)
        assert lo <= float(getattr(hw, name)) <= hi, name
        if f"{prefix}.{name}" not in NOT_MODELLED:
            assert check_override(f"{prefix}.{name}", getattr(hw, name)) == float(getattr(hw, name))


AHBM_CASES = [AhbmConfig("decode", 4096, tile=128), AhbmConfig("decode_sp", 1 << 16, tile=256, cubes=8, pes=8),
              AhbmConfig("prefill_sp", 4096, tile=128, cubes=8, pes=8)]


def _changes_ahbm(name: str, value: float) -> bool:
    """Whether ``value`` for field ``name`` changes any latency (or feasibility) over AHBM_CASES."""
    hw = dataclasses.replace(ahbm_sip(), **{name: value})
    for cfg in AHBM_CASES:
        try:
            if ahbm_evaluate(cfg, hw)["latency_us"] != ahbm_evaluate(cfg)["latency_us"]:
                return True
        except ValueError:  # infeasible now (e.g. TCM): the field constrains the model
            return True
    return False


def test_not_modelled_ahbm_fields_change_nothing_and_every_settable_field_changes_something():
    """Independent of the parser: perturb each spec field directly and watch the exact evaluator."""
    hw = ahbm_sip()
    for name in float_fields(hw):
        lo, hi = field_bounds(AHBM, name)
        v = float(getattr(hw, name))
        new = min(hi, max(lo, v * 0.25 if v > 0 else 1e-6))
        new = {"tcm_bytes_per_pe": 4096.0, "hbm_bytes_per_cube": float(1 << 20)}.get(name, new)  # capacities
        changed = _changes_ahbm(name, new)
        assert changed == (name in settable_fields("ahbm")), (name, changed)


def test_not_modelled_blackhole_fields_change_nothing_and_every_settable_field_changes_something():
    """Every settable field moves the port's step or, for an op kind the port does not run, the
    price of a row of a real op report (the CLIP encoder's: reshape, transpose, softmax, ...; Llama-3.2-1B's
    decode: the create-heads decode from L1); a field refused as not modelled moves neither."""
    from _shared_data import need_file, profiler_reports_dir

    from costmodel.blackhole.opspecs import KernelSpec
    from costmodel.blackhole.report_reader import MODELLED, read_report

    clip = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
    need_file(clip)  # without its rows, a field only those op kinds read would look not modelled
    cfg, cal = ExpertConfig.alpamayo_tt(), load_calibration()
    port = BlackholeConfig.for_expert(cfg)
    base = bh_evaluate(blackhole_p150a(), cal.params, port, cfg=cfg)["step_ms"]
    # the ops themselves (a report row's spec prices on its own board: ChipSpec ignores ``hw``)
    llama = pathlib.Path(__file__).parent / "data" / "profiler_more" / "bh_llama3_2_1b_advisor_incumbent_decode.csv"
    specs = {getattr(r.spec, "inner", r.spec) for path in (clip, llama) for r in read_report(path).timed_rows()
             if r.status == MODELLED}

    def report_prices(hw):
        return [float(KernelSpec(s).us(hw, cal.params)) for s in sorted(specs, key=repr)]

    report_base = report_prices(blackhole_p150a())
    for name in float_fields(blackhole_p150a()):
        v = float(getattr(blackhole_p150a(), name))
        new = {"dram_capacity_bytes": 1e9, "l1_bytes_per_core": 64 * 1024.0}.get(name, v * 0.5)
        hw = dataclasses.replace(blackhole_p150a(), **{name: new})
        try:
            changed = bh_evaluate(hw, cal.params, port, cfg=cfg)["step_ms"] != base
        except ValueError:  # refused now (capacity): the field constrains the model
            changed = True
        if not changed:
            try:
                changed = report_prices(hw) != report_base
            except ValueError:
                changed = True
        assert changed == (name in settable_fields("blackhole")), (name, changed)


@pytest.mark.parametrize("flags, message", [
    (["--set", "ahbm.cpu_issue_s=-1"], "cpu_issue_s=-1.0: expected a finite number"),
    (["--set", "ahbm.pe_clock_hz=-1e9"], "pe_clock_hz=-1000000000.0"),
    (["--set", "ahbm.pe_clock_hz=0"], "pe_clock_hz=0.0"),
    (["--set", "ahbm.hbm_efficiency=nan"], "hbm_efficiency=nan"),
    (["--hw", "mesh_x=2"], "'mesh_x' is static structure"),
    (["--hw", "dma_remote_cube_latency_s=1e-6"], "is not modelled"),
    (["--js"], "unrecognized arguments: --js"),  # no abbreviation that silently means something else
])
def test_ahbm_cli_refuses_bad_overrides(flags, message, capsys):
    assert ahbm_cli.main(["eval", "--case", "decode", "--seq-len", "4096", *flags]) == 2
    err = capsys.readouterr().err
    assert "error: " in err and message in err and "Traceback" not in err


def test_ahbm_cli_set_and_deprecated_hw_agree_and_json_is_strict(capsys):
    argv = ["eval", "--case", "decode", "--seq-len", "4096", "--json"]
    assert ahbm_cli.main([*argv, "--set", "ahbm.pe_clock_hz=2e9"]) == 0
    new = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert ahbm_cli.main([*argv, "--hw", "pe_clock_hz=2e9"]) == 0
    captured = capsys.readouterr()
    assert "deprecated" in captured.err
    assert json.loads(captured.out, parse_constant=pytest.fail) == new
    slow = ahbm_evaluate(AhbmConfig("decode", 4096), dataclasses.replace(ahbm_sip(), pe_clock_hz=2e9))
    assert new["latency_us"] == pytest.approx(slow["latency_us"], rel=1e-6)


def test_layer_fields_are_scoped_per_command(monkeypatch, capsys):
    """UCIe / remote-SIP / pseudo-channel fields: refused by the attention-kernel commands (one SIP,
    the controller rate), accepted by the decoder-layer token model, which reads them."""
    from costmodel.overrides import LAYER_READS
    from experiments import ahbm_token

    hw = ahbm_sip()
    for key in sorted(LAYER_READS):
        item = f"{key}={float(getattr(hw, key.split('.', 1)[1])) * 0.5!r}"
        with pytest.raises(ValueError, match="not modelled by this command.*experiments.ahbm_token"):
            parse_overrides([item])
        assert parse_overrides([item], hw="ahbm", scope="layer") == {key: float(item.split("=")[1])}
        assert key.split(".", 1)[1] in settable_fields("ahbm", "layer")
        assert key.split(".", 1)[1] not in settable_fields("ahbm")
    with pytest.raises(ValueError, match="not modelled by this command: remote-CUBE"):  # no model reads it
        parse_overrides(["ahbm.dma_remote_cube_latency_s=1e-6"], scope="layer")
    with pytest.raises(ValueError, match="scope='chip' unknown"):
        parse_overrides(["ahbm.pe_clock_hz=2e9"], scope="chip")
    # the CLIs: the kernel's refuses (exit 2), the token study's accepts and prices it
    assert ahbm_cli.main(["eval", "--case", "decode", "--seq-len", "4096", "--set", "ahbm.ucie_bytes_per_s=32e9"]) == 2
    assert "experiments.ahbm_token" in capsys.readouterr().err
    from costmodel.ahbm.layer_plan import LayerConfig
    monkeypatch.setattr(ahbm_token, "points", lambda quick: [LayerConfig("decode", 8192, sips=2)])
    assert ahbm_token.main(["--no-sim", "--json", "--set", "ahbm.ucie_bytes_per_s=32e9"]) == 0
    slow = json.loads(capsys.readouterr().out)[0]["layer_us"]
    assert ahbm_token.main(["--no-sim", "--json"]) == 0
    assert slow > json.loads(capsys.readouterr().out)[0]["layer_us"]  # 2 SIPs: the all-reduce crosses UCIe


def test_layer_read_fields_change_the_token_latency():
    """Independent of the parser: each field the layer scope accepts moves the layer model's token
    latency (2 SIPs: weights streamed over the pseudo-channels, all-reduces over UCIe)."""
    from costmodel.ahbm.layer import evaluate_layer
    from costmodel.ahbm.layer_plan import LayerConfig
    from costmodel.overrides import LAYER_READS

    cfg, hw = LayerConfig("decode", 8192, sips=2), ahbm_sip()
    base = evaluate_layer(cfg, hw)["token_us"]
    for key in sorted(LAYER_READS):
        name = key.split(".", 1)[1]
        other = evaluate_layer(cfg, dataclasses.replace(hw, **{name: float(getattr(hw, name)) * 0.25}))["token_us"]
        assert other != base, name
