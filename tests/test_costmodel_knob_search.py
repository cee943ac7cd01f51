"""Gradient tuning and exhaustive search against a brute force over the full discrete evaluator."""

import dataclasses
import itertools

import pytest

from costmodel.blackhole import MATMULS, BlackholeConfig, evaluate, knob_search, load_fitted
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()
FIT = load_fitted()
START = BlackholeConfig.for_expert(CFG, matmuls="default")


def _accepted_by_evaluator(bc) -> bool:
    try:
        evaluate(HW, FIT, bc, cfg=CFG)
    except ValueError:
        return False
    return True


def test_valid_set_equals_what_the_evaluator_accepts():
    """Enumerate every integer pair in range for wo and keep what the discrete evaluator accepts."""
    brute = []
    for ibw, pcn in itertools.product(range(1, 2048 // 32 + 1), range(1, 1536 // 32 + 1)):
        if (2048 // 32) % ibw or (1536 // 32) % pcn:  # cheap pre-filter; the evaluator re-checks below
            continue
        if _accepted_by_evaluator(START.replace(matmuls=START.port.matmuls.replace(
                wo=dataclasses.replace(START.port.matmuls["wo"], in0_block_w=float(ibw), per_core_N=float(pcn))))):
            brute.append((ibw, pcn))
    assert sorted(knob_search.valid_matmul_configs("wo", HW, START, cfg=CFG)) == sorted(brute)
    # and the pre-filter did not hide anything: a non-divisor is rejected by the evaluator
    wo3 = dataclasses.replace(START.port.matmuls["wo"], in0_block_w=3.0)
    assert not _accepted_by_evaluator(START.replace(matmuls=START.port.matmuls.replace(wo=wo3)))


@pytest.fixture(scope="module")
def searches():
    return knob_search.exhaustive(HW, FIT, START, cfg=CFG), knob_search.gradient_tune(HW, FIT, START, cfg=CFG)


@pytest.mark.parametrize("op", ["w2", "attention"])
def test_exhaustive_matches_brute_force_step(op, searches):
    """Per-op exhaustive optimum == argmin of the full 64-layer step over the same op's configs."""
    ex, _ = searches
    best = None
    if op == "attention":
        for k, q in knob_search.valid_attention_configs(HW, START, cfg=CFG):
            t = evaluate(HW, FIT, START.replace(k_chunk=float(k), q_chunk=float(q)), cfg=CFG)["step_ms"]
            best = min(best or (t, (k, q)), (t, (k, q)))
    else:
        for ibw, pcn in knob_search.valid_matmul_configs(op, HW, START, cfg=CFG):
            mm = dataclasses.replace(START.port.matmuls[op], in0_block_w=float(ibw), per_core_N=float(pcn))
            bc = START.replace(matmuls=START.port.matmuls.replace(**{op: mm}))
            t = evaluate(HW, FIT, bc, cfg=CFG)["step_ms"]
            best = min(best or (t, (ibw, pcn)), (t, (ibw, pcn)))
    start = {n: {"config": (START.port.matmuls[n].in0_block_w, START.port.matmuls[n].per_core_N)} for n in MATMULS}
    start["attention"] = {"config": (START.port.attention.k_chunk, START.port.attention.q_chunk)}
    chosen = knob_search.apply_configs(START, {**start, op: ex["per_op"][op]})
    assert evaluate(HW, FIT, chosen, cfg=CFG)["step_ms"] == pytest.approx(best[0], rel=1e-5)


def test_gradient_tuning_reaches_the_exhaustive_optimum(searches):
    ex, gr = searches
    tuned_grad = knob_search.apply_configs(START, gr["per_op"])
    tuned_ex = knob_search.apply_configs(START, ex["per_op"])
    t_grad = evaluate(HW, FIT, tuned_grad, cfg=CFG)["step_ms"]  # validates: the projection is feasible
    t_ex = evaluate(HW, FIT, tuned_ex, cfg=CFG)["step_ms"]
    t_start = evaluate(HW, FIT, START, cfg=CFG)["step_ms"]
    assert t_ex <= t_grad <= 1.01 * t_ex
    assert t_grad < 0.9 * t_start  # the default heuristic's small in0_block_w is far from optimal
    assert gr["per_op"]["w2"]["relaxed"][0] > 8 * gr["per_op"]["w2"]["start"][0]
    assert gr["objective"][1] < gr["objective"][0]
    assert ex["evaluations"] == sum(v["n_valid"] for v in ex["per_op"].values())
