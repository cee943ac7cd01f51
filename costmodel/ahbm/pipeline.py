"""Per-tile engine times, streamed composites and the three pipelining options (ADR-0060 section 5.6).

The physics is ``costmodel.ahbm``'s docstring; this module is its closed-form surrogate for one
inner tile. A composite GEMM streams its K / V operand DMA -> GEMM -> write-back per sub-tile
(``gemm_tile_n`` keys for Q.K^T, ``gemm_tile_k`` for P.V) through ``composite_runahead_subtiles``
operand buffers. As a pipeline of m sub-tiles it is summarised by

* ``fill``: DMA start -> first sub-tile landed (one sub-tile's transfer + the DMA latency),
* ``body``: first GEMM start -> composite done = g + (m - 1) x period + write-back, the period
  being the slowest of DMA, GEMM, write-back and the buffer cycle (a + latency + g) / depth,
* ``dma_span``: DMA start -> last transfer end (the HBM controller is busy that long),

so a composite whose DMA starts at t0 and whose GEMM may start at t1 ends at
max(t0 + fill, t1) + body. The options (what the kernel CPU waits for):

* opt1: issue QK_j, wait for it, issue SM_j and PV_j, wait PV_j, issue MG_j (GEMM idle during SM).
* opt3: as opt1 but QK_{j+1} is issued first (double-buffered S): it runs during SM_j.
* opt2: two composites per tile (QK_j; ex_composite = V_j stream, SM_j, PV_j, MG_j), no CPU wait.

A visit of v tiles takes ``single`` (v = 1) or ``first + (v - 2) * D + last`` (v >= 2), then the
last merge drains (``m_o``). ``last`` may be evaluated at a ragged tile's real key count.
"""

from __future__ import annotations

import jax.numpy as jnp

from costmodel.ahbm.config import PIPELINES
from costmodel.hardware import AHBM
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


def _stream(hw: AHBM, keys, sub: int, sub_bytes_per_key, gemm_sub_us, wb_sub_bytes, wb_end_bytes, *,
            src: str, relax: Relax | None) -> dict:
    """Summary of one streamed composite over ``keys`` keys in sub-tiles of ``sub`` keys."""
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
    period = smax(io, gemm_sub_us, (a_full + dl + gemm_sub_us) / depth, relax=relax)
    rest = jnp.maximum(m - 1.0, 0.0) * period
    return {"fill": a_first + dl, "body": gemm_sub_us + rest + w + wb_end_bytes / tcm,
            "dma_span": a_first + rest,
            "dma_busy": keys * sub_bytes_per_key / rate if src != "tcm" else 0.0 * keys,
            "gemm_busy": m * gemm_sub_us}


def tile_times(hw: AHBM, rows, keys, d: int, *, src: str = "hbm", relax: Relax | None) -> dict:
    """Engine times (us) of one tile of ``keys`` real keys for ``rows`` M-folded query rows.

    Returns the streamed Q.K^T ('K') and P.V ('V') composites (``_stream`` summaries), the MATH
    times of softmax ('m_s') and merge ('m_o'), and the issue costs ('c' primitive, 'cc'
    composite). ``src`` is where K / V live: 'hbm' (DMA) or 'tcm' (ring blocks held in TCM).
    """
    gemm_rate = hw.gemm_flops_per_cycle_per_pe * hw.pe_clock_hz / US
    math_rate = hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz / US
    mp = pad(rows, hw.gemm_tile_m, relax=None if isinstance(rows, int) else relax)  # a constant pads exactly
    tn, tk = hw.gemm_tile_n, hw.gemm_tile_k
    kv_bytes = d * DTYPE_BYTES  # per key
    g_qk = 2 * mp * pad(d, tk, relax=None) * tn / gemm_rate  # one sub-tile: N = tn keys (ragged padded)
    g_pv = 2 * mp * tk * pad(d, tn, relax=None) / gemm_rate  # one sub-tile: K = tk keys
    K = _stream(hw, keys, tn, kv_bytes, g_qk, rows * tn * ACC_BYTES, 0.0, src=src, relax=relax)
    V = _stream(hw, keys, tk, kv_bytes, g_pv, 0.0, rows * d * ACC_BYTES, src=src, relax=relax)
    return {
        "K": K, "V": V, "c": US * hw.cpu_issue_s + 0.0 * keys, "cc": US * hw.cpu_issue_composite_s + 0.0 * keys,
        "m_s": (SOFTMAX_ELEMS_PER_SCORE * rows * keys + SOFTMAX_ELEMS_PER_ROW * rows) / math_rate,
        "m_o": MERGE_ELEMS_PER_OUT * rows * d / math_rate + 0.0 * keys,
    }


def sweep_terms(t: dict, pipeline: str, *, relax: Relax | None, nxt: dict | None = None) -> dict:
    """(single, first, last, D, drain) of a visit for one pipelining option (us); ``nxt``: the
    times of the tile after the first one (opt3's first iteration already issues its Q.K^T)."""
    mx = lambda *a: smax(*a, relax=relax)
    K, V, c, cc, m_s, m_o = t["K"], t["V"], t["c"], t["cc"], t["m_s"], t["m_o"]
    K1 = K if nxt is None else nxt["K"]
    q = cc + K["fill"] + K["body"]  # issue QK, stream K, GEMM, write-back
    # one tile alone: QK, then SM after its issue, PV (its V DMA starts at issue), then MG's issue
    single = mx(q + N_SM * c + m_s, q + N_SM * c + cc + V["fill"]) + V["body"] + N_MG * c
    if pipeline == "opt1":
        D = mx(mx(q + N_SM * c, m_o) + m_s, q + N_SM * c + cc + V["fill"]) + V["body"] + N_MG * c
        return {"single": single, "first": single, "last": D, "D": D, "drain": m_o}
    if pipeline == "opt3":
        # iteration 0: prime QK_0 at [0, cc], issue QK_1 at [cc, 2cc] (its DMA after K_0's)
        k1_start = mx(2 * cc, cc + K["dma_span"])
        q1 = mx(k1_start + K1["fill"], q) + K1["body"]  # its GEMMs after QK_0's (FIFO engine)
        w = mx(2 * cc, q)
        v0 = mx(w + N_SM * c + cc, k1_start + K1["dma_span"])
        first = mx(w + N_SM * c + m_s, v0 + V["fill"], q1) + V["body"] + N_MG * c
        # steady: issue QK_{j+1} at [0, cc], SM_j after cc + 7c, PV_j's DMA after K_{j+1}'s,
        # PV_j's GEMM after QK_{j+1}'s (FIFO engine)
        D = mx(mx(cc + N_SM * c, m_o) + m_s, mx(2 * cc + N_SM * c, cc + K1["dma_span"]) + V["fill"],
               cc + K1["fill"] + K1["body"]) + V["body"] + N_MG * c
        last = mx(mx(N_SM * c, m_o) + m_s, N_SM * c + cc + V["fill"]) + V["body"] + N_MG * c
        return {"single": single, "first": first, "last": last, "D": D, "drain": m_o}
    if pipeline == "opt2":
        v_start = mx(2 * cc, cc + K["dma_span"])
        single2 = mx(mx(q, 2 * cc) + m_s, v_start + V["fill"]) + V["body"]
        D = mx(K["dma_busy"] + V["dma_busy"], K["gemm_busy"] + V["gemm_busy"], m_s + m_o, 2 * cc,
               V["body"] + mx(K["gemm_busy"], m_s + m_o))
        return {"single": single2, "first": single2, "last": D, "D": D, "drain": m_o}
    check_choice("pipeline", pipeline, PIPELINES)
    raise AssertionError(pipeline)  # a pipeline in PIPELINES without a branch here


def visit_time(tf: dict, tr: dict, v, pipeline: str, *, relax: Relax | None):
    """One visit of v tiles (tile times ``tf`` for all but the last, ``tr`` for the last, ragged
    one), excluding its overhead: single (v = 1) or first + (v - 2) D + last, then the drain.
    Relaxed in v: linear between v = 1 and v = 2 (exact at integers)."""
    full, ragged = sweep_terms(tf, pipeline, relax=relax), sweep_terms(tr, pipeline, relax=relax)
    first, pre_last = full["first"], 0.0
    if pipeline == "opt3":  # the iteration before the ragged tile issues its (smaller) Q.K^T
        before = sweep_terms(tf, pipeline, relax=relax, nxt=tr)
        first = jnp.where(v < 2.5, before["first"], first)
        pre_last = jnp.where(v >= 2.5, before["D"] - full["D"], 0.0)
    multi = jnp.clip(v - 1.0, 0.0, 1.0)
    return ((1.0 - multi) * ragged["single"] + multi * (first + ragged["last"])
            + jnp.maximum(v - 2.0, 0.0) * full["D"] + pre_last + ragged["drain"])


def visits_time(terms: dict, tiles, visits, single_visits, overhead):
    """Sum over visits of equal full tiles: each pays ``overhead`` + its sweep + the merge drain."""
    multi = visits - single_visits
    steady = tiles - single_visits - 2 * multi
    return (visits * (overhead + terms["drain"]) + single_visits * terms["single"]
            + multi * (terms["first"] + terms["last"]) + steady * terms["D"])


def dma_time(hw: AHBM, nbytes):
    """One PE-local DMA (us): transfer on the PE's controller, then the local latency."""
    return nbytes / hbm_rate(hw) + US * hw.dma_local_latency_s


def tcm_bytes(hw: AHBM, rows, te, d: int, pipeline: str):
    """TCM a PE holds: Q rows, fp32 (m, l, O), the composites' streaming operand buffers (opt1:
    one QK and one PV in flight; opt3 / opt2: two QK and one / two PV), the fp32 score buffers
    (two under opt2 / opt3, which keep S_j and S_{j+1}), the bf16 probabilities and the P.V output."""
    depth = hw.composite_runahead_subtiles
    tn, tk = hw.gemm_tile_n, hw.gemm_tile_k
    n_qk, n_pv, s_bufs = {"opt1": (1, 1, 1), "opt3": (2, 1, 2), "opt2": (2, 2, 2)}[pipeline]
    operands = depth * (n_qk * tn + n_pv * tk) * d * DTYPE_BYTES
    return (rows * d * DTYPE_BYTES + rows * (d + 2) * ACC_BYTES + operands
            + s_bufs * rows * te * ACC_BYTES + rows * te * DTYPE_BYTES + rows * d * ACC_BYTES)


def issues_per_tile(pipeline: str) -> tuple[int, int]:
    """(composites, primitive ops) the CPU issues per tile."""
    return (2, 0) if pipeline == "opt2" else (2, N_SM + N_MG)


__all__ = [
    "ACC_BYTES",
    "DTYPE_BYTES",
    "N_MG",
    "N_SM",
    "US",
    "dma_time",
    "hbm_rate",
    "issues_per_tile",
    "pad",
    "sweep_terms",
    "tcm_bytes",
    "tile_times",
    "visit_time",
    "visits_time",
]
