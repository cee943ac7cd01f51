"""Fit the Blackhole cost model, validate it leave-one-group-out, and print its what-ifs with intervals.

    python -m experiments.costmodel_fit [--steps 60] [--no-logo]

Prints:
  1. the fit from the physical prior (Levenberg-Marquardt, Laplace covariance): every measured row
     with its prediction, 90% prediction interval and the measured value;
  2. leave-one-group-out: per group, refit without it and predict it; every held-out row with
     prediction, interval, measured value; the coverage of the 90% intervals overall and per group;
  3. what-ifs the notes withheld or never measured, as predictions with intervals, and as
     correlated deltas against the port (Smax 8192 -> 5120, bf16 -> bfp8 cache, ...);
  4. the DRAM floor and the gap per op class.
"""

from __future__ import annotations

import argparse
import time

from costmodel.blackhole import AttnConfig, BlackholeConfig
from costmodel.blackhole.fit import fit, load_calibration
from costmodel.blackhole.intervals import delta_intervals, intervals
from costmodel.blackhole.params import PARAM_NAMES, param_info, params_to_dict
from costmodel.blackhole.roofline import floor_us, format_gap_table, gap_table, measured_op_times
from costmodel.blackhole.rows import load_rows
from costmodel.blackhole.validation import leave_one_group_out, row_intervals
from costmodel.hardware import blackhole_p100a, blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.validation import positive_int

CFG = ExpertConfig.alpamayo_tt()


def whatif_settings():
    """(label, hardware, setting) of the what-ifs, all against the measured port."""
    port = BlackholeConfig.port(CFG)
    std = {"attn_mode": "standard", "mask_dtype": "bf16"}
    p150 = blackhole_p150a()
    return [
        ("Smax 5120", p150, port.replace(smax=5120.0)),
        ("Smax 6144", p150, port.replace(smax=6144.0)),
        ("bfp8 cache", p150, port.replace(kv_dtype="bfp8")),
        ("bfp8 cache, Smax 5120", p150, port.replace(kv_dtype="bfp8", smax=5120.0)),
        ("decode k_chunk 256", p150, port.replace(attn=AttnConfig(256.0, 32.0, 16.0))),
        ("standard GQA q32 (bfp4 mask)", p150, port.replace(attn_mode="standard")),
        ("standard folded q64", p150, port.replace(fold_heads=True, attn=AttnConfig(128.0, 64.0, 16.0), **std)),
        ("fused add+rms_norm", p150, port.replace(fuse_add_norm=True)),
        ("default matmul configs", p150, BlackholeConfig.port(CFG, matmuls="default")),
        ("p100a (448 GB/s)", blackhole_p100a(), port),
    ]


def _row_line(p: dict) -> str:
    meas = (f"{p['measured_lo']:.1f}" if p["measured_lo"] == p["measured_hi"]
            else f"{p['measured_lo']:.1f}-{p['measured_hi']:.1f}")
    return (f"  {p['table'] + '/' + p['name']:44s} {p['predicted']:9.1f} [{p['lo']:8.1f}, {p['hi']:8.1f}] "
            f"{meas:>13s} {100 * p['error']:+6.1f}% {'in' if p['inside'] else 'OUT'}")


HEADER = f"  {'row (us)':44s} {'predicted':>9s} {'90% interval':>20s} {'measured':>13s} {'error':>7s}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=positive_int, default=60)
    ap.add_argument("--no-logo", action="store_true", help="skip the leave-one-group-out refits")
    args = ap.parse_args(argv)

    rows = load_rows()
    t0 = time.perf_counter()
    cal = fit(rows, steps=args.steps)
    print(f"== 1. fit from the prior ({time.perf_counter() - t0:.1f} s incl. compile): {cal.info['n_rows']} rows, "
          f"rms log error {cal.info['rms_log_error']:.3f}, sigma {cal.sigma:.3f}, "
          f"{cal.info['effective_params']:.1f} effective of {cal.info['n_params']} parameters, dof {cal.dof:.1f}")
    print(HEADER)
    inside = row_intervals(cal, rows)
    for p in inside:
        print(_row_line(p))
    cal_rows = [p for p in inside if p["role"] == "calibration"]
    print(f"  in-sample: {sum(p['inside'] for p in cal_rows)}/{len(cal_rows)} calibration rows inside their interval")
    stored = params_to_dict(load_calibration().params)
    drift = max(abs(v / stored[k] - 1) for k, v in params_to_dict(cal.params).items())
    print(f"  largest relative difference to the stored calibration: {100 * drift:.2f}%")
    print("  parameters (value, x/ one sd):")
    for i, k in enumerate(PARAM_NAMES):
        print(f"    {k:24s} {getattr(cal.params, k):11.4g} {param_info(k)['unit']:8s} x/ {2.718281828 ** cal.cov[i, i] ** 0.5:.2f}")

    if not args.no_logo:
        t0 = time.perf_counter()
        logo = leave_one_group_out(rows, cal)
        print(f"\n== 2. leave-one-group-out ({time.perf_counter() - t0:.1f} s): each group refitted out, then predicted")
        print(HEADER)
        for p in logo["rows"]:
            print(_row_line(p) + f"   [{p['fold']}]")
        print(f"  {'group':34s} {'inside':>8s} {'rms log err':>11s}")
        for g, s in logo["groups"].items():
            print(f"  {g:34s} {s['inside']:3d}/{s['n']:<4d} {s['rms_log_error']:11.3f}")
        n = sum(1 for p in logo["rows"] if p["fold"] != "validation (full fit)")
        print(f"  COVERAGE of the 90% intervals over all held-out predictions: {100 * logo['coverage']:.1f}% "
              f"({round(logo['coverage'] * n)}/{n}); validation-only rows: {100 * logo['validation_coverage']:.0f}%")

    print("\n== 3. what-ifs (stored calibration): prediction [90%], and delta vs the port [90%, correlated]")
    cal = load_calibration()
    port = BlackholeConfig.port(CFG)
    base = intervals(cal, blackhole_p150a(), port, cfg=CFG)
    print(f"  {'port (measured: 32.5 ms step)':32s} attention {base['ops']['attention'][0]:6.1f} us  step "
          f"{base['step_us'][0] / 1e3:6.2f} ms [{base['step_us'][1] / 1e3:.2f}, {base['step_us'][2] / 1e3:.2f}]")
    for label, hw, bc in whatif_settings():
        iv = intervals(cal, hw, bc, cfg=CFG)
        d = delta_intervals(cal, hw, bc, port, cfg=CFG, hw_base=blackhole_p150a())
        st, ds = iv["step_us"], d["step_us"]
        print(f"  {label:32s} step {st[0] / 1e3:6.2f} ms [{st[1] / 1e3:6.2f}, {st[2] / 1e3:6.2f}]   delta "
              f"{ds[0] / 1e3:+7.3f} ms [{ds[1] / 1e3:+7.3f}, {ds[2] / 1e3:+7.3f}]   sample "
              f"{iv['sample_us'][0] / 1e3:6.1f} ms")

    print("  the same step deltas with parameter uncertainty propagated linearly (default) vs by Monte Carlo "
          "(512 draws of the Laplace posterior; the model has max / q-norm kinks):")
    for label, bc in (("Smax 5120", port.replace(smax=5120.0)), ("bfp8 cache", port.replace(kv_dtype="bfp8"))):
        lin = delta_intervals(cal, blackhole_p150a(), bc, port, cfg=CFG)["step_us"]
        mc = delta_intervals(cal, blackhole_p150a(), bc, port, cfg=CFG, draws=512)["step_us"]
        print(f"    {label:14s} linearised {lin[0] / 1e3:+.3f} ms [{lin[1] / 1e3:+.3f}, {lin[2] / 1e3:+.3f}]   "
              f"Monte Carlo [{mc[1] / 1e3:+.3f}, {mc[2] / 1e3:+.3f}]")

    print("\n== 4. DRAM floor (weights + KV at 512 GB/s) and the gap, per step")
    fitted = cal.params
    print(format_gap_table(gap_table(blackhole_p150a(), fitted, port, cfg=CFG, measured_ops=measured_op_times())))
    valid = floor_us(blackhole_p150a(), port, cfg=CFG, kv_rows="valid")
    print(f"(reading only the S + T = {int(port.seq_len) + CFG.num_tokens} valid rows instead of Smax: "
          f"floor {sum(valid.values()) / 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
