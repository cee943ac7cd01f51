"""The op-kind registry (``costmodel.blackhole.kinds``): one module per ttnn op kind, through which
the report reader, the report writer and the emulation's recorded report all go.

The round-trip oracle is the reader itself on rows the writer never saw as specs: every op the
expert's graph, the stored measured rows and the repository's real reports hold is written as a
report row, read back as the same spec, and carries the CORE COUNT its kind prices with."""

import dataclasses
import inspect
import pathlib

import pytest
from _report_util import inner, records, tt_perf_report
from _shared_data import need_file, profiler_reports_dir

from costmodel.blackhole import BlackholeConfig, kinds, opspecs
from costmodel.blackhole.graph import layer_op_specs
from costmodel.blackhole.program_config import DRAM_SHARDED
from costmodel.blackhole.program_config import KINDS as MATMUL_KINDS
from costmodel.blackhole.report_reader import MODELLED, read_report, write_csv
from costmodel.blackhole.rows import load_rows
from costmodel.hardware import blackhole_p150a
from device.recorded_report import OP_CODE
from jaxref.config import ExpertConfig

HW = blackhole_p150a()
# the real reports: the repository's (tt-perf-report's own output beside its input apart) and those beside it
REPORTS = sorted(p for p in (pathlib.Path(__file__).parent / "data").glob("profiler_*/bh_*.csv")
                 if not p.stem.endswith("_perf_report")) + sorted(profiler_reports_dir().glob("bh_*.csv"))
# the forms a spec may lack a report row for, each with its reason (the message ValueError names)
NO_FORM = ("causal SDPA decode (no mask) has no op-report form", "has no op-report form")


def as_read(spec):
    """``spec`` as a report row can carry it: a DRAM-sharded config has no grid field (its shard spec
    sets the cores; the price does not read the grid), so it reads back on the chip's grid."""
    cfg = getattr(spec, "cfg", None)
    if cfg is not None and cfg.kind == DRAM_SHARDED:
        return dataclasses.replace(spec, cfg=dataclasses.replace(cfg, grid_x=HW.grid_x, grid_y=HW.grid_y))
    return spec


def test_every_kind_module_has_the_whole_interface_and_owns_its_codes():
    seen = {}
    for k in kinds.KINDS:
        for name in ("OP_CLASSES", "SPECS", "cores") + (("read",) if k.OP_CLASSES else ()):
            assert hasattr(k, name), (k.__name__, name)
        for spec_type in k.SPECS:  # a spec lives in its kind's module
            assert spec_type.__module__ == k.__name__ and dataclasses.is_dataclass(spec_type)
            assert inspect.signature(spec_type.us).parameters.keys() >= {"hw", "fit"}
        for cls, codes in k.OP_CLASSES.items():
            assert codes and cls not in seen, cls
            seen[cls] = k
    codes = [c for cs in kinds.OP_CODES.values() for c in cs]
    assert len(codes) == len(set(codes)), "an op code in two op classes"
    # every op spec type of the model belongs to exactly one kind; the wrappers to none
    for t in opspecs.OpSpec.__args__:
        owners = [k for k in kinds.KINDS if t in k.SPECS]
        assert len(owners) == (0 if t in (opspecs.KernelSpec, opspecs.ChipSpec) else 1), t
    # the emulation's recorded report names each ttnn call by its class's written code
    assert set(OP_CODE.values()) <= {codes[0] for codes in kinds.OP_CODES.values()}


def test_an_unknown_spec_is_refused_with_its_type():
    with pytest.raises(ValueError, match="int is not an op kind"):
        kinds.cores(3, HW)
    with pytest.raises(ValueError, match="DramReadSpec has no op-report form"):
        kinds.record(opspecs.DramReadSpec(8, 1e6, 2048), HW, 1.0)


@pytest.fixture(scope="module")
def every_spec():
    """{spec: where it comes from} over the port's layer graph, the stored rows and the real reports."""
    cfg = ExpertConfig.alpamayo_tt()
    out = {s: "port graph" for s in layer_op_specs(BlackholeConfig.for_expert(cfg), cfg=cfg).values()}
    for r in load_rows():
        if not hasattr(r.spec, "key"):  # a StepSpec is the whole graph
            out.setdefault(inner(r.spec), f"{r.table}/{r.name}")
    need_file(profiler_reports_dir() / "bh_64_clip_encoder_1.csv")
    for path in REPORTS:
        for r in read_report(path).rows:
            if r.status == MODELLED:
                out.setdefault(inner(r.spec), f"{path.name}:{r.line}")
    return out


def test_every_written_op_reads_back_as_itself_with_the_cores_priced(every_spec, tmp_path):
    written = []
    for spec, where in every_spec.items():
        try:
            kinds.record(spec, HW, 1.0)
        except ValueError as e:
            assert any(reason in str(e) for reason in NO_FORM), (where, e)
            continue
        written.append((spec, where))
    path = tmp_path / "all.csv"
    write_csv(path, [(s, 1.0) for s, _ in written])
    rows, recs = read_report(path, hw=HW).rows, records(path)
    assert len(rows) == len(recs) == len(written)
    for (spec, where), row, rec in zip(written, rows, recs, strict=True):
        assert row.status == MODELLED and inner(row.spec) == as_read(spec), (where, row.status)
        assert int(rec["CORE COUNT"]) == kinds.cores(spec, HW) == kinds.cores(row.spec, HW), where
    # tt-perf-report, the tool users read reports with, takes every written row: one per op, under its code
    theirs = tt_perf_report(path, tmp_path)
    assert [r["OP Code"].split(" ")[0] for r in theirs] == [rec["OP CODE"] for rec in recs]
    assert not [r["OP Code"] for r in theirs if "unknown shape" in r["OP Code"]]
    # every kind with a report form, and every matmul config family, is among them
    assert {kinds.kind_of(s) for s, _ in written} == {k for k in kinds.KINDS if hasattr(k, "record")}
    assert {s.cfg.kind for s, _ in written if hasattr(s, "cfg")} == set(MATMUL_KINDS)
