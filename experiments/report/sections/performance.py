"""Report section 6, performance of the references themselves (timings of this run, this machine).

* one decoder layer at ``alpamayo_tt`` shapes: the jitted golden vs HF transformers with eager and
  with SDPA attention, side by side (``experiments.bench_expert``);
* a full 10-step Euler sample of the 64-layer golden (``experiments.report.sections.golden_sample``);
* flash vs dense causal prefill: compiled memory and time (``experiments.bench_flash``);
* the vmapped Blackhole cost-model sweep: configurations per second (``costmodel_throughput`` here).

Wall-clock numbers on a shared CPU are noisy; the layer comparison interleaves its variants in
rounds and reports medians, with the per-round spread of the ratios.
"""

from __future__ import annotations

import dataclasses
import pathlib

import jax.numpy as jnp
import numpy as np

from costmodel.overrides import apply_overrides
from experiments import bench_expert, bench_flash
from experiments.report import render
from experiments.report.progress import note
from experiments.report.render import SectionResult, md_table
from experiments.report.sections.golden_sample import run_sample
from experiments.timing import time_call, time_repeats
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()


def shapes(quick: bool) -> dict:
    """Problem sizes: the port's S for the layer and the sample, flash up to S = 8192 (dense fits)."""
    if quick:
        return {"layer": {"seq_len": 512, "rounds": 1, "block": 2, "batch": 2},
                "sample": {"cfg": ExpertConfig.alpamayo_tt(num_layers=2), "seq_len": 512},
                "flash": {"sizes": [512, 1024], "tile": 128, "q_block": 128, "reps": 1},
                "sweep": {"n": 4096, "reps": 2, "single": 10}}
    return {"layer": {"seq_len": 4700, "rounds": 2, "block": 3, "batch": 8},
            "sample": {"cfg": ExpertConfig.alpamayo_tt(), "seq_len": 4600},
            "flash": {"sizes": [2048, 4096, 8192], "tile": 512, "q_block": 512, "reps": 2},
            "sweep": {"n": 65536, "reps": 3, "single": 50}}


def random_batch(n: int, rng: np.random.Generator, *, kv_dtype: str = "bf16"):
    """A ``BlackholeConfig`` whose leaves are [n] arrays of random valid settings: (in0_block_w, per_core_N)
    of the five matmuls drawn from their valid sets, k_chunk in {128, 256, 512}, Smax in {5120, 6144, 8192}."""
    from costmodel.blackhole import MATMULS, BlackholeConfig
    from costmodel.blackhole.knob_search import valid_matmul_configs
    from costmodel.hardware import blackhole_p150a

    hw = blackhole_p150a()
    bc = BlackholeConfig.for_expert(CFG, cache=kv_dtype)
    changes = {}
    for name in MATMULS:
        valid = np.asarray(valid_matmul_configs(name, hw, bc, cfg=CFG), np.float32)
        pick = valid[rng.integers(0, len(valid), n)]
        changes[name] = dataclasses.replace(bc.port.matmuls[name], in0_block_w=jnp.asarray(pick[:, 0]),
                                            per_core_N=jnp.asarray(pick[:, 1]), per_core_M=jnp.full(n, 2.0))
    k = np.asarray([128.0, 256.0, 512.0], np.float32)[rng.integers(0, 3, n)]
    smax = np.asarray([5120.0, 6144.0, 8192.0], np.float32)[rng.integers(0, 3, n)]
    return bc.replace(smax=jnp.asarray(smax), seq_len=jnp.full(n, 4700.0), matmuls=bc.port.matmuls.replace(**changes),
                      k_chunk=jnp.asarray(k), q_chunk=jnp.full(n, 32.0), cores_per_head=jnp.full(n, 16.0))


def costmodel_throughput(*, n: int, reps: int, single: int, overrides: dict[str, float]) -> dict:
    """Configurations per second of the vmapped cost model (one 64-layer step per configuration, exact
    model, ``random_batch`` knobs) vs the validating per-config evaluator (one jitted call per config).

    All calls into the cost model live here.
    """
    from costmodel.blackhole import BlackholeConfig, evaluate, load_fitted, sweep_step_us
    from costmodel.hardware import blackhole_p150a

    hw, fit = apply_overrides(blackhole_p150a(), overrides), load_fitted()
    batch = random_batch(n, np.random.default_rng(0))
    sweep = lambda: sweep_step_us(hw, fit, batch, cfg=CFG)
    out, compile_s, _ = time_call(sweep)
    out = np.asarray(out)
    if out.shape != (n,) or not np.isfinite(out).all():
        raise ValueError(f"sweep returned shape {out.shape} with {int((~np.isfinite(out)).sum())} non-finite values")
    med = time_repeats({"sweep": sweep}, reps=reps, warmup=0)["sweep"].median_s
    bc = BlackholeConfig.for_expert(CFG)
    evaluate(hw, fit, bc, cfg=CFG)  # compile
    _, loop_s, _ = time_call(lambda: [evaluate(hw, fit, bc.replace(smax=float(5120 + 1024 * (i % 3))), cfg=CFG)
                                      for i in range(single)])
    per_call = loop_s / single
    return {"configs": n, "compile_s": compile_s, "median_s": med, "configs_per_s": n / med,
            "single_configs_per_s": 1.0 / per_call, "speedup": per_call * n / med,
            "step_ms_min": float(out.min()) / 1e3, "step_ms_median": float(np.median(out)) / 1e3}


def plot(out_dir: pathlib.Path, layer: dict, flash: list[dict]) -> str:
    fig, (a, b) = render.figure(2)
    names = ["jax exact", "jax tail_slot", "hf eager", "hf sdpa"]
    med = [layer["median_s"][k] * 1e3 for k in names]
    a.bar(names, med, color=["tab:blue", "tab:blue", "tab:gray", "tab:gray"])
    for i, m in enumerate(med):
        a.text(i, m, f"{m:.0f}", ha="center", va="bottom", fontsize=8)
    a.set(title=f"one decoder layer, S={layer['config']['S']} (median)", ylabel="ms per call")
    S = [r["S"] for r in flash]
    b.loglog(S, [r["dense_bytes"] / 2**20 for r in flash], "o-", color="tab:gray", label="dense")
    b.loglog(S, [r["flash_bytes"] / 2**20 for r in flash], "o-", color="tab:blue", label="flash")
    b.set(title="causal prefill, compiled buffers", xlabel="S = T", ylabel="MiB (args + out + temp)")
    b.legend()
    return render.save(fig, out_dir, "performance.png")


def markdown(layer: dict, sample: dict, flash: list[dict], sweep: dict, figure: str) -> str:
    c, med = layer["config"], layer["median_s"]
    batch = c["batch"]
    ratio = lambda num, den: med[num] / med[den]

    def spread(num: str, den: str) -> str:
        r = bench_expert.round_ratios(layer, num, den)
        return f"{r[0]:.2f} / {r[-1]:.2f}"

    rows = [[k, f"{med[k] * 1e3:.1f}", f"{layer['min_s'][k] * 1e3:.1f}", layer["n"][k],
             f"{layer['max_abs_vs_hf'].get(k, 0.0):.1e}" if k != "hf eager" else "(reference)"]
            for k in med]
    flash_rows = [[r["S"], f"{r['dense_bytes'] / 2**20:.1f}", f"{r['flash_bytes'] / 2**20:.1f}",
                   f"{r['dense_bytes'] / r['flash_bytes']:.1f}x", "-" if r["dense_s"] is None else f"{r['dense_s'][0]:.3f}",
                   f"{r['flash_s'][0]:.3f}", f"{r['noskip_s'][0] / r['flash_s'][0]:.2f}x",
                   f"{r['tiles']}/{r['tiles_noskip']}", f"{r['max_err']:.1e}"] for r in flash]
    return "\n".join([
        "Timings of this run on this machine's CPU (medians; a shared machine makes them noisy).", "",
        f"### Golden vs HF transformers: one decoder layer (D={c['D']}, T={c['T']}, S={c['S']}, fp32)", "",
        (f"{c['rounds']} interleaved rounds x {c['kept_per_round']} kept calls per variant; XLA and torch on "
        f"{c['threads']} threads. Error column: max-abs vs HF eager of what the variant computes."), "",
        md_table(["variant", "median ms", "min ms", "n", "max-abs vs HF eager"], rows), "",
        (f"Golden (exact) is **{ratio('hf eager', 'jax exact'):.2f}x** faster than HF eager (per-round min / max "
        f"{spread('hf eager', 'jax exact')}) and **{ratio('hf sdpa', 'jax exact'):.2f}x** faster than HF SDPA "
        f"({spread('hf sdpa', 'jax exact')}). vmap over {batch} trajectories sharing one cache: "
        f"{ratio(f'jax {batch} sequential', f'jax vmap x{batch}'):.2f}x the throughput of {batch} sequential calls "
        f"(per-trajectory cache copy in the jaxpr: {'YES' if layer['cache_copies'] else 'none'})."), "",
        f"### Full sample: {sample['steps']}-step Euler, {sample['layers']} layers, S={sample['seq_len']}", "",
        (f"Random bf16-valued weights and cache held as bf16 bit patterns ({sample['held_gib']:.2f} GiB), all math "
        f"fp32: generation {sample['init_s']:.1f} s, jit + sample {sample['sample_s']:.1f} s; output finite: "
        f"{'yes' if sample['finite'] else '**no**'}."), "",
        "### Flash vs dense causal prefill (K=1, G=1, H=128, float32)", "",
        ("Bytes: XLA's compiled argument + output + temp buffers. Skip: speedup of the causal tile skip over the "
        "same sweep computing wholly-future tiles under the mask."), "",
        md_table(["S", "dense MiB", "flash MiB", "dense / flash", "dense s", "flash s", "skip", "tiles",
                  "max-abs flash vs dense"], flash_rows), "",
        "### Blackhole cost-model sweep", "",
        (f"{sweep['configs']} random valid 64-layer step configurations in one jitted `vmap`: "
        f"**{sweep['configs_per_s']:.3g} configurations/s** (median of the timed runs; compile "
        f"{sweep['compile_s']:.1f} s), vs {sweep['single_configs_per_s']:.0f}/s through the validating per-config "
        f"evaluator ({sweep['speedup']:.0f}x). Predicted step over the sweep: min {sweep['step_ms_min']:.2f} ms, "
        f"median {sweep['step_ms_median']:.2f} ms."), "",
        f"![layer time per variant and flash vs dense memory]({figure})",
    ])


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult:
    """Section 6 (report contract). ``blackhole.*`` overrides apply to the cost-model sweep."""
    sz = shapes(quick)
    note(f"golden vs HF eager / SDPA, one layer, S={sz['layer']['seq_len']}")
    layer = bench_expert.measure(**sz["layer"])
    note(f"{sz['sample']['cfg'].num_layers}-layer 10-step sample, S={sz['sample']['seq_len']}")
    sample = run_sample(sz["sample"]["cfg"], seq_len=sz["sample"]["seq_len"])
    note(f"flash vs dense, S in {sz['flash']['sizes']}")
    flash = bench_flash.measure(**sz["flash"])
    note(f"cost-model sweep, {sz['sweep']['n']} configurations")
    sweep = costmodel_throughput(**sz["sweep"], overrides=overrides)
    figure = plot(out_dir, layer, flash)
    results = {"layer": {k: v for k, v in layer.items() if k != "by_round"}, "sample": sample, "flash": flash,
               "costmodel_sweep": sweep}
    results["layer"]["speedup_vs_hf_eager"] = layer["median_s"]["hf eager"] / layer["median_s"]["jax exact"]
    results["layer"]["speedup_vs_hf_sdpa"] = layer["median_s"]["hf sdpa"] / layer["median_s"]["jax exact"]
    return SectionResult(markdown(layer, sample, flash, sweep, figure), results, (figure,))
