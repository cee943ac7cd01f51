"""Helpers for the attention tests: random problems, tolerances, a naive bf16 oracle, and a count
of the GEMMs a function really executes (read from its jaxpr, independent of any plan)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.attention import MASK_LSE, MASK_VALUE, attention_reference, causal_mask

FP32_TOL = 1e-5  # max-abs error relative to the output scale (the fp32 bar)


def random_qkv(seed: int, T: int, S: int, N: int, K: int, H: int):
    """Standard-normal q [T, N, H], k, v [S, K, H] float32 (numpy RNG: no compile per shape)."""
    rng = np.random.default_rng(seed)
    return tuple(jnp.asarray(rng.standard_normal(shape), jnp.float32) for shape in ((T, N, H), (S, K, H), (S, K, H)))


def random_bias_mask(seed: int, N: int, T: int, S: int, keep: float = 0.6):
    """Additive bias [N, T, S] float32 and boolean keep-mask [N, T, S] as numpy arrays."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((N, T, S)).astype(np.float32), rng.random((N, T, S)) < keep


def rel_err(a, b) -> float:
    """max |a - b| / max(|b|): error relative to the reference's scale."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def reference(q, k, v, **kw):
    """The dense oracle, jitted (one compile instead of one per eager op)."""
    return jax.jit(lambda q, k, v: attention_reference(q, k, v, **kw))(q, k, v)


def assert_matches_reference(got, want, tol: float = FP32_TOL):
    (o, lse), (o_ref, lse_ref) = got, want
    assert o.shape == o_ref.shape and lse.shape == lse_ref.shape
    assert np.all(np.isfinite(np.asarray(o))) and np.all(np.isfinite(np.asarray(lse)))
    assert rel_err(o, o_ref) <= tol, f"out rel err {rel_err(o, o_ref):.3g} > {tol}"
    assert rel_err(lse, lse_ref) <= tol, f"lse rel err {rel_err(lse, lse_ref):.3g} > {tol}"


def numpy_attention(q, k, v, keep=None, *, scale=None):
    """Dense GQA attention in numpy float64: (out [T, N, H], lse [N, T]). A second, compile-free
    oracle; ``keep``: optional bool [N, T, S] (False excludes a key; a fully excluded row gives
    out 0, lse ``MASK_LSE`` as the contract says); ``scale`` default H ** -0.5."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    T, N, H = q.shape
    S, K = k.shape[:2]
    s = np.einsum("TKGH,SKH->KGTS", q.reshape(T, K, N // K, H), k).reshape(N, T, S) * (H**-0.5 if scale is None else scale)
    keep = np.ones((N, T, S), bool) if keep is None else np.broadcast_to(keep, (N, T, S))
    s = np.where(keep, s, -np.inf)
    m = s.max(-1, keepdims=True)
    any_key = keep.any(-1, keepdims=True)
    p = np.where(keep, np.exp(s - np.where(any_key, m, 0.0)), 0.0)
    l = p.sum(-1, keepdims=True)
    w = (p / np.where(any_key, l, 1.0)).reshape(K, N // K, T, S)
    out = np.einsum("KGTS,SKH->TKGH", w, v).reshape(T, N, H)
    lse = np.where(any_key, m + np.log(np.where(any_key, l, 1.0)), MASK_LSE)[..., 0]
    return out, lse


@functools.partial(jax.jit, static_argnames="causal")
def dense_bf16(q, k, v, *, causal: bool = False):
    """Naive dense GQA attention with every op in bfloat16 (the FlashAttention comparison baseline)."""
    T, N, H = q.shape
    S, K, _ = k.shape
    bf = jnp.bfloat16
    qg = q.astype(bf).reshape(T, K, N // K, H)
    s = jnp.einsum("TKGH,SKH->KGTS", qg, k.astype(bf), preferred_element_type=bf) * jnp.asarray(H**-0.5, bf)
    if causal:
        s = jnp.where(causal_mask(T, S), s, jnp.asarray(MASK_VALUE, jnp.float32).astype(bf))
    p = jax.nn.softmax(s, axis=-1)
    return jnp.einsum("KGTS,SKH->TKGH", p, v.astype(bf), preferred_element_type=bf).reshape(T, N, H)


def loss_fn(attn, **kw):
    """Scalar loss touching out and lse with fixed random weights: its gradient checks both."""
    def loss(q, k, v):
        out, lse = attn(q, k, v, **kw)
        wo = jnp.cos(jnp.arange(out.size, dtype=jnp.float32)).reshape(out.shape)
        wl = jnp.sin(jnp.arange(lse.size, dtype=jnp.float32)).reshape(lse.shape)
        return (out * wo).sum() + (lse * wl).sum()
    return loss


def grad_errors(attn, q, k, v, **kw) -> list[float]:
    """Relative max errors of d loss / d(q, k, v) of ``attn`` vs the dense reference."""
    ref_kw = {x: kw[x] for x in ("causal", "bias", "mask", "scale") if x in kw}
    g_ref = jax.jit(jax.grad(loss_fn(attention_reference, **ref_kw), argnums=(0, 1, 2)))(q, k, v)
    g = jax.jit(jax.grad(loss_fn(attn, **kw), argnums=(0, 1, 2)))(q, k, v)
    return [rel_err(a, b) for a, b in zip(g, g_ref)]


def _sub_jaxprs(eqn):
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        if name in eqn.params:
            j = eqn.params[name]
            yield getattr(j, "jaxpr", j)
    for j in eqn.params.get("branches", ()):
        yield j.jaxpr


def count_gemms(jaxpr, mult: int = 1) -> int:
    """GEMM instances executed: every dot_general counts the product of its batch dims, times the
    trip count of enclosing scans. A while loop (unknown trip count) is refused."""
    total = 0
    for eqn in jaxpr.eqns:
        prim = eqn.primitive.name
        if prim == "dot_general":
            (_, _), (lhs_batch, _) = eqn.params["dimension_numbers"]
            shape = eqn.invars[0].aval.shape
            total += mult * math.prod(shape[d] for d in lhs_batch)
        elif prim == "scan":
            total += count_gemms(eqn.params["jaxpr"].jaxpr, mult * eqn.params["length"])
        elif prim == "while":
            raise AssertionError("while loop: trip count unknown")
        else:
            for sub in _sub_jaxprs(eqn):
                total += count_gemms(sub, mult)
    return total


def dot_operand_shapes(jaxpr) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(lhs shape, rhs shape) of every dot_general, recursively."""
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            out.append((tuple(eqn.invars[0].aval.shape), tuple(eqn.invars[1].aval.shape)))
        elif eqn.primitive.name == "scan":
            out += dot_operand_shapes(eqn.params["jaxpr"].jaxpr)
        else:
            for sub in _sub_jaxprs(eqn):
                out += dot_operand_shapes(sub)
    return out


def executed_tiles(fn, q, k, v, **kw) -> int:
    """Tile work items the numeric code executed: GEMM instances / (2 GEMMs x K kv heads)."""
    jaxpr = jax.make_jaxpr(lambda q, k, v: fn(q, k, v, **kw))(q, k, v).jaxpr
    n = count_gemms(jaxpr)
    K = k.shape[1]
    assert n % (2 * K) == 0, n
    return n // (2 * K)
