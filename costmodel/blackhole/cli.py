"""``python -m costmodel.blackhole``: what-if predictions with intervals, deltas, and calibration.

    python -m costmodel.blackhole --smax 5120 --seq-len 4700 --kv-dtype bfp8 --json
    python -m costmodel.blackhole --smax 5120 --vs                 # delta vs the measured port (Smax 8192)
    python -m costmodel.blackhole --kv-dtype bfp8 --vs "--kv-dtype bf16"
    python -m costmodel.blackhole --emit-csv predicted.csv          # model as a profiler op report
    python -m costmodel.blackhole calibrate --ops-csv ops_perf_results.csv --out my_calibration.json
    python -m costmodel.blackhole --calibration my_calibration.json --smax 5120
    python -m costmodel.blackhole validate [--write]                 # every row held out, coverage, MAPE
    python -m costmodel.blackhole tune --matmuls default            # gradient tuning vs exhaustive
    python -m costmodel.blackhole plan --target-ms 30                # option combinations reaching 30 ms
    python -m costmodel.blackhole coverage ops_perf_results.csv      # share of a report's device time priced
    python -m costmodel.blackhole predict --ops-csv ops_perf_results.csv  # every row vs the model, ranked
    python -m costmodel.blackhole predict --ops-csv ops.csv --start-signpost PERF_DECODE --end-signpost PERF_DECODE_END
    python -m costmodel.blackhole diff before.csv after.csv         # measured vs predicted deltas of a change
    python -m costmodel.blackhole plan --ops-csv ops_perf_results.csv  # best priced change per matmul / SDPA row, add+norm fusions
    python -m costmodel.blackhole whatif --ops-csv ops.csv --line 19 --change in0_block_w=4  # one row changed

JSON keys: ``per_op_us`` (op -> us), ``layer_us``, ``layer_trace_us``, ``step_ms``, ``step_full_ms``,
``sample_ms``, ... as before, plus ``interval_us`` (op / ``layer_us`` -> [lo, hi]) and
``interval_ms`` (``step_ms`` / ``step_full_ms`` / ``sample_ms`` -> [lo, hi]), 90% intervals; with
``--vs``, ``vs`` holds the base setting and the deltas with their intervals.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import pathlib
import shlex
import sys

from costmodel.blackhole import cli_tune
from costmodel.blackhole import fit as fitting
from costmodel.blackhole.graph import (
    BlackholeConfig,
    evaluate,
    layer_op_specs,
    matmul_configs,
)
from costmodel.blackhole.intervals import LEVEL, delta_intervals, intervals
from costmodel.blackhole.opspecs import KernelSpec
from costmodel.blackhole.params import CALIBRATION_PATH, PARAM_NAMES, param_info
from costmodel.blackhole.port import MATMULS
from costmodel.blackhole.report_reader import (
    DEVICE_ID_WORDS,
    add_decode_position_argument,
    read_report,
    write_csv,
)
from costmodel.blackhole.rows import load_rows
from costmodel.hardware import BLACKHOLE_PRESETS, Blackhole, blackhole
from costmodel.overrides import add_set_argument, apply_overrides, parse_overrides
from jaxref.config import ExpertConfig
from jaxref.validation import (
    choices_of,
    chosen_output,
    cli_main,
    cli_run,
    dumps_strict,
    nonnegative_int,
    output_file,
    positive_float,
    positive_int,
)
from jaxref.vocabulary import AttnMode, CacheFormat, MaskFormat, MathFidelity, MatmulChoice, WeightFormat

TOTALS_MS = {"step_us": "step_ms", "step_full_us": "step_full_ms", "sample_us": "sample_ms"}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole",
                                description="What-if: predicted per-op times of one expert layer on Blackhole and "
                                            "the step / sample totals with 90% prediction intervals (calibrated "
                                            "roofline). Subcommands, each with --help: predict, diff, plan, whatif, "
                                            "coverage (real op reports), calibrate, validate, tune.",
                                epilog="example: python -m costmodel.blackhole --smax 5120 --kv-dtype bfp8 --vs")
    p.add_argument("--board", default=None, choices=sorted(BLACKHOLE_PRESETS), help="Blackhole board (default p150a)")
    p.add_argument("--hw", dest="board_deprecated", default=None, choices=sorted(BLACKHOLE_PRESETS),
                   help="deprecated spelling of --board")
    add_set_argument(p, hw="blackhole")
    p.add_argument("--preset", default="alpamayo_tt", help="ExpertConfig preset (geometry)")
    p.add_argument("--smax", type=positive_int, default=None, help="cache rows Smax (default: preset max_seq_len)")
    p.add_argument("--seq-len", type=positive_int, default=4700, help="valid VLM rows S (<= Smax - T)")
    p.add_argument("--kv-dtype", default="bf16", choices=choices_of(CacheFormat), help="KV cache format")
    p.add_argument("--weight-dtype", default="bfp8", choices=choices_of(WeightFormat), help="matmul weight format")
    p.add_argument("--mask-dtype", default=None, choices=choices_of(MaskFormat),
                   help="default: bfp4 (decode) / bf16 (standard)")
    p.add_argument("--attn-mode", default="decode", choices=choices_of(AttnMode), help="SDPA kernel")
    p.add_argument("--k-chunk", type=positive_int, default=128)
    p.add_argument("--q-chunk", type=positive_int, default=32, help="standard SDPA only")
    p.add_argument("--fold-heads", action="store_true", help="standard SDPA with the group's q heads on rows")
    p.add_argument("--cores-per-head", type=positive_int, default=16, help="decode SDPA max_cores_per_head_batch (<= 16)")
    p.add_argument("--matmuls", default="tuned", choices=choices_of(MatmulChoice),
                   help="tuned (the port's configs) | default (ttnn heuristic)")
    p.add_argument("--matmul-config", action="append", default=[], metavar="NAME=IN0_BLOCK_W,PER_CORE_N",
                   help="override one matmul's 1D config, e.g. w2=48,1 (repeatable)")
    p.add_argument("--grid", default=None, metavar="XxY", help="matmul core grid, e.g. 11x10 (default: the chip's)")
    p.add_argument("--fidelity", default="HiFi2", choices=choices_of(MathFidelity))
    p.add_argument("--fuse-add-norm", action="store_true", help="fuse each residual add into the next rms_norm")
    p.add_argument("--calibration", default=None, help="calibration JSON (default: costmodel/data/calibration.json; "
                                                       "write one with the calibrate subcommand)")
    p.add_argument("--vs", nargs="?", const="", default=None, metavar="'BASE FLAGS'",
                   help="print this setting as a delta against a base setting given by the same flags in one "
                        "quoted string (empty: the defaults, i.e. the measured port), with correlated intervals")
    p.add_argument("--draws", type=nonnegative_int, default=0, metavar="N",
                   help="propagate parameter uncertainty by Monte Carlo with N draws (default: linearised)")
    p.add_argument("--emit-csv", type=output_file, default=None, metavar="FILE",
                   help="write the predicted per-op times of one layer as a device-profiler op report CSV "
                        "(kernel-only, as its DEVICE KERNEL DURATION column: no dispatch)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def config_from_args(args: argparse.Namespace) -> tuple[Blackhole, ExpertConfig, BlackholeConfig]:
    """Build (hardware, geometry, setting) from parsed CLI flags; raises ValueError on bad input."""
    hw = apply_overrides(blackhole(board_of(args)), parse_overrides(args.overrides, hw="blackhole"))
    cfg = ExpertConfig.preset(args.preset)
    smax_rows = cfg.max_seq_len if args.smax is None else args.smax
    grid = (hw.grid_x, hw.grid_y)
    if args.grid is not None:
        parts = args.grid.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"grid={args.grid!r} must look like '11x10' (positive columns x rows)")
        grid = (int(parts[0]), int(parts[1]))
    mms = matmul_configs(cfg, args.matmuls, grid_x=grid[0], grid_y=grid[1])
    given: dict[str, str] = {}
    for item in args.matmul_config:
        name, _, vals = item.partition("=")
        fields = vals.split(",")
        if name not in MATMULS or len(fields) != 2:
            raise ValueError(f"matmul-config={item!r} must look like NAME=IN0_BLOCK_W,PER_CORE_N with NAME in "
                             f"{list(MATMULS)}")
        if name in given:
            raise ValueError(f"matmul-config={item!r}: {name} is already set by --matmul-config {given[name]}; "
                             "expected each matmul at most once")
        given[name] = item
        try:
            ibw, pcn = (float(v) for v in fields)
        except ValueError:
            raise ValueError(f"matmul-config={item!r}: in0_block_w and per_core_N must be numbers") from None
        mms[name] = dataclasses.replace(mms[name], in0_block_w=ibw, per_core_N=pcn)
    mask = {} if args.mask_dtype is None else {"mask": args.mask_dtype}  # else the mode's (mask_dtype_for)
    bc = BlackholeConfig.for_expert(cfg, matmuls=mms, grid=(hw.grid_x, hw.grid_y), attn_mode=args.attn_mode,
                                    smax=float(smax_rows), seq_len=float(args.seq_len), k_chunk=float(args.k_chunk),
                                    q_chunk=float(args.q_chunk), cores_per_head=float(args.cores_per_head),
                                    fold_heads=args.fold_heads, cache=args.kv_dtype, weights=args.weight_dtype,
                                    fidelity=args.fidelity, fuse_add_norm=args.fuse_add_norm, **mask)
    return hw, cfg, bc


def board_of(args: argparse.Namespace) -> str:
    """The board preset from ``--board`` (or its deprecated spelling ``--hw``)."""
    if args.board_deprecated is not None:
        if args.board is not None and args.board != args.board_deprecated:
            raise ValueError(f"--hw {args.board_deprecated} contradicts --board {args.board}")
        print("warning: --hw BOARD is deprecated; use --board BOARD", file=sys.stderr)
    return args.board or args.board_deprecated or "p150a"


def hw_overrides(args: argparse.Namespace) -> dict:
    """``{"hw_overrides": {...}}`` when ``--set`` was given (so a what-if on the hardware is visible), else {}."""
    over = parse_overrides(args.overrides, hw="blackhole")
    return {"hw_overrides": over} if over else {}


# Options of the run itself, not of a setting: a base setting (--vs '...') may not carry them.
RUN_OPTIONS = ("calibration", "draws", "emit_csv", "json", "vs")


def base_setting_args(text: str, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Parse ``--vs``'s quoted flags; raises ValueError for an option that belongs to the run."""
    base = parser.parse_args(shlex.split(text))
    given = [name for name in RUN_OPTIONS if getattr(base, name) != parser.get_default(name)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise ValueError(f"vs={text!r}: {flags} configure the run, not the base setting; expected only setting "
                         "flags inside --vs (give run options outside it: they apply to both)")
    return base


def whatif(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """Evaluate one setting (and its delta against ``--vs``) with intervals; returns the JSON dict."""
    hw, cfg, bc = config_from_args(args)
    base_args = None if args.vs is None else base_setting_args(args.vs, parser)  # refused before computing
    cal = calibration_of(args)
    result = evaluate(hw, cal.params, bc, cfg=cfg)
    iv = intervals(cal, hw, bc, cfg=cfg, draws=args.draws)
    result["interval_us"] = {k: [lo, hi] for k, (_, lo, hi) in iv["ops"].items()}
    result["interval_us"]["layer_us"] = list(iv["layer_us"][1:])
    result["interval_ms"] = {ms: [iv[us][1] / 1e3, iv[us][2] / 1e3] for us, ms in TOTALS_MS.items()}
    result["interval_level"] = LEVEL
    result["interval_method"] = f"monte carlo ({args.draws} draws)" if args.draws else "linearised"
    result["setting"] = {"hw": hw.name, **hw_overrides(args), "preset": args.preset, **bc.setting()}
    if base_args is not None:
        try:
            hw_b, cfg_b, base = config_from_args(base_args)
            if cfg_b != cfg:
                raise ValueError(f"the base must use the same --preset as the setting ({args.preset!r})")
            d = delta_intervals(cal, hw, bc, base, cfg=cfg, hw_base=hw_b, draws=args.draws)
        except ValueError as e:
            raise ValueError(f"vs={args.vs!r}: {e}") from None
        result["vs"] = {"setting": {"hw": hw_b.name, **hw_overrides(base_args), "preset": base_args.preset,
                                    **base.setting()},
                        "delta_us": {k: v[0] for k, v in d["ops"].items()},
                        "delta_interval_us": {k: [v[1], v[2]] for k, v in d["ops"].items()},
                        "delta_ms": {ms: d[us][0] / 1e3 for us, ms in TOTALS_MS.items()},
                        "delta_interval_ms": {ms: [d[us][1] / 1e3, d[us][2] / 1e3] for us, ms in TOTALS_MS.items()}}
    if args.emit_csv is not None:
        # a report's duration column is DEVICE KERNEL DURATION: the kernel-only time (no dispatch), which
        # `calibrate --ops-csv` reads back as such
        specs = layer_op_specs(bc, cfg=cfg)
        result["kernel_us"] = {k: float(KernelSpec(specs[k]).us(hw, cal.params)) for k in result["per_op_us"]}
        write_csv(args.emit_csv, [(specs[k], result["kernel_us"][k]) for k in result["per_op_us"]], hw=hw,
                  heads=(cfg.num_heads, cfg.num_kv_heads))
    return result


def _print_whatif(result: dict, num_steps: int) -> None:
    iv = result["interval_us"]
    print(f"{'op':24s} {'us':>9s}   90% interval")
    for name, t in result["per_op_us"].items():
        print(f"{name:24s} {t:9.1f}   [{iv[name][0]:.1f}, {iv[name][1]:.1f}]")
    print(f"{'layer (sum of ops)':24s} {result['layer_us']:9.1f}   [{iv['layer_us'][0]:.1f}, {iv['layer_us'][1]:.1f}]")
    print(f"{'layer (trace replay)':24s} {result['layer_trace_us']:9.1f}")
    for label, key in (("step (traced, incl. I/O)", "step_ms"), ("step() incl. host proj", "step_full_ms"),
                       (f"sample() {num_steps} steps", "sample_ms")):
        lo, hi = result["interval_ms"][key]
        print(f"{label:24s} {result[key]:9.2f} ms [{lo:.2f}, {hi:.2f}]")
    if "vs" in result:
        vs = result["vs"]
        print("\ndelta vs the base setting (this minus base), 90% interval (correlated):")
        for name, dv in vs["delta_us"].items():
            if abs(dv) > 1e-9:
                lo, hi = vs["delta_interval_us"][name]
                print(f"  {name:22s} {dv:+9.1f} us [{lo:+.1f}, {hi:+.1f}]")
        for key, dv in vs["delta_ms"].items():
            lo, hi = vs["delta_interval_ms"][key]
            print(f"  {key:22s} {dv:+9.3f} ms [{lo:+.3f}, {hi:+.3f}]")


def _print_summary(report) -> None:
    print(f"{report.path}: DEVICE ARCH {report.arch!r}, fitted as {report.hw.name}; {len(report.rows)} lines")
    for status, codes in report.summary().items():
        per_code = ", ".join(f"{c} {k}" for c, k in codes.items())
        print(f"  {sum(codes.values()):5d}  {status}: {per_code}")


def calibrate(argv: list[str]) -> dict:
    """``calibrate`` subcommand: refit on the stored rows or a profiler CSV, print, optionally write."""
    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole calibrate",
                                description="Refit the model's unknown parameters (with covariance) on the stored "
                                            "measured rows or on a ttnn device-profiler op report. A report is "
                                            "fitted with the stored calibration as the prior: parameters its rows "
                                            "do not pin keep their stored values.",
                                epilog="example: python -m costmodel.blackhole calibrate --ops-csv ops_perf_results.csv "
                                       "--start-signpost PERF_DECODE --end-signpost PERF_DECODE_END --out cal.json")
    p.add_argument("--ops-csv", default=None, metavar="FILE", help="ops_perf_results CSV to fit (instead of the "
                                                                    "stored rows)")
    add_device_id_argument(p, lead="with --ops-csv: the DEVICE ID to fit, ")
    add_signpost_arguments(p)
    add_decode_position_argument(p)
    p.add_argument("--board", default=None, choices=sorted(BLACKHOLE_PRESETS),
                   help="Blackhole board (default: from the report's DEVICE ARCH)")
    p.add_argument("--force-arch", action="store_true", help="fit a report of another architecture (Wormhole) "
                                                             "with the Blackhole model anyway")
    p.add_argument("--with-stored", action="store_true", help="with --ops-csv: fit the stored rows as well")
    p.add_argument("--independent-rows", action="store_true",
                   help="with --ops-csv: fit every row as its own observation, not the rows of one op kind as one "
                        "(by default they share the stored discrepancy's model-form error, so a report that repeats "
                        "a kind per layer, or whose kinds no stored row has, moves the calibration less)")
    p.add_argument("--strict", action="store_true", help="refuse (exit 2) a poor fit or a report with no "
                                                         "modelled row instead of warning")
    p.add_argument("--out", default=None, metavar="FILE", help="write the calibration JSON here")
    p.add_argument("--write", action="store_true", help=f"write the calibration JSON to {CALIBRATION_PATH}")
    p.add_argument("--steps", type=int, default=60, help="Levenberg-Marquardt iterations")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    return cli_run(p, argv, lambda args: _calibrate(args, p))


# A real report refits the stored calibration; a fit that moves a launch constant more than this
# factor, or the port's predicted step by more than this fraction, has likely absorbed what the
# model does not describe in that report (an op kind it misprices) into a constant.
GUARD_LAUNCH_FACTOR = 3.0
GUARD_PORT_STEP = 0.05


def port_step_ms(cal: fitting.Calibration, hw: Blackhole) -> float:
    """The measured port's predicted traced step (ms) under ``cal``: what a refit must not move by accident."""
    cfg = ExpertConfig.alpamayo_tt()
    return evaluate(hw, cal.params, BlackholeConfig.for_expert(cfg), cfg=cfg)["step_ms"]


def calibration_guards(cal: fitting.Calibration, prior: fitting.Calibration, steps_ms: dict[str, float]) -> list[str]:
    """Warnings for a refit that moved a launch constant > ``GUARD_LAUNCH_FACTOR``x or the port's
    predicted step by > ``GUARD_PORT_STEP`` against ``prior`` (the stored calibration); ``steps_ms``:
    ``port_step_ms`` under each, {'fitted', 'stored'}."""
    out = []
    for k in PARAM_NAMES:
        if k.startswith("launch_"):
            new, old = getattr(cal.params, k), getattr(prior.params, k)
            if max(new / old, old / new) > GUARD_LAUNCH_FACTOR:
                out.append(f"{k} moved x{new / old:.2f} ({old:.3g} -> {new:.3g} us; guard {GUARD_LAUNCH_FACTOR:g}x): "
                           "a launch constant absorbing time the model does not describe")
    new, old = steps_ms["fitted"], steps_ms["stored"]
    if abs(new / old - 1) > GUARD_PORT_STEP:
        out.append(f"the port's predicted step moved {100 * (new / old - 1):+.1f}% ({old:.2f} -> {new:.2f} ms; guard "
                   f"{100 * GUARD_PORT_STEP:g}%)")
    return out


def _calibrate(args: argparse.Namespace, p: argparse.ArgumentParser) -> dict:
    try:  # before the fit: a bad path should not cost a fit
        out = chosen_output(args.out, args.write, CALIBRATION_PATH)
    except ValueError as e:
        p.error(str(e))
    if args.steps < 1:
        p.error(f"--steps={args.steps} must be >= 1")
    if args.with_stored and args.ops_csv is None:
        p.error("--with-stored needs --ops-csv")
    if args.independent_rows and args.ops_csv is None:
        p.error("--independent-rows needs --ops-csv")
    if args.ops_csv is None and (args.start_signpost is not None or args.end_signpost is not None):
        p.error("--start-signpost / --end-signpost need --ops-csv")
    prior, hw = None, None
    try:
        hw = None if args.board is None else blackhole(args.board)
        if args.ops_csv is not None:
            report = window(read_report(args.ops_csv, hw=hw, force_arch=args.force_arch, device_id=args.device_id,
                                        decode_position=args.decode_position),
                            args)
            if not args.json:
                _print_summary(report)
            for w in report.warnings:  # after the summary, which it refers to
                print(f"warning: {w}", file=sys.stderr)
            hw = report.hw
            rows = report.measured_rows() + (load_rows() if args.with_stored else [])
            prior = fitting.load_calibration()
            if not rows:
                if args.strict:
                    p.error(f"{args.ops_csv}: no row of the report is modelled (--strict)")
                print("\nno modelled row: nothing to fit; the calibration stays the stored one"
                      + ("" if out is None else f" ({out} not written)"))
                return {"n_rows": 0, "summary": report.summary()}
        else:
            rows = load_rows()
        shared = prior is not None and not args.independent_rows  # a kind's rows share one model-form error
        cal = fitting.fit(rows, steps=args.steps, hw=hw, prior=prior, discrepancy="stored" if shared else None)
    except ValueError as e:
        p.error(str(e))
    # the port's step under both calibrations: the guard's, the JSON's and the text's numbers
    steps_ms = None if prior is None else {"fitted": port_step_ms(cal, hw), "stored": port_step_ms(prior, hw)}
    guards = calibration_guards(cal, prior, steps_ms) if prior is not None else []
    problems = list(cal.info["warnings"]) + guards
    if problems and args.strict:
        p.error("; ".join(problems) + " (--strict)")
    for w in problems:
        print(f"warning: {w}", file=sys.stderr)
    table = fitting.report(cal.params, rows, hw=hw)
    if out is not None:
        fitting.write_calibration(cal, table, out)
    if args.json:  # the calibration document, with the guards' verdict for scripts (from_json ignores it)
        doc = {**cal.to_json(), "guards": guards}
        if prior is not None:
            doc["port_step_ms"] = steps_ms
        print(dumps_strict(doc, indent=1))
        return doc
    print(fitting.format_report(table))
    info = cal.info
    print(f"\nfitted {info['n_rows']} rows: rms log error {info['rms_log_error']:.3f}, sigma {cal.sigma:.3f}, "
          f"effective parameters {info['effective_params']:.1f} of {info['n_params']}; "
          f"pinned by the rows: {len(info['pinned'])}"
          + (f"; held at the stored calibration: {len(info['held_at_prior'])}" if prior is not None else ""))
    for i, k in enumerate(PARAM_NAMES):
        pi = param_info(k)
        tag = "  (held at prior)" if k in info["held_at_prior"] else ""
        print(f"  {k:24s} {getattr(cal.params, k):12.5g} {pi['unit']:8s} x/ {math.exp(cal.cov[i, i] ** 0.5):6.2f}"
              f"  {pi['meaning']}{tag}")
    if prior is not None:
        print(f"\nport step ({hw.name}): {steps_ms['fitted']:.2f} ms with this calibration, "
              f"{steps_ms['stored']:.2f} ms with the stored one")
    if out is not None:
        print(f"\nwrote {out}")
    return cal.to_json()


# ---- options shared by the commands that read op reports ----------------------------------------------
def add_device_id_argument(p: argparse.ArgumentParser, *, allow_all: bool = True, lead: str = "") -> None:
    """``--device-id``: 'first' (the lowest DEVICE ID, default), 'max' (each op's slowest device, as
    tt-perf-report merges devices), 'all' where ``allow_all``, or a DEVICE ID (parsed to an int); anything
    else is an argparse error naming the value."""
    allowed = tuple(w for w in DEVICE_ID_WORDS if allow_all or w != "all")
    words = ", ".join(repr(w) for w in allowed) + " or a non-negative integer"

    def parse(text: str):
        if text in allowed:
            return text
        if text.isdigit():
            return int(text)
        raise argparse.ArgumentTypeError(f"--device-id={text!r}: expected {words}")

    parse.__name__ = "device id"
    p.add_argument("--device-id", type=parse, default="first",
                   help=f"{lead}'first' (the lowest DEVICE ID; default), 'max' (each op's slowest device, as "
                        "tt-perf-report merges devices)" + (", 'all'" if allow_all else "") + " or an id")


def add_signpost_arguments(p: argparse.ArgumentParser) -> None:
    """``--start-signpost`` / ``--end-signpost`` (tt-perf-report's options): the rows of a signpost
    window of each report read (``Report.between``; apply it with ``window``)."""
    p.add_argument("--start-signpost", default=None, metavar="NAME",
                   help="read only the rows after the first signpost NAME (in each report), as tt-perf-report")
    p.add_argument("--end-signpost", default=None, metavar="NAME",
                   help="... and before the first signpost NAME after it (the same name: its next instance)")


def window(report, args: argparse.Namespace):
    """``report`` cut to the signpost window of ``add_signpost_arguments``' options (all rows without them);
    ValueError names an unknown signpost and the ones the report has."""
    return report.between(args.start_signpost, args.end_signpost)


def calibration_of(args: argparse.Namespace) -> fitting.Calibration:
    """The calibration named by ``--calibration`` (default: the stored one)."""
    return fitting.load_calibration(CALIBRATION_PATH if args.calibration is None else args.calibration)


def read_reports(*paths, **kwargs):
    """``read_report`` of each path (``kwargs`` to each), its warnings printed to stderr."""
    reports = [read_report(path, **kwargs) for path in paths]
    for w in (w for r in reports for w in r.warnings):
        print(f"warning: {w}", file=sys.stderr)
    return reports


def predict_main(argv: list[str]) -> int:
    """``predict`` subcommand: every row of a real report next to the model, ranked by time above floor."""
    from costmodel.blackhole import report_predict as rp

    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole predict",
                                description="Every device-op row of an op report: measured time, the model's floor, "
                                            "its prediction with 90% interval (or why it has none), ranked by "
                                            "measured time above the floor (what to optimise first); totals per op.",
                                epilog="example: python -m costmodel.blackhole predict --ops-csv ops_perf_results.csv "
                                       "--csv rows.csv --plot top.png")
    p.add_argument("--ops-csv", required=True, metavar="FILE", help="ops_perf_results CSV")
    p.add_argument("--calibration", default=None, help="calibration JSON (default: the stored one)")
    add_device_id_argument(p)
    add_signpost_arguments(p)
    add_decode_position_argument(p)
    p.add_argument("--board", default=None, choices=sorted(BLACKHOLE_PRESETS),
                   help="Blackhole board (default: from the report's DEVICE ARCH)")
    p.add_argument("--force-arch", action="store_true", help="read a report of another architecture anyway")
    p.add_argument("--top", type=positive_int, default=15, help="rows in the ranked table and plot")
    p.add_argument("--csv", type=output_file, default=None, metavar="FILE", help="write every ranked row as CSV")
    p.add_argument("--plot", type=output_file, default=None, metavar="FILE", help="write the top rows as a PNG")
    p.add_argument("--json", action="store_true", help="print JSON")

    def body(args) -> int:
        cal = calibration_of(args)
        (report,) = read_reports(args.ops_csv, hw=None if args.board is None else blackhole(args.board),
                                 force_arch=args.force_arch, device_id=args.device_id,
                                 decode_position=args.decode_position)
        rows = rp.predict_report(window(report, args), cal)
        if args.csv is not None:
            rp.write_rows_csv(args.csv, rows)
        if args.plot is not None:
            rp.plot_top(args.plot, rows, top=args.top, title=pathlib.Path(args.ops_csv).name)
        print(dumps_strict(rp.predictions_json(rows), indent=1) if args.json else rp.format_predictions(rows, top=args.top))
        return 0

    return cli_main(p, argv, body)


def whatif_main(argv: list[str]) -> int:
    """``whatif``: one real report row with its program config, formats or fidelity changed."""
    from costmodel.blackhole import report_whatif as rp

    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole whatif",
                                description="Change one row of a real op report (its matmul program config or "
                                            "MinimalMatmul blocks, weight / "
                                            "activation / cache format or fidelity) and get the predicted time after "
                                            "the change with its 90% interval.",
                                epilog="example: python -m costmodel.blackhole whatif --ops-csv ops.csv --line 19 "
                                       "--change in0_block_w=4 --change weight_dtype=bfp4")
    p.add_argument("--ops-csv", required=True, metavar="FILE", help="ops_perf_results CSV")
    p.add_argument("--line", type=positive_int, required=True, help="the row's line in the CSV (header = line 1)")
    p.add_argument("--change", action="append", default=[], metavar="FIELD=VALUE", required=True,
                   help=f"repeatable; FIELD one of {[*rp.CONFIG_FIELDS, *rp.SPEC_FIELDS]}, a MinimalMatmul's "
                        f"{list(rp.MINIMAL_CONFIG_FIELDS)} (the subblock kept where it divides the new blocks, else "
                        f"ttnn's choice), or in0_memory "
                        f"(a 1D / 2D multicast matmul's activation: one of {list(rp.IN0_MEMORY)})")
    add_decode_position_argument(p)
    p.add_argument("--calibration", default=None, help="calibration JSON (default: the stored one)")
    p.add_argument("--json", action="store_true", help="print JSON")

    def body(args) -> int:
        changes = {}
        for item in args.change:
            key, sep, value = item.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise ValueError(f"--change {item!r}: expected FIELD=VALUE, e.g. in0_block_w=4")
            if key.strip() in changes:
                raise ValueError(f"--change {item!r}: {key.strip()} given twice")
            changes[key.strip()] = value.strip()
        cal = calibration_of(args)
        (report,) = read_reports(args.ops_csv, decode_position=args.decode_position)
        res = rp.whatif_row(report, args.line, changes, cal)
        if args.json:
            print(dumps_strict(res, indent=1))
        else:
            lo, hi = res["delta_interval_us"]
            print(f"line {res['line']} {res['op_code']}: measured {res['measured_us']:.1f} us, predicted "
                  f"{res['predicted_us']:.1f} us; after {', '.join(args.change)}: predicted {res['after_us']:.1f} us, "
                  f"delta {res['delta_us']:+.1f} us [{lo:+.1f}, {hi:+.1f}] (90%)")
        return 0

    return cli_main(p, argv, body)


def report_plan_main(argv: list[str]) -> int:
    """``plan --ops-csv``: the best priced change of every matmul and SDPA row and add + norm pair of a
    real report."""
    from costmodel.blackhole import report_plan as rp

    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole plan --ops-csv",
                                description="Plan search over a real op report: per matmul row (1D / 2D multicast, "
                                            "DRAM-sharded, MinimalMatmul) the program-config (and weight-format / "
                                            "math-fidelity, flagged) change the model prices fastest, per SDPA "
                                            "row the k_chunk / q_chunk / cores_per_head (and KV-format / fidelity, "
                                            "flagged) change, and per add followed by an unfused norm the fused residual "
                                            "norm, ranked in one list by predicted saving with its 90% interval; "
                                            "rows it cannot search are listed with why. With --target-ms, "
                                            "P(device time <= target) for the unflagged changes made together, "
                                            "one per row.",
                                epilog="example: python -m costmodel.blackhole plan --ops-csv ops_perf_results.csv "
                                       "--target-ms 30")
    p.add_argument("--ops-csv", required=True, metavar="FILE", help="ops_perf_results CSV")
    p.add_argument("--calibration", default=None, help="calibration JSON (default: the stored one)")
    add_device_id_argument(p, allow_all=False)
    add_signpost_arguments(p)
    add_decode_position_argument(p)
    p.add_argument("--target-ms", type=positive_float, default=None, help="report P(device time <= target)")
    p.add_argument("--top", type=positive_int, default=15, help="rows shown")
    p.add_argument("--json", action="store_true", help="print JSON")

    def body(args) -> int:
        cal = calibration_of(args)
        (report,) = read_reports(args.ops_csv, device_id=args.device_id, decode_position=args.decode_position)
        report = window(report, args)
        result = rp.plan_search(report, cal)
        print(dumps_strict(rp.plan_json(report, result, cal, target_ms=args.target_ms), indent=1) if args.json else
              rp.format_plan(report, result, top=args.top, target_ms=args.target_ms, cal=cal))
        return 0

    return cli_main(p, argv, body)


def diff_main(argv: list[str]) -> int:
    """``diff`` subcommand: two reports of one model matched op by op, measured vs predicted deltas."""
    from costmodel.blackhole import report_diff as rd

    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole diff",
                                description="Two op reports of the same model (before / after a change) matched op by "
                                            "op: measured delta per op and in total next to the model's predicted "
                                            "delta with its 90% interval; an op of one side only (a fusion) is "
                                            "priced as removed / added, an unchanged op as 0 (its movement is "
                                            "run-to-run noise).",
                                epilog="example (a real pair, functional vs fused decoder layer): python -m "
                                       "costmodel.blackhole diff tests/data/profiler_pairs/"
                                       "bh_north_mini_functional_decode_b1.csv tests/data/profiler_pairs/"
                                       "bh_north_mini_fused_decode_b1.csv")
    p.add_argument("before", metavar="BEFORE_CSV")
    p.add_argument("after", metavar="AFTER_CSV")
    p.add_argument("--calibration", default=None, help="calibration JSON (default: the stored one)")
    add_device_id_argument(p, allow_all=False)
    add_signpost_arguments(p)
    add_decode_position_argument(p)
    p.add_argument("--top", type=positive_int, default=15, help="deltas shown, by measured movement")
    p.add_argument("--json", action="store_true", help="print JSON")

    def body(args) -> int:
        cal = calibration_of(args)
        a, b = (window(r, args) for r in read_reports(args.before, args.after, device_id=args.device_id,
                                                                 decode_position=args.decode_position))
        d = rd.diff_reports(a, b, cal)
        print(dumps_strict(rd.diff_json(d), indent=1) if args.json else rd.format_diff(d, top=args.top))
        return 0

    return cli_main(p, argv, body)


def coverage_main(argv: list[str]) -> int:
    """``coverage`` subcommand: rows and share of device time the model prices in each report."""
    from costmodel.blackhole.report_coverage import coverage, format_coverage

    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole coverage",
                                description="Rows and share of device time (collectives across chips apart) that "
                                            "the model prices in each op report, and the skipped rows by reason.",
                                epilog="example: python -m costmodel.blackhole coverage ops_perf_results.csv "
                                       "--start-signpost PERF_DECODE --end-signpost PERF_DECODE_END")
    p.add_argument("reports", nargs="+", metavar="OPS_CSV", help="ops_perf_results CSV files")
    add_device_id_argument(p)
    add_signpost_arguments(p)
    add_decode_position_argument(p)
    p.add_argument("--force-arch", action="store_true", help="read a report of another architecture anyway")
    p.add_argument("--json", action="store_true", help="print JSON")

    def body(args) -> int:
        reports = read_reports(*args.reports, device_id=args.device_id, force_arch=args.force_arch,
                               decode_position=args.decode_position)
        covs = [coverage(window(r, args)) for r in reports]
        print(dumps_strict([c.to_json() for c in covs], indent=1) if args.json else format_coverage(covs))
        return 0

    return cli_main(p, argv, body)


def main(argv: list[str] | None = None) -> dict:
    """CLI entry point; bad input exits with status 2 and the ValueError's message."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["calibrate"]:
        return calibrate(argv[1:])
    if argv[:1] == ["validate"]:
        from costmodel.blackhole.holdout import validate_main

        return validate_main(argv[1:])
    if argv[:1] == ["tune"]:  # the what-if flags give its starting setting
        return cli_tune.tune(argv[1:], _parser(), config_from_args)
    if argv[:1] == ["whatif"]:
        return whatif_main(argv[1:])
    if argv[:1] == ["diff"]:
        return diff_main(argv[1:])
    if argv[:1] == ["predict"]:
        return predict_main(argv[1:])
    if argv[:1] == ["coverage"]:
        return coverage_main(argv[1:])
    if argv[:1] == ["plan"] and any(a == "--ops-csv" or a.startswith("--ops-csv=") for a in argv):
        return report_plan_main(argv[1:])
    if argv[:1] == ["plan"]:
        from costmodel.blackhole.plans import plan_main

        return plan_main(argv[1:])
    parser = _parser()

    def body(args):
        result = whatif(args, parser)
        text = dumps_strict(result, indent=2)  # a non-finite number is an error, in text output too
        if args.json:
            print(text)
        else:
            _print_whatif(result, ExpertConfig.preset(args.preset).num_steps)
        return result

    return cli_run(parser, argv, body)
