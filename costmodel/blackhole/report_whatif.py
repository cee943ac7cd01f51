"""What-ifs on one real op-report row: its program config, formats, fidelity or activation memory
changed from the command line, priced with the delta's 90% interval.

    python -m costmodel.blackhole whatif --ops-csv ops.csv --line 19 --change in0_block_w=4 [--change weight_dtype=bfp4]

A 1D / 2D multicast or DRAM-sharded matmul takes its program-config fields (``CONFIG_FIELDS``), a
MinimalMatmul its block sizes by ttnn's MinimalMatmulConfig names (``MINIMAL_CONFIG_FIELDS``: the
subblock kept where it divides the new blocks, else ttnn's chooser's, the plan search's rule), any op
its format / fidelity fields (``SPEC_FIELDS``), a multicast matmul where its activation lives
(``IN0_MEMORY``). A changed config is checked with the op's one legality rule
(``MatmulProgramConfig.validate`` / ``MinimalMatmulSpec.validate``); each refusal is a ValueError
naming the field, the value and what was expected.
"""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.fit import Calibration
from costmodel.blackhole.intervals import LEVEL, quantile
from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.opspecs import ChipSpec, KernelSpec, MatmulSpec
from costmodel.blackhole.plan_candidates import minimal_subblock
from costmodel.blackhole.program_config import IN0_SHARD_LAYOUT
from costmodel.blackhole.report_diff import delta_interval, linearised
from costmodel.blackhole.report_reader import MODELLED, Report

CONFIG_FIELDS = ("in0_block_w", "per_core_N", "per_core_M", "out_subblock_h", "out_subblock_w")
# a MinimalMatmul row's config fields (ttnn's MinimalMatmulConfig names) -> MinimalMatmulSpec fields
MINIMAL_CONFIG_FIELDS = {"M_block_size": "m_block", "K_block_size": "k_block", "N_block_size": "n_block",
                         "subblock_h": "subblock_h", "subblock_w": "subblock_w"}
SPEC_FIELDS = ("weight_dtype", "act_dtype", "fidelity", "kv_dtype", "mask_dtype")
# where a matmul's activation (in0) lives: DRAM- or L1-interleaved, or L1-sharded in the layout its
# program-config kind reads (program_config.IN0_SHARD_LAYOUT); the MatmulSpec flags of each
IN0_MEMORY = {"dram": {"in0_l1": False, "in0_sharded": False}, "l1": {"in0_l1": True, "in0_sharded": False},
              "l1_sharded": {"in0_l1": False, "in0_sharded": True}}


def changed_spec(spec, changes: dict[str, str], board):
    """``spec`` (an op spec of a report row, possibly a ``ChipSpec``) with ``changes`` applied:
    program-config fields of a matmul (``CONFIG_FIELDS``, integers), format / fidelity fields of
    any op that has them (``SPEC_FIELDS``) and a multicast matmul's ``in0_memory`` (``IN0_MEMORY``).
    ValueError names a field the op lacks, a bad value, or a changed matmul config that ttnn would
    refuse (``MatmulProgramConfig.validate``)."""
    if isinstance(spec, ChipSpec):
        return dataclasses.replace(spec, inner=changed_spec(spec.inner, changes, spec.board()))
    out = spec
    cfg_changes, blocks = {}, {}
    for key, value in changes.items():
        if key in MINIMAL_CONFIG_FIELDS:
            if not isinstance(spec, MinimalMatmulSpec):
                raise ValueError(f"--change {key}={value}: {type(spec).__name__} is not a MinimalMatmul; expected "
                                 f"one of {_fields_of(spec)}")
            blocks[MINIMAL_CONFIG_FIELDS[key]] = _count(key, value)
        elif key in CONFIG_FIELDS:
            if not isinstance(spec, MatmulSpec):
                raise ValueError(f"--change {key}={value}: {type(spec).__name__} has no matmul program config; "
                                 f"expected one of {_fields_of(spec)}")
            n = _count(key, value)
            cfg_changes[key] = n if key.startswith("out_subblock") else float(n)
        elif key == "in0_memory":
            if not isinstance(spec, MatmulSpec) or spec.cfg.kind not in IN0_SHARD_LAYOUT:
                raise ValueError(f"--change in0_memory={value}: {type(spec).__name__} is not a 1D / 2D multicast "
                                 f"matmul; expected a row whose program config is one of {sorted(IN0_SHARD_LAYOUT)}")
            if value not in IN0_MEMORY:
                raise ValueError(f"--change in0_memory={value!r}: expected one of {list(IN0_MEMORY)}")
            out = dataclasses.replace(out, **IN0_MEMORY[value])
        elif key in SPEC_FIELDS:
            if not hasattr(spec, key):
                raise ValueError(f"--change {key}={value}: {type(spec).__name__} has no {key}; expected one of "
                                 f"{_fields_of(spec)}")
            out = dataclasses.replace(out, **{key: value})
        else:
            raise ValueError(f"--change {key}={value}: unknown field; expected one of "
                             f"{[*CONFIG_FIELDS, *MINIMAL_CONFIG_FIELDS, *SPEC_FIELDS, 'in0_memory']}")
    if cfg_changes:
        subblock = {} if any(k.startswith("out_subblock") for k in cfg_changes) else {"out_subblock_h": None,
                                                                                       "out_subblock_w": None}
        out = dataclasses.replace(out, cfg=dataclasses.replace(out.cfg, **cfg_changes, **subblock))
    if blocks:
        m, n = blocks.get("m_block", out.m_block), blocks.get("n_block", out.n_block)
        sub = {} if {"subblock_h", "subblock_w"} & set(blocks) else dict(zip(("subblock_h", "subblock_w"),
                                                                              minimal_subblock(out, m, n)))
        out = dataclasses.replace(out, **{**sub, **blocks})
    if isinstance(out, MatmulSpec):
        out.cfg.validate("matmul", board, M=out.M, K=out.K, N=out.N, weight_dtype=out.weight_dtype,
                         act_dtype=out.act_dtype, fp32_dest_acc=True)
    if isinstance(out, MinimalMatmulSpec):
        out.validate(board)
    return out


def _count(key: str, value: str) -> int:
    """A config field's value given on the command line: an integer >= 1, else ValueError."""
    if not (value.isdigit() and int(value) >= 1):
        raise ValueError(f"--change {key}={value!r}: expected an integer >= 1")
    return int(value)


def _fields_of(spec) -> list[str]:
    """The ``--change`` fields a row's op takes."""
    config = (CONFIG_FIELDS if isinstance(spec, MatmulSpec)
              else tuple(MINIMAL_CONFIG_FIELDS) if isinstance(spec, MinimalMatmulSpec) else ())
    return [*config, *(f for f in SPEC_FIELDS if hasattr(spec, f))]


def whatif_row(report: Report, line: int, changes: dict[str, str], cal: Calibration, *, level: float = LEVEL) -> dict:
    """The row at ``line`` before and after ``changes``: measured, predicted now, predicted after, and
    the predicted delta with its 90% interval (``report_diff.delta_interval``)."""
    row = next((r for r in report.rows if r.line == line), None)
    if row is None:
        raise ValueError(f"--line {line}: no data line {line} in {report.path}")
    if row.status != MODELLED:
        raise ValueError(f"--line {line} ({row.op_code}): not priced by the model ({row.status})")
    board = row.spec.board() if isinstance(row.spec, ChipSpec) else report.hw
    new = changed_spec(row.spec, changes, board)
    a, b = linearised(report.hw, cal, [KernelSpec(row.spec), KernelSpec(new)], [row.duration_us] * 2)
    d, lo, hi, _ = delta_interval(cal, a, b, z=quantile(cal, level))
    return {"line": line, "op_code": row.op_code, "changes": dict(changes), "measured_us": row.duration_us,
            "predicted_us": a[0], "after_us": b[0], "delta_us": d, "delta_interval_us": [lo, hi],
            "after_interval_us": [row.duration_us + lo, row.duration_us + hi]}


__all__ = ["CONFIG_FIELDS", "IN0_MEMORY", "MINIMAL_CONFIG_FIELDS", "SPEC_FIELDS", "changed_spec", "whatif_row"]
