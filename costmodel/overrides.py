"""Hardware overrides ``HW.FIELD=VALUE``: the one parser, validator and applier of every CLI and the report.

    python -m experiments.report --set blackhole.dram_peak_bytes_per_s=256e9
    python -m costmodel.blackhole --set blackhole.clock_hz=1.2e9
    python -m costmodel.ahbm eval ... --set ahbm.pe_clock_hz=2e9

``HW`` is ``blackhole`` (a field of ``costmodel.hardware.Blackhole``) or ``ahbm`` (``AHBM``). A value
is accepted once, here, when it is a finite number inside the field's physical range
(``costmodel.hardware.field_bounds``: its closed ``bounds`` metadata, else finite and > 0) and
the field is one the cost models read. Refused with the reason: static structure (mesh, counts:
they select code paths, they are not numbers to sweep; the Blackhole worker grid ``grid_x`` /
``grid_y`` is the exception, ``settable`` in its spec: an integer in its bounds, since boards and
firmware differ) and fields the models do not use (``NOT_MODELLED``), which would otherwise be
accepted and change nothing.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.hardware import AHBM, Blackhole, field_bounds

FLAG = "--set"
HARDWARE: dict[str, type] = {"blackhole": Blackhole, "ahbm": AHBM}

# Float fields present in the specs (provenance) that no cost model reads. Checked by
# tests/test_overrides.py: a change of each moves no latency, a change of every other field does.
NOT_MODELLED: dict[str, str] = {
    "ahbm.pseudo_channel_bytes_per_s": "the kernel model reads the PE controller rate "
                                       "(ahbm.pe_controller_bytes_per_s = 8 pseudo-channels x 32 GB/s) instead",
    "ahbm.dma_remote_cube_latency_s": "remote-CUBE traffic is priced per hop by ahbm.cube_hop_latency_s "
                                      "(derived once from this measurement); set that field",
    "ahbm.dma_remote_sip_latency_s": "the kernel model is one SIP; nothing crosses SIPs",
    "ahbm.ucie_bytes_per_s": "only messages that cross SIPs use UCIe and a CUBE Group stays in one SIP; "
                             "intra-SIP messages ride the CUBE NOC (set ahbm.cube_noc_bytes_per_s)",
    "ahbm.ucie_transaction_s": "only messages that cross SIPs use UCIe and a CUBE Group stays in one SIP; "
                               "intra-SIP messages pay ahbm.cube_noc_transaction_s",
    "ahbm.hbm_interleave_bytes": "only the event simulation (costmodel.ahbm.sim) splits a transfer over "
                                 "pseudo-channels; the analytic model streams at ahbm.pe_controller_bytes_per_s",
    "blackhole.eth_bytes_per_s": "the single-chip expert moves nothing over Ethernet",
}

# What a command prices decides which of the fields above it reads: ``scope`` 'kernel' (the
# attention-kernel model, ``python -m costmodel.ahbm``: one CUBE Group in one SIP) refuses every
# NOT_MODELLED field; 'layer' (the decoder-layer token model, ``python -m experiments.ahbm_token``:
# GEMMs streaming weights per pseudo-channel, collectives over UCIe between SIPs) reads these too.
# Checked by tests/test_overrides.py: each changes a token latency of the layer model.
SCOPES = ("kernel", "layer")
LAYER_READS: frozenset[str] = frozenset({
    "ahbm.pseudo_channel_bytes_per_s", "ahbm.hbm_interleave_bytes",  # a weight DMA's chunks over the channels
    "ahbm.ucie_bytes_per_s", "ahbm.ucie_transaction_s", "ahbm.dma_remote_sip_latency_s",  # SIP-to-SIP messages
})


def _refused(key: str, scope: str) -> bool:
    """Whether ``key`` is a NOT_MODELLED field for a command of ``scope``."""
    if scope not in SCOPES:
        raise ValueError(f"scope={scope!r} unknown; expected one of {SCOPES}")
    return key in NOT_MODELLED and not (scope == "layer" and key in LAYER_READS)


def _fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _static_only(f: dataclasses.Field) -> bool:
    """Static structure that ``--set`` refuses (a settable static field, the worker grid, is accepted)."""
    return f.metadata.get("static", False) and not f.metadata.get("settable", False)


def settable_fields(prefix: str, scope: str = "kernel") -> list[str]:
    """Field names ``--set <prefix>.FIELD=VALUE`` accepts (numeric, modelled by a command of
    ``scope``, see ``SCOPES``), in declaration order."""
    return [n for n, f in _fields(HARDWARE[prefix]).items()
            if not _static_only(f) and not _refused(f"{prefix}.{n}", scope)]


def check_override(key: str, value, *, scope: str = "kernel") -> float:
    """Validate one ``HW.FIELD`` = value pair for a command of ``scope`` (``SCOPES``); returns the
    value as a float.

    Raises ValueError naming the key, the value and what was expected.
    """
    prefix, dot, name = key.partition(".")
    if not dot or prefix not in HARDWARE:
        raise ValueError(f"{FLAG} {key}: the key must be HW.FIELD with HW one of {sorted(HARDWARE)}")
    cls = HARDWARE[prefix]
    fields = _fields(cls)
    if name not in fields:
        raise ValueError(f"{FLAG} {key}: {name!r} is not a field of costmodel.hardware.{cls.__name__}; "
                         f"expected one of {settable_fields(prefix, scope)}")
    if _static_only(fields[name]):
        raise ValueError(f"{FLAG} {key}: {name!r} is static structure of {cls.__name__} (it selects code paths), "
                         f"not a number to override; expected one of {settable_fields(prefix, scope)}")
    if _refused(key, scope):
        also = (" (the decoder-layer token model reads it: python -m experiments.ahbm_token --set ...)"
                if key in LAYER_READS else "")
        raise ValueError(f"{FLAG} {key}: {name!r} is not modelled by this command: {NOT_MODELLED[key]}{also}")
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        v = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{FLAG} {key}={value!r}: expected a number") from None
    bounds = field_bounds(cls, name)
    if fields[name].metadata.get("settable", False):  # a static integer (the worker grid)
        lo, hi = bounds
        if not (math.isfinite(v) and v.is_integer() and lo <= v <= hi):
            raise ValueError(f"{FLAG} {key}={v!r}: expected an integer in [{lo:g}, {hi:g}] "
                             f"({fields[name].metadata['unit']})")
        return v
    if bounds is None:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{FLAG} {key}={v!r}: expected a finite number > 0 ({fields[name].metadata['unit']})")
    else:
        lo, hi = bounds
        if not (math.isfinite(v) and lo <= v <= hi):
            raise ValueError(f"{FLAG} {key}={v!r}: expected a finite number in [{lo:g}, {hi:g}] "
                             f"({fields[name].metadata['unit']})")
    return v


# What each command prices, for the refusal of another hardware's override.
PRICES = {"blackhole": "the Blackhole chip (python -m costmodel.blackhole)",
          "ahbm": "the AHBM mesh (python -m costmodel.ahbm)"}


def parse_overrides(items: list[str], *, default_hw: str | None = None,
                    hw: str | tuple[str, ...] = ("blackhole", "ahbm"), scope: str = "kernel") -> dict[str, float]:
    """``["blackhole.dram_peak_bytes_per_s=256e9", ...]`` -> ``{"blackhole.dram_peak_bytes_per_s": 256e9}``.

    ``default_hw`` (e.g. 'ahbm') is prefixed to a bare ``FIELD=VALUE``. ``hw``: the hardware the
    command prices; an override of another one would change nothing and is refused. ``scope``:
    which of its models the command runs (``SCOPES``: 'layer' also reads ``LAYER_READS``). Raises
    ValueError naming the item when it is not ``HW.FIELD=VALUE``, is of another hardware, fails
    ``check_override``, or a key is given twice.
    """
    own = (hw,) if isinstance(hw, str) else tuple(hw)
    out: dict[str, float] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"{FLAG} {item!r}: expected HW.FIELD=VALUE, e.g. blackhole.clock_hz=1.2e9")
        if default_hw is not None and "." not in key:
            key = f"{default_hw}.{key}"
        prefix = key.partition(".")[0]
        if prefix in HARDWARE and prefix not in own:
            raise ValueError(f"{FLAG} {item!r}: this command prices {' and '.join(PRICES[h] for h in own)}; "
                             f"{prefix} overrides would change nothing here (it applies to {PRICES[prefix]})")
        value = check_override(key, raw.strip(), scope=scope)
        if key in out:
            raise ValueError(f"{FLAG} {item!r}: {key} given twice")
        out[key] = value
    return out


def check_overrides(overrides: dict[str, float], *, scope: str = "kernel") -> dict[str, float]:
    """Validate a ``{"HW.FIELD": value}`` dict built in code (the CLIs' come from ``parse_overrides``)."""
    return {k: check_override(k, v, scope=scope) for k, v in overrides.items()}


def apply_overrides(hw, overrides: dict[str, float], *, scope: str = "kernel"):
    """``hw`` (a ``Blackhole`` / ``AHBM``) with the overrides of its own kind replaced (others ignored).

    Every key is validated (``check_override`` for ``scope``), also those for the other hardware,
    so a typo never passes silently.
    """
    prefix = next(p for p, cls in HARDWARE.items() if isinstance(hw, cls))
    fields = _fields(HARDWARE[prefix])
    own = {k.split(".", 1)[1]: v for k, v in check_overrides(overrides, scope=scope).items()
           if k.startswith(prefix + ".")}
    own = {k: int(v) if fields[k].metadata.get("static", False) else v for k, v in own.items()}
    return dataclasses.replace(hw, **own) if own else hw


def add_set_argument(parser, *, hw: str | tuple[str, ...] = ("blackhole", "ahbm")) -> None:
    """The ``--set HW.FIELD=VALUE`` option (repeatable, dest ``overrides``), one wording in every CLI."""
    names = (hw,) if isinstance(hw, str) else hw
    example = {"blackhole": "blackhole.dram_peak_bytes_per_s=256e9", "ahbm": "ahbm.pe_clock_hz=2e9"}
    parser.add_argument(FLAG, dest="overrides", action="append", default=[], metavar="HW.FIELD=VALUE",
                        help="override a hardware default (repeatable), e.g. "
                             + " or ".join(example[n] for n in names))
