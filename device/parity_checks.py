"""The parity script's pass / fail rule: one metric row per compared quantity, failing closed.

``metric(golden, got, target)`` counts the non-finite values on *both* sides before any PCC: a NaN
or Inf anywhere is a failure with its counts (two all-NaN tensors do not "agree"), and its PCC and
errors are ``None`` (strict JSON: ``parity.json`` never holds NaN). Otherwise the row carries
``jaxref.numerics.compare``'s PCC / max-abs / rel-Frobenius and passes when the PCC reaches its
target.

Targets (``TARGETS``), PCC of the emulated or chip graph against:

* ``layer`` / ``layer_device``: one layer fed the fp32 golden's input, vs the fp32 golden (exact
  attention) / vs the device-precision golden (the same rounding points: only the order of float32
  operations differs);
* ``velocity`` / ``velocity_device``: the traced step and each *teacher-forced* sample step (both
  sides fed the same x_t), vs the fp32 / device-precision golden: 64 layers of bfp8 rounding (vs the
  device golden, 64 layers of differently ordered float32 / bf16 rounding: below a layer's target);
* ``op``: one op's output vs the device-precision golden's value there (``device.divergence``);
* ``golden_self``: the fp32 golden against itself, v(x_0, t = 0) from two programs that must agree to
  float32 rounding (the layer-input stack and the sample's first, batched step). Not a port check: a
  run whose golden disagrees with itself has numbers that cannot be trusted, so it fails. (Seen with
  glibc malloc tunables that hand freed memory straight to another thread: the golden's stack gave
  PCC 0.98 against its own sample; with glibc's defaults the two agree to 1 - 1e-8.)

The free-running trajectory has no target: the sampler amplifies any difference, the golden's own
(see ``device.trajectory``), so its per-step PCC is reported, never judged.
"""

from __future__ import annotations

import numpy as np

from jaxref.numerics import compare

TARGETS = {"layer": 0.9999, "layer_device": 0.99999, "velocity": 0.99, "velocity_device": 0.999, "op": 0.9999,
           "golden_self": 0.99999}


def metric(golden, got, target: float | None) -> dict:
    """One parity row: {pcc, max_abs, rel_fro, nonfinite_golden, nonfinite_graph, target, pass}.

    golden, got: same-shape float arrays. target: the PCC the row must reach, or None (reported
    only: ``pass`` is then None unless a value is non-finite, which fails any row).
    """
    g, c = np.asarray(golden, np.float32), np.asarray(got, np.float32)
    bad_g, bad_c = int(np.sum(~np.isfinite(g))), int(np.sum(~np.isfinite(c)))
    row = {"nonfinite_golden": bad_g, "nonfinite_graph": bad_c, "target": target}
    if bad_g or bad_c:
        return row | {"pcc": None, "max_abs": None, "rel_fro": None, "pass": False}
    r = compare(g, c)
    ok = None if target is None else bool(r.pcc >= target)
    return row | {"pcc": float(r.pcc), "max_abs": float(r.max_abs), "rel_fro": float(r.rel_fro), "pass": ok}


def failures(res: dict) -> list[str]:
    """Every row of a parity result (``device.parity.run``) that failed, as 'where: why' lines."""
    out = []

    def walk(node, where):
        if isinstance(node, dict):
            if "pass" in node and "nonfinite_graph" in node:
                if node["pass"] is False:
                    out.append(f"{where}: " + describe(node))
                return
            for k, v in node.items():
                walk(v, f"{where}.{k}" if where else k)
        elif isinstance(node, list):
            for j, v in enumerate(node):
                walk(v, f"{where}[{j}]")

    walk(res, "")
    return out


def describe(row: dict) -> str:
    """A row as text: 'PCC 0.9999721 (target 0.9999)' or 'NON-FINITE: 12 in graph, 40 in golden'."""
    if row["nonfinite_golden"] or row["nonfinite_graph"]:
        return f"NON-FINITE: {row['nonfinite_graph']} in graph, {row['nonfinite_golden']} in golden"
    tgt = "" if row["target"] is None else f" (target {row['target']})"
    return f"PCC {row['pcc']:.7f}{tgt}"


def pcc_text(row: dict) -> str:
    """The PCC column of a markdown table: the value, or the non-finite counts."""
    if row["pcc"] is None:
        return f"FAIL non-finite {row['nonfinite_graph']} graph / {row['nonfinite_golden']} golden"
    mark = " FAIL" if row["pass"] is False else ""
    return f"{row['pcc']:.7f}{mark}"


def abs_text(row: dict) -> str:
    return "-" if row["max_abs"] is None else f"{row['max_abs']:.2e}"
