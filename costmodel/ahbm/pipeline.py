"""Per-tile engine times, streamed composites and the three pipelining options (ADR-0060 section 5.6).

The physics is ``costmodel.ahbm.physics``; this module is its closed-form surrogate for one
inner tile. A composite GEMM streams its K / V operand DMA -> GEMM -> write-back per sub-tile
(``gemm_tile_n`` keys for Q.K^T, ``gemm_tile_k`` for P.V) through ``composite_runahead_subtiles``
operand buffers. As a pipeline of m sub-tiles it is summarised by

* ``fill``: DMA start -> first sub-tile landed (one sub-tile's transfer + the DMA latency),
* ``body``: first GEMM start -> composite done = ``gspan`` (g + (m - 1) x period) + the last
  sub-tile's epilogue (Q.K^T's scale, on MATH) and write-back, the period being the slowest of
  DMA, GEMM, epilogue, write-back and the buffer cycle (a + latency + g) / depth,
* ``dma_span``: DMA start -> last transfer end (the HBM controller is busy that long),

so a composite whose DMA starts at t0 and whose GEMM may start at t1 ends at
max(t0 + fill, t1) + body. The options (what the kernel CPU waits for):

* opt1: issue QK_j, wait for it, issue SM_j and PV_j, wait PV_j, issue MG_j (GEMM idle during SM).
* opt3: as opt1 but QK_{j+1} is issued first (double-buffered S): it runs during SM_j.
* opt2: two composites per tile (QK_j; ex_composite = V_j stream, SM_j, PV_j, MG_j), no CPU wait.

Inside a tile the MATH work follows the kernel text: P ready after ``m_p``; the rest of the
softmax and O * corr (``m_r``) overlap the P.V; only the merge's + (``m_a``) follows it. Under
opt3 / opt2 the GEMM engine serves the sub-tiles of concurrent composites as they request it
(``pv_start``; the engine-saturated period ``sat``), not in composite issue order.

A visit of v tiles takes ``single`` (v = 1) or ``first + (v - 2) * D + last`` (v >= 2), then the
last merge drains (``drain``). ``last`` may be evaluated at a ragged tile's real key count.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel.ahbm.config import PIPELINES
from costmodel.hardware import AHBM, AHBM_TCM_BUFFERS, ahbm_tcm_bytes
from costmodel.smooth import Relax, smax
from jaxref.validation import check_choice

# Primitive ops per tile, in the order of ADR-0060 section 3 (per-tile op sequence) and TL;DR Kernel 1:
# between S_j's wait and P.V's issue the softmax's nine -- max, maximum, S_j - m_new, exp, m - m_new,
# exp, l * corr, sum(P), + (``l = l * corr + tl.sum(P)`` precedes the P.V composite in both texts) --
# and the merge's O * corr (``O = O * corr + tl.composite(P, V)``: Python evaluates O * corr before
# the call); after P.V only the merge's + O_j.
N_SM = 10
N_MG = 1
SOFTMAX_ELEMS_PER_SCORE = 5  # scale (epilogue), max, S_j - m_new, exp, sum(P) per score element
SOFTMAX_ELEMS_PER_ROW = 5  # maximum, m - m_new, exp, l * corr, + per row
N_PRE_PV, N_POST_PV = N_SM, N_MG  # issued before / after the P.V composite
P_CHAIN_SCORE_OPS = 3  # max, S_j - m_new, exp: the probabilities P (the scale is Q.K^T's epilogue)
P_CHAIN_ROW_OPS = 1  # maximum(m, m_j)
MERGE_ELEMS_PER_OUT = 2  # O * corr + O_j
DTYPE_BYTES = 2  # bf16 storage of q / k / v / O
ACC_BYTES = 4  # fp32 (m, l, O) and GEMM outputs
US = 1e6  # every time of the model is in microseconds (the unit of ``Relax.tau_us``)


def pad(x, q, *, relax: Relax | None):
    """x rounded up to a multiple of q (the composite's 32 x 64 x 32 GEMM tiles); relaxed, x
    itself (legal TILEs are whole sub-tiles, and a smooth ceiling's bumps between multiples would
    be the gradient's largest term)."""
    return jnp.ceil(x / q) * q if relax is None else x + 0.0 * q


def hbm_rate(hw: AHBM):
    """Bytes per us one PE's HBM controller moves."""
    return hw.pe_controller_bytes_per_s * hw.hbm_efficiency / US


def staircase(i, stage, cycle, buffers, *, relax: Relax | None):
    """GEMM start (us, after the first's) of sub-tile i >= 0 of a stream whose sub-tiles start at
    least ``stage`` apart and reuse ``buffers`` operand buffers, each busy ``cycle`` per use (its
    sub-tile's GEMM, the next DMA and its latency): s_i = max(s_{i-1} + stage, s_{i-buffers} +
    cycle) = max(i stage, k cycle + (i - k buffers) stage), k = floor(i / buffers). Relaxed: the
    mean spacing i max(stage, cycle / buffers) (equal at i a multiple of ``buffers``)."""
    if relax is not None:
        return i * smax(stage, cycle / buffers, relax=relax)
    k = jnp.floor(jnp.maximum(i, 0.0) / buffers)
    return jnp.maximum(i * stage, k * cycle + (i - buffers * k) * stage)


def started(t, stage, cycle, buffers):
    """Sub-tiles of a ``staircase`` stream whose GEMM has started by ``t`` (us after the first's;
    0 when t < 0): 1 + the largest i with s_i <= t, i.e. i stage <= t and, in the last buffer
    cycle begun by t, its sub-tiles ``stage`` apart (exact only: the inverse of the exact form)."""
    k = jnp.floor(jnp.maximum(t, 0.0) / cycle)
    in_cycle = jnp.minimum(jnp.floor((jnp.maximum(t, 0.0) - k * cycle) / stage), buffers - 1.0)
    last = jnp.minimum(jnp.floor(jnp.maximum(t, 0.0) / stage), k * buffers + in_cycle)
    return jnp.where(t < 0.0, 0.0, last + 1.0)


def _stream(hw: AHBM, keys, sub: int, sub_bytes_per_key, gemm_sub_us, wb_sub_bytes, wb_end_bytes, *,
            src: str, relax: Relax | None, epilogue_sub_us=0.0) -> dict:
    """Summary of one streamed composite over ``keys`` keys in sub-tiles of ``sub`` keys: each
    sub-tile's DMA, GEMM, epilogue on MATH (``epilogue_sub_us``: Q.K^T's scale) and write-back
    are pipeline stages, so the stream's period is the slowest stage (or the operand buffers'
    cycle); ``gspan`` is first GEMM start -> last GEMM end, ``body`` adds the last sub-tile's
    epilogue and write-back."""
    tcm = hw.tcm_bytes_per_s / US
    if src == "tcm":  # operand already in TCM: read on the TCM port, no DMA latency, no HBM
        rate, dl = tcm, 0.0 * keys
    else:
        rate, dl = hbm_rate(hw), US * hw.dma_local_latency_s + 0.0 * keys
    depth = hw.composite_runahead_subtiles
    m = pad(keys, sub, relax=relax) / sub  # sub-tiles (the last one ragged)
    a_full = sub * sub_bytes_per_key / rate
    a_first = jnp.minimum(keys, sub) * sub_bytes_per_key / rate
    w = wb_sub_bytes / tcm
    io = a_full + w if src == "tcm" else smax(a_full, w, relax=relax)  # one TCM port for both
    stage = smax(io, gemm_sub_us, epilogue_sub_us + 0.0 * keys, relax=relax)  # the slowest stage
    cycle = a_full + dl + gemm_sub_us  # a buffer's cycle: its sub-tile's GEMM ends -> the next DMA -> lands -> GEMM
    period = smax(stage, cycle / depth, relax=relax)  # the mean GEMM-start spacing
    if relax is None:
        # GEMM starts s_i = max(s_{i-1} + stage, s_{i-depth} + cycle): a staircase, ``depth`` sub-tiles a
        # cycle when the buffers bind, so s_i = max(i stage, k cycle + (i - k depth) stage) with
        # k = floor(i / depth) (the mean spacing overstates it between multiples of depth). The last
        # sub-tile is ragged: its transfer, and so its stage and cycle, are its real keys'
        start = lambda i: staircase(i, stage, cycle, depth, relax=None)
        a_last = (keys - (m - 1.0) * sub) * sub_bytes_per_key / rate
        io_last = a_last + w if src == "tcm" else jnp.maximum(a_last, w)
        stage_last = jnp.maximum(jnp.maximum(io_last, gemm_sub_us), epilogue_sub_us)
        by_buffer = jnp.where(m - 1.0 - depth >= 0, start(m - 1.0 - depth) + a_last + dl + gemm_sub_us, 0.0)
        rest = jnp.where(m > 1.5, jnp.maximum(start(m - 2.0) + stage_last, by_buffer), 0.0 * keys)
    else:  # relaxed: the mean spacing (exact at m - 1 a multiple of depth; smooth in keys)
        rest = jnp.maximum(m - 1.0, 0.0) * period
    gspan = gemm_sub_us + rest
    return {"fill": a_first + dl, "a_first": a_first, "a_full": a_full + 0.0 * keys, "period": period,
            "stage": stage + 0.0 * keys, "cycle": cycle + 0.0 * keys, "depth": depth + 0.0 * keys, "body": gspan + epilogue_sub_us + w + wb_end_bytes / tcm, "gspan": gspan,
            "dma_span": a_first + rest, "a_head": jnp.minimum(keys, depth * sub) * sub_bytes_per_key / rate,
            "dma_busy": keys * sub_bytes_per_key / rate if src != "tcm" else 0.0 * keys,
            # the TCM port: every sub-tile's write-back, the end write-back, operand reads from TCM
            "tcm_busy": m * w + wb_end_bytes / tcm + (keys * sub_bytes_per_key / tcm if src == "tcm" else 0.0 * keys),
            "gemm_busy": m * gemm_sub_us, "g": gemm_sub_us + 0.0 * keys, "ep_busy": m * epilogue_sub_us,
            "tail": epilogue_sub_us + w + wb_end_bytes / tcm, "w": w + 0.0 * keys,
            # the head's reads on the TCM port (an operand held in TCM; 0 when it streams from HBM)
            "tcm_head": jnp.minimum(keys, depth * sub) * sub_bytes_per_key / tcm if src == "tcm" else 0.0 * keys}


def tile_times(hw: AHBM, rows, keys, d: int, *, src: str = "hbm", masked=0.0, relax: Relax | None) -> dict:
    """Engine times (us) of one tile of ``keys`` real keys for ``rows`` M-folded query rows.

    Returns the streamed Q.K^T ('K', its scale epilogue a MATH stage per sub-tile) and P.V ('V')
    composites (``_stream`` summaries), the MATH times in the kernel's order: 'm_p' (max,
    maximum, S - m2, exp: P ready), 'm_r' (the rest of the softmax and O * corr, both issued before
    P.V and overlapping it), 'm_a' (the merge's + after P.V); 'm_s' / 'm_o' (all softmax / merge
    MATH, for the roofline), and the issue costs ('c' primitive, 'cc' composite). ``src`` is
    where K / V live: 'hbm' (DMA) or 'tcm' (ring blocks held in TCM). ``masked`` (0 / 1, may be
    an array): the tile is partial and pays the spec's ``mask_ops_per_partial_tile`` score-sized MATH
    ops (in the P chain, before the max) and their issues ('pre_ops': primitive issues before P.V).
    """
    # keys as an array of JAX's float type (as the cases pass them): a Python int would take float64
    # arithmetic here and in the terms, and their discrete branches could then differ from the cases'
    keys = jnp.asarray(keys, jnp.result_type(float))
    gemm_rate = hw.gemm_flops_per_cycle_per_pe * hw.pe_clock_hz / US
    math_rate = hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz / US
    mp = pad(rows, hw.gemm_tile_m, relax=None if isinstance(rows, int) else relax)  # a constant pads exactly
    tn, tk = hw.gemm_tile_n, hw.gemm_tile_k
    kv_bytes = d * DTYPE_BYTES  # per key
    g_qk = 2 * mp * pad(d, tk, relax=None) * tn / gemm_rate  # one sub-tile: N = tn keys (ragged padded)
    g_pv = 2 * mp * tk * pad(d, tn, relax=None) / gemm_rate  # one sub-tile: K = tk keys
    scale_sub = rows * jnp.minimum(keys, tn) / math_rate  # the scale epilogue of one Q.K^T sub-tile
    K = _stream(hw, keys, tn, kv_bytes, g_qk, rows * tn * ACC_BYTES, 0.0, src=src, relax=relax,
                epilogue_sub_us=scale_sub)
    V = _stream(hw, keys, tk, kv_bytes, g_pv, 0.0, rows * d * ACC_BYTES, src=src, relax=relax)
    score, row, out = rows * keys / math_rate, rows / math_rate, rows * d / math_rate
    mask_ops = hw.mask_ops_per_partial_tile * masked
    return {
        "K": K, "V": V, "c": US * hw.cpu_issue_s + 0.0 * keys, "cc": US * hw.cpu_issue_composite_s + 0.0 * keys,
        "m_p": (P_CHAIN_SCORE_OPS + mask_ops) * score + P_CHAIN_ROW_OPS * row,
        "m_r": (SOFTMAX_ELEMS_PER_SCORE - 1 - P_CHAIN_SCORE_OPS) * score
        + (SOFTMAX_ELEMS_PER_ROW - P_CHAIN_ROW_OPS) * row + out,
        "m_a": out + 0.0 * keys,
        "m_s": (SOFTMAX_ELEMS_PER_SCORE + mask_ops) * score + SOFTMAX_ELEMS_PER_ROW * row,
        "pre_ops": N_PRE_PV + mask_ops + 0.0 * keys,
        "m_o": MERGE_ELEMS_PER_OUT * out + 0.0 * keys,
    }


def sweep_terms(t: dict, pipeline: str, *, relax: Relax | None, nxt: dict | None = None,
                last: dict | None = None, steady: bool = True, prev: dict | None = None) -> dict:
    """(single, first, last, D, drain) of a visit for one pipelining option (us); ``nxt``: the
    times of the tile after the first one (opt3's first iteration already issues its Q.K^T; opt2's
    ``first_two``: a visit of two tiles); ``last``: opt2, the times of a visit's last tile, whose
    head DMAs the P.V before it queues behind (``first_three``, ``D_pre``: that P.V's term).
    ``steady=False``: the caller reads no D (a visit's ragged last tile), so the exact form skips
    opt3's / opt2's iteration recursions (D is then the recursion's start, D0 / the steady D).
    ``prev`` (opt1, exact): the times of the tile before this one (a ragged last tile's full
    predecessor), whose MATH left after its merge was issued (its drain) precedes this tile's.

    Every term ends when the CPU has issued the tile's merge (+ after P.V); the merge's MATH
    (``m_a``) then runs while the next term starts, and ``drain`` is the last one's. The GEMM
    engine serves sub-tiles of concurrent composites as their operands land (a P.V holds the
    engine's accumulators from its first sub-tile to its last, a Q.K^T sub-tile only for itself),
    so under opt3 / opt2 a P.V whose probabilities are ready waits at most for the Q.K^T sub-tile
    on the engine, and the engine's steady period is at least one tile's Q.K^T work plus the
    P.V's span (``sat``)."""
    mx = lambda *a: smax(*a, relax=relax)
    mn = lambda a, b: -smax(-a, -b, relax=relax)
    K, V, c, cc = t["K"], t["V"], t["c"], t["cc"]
    # no option's steady tile is shorter than one tile's work on any resource (HBM, GEMM, MATH,
    # the TCM port, CPU issue): the closed forms below track the critical chain, these floors the
    # resource that saturates when its rate is off the defaults
    busy = tile_busy(t, pipeline)
    floor = mx(*busy.values())
    floor_no_gemm = mx(*(v for k, v in busy.items() if k != "gemm"))
    m_p, m_r, m_a = t["m_p"], t["m_r"], t["m_a"]
    K1 = K if nxt is None else nxt["K"]
    pre, post = t["pre_ops"] * c, N_POST_PV * c
    v_tail = V["body"] + post  # P.V's GEMM start -> its merge issued
    q = cc + K["fill"] + K["body"]  # issue QK, stream K, GEMM, scale, write-back (MATH idle before)
    # one tile alone: QK, the softmax's P chain after its issues, P.V (its DMA from its issue)
    single = mx(q + pre + m_p, q + pre + cc + V["fill"]) + v_tail
    # MATH work ``m`` left ahead of this tile (the previous merge, m_a) delays its scale epilogue and softmax
    after = lambda m: mx(q, m + K["ep_busy"] + K["tail"] - K["ep_busy"] / jnp.maximum(K["gemm_busy"] / K["g"], 1.0))
    q_busy = after(m_a)
    # a tile's MATH left after its merge is issued: its softmax's rest past its P.V, then its merge
    drain_of = lambda x: mx(x["m_a"], x["m_r"] + x["m_a"] - x["V"]["body"] - post)
    drain = drain_of(t)
    if pipeline == "opt1":
        chain = lambda qb: mx(mx(qb + pre + m_p, qb + pre + cc + V["fill"]) + v_tail, floor)
        D = chain(q_busy)
        # a ragged last tile waits for its full predecessor's whole drain, not only its merge
        last = chain(after(drain_of(prev))) if prev is not None and relax is None else D
        return {"single": single, "first": single, "last": last, "D": D, "drain": drain}
    sat = K["gemm_busy"] + V["gspan"]  # the GEMM engine never idles
    # opt3 / opt2 issue QK_1 right after QK_0: QK_1's sub-tiles, landed while QK_0's run, take the
    # engine between QK_0's (a sub-tile requests it only when its predecessor ends), which delays
    # S_0 by one QK_1 sub-tile per QK_0 sub-tile after the first, less the engine's idle gaps
    m_k, m_k1 = K["gemm_busy"] / K["g"], K1["gemm_busy"] / K1["g"]
    idle = lambda S: mx((S["gspan"] - S["g"]) / jnp.maximum(S["gemm_busy"] / S["g"] - 1.0, 1.0) - S["g"], 0.0 * q)
    gap, gap1 = idle(K), idle(K1)  # the engine's idle time between a stream's sub-tiles (DMA-bound)
    slots = mn(mx(m_k - 1.0, 0.0 * q), m_k1)  # QK_1 sub-tiles run between QK_0's
    q_inter = q + slots * mx(K1["g"] - gap, 0.0 * q)
    k0_end = cc + K["fill"] + K["gspan"] + slots * mx(K1["g"] - gap, 0.0 * q)  # QK_0's last GEMM end
    credit = slots * K1["g"]  # ... that QK_1 work is done: the next tile's engine-bound term is shorter
    if pipeline == "opt3":
        # iteration 0: prime QK_0 at [0, cc], issue QK_1 at [cc, 2cc] (its DMA after K_0's head)
        k1_start = mx(2 * cc, cc + K["a_head"])
        w0 = mx(2 * cc, q_inter)
        if relax is None:
            # QK_1's DMAs (its heads, then one as each of its GEMMs ends) alternate with QK_0's on the
            # controller: QK_0's last transfer follows all of its own and QK_1's first m_k - 1 sub-tiles'
            k1_share = mn(K1["dma_busy"], mx(m_k - 1.0, 0.0 * q) * K1["a_full"])
            w0 = mx(w0, cc + K["dma_busy"] + k1_share + K["fill"] - K["a_first"] + K["g"] + K["tail"])
        r0 = mx(w0 + pre + m_p, mx(w0 + pre + cc, k1_start + K1["a_head"]) + V["fill"])
        # QK_1's last GEMM: its own stream delayed by QK_0's sub-tiles, or its sub-tiles left after QK_0's
        # (only QK_0's sub-tiles after QK_1's first landed delay it)
        before = mx((k1_start + K1["fill"] - cc - K["fill"]) / K["g"], 0.0 * q)
        q1_end = mx(k1_start + K1["fill"] + K1["gspan"]
                    + mn(mx(m_k1 - 1.0, 0.0 * q), mx(m_k - before, 0.0 * q)) * mx(K["g"] - gap1, 0.0 * q),
                    k0_end + mx(m_k1 - slots, 0.0 * q) * K1["g"])
        pv0 = pv_start(r0, k0_end, q1_end, K1, relax=relax)
        first = pv0 + v_tail
        # steady: issue QK_{j+1} at [0, cc] (MATH busy with merge j - 1 for m_a); S_j is done at w
        # (0 when its Q.K^T ended during the previous iteration); P_j after the issues and the
        # merge; V_j's DMA behind QK_{j+1}'s head
        k_end = cc + K1["fill"] + K1["gspan"]

        def pv_at(w):
            s_j = mx(cc, w)
            r = mx(mx(s_j + pre, m_a) + m_p, mx(s_j + cc + pre, cc + K1["a_head"]) + V["fill"])
            return pv_start(r, cc + K1["fill"], k_end, K1, relax=relax)

        pv = pv_at(0.0 * q)
        # HBM-bound: QK_{j+1}'s K and P.V_j's V stream together on the controller from the iteration's
        # issues; the next iteration's DMAs start only after P.V_j's last sub-tile landed, ran and
        # wrote back and the merge was issued, so that tail is exposed on the controller every tile
        # (less what is left of K_{j+1}: after both heads the two streams share the controller, so K's
        # excess over V's remaining transfers runs in that tail, at its own buffer-cycle rate)
        gap = V["fill"] - V["a_first"] + V["g"] + V["tail"] + post
        k_left = mx((K1["dma_busy"] - K1["a_head"]) - (V["dma_busy"] - V["a_head"]), 0.0 * q)
        if relax is None:
            # ... but when V_j has more sub-tiles than buffers its last DMA is requested during P.V_j's hold
            # on the engine, which stalls QK_{j+1}'s GEMMs and so its DMA requests: no K transfer is
            # queued behind V_j's last, and the tail is exposed whole
            k_left = jnp.where(V["gemm_busy"] / V["g"] > V["depth"] + 0.5, 0.0, k_left)
        k_wall = k_left * K1["period"] / K1["a_full"]  # that excess alone on the controller
        # (K_{j+1} streams from its issue while the softmax's ops are issued: only the part of those
        # issues it does not cover leaves the controller idle)
        # (the iteration moves QK_{j+1}'s K, the next tile's, and V_j: ``nxt`` a ragged last tile, less K)
        hbm_iter = K1["dma_busy"] + V["dma_busy"]
        hbm_chain = (cc + mx(cc + pre - K1["dma_busy"], 0.0 * q) + hbm_iter + gap - k_left
                     + mx(k_wall - gap, 0.0 * q))
        if nxt is not None:  # its per-tile floor likewise moves QK_{j+1}'s K
            floor = mx(*(hbm_iter if k == "hbm" else v for k, v in busy.items()))
        D0 = mx(pv + v_tail, sat + post, 2 * cc + pre + post, floor, hbm_chain)
        D_c = mx(pv + v_tail, sat - credit + post, 2 * cc + pre + post, floor_no_gemm, hbm_chain)  # tile after the first
        # S_{j+1} done: QK_{j+1} ends at k_end, or (P.V_j started inside it) after P.V_j's span
        # too: a ramp over one Q.K^T sub-tile of overlap (continuous in the relaxed form)
        s_wait = lambda k_e, p_s, end: (k_e + mn(V["gspan"], mx(k_e - p_s, 0.0 * k_e) * V["gspan"] / K1["g"])
                                        + K1["tail"] - end)
        s_d = s_wait(k_end, pv, pv + v_tail)  # the last tile's wait: the ramp (opt3's first / last terms are built on it)
        if relax is None:
            # exact: the sub-tiles of QK_{j+1} not yet started when P.V_j takes the engine wait for
            # its span while their DMAs go on (so they then run with landed buffers); the ramp above
            # charges the whole span on one sub-tile's overlap. Both over-state the stall where the
            # other is tight (a short stream / a latency-bound one): the model takes the smaller
            ramp = s_wait

            def score_queue(s_j, p_s):
                """(TCM port free for P.V_j's output write-back, Q.K^T_{j+1} score write-backs queued
                behind it) when S_j is done at ``s_j`` and P.V_j's GEMM starts at ``p_s``. The softmax's
                MATH ops are booked at once after their issues; a Q.K^T_{j+1} sub-tile whose GEMM ends
                after that waits for them on the in-order MATH engine before its scale epilogue, so its
                write-back is requested only then, one epilogue after another: those requested before
                P.V_j's GEMM ends hold the port it then needs, the rest follow its write-back. (Its GEMMs
                start as their operands land: a staircase of the engine / the transfer, the port's
                write-backs not pacing them.)"""
                ep = K1["ep_busy"] / m_k1  # one sub-tile's scale epilogue
                g0 = cc + K1["fill"] + K1["g"]  # QK_{j+1}'s first GEMM end
                stage_g = mx(K1["a_full"], K1["g"], ep)
                ended = lambda t_: jnp.clip(started(t_ - g0, stage_g, K1["cycle"], K1["depth"]), 0.0, m_k1)
                i0 = jnp.clip(started(p_s - cc - K1["fill"], K1["stage"], K1["cycle"], K1["depth"]), 0.0, m_k1)
                book = s_j + pre
                math_end = mx(book, m_a) + m_p + m_r
                n_pre = jnp.minimum(ended(book), i0)
                n_end = jnp.clip(ended(math_end), n_pre, i0)
                n_mid = n_end - n_pre  # their epilogues queue behind the softmax's MATH
                pv_end = p_s + V["gspan"]  # P.V_j's write-back requested
                n_bq = jnp.clip(jnp.floor((pv_end - math_end) / ep), 0.0, n_mid)
                free = jnp.where(n_bq > 0.5, math_end + mx(ep + n_bq * K1["w"], n_bq * ep + K1["w"]), -jnp.inf)
                g_pre = g0 + staircase(mx(i0 - 1.0, 0.0 * q), stage_g, K1["cycle"], K1["depth"], relax=None)
                free = jnp.maximum(free, jnp.where(i0 > n_end + 0.5, g_pre + ep + K1["w"], -jnp.inf))
                return jnp.maximum(free, pv_end), n_mid - n_bq

            def s_wait(k_e, p_s, end, s_j=None, heads=None):
                i0 = jnp.clip(started(p_s - cc - K1["fill"], K1["stage"], K1["cycle"], K1["depth"]), 0.0, m_k1)
                rem = m_k1 - i0
                wb_start, queued = (p_s + V["gspan"], 0.0 * q) if s_j is None else score_queue(s_j, p_s)
                after = p_s + V["gspan"] + staircase(mx(rem - 1.0, 0.0 * q), K1["stage"], K1["cycle"], K1["depth"],
                                                     relax=None) + K1["g"]
                if heads is not None:
                    # its DMAs past the landed buffers are requested as its GEMMs end, after the hold: those
                    # requested after the next iteration issued QK_{j+2} queue behind its ``heads``
                    k_rest = dict(K1, gemm_busy=rem * K1["g"], ep_busy=rem * K1["ep_busy"] / m_k1)
                    after = after + head_queue(k_rest, end + cc - (p_s + V["gspan"]), heads, relax=None)
                g_end = jnp.maximum(k_e, jnp.where(rem > 0.5, after, k_e))  # QK_{j+1}'s last GEMM end
                held = g_end + K1["tail"] - end
                # those sub-tiles' score write-backs reach the TCM port after P.V_j's output
                # write-back took it (requested at P.V_j's GEMM end): they follow it one by one
                port = wb_start + V["tail"] + (rem + queued) * K1["w"] - end
                # a last GEMM ending after the term (the merge's + booked on MATH at ``end``): its
                # scale epilogue queues behind that + on the in-order MATH engine
                merge = jnp.where(g_end > end, t["m_a"] + K1["tail"], -jnp.inf)
                return jnp.maximum(jnp.maximum(jnp.minimum(held, ramp(k_e, p_s, end)), merge),
                                   jnp.where(rem + queued > 0.5, port, -jnp.inf))

        # when QK_{j+1} outlasts the iteration (a latency-bound K stream, delayed by P.V_j's hold
        # on the engine) the next iteration starts by waiting s_d for S_{j+1}, while QK_{j+2},
        # issued first, already streams: the steady state alternates long and short iterations.
        # Follow the wait w -> (iteration length, next wait) over a few iterations from w = 0 and
        # take the mean of the last two (= D0 when QK_{j+1} ends in time: w stays 0)
        # Exact form only: the relaxed one (the tuner's descent objective, whose picks the exact
        # evaluator re-scores) keeps D0, since the unrolled recursion multiplies its graph to compile.
        D = D0
        if nxt is None and relax is None and steady:
            w, lens = 0.0 * q, []
            for _ in range(4):
                pv_w = pv_at(w)
                # P.V_j's output write-back waits for the port (score write-backs queued before it)
                end_w = pv_w + v_tail + score_queue(mx(cc, w), pv_w)[0] - (pv_w + V["gspan"])
                L = mx(end_w, D0)
                lens.append(L)
                w = mx(s_wait(k_end, pv_w, end_w, mx(cc, w), heads=K["a_head"]) + (end_w - L), 0.0 * q)
            D = 0.5 * (lens[-1] + lens[-2])
            phases = {"lens": jnp.stack(lens, -1)}
        else:
            phases = {}
        return {"single": single, "first": first + D_c - D0, "first_two": first,
                "last": last_opt3(t, s_d, relax=relax), "D": D, "D0": D0, "drain": drain,
                "s_after_first": s_wait(q1_end, pv0, first), "s_after_D": s_d, **phases}
    if pipeline == "opt2":
        V1 = V if nxt is None else nxt["V"]
        v_start = mx(2 * cc, cc + K["a_head"])
        # the ex_composite's V head (and QK_1's K head, issued next) queue on the controller
        # right behind QK_0's head: when QK_0 has more sub-tiles than operand buffers, its later
        # DMAs (requested as its GEMMs end) wait behind them, so S_0 ends after all that traffic
        # or, a stream paced by its buffer cycle, its staircase from its first late DMA on
        behind = jnp.where(m_k > K["depth"] + 0.5, 1.0, 0.0) if relax is None else 0.0 * q
        s0_hbm = lambda heads: (v_start + V["a_head"] + heads + K["dma_busy"] - K["a_head"] + K["fill"] - K["a_first"]
                                + K["g"] + K["tail"])
        k_late = lambda heads: head_queue(K, v_start - cc - K["fill"], V["a_head"] + heads, relax=relax)
        q_s = mx(q + k_late(0.0 * q), q + behind * (s0_hbm(0.0 * q) - q))
        q_f = mx(q_inter, q + k_late(K1["a_head"]), q_inter + behind * (s0_hbm(K1["a_head"]) - q_inter))
        # ... and a V that fits its buffers has then landed whole: P.V_0 runs its sub-tiles back to back
        m_v = V["gemm_busy"] / V["g"]
        v_body = V["body"] + behind * jnp.where(m_v < V["depth"] + 0.5, m_v * V["g"] + V["tail"] - V["body"], 0.0)
        single2 = mx(q_s + m_p, v_start + V["fill"]) + v_body
        # softmax j ends (m_r - m_a after P_j) while P.V_j runs: it frees P.V_{j+1}'s and QK_{j+2}'s
        # output buffers, so their head DMAs queue on the controller ahead of P.V_j's later ones
        pv0 = mx(q_f + m_p, v_start + V["fill"])
        sm_end0 = q_f + m_p + m_r - m_a - pv0  # after P.V_0's first GEMM (P.V_0 may wait for V_0)
        # ... and (operands held in TCM) their reads hold the TCM port P.V_j's output write-back needs
        # (``port_queue``: ``wb``, P.V_j's write-back delay, at least its GEMMs' ``late``)
        wb0 = lambda heads, tcm_heads: port_queue(v_body - V["tail"], sm_end0, tcm_heads,
                                                 head_queue(V, sm_end0, heads, relax=relax), relax=relax)
        first2 = pv0 + v_body + wb0(V1["a_head"] + K["a_head"], V1["tcm_head"] + K["tcm_head"])
        first2_two = pv0 + v_body + wb0(V1["a_head"], V1["tcm_head"])  # a two-tile visit: no QK_2
        # Without the last tile's times (one set of terms for visits of any length) P.V_0's write-back
        # queues behind V_1's reads only, as a visit's last but one P.V's does: exact for two tiles, and
        # longer visits count that tile's wait behind QK_2's reads at their last but one instead
        first2_any = first2 if last is not None else pv0 + v_body + wb0(V1["a_head"] + K["a_head"], V1["tcm_head"])
        late = head_queue(V, m_r - m_a, V["a_head"] + K["a_head"], relax=relax)  # a steady tile's P.V_j
        wb = port_queue(V["gspan"], m_r - m_a, V["tcm_head"] + K["tcm_head"], late, relax=relax)
        # the visit's last but one P.V: only the last tile's V head (no Q.K^T two tiles on)
        late_r, wb_r = late, wb
        if last is not None:
            late_r = head_queue(V, m_r - m_a, last["V"]["a_head"], relax=relax)
            wb_r = port_queue(V["gspan"], m_r - m_a, last["V"]["tcm_head"], late_r, relax=relax)
        # the accumulator chain: P.V_j's write-back -> merge j -> P_{j+1} -> P.V_{j+1}. The engine:
        # outside P.V_j's hold it serves the Q.K^T sub-tiles, at most as fast as the Q.K^T
        # composites in flight (the spec's score buffers, AHBM_TCM_BUFFERS) cycle their operand buffers
        # (each buffer one sub-tile per DMA + latency + GEMM: a latency-bound stream), all of them
        # landed when the hold ends at best: P.V_j's span, then that staircase over the tile's sub-tiles
        n_buf = AHBM_TCM_BUFFERS["opt2"][0] * K["depth"]
        k_out = lambda i: staircase(mx(i - 1.0, 0.0 * q), K["stage"], K["cycle"], n_buf, relax=relax) + K["g"]
        sat_lat = V["gspan"] + k_out(m_k)
        # the P buffer: P.V_{j+1}'s composite (its V DMA included) starts once softmax j consumed
        # P_{j-1}'s buffer, so softmax j -> V_{j+1} lands -> P.V_{j+1} -> merge j + 1 -> softmax j + 2
        # spans two tiles (the softmax's MATH but O * corr, then the merge's +)
        p_buf = 0.5 * (m_p + m_r + V["fill"] + V["body"])
        # P.V_j's span (its hold on the engine) is ``late`` longer but in the visit's last tile
        # (no composite after it): that one keeps the queue-free period
        D_last = mx(sat, sat_lat, V["body"] + m_a + m_p, floor, p_buf)
        sm = m_p + m_r - m_a  # the softmax's MATH (O * corr apart)

        def steady_d(late, wb):
            D = mx(sat + late, sat_lat + late, V["body"] + wb + m_a + m_p, floor, p_buf + 0.5 * late)
            # ... and QK_{j+2}'s DMA (gated by softmax j as well, queued behind V_{j+1}'s head) lands after
            # V_{j+1}: when P_{j+1} is ready by then, P.V_{j+1} takes the engine first and QK_{j+2}'s
            # sub-tiles follow its span (its landed buffers, then its buffer staircase: its own gspan),
            # so S_{j+2} -> softmax j + 2 closes the same two-tile chain
            if relax is not None:
                return D
            k_end = mx(V["fill"] + V["gspan"] + late, V["a_head"] + K["fill"]) + K["gspan"]  # QK_{j+2}'s last GEMM
            # ... unless QK_{j+2}'s later DMAs (requested as its GEMMs end) queue on the controller behind
            # V_{j+2}'s and QK_{j+3}'s heads, requested when softmax j + 1 ends (one D after softmax j)
            # before QK_{j+2}'s first GEMM does: from softmax j's end the controller serves both
            # softmaxes' heads, then those DMAs, the last one's latency and GEMM after them
            queued = (m_k > K["depth"] + 0.5) & (D <= V["a_head"] + K["fill"] + K["g"])
            k_hbm = 2.0 * (V["a_head"] + K["a_head"]) + K["dma_busy"] - K["a_head"] + K["fill"] - K["a_first"] + K["g"]
            s_chain = 0.5 * (jnp.maximum(k_end, jnp.where(queued, k_hbm, 0.0)) + K["tail"] + sm)
            p_next = D - sm + m_p  # P_{j+1} ready after softmax j (steady state)
            return jnp.where(p_next <= V["a_head"] + K["fill"], mx(D, s_chain), D)

        D = steady_d(late, wb)
        # the visit's (v - 2) steady terms count one for its last tile, whose write-back no reads precede
        # (nothing is issued after it): its first term takes that queue back
        port_extra = 0.0 * q if relax is not None else D - steady_d(late, late)
        D_alt, odd = D, 0.0 * q
        if relax is None and nxt is None and steady:
            # QK_{j+2}'s DMA starts at softmax j's end, behind V_{j+1}'s head; when its head sub-tiles land
            # after P.V_{j+1} took the engine, none of its GEMMs ran before that hold, and its later DMAs are
            # requested only as its GEMMs end after the hold: S_{j+2} ends a whole buffer staircase (its own
            # gspan) after P.V_{j+1}'s span, a long iteration. QK_{j+3}'s heads land during it and its first
            # sub-tiles take the engine's idle gaps of that staircase, so the next iteration only runs its
            # rest after P.V_{j+2}: long and short iterations alternate. Follow (n = QK_{j+1}'s sub-tiles
            # started before P.V_j takes the engine, lam = its heads' landing) over a few iterations from
            # n = 0 and take the mean of the last two, at least the steady D (its per-tile floors bound
            # a pair's mean, not each iteration). Exact form only, as opt3's wait recursion (the relaxed
            # one keeps D).
            hold = V["gspan"] + late  # P.V_j's span from its start (the iteration's)
            sm_end = m_r - m_a  # softmax j ends (QK_{j+2}'s and V_{j+1}'s DMAs start) after P_j
            stair_k = lambda i: staircase(i, K["stage"], K["cycle"], K["depth"], relax=None)
            started_k = lambda t_: started(t_, K["stage"], K["cycle"], K["depth"])
            # The controller at softmax j's end: P.V_j's later DMAs requested by then (one per GEMM ended,
            # FIFO: the last one's transfer ends after its request or its predecessor's, which landed by
            # its GEMM), then V_{j+1}'s and QK_{j+2}'s heads (so those land only after P.V_j's backlog),
            # then P.V_j's DMAs requested after them. QK_{j+1}'s DMAs requested after softmax j (as its
            # GEMMs end, after the hold) queue behind all that, as P.V_j's behind the heads (``late``):
            # its last GEMM is at least those transfers, the last one's latency and GEMM after the
            # controller frees
            stair_v = lambda i: staircase(i, V["stage"], V["cycle"], V["depth"], relax=None)
            dl = K["fill"] - K["a_first"]
            v_req = jnp.clip(jnp.minimum(started(sm_end - V["g"], V["stage"], V["cycle"], V["depth"]),
                                         m_v - V["depth"]), 0.0, None)
            i_v = v_req - 1.0 + V["depth"]  # the last V_j DMA requested before softmax j's end
            v_end = jnp.where(v_req > 0.5, jnp.maximum(stair_v(v_req - 1.0) + V["g"], stair_v(i_v - 1.0) - dl)
                              + V["a_full"], -jnp.inf)
            land = jnp.maximum(sm_end, v_end) + V["a_head"] + K["fill"]  # QK_{j+2}'s heads landed
            ctrl = (jnp.maximum(sm_end, v_end) + V["a_head"] + K["a_head"]
                    + jnp.maximum(m_v - V["depth"] - v_req, 0.0) * V["a_full"])
            ended = started_k(sm_end - K["g"] - hold)  # QK_{j+1}'s GEMMs after the hold ended by softmax j's end
            # A V of no more sub-tiles than operand buffers, streamed from HBM, is requested whole at softmax
            # j's end (its P buffer freed) and lands a whole iteration before P_{j+1} at best: P.V_{j+1} then
            # runs its sub-tiles back to back, not at its stream's pace, and holds the engine that much less.
            # Its span from its start, V_{j+1} landing ``x`` after it (its transfers back to back on the
            # controller after P.V_j's backlog, as QK_{j+2}'s heads' ``land``); at most the streamed span
            whole = (m_v < V["depth"] + 0.5) & (V["dma_busy"] > 0.0)
            v_land = jnp.maximum(sm_end, v_end) + V["a_head"] + V["fill"] - V["a_first"]  # after P_j
            span = lambda x: jnp.where(whole, jnp.clip(jnp.maximum(x + V["g"], x - (m_v - 1.0) * V["a_full"]
                                                                   + V["gemm_busy"]), V["gemm_busy"], V["gspan"]),
                                       V["gspan"])
            hold = span(v_land - D) + late  # the first iteration's P.V, as after an iteration of D
            n, lam, lens, state = 0.0 * q, land - D, [], []  # (lam: as after an iteration of D)
            w = 0.0 * q  # P.V_j's wait for the engine past P_j (softmax j's end, ``land``, that much earlier)
            for _ in range(4):
                r = m_k - n  # QK_{j+1}'s sub-tiles left when P.V_j's hold ends
                base = jnp.maximum(hold, lam)  # its landed buffers first, then its buffer staircase
                state.append((n, base))
                # its DMAs requested after softmax j's end: those of its rest's GEMMs ending after it
                n_q = jnp.maximum(r - K["depth"] - jnp.minimum(ended, r), 0.0)
                queued = jnp.where(n_q > 0.5, ctrl + n_q * K["a_full"] + dl + K["g"], -jnp.inf)
                e = jnp.where(r > 0.5, jnp.maximum(base + stair_k(jnp.maximum(r - 1.0, 0.0)) + K["g"], queued), -jnp.inf)
                # P.V_{j+1} starts at P_{j+1}: S_{j+1}'s last epilogue and write-back (merge j before), then
                # m_p (V_{j+1}'s landing and the per-tile floors bound the pair's mean: D, below)
                # (QK_{j+1}'s r score write-backs, requested after the hold, queue behind P.V_j's output
                # write-back on the TCM port: S_{j+1} is done no earlier than that write-back + r of them)
                wb_end = hold - late + wb + V["tail"]
                L = jnp.maximum(jnp.maximum(e + K["tail"], wb_end + r * K["w"]), wb_end + m_a) + m_p
                lens.append(L)
                # QK_{j+2}'s sub-tiles started before P.V_{j+1} takes the engine: its own staircase from
                # its landing (or the hold's end), in the engine time QK_{j+1}'s sub-tiles leave
                t0 = jnp.maximum(land - w, hold)
                win = L - t0
                work = (r - jnp.clip(started_k(t0 - base), 0.0, r)) * K["g"]  # QK_{j+1}'s GEMMs after t0
                fit = jnp.ceil((win - work) / K["g"] - 1e-6)
                n = jnp.where(win > 0.0, jnp.clip(jnp.minimum(started_k(win), fit), 0.0, m_k), 0.0)
                # ... and P.V_{j+1} takes the engine only after the one running when P_{j+1} is ready
                # (``pv_start``): that wait lengthens the iteration and moves softmax j + 1's end, so
                # QK_{j+3}'s heads' landing, earlier against P.V_{j+1}'s start (alternating waits)
                k0 = t0 + work
                pv_next = jnp.where((n > 0.5) & (L > k0), pv_start(L, k0, k0 + K["gspan"], K, relax=None), L)
                lens[-1] = pv_next
                hold = span(v_land - w - pv_next) + late  # P.V_{j+1}'s span, V_{j+1} landed before its start
                lam, w = land - w - pv_next, pv_next - L
            D_alt = jnp.maximum(D, 0.5 * (lens[-1] + lens[-2]))
            if last is not None:
                # A visit's steady tiles (merge to merge) follow that alternation from a short one (QK_1 ran
                # alongside QK_0, P.V_0's hold does not delay it), and its last tile takes the next phase:
                # with an odd count of steady tiles one more is short, and the last is long: its Q.K^T's
                # rest after P.V_{v-2}'s hold as in a long iteration (the same sub-tiles started before it,
                # its later DMAs behind V_{v-1}'s head only), none for a short ragged one
                Kl = last["K"]
                n_l, base_l = (jnp.where(lens[-1] > lens[-2], a, b) for a, b in zip(state[-1], state[-2]))
                r_l = jnp.maximum(Kl["gemm_busy"] / Kl["g"] - n_l, 0.0)
                n_ql = jnp.maximum(r_l - Kl["depth"] - jnp.minimum(ended, r_l), 0.0)
                e_l = jnp.maximum(base_l + staircase(jnp.maximum(r_l - 1.0, 0.0), Kl["stage"], Kl["cycle"], Kl["depth"],
                                                     relax=None) + Kl["g"],
                                  jnp.where(n_ql > 0.5, ctrl - K["a_head"] + n_ql * Kl["a_full"] + dl + Kl["g"], -jnp.inf))
                last_long = jnp.where(r_l > 0.5, jnp.maximum(e_l + Kl["tail"] - V["gspan"] - wb - V["tail"] - m_a, 0.0),
                                      0.0)
                # (only where the iterations alternate: equal ones, each longer than D, have no odd phase)
                alternate = (0.5 * (lens[-1] + lens[-2]) > D) & (jnp.abs(lens[-1] - lens[-2]) > 1e-6 * D)
                odd = jnp.where(alternate, jnp.minimum(lens[-1], lens[-2]) - D_alt + last_long, 0.0)
        # the controller idles at the end of each P.V's hold (``hold_idle``): a visit's middle tile (between
        # its second and its last but one, ``D_mid``) is at least its HBM work plus that idle; where this
        # binds the mean per tile is that bound and the alternation's odd-count correction does not apply.
        # Exact form only (the relaxed one keeps the HBM floor)
        D_mid, hbm_pre = D_alt, None
        if relax is None and nxt is None and steady and last is not None:
            hbm_mid = busy["hbm"] + hold_idle(t, t)
            odd = jnp.where(hbm_mid >= D_alt, 0.0, odd)
            D_mid = jnp.maximum(D_alt, hbm_mid)
            hbm_pre = busy["hbm"] + hold_idle(t, last)  # the visit's last but one tile, before its last
        # the tile after the first: QK_1's sub-tiles that ran during QK_0 (``credit``) and, when QK_0's
        # later DMAs queued behind it, QK_1's head transfer (in ``first2``) are done already
        floor_c = mx(*(v - (behind * K1["a_head"] if k == "hbm" else 0.0) for k, v in busy.items() if k != "gemm"))
        D_c = lambda late, wb: mx(sat - credit + late, V["gspan"] + late + k_out(m_k - slots) * (m_k > slots + 0.5),
                                  V["body"] + wb + m_a + m_p, floor_c, p_buf + 0.5 * late)
        # a visit of two tiles: its second is the last (``first_two``; of three or more, P.V_1 is late too)
        out = {"single": single2, "first": first2_any + D_c(late, wb) - D_last - port_extra, "last": D_last, "D": D_alt,
               "drain": drain, "first_two": first2_two + D_c(0.0 * q, 0.0 * q) - D_last}
        if last is not None:  # three tiles: P.V_0 behind V_1's and the last tile's K head, P.V_1 its V head
            first3 = pv0 + v_body + wb0(V["a_head"] + last["K"]["a_head"], V["tcm_head"] + last["K"]["tcm_head"])
            D_pre = mx(steady_d(late_r, wb_r), D_alt - wb + wb_r)
            out.update(first_three=first3 + D_c(late_r, wb_r) - D_last - port_extra, odd=odd, D_mid=D_mid,
                       D_pre=D_pre if hbm_pre is None else jnp.maximum(D_pre, hbm_pre))
        return out
    check_choice("pipeline", pipeline, PIPELINES)
    raise AssertionError(pipeline)  # a pipeline in PIPELINES without a branch here


def head_queue(S: dict, t_h, heads, *, relax: Relax | None):
    """Delay (us) of a streamed composite's last GEMM when ``heads`` us of other composites' head
    transfers are requested on the PE's controller ``t_h`` after its first GEMM started: its
    sub-tile i >= depth's DMA is requested as sub-tile i - depth's GEMM ends (FIFO), so the first
    one requested after the heads moves up to ``heads`` later. What the stream's staircase leaves
    between that sub-tile's landing and its GEMM absorbs part (nothing when it is paced by its
    buffer cycle); the rest shifts every later sub-tile. A stream paced by its transfers (the
    controller or the TCM port busy) gains nothing: the heads' transfers are work that port does
    anyway, the composites they head then start with them landed (its own tile terms count them).
    Exact only (relaxed: 0, as the first tile's ``behind``)."""
    if relax is not None:
        return 0.0 * t_h
    stair = lambda i: staircase(i, S["stage"], S["cycle"], S["depth"], relax=None)
    m = S["gemm_busy"] / S["g"]
    k = started(t_h - S["g"], S["stage"], S["cycle"], S["depth"])  # later DMAs requested before the heads
    late = jnp.clip(t_h + heads - (stair(k) + S["g"]), 0.0, heads)
    slack = stair(k + S["depth"]) - stair(k) - S["cycle"]  # > 0: the stream is paced by its slowest stage
    # (0 when its buffer cycle paces it, up to float32 rounding: a relative tolerance, else the rounding
    # of the rates decides which case applies)
    io_paced = (S["stage"] > S["g"]) & (S["stage"] > S["ep_busy"] / m) & (slack > 1e-5 * S["cycle"])
    return jnp.where((m > S["depth"] + k + 0.5) & ~io_paced, jnp.maximum(late - slack, 0.0), 0.0)


def port_queue(gspan, t_h, heads, late, *, relax: Relax | None):
    """Delay (us) of a P.V's output write-back past its GEMM span ``gspan`` (its last GEMM ``late``
    after that) when ``heads`` us of operand reads from TCM (the next composites' heads: ring blocks
    held in TCM) are requested on the TCM port ``t_h`` after its first GEMM start. The port serves
    in request order: reads requested before the write-back (at its last GEMM's end) go first, so it
    starts only after them. At least ``late``. Exact only (relaxed: ``late``, as ``head_queue``)."""
    if relax is not None:
        return late
    first = (heads > 0.0) & (t_h <= gspan + late)  # the reads are requested first
    return jnp.where(first, jnp.maximum(late, t_h + heads - gspan), late)


def hold_idle(t: dict, nxt: dict):
    """opt2, exact: time (us) the PE's HBM controller idles at the end of P.V_j's hold on the GEMM
    engine's accumulators, for a tile of times ``t`` followed by one of times ``nxt``.

    When V_j has more sub-tiles than operand buffers, P.V_j requests its last DMA as its own GEMM
    frees a buffer; when that is after softmax j ended, the heads softmax j released (V_{j+1}'s and
    QK_{j+2}'s) are queued before it, and every other stream waits on the engine: QK_{j+1}'s and
    QK_{j+2}'s buffers are full behind the hold, and V_{j+1} (more sub-tiles than buffers too)
    requests its later DMAs only as P.V_{j+1} runs, after S_{j+1}. So after that last transfer the
    controller has nothing to serve until the sub-tile lands (the DMA latency), P.V_j's last GEMM
    runs and releases the engine, and the next Q.K^T sub-tile's GEMM ends and frees a buffer.
    0 where the conditions do not hold. (P.V_j is taken to start at P_j: a later start only
    requests that last DMA later still.)"""
    V, V1 = t["V"], nxt["V"]
    m_v, m_v1 = V["gemm_busy"] / V["g"], V1["gemm_busy"] / V1["g"]
    last_req = staircase(jnp.maximum(m_v - 1.0 - V["depth"], 0.0), V["stage"], V["cycle"], V["depth"],
                         relax=None) + V["g"]  # after P.V_j's first GEMM start
    sm_end = t["m_r"] - t["m_a"]  # softmax j ends after P_j (its MATH but O * corr)
    on = (m_v > V["depth"] + 0.5) & (m_v1 > V1["depth"] + 0.5) & (last_req > sm_end)
    return jnp.where(on, V["fill"] - V["a_first"] + V["g"] + nxt["K"]["g"], 0.0)


def pv_start(r, k0, k_end, K: dict, *, relax: Relax | None):
    """GEMM start of a P.V whose operands are ready at ``r`` while a Q.K^T stream runs on the
    engine from ``k0`` to ``k_end`` in sub-tiles of ``K['g']``: a Q.K^T sub-tile requests the
    engine's accumulators when its predecessor ends, so the P.V waits for the sub-tile running at
    ``r`` (the end of its step of the staircase) and, when the next one requested first (its
    request races the P.V's within the stream's period), for that one too; the model takes the
    mean of the two. Relaxed: the staircase's mean, r + g / 2."""
    g, mx = K["g"], (lambda *a: smax(*a, relax=relax))
    mn = lambda a, b: -smax(-a, -b, relax=relax)
    if relax is None:
        step = k0 + jnp.ceil(jnp.maximum(r - k0, 0.0) / g) * g
        # a latency-bound stream (its sub-tiles start ``period`` > g apart on average: the buffers'
        # first sub-tiles back to back, then a buffer cycle) leaves the engine idle between them:
        # the P.V waits only for a sub-tile running at r, and no next one races it
        per = K["period"]
        i = jnp.maximum(started(r - k0, K["stage"], K["cycle"], K["depth"]) - 1.0, 0.0)
        busy_end = k0 + staircase(i, K["stage"], K["cycle"], K["depth"], relax=None) + g
        gapped = jnp.where(r < busy_end, busy_end, r)
        return mx(r, mn(k_end, jnp.where(per > g * (1.0 + 1e-6), gapped, 0.5 * (step + r + g))))
    step = r + 0.5 * g
    return mx(r, mn(k_end, 0.5 * (step + r + g)))


def last_opt3(t: dict, s_wait, *, relax: Relax | None = None):
    """opt3's last tile (no Q.K^T to issue), its S ready ``s_wait`` after the term starts."""
    mx = lambda *a: smax(*a, relax=relax)
    c, cc, V = t["c"], t["cc"], t["V"]
    pre, post = t["pre_ops"] * c, N_POST_PV * c
    s0 = mx(s_wait, 0.0 * s_wait)
    return mx(mx(s0 + pre, t["m_a"]) + t["m_p"], s0 + pre + cc + V["fill"]) + V["body"] + post


def tile_busy(t: dict, pipeline: str) -> dict:
    """Busy time (us) of one tile of times ``t`` on each resource of its PE: the HBM controller,
    the GEMM engine, MATH (softmax with the scale epilogue, merge), the TCM port and CPU issue."""
    n_comp, n_prim = issues_per_tile(pipeline)
    if n_prim:  # a partial tile's mask ops are issued too (opt2's ex_composite issues none)
        n_prim = n_prim + t["pre_ops"] - N_PRE_PV
    K, V = t["K"], t["V"]
    return {"hbm": K["dma_busy"] + V["dma_busy"], "gemm": K["gemm_busy"] + V["gemm_busy"],
            "math": t["m_s"] + t["m_o"], "tcm": K["tcm_busy"] + V["tcm_busy"],
            "cpu_issue": n_comp * t["cc"] + n_prim * t["c"]}


def visit_time(tf: dict, tr: dict, v, pipeline: str, *, relax: Relax | None):
    """One visit of v tiles (tile times ``tf`` for all but the last, ``tr`` for the last, ragged
    one), excluding its overhead: single (v = 1) or first + (v - 2) D + last, then the drain.
    Relaxed in v: linear between v = 1 and v = 2 (exact at integers)."""
    queued = pipeline == "opt2" and relax is None  # the P.V before the last tile queues behind its V head only
    # ``last`` adds only opt2's first_three / D_pre to the terms: one call gives both
    full = sweep_terms(tf, pipeline, relax=relax, last=tr if queued else None)
    ragged = sweep_terms(tr, pipeline, relax=relax, steady=False, prev=tf)  # its single / last / drain only
    first, pre_last = full["first"], 0.0
    last = ragged["last"]
    if queued:
        first = jnp.where(v < 2.5, sweep_terms(tf, pipeline, relax=relax, nxt=tr)["first_two"],
                          jnp.where(v < 3.5, full["first_three"], first))
        # (v >= 4: the last but one tile's term, and v - 3 middle ones')
        pre_last = jnp.where(v < 3.5, 0.0, full["D_pre"] - full["D"] + (v - 3.0) * (full["D_mid"] - full["D"]))
        pre_last = pre_last + jnp.where((v > 4.5) & (jnp.mod(v, 2.0) > 0.5), full["odd"], 0.0)  # odd steady count
    steady = jnp.maximum(v - 2.0, 0.0) * full["D"]
    if pipeline == "opt3":  # the iteration before the ragged tile issues its (smaller) Q.K^T
        before = sweep_terms(tf, pipeline, relax=relax, nxt=tr)
        two = v < 2.5
        first = jnp.where(two, before["first_two"], first)
        pre_last = jnp.where(two, 0.0, before["D0"] - full["D0"])
        if "lens" in full:
            # exact: the steady iterations alternate (long / short) from the visit's first one on, so
            # its n = v - 2 steady tiles are the recursion's first n iterations (a two-cycle after
            # four)
            n = jnp.maximum(v - 2.0, 0.0)
            L = full["lens"]
            cum = jnp.concatenate([jnp.zeros_like(L[..., :1]), jnp.cumsum(L, -1)], -1)
            extra = jnp.maximum(n - 4.0, 0.0)
            pick = lambda a, i: jnp.take_along_axis(a, jnp.expand_dims(i.astype(jnp.int32), -1), -1)[..., 0]
            steady = (pick(cum, jnp.minimum(n, 4.0)) + jnp.floor(extra / 2.0) * (L[..., 2] + L[..., 3])
                      + jnp.mod(extra, 2.0) * L[..., 2])
        last = last_opt3(tr, jnp.where(two, before["s_after_first"], before["s_after_D"]), relax=relax)
    multi = jnp.clip(v - 1.0, 0.0, 1.0)
    total = ((1.0 - multi) * ragged["single"] + multi * (first + last)
             + steady + pre_last + ragged["drain"])
    if relax is None:
        # no schedule moves the visit's K / V faster than its controller: all of its transfers, then the
        # last V sub-tile's latency, GEMM and write-back and the merge. The per-tile terms floor each
        # tile by its own traffic, but a tile's term does not carry the next tile's Q.K^T DMAs that
        # opt3 / opt2 issue during it (a long tile before a short ragged one: its V waits behind them)
        hbm_f, hbm_r = (tile_busy(t, pipeline)["hbm"] for t in (tf, tr))
        Vr = tr["V"]
        tail = Vr["fill"] - Vr["a_first"] + Vr["g"] + Vr["tail"] + tr["m_a"]
        total = jnp.maximum(total, jnp.where(hbm_r > 0.0, jnp.maximum(v - 1.0, 0.0) * hbm_f + hbm_r + tail, 0.0))
    return total


def visits_time(terms: dict, tiles, visits, single_visits, overhead):
    """Sum over visits of equal full tiles: each pays ``overhead`` + its sweep + the merge drain."""
    multi = visits - single_visits
    steady = tiles - single_visits - 2 * multi
    return (visits * (overhead + terms["drain"]) + single_visits * terms["single"]
            + multi * (terms["first"] + terms["last"]) + steady * terms["D"])


def dma_time(hw: AHBM, nbytes):
    """One PE-local DMA (us): transfer on the PE's controller, then the local latency."""
    return nbytes / hbm_rate(hw) + US * hw.dma_local_latency_s


def q_load_time(hw: AHBM, nbytes):
    """A visit's q load (us) before its first tile: the transfer only, as its DMA latency overlaps
    the first K sub-tile's transfer queued behind it on the controller (the first Q.K^T GEMM needs
    both; the sub-tile's own fill carries the latency)."""
    return nbytes / hbm_rate(hw)


def tcm_bytes(hw: AHBM, rows, te, d: int, pipeline: str):
    """TCM a PE holds for a visit: the spec's one TCM-fit rule (``costmodel.hardware.ahbm_tcm_bytes``)."""
    return ahbm_tcm_bytes(hw, rows, te, d, pipeline)


def issues_per_tile(pipeline: str) -> tuple[int, int]:
    """(composites, primitive ops) the CPU issues per tile."""
    return (2, 0) if pipeline == "opt2" else (2, N_SM + N_MG)


__all__ = [
    "ACC_BYTES",
    "DTYPE_BYTES",
    "N_MG",
    "N_POST_PV",
    "N_PRE_PV",
    "N_SM",
    "US",
    "dma_time",
    "hbm_rate",
    "head_queue",
    "hold_idle",
    "issues_per_tile",
    "last_opt3",
    "pad",
    "port_queue",
    "pv_start",
    "q_load_time",
    "sweep_terms",
    "tcm_bytes",
    "tile_busy",
    "tile_times",
    "visit_time",
    "visits_time",
]
