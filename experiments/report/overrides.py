"""Hardware overrides of the report: ``--set blackhole.dram_peak_bytes_per_s=256e9`` (repeatable).

Keys are ``<hardware>.<field>``: ``blackhole`` names a field of ``costmodel.hardware.Blackhole``,
``ahbm`` one of ``costmodel.hardware.AHBM``. Only the numeric (pytree leaf) fields can be set; the
static structure (grid shape, counts) selects code paths and is not a number to sweep. Every
section receives the whole validated dict and applies the keys of the hardware it models.
"""

from __future__ import annotations

import dataclasses
import math


def hardware_classes() -> dict[str, type]:
    """Prefix -> the ``costmodel.hardware`` spec dataclass it overrides."""
    from costmodel import hardware

    return {"blackhole": hardware.Blackhole, "ahbm": hardware.AHBM}


def settable_fields(cls: type) -> list[str]:
    """The numeric (non-static) fields of a hardware spec dataclass."""
    return [f.name for f in dataclasses.fields(cls) if not f.metadata.get("static", False)]


def parse_overrides(items: list[str]) -> dict[str, float]:
    """``["blackhole.dram_peak_bytes_per_s=256e9", ...]`` -> ``{"blackhole.dram_peak_bytes_per_s": 256e9}``.

    Raises ValueError naming the item when it is not ``<hardware>.<field>=<finite positive float>``,
    the hardware or field is unknown, or a key is given twice.
    """
    classes = hardware_classes()
    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep:
            raise ValueError(f"--set {item!r}: expected <hardware>.<field>=<value>")
        prefix, dot, field = key.partition(".")
        if not dot or prefix not in classes:
            raise ValueError(f"--set {item!r}: key {key!r} must start with one of "
                             f"{sorted(p + '.' for p in classes)}")
        allowed = settable_fields(classes[prefix])
        if field not in allowed:
            raise ValueError(f"--set {item!r}: {field!r} is not a numeric field of "
                             f"costmodel.hardware.{classes[prefix].__name__}; expected one of {allowed}")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--set {item!r}: value {raw!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"--set {item!r}: value {value} must be finite and > 0 (a rate, size or latency)")
        if key in out:
            raise ValueError(f"--set {item!r}: {key} given twice")
        out[key] = value
    return out


def apply_overrides(hw, overrides: dict[str, float], prefix: str):
    """``hw`` (a ``Blackhole`` / ``AHBM``) with the ``<prefix>.*`` entries of ``overrides`` replaced."""
    own = {k.split(".", 1)[1]: v for k, v in overrides.items() if k.startswith(prefix + ".")}
    return dataclasses.replace(hw, **own) if own else hw
