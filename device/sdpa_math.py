"""The emulated SDPA's float32 math: softmax(q k^T scale + mask) v over every key row (``attend``), or
over the key chunks its mask leaves visible (``attend_over_span``, planned by ``key_span``).

The expert's cache mask hides rows [S, Smax - T) with -1e9 (``jaxref.cache_attention.tail_slot_mask``):
at S 4600 of Smax 8192, 44% of the key rows. A hidden key's softmax term is exactly zero when its
exponent lies far enough below its row's maximum, so the attention over the visible chunks alone is
the attention over the whole span up to the order of the softmax sums. The device's flash kernels
see the same thing chunk by chunk: a chunk whose every term is zero adds 0 to the running sum and
leaves the running maximum where it was.

That holds while the hidden scores are small next to the mask's gap and the hidden V rows are finite
(0 * NaN is NaN on a chip too). ``attend_over_span`` checks both at run time and poisons its output
with NaN where either fails, so a skipped chunk can never hide a non-finite value or a mask too weak
for its scores: the check fails closed.

``key_span`` plans on the mask's concrete values (host side: the visible rows are static shapes);
the math is plain jnp, jitted by ``device.emulation`` (eager ops and the fast twin, the same programs).
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.numerics import einsum_f32

_HI = jax.lax.Precision.HIGHEST
# A chunk is skipped only when its largest mask entry lies this far below every query row's largest.
MIN_GAP = 1e6
# exp(x) is 0 in float32 below about -103.97; the margin keeps XLA's exp approximation well clear of it,
# and the relative one float32's rounding of scores far from 0 (its ulp at 3e9 is 256).
_UNDERFLOW = 200.0
_RELATIVE = 2.0**-16


def _scores(q, k, mask, *, scale: float, bf16: bool):
    """q k^T scale + mask, float32 [b, nkv, G, sq, s]: q [b, nh, sq, dh], k [b, nkv, s, dh], mask
    broadcastable to [b, nh, sq, s] or None. GQA: q head h reads kv head h // G (ttnn's
    ``repeat_interleave``), the G heads of a kv head side by side (no K copies). ``bf16``: q and k
    hold bf16 values (``einsum_f32``)."""
    b, nh, sq, dh = q.shape
    nkv, s = k.shape[1], k.shape[2]
    g = nh // nkv
    sc = einsum_f32("bkgqd,bksd->bkgqs", q.reshape(b, nkv, g, sq, dh), k, bf16_values=bf16) * scale
    if mask is not None:
        sc = sc + jnp.broadcast_to(mask, (b, nh, sq, s)).reshape(b, nkv, g, sq, s)
    return sc


def _weigh(scs, vs):
    """softmax over the keys of all runs, times v: scs [b, nkv, G, sq, s_r] and vs [b, nkv, s_r, dh] per run
    r of keys -> ([b, nkv G, sq, dh], every row's maximum [b, nkv, G, sq, 1]). A run at a time, as the
    device's flash kernels go chunk by chunk: exp against the rows' maximum over all runs, the sums
    and the products with v added over the runs, divided at the end (no run is concatenated)."""
    b, nkv, g, sq, _ = scs[0].shape
    top = functools.reduce(jnp.maximum, [jnp.max(sc, axis=-1, keepdims=True) for sc in scs])
    es = [jnp.exp(sc - jax.lax.stop_gradient(top)) for sc in scs]
    total = sum(jnp.sum(e, axis=-1, keepdims=True) for e in es)
    out = sum(jnp.einsum("bkgqs,bksd->bkgqd", e, v, precision=_HI) for e, v in zip(es, vs, strict=True)) / total
    return out.reshape(b, nkv * g, sq, vs[0].shape[-1]), top


def attend(q, k, v, mask, *, scale: float, bf16: bool = False):
    """softmax(q k^T scale + mask) v in float32 over every key row; shapes and ``bf16`` as ``_scores``, v as k."""
    return _weigh([_scores(q, k, mask, scale=scale, bf16=bf16)], [v])[0]


@dataclasses.dataclass(frozen=True)
class KeySpan:
    """The visible key rows as (start, stop) runs of whole chunks, and the largest mask entry of the
    hidden rows (every row's largest entry lies ``MIN_GAP`` or more above it)."""

    runs: tuple[tuple[int, int], ...]
    hidden_max: float

    def hidden(self, s: int) -> tuple[tuple[int, int], ...]:
        """The complement of ``runs`` in [0, s), as runs."""
        out, at = [], 0
        for a, b in self.runs:
            if a > at:
                out.append((at, a))
            at = b
        if at < s:
            out.append((at, s))
        return tuple(out)


def key_span(mask: np.ndarray, *, chunk: int) -> KeySpan | None:
    """The visible chunks of an additive mask [..., s] (its last axis the keys; every other axis a
    query row, broadcast over the rest), or None when no chunk can be skipped (then read them all).

    A chunk of ``chunk`` keys is hidden when its largest entry lies ``MIN_GAP`` or more below the
    smallest of the rows' largest entries. A mask with a non-finite value is not planned on (None)."""
    m = np.asarray(mask, np.float32)
    s = m.shape[-1]
    if chunk <= 0 or s % chunk or not np.all(np.isfinite(m)):
        return None
    rows = m.reshape(-1, s)
    floor = float(rows.max(axis=1).min())  # every row's largest entry is >= this
    chunk_max = rows.max(axis=0).reshape(s // chunk, chunk).max(axis=1)
    hidden = chunk_max <= floor - MIN_GAP
    if not hidden.any():
        return None
    runs, start = [], None
    for j, h in enumerate([*hidden, True]):
        if not h and start is None:
            start = j
        elif h and start is not None:
            runs.append((start * chunk, j * chunk))
            start = None
    return KeySpan(tuple(runs), float(chunk_max[hidden].max()))


def _rows(a, runs, axis: int):
    return [a[(slice(None),) * axis + (slice(lo, hi),)] for lo, hi in runs]


def attend_over_span(q, k, v, mask, *, scale: float, span: KeySpan, bf16: bool = False):
    """``attend`` over the key rows of ``span.runs`` only, NaN wherever a skipped row's term might not
    be exactly zero. Shapes and ``bf16`` as ``attend`` (mask's last axis the keys; not None); k and v
    whole (``attend_over_runs`` takes their runs)."""
    runs = span.runs + span.hidden(k.shape[2])
    return attend_over_runs(q, _rows(k, runs, 2), _rows(v, runs, 2), mask, scale=scale, span=span, bf16=bf16)


def attend_over_runs(q, ks, vs, mask, *, scale: float, span: KeySpan, bf16: bool = False):
    """``attend_over_span`` with k and v given as their rows [b, nkv, s_r, dh] over each run of
    ``span.runs`` and then of ``span.hidden(s)``, in that order: a generated cache need not exist
    whole (``emulation_types.Tensor.row_runs``), and a run the same for several queries (the fast
    twin's batched steps) is read once for all.

    The check: a hidden score is at most ``scale max|q| max|k_hidden|`` (row norms, Cauchy-Schwarz)
    plus ``span.hidden_max``; every row's maximum is at least the smallest visible row maximum; the
    first must lie ``_UNDERFLOW`` (and float32's rounding) below the second (the hidden exp is then
    0), and the hidden V rows must be finite (a non-finite or overflowing hidden K row fails the
    first)."""
    n, dh = len(span.runs), q.shape[-1]
    if len(ks) != len(vs) or len(ks) < n:
        raise ValueError(f"attend_over_runs: {len(ks)} k runs and {len(vs)} v runs for {n} visible runs")
    masks = _rows(mask, span.runs, mask.ndim - 1)
    scs = [_scores(q, k, m, scale=scale, bf16=bf16) for k, m in zip(ks[:n], masks, strict=True)]
    out, rows_max = _weigh(scs, vs[:n])
    # row sums as matrix-vector products: XLA:CPU runs a large reduction as a slow reduce-window
    ones = jnp.ones((dh,), jnp.float32)
    k_norm = jnp.sqrt(functools.reduce(jnp.maximum, [jnp.max(jnp.einsum("bksd,d->bks", k * k, ones, precision=_HI))
                                                     for k in ks[n:]], jnp.float32(0)))  # NaN propagates
    q_norm = jnp.sqrt(jnp.max(jnp.einsum("bhsd,d->bhs", q * q, ones, precision=_HI)))
    top = scale * q_norm * k_norm + span.hidden_max  # |q . k| <= |q| |k|
    v_sum = sum((jnp.sum(jnp.einsum("bksd,d->bks", v, ones, precision=_HI)) for v in vs[n:]),
                jnp.float32(0))  # Inf / NaN (or overflow): not finite
    low = jnp.min(rows_max)  # every row's maximum is at least this
    exact = (top + _UNDERFLOW + _RELATIVE * (jnp.abs(top) + jnp.abs(low)) <= low) & jnp.isfinite(v_sum)
    return jnp.where(exact, out, jnp.nan)
