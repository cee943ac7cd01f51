"""Per-tile engine times and the three pipelining options of the inner tile (ADR-0060 section 5.6).

One PE runs a tile j as: QK_j = composite [K_j HBM load -> GEMM Q.K^T], SM_j = softmax on the
MATH engine, PV_j = composite [V_j load -> GEMM P.V], MG_j = the O merge on MATH. Engines (HBM
controller, GEMM, MATH) are in-order; a DMA's data lands ``dma_local_latency_s`` after its
transfer; every issued op costs the CPU ``cpu_issue_s`` (N_SM softmax ops, N_MG merge ops, one
per composite) and starts only after its issue. The options differ in what the CPU waits for:

* opt1: issue QK_j, wait for it, issue SM_j and PV_j, wait PV_j, issue MG_j (GEMM idle during SM).
* opt3: as opt1 but QK_{j+1} is issued first (double-buffered S): it runs during SM_j.
* opt2: two composites per tile (QK_j; ex_composite = V_j load, SM_j, PV_j, MG_j), no CPU wait.

A visit of v tiles takes ``single`` (v = 1) or ``first + (v - 2) * D + last`` (v >= 2), then the
last merge drains (``m_o``). opt1 / opt3 are exact closed forms of those rules; opt2's steady
period D is the max of its resource and dependency cycles (HBM and CPU run ahead). The SimPy
model (``simulate``) executes the same rules op by op and checks all of this.
"""

from __future__ import annotations

from costmodel.ahbm.config import PIPELINES
from costmodel.hardware import AHBM
from costmodel.smooth import Relax, sceil, smax
from jaxref.validation import check_choice

N_SM = 7  # softmax issue: max, maximum, sub, exp, sub, exp, sum
N_MG = 4  # merge issue: l * corr + ..., O * corr + O_j
SOFTMAX_ELEMS_PER_SCORE = 5  # scale, max, subtract, exp, sum per score element
SOFTMAX_ELEMS_PER_ROW = 4  # m update, corr exp, l update
MERGE_ELEMS_PER_OUT = 2  # O * corr + O_j
DTYPE_BYTES = 2  # bf16 storage of q / k / v / O
ACC_BYTES = 4  # fp32 (m, l, O)
US = 1e6  # every time of the model is in microseconds (the unit of ``Relax.tau_us``)


def pad(x, q, *, relax: Relax | None):
    """x rounded up to a multiple of q (the composite's 32 x 64 x 32 GEMM tiles)."""
    return sceil(x / q, relax=relax) * q


def tile_times(hw: AHBM, rows, te, d: int, *, relax: Relax | None) -> dict:
    """Engine times (us) of one tile of ``te`` keys for ``rows`` M-folded query rows, head dim d."""
    bw = hw.pe_controller_bytes_per_s * hw.hbm_efficiency
    gemm_rate = hw.gemm_flops_per_cycle_per_pe * hw.pe_clock_hz
    math_rate = hw.math_elems_per_cycle_per_pe * hw.pe_clock_hz
    mp = pad(rows, hw.gemm_tile_m, relax=relax)
    kv = US * te * d * DTYPE_BYTES / bw
    return {
        "LK": kv, "LV": kv, "dl": US * hw.dma_local_latency_s, "c": US * hw.cpu_issue_s,
        "g1": US * 2 * mp * pad(d, hw.gemm_tile_k, relax=relax) * pad(te, hw.gemm_tile_n, relax=relax) / gemm_rate,
        "g2": US * 2 * mp * pad(te, hw.gemm_tile_k, relax=relax) * pad(d, hw.gemm_tile_n, relax=relax) / gemm_rate,
        "m_s": US * (SOFTMAX_ELEMS_PER_SCORE * rows * te + SOFTMAX_ELEMS_PER_ROW * rows) / math_rate,
        "m_o": US * MERGE_ELEMS_PER_OUT * rows * d / math_rate,
    }


def sweep_terms(t: dict, pipeline: str, *, relax: Relax | None) -> dict:
    """(single, first, last, D, drain) of a visit for one pipelining option (us)."""
    mx = lambda *a: smax(*a, relax=relax)
    c, LK, LV, dl, g1, g2, m_s, m_o = (t[k] for k in ("c", "LK", "LV", "dl", "g1", "g2", "m_s", "m_o"))
    q = c + LK + dl + g1  # issue QK, load K, GEMM
    single = mx(q + N_SM * c + m_s, q + (N_SM + 1) * c + LV + dl) + g2 + N_MG * c
    if pipeline == "opt1":
        D = mx(mx(q + N_SM * c, m_o) + m_s, q + (N_SM + 1) * c + LV + dl) + g2 + N_MG * c
        return {"single": single, "first": single, "last": D, "D": D, "drain": m_o}
    if pipeline == "opt3":
        # iteration 0: prime QK_0 at [0, c], issue QK_1 at [c, 2c] (its K waits for K_0's transfer)
        k1_end = mx(2 * c, c + LK) + LK
        q1 = mx(k1_end + dl, q) + g1
        w = mx(2 * c, q)
        first = mx(w + N_SM * c + m_s, mx(w + (N_SM + 1) * c, k1_end) + LV + dl, q1) + g2 + N_MG * c
        D = mx(mx((N_SM + 1) * c, m_o) + m_s, mx((N_SM + 2) * c, c + LK) + LV + dl, c + LK + dl + g1) \
            + g2 + N_MG * c
        last = mx(mx(N_SM * c, m_o) + m_s, (N_SM + 1) * c + LV + dl) + g2 + N_MG * c
        return {"single": single, "first": first, "last": last, "D": D, "drain": m_o}
    if pipeline == "opt2":
        q2 = c + LK + dl + g1
        single2 = mx(mx(q2, 2 * c) + m_s, mx(2 * c, c + LK) + LV + dl) + g2
        D = mx(LK + LV, g1 + g2, m_s + m_o, 2 * c, g2 + mx(g1, m_s + m_o))
        return {"single": single2, "first": single2, "last": D, "D": D, "drain": m_o}
    check_choice("pipeline", pipeline, PIPELINES)
    raise AssertionError(pipeline)  # a pipeline in PIPELINES without a branch here


def visits_time(terms: dict, tiles, visits, single_visits, overhead):
    """Sum over visits: each pays ``overhead`` (Q / O traffic) + its sweep + the merge drain."""
    multi = visits - single_visits
    steady = tiles - single_visits - 2 * multi
    return (visits * (overhead + terms["drain"]) + single_visits * terms["single"]
            + multi * (terms["first"] + terms["last"]) + steady * terms["D"])


def dma_time(hw: AHBM, nbytes):
    """One PE-local DMA (us): transfer on the PE's controller, then the local latency."""
    return US * (nbytes / (hw.pe_controller_bytes_per_s * hw.hbm_efficiency) + hw.dma_local_latency_s)


def tcm_bytes(rows, te, d: int, pipeline: str):
    """TCM a PE holds: Q rows, fp32 (m, l, O), double-buffered K and V tiles, the fp32 score
    buffers (two under opt2 / opt3, which keep S_j and S_{j+1}) and the bf16 probabilities."""
    s_bufs = 1 if pipeline == "opt1" else 2
    return (rows * d * DTYPE_BYTES + rows * (d + 2) * ACC_BYTES + 2 * 2 * te * d * DTYPE_BYTES
            + s_bufs * rows * te * ACC_BYTES + rows * te * DTYPE_BYTES)


def issues_per_tile(pipeline: str) -> int:
    return 2 if pipeline == "opt2" else 2 + N_SM + N_MG


__all__ = [
    "ACC_BYTES",
    "DTYPE_BYTES",
    "N_MG",
    "N_SM",
    "US",
    "dma_time",
    "issues_per_tile",
    "pad",
    "sweep_terms",
    "tcm_bytes",
    "tile_times",
    "visits_time",
]

