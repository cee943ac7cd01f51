"""Latency of the four ADR-0060 section-10 cases as JAX functions of the knobs and the AHBM spec.

``case_latency(hw, knobs, case=..., model=..., reduce=..., relax=...)`` returns a dict of times in
microseconds (``total`` plus a breakdown), for one pipelining option per entry of the knob vector
``w`` (weights over ('opt1', 'opt2', 'opt3'); one-hot for a discrete config, a softmax in the
tuner). Knobs are arrays (``seq_len``, ``batch``, ``tile``, ``cubes``, ``pes``, ``w``) so the
function ``jit`` / ``vmap`` / ``grad``-s over them and over every float field of ``hw``.
The case, model, reduce kind and ``causal_skip`` are static.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel.ahbm import counts
from costmodel.ahbm.config import CASES, MODELS, PIPELINES
from costmodel.ahbm.pipeline import (
    ACC_BYTES,
    DTYPE_BYTES,
    US,
    dma_time,
    issues_per_tile,
    sweep_terms,
    tcm_bytes,
    tile_times,
    visits_time,
)
from costmodel.hardware import AHBM
from costmodel.smooth import Relax, smax
from jaxref.validation import check_choice

MERGE_ELEMS_PER_ROW = 3  # x head_dim, + 6: rescale both O's and add; m, l and two exps
MERGE_ELEMS_ROW_FIXED = 6


def _math_s(hw: AHBM, elems):
    return US * elems / (hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz)


def _bilinear(table, x, y):
    """table [nx, ny] at fractional indices (x, y), clipped to the grid; exact at integers."""
    nx, ny = table.shape
    x = jnp.clip(x, 0.0, nx - 1.0)
    y = jnp.clip(y, 0.0, ny - 1.0)
    x0 = jnp.clip(jnp.floor(x), 0, nx - 2).astype(jnp.int32) if nx > 1 else jnp.zeros((), jnp.int32)
    y0 = jnp.clip(jnp.floor(y), 0, ny - 2).astype(jnp.int32) if ny > 1 else jnp.zeros((), jnp.int32)
    fx, fy = x - x0, y - y0
    x1, y1 = jnp.minimum(x0 + 1, nx - 1), jnp.minimum(y0 + 1, ny - 1)
    return ((1 - fx) * (1 - fy) * table[x0, y0] + fx * (1 - fy) * table[x1, y0]
            + (1 - fx) * fy * table[x0, y1] + fx * fy * table[x1, y1])


def reduce_time(hw: AHBM, cubes, pes, payload_bytes, merge_rows, head_dim: int, kind: str, *,
                relax: Relax | None):
    """Data-driven reduce latency over the plan's critical paths (``counts.reduce_paths``),
    bilinear in (log2 C, log2 P) between the plans at powers of two (exact there)."""
    t2 = US * (hw.dma_local_latency_s + payload_bytes / hw.ipcq_bytes_per_s)
    t1 = US * (hw.ucie_transaction_s + payload_bytes / hw.ucie_bytes_per_s)
    merge = _math_s(hw, merge_rows * (MERGE_ELEMS_PER_ROW * head_dim + MERGE_ELEMS_ROW_FIXED))
    cost = jnp.stack(jnp.broadcast_arrays(t2, t1, US * hw.cube_hop_latency_s, merge))
    paths = jnp.asarray(counts.reduce_table(kind))  # [5, 4, k, 4]
    per_path = paths @ cost  # [5, 4, k]
    if relax is None:
        grid = jnp.max(per_path, axis=-1)
    else:
        grid = smax(*[per_path[..., i] for i in range(per_path.shape[-1])], relax=relax) \
            if per_path.shape[-1] > 1 else per_path[..., 0]
    return _bilinear(grid, jnp.log2(cubes), jnp.log2(pes))


def _per_option(hw, rows, te, d, relax, fn):
    """fn(terms) for each pipelining option, stacked on a leading axis of 3."""
    t = tile_times(hw, rows, te, d, relax=relax)
    return jnp.stack(jnp.broadcast_arrays(*[fn(sweep_terms(t, p, relax=relax)) for p in PIPELINES])), t


def case_latency(hw: AHBM, knobs: dict, *, case: str, model: str = "llama3_70b", reduce: str = "tree",
                 relax: Relax | None = None, causal_skip: bool = True) -> dict:
    """Times (us) of one configuration: total, sweep, reduce / ring, io, and engine busy times."""
    geom, _ = MODELS[model]
    G, d = geom.group, geom.head_dim
    S, B, tile, w = knobs["seq_len"], knobs["batch"], knobs["tile"], knobs["w"]
    C, P = knobs["cubes"], knobs["pes"]
    out = {}
    if case in ("decode", "decode_sp"):
        ranks = C * P if case == "decode_sp" else jnp.ones_like(S)
        n, te = counts.decode_counts(S, tile, ranks, relax=relax)
        rows = G
        # visits of one tile: all when n = 1; relaxed, linear between n = 1 and n = 2
        single = B * (jnp.where(n <= 1, 1.0, 0.0) if relax is None else jnp.clip(2.0 - n, 0.0, 1.0))
        pre = dma_time(hw, rows * d * DTYPE_BYTES)
        sweeps, t = _per_option(hw, rows, te, d, relax,
                                lambda tr: visits_time(tr, B * n, B, single, pre))
        sweep = jnp.tensordot(w, sweeps, 1)
        red = 0.0 * S
        if case == "decode_sp":
            payload = B * rows * (d + 2) * ACC_BYTES
            red = reduce_time(hw, C, P, payload, B * rows, d, reduce, relax=relax)
        post = _math_s(hw, B * rows * d) + dma_time(hw, B * rows * d * DTYPE_BYTES)
        out.update(sweep=sweep, reduce=red, io=post, tiles=B * n)
        total = sweep + red + post
    elif case == "prefill":
        tiles, visits, single, te = counts.prefill_counts(S, tile, causal_skip=causal_skip, relax=relax)
        rows = G * te
        over = 2 * dma_time(hw, rows * d * DTYPE_BYTES) + _math_s(hw, rows * d)
        sweeps, t = _per_option(hw, rows, te, d, relax, lambda tr: visits_time(tr, tiles, visits, single, over))
        total = B * jnp.tensordot(w, sweeps, 1)
        out.update(sweep=total, reduce=0.0 * S, io=0.0 * S, tiles=B * tiles)
    elif case == "prefill_sp":
        total, ring, t, tiles = ring_latency(hw, S, tile, G, P, d, w, relax=relax)
        total = B * total
        out.update(sweep=total, reduce=B * ring, io=0.0 * S, tiles=B * tiles)
        te = jnp.minimum(tile, S / G)
        rows = te
    else:
        check_choice("case", case, CASES)
        raise AssertionError(case)  # a case in CASES without a branch here
    issues = jnp.asarray([issues_per_tile(p) for p in PIPELINES], jnp.float32) @ w
    out.update(total=total, gemm_busy=out["tiles"] * (t["g1"] + t["g2"]),
               hbm_busy=out["tiles"] * (t["LK"] + t["LV"]), math_busy=out["tiles"] * (t["m_s"] + t["m_o"]),
               cpu_issue=out["tiles"] * issues * t["c"],
               tcm_bytes=jnp.tensordot(w, jnp.stack(jnp.broadcast_arrays(
                   *[tcm_bytes(rows, te, d, p) for p in PIPELINES])), 1))
    return out


def ring_latency(hw: AHBM, S, tile, C: int, P, d: int, w, *, relax: Relax | None):
    """Prefill-SP ring over C = G CUBEs: per (CUBE c, step s) the busiest PE's work on block
    b = (c - s) mod C; CUBE c sends its held block to c + 1 when it starts a step (the link
    serialises its sends) and starts step s once it finished step s - 1 and received the block.
    A block's work is the ``w``-weighted sum over pipelining options (exact for a one-hot ``w``).
    Returns (total, mean exposed ring wait per CUBE, tile times, tiles of the busiest PE)."""
    te = jnp.minimum(tile, S / C)
    rows = te
    t = tile_times(hw, rows, te, d, relax=relax)
    over = (dma_time(hw, rows * d * DTYPE_BYTES + rows * (d + 2) * ACC_BYTES)
            + dma_time(hw, rows * (d + 2) * ACC_BYTES))
    blocks = counts.ring_block_counts(jnp.expand_dims(S, -1), jnp.expand_dims(te, -1), C, jnp.expand_dims(P, -1),
                                      jnp.arange(C, dtype=jnp.result_type(float)), relax=relax)  # each [..., C]
    xfer = US * 2 * (S / C) * d * DTYPE_BYTES / hw.ucie_bytes_per_s
    lat = US * (hw.cube_hop_latency_s + hw.ucie_transaction_s)
    final = jnp.maximum(counts.sceil(S / te / P, relax=relax), 1.0) * (
        _math_s(hw, rows * d) + dma_time(hw, rows * d * DTYPE_BYTES))
    mx = lambda *a: smax(*a, relax=relax)
    # work[b]: the busiest PE's time on block b; at step s CUBE c holds block (c - s) mod C
    tb = {k: jnp.expand_dims(v, -1) for k, v in t.items()}
    work = sum(w[i] * visits_time(sweep_terms(tb, p, relax=relax), *blocks, jnp.expand_dims(over, -1))
               for i, p in enumerate(PIPELINES))
    # The recurrence runs on per-CUBE scalars (lists), not a rolled [C] axis: XLA vectorises the
    # former over a vmapped batch far better than a roll along a short minor axis.
    w_b = [work[..., b] for b in range(C)]
    done = list(w_b)  # step 0: CUBE c on block c
    start, send_end = [0.0 * xfer] * C, [0.0 * xfer] * C
    wait = 0.0 * xfer
    for s in range(1, C):
        send_end = [(start[c] if s == 1 else mx(start[c], send_end[c])) + xfer for c in range(C)]
        start = [mx(done[c], send_end[c - 1] + lat) for c in range(C)]  # c - 1 = C - 1 for c = 0
        wait = wait + sum(start[c] - done[c] for c in range(C)) / C
        done = [start[c] + w_b[(c - s) % C] for c in range(C)]
    end = mx(*done) if C > 1 else done[0]
    totals, waits = end + final, wait
    tiles = jnp.sum(blocks[0], -1)
    return totals, waits, t, tiles
