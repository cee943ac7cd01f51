"""Gradient tuning of TILE, C, P and the pipelining option, checked by exhaustive search.

Relaxed knobs: log2 TILE, log2 C, log2 P as reals in their boxes and softmax weights over
('opt1', 'opt2', 'opt3'). The loss is log(relaxed latency) + a penalty on ``constraints``'
margins (the same function the evaluator raises on); optax Adam descends it from a few starts.
The best relaxed point is projected to the discrete configs around it (floor / ceil of every
active log2 knob; the pipelining option whose pure relaxed loss is lowest there), each scored
by the exact evaluator. The
exhaustive search scores every valid discrete config with the exact evaluator (vmapped).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from costmodel.ahbm.cases import case_latency
from costmodel.ahbm.config import PIPELINES, AhbmConfig, knob_space
from costmodel.ahbm.model import constraints, evaluate
from costmodel.hardware import AHBM, ahbm_sip
from costmodel.smooth import Relax

# Relaxation temperatures. The ring's counts are sums of ceilings of small ratios (visits of a
# block per PE); a sharper ceiling keeps its relaxed optimum on the discrete one, while the decode
# cases need the smoother one for a useful gradient in log2 C and log2 P.
RELAX = Relax(tau_us=0.05, tau_int=0.1)
RELAX_BY_CASE = {"prefill_sp": Relax(tau_us=0.05, tau_int=0.03)}
PENALTY = 30.0


@dataclasses.dataclass(frozen=True)
class TuneResult:
    best: AhbmConfig
    latency_us: float
    evaluations: int  # discrete (exact) evaluations
    gradient_steps: int
    relaxed: dict  # the relaxed optimum: tile, cubes, pes, pipeline weights


def _boxes(case: str, model: str) -> dict:
    space = knob_space(case, model)
    return {k: (math.log2(min(space[k])), math.log2(max(space[k]))) for k in ("tile", "cubes", "pes")}


def _loss(hw, x, w, S, B, *, case, model, reduce):
    """log(relaxed latency) + penalty on the constraint margins (2% slack inside the boundary)."""
    knobs = {"seq_len": S, "batch": B, "tile": 2.0 ** x[0], "cubes": 2.0 ** x[1], "pes": 2.0 ** x[2], "w": w}
    out = case_latency(hw, knobs, case=case, model=model, reduce=reduce, relax=RELAX_BY_CASE.get(case, RELAX))
    margin = constraints(hw, out)["tcm"]
    return jnp.log(out["total"]) + PENALTY * jax.nn.relu(margin + 0.02) ** 2


@functools.partial(jax.jit, static_argnames=("case", "model", "reduce", "steps", "lr"))
def _descend(hw, x0, logits0, S, B, *, case, model, reduce, steps, lr, lo, hi):
    """Adam on (log2 knobs, pipelining logits); returns the final point and the relaxed loss of
    each pure pipelining option there (the choice the projection keeps)."""
    opt = optax.adam(lr)
    kw = {"case": case, "model": model, "reduce": reduce}

    def loss(params):
        x, logits = params
        return _loss(hw, x, jax.nn.softmax(logits), S, B, **kw)

    def step(carry, _):
        params, state = carry
        g = jax.tree.map(lambda v: jnp.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0), jax.grad(loss)(params))
        upd, state = opt.update(g, state, params)
        x, logits = optax.apply_updates(params, upd)
        return ((jnp.clip(x, lo, hi), logits), state), None

    params = (x0, logits0)
    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
    pure = jnp.stack([_loss(hw, params[0], w, S, B, **kw) for w in jnp.eye(len(PIPELINES))])
    return params, pure


def tune(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b", reduce: str = "tree",
         hw: AHBM | None = None, steps: int = 150, starts: tuple[float, ...] = (7.0,)) -> TuneResult:
    """Gradient tuner: relaxed descent from ``starts`` (log2 TILE), projection, exact scoring."""
    hw = ahbm_sip() if hw is None else hw
    box = _boxes(case, model)
    lo = jnp.asarray([box[k][0] for k in ("tile", "cubes", "pes")])
    hi = jnp.asarray([box[k][1] for k in ("tile", "cubes", "pes")])
    S, B = jnp.float32(seq_len), jnp.float32(batch)
    best = None
    for t0 in starts:
        x0 = jnp.clip(jnp.asarray([t0, (box["cubes"][0] + box["cubes"][1]) / 2, (box["pes"][0] + box["pes"][1]) / 2]),
                      lo, hi)
        params, pure = _descend(hw, x0, jnp.zeros(len(PIPELINES)), S, B, case=case, model=model, reduce=reduce,
                                steps=steps, lr=0.1, lo=lo, hi=hi)
        pure = np.nan_to_num(np.asarray(pure), nan=np.inf)
        if best is None or pure.min() < best[2].min():
            best = (params, None, pure)
    (x, logits), _, pure = best
    x = np.asarray(x)
    pipe = PIPELINES[int(np.argmin(pure))]
    opts = [sorted({math.floor(v + 1e-6), math.ceil(v - 1e-6)}) for v in x]
    cands = _candidates(opts, case=case, seq_len=seq_len, batch=batch, pipeline=pipe, reduce=reduce, model=model)
    if len({c.replace(tile=c.tile_eff) for c in cands}) < len(cands):
        # TILE beyond a lane's keys is the same one-shot config: look one TILE further down instead
        opts[0] = [opts[0][0] - 1] + opts[0]
        cands = _candidates(opts, case=case, seq_len=seq_len, batch=batch, pipeline=pipe, reduce=reduce,
                            model=model)
    evals, found, seen = 0, None, set()
    for cfg in cands:
        key = cfg.replace(tile=cfg.tile_eff)
        if key in seen:
            continue
        seen.add(key)
        evals += 1
        try:
            lat = evaluate(cfg, hw)["latency_us"]
        except ValueError:
            continue
        if found is None or lat < found[1]:
            found = (cfg, lat)
    if found is None:
        raise ValueError(f"no feasible discrete config next to the relaxed optimum tile={2 ** x[0]:.1f}, "
                         f"cubes={2 ** x[1]:.2f}, pes={2 ** x[2]:.2f} for case={case!r}, seq_len={seq_len}")
    relaxed = {"tile": float(2 ** x[0]), "cubes": float(2 ** x[1]), "pes": float(2 ** x[2]),
               "pipeline_weights": [float(v) for v in jax.nn.softmax(jnp.asarray(logits))]}
    return TuneResult(found[0], found[1], evals, steps * len(starts), relaxed)


def _candidates(opts, **kw) -> list[AhbmConfig]:
    out = []
    for lt, lc, lp in itertools.product(*opts):
        try:
            out.append(AhbmConfig(tile=2**lt, cubes=2**lc, pes=2**lp, **kw))
        except ValueError:
            continue
    return out


def valid_configs(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b",
                  reduce: str = "tree") -> list[AhbmConfig]:
    """Every discrete config of the case's knob space that validates (before the TCM check)."""
    space = knob_space(case, model)
    out = []
    for tile, cubes, pes, pipe in itertools.product(space["tile"], space["cubes"], space["pes"], space["pipeline"]):
        try:
            out.append(AhbmConfig(case=case, seq_len=seq_len, batch=batch, tile=tile, cubes=cubes, pes=pes,
                                  pipeline=pipe, reduce=reduce, model=model))
        except ValueError:
            continue
    return out


@functools.partial(jax.jit, static_argnames=("case", "model", "reduce", "chunk"))
def sweep_latency(hw, knobs, *, case, model="llama3_70b", reduce="tree", chunk=4096):
    """Exact (total latency us, TCM margin) of a batch of knob vectors (leading axis): vmapped in
    chunks of ``chunk`` configs (``lax.map`` batches), so XLA's many elementwise passes over a
    chunk stay in cache instead of streaming the whole batch from memory each time."""
    def one(k):
        out = case_latency(hw, k, case=case, model=model, reduce=reduce)
        return out["total"], constraints(hw, out)["tcm"]
    return jax.lax.map(one, knobs, batch_size=chunk)


def stack_knobs(cfgs: list[AhbmConfig]) -> dict:
    f = lambda name: jnp.asarray([float(getattr(c, name)) for c in cfgs], jnp.float32)
    return {"seq_len": f("seq_len"), "batch": f("batch"), "tile": f("tile"), "cubes": f("cubes"),
            "pes": f("pes"), "w": jnp.eye(len(PIPELINES))[np.asarray([PIPELINES.index(c.pipeline) for c in cfgs])]}


def exhaustive(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b", reduce: str = "tree",
               hw: AHBM | None = None) -> tuple[AhbmConfig, float, int]:
    """(best config, its latency us, evaluations) over every valid, feasible discrete config."""
    hw = ahbm_sip() if hw is None else hw
    cfgs = valid_configs(case, seq_len, batch=batch, model=model, reduce=reduce)
    lat, margin = sweep_latency(hw, stack_knobs(cfgs), case=case, model=model, reduce=reduce)
    lat = np.where(np.asarray(margin) <= 0, np.asarray(lat), np.inf)
    i = int(np.argmin(lat))
    if not np.isfinite(lat[i]):
        raise ValueError(f"no feasible config for case={case!r}, seq_len={seq_len}")
    return cfgs[i], float(lat[i]), len(cfgs)
