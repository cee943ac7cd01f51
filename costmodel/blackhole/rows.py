"""Measured rows: what was measured, where it comes from, and which op spec predicts it.

Data files (``costmodel/data``), each row quoting its source:
  op_times, matmul_table, attention_table, step_times  the port's tables (seeds/EXPERT_NOTES.md)
  public_sdpa_decode   flash-decode vs KV length, bf16 / bfp8 cache, another Blackhole model port
  public_dram_read     DRAM read microbenchmark (validation only: not a ttnn op)
  public_ops           other models' ops on p150a / p100a: rms_norm, eltwise add / mul, heads, 2D-multicast
                       matmuls, flash-decode; each group 'op' scope (a traced or host-timed per-op
                       time, dispatch included, like the port's table) or 'kernel' scope (a profiler
                       report's DEVICE KERNEL DURATION: ``opspecs.KernelSpec``); validation rows
                       except the CLIP eltwise mul groups, which pin the kernel-only launch
  report_calibration   real reports' kernel-only rows of the op classes whose kernel fixed time the
                       port's traced rows cannot separate from dispatch (eltwise, data movement),
                       read from the verbatim excerpts in ``data/reports``; calibration rows, every
                       report of one model one source (``report_calibration_rows``)

Every row belongs to a leave-one-group-out ``group`` (per op class of the per-op table, the
default / tuned matmul columns, the standard / decode SDPA rows, the step rows, each public data
set) and has a ``role``: 'calibration' rows are fitted, 'validation' rows only predicted.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp

from costmodel.blackhole.graph import (
    OP_CLASS,
    BlackholeConfig,
    attention_spec,
    layer_op_specs,
    step_breakdown,
)
from costmodel.blackhole.kinds.sdpa import causal_decode_spec, chunk_rows, decode_split, position_chunks
from costmodel.blackhole.opspecs import (
    ChipSpec,
    DramReadSpec,
    EltwiseSpec,
    HeadsSpec,
    KernelSpec,
    MatmulSpec,
    NormSpec,
    SdpaDecodeSpec,
)
from costmodel.blackhole.params import DATA_DIR, FitParams
from costmodel.blackhole.program_config import DRAM_SHARDED, MCAST_2D, MatmulProgramConfig
from costmodel.blackhole.report_reader import read_report
from costmodel.blackhole.row import Row
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import GRID, Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig

NOTES_FILES = ("op_times.json", "matmul_table.json", "attention_table.json", "step_times.json")
PUBLIC_FILES = ("public_sdpa_decode.json", "public_dram_read.json", "public_ops.json")


@dataclasses.dataclass(frozen=True)
class StepSpec:
    """A whole-graph quantity of ``step_breakdown`` (``key``: 'step_us', 'sample_us', ...) at ``bc``."""

    key: str
    bc: BlackholeConfig
    op_class = "step"


def _notes_rows(data_dir: pathlib.Path, cfg: ExpertConfig) -> list[Row]:
    port = BlackholeConfig.for_expert(cfg)
    port_specs = layer_op_specs(port, cfg=cfg)
    rows: list[Row] = []
    ops = json.loads((data_dir / "op_times.json").read_text())
    for r in ops["rows"]:
        rows.append(Row("op_times", r["op"], f"op_times/{OP_CLASS[r['op']]}", "calibration", r["us"], r["us"],
                        f"{ops['source']}: {r['note']}", port_specs[r["op"]]))
    mm = json.loads((data_dir / "matmul_table.json").read_text())
    default = layer_op_specs(BlackholeConfig.for_expert(cfg, matmuls="default"), cfg=cfg)
    for r in mm["rows"]:
        src = f"{mm['source']}: {r['note']}"
        rows.append(Row("matmul_table", f"{r['name']}/default", "matmul_table/default", "calibration",
                        r["default_us"], r["default_us"], src, default[r["name"]]))
        tuned = dataclasses.replace(port.port.matmuls[r["name"]], in0_block_w=float(r["tuned"]["in0_block_w"]),
                                    per_core_N=float(r["tuned"]["per_core_N"]))
        spec = layer_op_specs(port.replace(matmuls=port.port.matmuls.replace(**{r["name"]: tuned})),
                              cfg=cfg)[r["name"]]
        rows.append(Row("matmul_table", f"{r['name']}/tuned", "matmul_table/tuned", "calibration",
                        r["tuned_us"][0], r["tuned_us"][1], src, spec))
    at = json.loads((data_dir / "attention_table.json").read_text())
    for r in at["rows"]:
        bc = port.replace(k_chunk=float(r["k_chunk"]), q_chunk=float(r["q_chunk"]),
                          cores_per_head=float(r["cores_per_head"]), attn_mode=r["attn_mode"],
                          fold_heads=r["fold_heads"], mask=r["mask_dtype"])
        rows.append(Row("attention_table", r["name"], f"attention_table/{r['attn_mode']}", "calibration",
                        r["us"], r["us"], f"{at['source']}: {r['note']}", attention_spec(bc, cfg)))
    st = json.loads((data_dir / "step_times.json").read_text())
    for r in st["rows"]:
        if r["unit"] != "us":
            raise ValueError(f"step_times row {r['name']}: unit={r['unit']!r}, expected 'us'")
        rows.append(Row("step_times", r["name"], "step_times", "calibration", r["value"], r["value"],
                        f"{st['source']}: {r['note']}", StepSpec(r["name"], port)))
    return rows


def _public_rows(data_dir: pathlib.Path) -> list[Row]:
    rows: list[Row] = []
    sd = json.loads((data_dir / "public_sdpa_decode.json").read_text())
    s = sd["setting"]
    attn = SdpaProgramConfig(float(s["k_chunk"]), 32.0, float(s["cores_per_head"]))
    for r in sd["rows"]:
        read_rows = -(-(r["pos"] + 1) // s["k_chunk"]) * s["k_chunk"]  # chunks up to cur_pos
        spec = SdpaDecodeSpec(attn, float(read_rows), s["users"], s["q_rows"], s["head_dim"], r["kv_dtype"], None,
                              grid_cores=s["grid_cores"])
        rows.append(Row("public_sdpa_decode", r["name"], "public/sdpa_decode_qwen36", "calibration", r["us"], r["us"],
                        f"{sd['source']}: {r['note']}", spec))
    dr = json.loads((data_dir / "public_dram_read.json").read_text())
    for r in dr["rows"]:
        us = dr["total_bytes"] / (r["gb_per_s"] * 1e9) * 1e6
        spec = DramReadSpec(dr["readers"], float(dr["total_bytes"]), float(r["page_bytes"]), r.get("pages_per_barrier"))
        rows.append(Row("public_dram_read", r["name"], "public/dram_read", "validation", us, us,
                        f"{dr['source']}: {r['note']}", spec))
    return rows


def _public_op_spec(kind: str, g: dict, r: dict):
    """The op spec of one row of ``public_ops.json`` (``kind`` of its group)."""
    if kind == "rms_norm":  # at the group's math fidelity (its 'fidelity_source' says where from)
        return NormSpec(int(r["rows"]), int(r["width"]), fidelity=g["fidelity"])
    if kind == "heads":
        return HeadsSpec(r["heads_kind"], int(r["rows"]), int(r["tiles_per_row"]), head_dim=int(r["head_dim"]))
    if kind in ("eltwise_add", "eltwise_mul"):
        return EltwiseSpec(kind.removeprefix("eltwise_"), int(r["rows"]), int(r["width"]),
                           n_inputs=int(r.get("n_inputs", 2)))
    if kind == "matmul_2d":
        pc = MatmulProgramConfig(float(r["in0_block_w"]), float(r["per_core_N"]), float(r["per_core_M"]), kind=MCAST_2D,
                                 grid_x=GRID[0], grid_y=GRID[1], out_subblock_h=int(r["out_subblock_h"]),
                                 out_subblock_w=int(r["out_subblock_w"]), fuse_batch=False)
        return MatmulSpec(int(r["M"]), int(r["K"]), int(r["N"]), pc, "bfp8")
    if kind == "matmul_dram_sharded":
        pc = MatmulProgramConfig(float(r["in0_block_w"]), float(r["per_core_N"]), float(r["per_core_M"]),
                                 kind=DRAM_SHARDED, grid_x=8, grid_y=4,
                                 num_workers_per_dram_bank=int(r["num_workers_per_dram_bank"]))
        return MatmulSpec(int(r["M"]), int(r["K"]), int(r["N"]), pc, r["weight_dtype"], fidelity=r["fidelity"])
    if kind == "sdpa_decode":
        attn = SdpaProgramConfig(float(g["k_chunk"]), 32.0, float(g["cores_per_head"]))
        return SdpaDecodeSpec(attn, float(r["cache_rows"]), int(g["users"]), int(g["q_rows"]), int(g["head_dim"]),
                              r["kv_dtype"], None)
    if kind == "sdpa_decode_causal":  # at a decode position: the reader's chunk rule, core split and spec
        grid, batch, kv_heads, pos = int(g["grid_cores"]), int(g["batch"]), int(g["kv_heads"]), int(r["pos"])
        k_chunk = chunk_rows(int(g["k_chunk"]), pos, fp32_dest_acc=bool(g["fp32_dest_acc"]))
        _, pairs = decode_split(grid_cores=grid, max_cores_per_head=int(g["max_cores_per_head"]), batch=batch,
                                kv_heads=kv_heads)
        return causal_decode_spec(k_chunk=k_chunk, chunks=position_chunks(pos, k_chunk), batch=batch,
                                  kv_heads=kv_heads, q_rows=int(g["q_rows"]), head_dim=int(g["head_dim"]),
                                  kv_dtype=g["kv_dtype"], act_dtype="bf16", fidelity=g["fidelity"],
                                  max_cores_per_head=int(g["max_cores_per_head"]),
                                  grid_cores=None if grid == GRID[0] * GRID[1] else grid, pairs_per_core=pairs)
    raise ValueError(f"public_ops group {g['group']!r}: kind={kind!r} unknown; expected rms_norm, eltwise_add, "
                     "eltwise_mul, heads, matmul_2d, matmul_dram_sharded, sdpa_decode or sdpa_decode_causal")


def _public_op_rows(data_dir: pathlib.Path) -> list[Row]:
    doc = json.loads((data_dir / "public_ops.json").read_text())
    rows: list[Row] = []
    for g in doc["groups"]:
        for key in ("repo", "file", "commit"):
            if not g.get(key):
                raise ValueError(f"public_ops group {g.get('group')!r} lacks its source field {key!r}")
        scope = g.get("scope", "op")
        if scope not in ("op", "kernel"):
            raise ValueError(f"public_ops group {g['group']!r}: scope={scope!r}; expected 'op' (a traced or "
                             "host-timed per-op time, dispatch included) or 'kernel' (DEVICE KERNEL DURATION)")
        role = g.get("role", "validation")
        if role not in ("calibration", "validation", "scope_gap"):
            raise ValueError(f"public_ops group {g['group']!r}: role={role!r}; expected 'calibration', 'validation' "
                             "or 'scope_gap'")
        for r in g["rows"]:
            spec = _public_op_spec(g["kind"], g, r)
            if scope == "kernel":
                spec = KernelSpec(spec)
            grid = tuple(int(v) for v in g["grid"]) if g.get("grid") else None
            if g["chip"] != "p150a" or grid is not None:
                spec = ChipSpec(spec, g["chip"], grid)
            src = f"{g['repo']} {g['file']} @ {g['commit']}: {r['quote']}"
            rows.append(Row("public_ops", r["name"], g["group"], role, float(r["us"]), float(r["us"]), src, spec))
    return rows


REPORT_CALIBRATION_FILE = "report_calibration.json"


def report_sources(data_dir: str | pathlib.Path = DATA_DIR) -> dict[str, str]:
    """{report file stem: its source} of the real reports fitted with the port's tables
    (``report_calibration.json``): every report of one model is one source ('report:<model>')."""
    doc = json.loads((pathlib.Path(data_dir) / REPORT_CALIBRATION_FILE).read_text())
    return {f["report"]: src["source"] for src in doc["sources"] for f in src["files"]}


def report_calibration_rows(data_dir: str | pathlib.Path = DATA_DIR) -> list[Row]:
    """The kernel-only rows of the op classes ``report_calibration.json`` lists, read from the report
    excerpts in ``data/reports`` (the lines of those classes, verbatim): calibration rows of table
    = the model's source, group '<source>/<op class>'."""
    data_dir = pathlib.Path(data_dir)
    doc = json.loads((data_dir / REPORT_CALIBRATION_FILE).read_text())
    rows: list[Row] = []
    for src in doc["sources"]:
        for key in ("source", "repo", "folder", "classes", "files"):
            if not src.get(key):
                raise ValueError(f"{REPORT_CALIBRATION_FILE}: source {src.get('source')!r} lacks {key!r}")
        for f in src["files"]:
            rep = read_report(data_dir / "reports" / f"{f['report']}.csv", hw=blackhole_p150a())
            origin = f"{src['repo']} {src['folder']}{f['path']} @ {f['commit']}"
            for r in rep.measured_rows():
                if r.spec.op_class not in src["classes"]:
                    raise ValueError(f"reports/{f['report']}.csv line {r.name}: op class {r.spec.op_class!r} is not "
                                     f"one of the source's classes {src['classes']}")
                rows.append(dataclasses.replace(
                    r, table=src["source"], name=f"{f['report']}/{r.name}", group=f"{src['source']}/{r.spec.op_class}",
                    role="calibration",
                    source=f"{origin} (excerpt costmodel/data/reports/{f['report']}.csv, {r.source})"))
    return rows


def load_rows(data_dir: str | pathlib.Path = DATA_DIR, *, cfg: ExpertConfig | None = None,
              public: bool = True) -> list[Row]:
    """All measured rows (the notes' tables, then the public data sets and the real reports' kernel rows
    (``report_calibration_rows``) unless ``public=False``)."""
    data_dir = pathlib.Path(data_dir)
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    public_rows = (_public_rows(data_dir) + _public_op_rows(data_dir) + report_calibration_rows(data_dir)
                   if public else [])
    return _notes_rows(data_dir, cfg) + public_rows


def predict(hw: Blackhole, fit: FitParams, specs: tuple, *, cfg: ExpertConfig) -> jax.Array:
    """Modelled time (us) of each spec, exact model; shape [rows]. Equal specs (a row of the per-op
    table and the graph's own op, rms_norm and rms_norm2, ...) are evaluated once: the traced graph
    stays small, which keeps the fit's Jacobian quick to compile."""
    memo: dict = {}

    def op_us(spec):
        if spec not in memo:
            memo[spec] = spec.us(hw, fit)
        return memo[spec]

    breakdowns: dict = {}
    out = []
    for spec in specs:
        if isinstance(spec, StepSpec):
            if spec.bc not in breakdowns:
                breakdowns[spec.bc] = step_breakdown(hw, fit, spec.bc, cfg=cfg, op_us=op_us)
            out.append(breakdowns[spec.bc][spec.key])
        else:
            out.append(op_us(spec))
    return jnp.stack([jnp.asarray(v, jnp.float32) for v in out])
