"""``python -m costmodel.blackhole diff``: two reports of one model matched op by op (the port's layer
emitted with ttnn's default matmul configs, then with the tuned ones; one op removed), measured
deltas next to predicted ones, and bad input refused."""

import csv
import json

import pytest

from costmodel.blackhole.cli import main
from costmodel.blackhole.fit import load_calibration
from costmodel.blackhole.opspecs import KernelSpec, MatmulSpec
from costmodel.blackhole.report_reader import read_report


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("diff")
    before, after = d / "default.csv", d / "tuned.csv"
    main(["--emit-csv", str(before), "--matmuls", "default", "--json"])
    main(["--emit-csv", str(after), "--json"])
    return before, after


def test_matched_pairs_carry_measured_and_predicted_deltas(pair, capsys):
    before, after = pair
    capsys.readouterr()
    assert main(["diff", str(before), str(after), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out, parse_constant=pytest.fail)
    a, b = read_report(before), read_report(after)
    assert len(doc["pairs"]) == len(a.rows) == len(b.rows) and not doc["only_a"] and not doc["only_b"]
    params = load_calibration().params
    for p, ra, rb in zip(doc["pairs"], a.rows, b.rows, strict=True):
        assert (p["line_a"], p["line_b"]) == (ra.line, rb.line)
        # the emitted durations are the model's kernel-only prices, so the predicted delta is their difference
        want = float(KernelSpec(rb.spec).us(b.hw, params)) - float(KernelSpec(ra.spec).us(a.hw, params))
        assert p["predicted"] == pytest.approx(want, rel=1e-3, abs=1e-3)
        assert p["lo"] <= p["predicted"] <= p["hi"]
        if ra.spec == rb.spec:  # an unchanged op predicts no change, with no uncertainty
            assert p["predicted"] == 0 and p["lo"] == p["hi"] == 0
        else:
            assert isinstance(ra.spec, MatmulSpec) and p["hi"] - p["lo"] > 0
    t = doc["total"]
    assert t["predicted_us"] == pytest.approx(sum(p["predicted"] for p in doc["pairs"]))
    assert t["interval_us"][0] < t["predicted_us"] < t["interval_us"][1] and t["share_inside"] == pytest.approx(1.0)


def test_an_op_removed_leaves_the_rest_paired_in_order(pair, tmp_path, capsys):
    before, after = pair
    with after.open(newline="") as f:
        recs = list(csv.DictReader(f))
    cut = tmp_path / "cut.csv"
    with cut.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(recs[0]))
        w.writeheader()
        w.writerows(recs[:5] + recs[6:])  # drop the 6th op
    capsys.readouterr()
    assert main(["diff", str(before), str(cut), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["line"] for r in doc["only_a"]] == [7] and not doc["only_b"]
    assert [(p["line_a"], p["line_b"]) for p in doc["pairs"]] == [(i, i) for i in range(2, 7)] + [
        (i, i - 1) for i in range(8, len(recs) + 2)]


@pytest.mark.parametrize("argv, message", [
    (["only_one.csv"], "the following arguments are required: AFTER_CSV"),
    (["/nonexistent_a.csv", "/nonexistent_b.csv"], "no such file"),
    (["a.csv", "b.csv", "--device-id", "all"], "--device-id='all'"),
])
def test_diff_refuses_bad_input(argv, message, capsys):
    assert main(["diff", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
