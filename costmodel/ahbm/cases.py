"""Latency of the four ADR-0060 section-10 cases as JAX functions of the knobs and the AHBM spec.

``case_latency(hw, knobs, case=..., model=..., reduce=..., placement=..., mesh=..., relax=...)``
returns a dict of times in microseconds (``total`` plus a breakdown and each resource's busy
time on the critical PE / link: its roofline), for one pipelining option per entry of the knob
vector ``w`` (weights over ('opt1', 'opt2', 'opt3'); one-hot for a discrete config, a softmax in
the tuner). Knobs are arrays (``seq_len``, ``batch``, ``tile``, ``cubes``, ``pes``, ``w``, and
``capacity`` for the contiguous placement) so the function ``jit`` / ``vmap`` / ``grad``-s over
them and over every float field of ``hw``. Case, model, reduce kind, placement, sub-mesh
orientation and ``causal_skip`` are static. Ragged tiles / q blocks use their real key / row
counts (relaxed: the last tile's keys = keys - (n - 1) TILE with the relaxed tile count n).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.ahbm import counts
from costmodel.ahbm.config import CASES, MODELS, PIPELINES, WEIGHT_BYTES, allowed_pipelines
from costmodel.ahbm.pipeline import (
    ACC_BYTES,
    DTYPE_BYTES,
    US,
    dma_time,
    hbm_rate,
    q_load_time,
    sweep_terms,
    tcm_bytes,
    tile_busy,
    tile_times,
    visit_time,
    visits_time,
)
from costmodel.hardware import AHBM
from costmodel.smooth import Relax, sceil, smax, smin
from jaxref.validation import check_choice

# merge() of ADR-0060 section 4 on MATH, per row: 3 x head_dim (O_a * sa, O_b * sb, +) and 8 row
# ops (maximum, two (sub, exp), l_a * sa, l_b * sb, +)
MERGE_ELEMS_PER_ROW = 3
MERGE_ELEMS_ROW_FIXED = 8
ROOT_ISSUES = 2  # the root's O / l and tl.store
RESOURCES = ("hbm", "gemm", "math", "tcm", "cpu_issue", "links")


def graph_options(case: str, reduce: str, placement: str, mesh: str) -> dict:
    """The static options that shape ``case``'s graph: the reduce kind, placement and sub-mesh
    orientation enter decode-SP only (decode and prefill run on one PE, the ring places keys by
    block), so elsewhere they are set to their defaults and every choice shares one compilation."""
    if case == "decode_sp":
        return {"reduce": reduce, "placement": placement, "mesh": mesh}
    return {"reduce": "tree", "placement": "round_robin", "mesh": "wide"}


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


def _reduce_cost(hw: AHBM, payload_bytes, merge_rows, head_dim: int):
    """Cost (us) of one unit of each ``counts.PATH_COLUMNS`` entry (``payload_bytes``: the whole
    (O, m, l) triplet; O is ``merge_rows`` x ``head_dim`` fp32, m and l ``merge_rows`` fp32 each)."""
    small = merge_rows * ACC_BYTES
    big = payload_bytes - 2.0 * small
    merge = _math_s(hw, merge_rows * (MERGE_ELEMS_PER_ROW * head_dim + MERGE_ELEMS_ROW_FIXED))
    return jnp.stack(jnp.broadcast_arrays(
        US * hw.dma_local_latency_s, US * big / hw.ipcq_bytes_per_s, US * hw.cube_noc_transaction_s,
        US * big / hw.cube_noc_bytes_per_s, US * hw.cube_hop_latency_s, merge, US * hw.cpu_issue_s,
        US * small / hw.ipcq_bytes_per_s, US * small / hw.cube_noc_bytes_per_s))


def replay_unit(cost) -> tuple | None:
    """The reduce's column costs (``_reduce_cost``) as the replay order's key (``counts._reduce_graph``:
    which transfer a queue serves first depends on the rates): the values to 3 significant digits
    when they are concrete; None under a trace (a gradient or vmap over the hardware), where the
    default order (``counts.LINKS_LIMIT``) serves, exact wherever the rates replay to it."""
    if isinstance(cost, jax.core.Tracer):
        return None
    return tuple(float(f"{float(x):.3g}") for x in np.asarray(cost))


def _concrete_grid_point(cubes, pes) -> tuple[int, int] | None:
    """(C, P) when both are concrete grid values, else None (traced or relaxed knobs)."""
    if isinstance(cubes, jax.core.Tracer) or isinstance(pes, jax.core.Tracer):
        return None
    C, P = float(cubes), float(pes)
    if C in counts.C_GRID and P in counts.P_GRID:
        return int(C), int(P)
    return None


def _rank_starts(point: tuple[int, int], segments: list, placement: str) -> list | None:
    """Each physical rank's sweep end from ``sweep_then_reduce``'s segments, or None when one is
    traced."""
    values = [x for _, t, sw in segments for x in (t, sw)]
    if any(isinstance(x, jax.core.Tracer) for x in values):
        return None
    R = point[0] * point[1]
    order = counts.rank_order(*point, placement)
    starts = [0.0] * R
    for name, t, sweep in segments:
        t = int(np.clip(round(float(t)), 0, R))
        span = {"prefix": range(t), "single": range(t, min(t + 1, R)), "suffix": range(t, R)}[name]
        for pos in span:
            starts[order[pos]] = float(sweep)
    return starts


def replay_offsets(starts: list, rtol: float = 1e-3) -> tuple:
    """The ranks' sweep ends as the reduce's queue-order replay reads them: ends within ``rtol`` of a
    later one replay as ties with it, then 4 significant digits. Ranks whose key counts differ by one
    end a few ns apart, far less than one message's transfer; ordered by those ends, the replay served
    the later ones a whole message behind at every queue (seed 12 ``links-173``: +16 us, +18.6%)
    where the simulation, with the same stagger, is within 0.4% of the tie. Only the order reads
    these; each rank's path is priced from its own end."""
    out = list(starts)
    top = None
    for i in sorted(range(len(out)), key=lambda i: -out[i]):
        if top is None or out[i] < top * (1.0 - rtol):
            top = out[i]
        out[i] = top
    return tuple(float(f"{x:.4g}") for x in out)


def reduce_time(hw: AHBM, cubes, pes, payload_bytes, merge_rows, head_dim: int, kind: str, orientation: str, *,
                relax: Relax | None):
    """Data-driven reduce latency when every rank ends its sweep at once, over the plan's critical
    paths (``counts.reduce_paths``, with per-round link contention), bilinear in (log2 C, log2 P)
    between the plans at powers of two (exact there; at concrete hardware and (C, P), the queue
    order replayed at its own rates). Returns (latency, busiest CUBE-NOC resource's busy time)."""
    cost = _reduce_cost(hw, payload_bytes, merge_rows, head_dim)
    unit1 = US * payload_bytes / hw.cube_noc_bytes_per_s
    unit, point = replay_unit(cost), _concrete_grid_point(cubes, pes)
    if unit is not None and point is not None and relax is None:
        paths = jnp.asarray(counts.reduce_paths(*point, kind, orientation, unit))
        return jnp.max(paths @ cost), counts.link_load(*point, kind, orientation) * unit1
    paths = jnp.asarray(counts.reduce_table(kind, orientation))  # [5, 4, k, 9]
    per_path = paths @ cost  # [5, 4, k]
    if relax is None or per_path.shape[-1] == 1:
        grid = jnp.max(per_path, axis=-1)
    else:
        grid = smax(*[per_path[..., i] for i in range(per_path.shape[-1])], relax=relax)
    loads = jnp.asarray(np.array([[counts.link_load(C, P, kind, orientation) for P in counts.P_GRID]
                                  for C in counts.C_GRID]))
    lc, lp = jnp.log2(cubes), jnp.log2(pes)
    return _bilinear(grid, lc, lp), _bilinear(loads, lc, lp) * unit1


def sweep_then_reduce(hw: AHBM, cubes, pes, segments: list, payload_bytes, merge_rows, head_dim: int, kind: str,
                      orientation: str, placement: str):
    """Exact end (us) of the data-driven reduce when ranks finish their sweeps at their own times:
    max over the placement's rank segments (``counts.segment_rows``; ``segments`` lists
    (segment name, index t, sweep end of its ranks)) of the sweep end plus the segment's longest
    path from those ranks (max-plus over ranks; C, P powers of two). At concrete hardware and
    (C, P) the queue order is replayed at its own rates, else the default order's tables serve."""
    cost = _reduce_cost(hw, payload_bytes, merge_rows, head_dim)
    unit, point = replay_unit(cost), _concrete_grid_point(cubes, pes)
    end = 0.0
    starts = _rank_starts(point, segments, placement) if unit is not None and point is not None else None
    if starts is not None:  # every rank's own start: replay the order from them, price each rank's paths
        per = counts.origin_paths(*point, kind, orientation, unit, replay_offsets(starts))
        k = max(len(p) for p in per)
        rows = np.zeros((len(per), k, len(counts.PATH_COLUMNS)))
        for r, p in enumerate(per):
            rows[r, : len(p)] = p
        sweep = jnp.stack([jnp.asarray(x, dtype=jnp.float32) for x in starts])
        return jnp.max(sweep + jnp.max(jnp.asarray(rows) @ cost, axis=-1))
    rows, nonempty = (jnp.asarray(a) for a in counts.segment_tables(kind, orientation, placement))
    ic = jnp.clip(jnp.round(jnp.log2(cubes)), 0, len(counts.C_GRID) - 1).astype(jnp.int32)
    ip = jnp.clip(jnp.round(jnp.log2(pes)), 0, len(counts.P_GRID) - 1).astype(jnp.int32)
    for name, t, sweep in segments:
        seg = counts.SEGMENTS.index(name)
        ti = jnp.clip(t, 0, rows.shape[3] - 1).astype(jnp.int32)
        longest = jnp.max(rows[ic, ip, seg, ti] @ cost, axis=-1)
        end = jnp.maximum(end, jnp.where(nonempty[ic, ip, seg, ti] > 0, sweep + longest, 0.0))
    return end


def tile_count(keys, te, *, relax: Relax | None):
    """(tiles n, keys of the last tile): exact, ceil(keys / te) tiles with a ragged last one;
    relaxed, the fractional count keys / te of full tiles (smooth: the ragged sawtooth of the
    exact form, linear in TILE between tile-count steps, would dominate a gradient)."""
    if relax is None:
        n = jnp.ceil(keys / te)
        return n, keys - (n - 1.0) * te
    return keys / te, te + 0.0 * keys


def _per_option(hw: AHBM, fn, w) -> list:
    """[fn(p) for p in PIPELINES], traced only for the options that can weigh in: the ones the
    hardware's commands allow (opt2 needs ex_composite) and, where ``w`` is a concrete one-hot (a
    discrete config priced eagerly: ``evaluate``), its own option only. A skipped option takes the
    value of one computed; every caller weighs the list by ``w``, so a 0-weighted copy changes no
    result (0 * x = 0 for the finite x the options give), and a config weighing a disallowed option
    violates the 'commands' constraint whatever its latency. The saving: a sweep or search's graph
    loses the options the hardware lacks, an eager evaluation two thirds of its operations."""
    allowed = list(allowed_pipelines(hw))  # in PIPELINES order
    if not isinstance(w, jax.core.Tracer):
        wv = np.asarray(w)
        if wv.shape == (len(PIPELINES),) and np.all((wv == 0) | (wv == 1)) and wv.sum() == 1:
            chosen = PIPELINES[int(np.argmax(wv))]
            allowed = [chosen if chosen in allowed else allowed[0]]
    val = {p: fn(p) for p in allowed}
    return [val.get(p, val[allowed[0]]) for p in PIPELINES]


def _options(fn):
    """fn(pipeline) for each pipelining option, stacked on a leading axis of 3."""
    return jnp.stack(jnp.broadcast_arrays(*[fn(p) for p in PIPELINES]))


def _busy(t: dict, count, pipeline: str) -> dict:
    """Resource busy time of ``count`` tiles of times ``t`` (HBM, GEMM, MATH, TCM port, CPU issue)."""
    return {k: count * v for k, v in tile_busy(t, pipeline).items()}


def _ragged(keys, te):
    """1.0 where a tile holds fewer keys than the tile size (partial: the plan masks its padding)."""
    return jnp.where(keys < te - 0.5, 1.0, 0.0)


def ending_on(f: dict, fm: dict) -> dict:
    """Sweep terms of visits whose last tile is partial: the steady and first tiles' from ``f``,
    the last, single and drain terms from the partial tile's ``fm``."""
    return {**f, "single": fm["single"], "last": fm["last"], "drain": fm["drain"]}


def _wsum(w, per_option: list):
    return jnp.tensordot(w, jnp.stack(jnp.broadcast_arrays(*per_option)), 1)


def case_latency(hw: AHBM, knobs: dict, *, case: str, model: str = "llama3_70b", reduce: str = "tree",
                 placement: str = "round_robin", mesh: str = "wide", relax: Relax | None = None,
                 causal_skip: bool = True, queries: int = 1) -> dict:
    """Times (us) of one configuration: total, sweep, reduce / ring, io, the per-resource busy
    times of the critical PE (``<resource>_busy``, the rooflines), TCM bytes and the SIP use."""
    geom, _ = MODELS[model]
    G, d, Hkv = geom.group, geom.head_dim, geom.num_kv_heads
    S, B, tile, w = knobs["seq_len"], knobs["batch"], knobs["tile"], knobs["w"]
    C, P = knobs["cubes"], knobs["pes"]
    mn = lambda a, b: jnp.minimum(a, b) if relax is None else smin(a, b, relax=Relax(relax.tau_int, 1.0))
    out = {}
    if case in ("decode", "decode_sp"):
        ranks = C * P if case == "decode_sp" else jnp.ones_like(S)
        contiguous = case == "decode_sp" and placement == "contiguous"
        if contiguous:  # ranks fill in turn: ceil(capacity / R) slots each (KVPlacement.slots_per_rank)
            slots = sceil(knobs.get("capacity", S) / ranks, relax=relax)
            keys = mn(S, slots)
        else:  # round-robin: the first S mod R ranks hold one key more
            keys = sceil(S / ranks, relax=relax)
        te = mn(tile, keys)
        n, k_last = tile_count(keys, te, relax=relax)
        rows = G * queries  # T query tokens x G heads M-folded (static: the engine tile padding is exact)
        tf = tile_times(hw, rows, te, d, relax=relax)
        pre = q_load_time(hw, rows * d * DTYPE_BYTES)

        def last_tile(k):  # the partial last tile of k keys (its padding masked)
            return tile_times(hw, rows, k, d, masked=_ragged(k, te), relax=relax)

        def sweep_of(tr_, n_):
            return B * (pre + _wsum(w, _per_option(hw, lambda p: visit_time(tf, tr_, n_, p, relax=relax), w)))

        # exact decode-SP: the ranks end their sweeps at their own times (ragged keys, empty ranks), so a
        # second rank's sweep is priced next to the critical (first) one's: both in one batched trace (the
        # full tiles' terms, which they share, traced once; the graph's size is its compile time)
        other = case == "decode_sp" and relax is None
        if other:
            if contiguous:  # ranks < f full, rank f the rest, ranks > f empty
                f = jnp.floor(S / slots)
                k_other = S - f * slots
            else:  # local indices < t hold q + 1 keys (the critical rank's, when t > 0), the others q
                q = jnp.floor(S / ranks)
                t = S - q * ranks
                k_other = q
            n_o, k_last_o = tile_count(jnp.maximum(k_other, 1.0), te, relax=None)  # a rank of k > 0 keys

            def rank_sweep(k, n_):  # a rank's last tile (of k keys) and its sweep of n_ tiles
                t_ = last_tile(k)
                return t_, sweep_of(t_, n_)

            (tr, sweep), (_, sweep_o) = _each(rank_sweep, [k_last, k_last_o], [n, n_o])
            sweep_o = jnp.where(k_other > 0, sweep_o, 0.0)  # 0 keys: no sweep
        else:
            tr = last_tile(k_last)
            sweep = sweep_of(tr, n)  # the critical (first) rank's
        post = _math_s(hw, B * rows * d) + dma_time(hw, B * rows * d * DTYPE_BYTES)
        red, link = 0.0 * S, 0.0 * S
        if case == "decode_sp":
            payload = B * rows * (d + 2) * ACC_BYTES
            post = post + ROOT_ISSUES * US * hw.cpu_issue_s
            red, link = reduce_time(hw, C, P, payload, B * rows, d, reduce, mesh, relax=relax)
            if other:
                segs = ([("prefix", f, sweep), ("single", f, sweep_o), ("suffix", f + 1.0, 0.0)] if contiguous
                        else [("prefix", t, sweep), ("suffix", t, sweep_o)])
                end = sweep_then_reduce(hw, C, P, segs, payload, B * rows, d, reduce, mesh, placement)
                red = end - sweep
        busy = [{k: B * (v + _busy(tr, 1.0, p)[k]) for k, v in _busy(tf, n - 1.0, p).items()} for p in PIPELINES]
        io_bytes = B * rows * d * DTYPE_BYTES * 2
        out.update(sweep=sweep, reduce=red, io=post, tiles=B * n, link_busy=link, cubes_used=Hkv * C,
                   hbm_extra=io_bytes / hbm_rate(hw), math_extra=_math_s(hw, B * rows * d))
        total = sweep + red + post
        tcm = _wsum(w, [tcm_bytes(hw, rows, te, d, p) for p in PIPELINES])
    elif case == "prefill":
        te = mn(tile, S)
        n, r = tile_count(S, te, relax=relax)  # r: rows of the last q block = keys of the last tile
        rows, rows_r = G * te, G * r
        # a q block's diagonal tile (its last) is partial, and so is every tile computed past it
        # without the causal skip (the ragged last tile included)
        # (rows, keys, masked) of: full rows, full keys; ... a partial tile; full rows, ragged keys; ragged
        # rows, full keys; ragged rows, ragged keys (the diagonal): one batched trace for the five
        tf, tfm, tfr, trf, trr = _each(lambda R, k, m: tile_times(hw, R, k, d, masked=m, relax=relax),
                                       [rows, rows, rows, rows_r, rows_r], [te, te, r, te, r], [0.0, 1.0, 1.0, 0.0, 1.0])
        over = lambda R: q_load_time(hw, R * d * DTYPE_BYTES) + dma_time(hw, R * d * DTYPE_BYTES) + _math_s(hw, R * d)
        nf = n - 1.0  # full-row q blocks
        # without the skip, full-row block i computes tiles i..n-2 under the mask besides the last
        masked_mid = 0.0 if causal_skip else nf * n / 2

        def one(p):
            last_block = over(rows_r) + visit_time(trf, trr, n, p, relax=relax)
            f, fm = _each(lambda t_: sweep_terms(t_, p, relax=relax), [tf, tfm])
            if causal_skip:  # q block i < n - 1 sees i + 1 full tiles, the last its diagonal one
                full_blocks = visits_time(ending_on(f, fm), nf * n / 2, nf, jnp.minimum(nf, 1.0), over(rows))
            else:  # every block sees all n tiles, the last one ragged
                full_blocks = nf * (over(rows) + visit_time(tf, tfr, n, p, relax=relax)) + masked_mid * (fm["D"] - f["D"])
            return full_blocks + last_block

        total = B * _wsum(w, _per_option(hw, one, w))
        full_tiles = nf * n / 2 if causal_skip else nf * (n - 1.0)
        diag = nf if causal_skip else masked_mid  # masked full-row, full-key tiles
        busy = []
        for p in PIPELINES:
            parts = [_busy(tf, full_tiles - diag, p), _busy(tfm, diag, p), _busy(trf, n - 1.0, p), _busy(trr, 1.0, p)]
            if not causal_skip:
                parts.append(_busy(tfr, nf, p))
            busy.append({k: B * sum(x[k] for x in parts) for k in parts[0]})
        tiles = full_tiles + n + (0.0 if causal_skip else nf)
        out.update(sweep=total, reduce=0.0 * S, io=0.0 * S, tiles=B * tiles, link_busy=0.0 * S,
                   hbm_extra=B * n * 2 * rows * d * DTYPE_BYTES / hbm_rate(hw), math_extra=B * n * _math_s(hw, rows * d))
        tcm = _wsum(w, [tcm_bytes(hw, rows, te, d, p) for p in PIPELINES])
    elif case == "prefill_sp":
        ring = ring_latency(hw, S, tile, G, P, d, w, relax=relax)
        total = B * ring["total"]
        busy = [{k: B * v for k, v in b.items()} for b in ring["busy"]]
        out.update(sweep=total, reduce=B * ring["wait"], io=0.0 * S, tiles=B * ring["tiles"],
                   link_busy=B * ring["link"], cubes_used=Hkv * G * jnp.ones_like(S), hbm_extra=B * ring["hbm_extra"],
                   math_extra=0.0 * S, ring_in_tcm=ring["in_tcm"])
        tcm = ring["tcm"]
    else:
        check_choice("case", case, CASES)
        raise AssertionError(case)  # a case in CASES without a branch here
    if case in ("decode", "prefill"):
        out["cubes_used"] = Hkv / hw.pes_per_cube + 0.0 * S  # one PE per kv head
    for k in ("hbm", "gemm", "math", "tcm", "cpu_issue"):
        out[f"{k}_busy"] = _wsum(w, [b[k] for b in busy])
    out["hbm_busy"] = out["hbm_busy"] + out.pop("hbm_extra")
    out["math_busy"] = out["math_busy"] + out.pop("math_extra")
    out["links_busy"] = out.pop("link_busy")
    # no schedule beats a resource's own work: the closed forms' terms each carry their floors, and
    # the whole case is floored by every roofline (the visits' fill / drain and the ragged terms
    # may otherwise round below a saturated resource's busy time)
    total = smax(total, *(out[f"{k}_busy"] for k in RESOURCES), relax=relax)
    out.update(kv_bytes(hw, knobs, case=case, model=model))
    out.update(total=total, tcm_bytes=tcm, opt2_weight=w[PIPELINES.index("opt2")],
               ring_depth_margin=(2.0 - hw.ring_recv_depth if case == "prefill_sp" else -1.0) + 0.0 * S)
    return out


def kv_bytes(hw: AHBM, knobs: dict, *, case: str, model: str) -> dict:
    """HBM the KV cache takes: ``kv_pe_bytes``, one layer's K and V buffers on the fullest PE (sized
    for ``capacity`` keys over the ranks in decode-SP, S on one PE, a ring block of ceil(S / C)
    keys per PE in prefill-SP), x B requests; ``model_hbm_bytes``, every layer's KV of every kv head
    (capacity keys) x B plus the model's weights where known (``WEIGHT_BYTES``)."""
    geom, layers = MODELS[model]
    S, B = knobs["seq_len"], knobs["batch"]
    cap = jnp.maximum(knobs.get("capacity", S), S)
    per_key = 2 * geom.head_dim * DTYPE_BYTES  # K and V
    lane = {"decode": cap, "decode_sp": jnp.ceil(cap / (knobs["cubes"] * knobs["pes"])), "prefill": S,
            "prefill_sp": jnp.ceil(S / knobs["cubes"])}[case]
    total = layers * geom.num_kv_heads * B * cap * per_key + WEIGHT_BYTES[model]
    return {"kv_pe_bytes": B * lane * per_key, "model_hbm_bytes": total}


def ring_latency(hw: AHBM, S, tile, C: int, P, d: int, w, *, relax: Relax | None) -> dict:
    """Prefill-SP ring over C = G CUBEs (``costmodel.ahbm.physics``): per (CUBE c, step s) the
    busiest PE's work on block b = (c - s) mod C; CUBE c forwards its held block to c + 1 when it
    starts a step (its NOC port serialises its sends; the receiver needs a free one of
    ``ring_recv_depth`` buffers) and starts step s once it finished step s - 1 and received the
    block. Blocks stay in TCM when they fit next to the working set, else they are staged in HBM.
    A block's work is the ``w``-weighted sum over pipelining options (exact for a one-hot ``w``)."""
    Bk = sceil(S / C, relax=relax)  # keys per ring block
    rows, te = counts.ring_tiles(S, tile, C, relax=relax)  # q block rows, KV tile (te < rows at small S)
    ex = lambda x: jnp.expand_dims(x, -1)
    block_bytes = 2 * Bk * d * DTYPE_BYTES
    depth = hw.ring_recv_depth
    xfer = US * block_bytes / hw.cube_noc_bytes_per_s
    lat = US * (hw.cube_noc_transaction_s + hw.cube_hop_latency_s)
    acc_bytes = rows * (d + 2) * ACC_BYTES
    # the epilogue per q block of the PE: load its (m, l, O) from HBM, normalise, store O
    n_final = jnp.maximum(sceil(S / rows / P, relax=relax), 1.0)
    final = n_final * (dma_time(hw, acc_bytes) + _math_s(hw, rows * d) + dma_time(hw, rows * d * DTYPE_BYTES))
    mx = lambda *a: smax(*a, relax=relax)
    tcm_work = _wsum(w, [tcm_bytes(hw, rows, te, d, p) for p in PIPELINES])
    fits = tcm_work + depth * block_bytes <= hw.tcm_bytes_per_pe  # blocks in TCM, else staged in HBM
    # each block's last tile is ragged (B_b - (nb_b - 1) te keys): the PE's visits that sweep the
    # whole block end on it (``full`` of them; all of them when the block is one tile)
    b_keys = jnp.clip(ex(S) - jnp.arange(C) * ex(Bk), 0.0, ex(Bk))
    nb = sceil(b_keys / ex(te), relax=relax)
    r_keys = jnp.maximum(b_keys - jnp.maximum(nb - 1.0, 0.0) * ex(te), 1.0)
    # the last q block is ragged too (S - (n - 1) rows): the PE holding it (``top`` 0) runs it with
    # its real rows, the PE holding the one before (``top`` 1, P >= 2) only full ones; either may be
    # the busiest, so each block's work and each roofline is the larger of the two
    n_q = sceil(S / rows, relax=relax)
    r_rows = jnp.maximum(S - (n_q - 1.0) * rows, 1.0)
    if relax is not None:  # the relaxed surrogate (the tuner's descent) is exact at S a multiple of C x TILE,
        r_rows, r_keys = rows, jnp.broadcast_to(ex(te), r_keys.shape)  # where nothing is ragged
    # relaxed: nothing is ragged, so the last q block's visits are the full ones and the second PE's
    # counts are never used (traced once, not twice: the descent's graph stays small to compile);
    # exact: the full and the last q block's rows in one batched trace
    if relax is not None:
        full_rows = last_rows = _ring_visit_times(hw, rows, te, r_keys, fits, d, relax=relax)
    else:
        full_rows, last_rows = _each(lambda R: _ring_visit_times(hw, R, te, r_keys, fits, d, relax=None), [rows, r_rows])
    blk = jnp.arange(C, dtype=jnp.result_type(float))
    pes = [counts.ring_block_counts(ex(S), ex(rows), ex(te), C, ex(P), blk, top=top, relax=relax)
           for top in ((0,) if relax is not None else (0, 1))]
    pes = pes * 2 if relax is not None else pes
    masks = [counts.ring_block_masks(ex(S), ex(rows), ex(te), C, ex(P), blk, top=top, relax=relax)
             for top in ((0,) if relax is not None else (0, 1))]
    masks = masks * 2 if relax is not None else masks
    if relax is None:  # the PE holding block b's first q block: its visit there ends on a partial tile
        nb_b, reach = counts.ring_block_reach(ex(S), ex(rows), ex(te), C, blk, relax=None)
        top_d = jnp.mod(jnp.maximum(reach - 1.0, 0.0), ex(P))
        # and the PE holding the first q block that sweeps all nb tiles (u = nb): on the diagonal, so
        # its tile before the last is partial too ('mid', offset >= 2) where the top PEs' are not
        top_e = jnp.mod(jnp.maximum(reach - nb_b, 0.0), ex(P))
        for top_x in (top_d, top_e):
            pes.append(counts.ring_block_counts(ex(S), ex(rows), ex(te), C, ex(P), blk, top=top_x, relax=None))
            masks.append(counts.ring_block_masks(ex(S), ex(rows), ex(te), C, ex(P), blk, top=top_x, relax=None))
    has_b = (ex(P) >= 1.5) & (relax is None)  # a second PE exists (relaxed: the top PE is the busiest)

    def block_work(p):
        # every PE's visits run the full-row tiles: their terms are traced once per option, not
        # once per PE (the graph's size is the compile time of every sweep and descent over it)
        vt = full_rows
        # each pair in one batched trace: a tile and its masked twin share the call's structure
        f, fm = _each(lambda t_: sweep_terms(t_, p, relax=relax), [vt["t"], vt["t_m"]])
        # (no D read; their full predecessor's drain precedes them)
        r, rm = _each(lambda t_: sweep_terms(t_, p, relax=relax, steady=False, prev=vt["t"]), [vt["t_r"], vt["t_rm"]])
        last_of = lambda x, y: jnp.where(nb >= 1.5, x["last"] - y["last"], x["single"] - y["single"]) + x["drain"] - y["drain"]
        end_r, end_rm, mid = last_of(r, fm), last_of(rm, r), fm["D"] - f["D"]

        def work(cnt, msk):
            # non-full visits end on a partial diagonal tile, full ones on the block's last tile
            return (visits_time(ending_on(f, fm), *cnt[:3], ex(vt["over"])) + cnt[3] * end_r
                    + msk["end"] * end_rm + msk["mid"] * mid)

        def top_visit(vt, v):  # q block n - 1's visit of v tiles (its last the block's last one when v = nb)
            last = jax.tree.map(lambda a, b: jnp.where(v >= nb, a, b), vt["t_r"], vt["t_m"])
            return ex(vt["over"]) + visit_time(vt["t"], last, v, p, relax=relax)

        v_top = pes[0][4]
        a = work(pes[0], masks[0])
        if last_rows is not full_rows:  # the last q block's real rows (relaxed: they are full)
            full_top, last_top = _each(lambda vt_: top_visit(vt_, v_top), [full_rows, last_rows])
            a = a + jnp.where(v_top >= 1, last_top - full_top, 0.0)
        if relax is not None:
            return a
        # (top_d = 0: that PE is the top one, whose last q block ``a`` already runs with its real rows)
        d = jnp.where(top_d < 0.5, a, work(pes[2], masks[2]))
        e = jnp.where(top_e < 0.5, a, work(pes[3], masks[3]))
        return jnp.where(has_b, mx(a, work(pes[1], masks[1]), d, e), a)

    def pe_busy_blocks(p):
        """Per block [..., C]: the two top PEs' busy time on each resource (a, b)."""
        full_tb = {name: tile_busy(full_rows[name], p) for name in ("t", "t_m", "t_r", "t_rm")}
        last_tb = full_tb if last_rows is full_rows else {name: tile_busy(last_rows[name], p) for name in ("t", "t_m", "t_r")}

        def busy(cnt, msk):  # a PE's visits of full-row tiles
            tb = full_tb
            return {k: (cnt[0] * v + cnt[3] * (tb["t_r"][k] - v) + (msk["last"] + msk["mid"]) * (tb["t_m"][k] - v)
                        + msk["end"] * (tb["t_rm"][k] - tb["t_r"][k]))
                    for k, v in tb["t"].items()}

        def top_busy(tb, v):  # its last tile: the block's last one (full visit) or its partial diagonal one
            some = jnp.where(v >= 1, 1.0, 0.0)
            is_full = jnp.where(v >= nb, 1.0, 0.0) * some
            return {k: jnp.maximum(v - some, 0.0) * a + is_full * b + (some - is_full) * m
                    for (k, a), b, m in zip(tb["t"].items(), tb["t_r"].values(), tb["t_m"].values(), strict=True)}

        v_top = pes[0][4]
        ba, bb = busy(pes[0], masks[0]), busy(pes[1], masks[1])
        ta, tf = top_busy(last_tb, v_top), top_busy(full_tb, v_top)
        # every visit's q and (m, l, O) loads and (m, l, O) store on the PE's controller
        io = lambda vt, visits: visits * vt["io_bytes"] / hbm_rate(hw)
        n_top = jnp.where(v_top >= 1, 1.0, 0.0)
        ba["hbm"] = ba["hbm"] + io(full_rows, pes[0][1]) + n_top * (last_rows["io_bytes"] - full_rows["io_bytes"]) / hbm_rate(hw)
        bb["hbm"] = bb["hbm"] + io(full_rows, pes[1][1])
        return {k: ba[k] + ta[k] - tf[k] for k in ba}, bb

    def pe_busy(ba, bb):  # a roofline is one PE's total over the blocks (a step's time its busiest PE's)
        return {k: jnp.where(has_b[..., 0], mx(blocks_sum(ba[k]), blocks_sum(bb[k])), blocks_sum(ba[k])) for k in ba}

    blocks_sum = lambda x: jnp.sum(x, -1)
    work = sum(w[i] * x for i, x in enumerate(_per_option(hw, block_work, w)))
    per_block = _per_option(hw, pe_busy_blocks, w)
    busy = [pe_busy(ba, bb) for ba, bb in per_block]
    stage = jnp.where(fits, 0.0, block_bytes / hbm_rate(hw))  # the receivers' HBM write of a staged block
    # staged blocks: each PE's controller writes the block it receives (steps 1..C-1) and reads 1 / P
    # of the one it forwards (steps 0..C-2), each one request FIFO with the step's tile DMAs: the tile
    # stream waits behind it (its operand buffers hold a sub-tile or two of slack), so it adds to the step
    step_stage = [stage * ((1.0 if s else 0.0) + (1.0 / P if s < C - 1 else 0.0)) for s in range(C)]
    init = jnp.where(fits, dma_time(hw, block_bytes), 0.0)  # TCM-held: each PE first loads its own block
    end, wait = _ring_recurrence([work[..., b] for b in range(C)], step_stage, xfer, lat, stage, init, C, depth, mx)
    in_tcm = fits.astype(jnp.result_type(float))
    return {"total": end + final, "wait": wait, "busy": busy, "tiles": blocks_sum(pes[0][0]), "link": (C - 1) * xfer,
            "tcm": tcm_work + in_tcm * depth * block_bytes, "in_tcm": in_tcm,
            # staged blocks' writes and forwarding reads or the TCM-held block's load; the epilogue's
            # (m, l, O) load and O store
            "hbm_extra": ((1.0 - in_tcm) * (C - 1) * block_bytes * (1.0 + 1.0 / P) + in_tcm * block_bytes
                          + n_final * (acc_bytes + rows * d * DTYPE_BYTES)) / hbm_rate(hw)}


def staged() -> bool:
    """Whether the caller is being staged out into a program to compile (``jax.jit``, ``make_jaxpr``):
    under JAX's omnistaging every operation then yields a tracer, even one on constants. Eagerly,
    ``grad`` and ``vmap`` without ``jit`` included, it yields a concrete array."""
    return isinstance(jnp.zeros(()) + 0.0, jax.core.Tracer)


def _each(fn, *args: list) -> list:
    """[fn(*a) for a in zip(*args)]: ``args`` one list per argument of ``fn``, each item a pytree of
    the list's one structure (values that are the same for every item are closed over, not passed).

    ``staged`` (compiled): the items are stacked and ``fn`` is traced once, batched, so the program
    carries its operations once, not once per item (a cost-model graph's size is its compile
    time). Else (eager, under ``grad`` or ``vmap`` too) it is called once per item:
    an eager batched call would dispatch more operations, and more distinct ones, than it saves. Both
    give the same numbers: ``fn`` is elementwise in its items."""
    items = list(zip(*args, strict=True))
    if not staged():
        return [fn(*a) for a in items]
    stacked = [jax.tree.map(lambda *xs: jnp.stack(jnp.broadcast_arrays(*xs)), *col) for col in args]
    out = jax.vmap(fn)(*stacked)
    return [jax.tree.map(lambda x, i=i: x[i], out) for i in range(len(items))]


def _ring_visit_times(hw: AHBM, rows, te, r_keys, fits, d: int, *, relax: Relax | None) -> dict:
    """A ring visit's tile times for ``rows`` query rows: 't' (full tiles of ``te`` keys, [..., 1]),
    't_r' (each block's last tile, ``r_keys`` [..., C]; partial when ragged), 't_m' / 't_rm' (the
    same tiles partial: on a causal diagonal, ``counts.ring_block_masks``), K / V from TCM where ``fits`` else
    from HBM; 'over' (us: its q / (m, l, O) traffic exposed per visit) and 'io_bytes' (that
    traffic on the controller)."""
    ex = lambda x: jnp.expand_dims(x, -1)
    pick = lambda a, b: jax.tree.map(lambda x, y: jnp.where(fits[..., None], x, y), a, b)

    def both(keys, masks):  # per mask, a tile of ``keys``: K / V from TCM where ``fits`` else from HBM, and from TCM
        def one(m):
            tcm = tile_times(hw, ex(rows), keys, d, src="tcm", masked=m, relax=relax)
            return pick(tcm, tile_times(hw, ex(rows), keys, d, src="hbm", masked=m, relax=relax)), tcm
        return _each(one, masks)

    (t, t_tcm), (t_m, _) = both(ex(te), [0.0, 1.0])
    (t_r, _), (t_rm, _) = both(r_keys, [_ragged(r_keys, ex(te)), 1.0])
    q_bytes, acc_bytes = rows * d * DTYPE_BYTES, rows * (d + 2) * ACC_BYTES
    # a ring visit loads q and its (m, l, O) and stores (m, l, O) after. The first Q.K^T needs q and
    # its first K sub-tile: staged K queues behind both loads on the controller (its fill carries
    # the latency), a TCM-held K is read on the TCM port while q loads; the (m, l, O) load gates
    # the first softmax (exposed only when the visit's first Q.K^T is shorter than it)
    first_in = jnp.where(fits, jnp.maximum(dma_time(hw, q_bytes) - t_tcm["K"]["fill"][..., 0], 0.0),
                         q_load_time(hw, q_bytes + acc_bytes))
    s0 = t["K"]["fill"][..., 0] + t["K"]["body"][..., 0] + US * hw.cpu_issue_composite_s
    over = first_in + jnp.maximum(dma_time(hw, q_bytes + acc_bytes) - first_in - s0, 0.0) + dma_time(hw, acc_bytes)
    return {"t": t, "t_m": t_m, "t_r": t_r, "t_rm": t_rm, "over": over, "io_bytes": q_bytes + 2 * acc_bytes}


def _ring_recurrence(w_b: list, w_s: list, xfer, lat, stage, init, C: int, depth: int, mx):
    """(end, mean exposed wait per CUBE) of the ring's max-plus recurrence. A forward's transfer
    starts when the sender starts the step (after its previous send: one NOC port) and lands
    ``lat`` after it ends (``w_b``: a block's work, ``w_s``: what step s adds to it); a block
    that finds no free receive buffer waits in the receiver's NOC interface (the sender's port is
    free again), then takes ``stage`` to be staged. The
    recurrence runs on per-CUBE scalars (lists), not a rolled [C] axis: XLA vectorises the former
    over a vmapped batch far better than a roll along a short minor axis."""
    start = [init + 0.0 * w_b[0]] * C
    done = [start[c] + w_b[c] + w_s[0] for c in range(C)]  # step 0: CUBE c on block c
    send_end: list = [None] * C  # CUBE c's latest forward transfer end
    hist_done, hist_send = [done], []  # per step: done[c], send_end[c] (the forward of that step's block)
    wait = 0.0 * xfer
    for s in range(1, C):
        # CUBE c forwards the block it holds at step s - 1 (to c + 1 for step s) when it starts that step
        new_send = [(start[c] if send_end[c] is None else mx(start[c], send_end[c])) + xfer for c in range(C)]
        hist_send.append(new_send)
        send_end = new_send
        arrive = []
        for c in range(C):
            got = send_end[c - 1] + lat  # from c - 1 (= C - 1 for c = 0)
            k = s - depth
            if k >= 0:  # into a buffer released once c's step-k block is computed and forwarded
                got = mx(got, mx(hist_done[k][c], hist_send[k][c]) if k < len(hist_send) - 1 else hist_done[k][c])
            arrive.append(got + stage)
        start = [mx(done[c], arrive[c]) for c in range(C)]
        wait = wait + sum(start[c] - done[c] for c in range(C)) / C
        done = [start[c] + w_b[(c - s) % C] + w_s[s] for c in range(C)]
        hist_done.append(done)
    end = mx(*done) if C > 1 else done[0]
    return end, wait
