"""``python -m costmodel.blackhole diff`` on real before / after pairs: one decoder layer of the same
model (CohereLabs North mini code, one Blackhole chip, tt-metal's autoport), batch-1 decode and a
128-token prefill, each as its functional version then its fused one (gate and up projections fused
into one matmul, SiLU fused into the multiply; in decode also the two KV cache updates into one).
Sources and what was kept: tests/data/profiler_pairs/SOURCES.md.

Oracles, independent of the reader: the excerpts are checked against the tt-perf-report tables the
source repository committed beside its full reports (and, where the dev extra is installed, against
tt-perf-report run on the excerpts); the measured deltas and totals against the files read with the
csv module."""

import csv
import json
import math
import pathlib

import pytest
from _report_util import padded, tt_perf_report

from costmodel.blackhole.cli import main

DATA = pathlib.Path(__file__).parent / "data" / "profiler_pairs"
# phase: (before, after, the signpost that opens the window tt-perf-report was run on)
PAIRS = {"decode": (DATA / "bh_north_mini_functional_decode_b1.csv", DATA / "bh_north_mini_fused_decode_b1.csv",
                    "PERF_DECODE"),
         "prefill": (DATA / "bh_north_mini_functional_prefill_s128.csv", DATA / "bh_north_mini_fused_prefill_s128.csv",
                     "PERF_PREFILL")}
EXCERPTS = [(path, start) for before, after, start in PAIRS.values() for path in (before, after)]
DURATION = "DEVICE KERNEL DURATION [ns]"


def records(path: pathlib.Path) -> dict[int, dict]:
    """{file line: record} of the data rows (the header is line 1; signposts dropped)."""
    with path.open(newline="") as f:
        return {i: r for i, r in enumerate(csv.DictReader(f), start=2) if r["OP TYPE"] != "signpost"}


def us(r: dict) -> float:
    return float(r[DURATION]) / 1e3


def weights_n(r: dict) -> int:
    """N of a matmul row: the weights' padded X."""
    return int(r["INPUT_1_X_PAD[LOGICAL]"].split("[")[0])


def signature(r: dict) -> tuple:
    """What makes two rows the same op: attributes, fidelity and every filled tensor column (the
    fused file has one input column group more, empty on these rows)."""
    tensors = tuple((k, v) for k, v in r.items() if k.startswith(("INPUT_", "OUTPUT_")) and v)
    return r["ATTRIBUTES"], r["MATH FIDELITY"], tensors


def perf_report(path: pathlib.Path) -> list[dict]:
    with path.with_name(path.stem + "_perf_report.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("path, start", EXCERPTS, ids=[p.stem for p, _ in EXCERPTS])
def test_excerpts_are_the_window_the_source_reported(path, start):
    """Every data row of an excerpt is the row of the source's tt-perf-report table with its global call
    count: the same op, device time and op-to-op gap, in the same order (the window between the
    signposts ``start`` and ``start``_END)."""
    recs, table = list(records(path).values()), perf_report(path)
    with path.open(newline="") as f:
        ops = [r["OP CODE"] for r in csv.DictReader(f)]
    assert ops[0] == start and ops[-1] == start + "_END" and len(recs) == len(table) == len(ops) - 2 > 0
    for r, t in zip(recs, table, strict=True):
        assert int(r["GLOBAL CALL COUNT"]) == int(float(t["Global Call Count"]))
        assert t["OP Code"].split(" ")[0] == r["OP CODE"] and r["DEVICE ARCH"] == "blackhole"
        assert float(r[DURATION]) / 1e3 == pytest.approx(float(t["Device Time"]), abs=5e-4)
        if t["Op-to-Op Gap"]:
            assert float(r["OP TO OP LATENCY [ns]"]) / 1e3 == pytest.approx(float(t["Op-to-Op Gap"]), abs=5e-4)


@pytest.mark.parametrize("path, start", EXCERPTS, ids=[p.stem for p, _ in EXCERPTS])
def test_tt_perf_report_on_an_excerpt_gives_the_source_table(path, start, tmp_path):
    """tt-perf-report itself, run on the excerpt's signpost window, writes the table the source
    committed (shapes, fidelity, data types, memory, block sizes, DRAM and FLOP shares): the kept
    columns are the source's."""
    out = tt_perf_report(path, tmp_path, "--start-signpost", start, "--end-signpost", start + "_END")
    table = perf_report(path)
    assert len(out) == len(table)
    for o, t in zip(out, table, strict=True):
        for k in t:
            if k in ("ID", "Advice"):  # ID: the row number in the full source file; advice was left off here
                continue
            if k in ("Cores", "Total %"):  # 80 or 80.0 by tool version; shares summed in another order
                assert float(o[k]) == pytest.approx(float(t[k]), rel=1e-12), (k, o[k], t[k])
            else:
                assert o[k] == t[k], (k, o[k], t[k])


@pytest.fixture(scope="module", params=list(PAIRS))
def pair(request):
    """(before, after, diff JSON) of one phase's pair, diffed on the command line."""
    import io
    from contextlib import redirect_stdout

    before, after, _ = PAIRS[request.param]
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["diff", str(before), str(after), "--json"]) == 0
    return before, after, json.loads(buf.getvalue(), parse_constant=pytest.fail)


def test_measured_deltas_are_the_files(pair):
    """Each matched pair's measured times are its two lines' durations, each row of one side its
    own; every timed row is used once; the total is the difference of the two files' sums."""
    before, after, diffed = pair
    ra, rb = records(before), records(after)
    for p in diffed["pairs"]:
        assert ra[p["line_a"]]["OP CODE"] == rb[p["line_b"]]["OP CODE"] == p["op_code"]
        assert p["measured_a"] == pytest.approx(us(ra[p["line_a"]]), abs=1e-9)
        assert p["measured_b"] == pytest.approx(us(rb[p["line_b"]]), abs=1e-9)
        assert p["measured"] == pytest.approx(us(rb[p["line_b"]]) - us(ra[p["line_a"]]), abs=1e-9)
    for key, recs, side in (("only_a", ra, "line_a"), ("only_b", rb, "line_b")):
        for p in diffed[key]:
            assert p["us"] == pytest.approx(us(recs[p[side]]), abs=1e-9)
    assert sorted([p["line_a"] for p in diffed["pairs"]] + [p["line"] for p in diffed["only_a"]]) == sorted(ra)
    assert sorted([p["line_b"] for p in diffed["pairs"]] + [p["line"] for p in diffed["only_b"]]) == sorted(rb)
    t = diffed["total"]
    assert t["measured_us"] == pytest.approx(sum(map(us, rb.values())) - sum(map(us, ra.values())), abs=1e-6)


def test_the_fusion_is_a_pair_and_a_removed_row_both_priced(pair):
    """The functional layer's two 2048 x 3072 projections become one 2048 x 6144 matmul: one of them
    pairs with it, the other is a row of the functional side only, and the model prices both."""
    before, after, diffed = pair
    ra, rb = records(before), records(after)
    fused = [p for p in diffed["pairs"] if p["op_code"] == "MatmulDeviceOperation" and weights_n(rb[p["line_b"]]) == 6144]
    removed = [p for p in diffed["only_a"] if p["op_code"] == "MatmulDeviceOperation"]
    assert len(fused) == len(removed) == 1 and weights_n(ra[fused[0]["line_a"]]) == weights_n(ra[removed[0]["line"]]) == 3072
    for p in fused + removed:
        assert p["predicted"] is not None and p["lo"] < p["predicted"] < p["hi"]
    assert removed[0]["predicted"] < 0 and removed[0]["measured"] == pytest.approx(-removed[0]["us"])


def test_unchanged_specs_predict_zero_and_count_as_noise(pair):
    """Pairs whose rows have the same attributes and tensors in both files (an independent test of
    "same spec") predict exactly 0 with no width; their measured movement is the total's noise and
    stays out of the share."""
    before, after, diffed = pair
    ra, rb = records(before), records(after)
    unchanged = [p for p in diffed["pairs"] if p["unchanged"]]
    assert unchanged and all(p["predicted"] == p["lo"] == p["hi"] == 0 for p in unchanged)
    for p in diffed["pairs"]:
        if p["predicted"] is not None:
            assert p["unchanged"] == (signature(ra[p["line_a"]]) == signature(rb[p["line_b"]])), p
    assert diffed["total"]["noise_us"] == pytest.approx(sum(abs(p["measured"]) for p in unchanged))


def test_totals_and_share_inside_are_reported_from_the_deltas(pair):
    diffed = pair[2]
    """The priced total is the sum of the priced deltas (pairs and one-side rows), inside a finite
    interval or not as its numbers say; the share inside is recomputed from the per-delta intervals."""
    items = diffed["pairs"] + diffed["only_a"] + diffed["only_b"]
    priced = [p for p in items if p["predicted"] is not None]
    changed = [p for p in priced if not p["unchanged"]]
    t = diffed["total"]
    assert t["priced"] == len(priced) and t["changed"] == len(changed) > 0
    assert t["predicted_us"] == pytest.approx(sum(p["predicted"] for p in priced))
    assert t["priced_measured_us"] == pytest.approx(sum(p["measured"] for p in priced))
    lo, hi = t["interval_us"]
    assert all(map(math.isfinite, (lo, hi))) and lo < t["predicted_us"] < hi
    assert t["inside"] == (lo <= t["priced_measured_us"] <= hi)
    assert t["unpriced_measured_us"] == pytest.approx(t["measured_us"] - t["priced_measured_us"], abs=1e-6)
    for p in priced:
        assert p["inside"] == (p["lo"] <= p["measured"] <= p["hi"])
    moved = sum(abs(p["measured"]) for p in changed)
    assert t["share_inside"] == pytest.approx(sum(abs(p["measured"]) for p in changed if p["inside"]) / moved)
    assert 0 <= t["share_inside"] <= 1


# Both pairs' priced totals are outside their intervals: the fused gate+up matmul (2048 x 6144, per_core_N 2
# on 96 cores) is priced +27.1 us slower than one of the two 2048 x 3072 ones it replaces (per_core_N 1),
# measured +9.5 us (decode: +25.6 vs +14.5). Per K block the reports give ~1.77 us at per_core_N 2 vs ~1.31
# at 1 (decode, 96 cores), i.e. ~445 GB/s of weights chip-wide, where the model's per-core share of the
# aggregate bound, at the dram_eff the port's bfp8 rows pin (0.74, 379 GB/s), is 2.08 us alone. The decode
# pair (measured -32.0 us, priced -18.8 us) lay inside [-33.3, -4.2] only while the 1D-matmul family's
# extrapolation term was 0.141, shrunk towards a matmul-class term the DRAM-sharded public sweep's
# held-out errors inflated; with those rows priced within 10% (matmul_dram_sharded_us) the term is 0.081
# and the interval [-28.8, -8.7]. Strict: the test fails once a model change puts a total inside, so its
# mark is removed then.
FUSED_MATMUL_MISS = pytest.mark.xfail(strict=True, reason="fused matmul's per_core_N 2 over-priced: see the "
                                      "comment above")


@pytest.mark.parametrize("phase", [pytest.param("decode", marks=FUSED_MATMUL_MISS),
                                   pytest.param("prefill", marks=FUSED_MATMUL_MISS)])
def test_the_priced_total_delta_is_inside_its_interval(phase, capsys):
    """The issue's check on a real change: the measured total of the priced deltas (from the files,
    test_measured_deltas_are_the_files) lies in the model's 90% interval of its predicted total."""
    before, after, _ = PAIRS[phase]
    assert main(["diff", str(before), str(after), "--json"]) == 0
    t = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)["total"]
    lo, hi = t["interval_us"]
    assert lo <= t["priced_measured_us"] <= hi, (t["priced_measured_us"], t["predicted_us"], lo, hi)


def test_the_table_prints_the_totals(capsys):
    before, after, _ = PAIRS["decode"]
    assert main(["diff", str(before), str(after)]) == 0
    out = capsys.readouterr().out
    for text in ("measured delta", "priced (", "share of the", "unchanged specs", "only before:", "only after:"):
        assert text in out


def test_signposts_pick_the_window_out_of_a_full_report(tmp_path, capsys):
    """``--start-signpost`` / ``--end-signpost`` (tt-perf-report's options) diff the window of full
    files: the same deltas as the excerpts', lines shifted by the rows before the window; without
    them every replay is compared."""
    before, after, start = PAIRS["decode"]
    full = [padded(p, tmp_path / p.name) for p in (before, after)]
    docs = []
    for paths, extra in (((before, after), []), (full, ["--start-signpost", start, "--end-signpost", start + "_END"]),
                         (full, [])):
        assert main(["diff", *map(str, paths), "--json", *extra]) == 0
        docs.append(json.loads(capsys.readouterr().out))
    window, picked, everything = docs
    shift = [len(records(p)) for p in (before, after)]  # the warm-up replay's rows before the window
    key = ("op_code", "measured_a", "measured_b", "predicted", "lo", "hi", "unchanged")
    assert [[p[k] for k in key] for p in picked["pairs"]] == [[p[k] for k in key] for p in window["pairs"]]
    assert [(p["line_a"] - shift[0], p["line_b"] - shift[1]) for p in picked["pairs"]] == [
        (p["line_a"], p["line_b"]) for p in window["pairs"]]
    assert picked["total"] == window["total"]
    assert everything["total"]["pairs"] > window["total"]["pairs"]


def test_same_start_and_end_signpost_is_the_next_instance(tmp_path):
    """The same name for both ends: from its first instance to its second."""
    from costmodel.blackhole.report_reader import read_report

    before, _, start = PAIRS["decode"]
    with before.open(newline="") as f:
        lines = f.read().splitlines()
    path = tmp_path / "twice.csv"
    path.write_text("\n".join([lines[0], lines[1], *lines[2:5], lines[1], *lines[5:-1]]) + "\n")
    rows = read_report(path).between(start, start).rows
    assert [r.line for r in rows] == [3, 4, 5]


@pytest.mark.parametrize("extra, message", [
    (["--start-signpost", "NOPE"], "start-signpost='NOPE': no such signpost"),
    (["--start-signpost", "PERF_DECODE_END", "--end-signpost", "PERF_DECODE"], "end-signpost='PERF_DECODE': no such"),
])
def test_unknown_signposts_are_refused(extra, message, capsys):
    before, after, _ = PAIRS["decode"]
    assert main(["diff", str(before), str(after), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "['PERF_DECODE', 'PERF_DECODE_END']" in err and "Traceback" not in err
