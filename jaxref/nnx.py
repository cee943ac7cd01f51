"""Flax NNX wrapper of the action expert for users who compose flax models.

The module only *holds* the ``ExpertParams`` pytree as ``nnx.Param`` leaves (state paths follow the
schema, e.g. ``params/layers/wq``) and calls the pure functions of ``jaxref.expert``; it contains no
math of its own.
"""

from __future__ import annotations

import jax
from flax import nnx

from jaxref import expert as _expert
from jaxref.config import ExpertConfig
from jaxref.expert import ExpertParams, KVCache
from jaxref.options import DEFAULT_OPTIONS, ExpertOptions
from jaxref.weights import init_params


class ActionExpert(nnx.Module):
    """The expert as an NNX module.

    Args:
      cfg: model geometry.
      params: existing ``ExpertParams`` (e.g. from ``jaxref.weights.load_safetensors``); if None,
        random ones from ``rngs.params()`` (``jaxref.weights.init_params``).
      options: ``jaxref.options.ExpertOptions`` (attention form, precision, chunking), as in
        ``jaxref.expert.velocity``.
    """

    def __init__(
        self,
        cfg: ExpertConfig,
        *,
        rngs: nnx.Rngs | None = None,
        params: ExpertParams | None = None,
        options: ExpertOptions = DEFAULT_OPTIONS,
    ):
        if params is None:
            if rngs is None:
                raise ValueError("ActionExpert needs params=ExpertParams(...) or rngs=nnx.Rngs(...)")
            params = init_params(rngs.params(), cfg)
        self.cfg = cfg
        self.options = options
        self.params = nnx.data(jax.tree.map(nnx.Param, params))

    def expert_params(self) -> ExpertParams:
        """The held values as a plain ``ExpertParams`` pytree."""
        return jax.tree.map(lambda v: v[...], self.params, is_leaf=lambda v: isinstance(v, nnx.Variable))

    def __call__(self, x_t: jax.Array, t, cache: KVCache) -> jax.Array:
        """``jaxref.expert.velocity``: x_t [T, A] or [B, T, A] -> v of the same shape."""
        return _expert.velocity(
            self.expert_params(),
            x_t,
            t,
            cache,
            cfg=self.cfg,
            options=self.options,
        )

    def sample(
        self, cache: KVCache, key: jax.Array, *, num_steps: int | None = None, x0: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``jaxref.expert.sample``: (final action [T, A], per-step velocities [steps, T, A])."""
        return _expert.sample(
            self.expert_params(),
            cache,
            key,
            cfg=self.cfg,
            options=self.options,
            num_steps=num_steps,
            x0=x0,
        )
