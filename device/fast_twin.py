"""The emulated decoder layer compiled once with ``jax.jit``: the fast twin of the eager emulation.

``FastTwin(ex, ns)`` is a ``layer_fn`` for ``TTExpert`` (signature ``(layer_idx, x, k_cache, v_cache)
-> x``) on the emulation backend. It traces ``TTExpert.layer`` - the same 19 ttnn calls, through a
fresh ``device.emulation.Emulation`` with the same rounding - over tensors that wrap jit tracers,
so XLA compiles the whole layer into one program, reused for every layer and every step (one
compilation per input structure: the first call on a cache without ``fill_cache`` rows and the
later ones with them). Its outputs are the eager emulation's, bit for bit (tested): the program is
compiled with the options every eager op's float32 math is compiled with
(``device.emulation.COMPILER_OPTIONS``: no excess precision, so each op's output rounding stays;
no YNNPACK fusions, whose library kernels would evaluate a fused attention differently).

Weights and caches stay in their device formats: a plain buffer passes its values; a *generated*
buffer (``Emulation.generated_tensor``) whose generator is a ``functools.partial`` of a jax function
(``device.parity_model`` builds the caches so) is generated inside the compiled program from its
arguments (the rows and the layer index), not materialised per read outside it; a rolled one
(``emulation_types.Rolled``: the random model's weights) passes its stored base and shifts, which
``linear`` reads without producing the weight; rows a ``fill_cache`` wrote are laid over a
generated buffer as in ``Tensor.value``. The new ``fill_cache`` rows come back
and are written into the caller's cache buffers, so the state after a call is the eager one's.

The twin registers as one op (``Emulation.emulated_op``): a trace captured through it replays it.
``FastTwin.many`` runs the layer on several independent inputs in one program (``jax.vmap`` over
them), the weights and the cache read or generated once for all (each input's attention reads
the cache rows no input wrote once for all too, ``Tensor.row_runs``): ``TTExpert.steps`` uses it for the
teacher-forced steps; each input's numbers are those of one call (tested against the eager steps,
bit for bit, at the tiny preset and at alpamayo_tt widths: a test, not a guarantee of XLA's).
"""

from __future__ import annotations

import copy
import functools
import hashlib

import jax
import numpy as np

from device.emulation import Emulation, compiled
from device.emulation_types import Device, Layout, Rolled, Tensor


def _identity(a):
    return a


def _is_array(a) -> bool:
    return isinstance(a, (jax.Array, np.ndarray))


def _split(t: Tensor):
    """(static description, dynamic arrays) of a buffer's values (see the module docstring)."""
    gen = t.generate
    if gen is None:
        return ("plain", t.dtype, t.shape), {"value": t.value}
    if isinstance(gen, Rolled):  # the stored base and its shifts: the weight is never produced (linear)
        kind, dyn = ("rolled",), {"args": [gen.base, gen.rows, gen.cols]}
    elif isinstance(gen, functools.partial) and not gen.keywords:
        statics = tuple(None if _is_array(a) else a for a in gen.args)
        dyn = {"args": [a for a in gen.args if _is_array(a)]}
        kind = ("partial", gen.func, statics)
    else:  # an opaque generator: read it here (still correct, only not fused)
        kind, dyn = ("opaque",), {"base": jax.numpy.asarray(gen(), jax.numpy.float32)}
    keys = tuple(t.patches)
    dyn["patches"] = [t.patches[k] for k in keys]
    return ("generated", t.dtype, t.shape, kind, keys), dyn


def _rebuild(static, dyn, device: Device, *, record_writes: bool = False) -> Tensor:
    """The traced twin of a buffer described by ``_split``; ``record_writes``: a plain buffer comes
    back as a generated one too, so the rows ``fill_cache`` writes are kept apart (``patches``)."""
    if static[0] == "plain":
        if not record_writes:
            return Tensor(dyn["value"], static[1], Layout.TILE, device)
        return Tensor(None, static[1], Layout.TILE, device, generate=functools.partial(_identity, dyn["value"]),
                      shape=static[2])
    _, dtype, shape, kind, keys = static
    if kind[0] == "partial":
        args, it = [], iter(dyn["args"])
        for s in kind[2]:
            args.append(next(it) if s is None else s)
        generate = functools.partial(kind[1], *args)
    elif kind[0] == "rolled":
        generate = Rolled(*dyn["args"])
    else:
        generate = functools.partial(_identity, dyn["base"])
    t = Tensor(None, dtype, Layout.TILE, device, generate=generate, shape=shape)
    t.patches = dict(zip(keys, dyn["patches"], strict=True))
    return t


class FastTwin:
    """``layer_fn`` running ``TTExpert.layer`` as one compiled program (see the module docstring).

    Args:
      ex: the ``TTExpert`` whose layer this is (its weights, cos / sin / mask buffers, configs).
      ns: the ``Emulation`` the graph runs on (not a recorder around it: a compiled layer issues
        no individual ttnn calls to log).
    """

    def __init__(self, ex, ns: Emulation):
        if not isinstance(ns, Emulation):
            raise TypeError(f"ns must be a device.emulation.Emulation, got {type(ns).__name__}")
        self.ex, self.ns = ex, ns
        # the options each eager op's math is compiled with (see device.emulation.COMPILER_OPTIONS)
        self._jit = compiled(self._values, static_argnums=(0,))
        self._jit_many = compiled(self._values_many, static_argnums=(0,))
        self.op = ns.emulated_op(self._call)
        self.compilations = 0
        self._mask = None  # (the mask buffer's value array, its host copy, the copy's digest)

    def __call__(self, i: int, x: Tensor, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        return self.op(i, x, k_cache, v_cache)

    def _call(self, i: int, x: Tensor, k_cache: Tensor, v_cache: Tensor) -> Tensor:
        ex = self.ex
        named = sorted(ex.weights[i].items())
        parts = [_split(t) for _, t in named] + [_split(t) for t in (x, ex.cos, ex.sin, ex.mask, k_cache, v_cache)]
        static = (tuple(n for n, _ in named), tuple(s for s, _ in parts), self._mask_digest())
        out, k_new, v_new = self._jit(static, [d for _, d in parts])
        for cache, new in ((k_cache, k_new), (v_cache, v_new)):
            for (b, start, _stop), rows in new.items():
                cache.write_rows(b, start, rows)
        return Tensor(out, x.dtype, Layout.TILE, x.device)

    def many(self, i: int, xs: list[Tensor], k_cache: Tensor, v_cache: Tensor) -> list[Tensor]:
        """Layer i on several inputs, as that many calls one after another on these caches (each
        input's ``fill_cache`` rows written before its attention reads them; the caches end as the
        last call leaves them), in one program that reads the layer's weights and cache once
        for all of them. Not an op: a trace never holds it."""
        ex = self.ex
        named = sorted(ex.weights[i].items())
        parts = [_split(t) for _, t in named] + [_split(t) for t in (ex.cos, ex.sin, ex.mask, k_cache, v_cache)]
        like = xs[0]
        static = (tuple(n for n, _ in named), tuple(s for s, _ in parts), like.dtype, self._mask_digest())
        out, k_new, v_new = self._jit_many(static, [d for _, d in parts], jax.numpy.stack([x.value for x in xs]))
        for cache, new in ((k_cache, k_new), (v_cache, v_new)):
            for (b, start, _stop), rows in new.items():
                cache.write_rows(b, start, rows[-1])
        return [Tensor(o, like.dtype, Layout.TILE, like.device) for o in out]

    def _values_many(self, static, dyn, xs):
        """Traced: ``_values`` of each input in ``xs`` [B, ..] (``jax.vmap``), the weights and the
        caches' values read once for all; per input its output and its cache rows."""
        self.compilations += 1
        names, statics, x_dtype, _ = static
        device = Device(0)
        t = [_rebuild(s, d, device) for s, d in zip(statics, dyn, strict=True)]
        # generated once, here; a rolled weight is read as it is stored (``Rolled``)
        fixed = [a if isinstance(a.generate, Rolled) else Tensor(a.value, a.dtype, Layout.TILE, device) for a in t[:-2]]
        w, (cos, sin, mask) = dict(zip(names, fixed[:len(names)], strict=True)), fixed[len(names):]
        kv = [(a.dtype, a.shape, a.value) for a in t[-2:]]
        twin = self._twin(w, cos, sin, mask)

        def one(x):
            kc, vc = (Tensor(None, dt, Layout.TILE, device, generate=functools.partial(_identity, v), shape=shape)
                      for dt, shape, v in kv)
            out = type(self.ex).layer(twin, 0, Tensor(x, x_dtype, Layout.TILE, device), kc, vc)
            return out.value, dict(kc.patches), dict(vc.patches)

        return jax.vmap(one)(xs)

    def _values(self, static, dyn):
        """Traced: the layer's output values and the cache rows its ``fill_cache`` calls wrote."""
        self.compilations += 1  # runs once per compilation (at trace time)
        names, statics, _ = static
        device = Device(0)
        n = len(statics)
        t = [_rebuild(s, d, device, record_writes=j >= n - 2) for j, (s, d) in enumerate(zip(statics, dyn, strict=True))]
        w, (x, cos, sin, mask, kc, vc) = dict(zip(names, t[:len(names)], strict=True)), t[len(names):]
        out = type(self.ex).layer(self._twin(w, cos, sin, mask), 0, x, kc, vc)
        return out.value, dict(kc.patches), dict(vc.patches)

    def _mask_digest(self) -> str:
        """A digest of the mask buffer's values, part of the compiled program's key: the SDPA reads the
        key chunks the mask leaves visible (``device.sdpa_math``), planned on these values at trace time."""
        value = self.ex.mask.value
        if self._mask is None or self._mask[0] is not value:  # rewritten (set_context): a new array
            host = np.asarray(value, np.float32)
            self._mask = (value, host, hashlib.blake2b(host.tobytes(), digest_size=16).hexdigest())
        return self._mask[2]

    def _twin(self, w: dict[str, Tensor], cos: Tensor, sin: Tensor, mask: Tensor):
        """The same graph object on traced buffers (its layer 0's weights ``w``) and an unlogged namespace
        that knows the mask's host values (the traced ``mask`` stands for them)."""
        twin = copy.copy(self.ex)
        ns = Emulation(rounding=self.ns.rounding, known_masks={mask.address: self._mask[1]})
        twin.ns, twin.weights, twin.cos, twin.sin, twin.mask = ns, [w], cos, sin, mask
        return twin
