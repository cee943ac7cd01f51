"""Tenstorrent tile and number-format constants: the one definition numerics, the cost model and
the device graph import (tt-metal ``tt_metal/api/tt-metalium/constants.hpp`` TILE_HEIGHT /
TILE_WIDTH / FACE_HEIGHT; the block-float layout of ``blockfloat_common.cpp``, checked bit for bit
against ttnn in ``tests/test_numerics_ttnn.py``)."""

from __future__ import annotations

from jaxref.validation import choices_of
from jaxref.vocabulary import NumberFormat

TILE = 32  # tile edge (rows = columns), elements; ttnn pads TILE-layout tensors to multiples of it
FACE_ROW = 16  # elements of one face row of a 32x32 tile (four 16x16 faces): one shared bfp exponent
FORMATS: tuple[str, ...] = choices_of(NumberFormat)  # storage formats the golden emulates
# Magnitude bits of a block-float element (sign separate, no hidden bit): bfloat8_b / bfloat4_b.
MANTISSA_BITS: dict[str, int] = {"bfp8": 7, "bfp4": 3}
_ELEM_BITS = {"fp32": 32, "bf16": 16, **{f: 1 + w for f, w in MANTISSA_BITS.items()}}
# Bytes, never elements, of one 32x32 tile: the elements plus, for block floats, one exponent byte
# per face row (64 = 4 faces x 16 rows): fp32 4096, bf16 2048, bfp8 1024 + 64, bfp4 512 + 64.
TILE_BYTES: dict[str, int] = {f: TILE * TILE * b // 8 + (TILE * TILE // FACE_ROW if f in MANTISSA_BITS else 0)
                              for f, b in _ELEM_BITS.items()}
# The device's additive mask value for hidden cache rows (seeds/EXPERT_NOTES.md: 0 / -1e9).
TAIL_MASK_VALUE = -1e9
# What the tests and the parity tools write into unused cache rows [S, Smax): finite garbage the
# mask must hide (the notes' tests use the same value).
CACHE_GARBAGE = 7.0
