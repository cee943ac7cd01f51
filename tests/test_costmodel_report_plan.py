"""``python -m costmodel.blackhole plan --ops-csv``: the best priced change of every matmul row of a
report, checked against the port's own exhaustive knob search (``knob_search.exhaustive``, its own
enumeration of valid configs) on the port's layer emitted with ttnn's default matmul configs."""

import dataclasses
import json

import pytest

from costmodel.blackhole import BlackholeConfig, knob_search
from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.port import matmul_shapes
from costmodel.blackhole.report_plan import plan_report
from costmodel.blackhole.report_reader import read_report
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()


@pytest.fixture(scope="module")
def default_report(tmp_path_factory):
    path = tmp_path_factory.mktemp("plan") / "default.csv"
    main(["--emit-csv", str(path), "--matmuls", "default", "--json"])
    return path


def test_best_configs_match_the_exhaustive_knob_search(default_report):
    rep, cal = read_report(default_report), load_calibration()
    plans = [p for p in plan_report(rep, cal) if not p.flag]
    by_line = {r.line: r for r in rep.rows}
    start = BlackholeConfig.for_expert(CFG, matmuls="default")
    ex = knob_search.exhaustive(rep.hw, cal.params, start, cfg=CFG)["per_op"]
    names = {shape: name for name, shape in matmul_shapes(CFG).items()}
    assert len(plans) == 5
    for p in plans:
        spec = by_line[p.line].spec
        name = names[(spec.M, spec.K, spec.N)]
        bw, pn = ex[name]["config"]
        at_ex = dataclasses.replace(spec, cfg=dataclasses.replace(start.port.matmuls[name], in0_block_w=float(bw),
                                                                  per_core_N=float(pn)))
        # each search minimises its own objective (plan: kernel-only; knob search: traced op time)
        # over valid configs, so neither can beat the other's optimum on its own objective
        assert p.after_us <= float(KernelSpec(at_ex).us(rep.hw, cal.params)) * (1 + 1e-5)
        assert p.saving_us > 0 and p.lo_us <= p.saving_us <= p.hi_us and p.after_us < p.predicted_us


def test_plan_cli_json_and_flags(default_report, capsys):
    capsys.readouterr()
    assert main(["plan", "--ops-csv", str(default_report), "--target-ms", "0.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    flagged = [r for r in doc["rows"] if r["flag"]]
    assert all("weights" in r["change"] and "accuracy not modelled" in r["flag"] for r in flagged)
    assert doc["predicted_saving_us"] == pytest.approx(sum(r["saving_us"] for r in doc["rows"] if not r["flag"]))
    assert main(["plan", "--ops-csv", str(default_report), "--target-ms", "-1"]) == 2
    assert "--target-ms" in capsys.readouterr().err
