"""``ExpertOptions``: the expert's run-time knobs (attention form, precision, chunking) as one
frozen, validated, hashable object, passed whole from ``sample`` / ``velocity`` down to
``decoder_layer`` (and static under ``jax.jit``)."""

from __future__ import annotations

import dataclasses

from jaxref.precision import FP32, Precision
from jaxref.validation import check_choice

ATTENTION_MODES = ("exact", "tail_slot")


@dataclasses.dataclass(frozen=True)
class ExpertOptions:
    """How the expert is evaluated (never what it computes: every choice gives the same model).

    attention: 'exact' (softmax over cache rows [0, S) and the own tokens, ``attend_exact``) or
      'tail_slot' (the device's form: own K/V written into the last T cache rows under an
      additive mask, ``attend_tail_slot``).
    precision: rounding policy of the decoder stack (``Precision.fp32()`` = the fp32 golden).
    proj_precision: policy of action_in_proj / action_out_proj (host fp32 on the device port).
    kv_chunk: cache rows per online-softmax chunk (None = one dense chunk, fastest on CPU for one
      trajectory and for a vmapped batch alike; chunks bound the scores' memory, e.g. for grads).
    """

    attention: str = "exact"
    precision: Precision = FP32
    proj_precision: Precision = FP32
    kv_chunk: int | None = None

    def __post_init__(self):
        check_choice("attention", self.attention, ATTENTION_MODES)
        for name in ("precision", "proj_precision"):
            if not isinstance(getattr(self, name), Precision):
                raise TypeError(f"{name}={getattr(self, name)!r} must be a jaxref.precision.Precision")
        c = self.kv_chunk
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c <= 0):
            raise ValueError(f"kv_chunk={c!r} must be a positive int or None (dense)")


DEFAULT_OPTIONS = ExpertOptions()  # the fp32 golden: exact attention, dense
