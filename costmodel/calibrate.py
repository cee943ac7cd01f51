"""Fit the unknown Blackhole parameters (``FitParams``) to the measured tables with optax.

Data: ``costmodel/data/{op_times,matmul_table,attention_table,step_times}.json``, transcribed from
seeds/EXPERT_NOTES.md with the line each row comes from. Every row is predicted by the exact
(discrete) model of the configuration it was measured in; the loss is the mean squared log
ratio predicted / measured. Parameters are fitted in an unconstrained space (log, and logit for
``dram_eff``) with Adam.

    python -m costmodel.calibrate            # fit from the physical prior, print the table
    python -m costmodel.calibrate --write    # ... and store data/calibration.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import optax

from costmodel.blackhole import BlackholeConfig, attention_us, matmul_configs, matmul_shapes, step_breakdown
from costmodel.blackhole_ops import AttnConfig, MatmulConfig, matmul_us
from costmodel.fitted import (
    CALIBRATION_PATH,
    DATA_DIR,
    DESCRIPTIONS,
    FitParams,
    initial_params,
    params_to_dict,
)
from costmodel.hardware import Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig

LOSS_POWER = 4  # mean |log ratio|^4: weighs the worst rows, as the acceptance is a max error
DATA_FILES = ("op_times.json", "matmul_table.json", "attention_table.json", "step_times.json")


@dataclasses.dataclass(frozen=True)
class Row:
    """One measured number and what predicts it.

    Attributes:
      table: data file stem ('op_times', 'matmul_table', 'attention_table', 'step_times').
      name: row id within the table (op name, 'wqkv/default', 'decode_k128', 'step_us', ...).
      lo, hi: measured value or range, in ``unit`` (lo == hi for a single number).
      unit: 'us' for every row.
      source: the notes' line the number comes from.
      spec: hashable description of the prediction (see ``_predict_one``).
    """

    table: str
    name: str
    lo: float
    hi: float
    unit: str
    source: str
    spec: tuple

    @property
    def target(self) -> float:
        """Fit target: the value, or the middle of a range."""
        return 0.5 * (self.lo + self.hi)

    def error(self, predicted: float) -> float:
        """Relative error of ``predicted`` vs the nearest end of the measured range (0 inside it)."""
        if self.lo <= predicted <= self.hi:
            return 0.0
        ref = self.lo if predicted < self.lo else self.hi
        return predicted / ref - 1.0


def load_rows(data_dir: str | pathlib.Path = DATA_DIR) -> list[Row]:
    """All measured rows, in file order."""
    data_dir = pathlib.Path(data_dir)
    rows: list[Row] = []
    ops = json.loads((data_dir / "op_times.json").read_text())
    for r in ops["rows"]:
        rows.append(Row("op_times", r["op"], r["us"], r["us"], "us", f"{ops['source']}: {r['note']}", ("op", r["op"])))
    mm = json.loads((data_dir / "matmul_table.json").read_text())
    for r in mm["rows"]:
        src = f"{mm['source']}: {r['note']}"
        rows.append(Row("matmul_table", f"{r['name']}/default", r["default_us"], r["default_us"], "us", src,
                        ("matmul", r["name"], "default", 0, 0)))
        t = r["tuned"]
        rows.append(Row("matmul_table", f"{r['name']}/tuned", r["tuned_us"][0], r["tuned_us"][1], "us", src,
                        ("matmul", r["name"], "tuned", t["in0_block_w"], t["per_core_N"])))
    at = json.loads((data_dir / "attention_table.json").read_text())
    for r in at["rows"]:
        rows.append(Row("attention_table", r["name"], r["us"], r["us"], "us", f"{at['source']}: {r['note']}",
                        ("attention", r["attn_mode"], r["fold_heads"], r["k_chunk"], r["q_chunk"],
                         r["cores_per_head"], r["mask_dtype"])))
    st = json.loads((data_dir / "step_times.json").read_text())
    for r in st["rows"]:
        if r["unit"] != "us":
            raise ValueError(f"step_times row {r['name']}: unit={r['unit']!r}, expected 'us'")
        rows.append(Row("step_times", r["name"], r["value"], r["value"], "us", f"{st['source']}: {r['note']}",
                        ("step", r["name"])))
    return rows


def _predict_one(hw: Blackhole, fit: FitParams, spec: tuple, port: dict, *, cfg: ExpertConfig):
    kind = spec[0]
    if kind == "op":
        return port["ops"][spec[1]]
    if kind == "step":
        return port[spec[1]]
    bc = BlackholeConfig.port(cfg)
    if kind == "matmul":
        _, name, which, ibw, pcn = spec
        M, K, N = matmul_shapes(cfg)[name]
        mcfg = (matmul_configs(cfg, "default")[name] if which == "default"
                else MatmulConfig(float(ibw), float(pcn), float(M // 32)))
        return matmul_us(hw, fit, mcfg, M=M, K=K, N=N, weight_dtype=bc.weight_dtype, act_dtype=bc.act_dtype,
                         fidelity=bc.fidelity, fused_activation=(name == "w1"))
    if kind == "attention":
        _, mode, fold, k_chunk, q_chunk, cph, mask = spec
        bc = bc.replace(attn=AttnConfig(float(k_chunk), float(q_chunk), float(cph)), attn_mode=mode,
                        fold_heads=fold, mask_dtype=mask)
        return attention_us(hw, fit, bc, cfg=cfg)
    raise ValueError(f"row spec kind={kind!r} unknown")


def predict(hw: Blackhole, fit: FitParams, specs: tuple[tuple, ...], *, cfg: ExpertConfig) -> jax.Array:
    """Predictions of the exact model for each row spec, in the row's unit (us); shape [rows]."""
    port = step_breakdown(hw, fit, BlackholeConfig.port(cfg), cfg=cfg)
    return jnp.stack([jnp.asarray(_predict_one(hw, fit, s, port, cfg=cfg), jnp.float32) for s in specs])


# ---- unconstrained parameterisation ----------------------------------------------------------------
def to_unconstrained(p: FitParams) -> dict[str, jax.Array]:
    """log of every parameter; logit of ``dram_eff``; log(q - 1) of ``overlap_exponent``."""
    out = {}
    for k, v in params_to_dict(p).items():
        u = math.log(v / (1.0 - v)) if k == "dram_eff" else math.log(v - 1.0) if k == "overlap_exponent" else math.log(v)
        out[k] = jnp.asarray(u, jnp.float32)
    return out


def from_unconstrained(theta: dict[str, jax.Array]) -> FitParams:
    """Inverse of ``to_unconstrained``."""
    def value(k, v):
        return jax.nn.sigmoid(v) if k == "dram_eff" else 1.0 + jnp.exp(v) if k == "overlap_exponent" else jnp.exp(v)

    return FitParams(**{k: value(k, v) for k, v in theta.items()})


def loss_fn(theta, hw: Blackhole, specs, targets, *, cfg: ExpertConfig):
    """Mean squared log ratio predicted / measured over the rows."""
    pred = predict(hw, from_unconstrained(theta), specs, cfg=cfg)
    return jnp.mean(jnp.log(pred / targets) ** LOSS_POWER)


@functools.partial(jax.jit, static_argnames=("specs", "cfg", "steps", "lr"))
def _adam(theta, hw, targets, *, specs, cfg, steps, lr):
    opt = optax.adam(optax.cosine_decay_schedule(lr, steps, alpha=0.01))
    grad = jax.value_and_grad(loss_fn)

    def body(carry, _):
        th, state = carry
        loss, g = grad(th, hw, specs, targets, cfg=cfg)
        upd, state = opt.update(g, state, th)
        return (optax.apply_updates(th, upd), state), loss

    (theta, _), losses = jax.lax.scan(body, (theta, opt.init(theta)), None, length=steps)
    return theta, losses


def fit(rows: list[Row] | None = None, *, hw: Blackhole | None = None, cfg: ExpertConfig | None = None,
        init: FitParams | None = None, steps: int = 4000, lr: float = 0.05) -> tuple[FitParams, dict]:
    """Fit ``FitParams`` to ``rows`` (default: all measured rows) from ``init`` (default: the prior).

    Returns (params, info) with info = {"loss_init", "loss", "n_params", "n_rows", "steps"}.
    """
    rows = load_rows() if rows is None else rows
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    init = initial_params() if init is None else init
    specs = tuple(r.spec for r in rows)
    targets = jnp.asarray([r.target for r in rows], jnp.float32)
    theta0 = to_unconstrained(init)
    theta, losses = _adam(theta0, hw, targets, specs=specs, cfg=cfg, steps=steps, lr=lr)
    params = FitParams(**{k: float(v) for k, v in params_to_dict(from_unconstrained(theta)).items()})
    info = {"loss_init": float(loss_fn(theta0, hw, specs, targets, cfg=cfg)), "loss": float(losses[-1]),
            "n_params": len(theta0), "n_rows": len(rows), "steps": steps}
    return params, info


def report(fit_params: FitParams, rows: list[Row] | None = None, *, hw: Blackhole | None = None,
           cfg: ExpertConfig | None = None) -> list[dict]:
    """Predicted vs measured per row: [{table, name, measured (lo, hi), predicted, error}]."""
    rows = load_rows() if rows is None else rows
    hw = blackhole_p150a() if hw is None else hw
    cfg = ExpertConfig.alpamayo_tt() if cfg is None else cfg
    pred = jax.device_get(jax.jit(predict, static_argnames=("specs", "cfg"))(
        hw, fit_params, tuple(r.spec for r in rows), cfg=cfg))
    return [{"table": r.table, "name": r.name, "lo": r.lo, "hi": r.hi, "predicted": float(p),
             "error": r.error(float(p)), "source": r.source} for r, p in zip(rows, pred)]


def format_report(table: list[dict], info: dict | None = None) -> str:
    """The fit table as text (per table: measured, predicted, error)."""
    lines = []
    if info is not None:
        lines.append(f"fitted {info['n_params']} free parameters to {info['n_rows']} measured rows "
                     f"(loss {info['loss_init']:.4f} -> {info['loss']:.5f}, mean |log ratio|^4)")
    current = None
    for r in table:
        if r["table"] != current:
            current = r["table"]
            lines.append(f"\n[{current}]")
            lines.append(f"  {'row':26s} {'measured':>16s} {'predicted':>10s} {'error':>8s}")
        unit_scale, unit = (1e-3, "ms") if r["lo"] >= 5000 else (1.0, "us")
        meas = (f"{r['lo'] * unit_scale:.1f}" if r["lo"] == r["hi"]
                else f"{r['lo'] * unit_scale:.1f}-{r['hi'] * unit_scale:.1f}")
        lines.append(f"  {r['name']:26s} {meas + ' ' + unit:>16s} {r['predicted'] * unit_scale:10.2f} "
                     f"{100 * r['error']:+7.1f}%")
    return "\n".join(lines)


def write_calibration(params: FitParams, info: dict, table: list[dict],
                      path: str | pathlib.Path = CALIBRATION_PATH) -> None:
    """Store the fitted parameters with the data they were fitted to and the per-row errors."""
    doc = {
        "description": "FitParams of the Blackhole cost model, fitted by costmodel.calibrate.fit to the rows below",
        "params": params_to_dict(params),
        "units": {k: DESCRIPTIONS[k][0] for k in DESCRIPTIONS},
        "meaning": {k: DESCRIPTIONS[k][1] for k in DESCRIPTIONS},
        "fit": info,
        "fitted_to": [{"table": r["table"], "name": r["name"], "measured": [r["lo"], r["hi"]],
                       "predicted": round(r["predicted"], 3), "error": round(r["error"], 4)} for r in table],
    }
    pathlib.Path(path).write_text(json.dumps(doc, indent=1) + "\n")


def main(argv: list[str] | None = None) -> None:
    """CLI: fit, print the table, optionally store it."""
    p = argparse.ArgumentParser(prog="python -m costmodel.calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--write", action="store_true", help=f"store the result in {CALIBRATION_PATH}")
    args = p.parse_args(argv)
    params, info = fit(steps=args.steps, lr=args.lr)
    table = report(params)
    print(format_report(table, info))
    print("\nfitted parameters:")
    for k, v in params_to_dict(params).items():
        print(f"  {k:26s} {v:12.5g} {DESCRIPTIONS[k][0]:7s} {DESCRIPTIONS[k][1]}")
    if args.write:
        write_calibration(params, info, table)
        print(f"\nwrote {CALIBRATION_PATH}")


if __name__ == "__main__":
    main()
