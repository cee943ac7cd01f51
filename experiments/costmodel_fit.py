"""Fit the Blackhole cost model to the notes' tables and print what it predicts beyond them.

    python -m experiments.costmodel_fit [--steps 3000] [--no-holdout]

Prints:
  1. the fit (from the physical prior, 17 free parameters): per-op table, matmul default/tuned
     table, attention table, step / sample, each predicted vs measured with the error;
  2. held-out checks: refit without a table's rows and predict them (real measurements the fit
     did not see): the matmul default column, the standard-SDPA rows;
  3. out-of-sample predictions (settings the notes withheld or never measured): other Smax, bfp8
     cache, standard SDPA chunking, fused add+norm, p100a, default matmuls — printed, not tuned;
  4. the DRAM floor and the gap per op class.
"""

from __future__ import annotations

import argparse
import time

from costmodel import calibrate
from costmodel.blackhole import BlackholeConfig, evaluate
from costmodel.blackhole_ops import AttnConfig
from costmodel.fitted import DESCRIPTIONS, load_fitted, params_to_dict
from costmodel.hardware import blackhole_p100a, blackhole_p150a
from costmodel.roofline import floor_us, format_gap_table, gap_table, measured_op_times
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()


def holdout(rows, leave_out, steps):
    """Refit without rows whose name matches ``leave_out``; return their report rows."""
    train = [r for r in rows if not leave_out(r)]
    params, _ = calibrate.fit(train, steps=steps)
    return [r for r in calibrate.report(params, rows) if leave_out(_row(rows, r))]


def _row(rows, rep):
    return next(r for r in rows if r.table == rep["table"] and r.name == rep["name"])


def whatif_rows():
    port = BlackholeConfig.port(CFG)
    std = {"attn_mode": "standard", "mask_dtype": "bf16"}
    return [
        ("port (fitted setting)", blackhole_p150a(), port),
        ("Smax 6144", blackhole_p150a(), port.replace(smax=6144.0)),
        ("Smax 5120", blackhole_p150a(), port.replace(smax=5120.0)),
        ("bfp8 cache", blackhole_p150a(), port.replace(kv_dtype="bfp8")),
        ("bfp8 cache, Smax 5120", blackhole_p150a(), port.replace(kv_dtype="bfp8", smax=5120.0)),
        ("decode k_chunk 256", blackhole_p150a(), port.replace(attn=AttnConfig(256.0, 32.0, 16.0))),
        ("decode 8 cores/head", blackhole_p150a(), port.replace(attn=AttnConfig(128.0, 32.0, 8.0))),
        ("standard GQA q32 (bfp4 mask)", blackhole_p150a(), port.replace(attn_mode="standard")),
        ("standard GQA q64", blackhole_p150a(), port.replace(attn=AttnConfig(128.0, 64.0, 16.0), **std)),
        ("standard folded q32", blackhole_p150a(), port.replace(fold_heads=True, **std)),
        ("standard folded q64", blackhole_p150a(),
         port.replace(fold_heads=True, attn=AttnConfig(128.0, 64.0, 16.0), **std)),
        ("standard folded q128", blackhole_p150a(),
         port.replace(fold_heads=True, attn=AttnConfig(128.0, 128.0, 16.0), **std)),
        ("standard GQA q32, bfp8 cache", blackhole_p150a(), port.replace(attn_mode="standard", kv_dtype="bfp8")),
        ("fused add+rms_norm", blackhole_p150a(), port.replace(fuse_add_norm=True)),
        ("default matmul configs", blackhole_p150a(), BlackholeConfig.port(CFG, matmuls="default")),
        ("bf16 weights", blackhole_p150a(), port.replace(weight_dtype="bf16")),
        ("p100a (448 GB/s)", blackhole_p100a(), port),
    ]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--no-holdout", action="store_true")
    args = ap.parse_args(argv)

    rows = calibrate.load_rows()
    t0 = time.perf_counter()
    params, info = calibrate.fit(rows, steps=args.steps)
    table = calibrate.report(params, rows)
    print(f"== 1. fit ({time.perf_counter() - t0:.1f} s)")
    print(calibrate.format_report(table, info))
    worst = max((r for r in table if r["table"] != "step_times"), key=lambda r: abs(r["error"]))
    step = next(r for r in table if r["name"] == "step_us")
    print(f"\nworst row: {worst['table']}/{worst['name']} {100 * worst['error']:+.1f}%; "
          f"step {step['predicted'] / 1e3:.2f} ms vs 32.5 ms ({100 * step['error']:+.1f}%)")
    stored = params_to_dict(load_fitted())
    drift = max(abs(v / stored[k] - 1) for k, v in params_to_dict(params).items())
    print(f"largest relative difference to the stored calibration (data/calibration.json): {100 * drift:.1f}%")
    print("\nfitted parameters (fitted to all rows above):")
    for k, v in params_to_dict(params).items():
        print(f"  {k:24s} {v:12.5g} {DESCRIPTIONS[k][0]:8s} {DESCRIPTIONS[k][1]}")

    if not args.no_holdout:
        print("\n== 2. held-out rows (refit without them, then predict them)")
        for label, pred in (
            ("matmul default column", lambda r: r.table == "matmul_table" and r.name.endswith("/default")),
            ("standard SDPA rows", lambda r: r.table == "attention_table" and r.name.startswith("standard")),
        ):
            t0 = time.perf_counter()
            got = holdout(rows, pred, args.steps)
            print(f"[{label}] ({time.perf_counter() - t0:.1f} s)")
            for r in got:
                print(f"  {r['name']:24s} measured {r['lo']:7.1f} us  predicted {r['predicted']:7.1f} us  "
                      f"{100 * r['error']:+6.1f}%")

    print("\n== 3. out-of-sample predictions (stored calibration; nothing here was measured or tuned)")
    fit = load_fitted()
    print(f"{'setting':32s} {'attention us':>12s} {'layer us':>9s} {'step ms':>8s} {'sample ms':>9s}")
    for label, hw, bc in whatif_rows():
        r = evaluate(hw, fit, bc, cfg=CFG)
        print(f"{label:32s} {r['per_op_us']['attention']:12.1f} {r['layer_us']:9.1f} {r['step_ms']:8.2f} "
              f"{r['sample_ms']:9.1f}")

    print("\n== 4. DRAM floor (weights + KV at 512 GB/s) and the gap, per step")
    port = BlackholeConfig.port(CFG)
    print(format_gap_table(gap_table(blackhole_p150a(), fit, port, cfg=CFG, measured_ops=measured_op_times())))
    valid = floor_us(blackhole_p150a(), port, cfg=CFG, kv_rows="valid")
    print(f"(reading only the S + T = {int(port.seq_len) + CFG.num_tokens} valid rows instead of Smax: "
          f"floor {sum(valid.values()) / 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
