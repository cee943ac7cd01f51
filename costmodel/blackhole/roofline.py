"""DRAM-bound floor of the expert step and where the gap to it goes, per op class.

The floor is what the step would take if it did nothing but stream its unavoidable DRAM bytes at
peak bandwidth: every layer's weights once plus the KV cache rows the attention reads (Smax rows
per layer with the port's masked full-cache read; the S + T valid rows for an ideal kernel).
Everything else (activations, launches, latency, imperfect overlap) is gap. The table puts the
floor next to the model's prediction and the measured per-op table, per op class.
"""

from __future__ import annotations

import json

import jax

from costmodel.blackhole.graph import OP_CLASS, BlackholeConfig, step_breakdown
from costmodel.blackhole.kinds.matmul import matmul_weight_bytes
from costmodel.blackhole.params import DATA_DIR, FitParams
from costmodel.blackhole.port import MATMULS, matmul_shapes
from costmodel.hardware import TILE, Blackhole, tile_bytes
from jaxref.config import ExpertConfig

CLASS_ORDER = ("matmul", "attention", "heads", "norm", "rope", "fill_cache", "eltwise")


def layer_weight_bytes(bc: BlackholeConfig, *, cfg: ExpertConfig) -> int:
    """DRAM bytes of one layer's matmul weights (wqkv, wo, w1, w3, w2) in the port's weight format."""
    return sum(matmul_weight_bytes(K=K, N=N, weight_dtype=bc.port.precision.weights)
               for name, (_, K, N) in matmul_shapes(cfg).items() if name in MATMULS)


def layer_kv_bytes(rows: float, bc: BlackholeConfig, *, cfg: ExpertConfig) -> float:
    """DRAM bytes of K and V for ``rows`` cache rows of one layer in the port's cache format (whole tiles)."""
    tiles = 2 * cfg.num_kv_heads * (rows / TILE) * (cfg.head_dim // TILE)
    return tiles * tile_bytes(bc.port.precision.cache)


def floor_us(hw: Blackhole, bc: BlackholeConfig, *, cfg: ExpertConfig, kv_rows: str = "smax") -> dict[str, float]:
    """Per-step DRAM floor at peak bandwidth, us: {'matmul': weights, 'attention': KV, others: 0}.

    Args:
      kv_rows: 'smax' (the rows the port's masked kernel reads) or 'valid' (S + T rows).
    """
    if kv_rows not in ("smax", "valid"):
        raise ValueError(f"kv_rows={kv_rows!r} unknown; expected 'smax' or 'valid'")
    rows = float(bc.smax) if kv_rows == "smax" else float(bc.seq_len) + cfg.num_tokens
    peak = float(hw.dram_peak_bytes_per_s)
    out = {c: 0.0 for c in CLASS_ORDER}
    out["matmul"] = cfg.num_layers * layer_weight_bytes(bc, cfg=cfg) / peak * 1e6
    out["attention"] = cfg.num_layers * layer_kv_bytes(rows, bc, cfg=cfg) / peak * 1e6
    return out


def measured_op_times(path=None) -> dict[str, float]:
    """The notes' per-op table (us), from ``data/op_times.json``."""
    path = DATA_DIR / "op_times.json" if path is None else path
    return {r["op"]: float(r["us"]) for r in json.loads(path.read_text())["rows"]}


def measured_step_ms(path=None) -> float:
    """The notes' traced 64-layer step (incl. I/O), ms, from ``data/step_times.json``."""
    path = DATA_DIR / "step_times.json" if path is None else path
    rows = {r["name"]: r for r in json.loads(path.read_text())["rows"]}
    return float(rows["step_us"]["value"]) / 1e3


def gap_table(hw: Blackhole, fit: FitParams, bc: BlackholeConfig, *, cfg: ExpertConfig,
              measured_ops: dict[str, float] | None = None) -> list[dict]:
    """Rows {class, floor_ms, predicted_ms, measured_ms, gap_ms} per op class, plus the non-op parts
    of the step (trace overlap, lone norm, host I/O) and a 'step' total.

    Class times are per step: op device time x num_layers. ``measured_ms`` uses the notes' per-op
    table (device profiler) where an op is listed, else None; the measured step comes from
    ``data/step_times.json`` (32.5 ms).
    """
    out = jax.device_get(step_breakdown(hw, fit, bc, cfg=cfg))
    fl = floor_us(hw, bc, cfg=cfg)
    L = cfg.num_layers
    rows = []
    for c in CLASS_ORDER:
        ops = [k for k in out["ops"] if OP_CLASS[k] == c]
        pred = L * sum(float(out["ops"][k]) for k in ops) / 1e3
        meas = None
        if measured_ops is not None and all(k in measured_ops for k in ops):
            meas = L * sum(measured_ops[k] for k in ops) / 1e3
        rows.append({"class": c, "ops": ops, "floor_ms": fl[c] / 1e3, "predicted_ms": pred, "measured_ms": meas,
                     "gap_ms": pred - fl[c] / 1e3})
    n_ops = len(out["ops"])
    overlap = -L * n_ops * float(fit.trace_overlap_us) / 1e3
    lone = (float(out["step_device_us"]) - L * float(out["layer_trace_us"])) / 1e3
    io = float(out["step_io_us"]) / 1e3
    for name, v in (("trace overlap", overlap), ("lone rms_norm", lone), ("host I/O", io)):
        rows.append({"class": name, "ops": [], "floor_ms": 0.0, "predicted_ms": v, "measured_ms": None, "gap_ms": v})
    total_floor = sum(fl.values()) / 1e3
    rows.append({"class": "step", "ops": [], "floor_ms": total_floor, "predicted_ms": float(out["step_us"]) / 1e3,
                 "measured_ms": measured_step_ms() if measured_ops is not None else None,
                 "gap_ms": float(out["step_us"]) / 1e3 - total_floor})
    return rows


def format_gap_table(rows: list[dict]) -> str:
    """Text table of ``gap_table`` rows."""
    lines = [f"{'class':16s} {'floor ms':>9s} {'predicted':>10s} {'measured':>9s} {'gap ms':>8s}"]
    for r in rows:
        meas = f"{r['measured_ms']:9.2f}" if r["measured_ms"] is not None else f"{'-':>9s}"
        lines.append(f"{r['class']:16s} {r['floor_ms']:9.2f} {r['predicted_ms']:10.2f} {meas} {r['gap_ms']:8.2f}")
    return "\n".join(lines)
