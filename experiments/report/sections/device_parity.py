"""Report section 5, device parity: the expert's ttnn graph on the emulation backend vs the golden.

The run is ``device.parity.run`` (the same as ``python -m device.parity --backend emulation``), its
table ``device.parity.markdown``; this module picks the problems, says whether a chip is visible and
plots the per-layer PCC gap.
"""

from __future__ import annotations

import pathlib

from costmodel.blackhole.port import Port
from device.emulation import Emulation
from device.parity import Problem, chip_status, markdown, run
from experiments.report.render import SectionResult, figure, save
from jaxref.config import ExpertConfig
from jaxref.numerics.formats import CACHE_GARBAGE as GARBAGE  # cache rows [S, Smax) hold this


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult:
    """Report section: the ttnn graph on the emulation backend vs the golden, and the chip status.

    quick: tiny (H = 32, S = 100, 2 layers), decode attention, bfp8 weights, with its 10-step sample
    (teacher-forced per step, free-running and the golden's sensitivity baseline: ``device.trajectory``;
    cheap at this size on the compiled layer, ``device.fast_twin``); full: also the standard attention
    with bf16 weights and a 2-layer model at alpamayo_tt widths (S = 4600, Smax = 8192). The random
    model is one layer rolled per layer (the note under the tables). ``overrides`` (hardware
    numbers) do not enter: nothing here is a cost prediction.
    """
    tiny = ExpertConfig.tiny(head_dim=32)
    probs = [Problem(cfg=tiny, seq_len=100, layers=(0, 1), sample=True,
                     port=Port.for_expert(tiny, weights="bfp8"))]
    if not quick:
        probs.append(Problem(cfg=tiny, seq_len=100, layers=(0, 1), sample=False,
                             port=Port.for_expert(tiny, weights="bf16", attn_mode="standard")))
        big = ExpertConfig.alpamayo_tt(num_layers=2)
        probs.append(Problem(cfg=big, seq_len=4600, layers=(0, 1), sample=False,
                             port=Port.for_expert(big, weights="bfp8")))
    results = []
    for p in probs:
        ns = Emulation()
        results.append(run(p, ns, ns.open_device(0), backend="emulation"))
    status = chip_status()
    chip = ("Chip run: skipped - " + status + "; `python -m device.parity` runs it on a Blackhole."
            if status else "Chip run: a device is visible; run `python -m device.parity` for the chip numbers.")
    md = ("The expert's ttnn graph (`device/graph.py`, 19 ops per layer) run on the JAX emulation of its ttnn "
          "ops (`device/emulation.py`: outputs rounded to each op's output format, no math-fidelity loss inside "
          "kernels) against the fp32 golden (exact attention) and the device-precision golden "
          "(`Precision.device`, tail-slot attention); layer inputs are the fp32 golden's, uploaded as bf16; "
          f"cache rows [S, Smax - T) hold garbage ({GARBAGE}).\n\n" + markdown(results) + "\n\n" + chip)
    fig_name = plot_layer_pcc(results, pathlib.Path(out_dir) / "device_parity_layers.png")
    md += f"\n\n![per-layer 1 - PCC of the emulated graph]({fig_name})"
    return SectionResult(md, {"runs": results, "chip": status or "available"}, (fig_name,))


def plot_layer_pcc(results: list[dict], path: pathlib.Path) -> str:
    """Per-layer 1 - PCC (log scale) of each run vs the fp32 and the device-precision golden; returns the
    file name."""
    fig, (ax,) = figure(width=7.0, height=3.6)
    for r in results:
        label = f"D={r['hidden']} S={r['seq_len']} {r['weights']} {r['attn_mode']}"
        layers = [row["layer"] for row in r["layers"]]
        for key, style in (("vs_fp32", "o-"), ("vs_device_golden", "s--")):
            gap = [max(1.0 - row[key]["pcc"], 1e-12) for row in r["layers"]]
            ax.semilogy(layers, gap, style, label=f"{label}, {key.removeprefix('vs_')}")
    ax.set_xticks(sorted({row["layer"] for r in results for row in r["layers"]}))
    ax.set_xlabel("layer")
    ax.set_ylabel("1 - PCC")
    ax.set_title("ttnn graph on the emulation backend vs the golden")
    ax.legend(fontsize=6)
    return save(fig, path.parent, path.name, dpi=110)
