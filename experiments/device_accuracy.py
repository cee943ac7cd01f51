"""Golden-side reproduction of the accuracy table of ``seeds/EXPERT_NOTES.md``.

How close does the device-precision emulation (``Precision.device``: bfp8 or bf16 weights, bf16
activations / cache, bfp4 mask, fp32 accumulation) come to the fp32 golden, at ``alpamayo_tt``
shapes with random weights, and how does that compare with what the notes measured on the chip?

Rows (each a tt-metal ``comp_pcc`` against the fp32 golden on the same inputs):

* one decoder layer (layers 0, L/2 - 1, L - 1), fed the fp32 golden's input of that layer, as the
  notes' layer tests feed the golden dump (device: input uploaded as bf16, ``tail_slot`` attention
  over the Smax-row cache with the bfp4 mask; golden: fp32, ``exact`` attention over S rows);
* the full stack: final-normed hidden and the velocity (action_out_proj on the host in fp32);
  ``Setup.layer_at`` is the stack's layer source (``jaxref.expert.expert_stack``): weights are
  generated per layer from a key *inside* the ``lax.scan`` and rounded there, so only one layer's
  weights exist at a time;
* action_in_proj over the 10 Euler steps, host fp32 with bf16-rounded vs exact Fourier frequencies,
  against a bf16 reference model (HF ``dtype=bfloat16`` semantics, rounded frequencies) as in the notes.

All weights and VLM cache rows are bf16-valued (as in a bf16 checkpoint / a bf16 VLM cache), so the
fp32 golden, the bf16-weight and the bfp8-weight policies see exactly the same values and differ only
in where they round.

The ttnn graph itself (``device/graph.py``) is compared with the golden by ``python -m device.parity``
(on a chip, or ``--backend emulation``).

Run: ``python -m experiments.device_accuracy`` (about 5-10 min on 2 CPU cores, < 2 GB of memory);
``--num-layers 4`` for a quick look.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.action import action_in_proj, action_out_proj
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, expert_rope, expert_stack
from jaxref.layers import decoder_layer
from jaxref.numerics import compare, round_bf16
from jaxref.options import ExpertOptions
from jaxref.precision import Precision
from jaxref.validation import nonnegative_int, positive_int
from jaxref.weights import init_cache_layer, init_layer_params, init_params

FP32 = Precision.fp32()
# Measured on the chip (seeds/EXPERT_NOTES.md, "Accuracy"): PCC vs the torch fp32 layer oracle, bfp8 / bf16.
NOTES_LAYER_PCC = {0: (0.99993, 0.99994), 31: (0.999997, 0.999997), 63: (0.999998, 0.999998)}
NOTES_ACTION_IN = {"bf16 freqs": "PCC 0.999995, max|d| 9.0e-3", "exact freqs": "PCC 0.99953, max|d| 6.9e-2"}


@dataclasses.dataclass(frozen=True)
class Setup:
    """Random model at ``cfg`` shapes: everything derives from ``seed`` (layer i from fold_in(i))."""

    cfg: ExpertConfig
    seq_len: int
    seed: int = 0
    fill: float = 7.0  # garbage in cache rows [S, Smax - T), as in the notes' tests

    def keys(self):
        return jax.random.split(jax.random.PRNGKey(self.seed), 4)  # layers, cache, projections, inputs

    def layer_at(self, i):
        """Layer i's bf16-valued weights and bf16-valued VLM cache rows [K, Smax, H] (generated, not stored)."""
        k_layers, k_cache, _, _ = self.keys()
        params = jax.tree.map(round_bf16, init_layer_params(jax.random.fold_in(k_layers, i), self.cfg))
        ck, cv = init_cache_layer(jax.random.fold_in(k_cache, i), self.cfg, self.seq_len,
                                  max_seq_len=self.cfg.max_seq_len, fill=self.fill)
        return params, round_bf16(ck), round_bf16(cv)

    @functools.cached_property
    def projections(self):
        """bf16-valued (action_in, final_norm, action_out) params (init at L = 1 keeps it cheap)."""
        _, _, k_proj, _ = self.keys()
        p = init_params(k_proj, dataclasses.replace(self.cfg, num_layers=1))
        return jax.tree.map(round_bf16, (p.action_in, p.final_norm, p.action_out))


def attention_for(policy: Precision) -> str:
    """The golden attends exactly over S rows; device policies use the device's tail-slot form + mask."""
    return "exact" if policy.is_exact else "tail_slot"


def make_layer_fn(setup: Setup, policy: Precision):
    """jit: (layer index, golden fp32 input [T, D]) -> that layer's output under ``policy``."""
    cfg = setup.cfg

    @jax.jit
    def f(i, x):
        params, ck, cv = setup.layer_at(i)
        rope = expert_rope(setup.seq_len, 0, cfg=cfg, precision=policy)
        return decoder_layer(params, policy.act(x), (ck, cv), setup.seq_len, rope, cfg=cfg,
                             options=ExpertOptions(attention=attention_for(policy), precision=policy))

    return f


def make_stack_fn(setup: Setup, policy: Precision):
    """jit: emb [T, D] -> (final-normed hidden [T, D], velocity [T, A], per-layer outputs [L, T, D])."""
    cfg = setup.cfg
    _, final_norm, action_out = setup.projections

    @jax.jit
    def f(emb):
        out, hidden = expert_stack(setup.layer_at, final_norm, emb, CacheContext.create(setup.seq_len), cfg=cfg,
                                   options=ExpertOptions(attention=attention_for(policy), precision=policy),
                                   return_hidden=True)
        return out, action_out_proj(action_out, out, precision=FP32), hidden

    return f


def action_in_rows(setup: Setup) -> list[tuple[str, str, object]]:
    """action_in_proj over 10 Euler steps: host fp32 (bf16 / exact freqs) vs the bf16 reference model."""
    cfg = setup.cfg
    _, _, _, k_in = setup.keys()
    action_in = setup.projections[0]
    steps = cfg.num_steps
    x = jax.random.normal(k_in, (steps, cfg.num_tokens, cfg.action_dim), jnp.float32)
    ts = jnp.arange(steps, dtype=jnp.float32) / steps

    def emb(acfg, policy):
        f = jax.jit(jax.vmap(lambda xs, t: action_in_proj(action_in, xs, t, cfg=acfg, precision=policy)))
        return np.asarray(f(x, ts))

    rounded = dataclasses.replace(cfg.action_in, bf16_freqs=True)
    exact = dataclasses.replace(cfg.action_in, bf16_freqs=False)
    golden = emb(rounded, Precision.hf_bf16())
    return [("action_in_proj, host fp32, bf16 freqs", NOTES_ACTION_IN["bf16 freqs"],
             compare(golden, emb(rounded, FP32))),
            ("action_in_proj, host fp32, exact freqs", NOTES_ACTION_IN["exact freqs"],
             compare(golden, emb(exact, FP32)))]


def rel_from_pcc(p: float) -> float:
    """Relative (Frobenius) error implied by a PCC when the error is uncorrelated with a zero-mean
    signal: 1 - PCC ~ rel^2 / 2. (The table's own rows check the approximation.)"""
    return float(np.sqrt(2.0 * max(1.0 - p, 0.0)))


def print_reading(rows, layer_ids, num_layers: int, depth) -> None:
    """Error budget of layer 0, the device error the emulation does not model, and depth effects."""
    by = {q: c for q, _, c in rows}
    i0 = layer_ids[0]
    e8, e16 = by[f"layer {i0}, device bfp8 w"], by[f"layer {i0}, device bf16 w"]
    ew, ea = by[f"layer {i0}, bfp8 weights only"], by[f"layer {i0}, bf16 act+gammas only"]
    print("\nReading the table (layer 0, relative Frobenius errors):")
    print(f"  emulated: bfp8 weights alone {ew.rel_fro:.2e}, bf16 activations/gammas alone {ea.rel_fro:.2e}, "
          f"together {e8.rel_fro:.2e} (independent sources add in quadrature: "
          f"{np.hypot(ew.rel_fro, ea.rel_fro):.2e}); PCC check: sqrt(2(1-PCC)) = {rel_from_pcc(e8.pcc):.2e}.")
    if num_layers == 64:
        d8, d16 = (rel_from_pcc(p) for p in NOTES_LAYER_PCC[0])
        x8, x16 = (float(np.sqrt(max(d * d - e * e, 0.0))) for d, e in ((d8, e8.rel_fro), (d16, e16.rel_fro)))
        print(f"  device (notes): PCC {NOTES_LAYER_PCC[0][0]} / {NOTES_LAYER_PCC[0][1]} -> rel {d8:.2e} / {d16:.2e}; "
              f"error the emulation does not model: {x8:.2e} (bfp8 w) / {x16:.2e} (bf16 w).")
    stats = ", ".join(f"layer {i}: input RMS {r:.2f}, ||update||/||input|| {u:.3f}, floor PCC "
                      f"{by[f'layer {i}, bf16 residual storage only (floor)'].pcc:.7f}"
                      for i, (r, u) in depth.items())
    print(f"  depth (golden): {stats}.")
    print("""  Why the device is worse than the emulation at layer 0, and why bfp8 ~ bf16 there:
   * the emulation rounds only where the device *stores* a tensor; inside ops the device loses more:
     matmul math fidelity (LoFi/HiFi2 multiply only the top mantissa bits of each operand), the SDPA
     kernel's bf16 score/probability tiles and exp approximation, rms_norm's bf16 intermediates;
     an extra independent error of the size printed above swamps the bfp8-vs-bf16 weight
     difference (quadrature), so the notes see none; here, without it, bfp8 weights dominate.
   * the golden follows HF bf16 semantics and rounds *twice* inside rms_norm (after the
     normalisation and after gamma), RoPE (each product and the sum) and SwiGLU (gate, then silu),
     where the device's fused ops round once: slightly pessimistic, not a source of the gap.
   * deep layers: a layer's PCC can hardly beat its "floor" row (the residual stream itself only
     stored in bf16). The notes' 0.999997-0.999998 at layers 31 / 63 is at such a floor: in the trained
     model each layer's update is small next to a large residual. In this random model the updates
     stay a sizeable fraction of the residual (depth line above), so the layer's own rounding errors
     show and the emulated deep-layer PCC sits below the notes' - a property of random weights, not
     of the emulation.
   * random weights / cache are not the checkpoint: attention over N(0,1) keys is nearly uniform
     (its output is tiny, so cache precision - bf16 vs bfp8 - barely matters here), and a random
     action_in_proj trunk weights the high Fourier frequencies as much as the low ones, so rounding
     59.948 -> 60.0 (and 35.938 -> 36.0) moves its output far more than in the trained model, whose
     trunk has learned what to ignore; the bf16-freq row's residual is the reference's bf16
     arithmetic, as in the notes.
   * the full stack has no device number in the notes (end-to-end parity there is in trajectory
     metres); errors compound through the 64 layers, bfp8 weights about doubling the bf16 error.""")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-layers", type=positive_int, default=None, help="override the preset's 64 layers")
    ap.add_argument("--seq-len", type=positive_int, default=4592, help="S, valid VLM cache rows (the notes: 4592)")
    ap.add_argument("--seed", type=nonnegative_int, default=0)
    args = ap.parse_args(argv)
    cfg = ExpertConfig.alpamayo_tt()
    if args.num_layers is not None:
        cfg = dataclasses.replace(cfg, num_layers=args.num_layers)
    try:
        cfg.check_seq_len(args.seq_len)
    except ValueError as e:
        ap.error(f"--seq-len: {e}")
    setup = Setup(cfg=cfg, seq_len=args.seq_len, seed=args.seed)
    L = cfg.num_layers
    t_start = time.perf_counter()

    policies = {
        "device bfp8 w": Precision.device(weights="bfp8"),
        "device bf16 w": Precision.device(weights="bf16"),
        "device bfp8 w, bfp8 cache": Precision.device(weights="bfp8", cache="bfp8"),
    }
    # Decomposition (single layers only): one rounding source at a time.
    parts = {
        "bfp8 weights only": Precision(name="bfp8-weights-only", weights="bfp8"),
        "bf16 act+gammas only": Precision(name="bf16-act-only", norm_weights="bf16", activations="bf16"),
    }

    action_in, _, _ = setup.projections
    x_t = jax.random.normal(setup.keys()[3], (cfg.num_tokens, cfg.action_dim), jnp.float32)
    emb = action_in_proj(action_in, x_t, 0.3, cfg=cfg.action_in)  # host fp32, bf16 freqs (the port)

    timings = {}
    t0 = time.perf_counter()
    g_out, g_vel, g_hidden = make_stack_fn(setup, FP32)(emb)
    g_out, g_vel, g_hidden = np.asarray(g_out), np.asarray(g_vel), np.asarray(g_hidden)
    timings["fp32 golden stack"] = time.perf_counter() - t0
    layer_ids = sorted({0, L // 2 - 1, L - 1})
    layer_in = {i: (np.asarray(emb) if i == 0 else g_hidden[i - 1]) for i in layer_ids}

    rows = []  # (quantity, notes, Comparison)
    t0 = time.perf_counter()
    golden_layer = make_layer_fn(setup, FP32)
    g_layer = {i: np.asarray(golden_layer(i, layer_in[i])) for i in layer_ids}
    depth = {}  # layer -> (RMS of its input, ||update|| / ||input||)
    for i in layer_ids:
        x_in, upd = layer_in[i], g_layer[i] - layer_in[i]
        depth[i] = (float(np.sqrt(np.mean(x_in**2))), float(np.linalg.norm(upd) / np.linalg.norm(x_in)))
        # The floor of any bf16 residual stream: only the layer's input and output are stored in bf16.
        floor = np.asarray(round_bf16(round_bf16(x_in) + upd))
        rows.append((f"layer {i}, bf16 residual storage only (floor)", "-", compare(g_layer[i], floor)))
    for name, pol in {**policies, **parts}.items():
        f = make_layer_fn(setup, pol)
        for i in layer_ids:
            notes = NOTES_LAYER_PCC.get(i) if L == 64 else None
            ref = ("-" if notes is None or not name.startswith("device") or "cache" in name
                   else f"PCC {notes[0 if 'bfp8 w' in name else 1]}")
            rows.append((f"layer {i}, {name}", ref, compare(g_layer[i], np.asarray(f(i, layer_in[i])))))
    timings["single layers"] = time.perf_counter() - t0

    for name, pol in policies.items():
        t0 = time.perf_counter()
        out, vel, hidden = jax.block_until_ready(make_stack_fn(setup, pol)(emb))
        timings[f"stack, {name}"] = time.perf_counter() - t0
        rows.append((f"{L}-layer final hidden, {name}", "-", compare(g_out, np.asarray(out))))
        rows.append((f"{L}-layer velocity, {name}", "-", compare(g_vel, np.asarray(vel))))
        # Where along the stack the divergence grows: PCC of layer outputs at a few depths.
        for i in sorted({L // 4 - 1, L // 2 - 1, L - 1} - {-1}):
            rows.append((f"  stack hidden after layer {i}, {name}", "-", compare(g_hidden[i], np.asarray(hidden[i]))))

    t0 = time.perf_counter()
    rows += action_in_rows(setup)
    timings["action_in_proj"] = time.perf_counter() - t0

    print(f"\nDevice-precision emulation vs fp32 golden: alpamayo_tt shapes, L={L}, S={args.seq_len}, "
          f"Smax={cfg.max_seq_len}, random bf16-valued weights and cache (seed {args.seed})\n")
    w = max(len(r[0]) for r in rows) + 2
    print(f"{'quantity':<{w}}{'PCC':>11}{'max|d|':>11}{'mean|d|':>11}{'rel-Fro':>11}   notes (device, measured)")
    for q, ref, c in rows:
        print(f"{q:<{w}}{c.pcc:>11.7f}{c.max_abs:>11.2e}{c.mean_abs:>11.2e}{c.rel_fro:>11.2e}   {ref}")
    print_reading(rows, layer_ids, L, depth)
    print("\nruntime (s): " + ", ".join(f"{k} {v:.1f}" for k, v in timings.items())
          + f"; total {time.perf_counter() - t_start:.1f}")


if __name__ == "__main__":
    main()
