"""The emulated ``linear``: its bf16-operand dot and rolled weights (``emulation_types.Rolled``).

Oracle: float64 numpy matmuls of the same values (``np.roll`` for the rolled weight), written here.
The emulation's float32 sums may differ from the oracle by float32 round-off only; an output rounded
to bf16 may then sit one bf16 ulp away where the exact sum lies near a rounding boundary.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from device.emulation import Emulation
from device.emulation_types import Layout, Rolled, Tensor
from device.parity_model import as_bf16

M, K, N = 64, 96, 160  # K, N: multiples of 32 (tiles) and 16 (bfp blocks)


def _bf16_valued(a):
    return np.asarray(jnp.asarray(a, jnp.float32).astype(jnp.bfloat16).astype(jnp.float32))


@pytest.fixture
def operands():
    rng = np.random.default_rng(0)
    x = _bf16_valued(rng.standard_normal((1, 1, M, K)))
    w = _bf16_valued(rng.standard_normal((K, N)) * 0.1)
    return x, w


def _sum_bound(x, w):
    """float32 round-off bound of every output: K ulps of the largest partial sum |x| @ |w| (loose)."""
    return K * 2.0**-23 * (np.abs(x.astype(np.float64)) @ np.abs(w.astype(np.float64)))


def test_rolled_values_are_the_rolled_base(operands):
    _, w = operands
    r = Rolled(jnp.asarray(as_bf16(w)), jnp.int32(5), jnp.int32(48))
    np.testing.assert_array_equal(np.asarray(r()), np.roll(np.roll(w, 5, axis=0), 48, axis=1))


@pytest.mark.parametrize("rows,cols", [(0, 0), (5, 48), (95, 144)])
def test_linear_of_a_rolled_weight_is_the_matmul_of_its_values(operands, rows, cols):
    x, w = operands
    ns = Emulation()
    dev = ns.open_device(0)
    a = Tensor(x, ns.bfloat16, Layout.TILE, dev)
    rolled = ns.generated_tensor(dev, Rolled(jnp.asarray(as_bf16(w)), jnp.int32(rows), jnp.int32(cols)), (K, N),
                                 ns.bfloat8_b)
    plain = Tensor(np.roll(np.roll(w, rows, axis=0), cols, axis=1), ns.bfloat8_b, Layout.TILE, dev)
    exact = x.astype(np.float64) @ np.roll(np.roll(w, rows, axis=0), cols, axis=1).astype(np.float64)
    for b in (rolled, plain):
        y = np.asarray(ns.linear(a, b, dtype=ns.float32).value, np.float64)  # float32 out: the sums themselves
        assert np.all(np.abs(y - exact) <= _sum_bound(x, np.roll(np.roll(w, rows, 0), cols, 1)))
        y16 = np.asarray(ns.linear(a, b).value, np.float64)  # bf16 out: one ulp at most from rounding the exact sum
        ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(exact), 1e-30))) - 7)
        assert np.all(np.abs(y16 - exact) <= ulp)


def test_float32_operands_take_the_float32_dot():
    """Values bf16 cannot hold (rounding off, or a float32 buffer) must not be read as bf16."""
    x = np.full((1, 1, M, K), 1.0 + 2.0**-12, np.float32)  # bf16 would round it to 1.0
    eye = np.eye(K, N, dtype=np.float32)
    for ns, dt in ((Emulation(rounding=False), "bfloat16"), (Emulation(), "float32")):
        dev = ns.open_device(0)
        a = Tensor(x, getattr(ns, dt), Layout.TILE, dev)
        y = np.asarray(ns.linear(a, Tensor(eye, getattr(ns, dt), Layout.TILE, dev), dtype=ns.float32).value)
        np.testing.assert_array_equal(y[..., :K], x)


def test_rolled_rejects_what_would_break_it(operands):
    _, w = operands
    base = jnp.asarray(as_bf16(w))
    with pytest.raises(ValueError, match="rows must be an int32 scalar"):
        Rolled(base, 3, jnp.int32(0))
    with pytest.raises(ValueError, match="base must be a float32 or bfloat16 array of rank >= 2"):
        Rolled(base.astype(jnp.float16), jnp.int32(0), jnp.int32(0))
    with pytest.raises(ValueError, match="not bf16-valued"):
        as_bf16(w + np.float32(2.0**-20), what="w")
