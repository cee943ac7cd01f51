"""Token latency of a whole decoder stack on the AHBM mesh (issue 28): Llama-3-70B decode (batch 1
and 4, S 8k / 128k / 1M) and prefill on 1, 2 and 4 SIPs, and the Alpamayo expert, per part
(attention, GEMMs, collectives) with its bound, analytic model (``costmodel.ahbm.layer``) and
event simulation (``costmodel.ahbm.sim.layer``) side by side.

    python -m experiments.ahbm_token --quick --json

``report_section(out_dir, quick=..., overrides=...)`` returns the section (markdown, results,
figure) for the report's AHBM section.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from costmodel.ahbm.layer import GROUPS, evaluate_layer, grouped
from costmodel.ahbm.layer_plan import LayerConfig, MeshSpec
from costmodel.ahbm.sim.layer import simulate_layer
from costmodel.hardware import ahbm_sip
from costmodel.overrides import add_set_argument, apply_overrides, parse_overrides
from experiments.report.render import SectionResult, figure, md_table, save
from jaxref.validation import cli_main, dumps_strict, output_dir

K = 1024
SIPS = (1, 2, 4)


def points(quick: bool) -> list[LayerConfig]:
    """The study's operating points."""
    decode_s = (8 * K, 128 * K) if quick else (8 * K, 128 * K, 1024 * K)
    prefill_s = (1 * K, 32 * K) if quick else (1 * K, 8 * K, 32 * K, 128 * K, 1024 * K)
    pts = [LayerConfig("decode", S, batch=B, sips=n) for S in decode_s for B in (1, 4) for n in SIPS]
    pts += [LayerConfig("prefill", S, sips=n) for S in prefill_s for n in SIPS]
    pts += [LayerConfig("decode", 8 * K - 64, batch=B, sips=n, model="alpamayo") for B in (1, 4)
            for n in ((1, 4) if quick else SIPS)]
    pts += [LayerConfig("prefill", 8 * K - 64, sips=n, model="alpamayo") for n in ((1,) if quick else SIPS)]
    return pts


def report_points(quick: bool) -> list[LayerConfig]:
    """The report's points: the full study, or (quick) Llama-3-70B decode S 8k at batch 1 / 4 on
    1 / 4 SIPs and prefill S 1k on one SIP (a smoke test of every part, seconds)."""
    if not quick:
        return points(False)
    return [LayerConfig("decode", 8 * K, batch=B, sips=n) for B in (1, 4) for n in (1, 4)] + \
        [LayerConfig("prefill", 1 * K, sips=1)]


def run_point(cfg: LayerConfig, hw, mesh, *, simulate: bool = True) -> dict:
    """Model (and simulation) of one point: {config, refused | token and per-group numbers}."""
    rec = {"model": cfg.model, "phase": cfg.phase, "S": cfg.seq_len, "batch": cfg.batch, "sips": cfg.sips}
    try:
        r = evaluate_layer(cfg, hw, mesh)
    except ValueError as e:
        return {**rec, "refused": str(e)}
    L = r["plan"].shape.layers
    groups = grouped(r["parts"])
    rec.update(attn_tile=r["config"].attn_tile, layer_us=r["layer_us"], token_ms=r["token_us"] / 1e3,
               parts={p["part"]: {"us": p["us"], "bound": p["bound"]} for p in r["parts"]},
               groups={g: {"us": us, "bound": b} for g, (us, b) in groups.items()},
               need_gb_per_cube=r["capacity"]["need_bytes_per_cube"] / 1e9)
    if simulate:
        sim = simulate_layer(r["plan"], hw, mesh)
        for p in r["parts"]:
            rec["parts"][p["part"]]["sim_us"] = sim[p["part"]]
        for g, names in GROUPS.items():
            vals = [sim[n] for n in names]
            rec["groups"][g]["sim_us"] = None if any(v is None for v in vals) else sum(vals)
        # attention not simulated (long prefill): the token's simulation takes the model's attention
        att_sim = sim["attention"]
        layer_sim = sum(v for k, v in sim.items() if k not in ("layer", "attention")) + \
            (att_sim if att_sim is not None else rec["parts"]["attention"]["us"])
        rec.update(layer_sim_us=layer_sim, token_sim_ms=L * layer_sim / 1e3, attention_simulated=att_sim is not None)
    return rec


def _diff(sim, model) -> str:
    return "—" if sim is None else f"{sim / model - 1:+.1%}" if model > 0 else "0"


def _cell(g: dict) -> str:
    sim = "—" if g.get("sim_us") is None else f"{g['sim_us']:.4g}"
    return f"{g['us']:.4g} / {sim} ({g['bound']})"


def _refusal(message: str) -> str:
    """A refusal's first clause, from what the point needs where it says (the capacity check's form)."""
    return message.split(" needs ", 1)[-1].split(";")[0]


def table(records: list[dict]) -> str:
    rows = []
    for r in records:
        head = [r["model"], r["phase"], r["S"], r["batch"], r["sips"]]
        if "refused" in r:
            rows.append(head + ["refused: " + _refusal(r["refused"])] + [""] * 5)
            continue
        g = r["groups"]
        rows.append(head + [f"{r['token_ms']:.4g}", f"{r.get('token_sim_ms', float('nan')):.4g}"
                            + ("" if r.get("attention_simulated", True) else "*"),
                            _cell(g["attention"]), _cell(g["gemm"]), _cell(g["collectives"]), f"{r['need_gb_per_cube']:.1f}"])
    return md_table(["model", "phase", "S", "B", "SIPs", "token ms (model)", "token ms (sim)",
                     "attention us/layer model / sim (bound)", "GEMMs us/layer", "collectives us/layer",
                     "GB per CUBE"], rows)


def part_diffs(records: list[dict]) -> dict:
    """Worst |model vs simulation| per part over the simulated points."""
    worst: dict = {}
    for r in records:
        for name, p in r.get("parts", {}).items():
            s = p.get("sim_us")
            if s is None or p["us"] <= 0:
                continue
            d = s / p["us"] - 1
            if abs(d) > abs(worst.get(name, {"diff": 0.0})["diff"]):
                worst[name] = {"diff": d, "point": f"{r['model']} {r['phase']} S {r['S']} B {r['batch']} "
                                                   f"SIPs {r['sips']}"}
    return worst


def _figure(out_dir: pathlib.Path, records: list[dict]) -> str:
    fig, (ax,) = figure(width=7, height=3.8)
    for B, style in ((1, "o-"), (4, "s--")):
        for S in sorted({r["S"] for r in records if r["phase"] == "decode" and r["model"] == "llama3_70b"}):
            sel = [r for r in records if r["model"] == "llama3_70b" and r["phase"] == "decode" and r["batch"] == B
                   and r["S"] == S and "refused" not in r]
            if sel:
                ax.plot([r["sips"] for r in sel], [r["token_ms"] for r in sel], style, label=f"B {B}, S {S // K}k")
    ax.set_xlabel("SIPs")
    ax.set_ylabel("ms per token (model)")
    ax.set_xticks(SIPS)
    ax.set_yscale("log")
    ax.set_title("Llama-3-70B decode token latency on AHBM")
    ax.legend(fontsize=7)
    return save(fig, out_dir, "ahbm_token_latency.png")


def report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult:
    hw = apply_overrides(ahbm_sip(), overrides, scope="layer")
    mesh = MeshSpec()
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records = [run_point(c, hw, mesh) for c in report_points(quick)]
    worst = part_diffs(records)
    md = ["### Token latency of the whole decoder stack on the mesh (``costmodel.ahbm.layer``)\n",
          ("Tensor-parallel placement over every CUBE of every SIP (``costmodel.ahbm.layer_plan``): QKV and "
          "FFN gate/up column-parallel, W_o and FFN down row-parallel with a ring all-reduce (CUBE-NOC rows, "
          "columns, then UCIe between SIPs), the ADR-0060 attention kernel on its CUBE Groups. Per layer: "
          "model / simulation us and the bound of the group's largest part; token = layers x layer (prefill: "
          "the whole prompt). * = attention not simulated (prefill S > 32k), the model's used.\n"),
          table(records), "",
          "Model vs simulation, worst per part: " + ", ".join(f"{k} {v['diff']:+.1%}" for k, v in worst.items()),
          "", "![token latency](ahbm_token_latency.png)\n"]
    fig = _figure(out_dir, records)
    return SectionResult("\n".join(md), {"points": records, "worst_part_diff": worst}, (fig,))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m experiments.ahbm_token", description=__doc__.splitlines()[0],
        epilog="example: python -m experiments.ahbm_token --quick --json --no-sim")
    ap.add_argument("--quick", action="store_true", help="fewer operating points")
    ap.add_argument("--json", action="store_true", help="print the records as strict JSON")
    ap.add_argument("--no-sim", action="store_true", help="skip the event simulation")
    ap.add_argument("--out", type=output_dir, default=None, help="also write the section's figure here")
    add_set_argument(ap, hw="ahbm")
    return ap


def main(argv=None) -> int:
    def body(args):
        over = parse_overrides(args.overrides, default_hw="ahbm", hw="ahbm", scope="layer")
        hw = apply_overrides(ahbm_sip(), over, scope="layer")
        mesh = MeshSpec()
        records = [run_point(c, hw, mesh, simulate=not args.no_sim) for c in points(args.quick)]
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            _figure(args.out, records)
        print(dumps_strict(records, indent=1) if args.json else table(records))

    return cli_main(build_parser(), argv, body)


if __name__ == "__main__":
    sys.exit(main())
