"""Shared helpers of the device-graph tests: a bf16-valued random model and per-layer parity."""

from __future__ import annotations

import dataclasses
import functools

import jax
import numpy as np

from costmodel.blackhole.port import Port
from device.emulation import Emulation
from device.graph import TTExpert
from device.host import model_from_params
from jaxref.config import ExpertConfig
from jaxref.expert import expert_rope
from jaxref.layers import decoder_layer
from jaxref.numerics import compare, round_bf16
from jaxref.weights import init_cache, init_params

GARBAGE = 7.0


@dataclasses.dataclass
class Model:
    """bf16-valued random params and cache (garbage in rows [S, Smax)), and the fp32 golden's
    per-layer (input, output) pairs; inputs bf16-valued (the device uploads them as bf16)."""

    cfg: ExpertConfig
    seq_len: int
    params: object
    cache: object
    golden: list

    @classmethod
    def build(cls, cfg: ExpertConfig, seq_len: int, seed: int = 0, std: float = 0.02) -> Model:
        kp, kc, kx = jax.random.split(jax.random.PRNGKey(seed), 3)
        params = jax.tree.map(round_bf16, init_params(kp, cfg, std=std))
        cache = init_cache(kc, cfg, seq_len, max_seq_len=cfg.max_seq_len, fill=GARBAGE)
        cache = dataclasses.replace(cache, k=round_bf16(cache.k), v=round_bf16(cache.v))
        rope = expert_rope(seq_len, 0, cfg=cfg)
        x = round_bf16(jax.random.normal(kx, (cfg.num_tokens, cfg.hidden)))
        golden = []
        for i in range(cfg.num_layers):
            layer = jax.tree.map(lambda a, i=i: a[i], params.layers)
            y = decoder_layer(layer, x, (cache.k[i], cache.v[i]), seq_len, rope, cfg=cfg)
            golden.append((np.asarray(x), np.asarray(y)))
            x = round_bf16(y)
        return cls(cfg, seq_len, params, cache, golden)

    @functools.cached_property
    def device_arrays(self):
        """(per-layer device arrays, final-norm gamma), prepared once."""
        return model_from_params(self.params, self.cfg)

    def expert(self, port: Port | None = None, *, rounding: bool = True, layers=None, ns=None):
        """(TTExpert on a fresh emulation with the context set, its device caches)."""
        ns = Emulation(rounding=rounding) if ns is None else ns
        dev_layers, final_norm = self.device_arrays
        ex = TTExpert(ns, ns.open_device(0), dev_layers if layers is None else layers, final_norm, cfg=self.cfg,
                      port=port)
        caches = [ex.upload_cache(np.asarray(self.cache.k[i]), np.asarray(self.cache.v[i]))
                  for i in range(self.cfg.num_layers)]
        ex.set_context(self.seq_len)
        return ex, caches

    def layer_errors(self, ex, caches):
        """Per-layer ``Comparison`` of the graph against the fp32 golden, each layer fed the golden input."""
        return [compare(y, ex.run_layer(i, x, caches)) for i, (x, y) in enumerate(self.golden)]
