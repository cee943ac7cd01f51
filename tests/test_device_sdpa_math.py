"""``device.sdpa_math``: attention over the key chunks a mask leaves visible, against the whole span.

Oracle: softmax attention over every key row in float64 numpy (with the mask added), written here;
the span's output must agree to float32 round-off where the skip is exact, and be NaN (fail closed)
where a skipped row could change the result (non-finite rows, scores that overwhelm the mask).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from device.sdpa_math import MIN_GAP, KeySpan, attend, attend_over_span, key_span
from jaxref.cache_attention import tail_slot_mask

B, NKV, G, DH, SMAX, T, S, CHUNK = 2, 2, 2, 32, 512, 32, 200, 64


def _oracle(q, k, v, mask, scale):
    q, k, v, m = (np.asarray(a, np.float64) for a in (q, k, v, mask))
    qg = q.reshape(B, NKV, G, -1, DH)
    sc = np.einsum("bkgqd,bksd->bkgqs", qg, k) * scale + np.broadcast_to(m, (B, NKV * G, qg.shape[3], SMAX)).reshape(
        B, NKV, G, -1, SMAX)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bkgqs,bksd->bkgqd", p, v).reshape(B, NKV * G, -1, DH)


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, NKV * G, 1, DH)).astype(np.float32)
    k = rng.standard_normal((B, NKV, SMAX, DH)).astype(np.float32)
    v = rng.standard_normal((B, NKV, SMAX, DH)).astype(np.float32)
    k[:, :, S:SMAX - T] = 7.0  # the parity model's garbage fill
    v[:, :, S:SMAX - T] = 7.0
    mask = np.asarray(tail_slot_mask(S, max_seq_len=SMAX, num_tokens=T), np.float32)[None, None, None, :]
    return q, k, v, mask


def test_key_span_of_the_tail_slot_mask():
    _, _, _, mask = _inputs()
    span = key_span(np.broadcast_to(mask, (1, 1, 8, SMAX)), chunk=CHUNK)
    # chunks [0, 256) hold the 200 valid rows, [448, 512) the T own rows; [256, 448) are all -1e9
    assert span == KeySpan(runs=((0, 256), (448, 512)), hidden_max=float(np.float32(-1e9)))
    assert span.hidden(SMAX) == ((256, 448),)
    # too weak a gap, a chunk that does not divide the keys, a non-finite mask: read everything
    assert key_span(np.where(mask < 0, -MIN_GAP / 2, 0.0), chunk=CHUNK) is None
    assert key_span(mask, chunk=96) is None
    assert key_span(np.where(mask < 0, -np.inf, 0.0), chunk=CHUNK) is None
    assert key_span(np.zeros((1, SMAX), np.float32), chunk=CHUNK) is None


@pytest.mark.parametrize("bf16", [False, True])
def test_span_equals_the_whole_span_attention(bf16):
    """``bf16``: q and k rounded to bf16 first (as the device's are), their scores a bf16 dot."""
    q, k, v, mask = _inputs()
    if bf16:
        q, k = (np.asarray(jnp.asarray(a).astype(jnp.bfloat16).astype(jnp.float32)) for a in (q, k))
    span = key_span(mask, chunk=CHUNK)
    want = _oracle(q, k, v, mask, DH**-0.5)
    got = np.asarray(attend_over_span(jnp.asarray(q), k, v, mask, scale=DH**-0.5, span=span, bf16=bf16))
    dense = np.asarray(attend(jnp.asarray(q), k, v, mask, scale=DH**-0.5, bf16=bf16))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    np.testing.assert_allclose(got, dense, rtol=0, atol=2e-6)


@pytest.mark.parametrize("bad", ["nan_v", "inf_k", "nan_k", "huge_k", "huge_q"])
def test_a_skipped_row_that_could_matter_poisons_the_output(bad):
    """Each case changes a hidden row (or the query) so that skipping it is no longer provably exact;
    the dense attention over the whole span is then non-finite or far from the span's: NaN is the
    only honest answer for the span."""
    q, k, v, mask = _inputs(1)
    row = 300  # inside the hidden chunks [256, 448)
    if bad == "nan_v":
        v[1, 0, row, 3] = np.nan
    elif bad == "inf_k":
        k[0, 1, row, 0] = np.inf
    elif bad == "nan_k":
        k[0, 0, row, 5] = np.nan
    elif bad == "huge_k":  # scores of about 4e9 for the first q head: the -1e9 mask no longer hides the row
        k[0, 0, row, :] = 1e9 * np.sign(q[0, 0, 0, :])
    else:  # every score far from 0: the hidden fill rows score as the visible ones (no gap left)
        q[...] = 1e8
    span = key_span(mask, chunk=CHUNK)
    got = np.asarray(attend_over_span(jnp.asarray(q), k, v, mask, scale=DH**-0.5, span=span))
    assert np.all(np.isnan(got))
    if bad == "huge_k":  # the whole span really is different there: the skip would have hidden it
        dense = np.asarray(attend(jnp.asarray(q), k, v, mask, scale=DH**-0.5))
        assert np.isfinite(dense).all() and np.abs(dense - _oracle(*_inputs(1)[:3], mask, DH**-0.5)).max() > 1.0
        np.testing.assert_allclose(dense[0, 0, 0], 7.0, rtol=1e-5)  # the fill row's V took over that head


def test_a_non_finite_visible_row_reaches_the_output_as_in_the_whole_span():
    q, k, v, mask = _inputs(2)
    v[0, 1, 5, 0] = np.nan  # a visible row: both forms read it
    span = key_span(mask, chunk=CHUNK)
    got = np.asarray(attend_over_span(jnp.asarray(q), k, v, mask, scale=DH**-0.5, span=span))
    dense = np.asarray(attend(jnp.asarray(q), k, v, mask, scale=DH**-0.5))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(dense))
    assert np.isnan(got).any() and not np.isnan(got).all()


def test_emulated_decode_sdpa_reads_the_span_and_fails_closed():
    """Through the emulation's ``scaled_dot_product_attention_decode`` with the graph's bfloat4_b mask:
    the output is the whole-span oracle's (to bf16 output rounding); a NaN in one hidden V row poisons
    every output, where the whole span turns only the entries that read it into NaN (the skip must not
    make the fault vanish; poisoning everything is the conservative answer)."""
    from device.emulation import Emulation

    ns = Emulation()
    dev = ns.open_device(0)
    q, k, v, mask = _inputs(3)
    nh = NKV * G  # decode view: users = kv heads of one batch entry, q rows = its G heads
    cfg = ns.SDPAProgramConfig(compute_with_storage_grid_size=ns.CoreCoord(8, 8), q_chunk_size=32,
                               k_chunk_size=CHUNK)

    def run(vv):
        put = lambda a, dt: ns.to_device(ns.Tensor(a, dt), dev)
        qd = put(q[0].reshape(1, NKV, G, DH), ns.bfloat16)  # [1, b = NKV users, G rows, DH]
        kd, vd = (put(a[0][:, None], ns.bfloat16) for a in (k, vv))  # [NKV, 1, SMAX, DH]
        md = put(np.broadcast_to(mask, (1, 1, G, SMAX)).copy(), ns.bfloat4_b)
        out = ns.transformer.scaled_dot_product_attention_decode(qd, kd, vd, is_causal=False, attn_mask=md,
                                                                 scale=DH**-0.5, program_config=cfg)
        return np.asarray(out.value), kd, vd, qd, md

    got, kd, vd, qd, md = run(v)
    want = _oracle(np.asarray(qd.value).reshape(1, nh, 1, DH).repeat(B, 0), np.asarray(kd.value)[:, 0][None].repeat(B, 0),
                   np.asarray(vd.value)[:, 0][None].repeat(B, 0), np.asarray(md.value)[:, :, :1], DH**-0.5)[0]
    np.testing.assert_allclose(got.reshape(nh, DH), want.reshape(nh, DH), rtol=2**-7, atol=1e-6)
    bad = v.copy()
    bad[0, 1, 300, 0] = np.nan  # a hidden row of user 1
    got_bad, kd, vd, qd, md = run(bad)
    assert np.isnan(got_bad).all()
    whole = np.asarray(attend(jnp.asarray(qd.value).transpose(1, 2, 0, 3), kd.value, vd.value,
                              jnp.asarray(md.value).transpose(0, 2, 1, 3), scale=DH**-0.5))  # [users, G, 1, DH]
    assert np.isnan(whole[1, ..., 0]).all() and np.isnan(whole).sum() == G  # user 1's column 0 only
