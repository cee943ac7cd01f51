"""Analytic latency of one decoder layer (and a token) on the AHBM mesh, in JAX.

The placement is ``costmodel.ahbm.layer_plan``'s (read its docstring); this module prices each
part of the plan on ``costmodel.hardware.AHBM`` (+ ``layer_plan.MeshSpec``), in microseconds:

* GEMM (one PE's share, all PEs alike): the weights, activations and outputs move through the
  PE's HBM controller (``pe_controller_bytes_per_s x hbm_efficiency``; each transfer lands
  ``dma_local_latency_s`` after it); the engine computes padded 32 x 64 x 32 tiles at
  ``gemm_flops_per_cycle_per_pe x pe_clock_hz``. Streamed through ``composite_runahead_subtiles``
  operand buffers, a sub-tile's period is the slowest of its DMA, its GEMM and the buffer cycle
  (DMA + latency + GEMM) / depth; the GEMM ends at max(all transfers + latency + the last
  sub-tile's GEMM, first sub-tile landed + every period) + the last block's write-back: bound
  'hbm' or 'gemm'.
* collectives: per ring step the chunk's transfer (CUBE NOC ``cube_noc_bytes_per_s``, or UCIe
  ``ucie_bytes_per_s`` shared by the CUBEs behind one SIP-to-SIP link), its latency
  (``cube_noc_transaction_s`` + hops x ``cube_hop_latency_s``; across SIPs ``ucie_transaction_s``
  + ``dma_remote_sip_latency_s``) and, in a reduce-scatter, the add on the receiver's MATH. The
  critical path of a ring over a line of L CUBEs crosses L - 2 one-hop edges and the (L - 1)-hop
  closing edge: 2L - 3 hops. Bound 'noc', 'ucie' (busiest link) or 'latency'.
* element-ops: MATH (``math_elems_per_cycle_per_pe x pe_clock_hz``), bound 'math'.
* attention: ``costmodel.ahbm.cases.case_latency`` of the plan's kernel configuration (x waves),
  its bound the attention model's.

Parts run one after another (each consumes the previous one's output), so a layer is their sum and
a token (decode) or a prompt (prefill) is layers x layer. Every function is jnp in the float fields
of the spec: ``jax.jit`` (plan static), ``jax.vmap`` over specs and ``jax.grad`` work.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from costmodel.ahbm.cases import RESOURCES, case_latency
from costmodel.ahbm.config import is_tile
from costmodel.ahbm.layer_plan import (
    ACT_BYTES,
    WEIGHT_BYTES,
    Attention,
    Collective,
    Elementwise,
    Gemm,
    LayerConfig,
    LayerPlan,
    MeshSpec,
    attention_part,
    check_capacity,
    plan,
)
from costmodel.ahbm.model import evaluate, knobs_of, static_of
from costmodel.hardware import AHBM, ahbm_sip
from costmodel.smooth import Relax, smax

US = 1e6
DECODE_TILES = (128, 256, 512, 1024, 2048)  # attention TILEs the resolver tries
PREFILL_TILES = (32, 64, 128, 256)


def _hbm_rate(hw: AHBM):
    return hw.pe_controller_bytes_per_s * hw.hbm_efficiency / US  # B / us


def _math_rate(hw: AHBM):
    return hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz / US  # elem-ops / us


def _pad(x: int, q: int) -> int:
    return -(-x // q) * q


def _channel_rate(hw: AHBM):
    """One pseudo-channel (B / us): its own rate, capped at the controller's share, x efficiency."""
    n = hw.pseudo_channels_per_pe
    return jnp.minimum(hw.pseudo_channel_bytes_per_s, hw.pe_controller_bytes_per_s / n) * hw.hbm_efficiency / US


def transfer_us(hw: AHBM, nbytes):
    """One DMA of ``nbytes`` on a PE's HBM (transfer only): its ``hbm_interleave_bytes`` chunks go
    round-robin over the pseudo-channels from channel 0, so it lasts as long as the busiest
    channel's share."""
    chunk, n = hw.hbm_interleave_bytes, hw.pseudo_channels_per_pe
    full = jnp.floor(nbytes / chunk)
    rounds = jnp.floor(full / n)
    busiest = jnp.where(full - rounds * n > 0, (rounds + 1.0) * chunk, rounds * chunk + (nbytes - full * chunk))
    return busiest / _channel_rate(hw)


def gemm_times(hw: AHBM, g: Gemm, *, relax: Relax | None = None) -> dict:
    """One PE's GEMM: total and its 'hbm' / 'gemm' rooflines (us)."""
    lat = US * hw.dma_local_latency_s
    flops = hw.gemm_flops_per_cycle_per_pe * hw.pe_clock_hz / US
    tm, tk, tn = int(hw.gemm_tile_m), int(hw.gemm_tile_k), int(hw.gemm_tile_n)
    last_rows = g.rows - (g.blocks - 1) * g.m_block
    rows_pad = (g.blocks - 1) * g.m_block + _pad(last_rows, tm)
    w_bytes = float(g.blocks * g.k * g.n * WEIGHT_BYTES)  # float: byte counts overflow int32
    a_bytes, o_bytes = float(g.rows * g.k * ACT_BYTES), float(g.rows * g.n * ACT_BYTES)
    gemm = 2.0 * rows_pad * _pad(g.k, tk) * _pad(g.n, tn) / flops
    hbm = (w_bytes + a_bytes + o_bytes) / (_channel_rate(hw) * hw.pseudo_channels_per_pe)
    depth = hw.composite_runahead_subtiles
    subs = [min(tk, g.k - i) for i in range(0, g.k, tk)]  # K sub-tiles, the last one ragged
    period = lambda a, e: smax(a, e, (a + lat + e) / depth, relax=relax)  # DMA, GEMM or buffer cycle

    at = (depth - 1) % len(subs)  # the sub-tile whose DMA queues behind the previous block's write-back

    def block(r, behind=0.0):  # an r-row block: its sub-tiles' DMA and GEMM times, the periods inside it
        dma = [transfer_us(hw, float(kk * g.n * WEIGHT_BYTES + r * kk * ACT_BYTES)) for kk in subs]
        eng = [2.0 * _pad(r, tm) * _pad(kk, tk) * _pad(g.n, tn) / flops for kk in subs]
        a = [x + (behind if j == at else 0.0) for j, x in enumerate(dma)]
        return {"dma": sum(dma), "a0": a[0], "e_end": eng[-1], "inner": sum(period(x, e) for x, e in zip(a[1:], eng[:-1])),
                "wb": transfer_us(hw, float(r * g.n * ACT_BYTES))}

    nb = g.blocks - 1  # full blocks before the last (possibly ragged) one
    first = block(g.m_block if nb else last_rows)
    full = block(g.m_block, first["wb"])
    last = block(last_rows, first["wb"]) if nb else first
    # engine side: the first sub-tile lands, then every sub-tile adds its period (a block's write-back
    # delays the DMA booked after it), then the last GEMM
    chain = first["a0"] + lat + first["inner"] + last["e_end"]
    if nb:
        chain = (chain + (nb - 1) * (period(full["a0"], full["e_end"]) + full["inner"])
                 + period(last["a0"], full["e_end"]) + last["inner"])
    # HBM side: every transfer but the last write-back, then the last sub-tile's latency and GEMM
    stream = nb * (first["dma"] + first["wb"]) + last["dma"] + lat + last["e_end"]
    total = smax(stream, chain, relax=relax) + last["wb"] + lat
    return {"total": total, "hbm": hbm, "gemm": gemm}


def _sip_sharing(hw: AHBM, mesh: MeshSpec) -> float:
    """CUBEs whose cross-SIP messages share one UCIe link (the SIP's CUBEs over its links)."""
    return hw.cubes / mesh.sip_links


def collective_times(hw: AHBM, c: Collective, mesh: MeshSpec) -> dict:
    """A ring collective: total and its 'noc' / 'ucie' (busiest link), 'latency' and 'math' rooflines (us)."""
    noc, ucie = hw.cube_noc_bytes_per_s / US, hw.ucie_bytes_per_s / US
    hop, trans = US * hw.cube_hop_latency_s, US * hw.cube_noc_transaction_s
    sip_lat = US * (hw.ucie_transaction_s + hw.dma_remote_sip_latency_s)
    add_rate = _math_rate(hw) * c.pes_per_cube  # the receiving CUBE's PEs share the adds
    share = _sip_sharing(hw, mesh)
    zero = 0.0 * hw.cube_noc_bytes_per_s
    total, lat_roof, math_roof = zero, zero, zero
    link = {"row": zero, "col": zero, "sip": zero}
    if c.kind == "all_reduce":  # reduce-scatter along the lines, all-gather back in reverse
        chunks, held = [], float(c.nbytes)
        for axis, L in c.lines:
            held = held / L
            chunks.append((axis, L, held, True))
        chunks += [(axis, L, ch, False) for axis, L, ch, _ in reversed(chunks)]
    else:  # all-gather: each CUBE starts with nbytes / members
        chunks, held = [], float(c.nbytes) / c.members
        for axis, L in c.lines:
            chunks.append((axis, L, held, False))
            held = held * L
    for axis, L, ch, add in chunks:
        steps = L - 1
        adds = ch / ACT_BYTES / add_rate if add else 0.0
        if axis == "sip":  # ``share`` CUBEs queue on one link: a step lasts their transfers, or one
            # message's transfer + latency + add when that is longer (the link then idles); the
            # last CUBE of the first step waits for the others' transfers
            x = ch / ucie
            step = smax(share * x, x + sip_lat + adds, relax=None)
            total = total + (steps - 1) * step + share * x + sip_lat + adds
            lat_roof = lat_roof + steps * sip_lat
            link[axis] = link[axis] + steps * share * x
        else:  # the ring's closing edge crosses L - 1 hops: its critical path 2L - 3 hops
            x = ch / noc
            total = total + steps * (x + trans + hop + adds) + (L - 2) * hop
            lat_roof = lat_roof + steps * (trans + hop)
            link[axis] = link[axis] + steps * x
        math_roof = math_roof + steps * adds
    return {"total": total, "noc": jnp.maximum(link["row"], link["col"]), "ucie": link["sip"], "latency": lat_roof,
            "math": math_roof}


def elementwise_times(hw: AHBM, e: Elementwise) -> dict:
    t = float(e.elem_ops) / _math_rate(hw)
    return {"total": t, "math": t}


def attention_hw(hw: AHBM, a: Attention) -> AHBM:
    """The spec the attention kernel is evaluated on: the plan's SIP budget."""
    return dataclasses.replace(hw, sips=a.sips)


def attention_times(hw: AHBM, a: Attention, *, relax: Relax | None = None) -> dict:
    """The attention kernel (``case_latency``) x waves: total and the attention model's rooflines."""
    out = case_latency(attention_hw(hw, a), knobs_of(a.cfg), **static_of(a.cfg), relax=relax)
    return {"total": a.waves * out["total"], **{r: a.waves * out[f"{r}_busy"] for r in RESOURCES}}


def part_times(hw: AHBM, part, mesh: MeshSpec, *, relax: Relax | None = None) -> dict:
    """Total and rooflines (us) of one part of a layer plan."""
    if isinstance(part, Gemm):
        return gemm_times(hw, part, relax=relax)
    if isinstance(part, Collective):
        return collective_times(hw, part, mesh)
    if isinstance(part, Elementwise):
        return elementwise_times(hw, part)
    if isinstance(part, Attention):
        return attention_times(hw, part, relax=relax)
    raise TypeError(f"part={part!r}: expected a Gemm, Collective, Elementwise or Attention")


def layer_times(hw: AHBM, layer: LayerPlan, mesh: MeshSpec | None = None, *, relax: Relax | None = None) -> dict:
    """{part name: {'total', rooflines...}} and 'layer' (us): one layer's parts in order."""
    mesh = MeshSpec() if mesh is None else mesh
    out = {p.name: part_times(hw, p, mesh, relax=relax) for p in layer.parts}
    out["layer"] = sum(v["total"] for v in out.values())
    return out


@functools.partial(jax.jit, static_argnames=("layer", "relax"))
def token_latency(hw: AHBM, mesh: MeshSpec, layer: LayerPlan, relax: Relax | None = None):
    """Latency (us) of all the model's layers for one step: a decode token or a prefill prompt."""
    return layer.shape.layers * layer_times(hw, layer, mesh, relax=relax)["layer"]


def resolve(cfg: LayerConfig, hw: AHBM) -> LayerConfig:
    """``cfg`` with its attention TILE chosen (when None): the model's fastest feasible one. A point
    that does not fit the HBM whatever its tile is refused as such (``check_capacity``), and where no
    tile is feasible the message gives each tile's reason."""
    if cfg.attn_tile is not None:
        return cfg
    check_capacity(cfg, hw)
    best, best_t, why = None, float("inf"), {}
    for tile in DECODE_TILES if cfg.phase == "decode" else PREFILL_TILES:
        if not is_tile(tile):
            continue
        c = cfg.replace(attn_tile=tile)
        a = attention_part(c, hw)
        try:
            t = evaluate(a.cfg, attention_hw(hw, a))["latency_us"]
        except ValueError as e:  # infeasible tile (TCM, the attention model's capacity)
            why.setdefault(str(e), []).append(tile)
            continue
        if t < best_t:
            best, best_t = c, t
    if best is None:
        raise ValueError(f"no attention tile of {DECODE_TILES if cfg.phase == 'decode' else PREFILL_TILES} is "
                         f"feasible for {cfg}: " + "; ".join(f"tiles {t}: {m}" for m, t in why.items()))
    return best


def bound_of(times: dict) -> str:
    """The resource with the largest roofline of one part."""
    roofs = {k: float(v) for k, v in times.items() if k != "total"}
    return max(roofs, key=roofs.get)


def evaluate_layer(cfg: LayerConfig, hw: AHBM | None = None, mesh: MeshSpec | None = None) -> dict:
    """Exact latency of an operating point: per part (us, bound, rooflines), layer_us, token_us
    (layers x layer: a decode token / the prefill of the prompt), the capacity check and the plan.
    Raises ValueError when the point does not fit (HBM capacity, attention constraints)."""
    hw = ahbm_sip() if hw is None else hw
    mesh = MeshSpec() if mesh is None else mesh
    cfg = resolve(cfg, hw)
    layer = plan(cfg, hw, mesh)
    att = next(p for p in layer.parts if isinstance(p, Attention))
    evaluate(att.cfg, attention_hw(hw, att))  # raises on the attention model's constraints
    times = layer_times(hw, layer, mesh)
    parts = []
    for p in layer.parts:
        t = times[p.name]
        parts.append({"part": p.name, "us": float(t["total"]), "bound": bound_of(t),
                      "rooflines_us": {k: float(v) for k, v in t.items() if k != "total"}})
    L = layer.shape.layers
    return {"config": cfg, "plan": layer, "parts": parts, "layer_us": float(times["layer"]),
            "token_us": L * float(times["layer"]), "capacity": layer.capacity}


GROUPS = {"attention": ("attention",), "gemm": ("qkv", "out_proj", "ffn_up", "ffn_down"),
          "collectives": ("qkv_gather", "o_gather", "all_reduce_1", "all_reduce_2"),
          "elementwise": ("norm_1", "rope", "residual_norm_2", "swiglu", "residual_2")}


def grouped(parts: list[dict]) -> dict:
    """{group: (us, bound of its largest part)} over ``GROUPS`` of an ``evaluate_layer`` part list."""
    out = {}
    for g, names in GROUPS.items():
        sel = [p for p in parts if p["part"] in names]
        top = max(sel, key=lambda p: p["us"])
        out[g] = (sum(p["us"] for p in sel), f"{top['part']}: {top['bound']}")
    return out


__all__ = ["GROUPS", "attention_hw", "attention_times", "bound_of", "collective_times", "elementwise_times",
           "evaluate_layer", "gemm_times", "grouped", "layer_times", "part_times", "resolve", "token_latency"]
