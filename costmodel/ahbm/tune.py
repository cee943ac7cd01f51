"""Gradient tuning of TILE, C, P and the pipelining option on ``costmodel.tuning``, checked by
exhaustive search.

Relaxed knobs: log2 TILE, log2 C, log2 P as reals in their boxes and softmax weights over the
pipelining options the hardware has (opt2 only where 'ex_composite' is in ``AHBM.commands``).
The loss is log(relaxed latency) + a penalty on ``constraints``' margins (the same function the
evaluator raises on); optax Adam descends it from a few starts. The relaxed optimum is projected
onto the legal discrete configs next to it (the legal TILE values, 32 or multiples of 64, and
the powers of two of C and P just below / above it; wider if none is legal; the balanced tiles of
the neighbouring tile counts; every pipelining option the hardware has), each scored by the
exact evaluator; a config is legal when it validates and satisfies ``constraints``. The
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

from costmodel import tuning
from costmodel.ahbm.cases import case_latency, graph_options
from costmodel.ahbm.config import (
    PIPELINES,
    AhbmConfig,
    allowed_pipelines,
    check_case_options,
    check_problem,
    knob_space,
)
from costmodel.ahbm.model import constraints, evaluate
from costmodel.compile_options import jit
from costmodel.hardware import AHBM, ahbm_sip
from costmodel.smooth import Relax
from jaxref.validation import check_choice

# Relaxation temperatures. The ring's counts are sums of ceilings of small ratios (visits of a
# block per PE); a sharper ceiling keeps its relaxed optimum on the discrete one, while the decode
# cases need the smoother one for a useful gradient in log2 C and log2 P.
RELAX = Relax(tau_us=0.05, tau_int=1.0)
RELAX_BY_CASE = {"prefill_sp": Relax(tau_us=0.05, tau_int=0.03)}
PENALTY = 30.0
KNOBS = ("tile", "cubes", "pes")


@dataclasses.dataclass(frozen=True)
class Problem:
    """What is tuned: the static part of an ``AhbmConfig`` (validated by ``check_problem``)."""

    case: str
    seq_len: int
    batch: int = 1
    model: str = "llama3_70b"
    reduce: str = "tree"
    placement: str = "round_robin"
    capacity: int | None = None
    cube_mesh: str = "wide"

    def __post_init__(self):
        check_problem(self.case, self.seq_len, self.batch, self.model, self.reduce)
        check_case_options(self.case, self.reduce, self.placement, self.capacity, self.cube_mesh)

    def config(self, **knobs) -> AhbmConfig:
        return AhbmConfig(case=self.case, seq_len=self.seq_len, batch=self.batch, model=self.model,
                          reduce=self.reduce, placement=self.placement, capacity=self.capacity,
                          cube_mesh=self.cube_mesh, **knobs)

    @property
    def static(self) -> dict:
        return {"case": self.case, "model": self.model,
                **graph_options(self.case, self.reduce, self.placement, self.cube_mesh)}


@dataclasses.dataclass(frozen=True)
class TuneResult:
    best: AhbmConfig
    latency_us: float
    evaluations: int  # discrete (exact) evaluations
    gradient_steps: int
    relaxed: dict  # the relaxed optimum: tile, cubes, pes, pipeline weights ({} when exhaustive)
    method: str = "descent"  # 'descent' | 'exhaustive'


METHODS = ("auto", "descent", "exhaustive")
# 'auto' searches exhaustively up to this many discrete configs: one vmapped sweep of them costs
# less than the descent's compilation and steps (every case of the knob space is below it today;
# a larger space, e.g. more knobs or finer tiles, falls back to descent)
EXHAUSTIVE_MAX = 50_000
# latencies within this relative margin of the best are a tie (plateaus: contiguous placement
# with capacity >> S is flat in C and P); ties go to the smaller resource use
TIE_REL = 1e-3


def resource_use(cfg: AhbmConfig) -> tuple:
    """Sort key of a config's resource use: ranks C x P, then C, then the effective tile (TCM),
    then the tile, then the pipelining option (opt1 needs the least: one S buffer, no new command)."""
    return (cfg.ranks, cfg.cubes, cfg.tile_eff, cfg.tile, PIPELINES.index(cfg.pipeline))


def pick(cfgs: list[AhbmConfig], lat: np.ndarray) -> int:
    """Index of the config of least resource use among those within ``TIE_REL`` of the least
    finite latency (``lat``: inf where infeasible); -1 when none is finite."""
    lat = np.asarray(lat, dtype=np.float64)
    if not np.isfinite(lat).any():
        return -1
    near = np.flatnonzero(lat <= np.min(lat) * (1.0 + TIE_REL))
    return int(min(near, key=lambda i: resource_use(cfgs[i])))


def _axes(case: str, model: str) -> tuple[tuning.Axis, ...]:
    space = knob_space(case, model)
    return tuple(tuning.Axis(k, tuple(space[k])) for k in KNOBS)


def _loss(hw, x, w, S, B, cap, *, static, relax):
    """log(relaxed latency) + penalty on the constraint margins (2% slack inside the boundary)."""
    knobs = {"seq_len": S, "batch": B, "capacity": cap, "tile": 2.0 ** x[0], "cubes": 2.0 ** x[1],
             "pes": 2.0 ** x[2], "w": w}
    out = case_latency(hw, knobs, **dict(static), relax=relax)
    m = constraints(hw, out)
    return jnp.log(out["total"]) + PENALTY * (jax.nn.relu(m["tcm"] + 0.02) ** 2 + jax.nn.relu(m["sips"] + 0.02) ** 2)


@functools.partial(jit, fast=True, static_argnames=("static", "relax", "steps", "lr"))  # compile-bound: one run per tune
def _descend(hw, x0, logits0, mask, S, B, cap, lo, hi, *, static, relax, steps, lr):
    """Adam on (log2 knobs, pipelining logits; ``mask`` removes options the hardware lacks);
    returns the final point and the relaxed loss of each pure pipelining option there."""
    kw = {"static": static, "relax": relax}

    def loss(params):
        x, logits = params
        return _loss(hw, x, jax.nn.softmax(logits + mask), S, B, cap, **kw)

    params, _ = tuning.descend(loss, (x0, logits0), steps=steps, lr=lr,
                               clip=lambda p: (jnp.clip(p[0], lo, hi), p[1]))
    # one batched graph, not one copy of the model per option
    pure = jax.vmap(lambda w: _loss(hw, params[0], w, S, B, cap, **kw))(jnp.eye(len(PIPELINES)))
    return params, pure


class _Scorer:
    """Memoised exact evaluation of candidates (one count per distinct effective config)."""

    def __init__(self, prob: Problem, hw: AHBM):
        self.prob, self.hw, self.cache = prob, hw, {}

    def config(self, c: dict, pipeline: str) -> AhbmConfig | str:
        try:
            return self.prob.config(tile=c["tile"], cubes=c["cubes"], pes=c["pes"], pipeline=pipeline)
        except ValueError as e:
            return str(e)

    def result(self, cfg: AhbmConfig):
        key = (cfg.tile_eff, cfg.cubes, cfg.pes, cfg.pipeline)  # every TILE >= a lane's keys is one config
        if key not in self.cache:
            try:
                self.cache[key] = evaluate(cfg, self.hw)["latency_us"]
            except ValueError as e:
                self.cache[key] = str(e)
        return self.cache[key]


def tune(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b", reduce: str = "tree",
         placement: str = "round_robin", capacity: int | None = None, cube_mesh: str = "wide",
         hw: AHBM | None = None, steps: int = 150, starts: tuple[float, ...] = (6.0, 9.0),
         method: str = "auto") -> TuneResult:
    """Best config: ``method='auto'`` searches exhaustively when the knob space holds at most
    ``EXHAUSTIVE_MAX`` configs (cheaper than descent, and exact on plateaus), else descends;
    'descent': relaxed descent from ``starts`` (log2 TILE), projection onto legal neighbours,
    exact scoring; 'exhaustive': ``exhaustive``. Ties (within ``TIE_REL``) go to the smaller
    resource use. Raises ValueError naming the constraint when nothing is legal."""
    check_choice("method", method, METHODS)
    hw = ahbm_sip() if hw is None else hw
    prob = Problem(case, seq_len, batch, model, reduce, placement, capacity, cube_mesh)
    if method == "exhaustive" or (method == "auto" and _space_size(case, model, hw) <= EXHAUSTIVE_MAX):
        best, lat, n = exhaustive(case, seq_len, batch=batch, model=model, reduce=reduce, placement=placement,
                                  capacity=capacity, cube_mesh=cube_mesh, hw=hw)
        return TuneResult(best, lat, n, 0, {}, "exhaustive")
    axes = _axes(case, model)
    lo = jnp.asarray([math.log2(ax.values[0]) for ax in axes])
    hi = jnp.asarray([math.log2(ax.values[-1]) for ax in axes])
    pipes = allowed_pipelines(hw)
    mask = jnp.asarray([0.0 if p in pipes else -1e9 for p in PIPELINES])
    S, B = jnp.float32(seq_len), jnp.float32(batch)
    cap = jnp.float32(capacity if capacity is not None else seq_len)
    static = tuple(sorted(prob.static.items()))
    relax = RELAX_BY_CASE.get(case, RELAX)
    best = None
    for t0 in starts:
        x0 = jnp.clip(jnp.asarray([t0, float(lo[1] + hi[1]) / 2, float(lo[2] + hi[2]) / 2]), lo, hi)
        params, pure = _descend(hw, x0, jnp.zeros(len(PIPELINES)), mask, S, B, cap, lo, hi, static=static,
                                relax=relax, steps=steps, lr=0.1)
        pure = np.where([p in pipes for p in PIPELINES], np.nan_to_num(np.asarray(pure), nan=np.inf), np.inf)
        if best is None or pure.min() < best[1].min():
            best = (params, pure)
    (x, logits), pure = best
    x = np.asarray(x)
    point = {ax.name: float(2.0 ** v) for ax, v in zip(axes, x, strict=True)}
    order = np.argsort(pure)
    # every option the hardware has is scored (their exact gaps are too small and too TCM-dependent for
    # the relaxed weights to decide), the relaxed favourite first
    try_pipes = [PIPELINES[i] for i in order if PIPELINES[i] in pipes]
    scorer = _Scorer(prob, hw)

    def legal(c: dict) -> str | None:
        reasons = []
        for p in try_pipes:
            cfg = scorer.config(c, p)
            r = cfg if isinstance(cfg, str) else scorer.result(cfg)
            if not isinstance(r, str):
                return None
            reasons.append(r)
        return reasons[0]

    cands = tuning.project(point, axes, legal, radii=(1, 2, 4),
                           everything=lambda: [dict(zip(KNOBS, v)) for v in itertools.product(*(a.values for a in axes))],
                           what=f"config for case={case!r}, seq_len={seq_len}")
    cands = cands + _tile_count_neighbours(cands, point, axes[0], scorer, try_pipes)
    scored = [cfg for c in cands for p in try_pipes
              if not isinstance(cfg := scorer.config(c, p), str) and isinstance(scorer.result(cfg), float)]
    found = scored[pick(scored, np.asarray([scorer.result(c) for c in scored]))]
    relaxed = {**point, "pipeline_weights": [float(v) for v in jax.nn.softmax(jnp.asarray(logits) + mask)]}
    return TuneResult(found, scorer.result(found), len(scorer.cache), steps * len(starts), relaxed)


def _space_size(case: str, model: str, hw: AHBM) -> int:
    """Discrete configs of the case's knob space (before validation)."""
    return math.prod(len(v) for k, v in knob_space(case, model).items() if k != "pipeline") * len(
        allowed_pipelines(hw))


def _tile_count_neighbours(cands: list[dict], point: dict, tiles: tuning.Axis, scorer: _Scorer,
                           pipes: list[str]) -> list[dict]:
    """Neighbours in tile-count space: the relaxed model counts fractional tiles n* = lane / TILE,
    so next to each candidate also try n = 1 (one-shot), floor(n*) and ceil(n*) tiles of the
    balanced size (the smallest legal TILE >= lane / n); the exact model's ragged last tile
    decides between them."""
    out = []
    for c in cands:
        cfg = scorer.config(c, pipes[0])
        if isinstance(cfg, str):
            continue
        lane = cfg.lane_keys
        n_star = max(lane / point["tile"], 1.0)
        for n in {1, max(1, math.floor(n_star)), math.ceil(n_star)}:
            t = next((v for v in tiles.values if v >= -(-lane // n)), tiles.values[-1])
            new = {**c, "tile": t}
            if new not in cands and new not in out and all(not isinstance(cfg2, str) and not isinstance(
                    scorer.result(cfg2), str) for cfg2 in [scorer.config(new, pipes[0])]):
                out.append(new)
    return out


def valid_configs(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b", reduce: str = "tree",
                  placement: str = "round_robin", capacity: int | None = None, cube_mesh: str = "wide",
                  pipelines: tuple[str, ...] = PIPELINES) -> list[AhbmConfig]:
    """Every discrete config of the case's knob space that validates (before ``constraints``)."""
    prob = Problem(case, seq_len, batch, model, reduce, placement, capacity, cube_mesh)
    space = knob_space(case, model)
    out = []
    for tile, cubes, pes, pipe in itertools.product(space["tile"], space["cubes"], space["pes"], pipelines):
        try:
            out.append(prob.config(tile=tile, cubes=cubes, pes=pes, pipeline=pipe))
        except ValueError:
            continue
    return out


SWEEP_MIN_BATCH = 1024
SWEEP_STATIC = ("case", "model", "reduce", "placement", "mesh", "chunk")


def sweep_latency(hw, knobs, *, case, model="llama3_70b", reduce="tree", placement="round_robin", mesh="wide",
                  chunk=4096, once=False):
    """Exact (total latency us [N], worst constraint margin [N]) of a batch of N knob vectors
    (leading axis), priced at N padded (with the last config) to the next power of two >=
    ``SWEEP_MIN_BATCH``: every batch of a case up to that size shares one compiled program
    (compiling it takes far longer than pricing a thousand configs). ``once``: a batch priced once
    (an exhaustive search), compiled with ``FAST_COMPILE`` (``sweep_once``), not for throughput."""
    n = int(jax.tree_util.tree_leaves(knobs)[0].shape[0])
    size = max(SWEEP_MIN_BATCH, 1 << max(n - 1, 0).bit_length())
    padded = jax.tree_util.tree_map(lambda v: jnp.concatenate([v, jnp.repeat(v[-1:], size - n, axis=0)]), knobs)
    lat, margin = (sweep_once if once else sweep_batch)(hw, padded, case=case, model=model, reduce=reduce,
                                                        placement=placement, mesh=mesh, chunk=chunk)
    return lat[:n], margin[:n]


def sweep_batch_of(hw, knobs, *, case, model="llama3_70b", reduce="tree", placement="round_robin", mesh="wide",
                   chunk=4096):
    """``sweep_latency`` at the batch's own size, unjitted: vmapped in chunks of ``chunk`` configs
    (``lax.map`` batches), so XLA's many elementwise passes over a chunk stay in cache instead of
    streaming the whole batch from memory each time."""
    def one(k):
        return latency_and_margin(hw, k, case=case, model=model, reduce=reduce, placement=placement, mesh=mesh)
    return jax.lax.map(one, knobs, batch_size=chunk)


def latency_and_margin(hw, knobs, **static):
    """(total latency us, worst ``constraints`` margin: <= 0 feasible) of one knob vector;
    ``static``: ``case_latency``'s options (``model.static_of``)."""
    out = case_latency(hw, knobs, **static)
    return out["total"], jnp.max(jnp.stack(jnp.broadcast_arrays(*constraints(hw, out).values())))


# one compiled program per batch size and static option: for throughput, and for a batch priced once
sweep_batch = jit(sweep_batch_of, static_argnames=SWEEP_STATIC)
sweep_once = jit(sweep_batch_of, fast=True, static_argnames=SWEEP_STATIC)


def stack_knobs(cfgs: list[AhbmConfig]) -> dict:
    f = lambda name: jnp.asarray([float(getattr(c, name)) for c in cfgs], jnp.float32)
    return {"seq_len": f("seq_len"), "batch": f("batch"), "tile": f("tile"), "cubes": f("cubes"),
            "pes": f("pes"), "capacity": f("kv_capacity"),
            "w": jnp.eye(len(PIPELINES))[np.asarray([PIPELINES.index(c.pipeline) for c in cfgs])]}


def exhaustive(case: str, seq_len: int, *, batch: int = 1, model: str = "llama3_70b", reduce: str = "tree",
               placement: str = "round_robin", capacity: int | None = None, cube_mesh: str = "wide",
               hw: AHBM | None = None) -> tuple[AhbmConfig, float, int]:
    """(best config, its latency us, evaluations) over every valid, feasible discrete config; ties
    (within ``TIE_REL`` of the least latency) go to the smaller ``resource_use``. The configs are
    priced in one batched graph; the latency returned is the exact evaluator's (``evaluate``: at
    concrete hardware a decode-SP reduce's queue order is replayed from the ranks' own sweep ends,
    which a batch of traced configs cannot do; the two differ by well under ``TIE_REL`` at the
    ADR's rates)."""
    hw = ahbm_sip() if hw is None else hw
    cfgs = valid_configs(case, seq_len, batch=batch, model=model, reduce=reduce, placement=placement,
                         capacity=capacity, cube_mesh=cube_mesh, pipelines=allowed_pipelines(hw))
    lat, margin = sweep_latency(hw, stack_knobs(cfgs), case=case, model=model, once=True,
                                **graph_options(case, reduce, placement, cube_mesh))
    lat = np.where(np.asarray(margin) <= 0, np.asarray(lat), np.inf)
    i = pick(cfgs, lat)
    if i < 0:
        i = int(np.argmin(np.asarray(margin)))  # the least infeasible, to name what it violates
        try:
            evaluate(cfgs[i], hw)
            why = ""
        except ValueError as e:
            why = f" (e.g. {cfgs[i].tile=}, {cfgs[i].cubes=}, {cfgs[i].pes=}: {e})"
        raise ValueError(f"no feasible config for case={case!r}, seq_len={seq_len}{why}")
    return cfgs[i], float(evaluate(cfgs[i], hw)["latency_us"]), len(cfgs)
