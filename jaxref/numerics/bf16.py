"""bfloat16 rounding (round-to-nearest-even), values kept in fp32 so later math stays fp32."""

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
