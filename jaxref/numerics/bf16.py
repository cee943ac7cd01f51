"""bfloat16 rounding (round-to-nearest-even), values kept in fp32 so later math stays fp32."""

import jax
import jax.numpy as jnp


def round_bf16(x: jnp.ndarray) -> jnp.ndarray:
    """Round to the nearest bf16 value (ties to even), returned as float32.

    Args:
      x: any-shape float array.
    Returns:
      float32 array of x's shape whose values are exactly representable in bf16.
      XLA's f32 -> bf16 convert is round-to-nearest-even (NaN stays NaN, overflow rounds to Inf),
      the same rule as tt-metal's host converter.
    """
    return jnp.asarray(x, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32)


def einsum_f32(spec: str, a: jnp.ndarray, b: jnp.ndarray, *, bf16_values: bool = False) -> jnp.ndarray:
    """``jnp.einsum(spec, a, b)`` with float32 sums (HIGHEST: no bf16 passes on a backend that has them).

    ``bf16_values``: a and b hold bf16 values (every Tenstorrent format's values are). They are then
    read as bf16, which changes no value, and each product of two bf16 values is exact in float32, so
    the math is the float32 einsum's up to the order of its sums; on XLA:CPU it runs the bf16 dot
    kernels (YNNPACK's single-dot fusions), several times faster. Values bf16 cannot hold would be
    rounded: pass it only where they cannot occur. Both forms flush subnormals, as XLA:CPU does.
    """
    if bf16_values:
        return jnp.einsum(spec, a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return jnp.einsum(spec, jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), precision=jax.lax.Precision.HIGHEST)
