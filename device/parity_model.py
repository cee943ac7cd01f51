"""The parity script's random model, generated per layer so the 64-layer expert fits in bounded memory.

One layer of random device-layout weights (``base``: HF init, bf16-valued, ``[in, out]`` as on the
device) and one layer of random VLM cache rows are drawn once; layer ``i`` is those arrays rolled
by layer-dependent shifts (``shifts``): rows by ``1 + 37 i`` and columns by a multiple of 16.
Rolling columns by whole 16-element blocks permutes bfloat8_b / bfloat4_b blocks (the shared
exponent runs over 16 consecutive values of a tile row), so rolling the *quantised* base gives
exactly the quantised layer: the emulation's weight of layer i is ``roll(quantised base)``, no
per-layer quantisation, and the golden's layer i is ``roll(base)`` in golden layout
(``device.host.params_from_device``). Cache rows [0, S) are rolled along the row axis (bf16 /
bfp8 blocks run along head_dim, so they stay whole); rows [S, Smax) hold the garbage fill.

The emulation's weights are never rolled: each is the quantised base stored as bf16 with layer i's
shifts (``emulation_types.Rolled``), which ``linear`` reads as it is (a @ roll(W) = roll(roll(a) @ W)).
The golden's roll is one dynamic slice of the base doubled along its last two axes (``tile2``,
stored as bf16: every format's values are bf16 values), in the orientation the golden reads
(``HF_ORIENTED``).

Memory: one layer of weights in three forms (fp32 base, the bf16 quantised base, the doubled bf16
golden base, two layers' worth) and a transient layer, instead of 64 layers in fp32 next to the
golden's and the emulation's copies (issue 16: 23.5 GB before).
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from device.emulation_types import Rolled
from device.host import DTYPE_ATTR, device_transposed, layer_formats, layer_from_params, params_from_fused
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, ExpertParams
from jaxref.numerics import round_bf16
from jaxref.param_table import LAYER_PARAMS, device_shapes
from jaxref.precision import cast
from jaxref.weights import init_cache_layer, init_layer_params, init_params_without_layers

BLOCK = 16  # bfp block length along a tile row

# Device tensors whose golden base is held in HF orientation ([out, in], the device array transposed):
# the fused Linear weights (wqkv), which the golden splits along their HF out axis into wq / wk / wv,
# from the device layout a transposing copy per layer and pass. The other Linear weights stay in
# device layout: the golden reads them whole and XLA folds their transpose into the GEMM (contracting
# dim 0); held in HF orientation they would be run by another GEMM kernel, with another summation
# order, and the golden's numbers would change.
_FUSED = collections.Counter(s.device_name for s in LAYER_PARAMS)
HF_ORIENTED = frozenset(s.device_name for s in LAYER_PARAMS if s.transpose and _FUSED[s.device_name] > 1)


def shifts(i, shape: tuple[int, ...]):
    """(row shift, column shift) of layer i (an int, or a traced int32 in the golden's scan) for a
    [.., rows, cols] array; the column shift is a multiple of 16."""
    rows, cols = max(shape[-2], 1), shape[-1]
    return (1 + 37 * i) % rows, BLOCK * ((3 + 11 * i) % max(cols // BLOCK, 1))


def roll_axis(a, shift, axis: int, *, block: int = 1):
    """``jnp.roll(a, shift, axis)`` for a shift that is a multiple of ``block`` (may be traced), as a
    gather of whole rows / ``block``-element runs: XLA's CPU backend runs that at copy speed, where
    jnp.roll with a traced shift slices a doubled array (about 3x slower on the minor axis)."""
    axis %= a.ndim
    n = a.shape[axis]
    if n % block:
        return jnp.roll(a, shift, axis=axis)
    runs = a.reshape(*a.shape[:axis], n // block, block, *a.shape[axis + 1:])
    idx = (jnp.arange(n // block) - shift // block) % (n // block)
    return jnp.take(runs, idx, axis=axis, mode="clip").reshape(a.shape)


def as_bf16(a, *, what: str = "the array") -> np.ndarray:
    """A bf16-valued float32 array stored as bf16 (exact: every weight format's values are bf16 values);
    a ValueError where storing it so would change a value."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)  # numpy: no program compiled per shape
    if np.any(bits & 0xFFFF):
        raise ValueError(f"{what} is not bf16-valued (storing it as bf16 would change it)")
    return (bits >> 16).astype(np.uint16).view(jnp.bfloat16)  # a bf16 value's bits: the float32's top half


def tile2(a) -> jax.Array:
    """A bf16-valued array [.., R, C] doubled along its last two axes ([.., 2R, 2C]) and stored as bf16,
    the form ``_roll`` reads."""
    stored = as_bf16(a, what="tile2: the array")
    return jnp.asarray(np.tile(stored, (1,) * (stored.ndim - 2) + (2, 2)))


def _roll(tiled, i, shape, *, transposed: bool = False):
    """Layer i's float32 array ``shape`` = [.., R, C] from the base doubled by ``tile2``: rows rolled by
    the row shift, then whole bfp blocks by the column shift (``shifts``), as one dynamic slice of the
    doubled base (a roll by r is the window starting at R - r), which XLA's CPU backend runs at copy
    speed (a gather per axis costs about twice that). Pinned (an optimization barrier): XLA would
    otherwise fuse the slice into every consumer (a bfp block reduce reads each element 16 times),
    where materialising the layer once costs one copy.

    ``transposed``: ``tiled`` doubles the 2-D base transposed ([C, R] -> [2C, 2R]) and the result is
    layer i's array transposed, [C, R]: the same window with its axes swapped."""
    rows, cols = shape[-2:]
    r, c = shifts(i, shape)
    start = (0,) * (len(shape) - 2) + ((rows - r) % rows, (cols - c) % cols)
    if transposed:
        if len(shape) != 2:
            raise ValueError(f"_roll: transposed needs a 2-D shape, got {shape}")
        start, shape = start[::-1], shape[::-1]
    return jax.lax.optimization_barrier(jax.lax.dynamic_slice(tiled, start, shape).astype(jnp.float32))


def _cache_at(rows, i, pad: int, fill: float, fmt: str) -> jax.Array:
    """One cache side [K, S + pad, H] in ``fmt``: rows [K, S, H] rolled by layer i's row shift, then
    ``pad`` rows of ``fill``. Not pinned as ``_roll`` is: the roll moves whole rows and the cast's
    bfp blocks run along H inside a row, so a fused gather costs the consumer nothing (pinned and
    unpinned timed the same at the port's shapes, bf16 and bfp8: issue 29's note)."""
    K, _, H = rows.shape
    filled = jnp.full((K, pad, H), fill, jnp.float32)
    return cast(jnp.concatenate([roll_axis(rows, shifts(i, rows.shape[1:])[0], 1), filled], axis=1), fmt)


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len"))
def _draw(key, *, cfg: ExpertConfig, seq_len: int):
    """(one layer's ``LayerParams``, cache rows k, v [K, S, H], ``ExpertParams`` without layers), all
    rounded to bf16, from ``key`` (cfg: one layer). One program: drawn op by op, the draws and roundings
    compiled a program per op and shape (most of the model's build time); the values are the same bits
    (``tests/test_device_parity_model.py``)."""
    k_l, k_c, k_p = jax.random.split(key, 3)
    layer = jax.tree.map(round_bf16, init_layer_params(k_l, cfg))
    k, v = init_cache_layer(k_c, cfg, seq_len, max_seq_len=seq_len)
    params = jax.tree.map(round_bf16, init_params_without_layers(k_p, cfg))
    return layer, round_bf16(k), round_bf16(v), params


@dataclasses.dataclass
class GeneratedModel:
    """Random bf16-valued weights and cache generated per layer (see the module docstring).

    Attributes:
      cfg, seq_len, fill: geometry, valid cache rows S, value of rows [S, Smax).
      base: device-layout arrays of one layer (fp32, bf16-valued), by device tensor name.
      transposed: per device tensor name, whether its HF orientation is the transpose (Linear weights).
      golden_tiled: ``base`` doubled along its last two axes (``tile2``), transposed first where
        ``HF_ORIENTED``: what the golden's layers (and ``host_layer``) are rolled from.
      cache_rows: (k, v) [K, S, H] bf16-valued random rows.
      params: ``ExpertParams`` with ``layers=None`` (action projections, final norm; bf16-valued).
    """

    cfg: ExpertConfig
    seq_len: int
    fill: float
    base: dict[str, jax.Array]
    transposed: dict[str, bool]
    golden_tiled: dict[str, jax.Array]
    cache_rows: tuple[jax.Array, jax.Array]
    params: ExpertParams

    @classmethod
    def build(cls, key: jax.Array, cfg: ExpertConfig, seq_len: int, *, fill: float) -> GeneratedModel:
        cfg.check_seq_len(seq_len)
        one = dataclasses.replace(cfg, num_layers=1)
        layer, k, v, params = _draw(key, cfg=one, seq_len=seq_len)
        base = {name: jnp.asarray(a) for name, a in layer_from_params(layer, one).items()}
        transposed = device_transposed()
        golden_tiled = {name: tile2(np.asarray(a).T if name in HF_ORIENTED else a) for name, a in base.items()}
        return cls(cfg, seq_len, fill, base, transposed, golden_tiled, (k, v), params)

    # ---- the device side ---------------------------------------------------------------------
    def host_layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i's device arrays on the host (float32, bf16-valued; ``host_tensor`` quantises them)."""
        out = {}
        for name, a in self.base.items():
            hf = name in HF_ORIENTED
            v = np.asarray(_roll(self.golden_tiled[name], i, a.shape, transposed=hf), np.float32)
            out[name] = np.ascontiguousarray(v.T) if hf else v
        return out

    def cache_layer(self, i: int, *, fmt: str = "fp32", valid_only: bool = False) -> tuple[jax.Array, jax.Array]:
        """Layer i's VLM cache (k, v) [K, Smax, H] in ``fmt``: rolled random rows, then the fill
        (``i`` may be traced). ``valid_only``: the S valid rows alone, [K, S, H] (no fill rows)."""
        pad = 0 if valid_only else self.cfg.max_seq_len - self.seq_len
        return tuple(_cache_at(a, i, pad, self.fill, fmt) for a in self.cache_rows)

    def emulation_layers(self, ns, device, *, weights: str) -> list[dict]:
        """Emulation buffers of every layer's weights: the quantised base (bf16-stored), rolled by layer
        i's shifts (``emulation_types.Rolled``: ``linear`` reads it without producing the layer)."""
        fmts = layer_formats(weights)
        shapes = device_shapes(self.cfg)
        quantised = {name: jnp.asarray(as_bf16(cast(a, fmts[name]), what=f"quantised {name}")).reshape(shapes[name])
                     for name, a in self.base.items()}
        return [{name: ns.generated_tensor(device, Rolled(q, *(jnp.int32(s) for s in shifts(i, q.shape))), shapes[name],
                                           getattr(ns, DTYPE_ATTR[fmts[name]]))
                 for name, q in quantised.items()} for i in range(self.cfg.num_layers)]

    def emulation_caches(self, ns, device, *, fmt: str) -> list[tuple]:
        """Generated emulation cache buffers [1, K, Smax, H] of every layer (fill_cache rows kept)."""
        shape = (1, self.cfg.num_kv_heads, self.cfg.max_seq_len, self.cfg.head_dim)
        gen = jax.jit(lambda rows, i, pad, fill, f: _cache_at(rows, i, pad, fill, f)[None], static_argnums=(2, 3, 4))
        pad = self.cfg.max_seq_len - self.seq_len
        return [tuple(ns.generated_tensor(device, functools.partial(gen, rows, jnp.int32(i), pad, self.fill, fmt), shape,
                                          getattr(ns, DTYPE_ATTR[fmt]))
                      for rows in self.cache_rows) for i in range(self.cfg.num_layers)]

    # ---- the golden side -----------------------------------------------------------------------
    def layer_source(self, *, valid_only: bool = False):
        """The golden's ``LayerSource``: traced i -> (LayerParams, cache_k, cache_v), generated in the scan.

        ``valid_only``: caches of the S valid rows alone ([K, S, H]), for the exact attention, which
        excludes rows >= S whatever they hold: the same math over 4600 rows instead of Smax = 8192
        (the fill rows are a device-layout artefact, read only by the tail-slot form)."""
        cfg = self.cfg

        def layer_at(i):
            fused = {}  # HF orientation: a device-layout weight's transpose is left to XLA (folded into the GEMM)
            for name, a in self.base.items():
                w = _roll(self.golden_tiled[name], i, a.shape, transposed=name in HF_ORIENTED)
                fused[name] = w.T if self.transposed[name] and name not in HF_ORIENTED else w
            ck, cv = self.cache_layer(i, valid_only=valid_only)
            return params_from_fused(fused, cfg), ck, cv

        return layer_at

    def context(self) -> CacheContext:
        return CacheContext.create(self.seq_len)

    def golden_layer(self, i: int):
        """(LayerParams, cache_k, cache_v) of layer i for eager golden calls (concrete i)."""
        p, k, v = self.layer_source()(jnp.asarray(i, jnp.int32))
        return p, np.asarray(k), np.asarray(v)
