"""jaxref.validation: typed choices, argparse option types, strict JSON."""

import argparse
import json
import math
from typing import Literal

import pytest

from costmodel.ahbm.config import CASES, AhbmConfig
from costmodel.hardware import tile_bytes
from jaxref.precision import Precision
from jaxref.validation import check_choice, choices_of, dumps_strict, finite_float, output_file, positive_int

Color = Literal["red", "green"]


def test_choices_of_a_literal_and_one_message_for_every_kind_of_choices():
    assert choices_of(Color) == ("red", "green")
    with pytest.raises(TypeError, match="is not a Literal"):
        choices_of(str)
    check_choice("color", "red", Color)
    for choices in (Color, ("red", "green"), {"red": 1, "green": 2}):
        with pytest.raises(ValueError, match=r"^color='blue' unknown; expected one of \('red', 'green'\)$"):
            check_choice("color", "blue", choices)


@pytest.mark.parametrize("build, message", [
    (lambda: AhbmConfig("encode", 64), "case='encode' unknown; expected one of ('decode', 'decode_sp'"),
    (lambda: tile_bytes("fp8"), "dtype='fp8' unknown; expected one of ('fp32', 'bf16', 'bfp8', 'bfp4')"),
    (lambda: Precision(weights="int4"), "weights='int4' unknown; expected one of ('fp32', 'bf16', 'bfp8', 'bfp4')"),
    (lambda: Precision.preset("fp64"), "precision='fp64' unknown; expected one of ('fp32', 'hf-bf16', 'device')"),
])
def test_library_choices_use_the_one_helper(build, message):
    with pytest.raises(ValueError) as e:
        build()
    assert str(e.value) == message or str(e.value).startswith(message)
    assert CASES == ("decode", "decode_sp", "prefill", "prefill_sp")


@pytest.mark.parametrize("parse, text, message", [
    (positive_int, "0", "0: expected an integer >= 1"),
    (positive_int, "1.5", "'1.5': expected an integer >= 1"),
    (finite_float, "nan", "'nan': expected a finite number"),
    (finite_float, "-inf", "'-inf': expected a finite number"),
])
def test_option_types_refuse_with_the_value(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)


def test_output_file_refuses_a_folder_and_a_missing_parent(tmp_path):
    assert output_file(str(tmp_path / "a.csv")) == tmp_path / "a.csv"
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        output_file(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        output_file(str(tmp_path / "no" / "a.csv"))


def test_dumps_strict_names_the_non_finite_number():
    assert json.loads(dumps_strict({"a": [1.0, 2]})) == {"a": [1.0, 2]}
    with pytest.raises(ValueError, match=r"non-finite number at result\['b'\]\[1\]"):
        dumps_strict({"a": 1.0, "b": [0.0, math.nan]})


def test_board_argument_is_one_flag_with_the_presets_as_choices(capsys):
    import argparse

    from jaxref.validation import board_argument

    p = argparse.ArgumentParser(prog="prog")
    board_argument(p, {"p150a", "p100a"}, default="p150a")
    assert p.parse_args([]).board == "p150a" and p.parse_args(["--board", "p100a"]).board == "p100a"
    with pytest.raises(SystemExit):
        p.parse_args(["--board", "p200"])
    assert "argument --board: invalid choice: 'p200'" in capsys.readouterr().err
