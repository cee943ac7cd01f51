"""Model discrepancy and the validation table: the tau estimator against scipy's optimiser on draws
with a known tau, what counts as extrapolation, intervals that widen there, and the held-out
coverage of every stored row (port and public) through the ``validate`` CLI."""

import dataclasses
import json
import math
import pathlib
import re

import numpy as np
import pytest
from scipy import optimize

from costmodel.blackhole import BlackholeConfig, fit, holdout
from costmodel.blackhole.cli import main
from costmodel.blackhole.discrepancy import (
    Discrepancy,
    Domain,
    estimate,
    load_discrepancy,
    op_family,
    op_kind,
    tau_mle,
)
from costmodel.blackhole.intervals import intervals, quantile
from costmodel.blackhole.opspecs import ChipSpec, NormSpec
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig

CFG = ExpertConfig.alpamayo_tt()
HW = blackhole_p150a()
PORT = BlackholeConfig.for_expert(CFG)


@pytest.mark.parametrize("tau", [0.0, 0.13, 0.45])
def test_tau_mle_matches_scipy_on_known_draws(tau):
    rng = np.random.default_rng(7)
    v = rng.uniform(0.001, 0.02, size=3001)  # odd count, unequal base variances
    r = rng.standard_normal(v.size) * np.sqrt(v + tau**2)

    def nll(t):
        tot = v + t**2
        return 0.5 * np.sum(np.log(tot) + r**2 / tot)

    ref = optimize.minimize_scalar(nll, bounds=(0.0, 3.0), method="bounded", options={"xatol": 1e-6}).x
    got = tau_mle(r, v)
    assert got == pytest.approx(ref, abs=2e-3)
    assert got == pytest.approx(tau, abs=0.03)


def test_tau_mle_rejects_bad_input():
    assert tau_mle([], []) == 0.0
    with pytest.raises(ValueError, match="finite"):
        tau_mle([0.1, float("nan")], [0.01, 0.01])
    with pytest.raises(ValueError, match="base_var >= 0"):
        tau_mle([0.1], [-0.01])
    with pytest.raises(ValueError, match="shape"):
        tau_mle([0.1, 0.2], [0.01])


@pytest.mark.parametrize("take_back", [0.0, 0.0015, 0.0032])
def test_tau_mle_takes_back_variance_down_to_its_floor(take_back):
    """Rows that scatter less than the variance the intervals carry (parameters + sigma^2): with a floor
    (sigma^2) the estimate is negative, -sqrt(what they do not use), scipy's optimum over the same range;
    without one it stays at 0 as before."""
    rng = np.random.default_rng(11)
    sigma2 = 0.004
    v = rng.uniform(0.0002, 0.002, size=3001) + sigma2  # parameter variance + sigma^2
    r = rng.standard_normal(v.size) * np.sqrt(v - take_back)

    def nll(d):
        tot = v + d
        return 0.5 * np.sum(np.log(tot) + r**2 / tot)

    ref = optimize.minimize_scalar(nll, bounds=(-sigma2, 0.5), method="bounded", options={"xatol": 1e-9}).x
    got = tau_mle(r, v, floor_var=sigma2)
    assert math.copysign(got**2, got) == pytest.approx(ref, abs=2e-5)
    assert math.copysign(got**2, got) == pytest.approx(-take_back, abs=3e-4)
    assert tau_mle(r, v) == pytest.approx(max(0.0, got), abs=2e-3)  # no floor: clipped at 0, as before
    # never below the floor, however tight the rows
    assert tau_mle(np.zeros(50), np.full(50, 0.005), floor_var=sigma2) == pytest.approx(-math.sqrt(sigma2))
    with pytest.raises(ValueError, match="floor_var"):
        tau_mle(r, v, floor_var=0.01)  # above a row's base variance: it would take its parameter variance
    with pytest.raises(ValueError, match="floor_var"):
        tau_mle(r, v, floor_var=float("nan"))


def test_a_well_priced_family_narrows_below_sigma_and_cli_intervals_keep_the_parameter_variance():
    """A family whose held-out rows scatter less than sigma gets a negative term and shrinks the kinds
    below it in variance; an interval never loses more than sigma^2 (``intervals.op_error_var``), even
    under a calibration with a smaller sigma than the fits the discrepancy was estimated against."""
    from costmodel.blackhole.intervals import op_error_var

    dom = Domain.of([(NormSpec(64, 1536), 17.3)])
    rng = np.random.default_rng(13)
    sigma2 = 0.004

    def rows(n, sd, family, unit, kind=None):
        return [{"class": "norm", "family": family, "kind": kind or family, "unit": unit, "residual": float(x),
                 "base_var": 0.0005 + sigma2, "extrap": "new"} for x in sd * rng.standard_normal(n)]

    held = rows(60, 0.02, "NormSpec[]", "a") + rows(60, 0.3, "SoftmaxSpec[]", "b")
    d = estimate(held, dom, floor_var=sigma2)
    t = d.tau_extrap_family["NormSpec[]"]
    assert -math.sqrt(sigma2) <= t < 0 < d.tau_extrap_family["SoftmaxSpec[]"]
    spec = NormSpec(3200, 1536)  # outside the domain: its family's term, shrunk to its kind's
    assert -sigma2 <= d.form_var(spec, 59.5) < 0
    cal = fit.load_calibration()
    assert op_error_var(cal, d, spec, 59.5) == pytest.approx(cal.sigma**2 + d.form_var(spec, 59.5))
    small = dataclasses.replace(cal, sigma=0.01)
    assert op_error_var(small, d, spec, 59.5) == 0.0  # all of sigma^2 back, nothing more
    assert Discrepancy.from_json(json.loads(json.dumps(d.to_json()))) == d
    assert estimate(held, dom).tau_extrap_family["NormSpec[]"] >= 0  # no floor: as before


def test_domain_flags_unseen_kinds_and_ranges():
    dom = Domain.of([(NormSpec(64, 1536), 17.3), (NormSpec(1024, 128), 6.5)])
    assert dom.extrapolates(NormSpec(96, 1536), 20.0) is None
    assert "not fitted" in dom.extrapolates(NormSpec(64, 1536, fused_residual=True), 20.0)
    assert "not fitted" in dom.extrapolates(ChipSpec(NormSpec(64, 1536), "p100a"), 17.0)
    assert "outside" in dom.extrapolates(NormSpec(3200, 1536), 59.5)  # > 2 x 17.3 us
    assert op_kind(NormSpec(64, 1536)) != op_kind(NormSpec(64, 1536, act_dtype="bfp8"))


def test_extrapolating_rows_get_their_family_term():
    """Rows outside the fitted rows get the extrapolation term of their config family, estimated
    from that family's extrapolating held-out rows (shrunk towards the class's, then the pooled);
    rows inside get the class term; a family never held out gets its class's term."""
    dom = Domain.of([(NormSpec(64, 1536), 17.3)])
    rng = np.random.default_rng(3)

    def rows(n, sd, family, extrap, cls="norm"):
        return [{"class": cls, "family": family, "residual": float(x), "base_var": 0.004, "extrap": extrap}
                for x in sd * rng.standard_normal(n)]

    held = (rows(40, 0.1, "NormSpec[]", None) + rows(40, 0.5, "NormSpec[]", "new")
            + rows(40, 0.05, "SoftmaxSpec[]", "new") + rows(40, 0.3, "MatmulSpec[mcast_2d]", "new", "matmul"))
    d = estimate(held, dom)
    assert d.tau_class["norm"] < 0.15 and 0.3 < d.tau_extrap < 0.7
    assert 0.4 < d.tau_extrap_family["NormSpec[]"] < 0.65 and d.tau_extrap_family["SoftmaxSpec[]"] < 0.12
    # 40 rows against 3 pseudo-rows of the norm class's extrapolation tau (NormSpec and SoftmaxSpec rows)
    t_c = d.tau_extrap_class["norm"]
    assert d.tau_extrap_family["SoftmaxSpec[]"] ** 2 == pytest.approx(
        (40 * tau_mle([h["residual"] for h in held[80:120]], [0.004] * 40) ** 2 + 3 * t_c**2) / 43)
    assert d.var(NormSpec(3200, 1536), 59.5) == pytest.approx(d.tau_extrap_family["NormSpec[]"] ** 2)
    assert d.var(NormSpec(64, 1536), 17.0) == pytest.approx(d.tau_class["norm"] ** 2)
    assert op_family(NormSpec(64, 1536, act_dtype="bfp8")) == op_family(NormSpec(64, 1536)) == "NormSpec[]"
    assert d.sd("norm", "LayerNormSpec[]", True) == t_c  # an unseen family: its class's
    assert d.sd("eltwise", "EltwiseSpec[add]", True) == d.tau_extrap  # an unseen class: the pooled
    assert Discrepancy.from_json(json.loads(json.dumps(d.to_json()))) == d
    with pytest.raises(ValueError, match="tau_extrap_family"):
        Discrepancy.from_json({k: v for k, v in d.to_json().items() if k != "tau_extrap_family"})


def test_a_kind_seen_in_other_sources_gets_its_own_term_shrunk_by_its_sources():
    """The finest tier (issue 26: a discrepancy per op kind): a kind's held-out rows give its own tau,
    shrunk towards its family's (or class's) term with SHRINK_ROWS pseudo-sources, counted in sources
    (a source's rows repeat a few shapes), not rows; a kind no held-out row had keeps the term above."""
    dom = Domain.of([(NormSpec(64, 1536), 17.3)])
    rng = np.random.default_rng(5)
    fam = op_family(NormSpec(64, 1536))
    narrow, wide = op_kind(NormSpec(64, 1536, act_dtype="bfp8")), op_kind(NormSpec(64, 1536, fused_residual=True))

    def rows(n, sd, kind, unit):
        return [{"class": "norm", "family": fam, "kind": kind, "unit": unit, "residual": float(x),
                 "base_var": 0.001, "extrap": "new"} for x in sd * rng.standard_normal(n)]

    # 30 rows of a badly priced kind from 4 sources, 60 of a well priced one from one source
    held = [r for u in "abcd" for r in rows(30, 0.6, wide, u)] + rows(60, 0.02, narrow, "e")
    d = estimate(held, dom)
    above = d.sd("norm", fam, True)
    assert d.kind_sources == {wide: 4, narrow: 1}
    t_w = tau_mle([h["residual"] for h in held[:120]], [0.001] * 120)
    assert d.tau_kind[wide] == pytest.approx(t_w)
    assert d.sd("norm", fam, True, wide) == pytest.approx(math.sqrt((4 * t_w**2 + 3 * above**2) / 7))
    t_n = d.tau_kind[narrow]
    assert t_n < 0.05 < above
    # one source moves the term a quarter of the way: never below half of it, however narrow its rows
    assert d.sd("norm", fam, True, narrow) == pytest.approx(math.sqrt((t_n**2 + 3 * above**2) / 4))
    assert d.sd("norm", fam, True, narrow) > above / 2
    assert d.sd("norm", fam, True, "NormSpec[act_dtype=bfp4]") == above  # never held out: the term above
    assert d.var(NormSpec(64, 1536, act_dtype="bfp8"), 17.0) == pytest.approx(d.sd("norm", fam, True, narrow) ** 2)
    assert Discrepancy.from_json(json.loads(json.dumps(d.to_json()))) == d
    bad = {**d.to_json(), "kind_sources": {wide: 4}}
    with pytest.raises(ValueError, match="tau_kind and kind_sources"):
        Discrepancy.from_json(bad)
    with pytest.raises(ValueError, match="has no 'unit'"):
        estimate([{k: v for k, v in held[0].items() if k != "unit"}], dom)


def test_repeat_spread_is_the_reports_own_pooled_without_the_held_out_source():
    """The additive error of a kernel-only row (``discrepancy.repeat_var``): a report's repeats of one op
    (grouped here by the raw CSV cells with the csv module: op code, attributes, fidelity, every tensor
    column; by spec in ``repeat_groups``) differ by a few tenths of a us that no op model can price. The
    pooled within-group sd is numpy's, pooled over sources without the held-out one; the stored
    statistics (``data/repeat_spreads.json``) are those of the real reports in the test data."""
    import collections
    import csv

    from _shared_data import need_file, profiler_reports_dir

    from costmodel.blackhole.discrepancy import (
        REPEAT_MAX_US,
        is_kernel_only,
        load_repeat_stats,
        repeat_sd,
        repeat_stats,
        repeat_var,
    )
    from costmodel.blackhole.holdout import repeat_spreads
    from costmodel.blackhole.opspecs import KernelSpec
    from costmodel.blackhole.report_reader import MODELLED, read_report

    clip = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
    need_file(clip)
    modelled = {r.line for r in read_report(clip, hw=blackhole_p150a()).timed_rows() if r.status == MODELLED}
    groups = collections.defaultdict(list)
    with open(clip, newline="") as f:
        for n, r in enumerate(csv.DictReader(f), start=2):
            if n in modelled:
                key = tuple(v for k, v in r.items()
                            if k in ("OP CODE", "ATTRIBUTES", "MATH FIDELITY") or k.startswith(("INPUT_", "OUTPUT_")))
                groups[key].append(float(r["DEVICE KERNEL DURATION [ns]"]) / 1e3)
    small = [np.asarray(g) for g in groups.values() if len(g) > 1 and np.mean(g) <= REPEAT_MAX_US]
    dev = np.concatenate([g - g.mean() for g in small])
    want = math.sqrt(float(dev @ dev) / sum(len(g) - 1 for g in small))
    got = repeat_spreads([str(clip)])["report:bh_64_clip_encoder_1"]
    assert math.sqrt(got["ss_us2"] / got["df"]) == pytest.approx(want) and got["df"] == 260
    assert 0.2 < want < 0.4  # a few tenths of a us on 1.5-3 us ops: 10-20% of their time
    stats = {"a": repeat_stats([[1.0, 1.2, 1.4], [2.0, 2.6], [90.0, 95.0]]), "b": repeat_stats([[3.0, 3.1]])}
    assert stats["a"] == {"df": 3, "ss_us2": pytest.approx(0.08 + 0.18)}  # the 90 us op is not additive
    assert repeat_sd(stats) == pytest.approx(math.sqrt((0.26 + 0.005) / 4))
    assert repeat_sd(stats, exclude="a") == pytest.approx(math.sqrt(0.005)) and repeat_sd({}) == 0.0
    with pytest.raises(ValueError, match="finite and > 0"):
        repeat_stats([[1.0, float("nan")]])
    # kernel-only rows only, as an additive error: (sd / predicted)^2, 1 us -> 0.25, 100 us -> 2.5e-5
    spec = NormSpec(64, 1536)
    assert is_kernel_only(KernelSpec(spec)) and is_kernel_only(ChipSpec(KernelSpec(spec), "p100a"))
    assert not is_kernel_only(spec)
    assert repeat_var(0.5, True, 1.0) == pytest.approx(0.25) and repeat_var(0.5, True, 100.0) == pytest.approx(2.5e-5)
    assert repeat_var(0.5, False, 1.0) == 0.0
    with pytest.raises(ValueError, match="finite and > 0"):
        repeat_var(0.5, True, 0.0)
    d = load_discrepancy()
    assert d.repeat_sd_us == pytest.approx(repeat_sd(load_repeat_stats()))
    ks = KernelSpec(spec)
    assert d.var(ks, 2.0) == pytest.approx(d.form_var(ks, 2.0) + (d.repeat_sd_us / 2.0) ** 2)
    assert d.var(spec, 2.0) == pytest.approx(d.form_var(spec, 2.0))
    assert Discrepancy.from_json(json.loads(json.dumps(d.to_json()))) == d
    # the stored statistics are the real reports' (the reports beside the checkout and in tests/data)
    paths = sorted((pathlib.Path(__file__).parent / "data").glob("profiler_*/bh_*.csv")) + sorted(
        profiler_reports_dir().glob("bh_*.csv"))
    fresh = repeat_spreads([str(p) for p in paths if not p.stem.endswith("_perf_report")])
    stored = load_repeat_stats()
    assert set(fresh) == set(stored)
    for src, st in stored.items():
        assert fresh[src]["df"] == st["df"] and fresh[src]["ss_us2"] == pytest.approx(st["ss_us2"]), src


def test_intervals_widen_where_the_model_extrapolates():
    cal = fit.load_calibration()
    rel = {}
    for name, bc in (("port", PORT), ("bfp4 weights", PORT.replace(weights="bfp4"))):
        iv = intervals(cal, HW, bc, cfg=CFG)
        _, lo, hi = iv["ops"]["wqkv"]
        rel[name] = (hi / lo, iv["extrapolating"])
    assert "wqkv" not in rel["port"][1] and "wqkv" in rel["bfp4 weights"][1]
    assert rel["bfp4 weights"][0] > rel["port"][0]
    # by exactly the extrapolation term, which replaces the class term for an op outside the fitted
    # rows: (log half-width / z)^2 moves by tau_extrap^2. The stored estimates are data-driven, so
    # the rule is checked at set values (no family or class term: the pooled one applies)
    stored = load_discrepancy()
    bfp4 = PORT.replace(weights="bfp4")
    width = {}
    for t in (0.0, 0.2):
        disc = dataclasses.replace(stored, tau_extrap=t, tau_extrap_class={}, tau_extrap_family={})
        _, lo, hi = intervals(cal, HW, bfp4, cfg=CFG, discrepancy=disc)["ops"]["wqkv"]
        width[t] = (math.log(hi / lo) / 2) ** 2
    z = quantile(cal)
    assert 0.0 <= stored.tau_extrap < 1.0
    assert width[0.2] - width[0.0] == pytest.approx((z * 0.2) ** 2, rel=1e-3)
    # signed taus: a positive interpolation term widens the port's step, the stored negative one (held-out
    # interpolating rows scatter less than the fit's pooled sigma) narrows it, never below the parameter
    # variance alone (sigma 0, no discrepancy)
    def step_width(c, d):
        _, lo, hi = intervals(c, HW, PORT, cfg=CFG, discrepancy=d)["step_us"]
        return hi - lo

    plus = dataclasses.replace(stored, tau_class={}, tau_pooled=0.1, tau_kind={}, kind_sources={})
    assert stored.tau_pooled < 0
    assert step_width(cal, plus) > step_width(cal, None) > step_width(cal, stored) > step_width(
        dataclasses.replace(cal, sigma=0.0), None)
    _, lo, hi = intervals(cal, HW, PORT, cfg=CFG)["step_us"]
    assert lo < 32500 < hi


def test_validate_cli_held_out_coverage(tmp_path, capsys):
    """Every stored row predicted without its data; with the discrepancy term (estimated without
    the row's own group) 85-95% of the in-scope rows fall inside their 90% intervals (92%, 76% without
    it, when written); the stored discrepancy is what this run estimates."""
    out = tmp_path / "disc.json"
    doc = main(["validate", "--json", "--out", str(out)])
    assert json.loads(capsys.readouterr().out)["overall"] == doc["overall"]
    rows = doc["rows"]
    assert len(rows) == 106 and {r["table"] for r in rows} >= {"op_times", "public_ops", "public_sdpa_decode",
                                                                "report:north_mini"}
    # every row is in scope now: the kernel-only short adds are priced without dispatch
    assert not [r for r in rows if r["role"] == "scope_gap"] and "outside scope" not in doc["summary"]
    assert doc["overall"]["n"] == 106
    for r in rows:  # inside means the measured range meets the interval
        assert r["lo"] < r["predicted"] < r["hi"]
        assert r["inside"] == (r["lo"] <= r["measured_hi"] and r["measured_lo"] <= r["hi"])
        # the discrepancy terms add to the parameter variance + sigma^2, for a row outside its fold's
        # fitted rows less the weak prior's share of its parameter variance (intervals.param_var)
        assert r["base_var"] == (r["base_var0"] if r["extrap"] is None else pytest.approx(r["base_var"]))
        assert r["base_var"] <= r["base_var0"] + 1e-12
        # ... and a kernel-only row the repeats' spread (discrepancy.repeat_var), of the other sources' reports
        # a negative tau (a tier scattering less than sigma) takes back at most the fold's sigma^2
        ratio = (math.log(r["hi"] / r["lo"]) / math.log(r["hi0"] / r["lo0"])) ** 2
        form = max(math.copysign(r["tau"] ** 2, r["tau"]), -r["sigma2"])
        assert ratio == pytest.approx((r["base_var"] + form + r["repeat_var"]) / r["base_var0"], rel=1e-6)
        assert r["base_var"] + form >= r["base_var"] - r["sigma2"] >= 0
        assert (r["repeat_var"] > 0) == r["kernel_only"]
    assert 0.85 <= doc["overall"]["coverage"] <= 0.95 and doc["overall"]["coverage"] > doc["overall"]["coverage0"]
    assert doc["summary"]["public rows"]["coverage"] >= 0.75
    mape = np.mean([abs(r["predicted"] / r["target"] - 1) for r in rows])
    assert doc["overall"]["mape"] == pytest.approx(mape)
    # the per-ttnn-op-kind summary, recounted from the rows: every op kind with >= 5 rows, its rows and MAPE
    counts = {op: sum(r["op"] == op for r in rows) for op in {r["op"] for r in rows}}
    assert set(doc["ops"]) == {op for op, n in counts.items() if n >= holdout.KIND_MIN_ROWS}
    for op, k in doc["ops"].items():
        es = [r for r in rows if r["op"] == op]
        assert k["n"] == len(es) and k["mape"] == pytest.approx(np.mean([abs(r["predicted"] / r["target"] - 1)
                                                                         for r in es]))
    stored, fresh = load_discrepancy(), load_discrepancy(out)
    assert stored.tau_extrap == pytest.approx(fresh.tau_extrap, abs=1e-3)
    assert stored.tau_class == pytest.approx(fresh.tau_class, abs=1e-3)
    assert stored.tau_extrap_family == pytest.approx(fresh.tau_extrap_family, abs=1e-3)
    assert stored.repeat_sd_us == pytest.approx(fresh.repeat_sd_us) and fresh.repeat_sd_us > 0.1
    assert math.isfinite(fresh.tau_pooled)


def test_validate_cli_rejects_bad_steps(capsys):
    with pytest.raises(SystemExit) as e:
        main(["validate", "--steps", "0"])
    assert e.value.code == 2 and "steps=0 must be >= 1" in capsys.readouterr().err


def test_matmul_kinds_are_priced_by_their_own_model():
    """A 2D-multicast spec is bounded below by its FLOPs at the fidelity's peak on its cores and by
    its bytes at peak DRAM bandwidth; a DRAM-sharded one by one bank's shard at one bank's peak."""
    from costmodel.blackhole.opspecs import MatmulSpec
    from costmodel.blackhole.program_config import DRAM_SHARDED, MCAST_2D, MatmulProgramConfig

    cal = fit.load_calibration()
    M, K, N = 3200, 1536, 6144
    pc = MatmulProgramConfig(4.0, 18.0, 10.0, kind=MCAST_2D, out_subblock_w=6, fuse_batch=False)
    pc.validate("mm", HW, M=M, K=K, N=N, weight_dtype="bfp8", fp32_dest_acc=False)  # as the report ran it
    t = float(MatmulSpec(M, K, N, pc, "bfp8").us(HW, cal.params))
    cores = math.ceil(M / 32 / 10) * math.ceil(N / 32 / 18)
    flops_us = 2 * M * K * N / (cores * HW.matmul_flops_per_cycle_per_core / 2 * HW.clock_hz) * 1e6  # HiFi2
    bytes_us = (K * N * 1088 / 1024 + 2 * M * K + 2 * M * N) / HW.dram_peak_bytes_per_s * 1e6
    assert t > max(flops_us, bytes_us) and t < 3 * max(flops_us, bytes_us)
    ds = MatmulProgramConfig(2.0, 2.0, 2.0, kind=DRAM_SHARDED)
    with pytest.raises(ValueError, match="dram_sharded matmul takes its activation and output L1-sharded"):
        MatmulSpec(64, K, N, ds, "bfp8", in0_l1=True).us(HW, cal.params)
    # a fused SiLU: silu_tile's SFPU cycles on every output tile the workers compute, after the K loop
    from costmodel.blackhole.kinds.eltwise import SFPU_SILU_BF16_CYCLES
    from costmodel.blackhole.kinds.matmul import dram_sharded_compute_n

    silu = dataclasses.replace(ds, fused_activation="silu")
    extra = (float(MatmulSpec(64, K, N, silu, "bfp8", fused_activation=True).us(HW, cal.params))
             - float(MatmulSpec(64, K, N, ds, "bfp8").us(HW, cal.params)))
    tiles = 2 * dram_sharded_compute_n(HW, ds, N=N)
    assert extra == pytest.approx(tiles * SFPU_SILU_BF16_CYCLES / HW.clock_hz * 1e6, rel=1e-4)
    # priced now: one bank's shard (K x N/8 weights) at one bank's peak is its floor
    floor_us = K * (N / HW.dram_banks) * 1088 / 1024 / (HW.dram_peak_bytes_per_s / HW.dram_banks) * 1e6
    assert float(MatmulSpec(64, K, N, ds, "bfp8").us(HW, cal.params)) > floor_us


def test_leave_one_source_out_never_predicts_a_row_with_a_fit_that_saw_its_source(monkeypatch, capsys):
    """``validate --by source``: each calibration row is predicted by a refit that held out every
    group of its source (the whole table, public sweep or report), recorded here at the fit."""
    from costmodel.blackhole.rows import load_rows

    rows = load_rows()
    seen = []
    real_fit = holdout.fit

    def recording_fit(rows_, **kw):
        seen.append(kw["hold_out"])
        return real_fit(rows_, **kw)
    monkeypatch.setattr(holdout, "fit", recording_fit)
    entries = holdout.held_out_predictions(rows, fit.load_calibration(), steps=3, unit="source")
    sources = {holdout.source_of(r) for r in rows if r.role == "calibration"}
    assert len(seen) == len(sources) < len({r.group for r in rows if r.role == "calibration"})
    for e in entries:
        if e["role"] == "calibration":
            assert e["fold"] == e["source"]
            held = next(h for h in seen if {r.group for r in rows if holdout.source_of(r) == e["source"]} <= h)
            assert e["group"] in held
            # the fit that predicted it saw no row of its source
            assert all(r.group in held for r in rows if holdout.source_of(r) == e["source"])
    assert holdout.source_of(next(r for r in rows if r.table == "op_times")) == "op_times"
    with pytest.raises(ValueError, match="unit='table' unknown"):
        holdout.unit_of(rows[0], "table")


def test_a_report_and_the_public_sets_quoted_from_it_are_held_out_together(monkeypatch):
    """The public CLIP / DeepSeek sets are rows quoted from the real reports: by source, a report's
    own rows are predicted by the refit that held out those sets too (not by the full fit, which
    was calibrated on some of them); a North-mini window by the refit without its model's fitted rows
    (``report_calibration.json``: the four windows are one source)."""
    from _shared_data import need_file, profiler_reports_dir

    from costmodel.blackhole.rows import load_rows

    clip = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
    other = pathlib.Path(__file__).parent / "data" / "profiler_pairs" / "bh_north_mini_fused_decode_b1.csv"
    need_file(clip)
    rows = load_rows()
    quoted = {r.group for r in rows if r.table == "public_ops" and "bh_64_clip_encoder_1.csv" in r.source}
    assert quoted and {holdout.source_of(r) for r in rows if r.group in quoted} == {"report:bh_64_clip_encoder_1"}
    assert any(r.role == "calibration" for r in rows if r.group in quoted)  # else nothing would leak
    report = holdout.report_rows([str(clip)])[:6] + holdout.report_rows([str(other)])[:3]
    seen = []  # each refit's held-out groups (a list: a fold's calibration is freed after it, so its id is reused)
    real_fit = holdout.fit

    def recording_fit(rows_, **kw):
        seen.append(kw["hold_out"])
        return real_fit(rows_, **kw)
    monkeypatch.setattr(holdout, "fit", recording_fit)
    entries = holdout.held_out_predictions(rows + report, fit.load_calibration(), steps=2, unit="source")
    by_name = {(e["table"], e["name"]): e for e in entries}
    for r in report:
        e = by_name[(r.table, r.name)]
        if r.table == "report:bh_64_clip_encoder_1":
            assert e["fold"] == "report:bh_64_clip_encoder_1" and e["role"] == "validation"
        else:  # North-mini's fitted rows and all its windows are held out together
            assert e["fold"] == "report:north_mini" and e["role"] == "validation"
    held = [h for h in seen if quoted <= h]
    assert len(held) == 1  # one refit held out every set quoted from the CLIP report


def test_per_kind_summary_against_hand_counts():
    """``kind_summary``: each op kind with >= 5 held-out rows, its MAPE, coverage, distinct predictions
    and sources, and whether it meets issue 26's targets (MAPE <= 15%, coverage 85-95%); kinds with
    fewer rows are left out, the worst MAPE comes first."""
    from costmodel.blackhole.holdout import kind_summary

    def entry(kind, predicted, target, inside, source, fitted=True):
        return {"kind": kind, "predicted": predicted, "target": target, "inside": inside, "inside0": inside,
                "source": source, "lo": predicted / 1.5, "hi": predicted * 1.5, "kind_fitted": fitted}

    # kind a: 20 rows, one shape (prediction 10) measured 9 or 11 -> MAPE |10/9-1| and |10/11-1| averaged
    a = [entry("a", 10.0, 9.0 if i % 2 else 11.0, i != 0, "s1") for i in range(20)]
    # kind b: 6 rows, 3 shapes, 2 sources, within 5%, all inside -> over-covers (100% > 95%)
    # (the first source's 3 rows of an op kind their fold did not fit)
    b = [entry("b", p, p * 1.05, True, f"s{i % 2}", fitted=i % 2 == 1)
         for i, p in enumerate((1.0, 1.0, 2.0, 2.0, 3.0, 3.0))]
    c = [entry("c", 1.0, 2.0, False, "s1") for _ in range(4)]  # 4 rows: left out
    out = kind_summary(a + b + c)
    assert list(out) == ["a", "b"]
    mape_a = (abs(10 / 9 - 1) + abs(10 / 11 - 1)) / 2
    assert out["a"]["mape"] == pytest.approx(mape_a) and out["a"]["coverage"] == pytest.approx(19 / 20)
    assert (out["a"]["n"], out["a"]["shapes"], out["a"]["sources"]) == (20, 1, 1)
    assert out["a"]["meets"]  # 10.1%, 95%
    assert (out["b"]["n"], out["b"]["shapes"], out["b"]["sources"]) == (6, 3, 2)
    assert out["b"]["mape"] == pytest.approx(1 - 1 / 1.05) and out["b"]["coverage"] == 1.0
    assert not out["b"]["meets"]  # intervals too wide: every row inside
    assert out["a"]["median_width"] == pytest.approx(2.25)
    # bias: the median of predicted / measured - 1 (a: 10/11 - 1 and 10/9 - 1 ten times each; b: 1/1.05 - 1)
    assert out["a"]["bias"] == pytest.approx((10 / 11 + 10 / 9) / 2 - 1) and out["b"]["bias"] == pytest.approx(1 / 1.05 - 1)
    assert out["a"]["unfitted"] == 0.0 and out["b"]["unfitted"] == pytest.approx(0.5)
    # b's 6 rows: 5/6 = 83% and 6/6 = 100% straddle 85-95%, so its coverage target cannot be met
    assert out["a"]["band_reachable"] and not out["b"]["band_reachable"]
    assert holdout.target_verdict(out["a"]) == "met" and holdout.target_verdict(out["b"]) == (
        "missed (6 rows: no k/6 in 85-95%)")
    wide = {**out["b"], "band_reachable": True}
    assert holdout.target_verdict(wide) == "missed (coverage 100% > 95%: intervals wider than its errors)"
    assert holdout.priced_within_target_but_wide(wide) and not holdout.priced_within_target_but_wide(out["a"])
    # both targets missed: each named with its number
    bad = {**out["a"], "mape": 0.226, "coverage": 0.40, "meets": False}
    assert holdout.target_verdict(bad) == ("missed (MAPE 22.6% > 15%; coverage 40% < 85%: intervals narrower "
                                           "than its errors)")
    assert not holdout.priced_within_target_but_wide(bad)
    # a met, b too few rows for the band; with b's band reachable it is the one priced within target but wide
    assert holdout.target_counts(out) == (1, 1, 0)
    assert holdout.target_counts({**out, "b": wide}) == (1, 0, 1)
    # by ttnn op kind (key "op"): a's and b's rows are one kind's 26 rows, c's 4 rows are left out again
    ops = kind_summary([{**e, "op": "x"} for e in a + b] + [{**e, "op": "y"} for e in c], key="op")
    assert list(ops) == ["x"] and (ops["x"]["n"], ops["x"]["shapes"], ops["x"]["sources"]) == (26, 4, 2)
    assert ops["x"]["mape"] == pytest.approx((20 * mape_a + 6 * (1 - 1 / 1.05)) / 26)
    assert ops["x"]["coverage"] == pytest.approx(25 / 26) and not ops["x"]["meets"]  # 96%
    with pytest.raises(ValueError, match=r"key='class'; expected one of \('kind', 'op'\)"):
        kind_summary(a, key="class")


@pytest.mark.parametrize("n,reachable", [(1, False), (4, False), (5, False), (6, False), (7, True), (8, True),
                                         (9, True), (10, True), (13, True), (24, True), (144, True)])
def test_coverage_band_reachable_by_row_count(n, reachable):
    """Shares k/n in 85-95% worked by hand: 4/5 = 80%, 5/6 = 83% (then 100%) miss it; 6/7 = 86%,
    7/8 = 88%, 8/9 = 89%, 9/10 = 90%, 12/13 = 92%, 22/24 = 92%, 130/144 = 90% hit it."""
    assert holdout.coverage_band_reachable(n) is reachable


@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "7", None])
def test_coverage_band_reachable_rejects_a_non_count(bad):
    with pytest.raises(ValueError, match=r"n=.* must be a positive int"):
        holdout.coverage_band_reachable(bad)


def _clip_fold():
    """The CLIP report's rows and the refit without its source (the report and the public sets
    quoted from it), with the stored discrepancy judged against that refit's fitted rows."""
    from _shared_data import need_file, profiler_reports_dir

    from costmodel.blackhole.rows import load_rows

    clip = profiler_reports_dir() / "bh_64_clip_encoder_1.csv"
    need_file(clip)
    rows = load_rows()
    report = holdout.report_rows([str(clip)])
    held = frozenset(r.group for r in rows + report if holdout.source_of(r) == "report:bh_64_clip_encoder_1")
    cal = fit.fit(rows, init=fit.load_calibration().params, hold_out=held, steps=20)
    fitted = Domain.of((r.spec, r.target) for r in rows if r.role == "calibration" and r.group not in held)
    return report, cal, dataclasses.replace(load_discrepancy(), domain=fitted)


def test_an_unfitted_kernel_kind_gets_the_measured_spread_not_the_prior_width():
    """Issue 26: with the CLIP report's source held out, the kernel fixed time of the eltwise programs
    (launch_eltwise_us: eltwise adds and muls, transpose_wh) is still pinned by kernel-only rows, the
    North-mini windows' (``report_calibration.json``): the parameter term alone spans a factor < 1.5.
    (While CLIP's were the only kernel-only eltwise rows it was pinned only through traced rows that
    add the dispatch to it, and the weak prior's factor-10 width made it span > 5.) CLIP's kinds (an
    8x8 grid) still extrapolate (no row of theirs is fitted), so the weak prior's share of their
    parameter variance is replaced by the discrepancy's measured terms: each interval's log sd at most
    twice the extrapolation term these rows take (with the repeats' spread on these 1.5-3 us rows:
    ``repeat_var``), and the measured time inside it."""
    from costmodel.blackhole.discrepancy import repeat_var
    from costmodel.blackhole.holdout import row_intervals
    from costmodel.blackhole.intervals import kept_grad, param_var

    report, cal, disc = _clip_fold()
    kinds = ("EltwiseSpec[kind=add", "EltwiseSpec[kind=mul", "DataMovementSpec[kind=transpose_wh")
    picks = [next(r for r in report if k in op_kind(r.spec)) for k in kinds]
    assert all(disc.domain.extrapolates(r.spec, r.target) for r in picks)
    z = quantile(cal)
    plain, with_disc = row_intervals(cal, picks), row_intervals(cal, picks, discrepancy=disc)
    for row, p0, p in zip(picks, plain, with_disc, strict=True):
        assert p0["hi"] / p0["lo"] < 1.5  # the parameter term + sigma: pinned by the North-mini rows
        sd = math.log(p["hi"] / p["lo"]) / (2 * z)
        bound = math.sqrt((2 * disc.tau_extrap) ** 2 + repeat_var(disc.repeat_sd_us, True, p["predicted"]))
        assert sd <= bound, (row.name, sd)
        assert p["inside"] and p["predicted"] == pytest.approx(p0["predicted"])
    # the weak prior's share dominates these rows' parameter variance; param_var drops exactly it
    g = np.ones(len(cal.theta))
    share = cal.prior_share()
    assert param_var(cal, g) == pytest.approx(float(g @ cal.cov @ g))
    assert param_var(cal, g, kept_grad(disc, g, (picks[0].spec, picks[0].target))) == pytest.approx(
        float(g @ cal.cov @ g - g @ share @ g))
    assert np.all(np.linalg.eigvalsh(cal.cov - share) > -1e-12)  # the rows' share: Cov D Cov >= 0


@pytest.fixture(scope="module")
def by_source_with_reports():
    """``validate --by source`` over the stored tables, the CLIP report, the four North-mini windows and
    the Muse Glimmer prefill (three runs of its layer at 8192 tokens)."""
    from _shared_data import need_file, profiler_reports_dir

    from costmodel.blackhole.holdout import report_rows, validate_rows
    from costmodel.blackhole.rows import load_rows

    data = pathlib.Path(__file__).parent / "data"
    windows = ("functional_prefill_s128", "functional_decode_b1", "fused_decode_b1", "fused_prefill_s128")
    paths = [profiler_reports_dir() / "bh_64_clip_encoder_1.csv",
             *(data / "profiler_pairs" / f"bh_north_mini_{v}.csv" for v in windows),
             data / "profiler_more" / "bh_muse_glimmer_30b_optimized_prefill_full_s8192.csv"]
    for p in paths:
        need_file(p)
    return validate_rows(load_rows() + report_rows([str(p) for p in paths]), fit.load_calibration(), unit="source")


def test_held_out_coverage_is_at_most_95_percent(by_source_with_reports):
    """The upper side of the overall coverage target (85-95%): 90.8% of the 838 held-out rows inside
    (95.1% of 834, a strict xfail, while every extrapolating row carried its class's interpolation term
    plus one pooled extrapolation term; the term of its config family now replaces both)."""
    assert by_source_with_reports["overall"]["coverage"] <= 0.95


def test_held_out_matmul_class_coverage_is_at_most_95_percent(by_source_with_reports):
    """The upper side of the matmul class's coverage target (85-95%): 94%, 236 of 251 (97%, 244, while taus
    could not be negative and every held-out row kept the fit's pooled sigma, and 96% before a second report
    of a new model family joined the repeats' pooled spread; a strict xfail until then)."""
    assert by_source_with_reports["summary"]["class matmul"]["coverage"] <= 0.95


def test_held_out_real_reports_coverage_and_width_by_source(by_source_with_reports):
    """Every row of the stored tables, the CLIP report, the four North-mini windows and the Muse
    Glimmer prefill predicted without its source (``validate --by source``; the North-mini windows one source, their fitted
    rows with them): at least 85% of them inside their 90% intervals (90.9%; the 95% side below), the
    matmul class (the real reports' largest share of device time) too (94%, 236 of 251; the 95% side
    below), and the intervals
    narrow: median hi/lo under 2 (2.66 while the kernel fixed times of the eltwise and data-movement
    programs were pinned by the CLIP report alone, so a fold without it fell back towards the weak prior;
    8.1 and 7.2 for those classes before the weak prior's share was replaced), for those classes' rows of
    5 us or more too; under that the spread of an op's repeats (~0.3 us: the cores' start skew, ~0.2 or
    ~1.1 us whichever way the op was dispatched, and run-to-run effects) sets the width."""
    res = by_source_with_reports
    assert 0.85 <= res["overall"]["coverage"]  # the upper side: test_held_out_coverage_is_at_most_95_percent
    assert 0.85 <= res["summary"]["class matmul"]["coverage"]
    assert res["overall"]["median_width"] < 2.0
    for c in ("eltwise", "data_movement"):
        es = [e for e in res["rows"] if e["class"] == c and e["role"] != "scope_gap"]
        assert holdout.summarise([e for e in es if e["target"] >= 5.0])["median_width"] < 2.0, c
        assert holdout.summarise([e for e in es if e["target"] < 5.0])["coverage"] >= 0.85, c


def test_held_out_clip_kernel_fixed_time_kinds_within_15_percent(by_source_with_reports):
    """With the CLIP report held out, its transposes and adds are priced from the North-mini windows'
    kernel-only rows (``report_calibration.json``): MAPE <= 15% per kind (51%, 22% and 29% when only
    CLIP's own rows pinned the fixed times)."""
    kinds = by_source_with_reports["kinds"]
    for k in ("kernel:p150a/8x8:DataMovementSpec[kind=transpose_wh,act_dtype=bf16]",
              "kernel:p150a/8x8:DataMovementSpec[kind=transpose_hc,act_dtype=bf16]",
              "kernel:p150a/8x8:EltwiseSpec[kind=add,act_dtype=bf16]"):
        assert kinds[k]["mape"] <= 0.15, (k, kinds[k]["mape"])


def test_ttnn_op_kind_of_a_report_row_is_the_module_of_its_op_code(by_source_with_reports):
    """Each real report row's ttnn op kind (``ttnn_op_kind``, from the spec its reader built) is the kind
    module that the row's own OP CODE dispatches to (``kinds.CLASS_OF_CODE``), and the per-op-kind
    summary groups exactly those rows."""
    from costmodel.blackhole import kinds

    res = by_source_with_reports
    rows = [r for r in res["rows"] if r["role"] != "scope_gap"]
    checked = 0
    for r in rows:
        code = re.search(r"\d+_(\w+DeviceOperation)$", r["name"])
        if code and code.group(1) in kinds.CLASS_OF_CODE:
            module = kinds.KIND_OF_CLASS[kinds.CLASS_OF_CODE[code.group(1)]].__name__.rsplit(".", 1)[-1]
            # the norm reader hands a sharded norm row to norm_sharded, the one exception by design
            assert r["op"] == module or (module, r["op"]) == ("norm", "norm_sharded"), (r["name"], r["op"])
            checked += 1
    assert checked > 500
    for op, k in res["ops"].items():
        assert k["n"] == sum(r["op"] == op for r in rows) >= holdout.KIND_MIN_ROWS
    assert {"matmul", "norm", "eltwise", "sdpa", "data_movement"} <= set(res["ops"])


def test_per_kind_unfitted_share_is_what_each_fold_fitted(by_source_with_reports):
    """'unfitted' of each kind: the share of its rows whose fold (the refit without their source) has no
    calibration row of their op kind, recounted here from the rows themselves (every calibration row is
    held out once, so the rows list holds every fitted row with its source); 'bias' is the median of
    predicted / measured - 1 of the kind's rows."""
    res = by_source_with_reports
    rows = [r for r in res["rows"] if r["role"] != "scope_gap"]
    fitted_by = {}  # source -> op kinds of the calibration rows of every other source
    for r in rows:
        if r["unit"] not in fitted_by:
            fitted_by[r["unit"]] = {c["kind"] for c in rows if c["role"] == "calibration" and c["unit"] != r["unit"]}
    for kind, k in res["kinds"].items():
        es = [r for r in rows if r["kind"] == kind]
        assert k["unfitted"] == pytest.approx(np.mean([kind not in fitted_by[r["unit"]] for r in es])), kind
        assert k["bias"] == pytest.approx(np.median([r["predicted"] / r["target"] - 1 for r in es])), kind
    # the CLIP encoder's reshapes exist in no other source: no fold that predicts them fitted one
    assert res["kinds"]["kernel:p150a/8x8:DataMovementSpec[kind=reshape,act_dtype=bf16]"]["unfitted"] == 1.0
    assert any(0.0 <= k["unfitted"] < 1.0 for k in res["kinds"].values())
