"""``plan --ops-csv`` over every matmul kind the model prices: DRAM-sharded and MinimalMatmul rows read
from real report lines, their best change against a brute-force search of this file (every field value
in plain loops, filtered by the op's legality rule, priced by ``KernelSpec``), math fidelity as a
flagged change, the MinimalMatmul L1 rule against the factory's circular buffers, and the rows still
not searched listed with why."""

import dataclasses
import itertools
import json
import math

import pytest
from _report_util import one_line
from _shared_data import need_file, profiler_reports_dir

from costmodel.blackhole import report_plan, report_whatif
from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.opspecs import ChipSpec, KernelSpec, MatmulSpec
from costmodel.blackhole.plan_candidates import FIDELITY_FLAG, WEIGHT_FLAG, candidates
from costmodel.blackhole.report_plan import SAME_PRICE, plan_search
from costmodel.blackhole.report_reader import MODELLED, read_report

REPORTS = profiler_reports_dir()
EXCERPT = REPORTS / "bh_invalid_trace_decode_window_excerpt.csv"  # the one real DRAM-sharded line
CLIP = REPORTS / "bh_64_clip_encoder_1.csv"  # 144 real MinimalMatmul lines
FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")
WEIGHTS = ("bf16", "bfp8", "bfp4")
L1_BYTES = 1536 * 1024  # one Blackhole core
TILE_BYTES = {"bf16": 2048, "fp32": 4096, "bfp8": 1088, "bfp4": 576}  # tt::tile_size


@pytest.fixture(scope="module")
def cal():
    return load_calibration()


def _dram_sharded(tmp_path, fidelity=None):
    """The excerpt's DRAM-sharded matmul line ([32, 4096] x [4096, 6144] bfp8, in0_block_w 4, LoFi) as a
    one-line report: its device duration made usable (the line sits in a trace window, where the profiler
    writes none), the rest verbatim; ``fidelity``: the math fidelity edited to another."""
    need_file(EXCERPT)

    def edit(r):
        r["DEVICE KERNEL DURATION [ns]"], r["OP TO OP LATENCY [ns]"] = "45000", "1000"
        if fidelity:
            r["MATH FIDELITY"] = fidelity
            r["ATTRIBUTES"] = r["ATTRIBUTES"].replace("math_fidelity=LoFi", f"math_fidelity={fidelity}")

    line, _ = one_line(EXCERPT, tmp_path / "dram_sharded.csv", lambda r: "DRAMSharded" in r["ATTRIBUTES"], edit)
    assert line.status == MODELLED, line.status
    return tmp_path / "dram_sharded.csv"


def _minimal(tmp_path, n=768, k=768, edit=lambda r: None):
    """The first CLIP MinimalMatmul line of [32[19], k] x [k, n] as a one-line report."""
    need_file(CLIP)

    def pick(r):
        return (r["OP CODE"] == "MinimalMatmulOp" and r["INPUT_0_X_PAD[LOGICAL]"] == f"{k}[{k}]"
                and r["INPUT_1_X_PAD[LOGICAL]"] == f"{n}[{n}]")
    path = tmp_path / f"minimal_{k}x{n}.csv"
    line, _ = one_line(CLIP, path, pick, edit)
    return path, line


def _oracle_best(now, priced):
    """{flag: fastest us} of [(us, flag)] priced faster than ``now`` (by SAME_PRICE), a flagged one kept
    only where it beats by SAME_PRICE every faster one whose flags are a proper subset of its own (the
    plan's stated rule, written out here)."""
    faster = [(us, flag) for us, flag in priced if us < now * (1 - SAME_PRICE)]
    best = {}
    for us, flag in faster:
        best[flag] = min(best.get(flag, math.inf), us)

    def parts(flag):
        return set(flag.split("; ")) if flag else set()
    return {f: us for f, us in best.items()
            if all(us < r * (1 - SAME_PRICE) for g, r in best.items() if parts(g) < parts(f))}


def _plan_best(result):
    return {p.flag: p.after_us for p in result.changes}


def _price(row_spec, inner, hw, params):
    new = dataclasses.replace(row_spec, inner=inner) if isinstance(row_spec, ChipSpec) else inner
    return float(KernelSpec(new).us(hw, params))


@pytest.mark.parametrize("fidelity", [None, "HiFi4"], ids=["real_LoFi", "edited_HiFi4"])
def test_dram_sharded_best_change_is_the_brute_force_best(tmp_path, cal, fidelity):
    """Brute force: every in0_block_w 1..K/32 that divides the row's own (ttnn: in0_block_w divides the
    in0 shard width, a multiple of the row's own that the report does not print), every per_core_N
    1..N/32, every weight format and fidelity, legal by the config's rule."""
    rep = read_report(_dram_sharded(tmp_path, fidelity))
    (row,) = rep.rows
    spec, hw = row.spec, rep.hw
    c = spec.cfg
    own_flags = (spec.weight_dtype, spec.fidelity)
    now = float(KernelSpec(spec).us(hw, cal.params))
    priced = []
    for bw, pn, wd, fid in itertools.product(range(1, spec.K // 32 + 1), range(1, spec.N // 32 + 1), WEIGHTS,
                                             FIDELITIES):
        if int(c.in0_block_w) % bw:
            continue
        cfg = dataclasses.replace(c, in0_block_w=float(bw), per_core_N=float(pn))
        try:
            cfg.validate("m", hw, M=spec.M, K=spec.K, N=spec.N, weight_dtype=wd, act_dtype=spec.act_dtype)
        except ValueError:
            continue
        flag = "; ".join(f for f, on in ((WEIGHT_FLAG, wd != own_flags[0]), (FIDELITY_FLAG, fid != own_flags[1]))
                         if on)
        us = float(KernelSpec(dataclasses.replace(spec, cfg=cfg, weight_dtype=wd, fidelity=fid)).us(hw, cal.params))
        priced.append((us, flag))
    res = plan_search(rep, cal)
    assert res.searched["matmul"] == 1 and not res.skipped
    want, got = _oracle_best(now, priced), _plan_best(res)
    assert got.keys() == want.keys() and want, (got, want)
    for flag in want:
        assert got[flag] == pytest.approx(want[flag], rel=1e-6), flag
    # ttnn's shard rule: every candidate's in0_block_w divides the row's own (4), and all those are offered
    assert {int(s.cfg.in0_block_w) for _, s, _ in candidates(spec, hw)} == {1, 2, 4}
    if fidelity == "HiFi4":  # fewer passes are priced faster: a fidelity change is offered, flagged
        assert any(FIDELITY_FLAG in f for f in got)


def test_minimal_matmul_best_change_is_the_brute_force_best(tmp_path, cal):
    """Brute force over CLIP's [32, 768] x [768, 768] MinimalMatmul (blocks 2/8/8, subblock 2x2, 8x8 grid,
    HiFi4): every M block 1..2, K and N block 1..24 (divisors of the tiles or not), any legal subblock,
    with the row's weights at every fidelity, legal by ``MinimalMatmulSpec.validate``."""
    path, line = _minimal(tmp_path)
    rep = read_report(path)
    assert line.status == MODELLED, line.status
    spec, hw = line.spec.inner, line.spec.board()
    now = float(KernelSpec(line.spec).us(rep.hw, cal.params))
    priced = []
    for m, k, n, fid in itertools.product(range(1, 3), range(1, 25), range(1, 25), FIDELITIES):
        for h, w in itertools.product(range(1, m + 1), range(1, n + 1)):
            new = dataclasses.replace(spec, m_block=m, k_block=k, n_block=n, subblock_h=h, subblock_w=w, fidelity=fid)
            try:
                new.validate(hw)
            except ValueError:
                continue
            priced.append((_price(line.spec, new, rep.hw, cal.params), FIDELITY_FLAG if fid != spec.fidelity else ""))
            break  # the subblock is not priced: one legal subblock stands for all
    res = plan_search(rep, cal)
    assert res.searched["matmul"] == 1 and not res.skipped
    want = _oracle_best(now, priced)
    got = {f: us for f, us in _plan_best(res).items() if WEIGHT_FLAG not in f}  # the brute force keeps the weights
    assert "" in want and got.keys() == want.keys(), (got, want)
    for flag in want:
        assert got[flag] == pytest.approx(want[flag], rel=1e-6), flag
    (config,) = [p for p in res.changes if not p.flag]
    assert "fidelity" not in config.change and "weights" not in config.change


def _cb_bytes(s: MinimalMatmulSpec) -> int:
    """The circular buffers tt-metal's minimal_matmul_factory_helper allocates per core (@ 856eb4af): in0
    and out double-buffered in the activation's tile size, in1 double-buffered in the weights', the
    intermediate in fp32 (fp32_dest_acc_en), the bias's N block (a bf16 bias) not double-buffered."""
    act, w = TILE_BYTES[s.act_dtype], TILE_BYTES[s.weight_dtype]
    return (2 * s.m_block * s.k_block + 2 * s.m_block * s.n_block + (s.n_block if s.bias else 0)) * act + \
        2 * s.k_block * s.n_block * w + s.m_block * s.n_block * TILE_BYTES["fp32" if s.fp32_dest_acc else "bf16"]


def test_minimal_matmul_candidates_are_all_legal_and_the_rule_refuses_an_l1_overflow(tmp_path):
    _, line = _minimal(tmp_path, n=768, k=3072)
    spec, hw = line.spec.inner, line.spec.board()
    cands = candidates(spec, hw)
    # the domain holds blocks whose buffers overflow L1 (K block 96 x N block 24: 9.4 MB of in1)
    big = dataclasses.replace(spec, k_block=96, n_block=24)
    assert _cb_bytes(big) > L1_BYTES
    with pytest.raises(ValueError, match="circular buffers need"):
        big.validate(hw)
    assert cands and not any((s.k_block, s.n_block) == (96, 24) for _, s, _ in cands)
    # every block count some block size gives K (96 tiles) and N (24) is offered, whether the block divides
    # the tiles or not (7 K blocks: a block of 14)
    for tiles, name in ((96, "k_block"), (24, "n_block")):
        counts = {math.ceil(tiles / b) for b in range(1, tiles + 1)}
        assert {math.ceil(tiles / getattr(s, name)) for _, s, _ in cands} == counts, name
    dest = 4  # fp32 accumulation: half of the 8 destination tiles
    for text, s, flag in cands:
        assert _cb_bytes(s) <= L1_BYTES, text
        assert s.m_block % s.subblock_h == 0 and s.n_block % s.subblock_w == 0 and s.subblock_h * s.subblock_w <= dest
        assert (s.grid_x, s.grid_y) == (spec.grid_x, spec.grid_y)
        assert ("fidelity" in text) == (FIDELITY_FLAG in flag) and ("weights" in text) == (WEIGHT_FLAG in flag)
        assert s.fidelity in FIDELITIES[:FIDELITIES.index(spec.fidelity) + 1]  # never a slower fidelity
    # every real CLIP MinimalMatmul line passes the rule (it is not stricter than the op that ran)
    rep = read_report(CLIP)
    minimal = [r for r in rep.rows if r.op_code == "MinimalMatmulOp"]
    assert len(minimal) == 144 and all(r.status == MODELLED for r in minimal)


def test_fidelity_changes_are_flagged_and_left_out_of_the_combination(tmp_path, cal):
    rep = read_report(_dram_sharded(tmp_path, "HiFi4"))
    res = plan_search(rep, cal)
    fid = [p for p in res.changes if "fidelity" in p.change]
    assert fid and all(FIDELITY_FLAG in p.flag for p in fid)
    assert all("fidelity" not in p.change and "weights" not in p.change for p in res.changes if not p.flag)
    chosen, saving, _ = report_plan.combine(res.changes, cal)
    assert all(not p.flag for p in chosen)
    assert saving == pytest.approx(sum(p.saving_us for p in chosen))


def test_unsearched_matmul_rows_keep_their_reason(tmp_path, cal, monkeypatch):
    # a real MinimalMatmul line the model does not price (its fused activation): the reader's reason
    path, line = _minimal(tmp_path, edit=lambda r: r.update(ATTRIBUTES=r["ATTRIBUTES"].replace(
        "'fused_activation': 'std::nullopt'", "'fused_activation': 'UnaryWithParam(op_type=UnaryOpType::GELU)'")))
    assert line.status != MODELLED
    (skip,) = plan_search(read_report(path), cal).skipped
    assert skip.kind == "matmul" and skip.reason == f"not priced by the model: {line.status}"
    # a priced kind the search leaves out is listed as such, naming the kind
    monkeypatch.setattr(report_plan, "SEARCHED_MATMUL_KINDS", ("mcast_1d_in0", "mcast_1d_in1", "mcast_2d"))
    res = plan_search(read_report(_dram_sharded(tmp_path)), cal)
    (skip,) = res.skipped
    assert res.searched["matmul"] == 0 and not res.changes
    assert skip.kind == "matmul" and "priced but not searched" in skip.reason and "dram_sharded" in skip.reason


def test_cli_ranks_the_dram_sharded_row(tmp_path, capsys):
    path = _dram_sharded(tmp_path)
    capsys.readouterr()
    assert main(["plan", "--ops-csv", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MatmulDeviceOperation" in out and "weights bfp8->bfp4" in out and "searched: 1 matmul rows" in out
    assert main(["plan", "--ops-csv", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    assert doc["searched"]["matmul"] == 1 and not doc["skipped"]
    assert [r["flag"] for r in doc["rows"]] == [WEIGHT_FLAG]


def test_every_priced_matmul_row_of_the_real_reports_is_searched():
    """No priced matmul row is left out of the search: every modelled matmul-class row of a real report
    is a searched row (CLIP: 48 ttnn matmuls and 144 MinimalMatmuls)."""
    need_file(CLIP)
    for path in (CLIP, REPORTS / "bh_8xp150_deepseek_v3_d_p.csv"):
        rep = read_report(path)
        priced = [r for r in rep.timed_rows()
                  if r.status == MODELLED and isinstance(getattr(r.spec, "inner", r.spec), MatmulSpec | MinimalMatmulSpec)]
        assert {r.line for r in report_plan.searched_rows(rep) if r in priced} == {r.line for r in priced}
        assert not [s for s in report_plan.unsearched_rows(rep) if "priced but not searched" in s.reason]
    assert len([r for r in read_report(CLIP).timed_rows() if r.status == MODELLED
                and isinstance(getattr(r.spec, "inner", r.spec), MatmulSpec | MinimalMatmulSpec)]) == 192


def test_minimal_matmul_batch_price_is_each_specs_own_price(cal):
    """The plan prices MinimalMatmul block choices as one batch (``minimal_matmul_batch_us``, padded to a
    power of two): each entry equals the spec priced alone, at an odd batch size and on a small grid;
    specs differing in more than their blocks are refused."""
    from costmodel.blackhole.kinds.minimal_matmul import minimal_matmul_batch_us
    from costmodel.hardware import blackhole_p150a

    hw = blackhole_p150a()
    base = MinimalMatmulSpec(M=1600, K=768, N=3072, m_block=2, k_block=8, n_block=8, grid_x=8, grid_y=8)
    specs = [dataclasses.replace(base, m_block=m, k_block=k, n_block=n)
             for m, k, n in ((1, 1, 1), (2, 8, 8), (5, 3, 7), (50, 24, 96), (3, 24, 12))]
    got = minimal_matmul_batch_us(hw, cal.params, specs)
    assert got.shape == (5,)
    for s, g in zip(specs, got, strict=True):
        assert float(g) == pytest.approx(float(s.us(hw, cal.params)), rel=1e-6)
    assert len({round(float(g), 6) for g in got}) == 5  # the blocks do change the price
    with pytest.raises(ValueError, match=r"differs from the first in \['weight_dtype'\]"):
        minimal_matmul_batch_us(hw, cal.params, [base, dataclasses.replace(base, weight_dtype="bfp8")])


@pytest.mark.parametrize("changes, fields", [
    (["K_block_size=4"], {"k_block": 4}),  # the 2x2 subblock still divides the blocks: kept
    # each core owns 3 N tiles (24 over 8 columns), so only an N block below 3 changes the steps
    (["N_block_size=1"], {"n_block": 1, "subblock_h": 2, "subblock_w": 1}),  # 2x2 does not divide 2x1: ttnn's pick
    (["N_block_size=2", "subblock_h=1", "subblock_w=2"], {"n_block": 2, "subblock_h": 1, "subblock_w": 2}),
])
def test_whatif_changes_a_minimal_matmul_rows_blocks(tmp_path, cal, capsys, changes, fields):
    """``whatif`` on a real CLIP MinimalMatmul line (blocks 2/8/8, subblock 2x2): the blocks given by
    ttnn's MinimalMatmulConfig names, the subblock kept where it divides the new blocks (else ttnn's
    chooser's), priced as that spec."""
    path, line = _minimal(tmp_path)
    rep = read_report(path)
    argv = ["whatif", "--ops-csv", str(path), "--line", str(line.line), "--json"]
    for c in changes:
        argv += ["--change", c]
    capsys.readouterr()
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    new = dataclasses.replace(line.spec, inner=dataclasses.replace(line.spec.inner, **fields))
    assert report_whatif.changed_spec(line.spec, dict(c.split("=") for c in changes), line.spec.board()) == new
    assert res["after_us"] == pytest.approx(float(KernelSpec(new).us(rep.hw, cal.params)), rel=1e-4)
    # re-priced as the changed spec (N blocks of 1 tile happen to cost within 0.1% of the row's blocks: 3x the
    # K steps, each a third of the in1 block, and the same epilogue tiles in all)
    assert res["after_us"] != res["predicted_us"]


@pytest.mark.parametrize("change, message", [
    ("K_block_size=0", "expected an integer >= 1"),
    ("subblock_w=3", "subblock (2, 3) must divide the (M, N) blocks (2, 8)"),
    ("K_block_size=200", "circular buffers need"),
    ("in0_block_w=4", "MinimalMatmulSpec has no matmul program config; expected one of ['M_block_size'"),
])
def test_whatif_refuses_an_illegal_minimal_matmul_change(tmp_path, capsys, change, message):
    path, line = _minimal(tmp_path)
    capsys.readouterr()
    assert main(["whatif", "--ops-csv", str(path), "--line", str(line.line), "--change", change]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
