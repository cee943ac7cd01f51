"""ADR-0060 attention algorithms as executable, differentiable references.

Layout everywhere: q [T, N, H], k / v [S, K, H] (no batch axis; ``jax.vmap`` adds one).
"""

from jaxref.attention.reference import MASK_LSE, MASK_VALUE, attention_reference, causal_mask

__all__ = ["MASK_LSE", "MASK_VALUE", "attention_reference", "causal_mask"]
