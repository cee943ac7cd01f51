"""``Tensor.row_runs``: runs of a buffer's rows, read without assembling the whole buffer.

Oracle: the buffer's values assembled by hand in numpy (generated rows, then each ``fill_cache``
block written over them), sliced; the runs must equal those slices bit for bit, for plain,
generated (with blocks inside, across and outside the runs, one batch entry or two) and reshaped
(view) buffers.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from device.emulation import Emulation
from device.emulation_types import Layout, Tensor

K, S, H = 2, 96, 16
RUNS = [(0, 40), (40, 44), (64, 96), (44, 64), (0, 96)]


def _identity(a):
    return a


@pytest.mark.parametrize("batch", [1, 2])
def test_runs_of_a_generated_buffer_with_written_blocks(batch):
    rng = np.random.default_rng(batch)
    base = rng.standard_normal((batch, K, S, H)).astype(np.float32)
    t = Tensor(None, Emulation.bfloat16, Layout.TILE, generate=functools.partial(_identity, jnp.asarray(base)),
               shape=base.shape)
    want = base.copy()
    for b, start, n in [(0, 32, 8), (batch - 1, 64, 32), (0, 0, 4)]:
        rows = rng.standard_normal((K, n, H)).astype(np.float32)
        t.write_rows(b, start, rows)
        want[b, :, start:start + n] = rows
    got = t.row_runs(RUNS)
    for (lo, hi), r in zip(RUNS, got, strict=True):
        np.testing.assert_array_equal(np.asarray(r), want[:, :, lo:hi])
    np.testing.assert_array_equal(np.asarray(t.value), want)


@pytest.mark.parametrize("batch", [1, 2])
def test_overlapping_blocks_are_laid_in_write_order(batch):
    """A later ``fill_cache`` write wins where two blocks overlap, whatever their row order."""
    rng = np.random.default_rng(7)
    base = rng.standard_normal((batch, K, S, H)).astype(np.float32)
    t = Tensor(None, Emulation.bfloat16, Layout.TILE, generate=functools.partial(_identity, jnp.asarray(base)),
               shape=base.shape)
    want = base.copy()
    for start, n in [(16, 48), (0, 32)]:  # the second block starts first and overlaps the first
        rows = rng.standard_normal((K, n, H)).astype(np.float32)
        t.write_rows(0, start, rows)
        want[0, :, start:start + n] = rows
    for (lo, hi), r in zip(RUNS, t.row_runs(RUNS), strict=True):
        np.testing.assert_array_equal(np.asarray(r), want[:, :, lo:hi])
    np.testing.assert_array_equal(np.asarray(t.value), want)


def test_runs_of_plain_and_reshaped_buffers():
    rng = np.random.default_rng(3)
    ns = Emulation(rounding=False)
    dev = ns.open_device(0)
    base = rng.standard_normal((1, K, S, H)).astype(np.float32)
    gen = ns.generated_tensor(dev, functools.partial(_identity, jnp.asarray(base)), base.shape, ns.bfloat16)
    rows = rng.standard_normal((K, 32, H)).astype(np.float32)
    gen.write_rows(0, 64, rows)
    want = base.copy()
    want[0, :, 64:] = rows
    plain = Tensor(want, ns.bfloat16, Layout.TILE, dev)
    for t in (plain, gen):
        view = ns.reshape(t, (K, 1, S, H))  # the decode SDPA's view of a cache
        for (lo, hi), r in zip(RUNS, view.row_runs(RUNS), strict=True):
            np.testing.assert_array_equal(np.asarray(r), want.reshape(K, 1, S, H)[:, :, lo:hi])
