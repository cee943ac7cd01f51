"""An HF-format safetensors checkpoint read one layer at a time (``device.parity --checkpoint``).

``CheckpointStream(path, cfg)`` never holds more than one decoder layer's tensors: the golden reads
layer i inside its layer scan (a host callback, ``layer_source``), the emulation's weight buffers are
generated from the file on every read (``emulation_layers``), a chip's are uploaded one layer after
the other (``host_layer``). Host memory is then flat in the number of layers. ``reads`` counts the
tensors materialised per layer (what the tests check).

Each tensor is copied out of a ``safetensors.safe_open`` handle that is closed straight after: the
handle maps the whole file, and every page a read touches stays resident in the process (RssFile)
until the mapping goes, so one handle kept for the run grew the resident size by the file's size.

``nonfinite()`` scans the file once, one tensor at a time, and counts NaN / Inf values per key, so
a broken checkpoint is refused before any comparison.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterator, Mapping

import jax
import jax.numpy as jnp
import numpy as np

from device.host import (
    DTYPE_ATTR,
    final_norm_from_hf,
    host_tensor,
    layer_formats,
    layer_from_hf,
    params_from_device,
)
from jaxref.config import ExpertConfig
from jaxref.param_table import LAYER_PARAMS, device_names, device_shapes
from jaxref.weights import from_hf_state_dict


class _Keys(Mapping):
    """A read-on-access view of the file's tensors (``key_map``: the key asked -> the key read)."""

    def __init__(self, stream: CheckpointStream, key_map=lambda k: k):
        self.stream, self.key_map = stream, key_map

    def __getitem__(self, key):
        k = self.key_map(key)
        if k not in self.stream.keys:
            raise KeyError(key)
        return self.stream.tensor(k)

    def __contains__(self, key):
        return self.key_map(key) in self.stream.keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.stream.keys)

    def __len__(self):
        return len(self.stream.keys)


class CheckpointStream:
    """One decoder layer at a time from ``path`` (see the module docstring)."""

    def __init__(self, path: str, cfg: ExpertConfig, *, expert_prefix: str = ""):
        self.path, self.cfg, self.prefix = str(path), cfg, expert_prefix
        with self._open() as f:
            self.keys = frozenset(f.keys())
        self.reads: collections.Counter[int | None] = collections.Counter()  # tensors read, by layer
        self._last: tuple[int, dict[str, np.ndarray]] | None = None
        self._lock = threading.Lock()  # two threads read layers (the parity script's golden runs in its own)

    def _layer_of(self, key: str) -> int | None:
        rest = key.removeprefix(self.prefix)
        if rest.startswith("layers."):
            return int(rest.split(".")[1])
        return None

    def _open(self):
        from safetensors import safe_open

        return safe_open(self.path, framework="numpy")

    def _read(self, key: str) -> np.ndarray:
        """Tensor ``key`` as float32, copied out of a mapping of the file that is gone on return (see
        the module docstring)."""
        with self._open() as f:
            return np.asarray(f.get_tensor(key), np.float32)  # safetensors' numpy arrays are copies

    def tensor(self, key: str) -> np.ndarray:
        """Tensor ``key`` of the file, float32 in HF's shape (counted in ``reads``)."""
        self.reads[self._layer_of(key)] += 1
        return self._read(key)

    def nonfinite(self) -> dict[str, int]:
        """{key: NaN / Inf count} of every tensor holding one (one tensor in memory at a time)."""
        out = {}
        for k in sorted(self.keys):
            n = int(np.sum(~np.isfinite(self._read(k))))
            if n:
                out[k] = n
        return out

    # ---- per layer ------------------------------------------------------------------------
    def host_layer(self, i: int) -> dict[str, np.ndarray]:
        """Layer i's device arrays (float32, device layout), read from the file (the last layer read
        is kept: a layer's buffers are read one after the other). Thread-safe: the arrays returned are
        layer i's even when another thread reads another layer meanwhile (numpy only under the lock)."""
        with self._lock:
            if self._last is None or self._last[0] != i:
                self._last = None  # drop the previous layer before reading the next one
                keys = {f"{self.prefix}layers.{i}.{s.hf_suffix}" for s in LAYER_PARAMS}
                self._last = (i, layer_from_hf({k: self.tensor(k) for k in keys}, i, self.cfg,
                                               expert_prefix=self.prefix))
            return self._last[1]

    def rest(self):
        """``ExpertParams`` with ``layers=None``: action projections and final norm (layer 0 read once
        to satisfy the loader's geometry check, then dropped)."""
        one = dataclasses.replace(self.cfg, num_layers=1)
        params = from_hf_state_dict(_Keys(self), one, expert_prefix=self.prefix, strict=False)
        return dataclasses.replace(params, layers=None)

    def final_norm(self) -> np.ndarray:
        return final_norm_from_hf(_Keys(self), expert_prefix=self.prefix)

    def layer_source(self, cache_layer):
        """The golden's ``LayerSource``: traced i -> (LayerParams read from the file by a host
        callback, cache_k, cache_v = ``cache_layer(i)``)."""
        cfg = self.cfg
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, jnp.float32),
                              params_from_device({n: np.zeros(device_shapes(cfg)[n], np.float32) for n in device_names()},
                                                 cfg))

        def read(i):
            # numpy only: a JAX op inside the callback can deadlock the CPU client (seen: the parity
            # loop's eager layer read hung in futex waits)
            p = params_from_device(self.host_layer(int(i)), cfg, xp=np)
            return jax.tree.map(lambda a: np.asarray(a, np.float32), p)

        def layer_at(i):
            ck, cv = cache_layer(i)
            return jax.pure_callback(read, shapes, i), ck, cv

        return layer_at

    def emulation_layers(self, ns, device, *, weights: str) -> list[dict]:
        """Generated emulation weight buffers of every layer: read from the file and rounded to the
        device format on every read (``host_tensor``'s rounding: ``jaxref.precision.cast``)."""
        fmts = layer_formats(weights)
        shapes = device_shapes(self.cfg)

        def make(i, name):  # a closure, not a partial: device.fast_twin reads it outside its program
            return lambda: host_tensor(ns, self.host_layer(i)[name], fmts[name]).value

        return [{name: ns.generated_tensor(device, make(i, name), shapes[name], getattr(ns, DTYPE_ATTR[fmts[name]]))
                 for name in device_names()} for i in range(self.cfg.num_layers)]
