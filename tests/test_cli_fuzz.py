"""Fuzz the CLIs' numeric options (hypothesis, in-process): every run is exit 0 with strict, finite JSON,
or exit 2 with ``error: ...``; never a traceback, never NaN / Infinity in the output."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from costmodel.ahbm import cli as ahbm_cli
from costmodel.blackhole import cli as bh_cli
from costmodel.hardware import AHBM, Blackhole, field_bounds
from costmodel.overrides import settable_fields

NUMBER_TEXT = st.one_of(
    st.integers(-(10**13), 10**13).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "-0", "0", "1e-300", "abc", "", "3.5", "0x10"]),
)
FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def finite_leaves(obj) -> bool:
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(finite_leaves(v) for v in obj.values())
    if isinstance(obj, list):
        return all(finite_leaves(v) for v in obj)
    return True


def outcome(call, capsys) -> int:
    """Run ``call()``; return its exit status after checking the output contract."""
    try:
        status = call()
        status = 0 if isinstance(status, dict) else status
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    assert status in (0, 2), (status, err[-2000:])
    assert "Traceback" not in err
    if status == 0:
        data = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-finite {c} in the JSON output"))
        assert finite_leaves(data)
    else:
        assert "error: " in err
    return status


@FUZZ
@given(option=st.sampled_from(["--smax", "--seq-len", "--k-chunk", "--q-chunk", "--cores-per-head", "--draws"]),
       value=NUMBER_TEXT)
def test_blackhole_numeric_options(option, value, capsys):
    outcome(lambda: bh_cli.main([option, value, "--json"]), capsys)


def override_value(data, cls, field: str) -> str:
    """Any text half the time, else a number inside the field's physical range (mostly valid runs)."""
    lo, hi = field_bounds(cls, field)
    inside = st.floats(min_value=lo, max_value=hi, allow_nan=False).map(repr)
    return data.draw(st.one_of(NUMBER_TEXT, inside, inside))


SEEN: dict[str, set] = {"blackhole": set(), "ahbm": set()}


@FUZZ
@given(field=st.sampled_from(settable_fields("blackhole")), data=st.data())
def test_blackhole_hardware_overrides(field, data, capsys):
    value = override_value(data, Blackhole, field)
    SEEN["blackhole"].add(outcome(lambda: bh_cli.main(["--set", f"blackhole.{field}={value}", "--json"]), capsys))


@FUZZ
@given(field=st.sampled_from(settable_fields("ahbm")), data=st.data(),
       seq_len=st.sampled_from(["4096", "65536", "0", "-5", "1e3", "99999999999999"]))
def test_ahbm_eval_options_and_overrides(field, data, seq_len, capsys):
    value = override_value(data, AHBM, field)
    SEEN["ahbm"].add(outcome(lambda: ahbm_cli.main(["eval", "--case", "decode", "--seq-len", seq_len, "--set",
                                                    f"ahbm.{field}={value}", "--json"]), capsys))


@FUZZ
@given(field=st.sampled_from(settable_fields("ahbm")), value=NUMBER_TEXT)
def test_blackhole_cli_refuses_every_ahbm_override(field, value, capsys):
    """An option that could change nothing is refused: the Blackhole CLI prices no AHBM field."""
    assert outcome(lambda: bh_cli.main(["--set", f"ahbm.{field}={value}", "--json"]), capsys) == 2


@FUZZ
@given(field=st.sampled_from(settable_fields("blackhole")), value=NUMBER_TEXT)
def test_ahbm_cli_refuses_every_blackhole_override(field, value, capsys):
    assert outcome(lambda: ahbm_cli.main(["eval", "--case", "decode", "--seq-len", "4096", "--set",
                                          f"blackhole.{field}={value}", "--json"]), capsys) == 2


def test_the_fuzzers_saw_valid_and_refused_runs():
    """Run after the two above (file order): both outcomes occurred, so neither fuzzer only saw errors."""
    for name, seen in SEEN.items():
        if seen:
            assert seen == {0, 2}, (name, seen)
