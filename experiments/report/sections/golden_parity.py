"""Report section 1, golden parity: the JAX expert vs HF transformers, attention algorithms vs dense.

* HF: per-layer and final-norm outputs of the golden (both attention formulations: exact over S
  rows, and the device's tail-slot form over Smax rows with garbage rows masked) against HF
  ``Qwen3VLTextModel`` (fp32, eager attention, 4-D additive mask, the VLM cache in a
  ``DynamicCache``) holding the same random weights, for ``tiny`` and a 2-layer model at
  ``alpamayo_tt`` widths. Targets: PCC >= 0.999999 and max-abs <= 1e-4 per output.
* Attention: ``experiments.report.sections.attention_parity`` (flash, split-KV, ring, sharded versions).
* Collectives: ``experiments.report.sections.collectives`` (the decode-SP reduce's rounds and bytes read from
  the lowered program, next to the schedule).
"""

from __future__ import annotations

import pathlib

import jax
import numpy as np

from experiments.report import render
from experiments.report.progress import note
from experiments.report.render import SectionResult, md_table
from experiments.report.sections.attention_parity import MAX_ABS_TOL, attention_rows
from experiments.report.sections.collectives import collectives_part
from jaxref.config import ExpertConfig
from jaxref.expert import expert_stack
from jaxref.numerics import pcc
from jaxref.options import ExpertOptions
from jaxref.testing import random_setup

HF_PCC_MIN, HF_MAX_ABS = 0.999999, 1e-4
MODES = ("exact", "tail_slot")


def hf_parity_rows(cfg: ExpertConfig, *, seq_len: int, label: str, seed: int = 0, rope_delta: int = 7) -> list[dict]:
    """Per-layer and final-norm PCC / max-abs of the golden (both formulations) vs HF, fp32."""
    from jaxref.testing.hf_oracle import hf_expert_outputs, hf_text_model

    smax = seq_len + cfg.num_tokens + 32  # room for the tail slot, plus garbage rows it must hide
    _, params, cache, x = random_setup(seed, seq_len=seq_len, max_seq_len=smax, rope_delta=rope_delta, fill=7.0,
                                       cfg=cfg)
    hf_layers, hf_final = hf_expert_outputs(hf_text_model(params, cfg), x, cache, num_tokens=cfg.num_tokens)
    rows = []
    for mode in MODES:
        stack = jax.jit(lambda p, x, c, mode=mode: expert_stack(p.layers, p.final_norm, x, c, cfg=cfg,
                                                                options=ExpertOptions(attention=mode),
                                                                return_hidden=True))
        final, hidden = stack(params, x, cache)
        outs = [(f"layer {i}", np.asarray(hidden[i]), hf_layers[i]) for i in range(cfg.num_layers)]
        outs.append(("final norm", np.asarray(final), hf_final))
        for name, ours, ref in outs:
            row = {"model": label, "attention": mode, "output": name, "pcc": pcc(ref, ours),
                   "max_abs": float(np.abs(ours - ref).max()), "max_ref": float(np.abs(ref).max())}
            row["ok"] = row["pcc"] >= HF_PCC_MIN and row["max_abs"] <= HF_MAX_ABS
            rows.append(row)
    return rows


def hf_models(quick: bool) -> list[tuple[str, ExpertConfig, int]]:
    """(label, config, S): ``tiny`` (2 layers) and 2 layers at ``alpamayo_tt`` widths with S = 4600 as the
    port; ``quick`` only ``tiny`` (the wide model costs an HF build and two XLA compiles)."""
    tiny = [("tiny", ExpertConfig.tiny(), 100)]
    return tiny if quick else tiny + [("alpamayo_tt, 2 layers", ExpertConfig.alpamayo_tt(num_layers=2), 4600)]


def plot(out_dir: pathlib.Path, hf: list[dict], attn: list[dict]) -> str:
    fig, (a, b) = render.figure(2)
    for label in dict.fromkeys(r["model"] for r in hf):
        for mode, marker in zip(MODES, "os", strict=True):
            rs = [r for r in hf if r["model"] == label and r["attention"] == mode]
            a.semilogy(range(len(rs)), [max(r["max_abs"], 1e-12) for r in rs], marker=marker, label=f"{label}, {mode}")
            a.set_xticks(range(len(rs)), [r["output"].replace("layer ", "L").replace("final norm", "norm") for r in rs])
    a.axhline(HF_MAX_ABS, color="k", ls="--", lw=1, label="target max-abs")
    a.set(title="golden vs HF transformers (fp32)", xlabel="output", ylabel="max |golden - HF|")
    a.legend(fontsize=7)
    names = [f"{r['algorithm']} ({r['problem']})" for r in attn]
    b.barh(range(len(attn)), [max(r["out_max_abs"], 1e-12) for r in attn], color="tab:blue", label="out")
    b.scatter([max(r["lse_max_abs"], 1e-12) for r in attn], range(len(attn)), color="tab:orange", zorder=3, label="lse")
    b.axvline(MAX_ABS_TOL, color="k", ls="--", lw=1, label="tolerance")
    b.set_xscale("log")
    b.set_yticks(range(len(attn)), names, fontsize=7)
    b.invert_yaxis()
    b.set(title="attention algorithms vs dense reference", xlabel="max-abs error")
    b.legend(fontsize=7)
    return render.save(fig, out_dir, "golden_parity.png")


def markdown(models, hf: list[dict], probs, attn: list[dict], figure: str, collectives: str) -> str:
    hf_bad = [r for r in hf if not r["ok"]]
    at_bad = [r for r in attn if not r["ok"]]
    lines = [
        "### JAX expert vs HF transformers", "",
        "Random weights copied into HF `Qwen3VLTextModel` through the HF state-dict names; fp32, eager "
        "attention, 4-D additive mask, the VLM cache in a `DynamicCache`. `exact` attends over the S valid "
        "rows; `tail_slot` is the device's form (own K/V in the last T rows of Smax = S + T + 32, garbage "
        f"rows masked). Targets: PCC >= {HF_PCC_MIN} and max-abs <= {HF_MAX_ABS:g}. Models: "
        + "; ".join(f"{label} (L={c.num_layers}, D={c.hidden}, S={s})" for label, c, s in models) + ".", "",
        md_table(["model", "attention", "output", "PCC", "1 - PCC", "max-abs", "max abs(HF)", "met"],
                 [[r["model"], r["attention"], r["output"], f"{r['pcc']:.9f}", f"{1 - r['pcc']:.1e}",
                   f"{r['max_abs']:.2e}", f"{r['max_ref']:.2f}", "yes" if r["ok"] else "**no**"] for r in hf]), "",
        f"**{len(hf) - len(hf_bad)} / {len(hf)} outputs meet both targets.**", "",
        "### Attention algorithms vs the dense reference", "",
        "(out, lse) of each algorithm vs `attention_reference` on the same float32 inputs. Problems: "
        + "; ".join(p.label() for p in probs.values())
        + f". Split-KV / ring emulate their ranks on one device; the sharded rows run one rank per JAX device "
        f"(`jax.shard_map` over a ('cube', 'pe') mesh of fake CPU devices). Tolerance: max-abs <= {MAX_ABS_TOL:g}.", "",
        md_table(["algorithm", "problem", "devices", "out max-abs", "out 1 - PCC", "lse max-abs", "met"],
                 [[r["algorithm"], r["problem"], r["kind"], f"{r['out_max_abs']:.1e}", f"{1 - r['out_pcc']:.1e}",
                   f"{r['lse_max_abs']:.1e}", "yes" if r["ok"] else "**no**"] for r in attn]), "",
        f"**{len(attn) - len(at_bad)} / {len(attn)} algorithm rows within tolerance.**", "",
        collectives, "",
        f"![per-output error vs HF and per-algorithm error vs the dense reference]({figure})",
    ]
    return "\n".join(lines)


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult:
    """Section 1 (report contract). ``overrides`` name hardware only: nothing here depends on them."""
    models = hf_models(quick)
    hf = []
    for label, cfg, s in models:
        note(f"HF parity: {label}, S={s}")
        hf += hf_parity_rows(cfg, seq_len=s, label=label)
    note("attention algorithms vs the dense reference")
    probs, attn = attention_rows(quick)
    note("decode-SP collectives: lowered program vs schedule")
    coll_md, coll = collectives_part(quick)
    figure = plot(out_dir, hf, attn)
    results = {
        "hf": {"targets": {"pcc_min": HF_PCC_MIN, "max_abs": HF_MAX_ABS}, "rows": hf,
               "all_met": all(r["ok"] for r in hf), "min_pcc": min(r["pcc"] for r in hf),
               "max_abs": max(r["max_abs"] for r in hf)},
        "attention": {"tolerance_max_abs": MAX_ABS_TOL, "rows": attn, "all_met": all(r["ok"] for r in attn),
                      "problems": {k: vars(p) for k, p in probs.items()}, "devices": jax.device_count()},
        "collectives": coll,
    }
    return SectionResult(markdown(models, hf, probs, attn, figure, coll_md), results, (figure,))
