"""The Alpamayo expert on one Blackhole chip: a calibrated, differentiable roofline with intervals.

Modules:
  params      FitParams: the fitted unknowns, each with unit, meaning, prior and source
  kinds       one module per ttnn op kind (spec, price, core split, op codes, report row) and its registry
  ops         the shared building blocks the kinds price with (DRAM streams, launches, pipeline overlap)
  sdpa        SDPA's formulas (decode, standard, causal prefill)
  program_config  MatmulProgramConfig: the one ttnn matmul program config (kinds) and its legality
  sdpa_program_config  SdpaProgramConfig: the SDPA kernel and program config, its legality, query rows
  port        Port: the one port description (precision, attention, matmuls, compute); Port.check
  opspecs     every op spec type (from its kind) and the KernelSpec / ChipSpec measurement wrappers
  graph       BlackholeConfig, the layer graph, 64-layer step, 10-step sample; ``evaluate``
  rows        measured rows with sources (costmodel/data) and the spec predicting each
  fit         least-squares fit + Laplace covariance (``Calibration``)
  intervals   90% prediction intervals: per op, step, sample, and deltas between settings
  holdout     held-out model validation: leave-one-group-out refits and interval coverage
  report_schema  tt-metal's ops_perf_results op-report schema and its one writer
  report_line  one op-report row as the kinds read it (``ReportLine``, ``Skip``)
  report_reader  real reports read, every row classified by its kind (modelled / skip reason); specs written
  roofline    DRAM floor and gap per op class
  knob_search gradient search over the integer knobs vs exhaustive enumeration (the ``tune`` subcommand)
  cli         ``python -m costmodel.blackhole`` (what-if, ``--vs``, ``calibrate --ops-csv``)
"""

from costmodel.blackhole.graph import (
    FUSED_LAYER_OPS,
    LAYER_OPS,
    OP_CLASS,
    BlackholeConfig,
    attention_us,
    attn_q_rows,
    evaluate,
    layer_op_specs,
    layer_op_us,
    matmul_configs,
    matmul_shapes,
    step_breakdown,
    step_us,
    sweep_step_us,
    validate,
)
from costmodel.blackhole.params import FitParams, initial_params, load_fitted
from costmodel.blackhole.port import MATMULS, ComputeConfig, MatmulConfigs, Port
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig

__all__ = [
    "FUSED_LAYER_OPS",
    "LAYER_OPS",
    "MATMULS",
    "OP_CLASS",
    "BlackholeConfig",
    "ComputeConfig",
    "FitParams",
    "MatmulConfigs",
    "MatmulProgramConfig",
    "Port",
    "SdpaProgramConfig",
    "attention_us",
    "attn_q_rows",
    "evaluate",
    "initial_params",
    "layer_op_specs",
    "layer_op_us",
    "load_fitted",
    "matmul_configs",
    "matmul_shapes",
    "step_breakdown",
    "step_us",
    "sweep_step_us",
    "validate",
]
