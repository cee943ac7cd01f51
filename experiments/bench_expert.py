"""Benchmark: one decoder layer at ``alpamayo_tt`` shapes, JAX golden vs HF transformers, and vmap.

``python -m experiments.bench_expert`` times, in one run, medians of repeated calls. Variants are
interleaved in rounds (so machine load drifting over the run hits every side alike); within a
round each variant runs a block of consecutive calls and the first call of each block is not kept,
so every side is timed warm and not while the other library's worker threads are still spinning
down (XLA's and torch's pools both busy-wait briefly after a call; back-to-back alternation cost
the JAX side ~10% in a side-by-side check).

1. one decoder layer, S = 4700 cache rows, T = 64 tokens, fp32: the jitted golden
   (``jaxref.layers.decoder_layer``, exact and tail-slot formulations) vs HF
   ``Qwen3VLTextDecoderLayer`` in torch eager, with eager attention and with SDPA attention
   (torch's fused ``scaled_dot_product_attention``) (4-D additive mask, the cache in a
   fresh ``DynamicCache`` per call, built outside the timed region), same weights, torch using as
   many threads as XLA's CPU client has cores. Target: golden >= 2x faster. The exact form is
   timed with S a python int (a cache of exactly S rows) and with S traced (one compile for every
   S, Smax = S here too).
2. throughput of ``jax.vmap`` over 8 trajectories sharing one cache (``in_axes=None`` for the
   cache: passed once, never copied per trajectory - checked on the jaxpr) vs 8 sequential calls.
   Target: >= 1x. Under vmap the weight GEMMs take the 8 x 64 rows at once and the cache attention
   folds the trajectories into its query rows, a kv head at a time (``jaxref.batching.shared_kv_rows``).

Timings go here, never in tests.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics

import jax
import jax.numpy as jnp
import numpy as np

from experiments.report.render import format_table
from experiments.timing import time_call, time_repeats
from jaxref.config import ExpertConfig
from jaxref.expert import KVCache, expert_rope
from jaxref.layers import decoder_layer
from jaxref.options import ExpertOptions
from jaxref.testing import walk_jaxpr_shapes
from jaxref.validation import cli_main, positive_int
from jaxref.weights import init_cache_layer, init_layer_params


def _cache_copies_per_trajectory(fn, xb, smax: int, cfg: ExpertConfig) -> bool:
    """True if the jaxpr of ``fn(xb)`` holds an intermediate shaped like a per-trajectory cache layer."""
    return (xb.shape[0], cfg.num_kv_heads, smax, cfg.head_dim) in walk_jaxpr_shapes(jax.make_jaxpr(fn)(xb))


def measure(*, seq_len: int = 4700, rounds: int = 7, block: int = 3, batch: int = 8, seed: int = 0) -> dict:
    """Time the variants (see the module docstring); returns plain numbers.

    Returns a dict: ``config`` (shapes, threads, rounds), ``max_abs_vs_hf`` (what each timed variant
    computes vs HF eager), ``median_s`` / ``min_s`` / ``n`` per variant, ``by_round`` (per variant,
    per round, the kept times), ``cache_copies`` (a per-trajectory cache copy in the vmapped jaxpr),
    ``layer_flops`` and ``sgemm_peak_flops_per_s``.
    """
    import torch
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextRotaryEmbedding

    from jaxref.testing.hf_oracle import hf_cache, hf_decoder_layer, hf_text_config

    cfg = ExpertConfig.alpamayo_tt(num_layers=1)
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    torch.set_num_threads(threads)
    kp, kc, kx, kb = jax.random.split(jax.random.key(seed), 4)
    layer = init_layer_params(kp, cfg)
    ck, cv = init_cache_layer(kc, cfg, seq_len)  # Smax = S: the exact form needs no tail rows
    smax_tail = seq_len + cfg.num_tokens + 32
    ck_t, cv_t = init_cache_layer(kc, cfg, seq_len, max_seq_len=smax_tail, fill=7.0)
    x = jax.random.normal(kx, (cfg.num_tokens, cfg.hidden), jnp.float32)
    xb = jax.random.normal(kb, (batch, cfg.num_tokens, cfg.hidden), jnp.float32)
    rope = expert_rope(seq_len, 0, cfg=cfg)
    S = jnp.int32(seq_len)

    def golden(mode):
        return jax.jit(
            lambda p, x, ck, cv, s: decoder_layer(p, x, (ck, cv), s, rope, cfg=cfg, options=ExpertOptions(attention=mode))
        )

    # The exact form with S a python int (known at trace time) and with S traced (an argument: one
    # compile serves every S).
    g_exact_traced, g_tail = golden("exact"), golden("tail_slot")
    g_exact = jax.jit(lambda p, x, ck, cv: decoder_layer(p, x, (ck, cv), seq_len, rope, cfg=cfg))
    g_vmap = jax.jit(
        jax.vmap(
            lambda p, x, ck, cv: decoder_layer(p, x, (ck, cv), seq_len, rope, cfg=cfg),
            in_axes=(None, 0, None, None),
        )
    )
    copies = _cache_copies_per_trajectory(
        lambda xb: jax.vmap(
            lambda x: decoder_layer(layer, x, (ck, cv), seq_len, rope, cfg=cfg)
        )(xb),
        xb,
        seq_len,
        cfg,
    )

    # HF layers with the same weights (exported through the HF names): eager and SDPA attention.
    hf_cfg = hf_text_config(cfg, num_layers=1)
    one = _one_layer_params(layer, cfg)
    hf_layers = {impl: hf_decoder_layer(one, cfg, layer=0, attn_implementation=impl) for impl in ("eager", "sdpa")}
    xt = torch.from_numpy(np.array(x))[None]
    pos = (torch.arange(cfg.num_tokens) + seq_len).view(1, 1, -1).expand(3, 1, -1)
    pe = Qwen3VLTextRotaryEmbedding(hf_cfg)(xt, pos)
    mask = torch.zeros(1, 1, cfg.num_tokens, seq_len + cfg.num_tokens)
    one_cache = KVCache.create(ck[None], cv[None], seq_len)

    def hf_call(impl, cache):
        with torch.no_grad():
            return hf_layers[impl](xt, position_embeddings=pe, attention_mask=mask, cache=cache)

    # Correctness of what is being timed: every side computes the same layer.
    ref = hf_call("eager", hf_cache(one_cache))[0].numpy()
    vm = np.asarray(g_vmap(layer, xb, ck, cv))
    errors = {
        "jax exact": float(np.abs(np.asarray(g_exact(layer, x, ck, cv)) - ref).max()),
        "jax exact, traced S": float(np.abs(np.asarray(g_exact_traced(layer, x, ck, cv, S)) - ref).max()),
        "jax tail_slot": float(np.abs(np.asarray(g_tail(layer, x, ck_t, cv_t, S)) - ref).max()),
        "hf sdpa": float(np.abs(hf_call("sdpa", hf_cache(one_cache))[0].numpy() - ref).max()),
        f"jax vmap x{batch} vs per-trajectory": max(
            float(np.abs(vm[i] - np.asarray(g_exact(layer, xb[i], ck, cv))).max()) for i in range(batch)),
    }

    wall = lambda *call: time_call(*call)[1]
    calls = {  # each returns its call's wall time
        "jax exact": lambda: wall(g_exact, layer, x, ck, cv),
        "jax exact, traced S": lambda: wall(g_exact_traced, layer, x, ck, cv, S),
        # a fresh DynamicCache per call, built before the timer starts
        "hf eager": lambda: wall(functools.partial(hf_call, "eager", hf_cache(one_cache))),
        "hf sdpa": lambda: wall(functools.partial(hf_call, "sdpa", hf_cache(one_cache))),
        "jax tail_slot": lambda: wall(g_tail, layer, x, ck_t, cv_t, S),
        f"jax vmap x{batch}": lambda: wall(g_vmap, layer, xb, ck, cv),
        f"jax {batch} sequential": lambda: wall(  # each call waited for, as a caller of one trajectory would
            lambda: [jax.block_until_ready(g_exact(layer, xb[i], ck, cv)) for i in range(batch)]),
    }
    by_round = {k: [] for k in calls}  # per variant: one list of kept times per round
    for rnd in range(rounds + 1):  # round 0 is a warm-up
        for name, timed_call in calls.items():
            kept = [timed_call() for _ in range(block)][1:]  # the first call of a block only warms it up
            if rnd:
                by_round[name].append(kept)
    samples = {k: [t for r in v for t in r] for k, v in by_round.items()}
    return {
        "config": {"D": cfg.hidden, "N": cfg.num_heads, "K": cfg.num_kv_heads, "H": cfg.head_dim, "F": cfg.ffn,
                   "T": cfg.num_tokens, "S": seq_len, "batch": batch, "rounds": rounds, "kept_per_round": block - 1,
                   "threads": threads, "torch_threads": torch.get_num_threads(), "kv_chunk": ExpertOptions().kv_chunk,
                   "smax_tail_slot": smax_tail},
        "max_abs_vs_hf": errors,
        "median_s": {k: statistics.median(v) for k, v in samples.items()},
        "min_s": {k: min(v) for k, v in samples.items()},
        "n": {k: len(v) for k, v in samples.items()},
        "by_round": by_round,
        "cache_copies": copies,
        "layer_flops": layer_flops(cfg, seq_len),
        "sgemm_peak_flops_per_s": _sgemm_peak(),
    }


def round_ratios(m: dict, num: str, den: str) -> list[float]:
    """Per-round ratio of median times num / den, sorted (the spread of a ratio over rounds)."""
    return sorted(statistics.median(n) / statistics.median(d) for n, d in zip(m["by_round"][num], m["by_round"][den]))


def run(*, seq_len: int = 4700, rounds: int = 7, block: int = 3, batch: int = 8, seed: int = 0) -> str:
    """``measure`` formatted as the benchmark's printout."""
    m = measure(seq_len=seq_len, rounds=rounds, block=block, batch=batch, seed=seed)
    c, med, err = m["config"], m["median_s"], m["max_abs_vs_hf"]
    rows = [[k, f"{med[k] * 1e3:.1f}", f"{m['min_s'][k] * 1e3:.1f}", m["n"][k]] for k in med]
    ratio = med["hf eager"] / med["jax exact"]
    flops, peak = m["layer_flops"], m["sgemm_peak_flops_per_s"]
    vmap_ratio = med[f"jax {batch} sequential"] / med[f"jax vmap x{batch}"]

    def spread(num: str, den: str) -> str:
        r = round_ratios(m, num, den)
        return f"per round min {r[0]:.2f} / median {statistics.median(r):.2f} / max {r[-1]:.2f}"

    lines = [
        (
            f"== One decoder layer, alpamayo_tt shapes: D={c['D']}, N/K={c['N']}/{c['K']}, "
            f"H={c['H']}, F={c['F']}, T={c['T']}, S={seq_len}, fp32; CPU threads: XLA "
            f"{jax.local_devices()[0].client.platform}:{c['threads']} cores, torch {c['torch_threads']}; "
            f"{rounds} interleaved rounds x {block - 1} kept calls; kv_chunk {c['kv_chunk']}"
        ),
        "max-abs vs HF eager: " + ", ".join(f"{k} {v:.2e}" for k, v in err.items()),
        format_table(["variant", "median ms", "min ms", "n"], rows),
        "",
        (
            f"golden (jit, exact) vs HF eager: {ratio:.2f}x faster "
            f"(target >= 2x: {'met' if ratio >= 2 else 'MISSED'}); vs HF sdpa: "
            f"{med['hf sdpa'] / med['jax exact']:.2f}x; with S traced: "
            f"{med['hf eager'] / med['jax exact, traced S']:.2f}x"
        ),
        f"  exact vs HF eager {spread('hf eager', 'jax exact')}",
        f"  exact vs HF sdpa {spread('hf sdpa', 'jax exact')}",
        (
            f"  context: {flops / 1e9:.2f} GFLOP per layer; golden "
            f"{flops / med['jax exact'] / 1e9:.0f} GFLOP/s, HF {flops / med['hf eager'] / 1e9:.0f} GFLOP/s, "
            f"XLA fp32 GEMM peak here {peak / 1e9:.0f} GFLOP/s (2048^3): at equal FLOPs the ratio is "
            f"bounded by peak / HF = {peak * med['hf eager'] / flops:.2f}x"
        ),
        (
            f"vmap over {batch} trajectories sharing one cache vs {batch} sequential calls: "
            f"{vmap_ratio:.3f}x throughput (target >= 1x: {'met' if vmap_ratio >= 1 else 'MISSED'}); "
            f"per-trajectory cache copy in the vmapped jaxpr: {'YES' if m['cache_copies'] else 'none'}"
        ),
        f"  vmap vs sequential {spread(f'jax {batch} sequential', f'jax vmap x{batch}')}",
    ]
    return "\n".join(lines)


def layer_flops(cfg: ExpertConfig, seq_len: int) -> float:
    """Matmul FLOPs of one layer: projections, MLP, and QK^T + PV over S + T keys."""
    T, D, N, K, H, F = cfg.num_tokens, cfg.hidden, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.ffn
    weights = D * (N + 2 * K) * H + N * H * D + 3 * D * F
    return 2.0 * T * weights + 4.0 * T * (seq_len + T) * N * H


def _sgemm_peak(n: int = 2048, reps: int = 7) -> float:
    """FLOP/s of a jitted n^3 fp32 matmul (HIGHEST precision), best of ``reps`` (a capability)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda a: jnp.dot(a, a, precision=jax.lax.Precision.HIGHEST))
    return 2.0 * n**3 / time_repeats({"sgemm": lambda: f(a)}, reps=reps)["sgemm"].min_s


def _one_layer_params(layer, cfg: ExpertConfig):
    """An ``ExpertParams`` holding one layer (the export wants the full schema)."""
    import dataclasses

    from jaxref.weights import init_params

    base = init_params(jax.random.key(0), cfg)
    return dataclasses.replace(base, layers=jax.tree.map(lambda a: a[None], layer))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.bench_expert", description=__doc__.split("\n")[0],
                                 epilog="example: python -m experiments.bench_expert --seq-len 1024 --rounds 3")
    ap.add_argument("--seq-len", type=positive_int, default=4700)
    ap.add_argument("--rounds", type=positive_int, default=7, help="interleaved rounds (after one warm-up round)")
    ap.add_argument("--block", type=positive_int, default=3, help="consecutive calls per variant per round (first not kept)")
    ap.add_argument("--batch", type=positive_int, default=8)
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input is ``error: ...``, status 2."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(args: argparse.Namespace) -> None:
    try:
        ExpertConfig.alpamayo_tt().check_seq_len(args.seq_len)
    except ValueError as e:
        raise ValueError(f"--seq-len: {e}") from None
    if args.block < 2:
        raise ValueError(f"--block={args.block}: expected >= 2 (the first call of each block is not kept)")
    print(run(seq_len=args.seq_len, rounds=args.rounds, block=args.block, batch=args.batch), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
