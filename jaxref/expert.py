"""The action expert: param / cache pytrees, the layer stack (``lax.scan``), ``velocity`` and ``sample``.

Schema (all float32 unless noted; L layers, Smax cache rows, see ``jaxref.layers`` for one layer):

  ExpertParams
    action_in: ActionInParams        Fourier -> MLP -> LayerNorm (``jaxref.action``)
    layers: LayerParams              every field stacked on a leading L axis (scanned)
    final_norm: [D]                  HF ``norm.weight``
    action_out: ActionOutParams      w [D, A], b [A]
  KVCache                            the VLM's cache, one row block per expert layer
    k, v: [L, K, Smax, H]            roped keys / values, head-major as HF ([B, K, S, H] per layer)
                                     and the device ([1, K, Smax, H]) store them; rows [0, S) valid
    seq_len: int32 []                S
    rope_delta: int32 []             Qwen3-VL M-RoPE delta; expert positions are i + rope_delta + S

Storage dtypes: float32, or a narrower float (e.g. bf16 weights / cache, as in the checkpoint and
a bf16 VLM); the precision hooks upcast one layer at a time inside the scan, all math is float32.

Batching: trajectories share one cache. ``velocity`` accepts x_t [B, T, A] and vmaps with the cache
unbatched (``in_axes=None``); ``sample`` is vmap-able over keys the same way:
``jax.vmap(sample, in_axes=(None, None, 0))``. With the exact attention the cache is read once per
layer for all B trajectories and never copied (the tail-slot form writes each trajectory's own K/V
into it, which needs a copy per trajectory, as one device buffer per trajectory would).

How it is evaluated (attention form, precision policies, cache-attention chunking) travels as
one ``jaxref.options.ExpertOptions`` (``options=``); the default is the fp32 golden, exact
attention, dense (fastest for one trajectory and for a vmapped batch alike; chunks bound the
scores' memory, e.g. for gradients). Results agree to float32 rounding for every chunking.

Layer sources: ``velocity`` / ``sample`` / ``expert_stack`` take layer i's weights and cache rows
from stacked arrays (the default) or from any ``LayerSource`` ``i -> (LayerParams, cache_k, cache_v)``
evaluated inside the layer scan (compact storage unpacked per layer, or weights generated per layer),
with a ``CacheContext`` (S, rope delta) in place of the cache.

Jitted entry points: ``velocity_jit`` and ``sample_jit`` (static: cfg, options, num_steps, layers - a
layer source must be hashable, e.g. a function).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxref.action import ActionInParams, ActionOutParams, action_in_proj, action_out_proj, euler_sample
from jaxref.cache_attention import concrete_int, traced_in_range
from jaxref.config import ExpertConfig
from jaxref.layers import LayerParams, decoder_layer, rms_norm, rope_positions, rope_tables
from jaxref.options import DEFAULT_OPTIONS, ExpertOptions
from jaxref.precision import FP32, Precision

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def check_cache_scalars(seq_len, rope_delta, *, max_seq_len: int | None = None) -> None:
    """The one check of a cache's S and M-RoPE delta where they enter (``KVCache`` / ``CacheContext``):
    integers (TypeError naming them: 100.7, -0.5, True are not truncated), 0 <= S (<= Smax when known)
    and the delta within int32 (ValueError). A traced value is checked for its dtype only."""
    s, d = concrete_int(seq_len, "seq_len"), concrete_int(rope_delta, "rope_delta")  # types first, then ranges
    if s is not None and not (0 <= s and (max_seq_len is None or s <= max_seq_len)):
        bound = "" if max_seq_len is None else f" <= Smax={max_seq_len}"
        raise ValueError(f"seq_len={s} must satisfy 0 <= seq_len{bound}")
    if d is not None and not INT32_MIN <= d <= INT32_MAX:
        raise ValueError(f"rope_delta={d} must lie in the int32 position range [{INT32_MIN}, {INT32_MAX}]")


def check_positions(seq_len, rope_delta, num_tokens: int):
    """The expert positions ``i + rope_delta + S`` (i < T) must not wrap int32. Concrete S and delta:
    ValueError; traced: returns the traced verdict (True when concrete) for the caller to poison with."""
    s, d = concrete_int(seq_len, "seq_len"), concrete_int(rope_delta, "rope_delta")
    if s is not None and d is not None:
        last = d + s + num_tokens - 1
        if last > INT32_MAX:
            raise ValueError(f"rope_delta={d} with seq_len={s} puts the last of the T={num_tokens} expert positions "
                             f"at {last} > {INT32_MAX}: int32 positions would wrap (rope_delta <= "
                             f"{INT32_MAX - s - num_tokens + 1} for this S)")
        return True
    # S >= 0 (else the attention poisons the result): only the upper end can wrap; no int32 overflow here.
    return traced_in_range(rope_delta, INT32_MIN, INT32_MAX - (num_tokens - 1) - jnp.asarray(seq_len, jnp.int32))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ExpertParams:
    """All parameters of the expert (see the module docstring for the schema)."""

    action_in: ActionInParams
    layers: LayerParams
    final_norm: jax.Array
    action_out: ActionOutParams


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class KVCache:
    """The VLM's KV cache as the expert reads it (see the module docstring)."""

    k: jax.Array
    v: jax.Array
    seq_len: jax.Array
    rope_delta: jax.Array

    @property
    def max_seq_len(self) -> int:
        """Smax: cache capacity (rows)."""
        return self.k.shape[2]

    @classmethod
    def create(cls, k, v, seq_len, rope_delta=0) -> KVCache:
        """Build a cache, checking shapes; ``seq_len`` / ``rope_delta`` become int32 scalars."""
        k, v = jnp.asarray(k), jnp.asarray(v)  # float32, or a narrower storage dtype (upcast per layer)
        if not (jnp.issubdtype(k.dtype, jnp.floating) and jnp.issubdtype(v.dtype, jnp.floating)):
            raise ValueError(f"k and v must be floating point, got {k.dtype} / {v.dtype}")
        if k.ndim != 4 or k.shape != v.shape:
            raise ValueError(f"k and v must be [L, K, Smax, H] of equal shape, got k {k.shape}, v {v.shape}")
        check_cache_scalars(seq_len, rope_delta, max_seq_len=k.shape[2])
        return cls(
            k=k, v=v, seq_len=jnp.asarray(seq_len, jnp.int32), rope_delta=jnp.asarray(rope_delta, jnp.int32)
        )


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CacheContext:
    """What the stack needs of the VLM cache besides its rows: S and the M-RoPE delta (int32 scalars).

    Pass it instead of a ``KVCache`` when a layer source supplies the cache rows (``velocity(...,
    layers=source)``); a ``KVCache`` carries the same two fields.
    """

    seq_len: jax.Array
    rope_delta: jax.Array

    @classmethod
    def create(cls, seq_len, rope_delta=0) -> CacheContext:
        check_cache_scalars(seq_len, rope_delta)
        return cls(seq_len=jnp.asarray(seq_len, jnp.int32), rope_delta=jnp.asarray(rope_delta, jnp.int32))


# A layer source: i (int32 scalar, traced inside the layer scan) -> (layer i's LayerParams,
# cache_k [K, Smax, H], cache_v [K, Smax, H]). It may slice stacked arrays (``stacked_layers``),
# unpack a compact storage format, or generate layer i from a per-layer key, so that only one layer
# exists in float32 at a time.
LayerSource = Callable[[jax.Array], tuple[LayerParams, jax.Array, jax.Array]]


def stacked_layers(layers: LayerParams, cache: KVCache) -> LayerSource:
    """The layer source of stacked ``LayerParams`` [L, ...] and a ``KVCache`` [L, K, Smax, H]."""

    def layer_at(i):
        # The barrier pins layer i's slice *before* any precision hook: otherwise XLA may rewrite
        # convert/quantize(slice(W)) as slice(convert/quantize(W)) and hoist the whole-stack cast
        # out of the loops (an fp32 or quantised copy of all L layers at once).
        return jax.lax.optimization_barrier((jax.tree.map(lambda a: a[i], layers), cache.k[i], cache.v[i]))

    return layer_at


def check_cache(cache: KVCache, cfg: ExpertConfig, *, attention: str) -> None:
    """Raise ValueError if the cache does not fit ``cfg`` / the attention formulation."""
    L, K, H = cfg.num_layers, cfg.num_kv_heads, cfg.head_dim
    if (
        cache.k.ndim != 4
        or cache.k.shape[0] != L
        or (cache.k.shape[1], cache.k.shape[3]) != (K, H)
        or cache.v.shape != cache.k.shape
    ):
        raise ValueError(
            f"cache.k / cache.v must be [L, K, Smax, H] = [{L}, {K}, Smax, {H}], "
            f"got {cache.k.shape} / {cache.v.shape}"
        )
    s = concrete_int(cache.seq_len, "cache.seq_len")
    if s is None:
        return
    if attention == "tail_slot":
        cfg.check_seq_len(s, max_seq_len=cache.max_seq_len)
    elif not 0 <= s <= cache.max_seq_len:
        raise ValueError(f"cache.seq_len={s} must satisfy 0 <= seq_len <= Smax={cache.max_seq_len}")


def run_layers(
    layer_at: LayerSource,
    x: jax.Array,
    seq_len,
    rope: tuple[jax.Array, jax.Array],
    *,
    cfg: ExpertConfig,
    options: ExpertOptions = DEFAULT_OPTIONS,
    return_hidden: bool = False,
):
    """``lax.scan`` of ``decoder_layer`` over i in [0, L), layer i's weights and cache from ``layer_at(i)``.

    ``expert_stack`` slices stacked params / cache (``stacked_layers``, which pins each slice); a caller
    may instead *generate* layer i inside the scan (e.g. random weights from a per-layer key), so only
    one layer exists at a time. A source that slices a stack should pin its slice the same way.

    Args:
      layer_at: i (int32 scalar) -> (LayerParams, cache_k [K, Smax, H], cache_v [K, Smax, H]).
      x: [T, D] residual stream (already rounded to the activation format).
      seq_len, rope: as ``decoder_layer``.
    Returns:
      [T, D] output of the last layer (and [L, T, D] every layer's output with ``return_hidden``).
    """

    def body(h, i):
        # No barrier here: a source that slices a stack pins its slice itself (``stacked_layers``),
        # and a generated layer (a gather of one base, say) may then fuse into the matmuls reading it.
        p, ck, cv = layer_at(i)
        h = decoder_layer(
            p,
            h,
            (ck, cv),
            seq_len,
            rope,
            cfg=cfg,
            options=options,
        )
        return h, (h if return_hidden else None)

    h, hidden = jax.lax.scan(body, x, jnp.arange(cfg.num_layers, dtype=jnp.int32))
    return (h, hidden) if return_hidden else h


def expert_stack(
    layers: LayerParams | LayerSource,
    final_norm: jax.Array,
    x: jax.Array,
    cache: KVCache | CacheContext,
    *,
    cfg: ExpertConfig,
    options: ExpertOptions = DEFAULT_OPTIONS,
    return_hidden: bool = False,
):
    """The decoder stack (``lax.scan`` over stacked layers and cache layers) and the final RMSNorm.

    Args:
      layers: ``LayerParams`` stacked on a leading L axis (cache rows from ``cache``), or a
        ``LayerSource`` giving layer i's weights and cache rows (``cache`` then only supplies S and
        the rope delta, e.g. a ``CacheContext``).
      final_norm: [D].
      x: [T, D] expert input embedding (rounded by ``precision.act``: the device uploads it as bf16).
      cache: ``KVCache`` with k / v [L, K, Smax, H], or a ``CacheContext`` with a layer source.
      options: attention form, ``precision`` (of the stack) and ``kv_chunk`` (``ExpertOptions``).
      return_hidden: also return every layer's output.
    Returns:
      [T, D] final-normed hidden; with ``return_hidden`` also [L, T, D] per-layer outputs (pre-norm).
    """
    if isinstance(layers, LayerParams):
        if not isinstance(cache, KVCache):
            raise TypeError(f"stacked layers need a KVCache, got cache of type {type(cache).__name__}")
        check_cache(cache, cfg, attention=options.attention)
        if layers.wq.shape[0] != cfg.num_layers:
            raise ValueError(
                f"layers are stacked for L={layers.wq.shape[0]}, cfg has num_layers={cfg.num_layers}"
            )
        layers = stacked_layers(layers, cache)
    elif not callable(layers):
        raise TypeError(f"layers must be stacked LayerParams or a layer source, got {type(layers).__name__}")
    precision = options.precision
    positions_ok = check_positions(cache.seq_len, cache.rope_delta, cfg.num_tokens)
    rope = expert_rope(cache.seq_len, cache.rope_delta, cfg=cfg, precision=precision)

    res = run_layers(
        layers,
        precision.act(x.astype(jnp.float32)),
        cache.seq_len,
        rope,
        cfg=cfg,
        options=options,
        return_hidden=return_hidden,
    )
    h, hidden = res if return_hidden else (res, None)
    out = rms_norm(h, final_norm, eps=cfg.rms_eps, precision=precision)
    if positions_ok is not True:  # traced S / delta whose positions wrap cannot raise: poison instead
        out = jnp.where(positions_ok, out, jnp.nan)
    return (out, hidden) if return_hidden else out


def expert_rope(seq_len, rope_delta, *, cfg: ExpertConfig, precision: Precision = FP32):
    """cos, sin [T, H] for the expert positions ``i + rope_delta + S``."""
    pos = rope_positions(seq_len, rope_delta, cfg.num_tokens)
    return rope_tables(pos, head_dim=cfg.head_dim, theta=cfg.rope_theta, precision=precision)


def velocity(
    params: ExpertParams,
    x_t: jax.Array,
    t,
    cache: KVCache,
    *,
    cfg: ExpertConfig,
    options: ExpertOptions = DEFAULT_OPTIONS,
    layers: LayerSource | None = None,
) -> jax.Array:
    """Flow-matching velocity ``v(x_t, t)``: action_in_proj -> decoder stack -> action_out_proj.

    Args:
      x_t: [T, A] or [B, T, A] noisy actions (B trajectories share ``cache``).
      t: flow time, scalar (or [B] with a batch).
      cache: the VLM ``KVCache`` (never batched).
      options: ``ExpertOptions`` (attention form; ``precision`` of the decoder stack,
        ``proj_precision`` of the two projections; ``kv_chunk``).
      layers: optional ``LayerSource``: layer i's weights and cache rows come from ``layers(i)``
        (``params.layers`` and the cache's rows are then unused: ``params.layers`` may be None and
        ``cache`` a ``CacheContext``).
    Returns:
      v shaped like x_t, float32.
    """
    if x_t.ndim == 3:
        t = jnp.broadcast_to(jnp.asarray(t, jnp.float32), x_t.shape[:1])
        one = functools.partial(velocity, cfg=cfg, options=options, layers=layers)
        return jax.vmap(one, in_axes=(None, 0, 0, None))(params, x_t, t, cache)
    if x_t.shape != (cfg.num_tokens, cfg.action_dim):
        raise ValueError(
            f"x_t must be [T, A] = {(cfg.num_tokens, cfg.action_dim)} (or [B, T, A]), got {x_t.shape}"
        )
    emb = action_in_proj(params.action_in, x_t, t, cfg=cfg.action_in, precision=options.proj_precision)
    h = expert_stack(
        params.layers if layers is None else layers,
        params.final_norm,
        emb,
        cache,
        cfg=cfg,
        options=options,
    )
    return action_out_proj(params.action_out, h, precision=options.proj_precision)


def sample(
    params: ExpertParams,
    cache: KVCache,
    key: jax.Array,
    *,
    cfg: ExpertConfig,
    options: ExpertOptions = DEFAULT_OPTIONS,
    num_steps: int | None = None,
    x0: jax.Array | None = None,
    layers: LayerSource | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Sample one trajectory's actions with the Euler flow-matching sampler (no guidance).

    ``x0 ~ N(0, I)`` of shape [T, A] from ``key`` (or the given ``x0``), ``num_steps`` (default
    ``cfg.num_steps`` = 10) Euler steps over ``t = linspace(0, 1, steps + 1)``.

    ``options``, ``layers``: as ``velocity``.

    Returns:
      (final action [T, A], per-step velocities [steps, T, A]), float32.
    """
    steps = cfg.num_steps if num_steps is None else num_steps
    shape = (cfg.num_tokens, cfg.action_dim)
    if x0 is None:
        x0 = jax.random.normal(key, shape, jnp.float32)
    elif x0.shape != shape:
        raise ValueError(f"x0 must be [T, A] = {shape}, got {x0.shape}")
    fn = functools.partial(
        velocity,
        params,
        cache=cache,
        cfg=cfg,
        options=options,
        layers=layers,
    )
    return euler_sample(lambda x, t: fn(x, t), x0, num_steps=steps)


def check_call(cache: KVCache | CacheContext, *, cfg: ExpertConfig, options: ExpertOptions,
               layers: LayerSource | None) -> None:
    """Every check ``velocity`` / ``sample`` make on the cache, run on the concrete values before a
    trace (inside ``jit`` S and the delta are traced: the bounds would be skipped)."""
    if layers is None:
        if not isinstance(cache, KVCache):
            raise TypeError(f"stacked layers need a KVCache, got cache of type {type(cache).__name__}")
        check_cache(cache, cfg, attention=options.attention)
    check_cache_scalars(cache.seq_len, cache.rope_delta)
    check_positions(cache.seq_len, cache.rope_delta, cfg.num_tokens)


# Jitted entry points: static knobs are the hashable config / policy objects and strings.
_velocity_jit = jax.jit(velocity, static_argnames=("cfg", "options", "layers"))
_sample_jit = jax.jit(sample, static_argnames=("cfg", "options", "num_steps", "layers"))


def velocity_jit(params, x_t, t, cache, *, cfg, options=DEFAULT_OPTIONS, layers=None):
    """``velocity`` under ``jax.jit`` (static: cfg, options, layers); the cache is checked first,
    eagerly, exactly as ``velocity`` checks it (inside the trace a traced S would skip the bounds)."""
    check_call(cache, cfg=cfg, options=options, layers=layers)
    return _velocity_jit(params, x_t, t, cache, cfg=cfg, options=options, layers=layers)


def sample_jit(params, cache, key, *, cfg, options=DEFAULT_OPTIONS, num_steps=None, x0=None, layers=None):
    """``sample`` under ``jax.jit`` (static: cfg, options, num_steps, layers); the cache is checked
    first, eagerly, exactly as ``sample`` checks it."""
    check_call(cache, cfg=cfg, options=options, layers=layers)
    return _sample_jit(params, cache, key, cfg=cfg, options=options, num_steps=num_steps, x0=x0, layers=layers)
