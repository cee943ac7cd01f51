"""First divergence: a layer of the graph compared op by op with the golden's intermediates.

``localise(ex, i, x, caches, golden_layer)`` runs layer i once, eagerly, through ``Taps`` - a proxy
of the op namespace (``ttnn`` or the emulation) that reads back the output of each of the 19
device ops in call order (named as ``costmodel.blackhole.graph.LAYER_OPS``) - and the golden
``decoder_layer`` with its ``tap`` callback at the same boundaries; each op's output is compared
(``device.parity_checks.metric``) with the golden's value there, laid out as the device holds it
([1, heads, T, H], [1, 1, T, width]). The first op below ``TARGETS['op']`` is the first divergence.
Each op reads the graph's *own* previous outputs, so everything after the first wrong op fails too;
only the first is named.

Golden boundary of each op: rms_norm -> input_norm; wqkv -> the q, k, v projections side by side;
nlp_create_qkv_heads -> q, k, v as heads; q_norm, k_norm, rope_q, rope_k; fill_cache_k / _v -> the
rows written ([Smax - T, Smax) of the cache) vs the roped k / v; attention; concat_heads -> the
attention output as [T, N H]; wo; add; rms_norm2 -> post_norm; w1 (SiLU fused) -> silu(gate); w3 ->
up; mul; w2 -> down; add2 -> out.
"""

from __future__ import annotations

import numpy as np

from costmodel.blackhole.graph import LAYER_OPS
from device.host import read_host
from device.parity_checks import TARGETS, metric
from device.recorder import DEVICE_OPS

TARGETS_OP = TARGETS["op"]


class Taps:
    """Forwards every attribute of ``ns``; the outputs of its device ops (views excepted) are read
    back to the host in call order (``outputs``: (op name, [arrays])). ``fill_cache`` returns the
    whole cache: only the rows it wrote are kept."""

    def __init__(self, ns, *, prefix: str = "", outputs: list | None = None, root=None):
        self._ns, self._prefix, self._root = ns, prefix, ns if root is None else root
        self.outputs = [] if outputs is None else outputs

    def __getattr__(self, name):
        attr = getattr(self._ns, name)
        full = self._prefix + name
        if full in ("experimental", "transformer"):
            return Taps(attr, prefix=full + ".", outputs=self.outputs, root=self._root)
        if full not in DEVICE_OPS or full == "reshape":
            return attr
        root = self._root

        def op(*args, **kwargs):
            out = attr(*args, **kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            vals = [read_host(root, t) for t in outs]
            if full == "fill_cache":
                start = kwargs.get("update_idx", 0)
                vals = [vals[0][:, :, start:start + args[1].shape[2]]]
            self.outputs.append((full, vals))
            return out

        return op


def device_layout(name: str, gold: dict, cfg, kv_fmt_cast) -> list[np.ndarray]:
    # (one entry per LAYER_OPS name; the golden's dict holds numpy arrays, "qkv" a tuple)
    """The golden's value at op ``name`` in the device's layout (see the module docstring)."""
    T = cfg.num_tokens

    def heads(a):  # [T, n, H] -> [1, n, T, H]
        return np.asarray(a).transpose(1, 0, 2)[None]

    def flat(a):  # [T, ...] -> [1, 1, T, width]
        return np.asarray(a).reshape(1, 1, T, -1)

    q, k, v = gold["qkv"]
    return {
        "rms_norm": lambda: [flat(gold["input_norm"])],
        "wqkv": lambda: [np.concatenate([flat(q), flat(k), flat(v)], axis=-1)],
        "nlp_create_qkv_heads": lambda: [heads(q), heads(k), heads(v)],
        "q_norm": lambda: [heads(gold["q_norm"])], "k_norm": lambda: [heads(gold["k_norm"])],
        "rope_q": lambda: [heads(gold["rope_q"])], "rope_k": lambda: [heads(gold["rope_k"])],
        "fill_cache_k": lambda: [kv_fmt_cast(heads(gold["rope_k"]))], "fill_cache_v": lambda: [kv_fmt_cast(heads(v))],
        "attention": lambda: [heads(gold["attention"])], "concat_heads": lambda: [flat(gold["attention"])],
        "wo": lambda: [flat(gold["wo"])], "add": lambda: [flat(gold["add"])],
        "rms_norm2": lambda: [flat(gold["post_norm"])], "w1": lambda: [flat(gold["silu_gate"])],
        "w3": lambda: [flat(gold["up"])], "mul": lambda: [flat(gold["mul"])], "w2": lambda: [flat(gold["down"])],
        "add2": lambda: [flat(gold["out"])],
    }[name]()


def localise(ex, i: int, x: np.ndarray, caches, golden_layer, *, kv_fmt_cast=lambda a: a,
             target: float = TARGETS_OP) -> dict:
    """Layer i of ``ex`` (a ``TTExpert``) on input x [T, D] op by op against ``golden_layer(tap)``
    (the golden ``decoder_layer`` of layer i on the same input, called with ``tap``).

    kv_fmt_cast: rounds an array to the cache format (the rows fill_cache writes are in it).
    Returns {"ops": [{op, pcc, max_abs, ...}] in graph order, "first_divergence": the first op
    below target with its PCC / max-abs, or None}.
    """
    gold: dict = {}

    def tap(name, value):
        gold[name] = value if isinstance(value, tuple) else np.asarray(value, np.float32)
        return value

    golden_layer(tap)
    taps = Taps(ex.ns)
    saved = ex.ns, ex.layer_fn
    try:
        ex.ns, ex.layer_fn = taps, ex.layer
        ex.run_layer(i, x, caches)
    finally:
        ex.ns, ex.layer_fn = saved
    if len(taps.outputs) != len(LAYER_OPS):
        raise ValueError(f"layer {i} issued {len(taps.outputs)} device ops, expected the {len(LAYER_OPS)} of LAYER_OPS")
    rows, first = [], None
    for name, (_, got) in zip(LAYER_OPS, taps.outputs, strict=True):
        want = device_layout(name, gold, ex.cfg, kv_fmt_cast)
        m = metric(np.concatenate([w.ravel() for w in want]), np.concatenate([g.ravel() for g in got]), target)
        rows.append({"op": name} | m)
        if first is None and m["pass"] is False:
            first = rows[-1]
    return {"layer": i, "ops": rows, "first_divergence": first}
