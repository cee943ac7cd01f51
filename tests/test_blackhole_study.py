"""The Blackhole report section: contract, honoured hardware overrides, numbers consistent with the model."""

import dataclasses
import json

import pytest

from costmodel.blackhole import BlackholeConfig, evaluate
from costmodel.blackhole.fit import load_calibration
from costmodel.hardware import blackhole_p150a
from experiments.blackhole_study import hardware_with, report_section
from jaxref.config import ExpertConfig
from jaxref.render import SectionResult

CFG = ExpertConfig.alpamayo_tt()


def test_section_honours_overrides(tmp_path):
    overrides = {"blackhole.dram_peak_bytes_per_s": 448e9, "ahbm.hbm_efficiency": 0.5}
    sec = report_section(tmp_path, quick=True, overrides=overrides)
    assert isinstance(sec, SectionResult)
    json.dumps(sec.results)
    assert all((tmp_path / f).stat().st_size > 1000 and f in sec.markdown for f in sec.figures)
    cal, port = load_calibration(), BlackholeConfig.port(CFG)
    slow = evaluate(dataclasses.replace(blackhole_p150a(), dram_peak_bytes_per_s=448e9), cal.params, port, cfg=CFG)
    default = evaluate(blackhole_p150a(), cal.params, port, cfg=CFG)
    step, lo, hi = sec.results["step_ms"]
    assert step == pytest.approx(slow["step_ms"], rel=1e-5) and step > default["step_ms"] + 1.0
    assert lo < step < hi
    assert sec.results["hw_overrides"] == {"blackhole.dram_peak_bytes_per_s": 448e9}
    assert sec.results["whatifs"]["bfp8 cache"]["delta_ms"][0] < 0
    assert f"{step:.2f} ms" in sec.markdown
    best = sec.results["plans"]["best"]
    assert "Plan search for < 30 ms/step" in sec.markdown and best[0]["plan"] in sec.markdown
    assert all(b["p_reach"] is None or 0.0 <= b["p_reach"] <= 1.0 for b in best)
    assert best[0]["p_reach"] >= max(b["p_reach"] or 0.0 for b in best)


def test_unknown_override_is_rejected():
    with pytest.raises(ValueError, match="'dram_gbps' is not a field of costmodel.hardware.Blackhole"):
        hardware_with({"blackhole.dram_gbps": 1.0})
    assert hardware_with({"ahbm.pe_clock_hz": 2e9}) == blackhole_p150a()
