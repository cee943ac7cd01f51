"""Plan search: which combinations of the notes' op-graph options reach a target step time, and how surely.

The options (seeds/EXPERT_NOTES.md, "Remaining op-graph options" and the measured tables) and
their values, the port's first. An option is named for the setting field it changes
(``BlackholeConfig.replace``: a field of a port part, or smax / fuse_add_norm), and a plan is that set
of changes to the measured port (``plan_changes``):

  cache        bf16 | bfp8                       KV cache format (fill_cache, attention reads)
  smax         8192 | 5120                       cache rows the masked attention reads
  fuse_add_norm  separate | fused                each residual add fused into the next rms_norm
  matmuls      port | default | searched         the port's tuned 1D configs, ttnn's heuristic, or
                                                 per matmul the fastest legal 1D config under the
                                                 model (exhaustive over in0_block_w x per_core_N)
  attention    decode k128 | decode k256 | standard q32   flash-decode or standard SDPA (bfp4 mask)
  weights      bfp8 | bf16                       matmul weight format (the vocabulary's 8- and 16-bit
                                                 ones: bfp4 weights or K/V are not among the notes' options)

Every combination (144) is predicted exactly (one vmapped evaluation per static setting); the
ones whose prediction lies within ``SAMPLE_WITHIN`` of the target are sampled: ``draws``
parameter draws from the Laplace posterior plus, per op, a model-error draw of the op's sd
(sigma, the per-class discrepancy and the extrapolation term where the op leaves the fitted rows:
``intervals.op_error_var``; an op outside the fitted rows at the parameter draws without the weak
prior's share, ``intervals.param_var``), the same draws for every plan (common random numbers, so plans are
compared under one shared uncertainty). P(reach) is the fraction of draws with step <= target.

Accuracy comes from ``data/plan_accuracy.json`` (``python -m experiments.plan_accuracy``: layer-0
PCC vs the fp32 golden per weight / cache format under the device-precision emulation); a plan
option the golden cannot tell apart (kernel choice, cache size, fused add+norm) costs nothing there.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math

import jax
import numpy as np

from costmodel.blackhole.discrepancy import Discrepancy, load_discrepancy
from costmodel.blackhole.fit import Calibration, load_calibration
from costmodel.blackhole.graph import (
    BlackholeConfig,
    layer_op_specs,
    matmul_configs,
    matmul_shapes,
    step_us,
    validate,
)
from costmodel.blackhole.intervals import extrapolates, op_error_var, theta_draws, value_samples
from costmodel.blackhole.opspecs import MatmulSpec
from costmodel.blackhole.params import CALIBRATION_PATH, DATA_DIR, FitParams
from costmodel.blackhole.port import MatmulConfigs, Port
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.roofline import measured_step_ms
from costmodel.compile_options import jit
from costmodel.hardware import BLACKHOLE_PRESETS, TILE, Blackhole, blackhole
from jaxref.config import ExpertConfig
from jaxref.validation import (
    check_choice,
    choices_of,
    cli_run,
    dumps_strict,
    finite_float,
    nonnegative_int,
    positive_int,
)
from jaxref.vocabulary import CacheFormat, WeightFormat

PORT = Port.for_expert(ExpertConfig.alpamayo_tt())  # the measured port: each option's first value
FUSE_ADD_NORM = {"separate": False, "fused": True}


def _format_options(field: str, literal) -> tuple[str, ...]:
    """The port's format of ``field`` first, then the vocabulary's other formats but bfp4."""
    port = getattr(PORT.precision, field)
    return (port, *(f for f in choices_of(literal) if f not in (port, "bfp4")))


OPTIONS: dict[str, tuple[str, ...]] = {
    "cache": _format_options("cache", CacheFormat),
    "smax": ("8192", "5120"),
    "fuse_add_norm": tuple(FUSE_ADD_NORM),
    "matmuls": ("port", "default", "searched"),
    "attention": ("decode k128", "decode k256", "standard q32"),
    "weights": _format_options("weights", WeightFormat),
}
PORT_PLAN = {k: v[0] for k, v in OPTIONS.items()}
# a smaller grid (16 combinations, 4 compiled settings) for quick reports: the notes' three remaining
# op-graph options and the searched matmul configs
QUICK_OPTIONS: dict[str, tuple[str, ...]] = {**OPTIONS, "matmuls": ("port", "searched"),
                                            "attention": ("decode k128",), "weights": ("bfp8",)}
SAMPLE_WITHIN = 1.25  # sample the plans predicted within this factor of the target
MAX_SAMPLED = 24
ACCURACY_PATH = DATA_DIR / "plan_accuracy.json"


def check_plan(plan: dict[str, str]) -> None:
    """Raise ValueError unless ``plan`` picks one listed value for every option."""
    if set(plan) != set(OPTIONS):
        raise ValueError(f"plan options {sorted(set(plan) ^ set(OPTIONS))} missing or unknown; expected {sorted(OPTIONS)}")
    for k, v in plan.items():
        check_choice(f"plan {k}", v, OPTIONS[k])


def searched_matmul_configs(hw: Blackhole, fit: FitParams, cfg: ExpertConfig, *, weight_dtype: str
                            ) -> dict[str, MatmulProgramConfig]:
    """Per weight matmul, the legal 1D in0-multicast config (in0_block_w | K/32, per_core_N | N/32,
    fits the grid and L1) the model predicts fastest: exhaustive, one vmapped evaluation per matmul."""
    out = {}
    base = matmul_configs(cfg, "tuned", grid_x=hw.grid_x, grid_y=hw.grid_y)  # kind, grid, fused activation
    for name, (M, K, N) in matmul_shapes(cfg).items():
        Kt, Nt = K // TILE, N // TILE
        legal = []
        for ibw, pcn in itertools.product(range(1, Kt + 1), range(1, Nt + 1)):
            if Kt % ibw or Nt % pcn:
                continue
            c = dataclasses.replace(base[name], in0_block_w=float(ibw), per_core_N=float(pcn))
            try:
                c.validate(name, hw, M=M, K=K, N=N, weight_dtype=weight_dtype)
            except ValueError:
                continue
            legal.append(c)
        batch = jax.tree.map(lambda *xs: np.asarray(xs, np.float32), *legal)

        def one(c, M=M, K=K, N=N):
            return MatmulSpec(M, K, N, c, weight_dtype).us(hw, fit)

        t = np.asarray(jax.vmap(one)(batch))
        out[name] = legal[int(np.argmin(t))]
    return out


def plan_changes(plan: dict[str, str], hw: Blackhole, fit: FitParams, cfg: ExpertConfig, *,
                 _searched: dict | None = None) -> dict:
    """A plan as ``BlackholeConfig.replace`` changes: the plain options by their own field names, the
    matmul choice as program configs, the SDPA choice as the kernel and its chunk."""
    check_plan(plan)
    w = plan["weights"]
    if plan["matmuls"] == "searched":
        mms = (_searched or {}).get(w) or searched_matmul_configs(hw, fit, cfg, weight_dtype=w)
    else:
        mms = matmul_configs(cfg, "tuned" if plan["matmuls"] == "port" else "default", grid_x=hw.grid_x,
                             grid_y=hw.grid_y)
    mode, _, chunk = plan["attention"].partition(" ")
    k_chunk, q_chunk = (float(chunk[1:]), 32.0) if mode == "decode" else (128.0, float(chunk[1:]))
    return {"cache": plan["cache"], "weights": w, "smax": float(plan["smax"]),
            "fuse_add_norm": FUSE_ADD_NORM[plan["fuse_add_norm"]], "matmuls": MatmulConfigs(mms),
            "attn_mode": mode, "k_chunk": k_chunk, "q_chunk": q_chunk}


def plan_config(plan: dict[str, str], hw: Blackhole, fit: FitParams, cfg: ExpertConfig, *, seq_len: float = 4700.0,
                _searched: dict | None = None) -> BlackholeConfig:
    """The ``BlackholeConfig`` of one plan (validated): the port on ``hw``'s grid with the plan's
    changes (the bfp4 mask of the notes' attention table in either SDPA kernel)."""
    base = BlackholeConfig.for_expert(cfg, grid=(hw.grid_x, hw.grid_y), seq_len=seq_len, mask="bfp4")
    bc = base.replace(**plan_changes(plan, hw, fit, cfg, _searched=_searched))
    validate(hw, bc, cfg=cfg)
    return bc


def _static_key(bc: BlackholeConfig):
    """Configs that share a tree structure (every static choice, the port's included) vmap together."""
    return jax.tree.structure(bc)


@functools.partial(jit, fast=True, static_argnames=("cfg",))
def _sweep(hw, fit, bc_batch, *, cfg):
    return jax.vmap(lambda b: step_us(hw, fit, b, cfg=cfg))(bc_batch)


def point_predictions(configs: list[BlackholeConfig], hw: Blackhole, fit: FitParams, cfg: ExpertConfig) -> np.ndarray:
    """Exact step time (us) of each config: one vmapped ``sweep_step_us`` per static setting."""
    out = np.zeros(len(configs))
    groups: dict = {}
    for i, bc in enumerate(configs):
        groups.setdefault(_static_key(bc), []).append(i)
    for idx in groups.values():
        batch = jax.tree.map(lambda *xs: np.asarray(xs, np.float32), *[configs[i] for i in idx])
        out[idx] = np.asarray(_sweep(hw, fit, batch, cfg=cfg))
    return out


@functools.cache
def accuracy_table() -> dict[tuple[str, str], float]:
    """(weights, cache) -> layer-0 PCC vs fp32 (bfp4 mask) from ``data/plan_accuracy.json`` ({} if absent)."""
    if not ACCURACY_PATH.exists():
        return {}
    doc = json.loads(ACCURACY_PATH.read_text())
    return {(r["weights"], r["cache"]): float(r["pcc"]) for r in doc["rows"] if r["mask"] == "bfp4"}


def reach_samples(cal: Calibration, disc: Discrepancy | None, hw: Blackhole, bc: BlackholeConfig, cfg: ExpertConfig,
                  thetas: np.ndarray, eps: dict[str, np.ndarray], thetas_data: np.ndarray | None = None) -> np.ndarray:
    """Step-time draws (us) [D]: the model at parameter draws ``thetas`` with each op's time
    multiplied by exp(s_op * eps[op]) (eps: [D] standard normals per op name, shared by all plans);
    an op outside the fitted rows at ``thetas_data`` instead (the same draws without the weak
    prior's share, ``theta_draws(prior_share=False)``: its extrapolation term stands in for it, as in
    ``intervals.param_var``)."""
    smp = value_samples(cal, hw, bc, cfg=cfg, thetas=thetas)
    specs = layer_op_specs(bc, cfg=cfg)
    step = smp["step_us"].copy()
    extrap = {n for n, t in smp["ops"].items() if extrapolates(disc, specs[n], float(np.median(t)))}
    data = value_samples(cal, hw, bc, cfg=cfg, thetas=thetas_data)["ops"] if extrap and thetas_data is not None else {}
    for name, t in smp["ops"].items():
        if name in data:
            step += cfg.num_layers * (data[name] - t)
            t = data[name]
        sd = math.sqrt(op_error_var(cal, disc, specs[name], float(np.median(t))))
        step += cfg.num_layers * t * (np.exp(sd * eps[name]) - 1.0)
    return step


def search(target_ms: float, *, hw: Blackhole | None = None, cal: Calibration | None = None,
           disc: Discrepancy | None | str = "stored", cfg: ExpertConfig | None = None, draws: int = 256,
           seed: int = 0, seq_len: float = 4700.0, options: dict[str, tuple[str, ...]] | None = None) -> dict:
    """Every option combination with its predicted step; the near ones with P(step <= target).
    ``options``: a subset of each option's values (default ``OPTIONS``; each must hold the port's value).

    A plan's draws are the measured port step (``data/step_times.json``, 32.5 ms) plus the modelled
    change at the same draws (parameters and per-op errors shared with the port's draw: a
    correlated delta), so the model's error on the port itself does not count twice.

    Returns {"target_ms", "draws", "plans": [{plan, changes (vs the port), step_ms (model),
    interval_ms (5-95% of the anchored draws, or None), p_reach (or None: not sampled), pcc, dpcc
    (vs the port's)}], sorted by P(reach) then predicted step, "port_step_ms", "measured_port_ms"}.
    """
    if not (math.isfinite(target_ms) and target_ms > 0):
        raise ValueError(f"target_ms={target_ms} must be a finite time > 0")
    if draws < 16:
        raise ValueError(f"draws={draws} must be >= 16 to estimate a probability")
    hw = blackhole("p150a") if hw is None else hw
    cal = load_calibration(CALIBRATION_PATH) if cal is None else cal
    disc = load_discrepancy() if disc == "stored" else disc
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    options = OPTIONS if options is None else options
    check_plan({k: v[0] for k, v in options.items()})
    for k, vals in options.items():
        for v in vals:
            check_plan({**PORT_PLAN, k: v})
        if PORT_PLAN[k] not in vals:
            raise ValueError(f"options[{k!r}]={list(vals)} must include the port's value {PORT_PLAN[k]!r}")
    searched = {w: searched_matmul_configs(hw, cal.params, cfg, weight_dtype=w) for w in options["weights"]
                if "searched" in options["matmuls"]}
    plans = [dict(zip(options, vals)) for vals in itertools.product(*options.values())]
    configs = [plan_config(p, hw, cal.params, cfg, seq_len=seq_len, _searched=searched) for p in plans]
    pred = point_predictions(configs, hw, cal.params, cfg)
    target_us = target_ms * 1e3
    order = np.argsort(pred)
    to_sample = [int(i) for i in order if pred[i] <= SAMPLE_WITHIN * target_us][:MAX_SAMPLED]
    port_i = plans.index(PORT_PLAN)
    if port_i not in to_sample:
        to_sample.append(port_i)
    thetas = theta_draws(cal, draws, seed=seed)
    thetas_data = theta_draws(cal, draws, seed=seed, prior_share=False)
    rng = np.random.default_rng(seed + 1)
    names = sorted({n for i in to_sample for n in layer_op_specs(configs[i], cfg=cfg)})
    eps = {n: rng.standard_normal(draws) for n in names}
    acc = accuracy_table()
    port_pcc = acc.get((PORT_PLAN["weights"], PORT_PLAN["cache"]))
    # anchored on the measurement: a plan's step is the measured port step plus the modelled change,
    # whose draws share the port's parameters and op-model errors (a correlated delta)
    base_us = measured_step_ms() * 1e3
    port_draws = reach_samples(cal, disc, hw, configs[port_i], cfg, thetas, eps, thetas_data)
    rows = []
    for i, (p, bc) in enumerate(zip(plans, configs)):
        row = {"plan": p, "changes": {k: v for k, v in p.items() if v != PORT_PLAN[k]},
               "step_ms": float(pred[i]) / 1e3, "interval_ms": None, "p_reach": None,
               "pcc": acc.get((p["weights"], p["cache"]))}
        row["dpcc"] = None if row["pcc"] is None or port_pcc is None else row["pcc"] - port_pcc
        if i in to_sample:
            s = base_us + reach_samples(cal, disc, hw, bc, cfg, thetas, eps, thetas_data) - port_draws
            row["interval_ms"] = [float(np.quantile(s, 0.05)) / 1e3, float(np.quantile(s, 0.95)) / 1e3]
            row["p_reach"] = float(np.mean(s <= target_us))
        rows.append(row)
    rows.sort(key=lambda r: (-(r["p_reach"] if r["p_reach"] is not None else -1.0), r["step_ms"]))
    return {"target_ms": target_ms, "draws": draws, "plans": rows, "n_plans": len(rows),
            "n_sampled": len(to_sample), "port_step_ms": float(pred[port_i]) / 1e3, "measured_port_ms": base_us / 1e3,
            "accuracy_source": str(ACCURACY_PATH.name) if acc else None}


def describe(plan_row: dict) -> str:
    """'bfp8 KV cache, Smax 5120, ...' (the changes against the port), or 'the port as measured'."""
    ch = plan_row["changes"]
    if not ch:
        return "the port as measured"
    labels = {"cache": "{} KV cache", "smax": "Smax {}", "fuse_add_norm": "{} add+norm", "matmuls": "{} matmul configs",
              "attention": "{} SDPA", "weights": "{} weights"}
    return ", ".join(labels[k].format(v) for k, v in ch.items())


def format_plans(result: dict, *, top: int = 12) -> str:
    """Text table of ``search``: the best ``top`` plans, the port, and the smallest changes that reach."""
    t = result["target_ms"]
    lines = [(f"plan search: {result['n_plans']} option combinations, {result['n_sampled']} sampled "
              f"({result['draws']} correlated draws: parameters + per-op model error, anchored on the measured "
              f"port step {result['measured_port_ms']:.1f} ms); target {t:g} ms/step; the model puts the port at "
              f"{result['port_step_ms']:.2f} ms"),
             f"{'P(<=' + format(t, 'g') + ' ms)':>12s} {'model ms':>8s} {'90% of draws':>16s} {'layer-0 PCC':>12s}  plan"]

    def line(r):
        p = "-" if r["p_reach"] is None else f"{r['p_reach']:.2f}"
        iv = "-" if r["interval_ms"] is None else f"[{r['interval_ms'][0]:.1f}, {r['interval_ms'][1]:.1f}]"
        pcc = "-" if r["pcc"] is None else f"{r['pcc']:.6f}"
        return f"{p:>12s} {r['step_ms']:8.2f} {iv:>16s} {pcc:>12s}  {describe(r)}"

    lines += [line(r) for r in result["plans"][:top]]
    port = next(r for r in result["plans"] if not r["changes"])
    lines.append(line(port) + "   <- port")
    reach = [r for r in result["plans"] if r["p_reach"] is not None and r["p_reach"] >= 0.5]
    if reach:
        fewest = min(len(r["changes"]) for r in reach)
        best = sorted((r for r in reach if len(r["changes"]) == fewest), key=lambda r: -r["p_reach"])[:3]
        lines.append(f"smallest change sets with P >= 0.5 ({fewest} option(s)): " + "; ".join(
            f"{describe(r)} (P {r['p_reach']:.2f}, {r['step_ms']:.2f} ms)" for r in best))
    else:
        lines.append("no combination reaches the target with P >= 0.5")
    src = result["accuracy_source"]
    lines.append("PCC: " + (f"layer 0 vs the fp32 golden under the device-precision emulation ({src}; "
                            "kernel, cache size and fusion choices do not change it)" if src else
                            "not available (run python -m experiments.plan_accuracy)"))
    return "\n".join(lines)


def plan_main(argv: list[str]) -> dict:
    """``python -m costmodel.blackhole plan --target-ms 30``; bad input exits 2 with ``error: ...``."""
    p = argparse.ArgumentParser(prog="python -m costmodel.blackhole plan",
                                description="Combinations of the notes' op-graph options (KV format, cache rows, "
                                            "fused add+norm, matmul configs, SDPA kernel, weight format) predicted "
                                            "to reach a target step time, with P(reach) under correlated draws of "
                                            "the model's uncertainty and the golden's accuracy cost.",
                                epilog="example: python -m costmodel.blackhole plan --target-ms 30; over a real op report "
                                       "instead: python -m costmodel.blackhole plan --ops-csv REPORT.csv --help")
    p.add_argument("--target-ms", type=finite_float, default=30.0)
    p.add_argument("--draws", type=positive_int, default=256)
    p.add_argument("--board", default="p150a", choices=sorted(BLACKHOLE_PRESETS), help="Blackhole board")
    p.add_argument("--top", type=positive_int, default=12, help="plans to print")
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--json", action="store_true")

    def body(args):
        result = search(args.target_ms, hw=blackhole(args.board), draws=args.draws, seed=args.seed)
        print(dumps_strict(result, indent=1) if args.json else format_plans(result, top=args.top))
        return result

    return cli_run(p, argv, body)


__all__ = ["OPTIONS", "PORT_PLAN", "QUICK_OPTIONS", "check_plan", "describe", "format_plans", "plan_changes", "plan_config",
           "plan_main",
           "point_predictions", "reach_samples", "search", "searched_matmul_configs"]
