"""Precision policies: where the golden rounds, and to which number format.

The golden computes in float32 and *rounds* at the points where a lower-precision implementation
stores a tensor. One set of functions serves every policy; only the policy object differs, so the
fp32 golden never changes precision silently.

Formats: ``'fp32'`` (no rounding), ``'bf16'`` (round-to-nearest-even), ``'bfp8'`` / ``'bfp4'``
(Tenstorrent bfloat8_b / bfloat4_b block floating point, shared exponent per 16 consecutive values
along one axis - the last unless told - see ``jaxref.numerics``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from jaxref.numerics.formats import FORMATS, MANTISSA_BITS
from jaxref.validation import check_choice


def cast(x: jnp.ndarray, fmt: str, *, axis: int = -1) -> jnp.ndarray:
    """Round ``x`` to number format ``fmt``; the result is float32 holding representable values.

    Block formats group 16 consecutive elements along ``axis`` (a tile face row on the device):
    pass the axis that is the last one in the orientation the device stores the tensor (the
    output axis of a weight held here as [out, in], since the device stores [in, out]).
    """
    if fmt == "fp32":
        return jnp.asarray(x, jnp.float32)
    if fmt == "bf16":
        from jaxref.numerics import round_bf16

        return round_bf16(x)
    if fmt in MANTISSA_BITS:
        from jaxref.numerics import quantize_bfp

        return jnp.moveaxis(quantize_bfp(jnp.moveaxis(x, axis, -1), MANTISSA_BITS[fmt]), -1, axis)
    check_choice("fmt", fmt, FORMATS)
    raise AssertionError(fmt)  # a format in FORMATS without a branch here


@dataclasses.dataclass(frozen=True)
class Precision:
    """Where a computation rounds. All math between rounding points is float32.

    Attributes:
      name: label for reports.
      weights: format of matmul weights (wqkv, wo, w1/w3/w2; block formats group along the output
        axis, as the device's [in, out] tiles do).
      norm_weights: format of RMSNorm / LayerNorm gammas.
      activations: format every op output of the layer graph is rounded to (residual stream,
        matmul outputs, norms, rope, attention output).
      cache: format of the K/V rows attention reads (VLM cache and the expert's own K/V).
      mask: format of the additive attention mask.
    """

    name: str = "fp32"
    weights: str = "fp32"
    norm_weights: str = "fp32"
    activations: str = "fp32"
    cache: str = "fp32"
    mask: str = "fp32"

    def __post_init__(self):
        for field in ("weights", "norm_weights", "activations", "cache", "mask"):
            v = getattr(self, field)
            check_choice(field, v, FORMATS)

    # Rounding helpers (identity under fp32, so the golden path pays nothing).
    def weight(self, x, *, axis: int = -1):
        """Round a matmul weight; ``axis``: its output axis (where the device's blocks run)."""
        return cast(x, self.weights, axis=axis)

    def norm_weight(self, x):
        return cast(x, self.norm_weights)

    def act(self, x):
        return cast(x, self.activations)

    def kv(self, x):
        return cast(x, self.cache)

    def mask_(self, x):
        return cast(x, self.mask)

    def replace(self, **changes) -> Precision:
        """``dataclasses.replace``; a device policy's label follows its new formats."""
        out = dataclasses.replace(self, **changes)
        if "name" not in changes and self.name == self._device_label():
            out = dataclasses.replace(out, name=out._device_label())
        return out

    def _device_label(self) -> str:
        return f"device(w={self.weights},kv={self.cache},mask={self.mask})"

    @property
    def is_exact(self) -> bool:
        """True for the fp32 golden (no rounding anywhere)."""
        return all(getattr(self, f) == "fp32" for f in ("weights", "norm_weights", "activations", "cache", "mask"))

    # ---- presets ----------------------------------------------------------------------------
    @classmethod
    def fp32(cls) -> Precision:
        """The golden: float32 everywhere."""
        return cls(name="fp32")

    @classmethod
    def hf_bf16(cls) -> Precision:
        """HF transformers with ``dtype=torch.bfloat16``: bf16 params, activations and cache
        (RMSNorm and softmax internally fp32, matmuls accumulate in fp32 and round the output)."""
        return cls(name="hf-bf16", weights="bf16", norm_weights="bf16", activations="bf16",
                   cache="bf16", mask="bf16")

    @classmethod
    def device(cls, *, weights: str = "bfp8", cache: str = "bf16", mask: str = "bfp4") -> Precision:
        """The Blackhole port: bfp8 (or bf16) weights, bf16 activations, bf16 or bfp8 KV cache,
        bfp4 additive mask, bf16 gammas; fp32 where the device accumulates. The defaults are declared
        here only: the port description's storage formats (``costmodel.blackhole.port.Port.precision``)
        default to this object (jaxref imports nothing of the port)."""
        out = cls(weights=weights, norm_weights="bf16", activations="bf16", cache=cache, mask=mask)
        return dataclasses.replace(out, name=out._device_label())

    @classmethod
    def preset(cls, name: str) -> Precision:
        presets = {"fp32": cls.fp32, "hf-bf16": cls.hf_bf16, "device": cls.device}
        check_choice("precision", name, presets)
        return presets[name]()


# The all-fp32 golden precision, the default of every function that takes one.
FP32 = Precision.fp32()
