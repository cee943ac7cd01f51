"""Random expert models for the tests and the report: small, full-size within a small machine's memory,
and generated per layer for precision studies.

* ``random_setup`` / ``tiny_setup`` (cached): (cfg, params, cache, x) of a model (default the tiny preset)
  with garbage in the unused cache rows.
* ``packed_random_model``: 64 layers of fp32 weights are ~9.7 GB and the fp32 cache another ~2.4 GB;
  here the random weights and cache are rounded to bf16 (the dtype of the real checkpoint and of a
  bf16 VLM's cache) and held as 16-bit patterns (~5.6 GB at ``alpamayo_tt``); layer i is unpacked to
  float32 inside the layer scan (``jaxref.expert.run_layers``), so every operation is float32 and one
  layer exists in float32 at a time.
* ``LayerwiseBf16Model``: bf16-valued weights and VLM cache rows generated from a key *inside* the
  layer scan (``jaxref.expert.expert_stack``'s layer source), so only one layer's weights exist at a
  time, with jitted layer / stack functions under any ``Precision`` policy.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jaxref.action import action_in_proj, action_out_proj
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, expert_rope, expert_stack, run_layers
from jaxref.layers import decoder_layer, rms_norm
from jaxref.numerics import round_bf16
from jaxref.numerics.formats import CACHE_GARBAGE
from jaxref.options import ExpertOptions
from jaxref.precision import Precision
from jaxref.weights import init_cache, init_cache_layer, init_layer_params, init_params


def random_setup(
    seed: int = 0,
    *,
    seq_len: int = 100,
    max_seq_len: int = 256,
    rope_delta: int = 5,
    fill: float = CACHE_GARBAGE,
    cfg: ExpertConfig | None = None,
):
    """(cfg, params, cache, x [T, D]) for ``cfg`` (default the tiny preset): random params, a cache of
    ``max_seq_len`` rows with rows [0, S) valid and garbage ``fill`` in rows [S, Smax), a random input."""
    cfg = cfg or ExpertConfig.tiny()
    kp, kc, kx = jax.random.split(jax.random.key(seed), 3)
    params = init_params(kp, cfg)
    cache = init_cache(kc, cfg, seq_len, max_seq_len=max_seq_len, rope_delta=rope_delta, fill=fill)
    x = jax.random.normal(kx, (cfg.num_tokens, cfg.hidden), jnp.float32)
    return cfg, params, cache, x


# The tests' shared copy (jax arrays are immutable: sharing them between tests is safe); the report
# calls ``random_setup`` so that a wide model is not kept alive.
tiny_setup = functools.lru_cache(maxsize=16)(random_setup)


def pack_bf16(a):
    """float array -> its bf16 rounding as uint16 bit patterns (same shape)."""
    return jax.lax.bitcast_convert_type(a.astype(jnp.bfloat16), jnp.uint16)


def unpack_bf16(a):
    """uint16 bf16 bit patterns -> float32 (same shape)."""
    return jax.lax.bitcast_convert_type(a, jnp.bfloat16).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len"))
def init_packed_layers(k_layers, k_cache, *, cfg: ExpertConfig, seq_len: int):
    """Per-layer random weights and cache rows [L, ...], rounded to bf16 and stored as uint16 bit patterns.

    uint16, not bf16: XLA's CPU backend upcasts bf16 dynamic-slices by converting the *whole*
    stacked operand to float32 up front, which would double the memory this exists to save.
    """

    def one(keys):
        p = init_layer_params(keys[0], cfg)
        return jax.tree.map(pack_bf16, (p, init_cache_layer(keys[1], cfg, seq_len)))

    keys = jnp.stack([jax.random.split(k_layers, cfg.num_layers), jax.random.split(k_cache, cfg.num_layers)], 1)
    return jax.lax.map(one, keys)


def packed_random_model(key, cfg: ExpertConfig, seq_len: int, rope_delta: int):
    """(state, velocity(state, x_t [T, A], t) -> [T, A]); ``state`` is a jit argument, never baked in.

    state = (small float32 params: action projections and final norm, packed layers + cache [L, K, S, H]).
    """
    k_p, k_layers, k_cache = jax.random.split(key, 3)
    small = dataclasses.replace(init_params(k_p, dataclasses.replace(cfg, num_layers=1)), layers=None)
    rope = expert_rope(seq_len, rope_delta, cfg=cfg)
    state = (small, init_packed_layers(k_layers, k_cache, cfg=cfg, seq_len=seq_len))

    def vfn(st, x_t, t):
        def layer_at(i):  # layer i's weights [..] and cache rows [K, S, H], unpacked inside the scan
            # pinned before the unpack: XLA would otherwise hoist the unpack of the whole stack
            p, (ck, cv) = jax.tree.map(unpack_bf16, jax.lax.optimization_barrier(jax.tree.map(lambda a: a[i], st[1])))
            return p, ck, cv

        emb = action_in_proj(st[0].action_in, x_t, t, cfg=cfg.action_in)
        h = run_layers(layer_at, emb, seq_len, rope, cfg=cfg)
        return action_out_proj(st[0].action_out, rms_norm(h, st[0].final_norm, eps=cfg.rms_eps))

    return state, vfn


def attention_for(policy: Precision) -> str:
    """The golden attends exactly over S rows; device policies use the device's tail-slot form + mask."""
    return "exact" if policy.is_exact else "tail_slot"


@dataclasses.dataclass(frozen=True)
class LayerwiseBf16Model:
    """Random model at ``cfg`` shapes: everything derives from ``seed`` (layer i from fold_in(i)).

    All weights and VLM cache rows are bf16-valued (as in a bf16 checkpoint / a bf16 VLM cache), so
    the fp32 golden and the bf16 / bfp8-weight policies see the same values and differ only in where
    they round. The cache has Smax = ``cfg.max_seq_len`` rows, ``fill`` in rows [S, Smax).
    """

    cfg: ExpertConfig
    seq_len: int
    seed: int = 0
    fill: float = CACHE_GARBAGE  # garbage in cache rows [S, Smax - T), as in the port's tests

    def __post_init__(self):
        self.cfg.check_seq_len(self.seq_len)

    def keys(self):
        """Four keys: layers, cache, projections, inputs."""
        return jax.random.split(jax.random.PRNGKey(self.seed), 4)

    def layer_at(self, i):
        """Layer i's bf16-valued weights and cache rows k, v [K, Smax, H] (generated, not stored)."""
        k_layers, k_cache, _, _ = self.keys()
        params = jax.tree.map(round_bf16, init_layer_params(jax.random.fold_in(k_layers, i), self.cfg))
        ck, cv = init_cache_layer(jax.random.fold_in(k_cache, i), self.cfg, self.seq_len,
                                  max_seq_len=self.cfg.max_seq_len, fill=self.fill)
        return params, round_bf16(ck), round_bf16(cv)

    @functools.cached_property
    def projections(self):
        """bf16-valued (action_in, final_norm, action_out) params (init at L = 1 keeps it cheap)."""
        _, _, k_proj, _ = self.keys()
        p = init_params(k_proj, dataclasses.replace(self.cfg, num_layers=1))
        return jax.tree.map(round_bf16, (p.action_in, p.final_norm, p.action_out))

    def embedding(self, t: float = 0.3):
        """action_in_proj of a random noisy action at flow time ``t``: [T, D], host fp32 (as the port)."""
        x_t = jax.random.normal(self.keys()[3], (self.cfg.num_tokens, self.cfg.action_dim), jnp.float32)
        return action_in_proj(self.projections[0], x_t, t, cfg=self.cfg.action_in)

    def layer_fn(self, policy: Precision):
        """jit: (layer index, fp32 input [T, D]) -> that layer's output [T, D] under ``policy``."""
        cfg = self.cfg

        @jax.jit
        def f(i, x):
            params, ck, cv = self.layer_at(i)
            rope = expert_rope(self.seq_len, 0, cfg=cfg, precision=policy)
            return decoder_layer(params, policy.act(x), (ck, cv), self.seq_len, rope, cfg=cfg,
                                 options=ExpertOptions(attention=attention_for(policy), precision=policy))

        return f

    def stack_fn(self, policy: Precision):
        """jit: emb [T, D] -> (final-normed hidden [T, D], velocity [T, A], per-layer outputs [L, T, D]);
        the velocity's action_out_proj runs on the host in fp32."""
        cfg = self.cfg
        _, final_norm, action_out = self.projections

        @jax.jit
        def f(emb):
            out, hidden = expert_stack(self.layer_at, final_norm, emb, CacheContext.create(self.seq_len), cfg=cfg,
                                       options=ExpertOptions(attention=attention_for(policy), precision=policy),
                                       return_hidden=True)
            return out, action_out_proj(action_out, out, precision=Precision.fp32()), hidden

        return f
