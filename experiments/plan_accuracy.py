"""Accuracy cost of the plan options, from the golden: layer-0 PCC against the fp32 golden per
(weights, KV cache, mask) format, at ``alpamayo_tt`` shapes with random bf16-valued weights and
cache (``jaxref.testing.LayerwiseBf16Model``: the device-precision section's model and layer function).

    python -m experiments.plan_accuracy            # writes costmodel/data/plan_accuracy.json (~1-2 min)

``costmodel.blackhole.plans`` reads the JSON (a cached estimate: the plan search does not rerun
the golden). What it can and cannot say: the emulation rounds where the device stores a tensor
(weights, activations, cache, mask); it has no notion of a kernel (decode vs standard SDPA, a
fused add+norm, a 5120-row cache compute the same values), and it misses the device's in-op
losses (math fidelity, SDPA's bf16 score tiles), so it ranks formats, it does not predict the
chip's PCC (the notes measure 0.99993 / 0.99994 at layer 0 for bfp8 / bf16 weights).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from costmodel.blackhole.params import DATA_DIR
from jaxref.config import ExpertConfig
from jaxref.numerics import compare
from jaxref.precision import Precision
from jaxref.testing import LayerwiseBf16Model
from jaxref.validation import atomic_write_text, cli_main, dumps_strict, output_file, positive_int

OUT = DATA_DIR / "plan_accuracy.json"
WEIGHTS = ("bf16", "bfp8", "bfp4")
CACHES = ("bf16", "bfp8", "bfp4")
MASKS = ("bfp4", "bf16")


def layer_pccs(*, seq_len: int = 4700, seed: int = 0, layer: int = 0) -> list[dict]:
    """[{weights, cache, mask, pcc, rel_fro}] of layer ``layer`` under each device policy vs fp32."""
    cfg = ExpertConfig.alpamayo_tt()
    setup = LayerwiseBf16Model(cfg=cfg, seq_len=seq_len, seed=seed)
    x = np.asarray(np.random.default_rng(seed).standard_normal((cfg.num_tokens, cfg.hidden)), np.float32)
    golden = np.asarray(setup.layer_fn(Precision.fp32())(layer, x))
    out = []
    for w, c, m in itertools.product(WEIGHTS, CACHES, MASKS):
        got = np.asarray(setup.layer_fn(Precision.device(weights=w, cache=c, mask=m))(layer, x))
        cmp = compare(golden, got)
        out.append({"weights": w, "cache": c, "mask": m, "pcc": float(cmp.pcc), "rel_fro": float(cmp.rel_fro)})
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m experiments.plan_accuracy", description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m experiments.plan_accuracy --seq-len 1024 --out /tmp/acc.json")
    ap.add_argument("--out", type=output_file, default=str(OUT), help=f"JSON file to write (default {OUT})")
    ap.add_argument("--seq-len", type=positive_int, default=4700, help="S, valid cache rows (default 4700)")
    return ap


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): bad input, the output path included, is
    ``error: ...`` and status 2 before the golden runs (``LayerwiseBf16Model`` checks S when it is made)."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    rows = layer_pccs(seq_len=args.seq_len)
    doc = {"description": "Layer-0 PCC vs the fp32 golden per storage format (experiments.plan_accuracy): "
                          "alpamayo_tt shapes, random bf16-valued weights and VLM cache, S = "
                          f"{args.seq_len}, Smax 8192, N(0,1) layer input; device emulation (jaxref.precision."
                          "Precision.device). Ranks formats; it does not model kernels or in-op losses.",
           "how": f"python -m experiments.plan_accuracy ({time.perf_counter() - t0:.0f} s on 2 CPU cores)",
           "rows": rows}
    atomic_write_text(args.out, dumps_strict(doc, indent=1) + "\n")
    for r in rows:
        print(f"weights {r['weights']:5s} cache {r['cache']:5s} mask {r['mask']:5s}  PCC {r['pcc']:.7f}  "
              f"rel {r['rel_fro']:.2e}")


if __name__ == "__main__":
    raise SystemExit(main())
