"""The main job: the expert golden at ``alpamayo_tt`` shapes and its parity with HF transformers.

``python -m experiments.report`` (no arguments needed) prints

1. the expert section: one trajectory sampled with the 10-step Euler sampler by the fp32 golden
   at ``alpamayo_tt`` shapes (64 layers, D 1536, S = 4600 random VLM cache rows, random weights),
   per-step velocity stats and the final action / trajectory summary;
2. the HF parity table: per-layer PCC / max-abs error of the golden against HF transformers
   (``Qwen3VLTextModel``, fp32, eager attention, 4-D additive mask, the VLM cache in a
   ``DynamicCache``) for ``tiny`` and for a 2-layer model at ``alpamayo_tt`` widths with S = 4600,
   in both attention formulations (exact, device tail-slot);
3. the Blackhole cost-model section: DRAM floor / predicted / measured time per op class of the
   port's 32.5 ms step (``costmodel``; a prediction, not a device measurement).

Memory: 64 layers of fp32 weights are ~9.7 GB and the fp32 cache another ~2.4 GB, too much for a
shared 24 GB machine. By default (``--weights bf16``) the random weights and cache are rounded to
bf16 (the dtype of the real checkpoint and of a bf16 VLM's cache) and held as 16-bit patterns
(~6 GB); layer i is unpacked to float32 inside the layer scan (``jaxref.expert.run_layers``), so
every operation is float32 and one layer exists in float32 at a time. ``--weights fp32`` holds
float32 ``ExpertParams`` / ``KVCache`` (~12 GB) and calls ``jaxref.expert.velocity``;
``--weights streamed`` holds no layer at all and regenerates each layer from a per-layer key on
every Euler step (slow: ~0.4 s of random numbers per layer and step on 2 cores).

The section functions (``expert_section``, ``hf_parity_table``) are independent so that other
parts of the project can add their own sections to ``main``. The HF transformers oracle glue
(``hf_*``) lives in ``experiments.hf_oracle``; it is imported only by ``hf_parity_rows``, so the
expert section runs without torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.action import UnicycleConfig, action_in_proj, action_out_proj, action_to_traj, euler_sample
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope, expert_stack, run_layers, velocity
from jaxref.layers import rms_norm
from jaxref.numerics import pcc
from jaxref.options import ExpertOptions
from jaxref.weights import (
    init_cache,
    init_cache_layer,
    init_layer_params,
    init_params,
)


# ---- plain-text tables ---------------------------------------------------------------------
def format_table(header: list[str], rows: list[list[object]]) -> str:
    """Left-aligned plain-text table; floats formatted by the caller."""
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
    return "\n".join([line(cells[0]), line(["-" * w for w in widths])] + [line(r) for r in cells[1:]])


# ---- section 1: the expert golden at alpamayo_tt shapes ------------------------------------
WEIGHT_MODES = {
    "bf16": "random weights and cache held as bf16 bit patterns (the dtype of the real checkpoint and of a "
    "bf16 VLM cache), unpacked to float32 one layer at a time inside the layer scan; all math float32",
    "fp32": "random weights and cache held in float32 (64 alpamayo_tt layers: ~12 GB)",
    "streamed": "each layer's random weights and cache rows regenerated inside the layer scan from a "
    "per-layer key on every Euler step (one layer in memory at a time; slow)",
}


def _to_u16(a):
    return jax.lax.bitcast_convert_type(a.astype(jnp.bfloat16), jnp.uint16)


def _from_u16(a):
    return jax.lax.bitcast_convert_type(a, jnp.bfloat16).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len"))
def _init_packed_layers(k_layers, k_cache, *, cfg: ExpertConfig, seq_len: int):
    """Per-layer random weights and cache rows, rounded to bf16 and stored as uint16 bit patterns.

    uint16, not bf16: XLA's CPU backend upcasts bf16 dynamic-slices by converting the *whole*
    stacked operand to float32 up front, which would double the memory this mode exists to save.
    """

    def one(keys):
        p = init_layer_params(keys[0], cfg)
        return jax.tree.map(_to_u16, (p, init_cache_layer(keys[1], cfg, seq_len)))

    keys = jnp.stack(
        [jax.random.split(k_layers, cfg.num_layers), jax.random.split(k_cache, cfg.num_layers)], 1
    )
    return jax.lax.map(one, keys)


def _velocity_from_layer_source(small, layer_at, x_t, t, seq_len: int, rope, cfg: ExpertConfig):
    """``jaxref.expert.velocity`` with layer i (weights + cache rows) supplied by ``layer_at(i)``."""
    emb = action_in_proj(small.action_in, x_t, t, cfg=cfg.action_in)
    h = run_layers(layer_at, emb, seq_len, rope, cfg=cfg)
    return action_out_proj(small.action_out, rms_norm(h, small.final_norm, eps=cfg.rms_eps))


def _random_model(key, cfg: ExpertConfig, seq_len: int, rope_delta: int, weights: str):
    """(state, velocity(state, x_t, t)): ``state`` is passed to jit as an argument (never baked in)."""
    k_p, k_layers, k_cache = jax.random.split(key, 3)
    if weights == "fp32":
        state = (init_params(k_p, cfg), init_cache(k_cache, cfg, seq_len, rope_delta=rope_delta))
        return state, lambda st, x_t, t: velocity(st[0], x_t, t, st[1], cfg=cfg)

    # The small parts (action projections, final norm) are ordinary float32 params.
    small = init_params(k_p, dataclasses.replace(cfg, num_layers=1))
    small = dataclasses.replace(small, layers=None)
    rope = expert_rope(seq_len, rope_delta, cfg=cfg)
    if weights == "bf16":
        state = (small, _init_packed_layers(k_layers, k_cache, cfg=cfg, seq_len=seq_len))

        def vfn(st, x_t, t):
            def layer_at(i):
                p, (ck, cv) = jax.tree.map(lambda a: _from_u16(a[i]), st[1])
                return p, ck, cv

            return _velocity_from_layer_source(st[0], layer_at, x_t, t, seq_len, rope, cfg)

        return state, vfn

    def layer_at(i):  # streamed: layer i regenerated from fold_in(key, i)
        return (
            init_layer_params(jax.random.fold_in(k_layers, i), cfg),
            *init_cache_layer(jax.random.fold_in(k_cache, i), cfg, seq_len),
        )

    return small, lambda st, x_t, t: _velocity_from_layer_source(st, layer_at, x_t, t, seq_len, rope, cfg)


def expert_section(
    *,
    preset: str = "alpamayo_tt",
    num_layers: int | None = None,
    seq_len: int = 4600,
    rope_delta: int = 0,
    seed: int = 0,
    weights: str = "bf16",
    v0: float = 10.0,
) -> str:
    """Sample one trajectory with the fp32 golden; return the section's text."""
    cfg = ExpertConfig.preset(preset)
    if num_layers is not None:
        cfg = dataclasses.replace(cfg, num_layers=num_layers)
    cfg.check_seq_len(seq_len)
    if weights not in WEIGHT_MODES:
        raise ValueError(f"weights={weights!r} unknown; expected one of {sorted(WEIGHT_MODES)}")
    k_model, k_noise = jax.random.split(jax.random.key(seed))
    t0 = time.perf_counter()
    state, vfn = _random_model(k_model, cfg, seq_len, rope_delta, weights)
    state = jax.block_until_ready(state)
    t_init = time.perf_counter() - t0
    run = jax.jit(lambda st, x0: euler_sample(lambda x, t: vfn(st, x, t), x0, num_steps=cfg.num_steps))
    x0 = jax.random.normal(k_noise, (cfg.num_tokens, cfg.action_dim), jnp.float32)
    t0 = time.perf_counter()
    action, vs = jax.block_until_ready(run(state, x0))
    t_run = time.perf_counter() - t0
    nbytes = sum(a.nbytes for a in jax.tree.leaves(state))

    lines = [
        (
            f"== Expert golden (fp32 math): preset {preset}, L={cfg.num_layers}, D={cfg.hidden}, "
            f"N/K={cfg.num_heads}/{cfg.num_kv_heads}, H={cfg.head_dim}, F={cfg.ffn}, T={cfg.num_tokens}, "
            f"S={seq_len}, rope_delta={rope_delta}, seed={seed}, attention=exact"
        ),
        f"weights={weights}: {WEIGHT_MODES[weights]}; {nbytes / 2**30:.2f} GiB held",
        f"init {t_init:.1f} s; {cfg.num_steps}-step Euler sample (compile + run) {t_run:.1f} s",
        "",
    ]
    vs_np = np.asarray(vs)
    ts = np.linspace(0.0, 1.0, cfg.num_steps + 1)
    rows = [
        [
            i,
            f"{ts[i]:.1f}",
            f"{v.mean():+.4f}",
            f"{v.std():.4f}",
            f"{np.abs(v).max():.4f}",
            f"{v[:, 0].mean():+.4f}",
            f"{v[:, 1].mean():+.4f}",
        ]
        for i, v in enumerate(vs_np)
    ]
    lines.append(format_table(["step", "t", "v mean", "v std", "v max|.|", "accel mean", "curv mean"], rows))
    a = np.asarray(action)
    lines += [
        "",
        "final action (normalized): "
        + "; ".join(
            f"{name} mean {a[:, c].mean():+.4f} std {a[:, c].std():.4f} "
            f"range [{a[:, c].min():+.3f}, {a[:, c].max():+.3f}]"
            for c, name in enumerate(("accel", "curvature"))
        ),
    ]
    space = UnicycleConfig.alpamayo_r1()
    xy, yaw = action_to_traj(action, v0, space=space)
    xy = np.asarray(xy)
    lines.append(
        f"unicycle trajectory (v0 = {v0} m/s; R1 normalization as quoted by a third-party port): "
        f"after {cfg.num_tokens * space.dt:.1f} s at x={xy[-1, 0]:.2f} m, y={xy[-1, 1]:.2f} m, "
        f"yaw={float(yaw[-1]):+.3f} rad"
    )
    return "\n".join(lines)


# ---- section 2: HF parity ------------------------------------------------------------------
def hf_parity_rows(
    cfg: ExpertConfig, *, seq_len: int, seed: int = 0, rope_delta: int = 7, label: str = ""
) -> list[list[str]]:
    """Per-layer and final-norm PCC / max-abs of the golden (both formulations) vs HF, fp32."""
    from experiments.hf_oracle import hf_expert_outputs, hf_text_model

    k_p, k_c, k_x = jax.random.split(jax.random.key(seed), 3)
    params = init_params(k_p, cfg)
    smax = seq_len + cfg.num_tokens + 32  # room for the tail slot, plus garbage rows it must hide
    cache = init_cache(k_c, cfg, seq_len, max_seq_len=smax, rope_delta=rope_delta, fill=7.0)
    x = jax.random.normal(k_x, (cfg.num_tokens, cfg.hidden), jnp.float32)
    hf_layers, hf_final = hf_expert_outputs(hf_text_model(params, cfg), x, cache, num_tokens=cfg.num_tokens)
    rows = []
    for mode in ("exact", "tail_slot"):
        stack = jax.jit(
            lambda p, x, c, mode=mode: expert_stack(
                p.layers, p.final_norm, x, c, cfg=cfg, options=ExpertOptions(attention=mode), return_hidden=True
            )
        )
        final, hidden = stack(params, x, cache)
        outs = [(f"layer {i}", np.asarray(hidden[i]), hf_layers[i]) for i in range(cfg.num_layers)]
        outs.append(("final norm", np.asarray(final), hf_final))
        for name, ours, ref in outs:
            rows.append(
                [
                    label,
                    mode,
                    name,
                    f"{pcc(ref, ours):.9f}",
                    f"{1.0 - pcc(ref, ours):.1e}",
                    f"{np.abs(ours - ref).max():.2e}",
                    f"{np.abs(ref).max():.2f}",
                ]
            )
    return rows


def hf_parity_table(*, seq_len: int = 4600, seed: int = 0) -> str:
    """The parity table for ``tiny`` (S = 100) and a 2-layer ``alpamayo_tt``-width model (S = ``seq_len``)."""
    rows = hf_parity_rows(ExpertConfig.tiny(), seq_len=100, seed=seed, label="tiny S=100")
    rows += hf_parity_rows(
        ExpertConfig.alpamayo_tt(num_layers=2),
        seq_len=seq_len,
        seed=seed,
        label=f"alpamayo_tt 2-layer S={seq_len}",
    )
    head = (
        "== HF parity: golden vs transformers Qwen3VLTextModel (fp32, eager, 4-D additive mask, "
        "DynamicCache); targets PCC >= 0.999999, max-abs <= 1e-4"
    )
    return (
        head
        + "\n"
        + format_table(["model", "attention", "output", "PCC", "1 - PCC", "max-abs err", "max |HF|"], rows)
    )


def costmodel_section() -> str:
    """Where the port's 32.5 ms/step go, per the calibrated Blackhole roofline (predicted, not measured).

    The DRAM floor / predicted / measured split per op class at the port's setting
    (``costmodel.roofline.gap_table``); ``python -m experiments.costmodel_fit`` prints the full fit.
    """
    from costmodel.blackhole import BlackholeConfig
    from costmodel.fitted import load_fitted
    from costmodel.hardware import blackhole_p150a
    from costmodel.roofline import format_gap_table, gap_table, measured_op_times

    cfg = ExpertConfig.alpamayo_tt()
    table = gap_table(blackhole_p150a(), load_fitted(), BlackholeConfig.port(cfg), cfg=cfg,
                      measured_ops=measured_op_times())
    return ("== Blackhole cost model at the port's setting (p150a, S 4700, Smax 8192, bf16 cache, bfp8 weights)\n"
            "   floor = weights + KV at peak DRAM bandwidth; predicted = calibrated model; measured = the notes\n"
            + format_gap_table(table))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="alpamayo_tt", choices=["alpamayo_tt", "alpamayo_r1", "tiny"])
    ap.add_argument("--layers", type=int, default=None, help="override the preset's layer count")
    ap.add_argument("--seq-len", type=int, default=4600, help="valid VLM cache rows S")
    ap.add_argument(
        "--weights", default="bf16", choices=sorted(WEIGHT_MODES), help="how the random model is held"
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-hf", action="store_true", help="omit the HF parity table")
    ap.add_argument("--skip-costmodel", action="store_true", help="omit the Blackhole cost-model section")
    args = ap.parse_args(argv)
    print(
        expert_section(
            preset=args.preset,
            num_layers=args.layers,
            seq_len=args.seq_len,
            seed=args.seed,
            weights=args.weights,
        ),
        flush=True,
    )
    if not args.skip_hf:
        print()
        print(hf_parity_table(seq_len=args.seq_len, seed=args.seed), flush=True)
    if not args.skip_costmodel:
        print()
        print(costmodel_section(), flush=True)


if __name__ == "__main__":
    main()
