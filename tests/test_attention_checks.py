"""jaxref.checks: every registry entry checked against the reference, and a wrong one flagged."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest
from _attention_util import numpy_attention, random_qkv

from jaxref.attention import Flash
from jaxref.attention.registry import single_device
from jaxref.checks import check_against_reference, check_implementations


def test_check_implementations_runs_every_single_device_entry_and_all_pass():
    q, k, v = random_qkv(60, 7, 19, 8, 2, 8)
    checks = check_implementations(q, k, v, causal=True, implementations=single_device())
    assert [c.name for c in checks] == list(single_device())
    for c in checks:
        assert c.ok(2e-5) and c.out.pcc > 1 - 1e-9 and c.out.n == 7 * 8 * 8 and c.lse.n == 8 * 7, c


def test_check_implementations_skips_sharded_entries_without_a_mesh():
    q, k, v = random_qkv(61, 4, 9, 8, 2, 8)
    names = [c.name for c in check_implementations(q, k, v)]
    assert names == list(single_device())


def test_check_flags_a_wrong_scale():
    q, k, v = random_qkv(62, 4, 16, 8, 2, 16)
    wrong = check_against_reference(lambda q, k, v, causal: Flash(tile=8)(q, k, v, causal=causal, scale=0.5),
                                    q, k, v, name="wrong")
    assert not wrong.ok(1e-2) and wrong.out.pcc < 0.999
    # the same numbers as an independent numpy comparison
    out, _ = numpy_attention(q, k, v)
    assert wrong.out.max_abs > 1e-2 and np.abs(out).max() > 0


def test_check_flags_nan_output_even_though_pcc_zeroes_it():
    q, k, v = random_qkv(63, 4, 16, 8, 2, 8)

    def nan_out(q, k, v, *, causal):
        out, lse = Flash(tile=8)(q, k, v, causal=causal)
        return out.at[0, 0, 0].set(jnp.nan), lse

    c = check_against_reference(nan_out, q, k, v)
    assert c.out.nonfinite == 1 and np.isnan(c.out.max_abs) and not c.ok(1.0)
    assert np.isnan(c.out.pcc)  # fails closed: no PCC is reported next to a NaN (tt-metal's PCC alone passed it)


def test_check_rejects_wrong_shapes():
    q, k, v = random_qkv(64, 4, 16, 8, 2, 8)
    with pytest.raises(ValueError, match="returned out"):
        check_against_reference(lambda q, k, v, causal: (q[:2], jnp.zeros((8, 4))), q, k, v, name="bad")


def test_configure_resizes_the_registry_configs():
    q, k, v = random_qkv(65, 4, 33, 8, 2, 8)
    seen = []

    def configure(impl):
        cfg = impl.config
        cfg = dataclasses.replace(cfg, tile=11) if hasattr(cfg, "tile") else cfg
        seen.append(getattr(cfg, "tile", None))
        return cfg

    checks = check_implementations(q, k, v, implementations=single_device(), configure=configure)
    assert all(c.ok(2e-5) for c in checks) and seen == [None, 11, 11, 11]
