"""Random init with realistic scales, and HF-format import / export of ``ExpertParams``.

Names are those of the checkpoint modules (``shared/REFERENCE.md`` section 1):

* decoder (HF ``Qwen3VLTextModel``, no ``embed_tokens``): ``layers.{i}.<hf_suffix>`` for every row of
  ``jaxref.param_table.LAYER_PARAMS`` (the one table of decoder names, shapes and layouts, which also
  drives init and the device's weight preparation) and ``norm.weight``; alpamayo checkpoints prefix
  these with ``expert.`` (``expert_prefix``).
* ``action_in_proj.encoder.trunk.{j}.{weight,bias}``, ``action_in_proj.norm.{weight,bias}``,
  ``action_in_proj.sinus.{c}.freqs`` / ``action_in_proj.timestep_fourier_encoder.freqs`` (buffers
  [1, F]; not parameters here: they are derived from ``ActionInConfig``, written on export and
  validated on import).
* ``action_out_proj.{weight,bias}``.

HF stores Linear weights ``[out, in]``; the decoder layers here use the same layout with the head
axes split out, so export and import only reshape (exact: no arithmetic; the action projections
are held ``[in, out]`` and transposed). Safetensors and torch state_dict round trips
are bitwise. torch is imported lazily, only by the two torch helpers (``jaxref`` stays torch-free).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from jaxref.action import ActionInParams, ActionOutParams, action_in_shapes, fourier_freqs
from jaxref.config import ExpertConfig
from jaxref.expert import ExpertParams, KVCache, check_cache_scalars
from jaxref.layers import LayerParams, check_layer_params, layer_param_shapes
from jaxref.param_table import FINAL_NORM_HF, LAYER_PARAMS, NORM, spec

# HF's ``initializer_range`` for Qwen3-VL text Linear weights.
HF_INIT_STD = 0.02


# ---- random init ---------------------------------------------------------------------------
def init_layer_params(
    key: jax.Array, cfg: ExpertConfig, *, std: float = HF_INIT_STD, gamma_jitter: float = 0.1
) -> LayerParams:
    """One decoder layer: Linear weights ~ N(0, std^2) (HF init), gammas 1 + jitter * N(0, 1).

    Gammas are jittered (HF initialises them to 1) so that tests notice a norm weight applied to the
    wrong tensor or not at all; real Qwen3 checkpoints have far-from-1 q/k norm gammas.
    """
    z = _normals(key, layer_param_shapes(cfg))
    return LayerParams(
        **{s.field: 1.0 + gamma_jitter * z[s.field] if s.kind == NORM else std * z[s.field] for s in LAYER_PARAMS}
    )


def _normals(key: jax.Array, shapes: dict[str, tuple[int, ...]]) -> dict[str, jax.Array]:
    """Standard normals for every named shape, drawn as one flat vector (one RNG kernel to compile)."""
    sizes = [math.prod(s) for s in shapes.values()]
    flat = jax.random.normal(key, (sum(sizes),), jnp.float32)
    parts = jnp.split(flat, np.cumsum(sizes)[:-1]) if len(sizes) > 1 else [flat]
    return {n: p.reshape(s) for (n, s), p in zip(shapes.items(), parts, strict=True)}


def init_action_in_params(key: jax.Array, cfg: ExpertConfig, *, gamma_jitter: float = 0.1) -> ActionInParams:
    """``action_in_proj``: Linear weights and biases at torch's default ``nn.Linear`` scale
    (std of U(-1/sqrt(in), 1/sqrt(in)) = 1/sqrt(3 in)), gammas / LayerNorm scale 1 + jitter."""
    shapes = action_in_shapes(cfg.action_in, action_dim=cfg.action_dim, hidden=cfg.hidden)
    fan_in = {
        "w_in": shapes["w_in"][0],
        "b_in": shapes["w_in"][0],
        "hidden_w": cfg.action_in.hidden,
        "hidden_b": cfg.action_in.hidden,
        "w_out": cfg.action_in.hidden,
        "b_out": cfg.action_in.hidden,
    }
    normals = _normals(key, shapes)
    out = {}
    for name in shapes:
        z = normals[name]
        if name in fan_in:
            out[name] = z / math.sqrt(3.0 * fan_in[name])
        elif name == "ln_bias":
            out[name] = gamma_jitter * z
        else:
            out[name] = 1.0 + gamma_jitter * z
    return ActionInParams(**out)


def init_params(
    key: jax.Array,
    cfg: ExpertConfig,
    *,
    std: float = HF_INIT_STD,
    gamma_jitter: float = 0.1,
    dtype=jnp.float32,
) -> ExpertParams:
    """Random ``ExpertParams`` for ``cfg`` (layers stacked on L).

    ``dtype`` is the storage dtype of the stacked layer weights (everything else is float32). An
    alpamayo_tt layer has 37.7M weights: 64 layers take ~9.7 GB in float32, ~4.8 GB in bf16 (the
    checkpoint's own dtype; the golden's math stays float32). Layers are generated one at a time
    (``lax.map``), so the peak is the stacked result plus one float32 layer.
    """
    return _init_params(key, cfg=cfg, std=std, gamma_jitter=gamma_jitter, dtype=dtype)


@functools.partial(jax.jit, static_argnames=("cfg", "std", "gamma_jitter", "dtype"))
def _init_params(key, *, cfg, std, gamma_jitter, dtype):
    k_in, k_layers, k_out = jax.random.split(key, 3)
    # lax.map (a scan) keeps one layer's float32 temporaries alive at a time; results stacked on L.
    layers = jax.lax.map(
        lambda k: jax.tree.map(
            lambda a: a.astype(dtype), init_layer_params(k, cfg, std=std, gamma_jitter=gamma_jitter)
        ),
        jax.random.split(k_layers, cfg.num_layers),
    )
    return _init_rest(k_in, k_out, layers, cfg=cfg, std=std, gamma_jitter=gamma_jitter)


def init_params_without_layers(
    key: jax.Array, cfg: ExpertConfig, *, std: float = HF_INIT_STD, gamma_jitter: float = 0.1
) -> ExpertParams:
    """``init_params(key, cfg)`` less its decoder layers (``layers=None``): the same action projections
    and final norm, bit for bit (the same key split and draws), without drawing 37.7M weights per layer
    only to drop them (callers that generate their layers themselves, e.g. ``device.parity_model``)."""
    return _init_params_without_layers(key, cfg=cfg, std=std, gamma_jitter=gamma_jitter)


@functools.partial(jax.jit, static_argnames=("cfg", "std", "gamma_jitter"))
def _init_params_without_layers(key, *, cfg, std, gamma_jitter):
    k_in, _, k_out = jax.random.split(key, 3)
    return _init_rest(k_in, k_out, None, cfg=cfg, std=std, gamma_jitter=gamma_jitter)


def _init_rest(k_in, k_out, layers, *, cfg, std, gamma_jitter) -> ExpertParams:
    """``ExpertParams`` around ``layers``: the action projections and final norm drawn from k_in / k_out."""
    z = _normals(k_out, {"norm": (cfg.hidden,), "w": (cfg.hidden, cfg.action_dim), "b": (cfg.action_dim,)})
    final_norm = 1.0 + gamma_jitter * z["norm"]
    action_out = ActionOutParams(w=std * z["w"], b=std * z["b"])
    return ExpertParams(
        action_in=init_action_in_params(k_in, cfg, gamma_jitter=gamma_jitter),
        layers=layers,
        final_norm=final_norm,
        action_out=action_out,
    )


def init_cache_layer(
    key: jax.Array, cfg: ExpertConfig, seq_len: int, *, max_seq_len: int | None = None, fill: float = 0.0
) -> tuple[jax.Array, jax.Array]:
    """One layer of a random VLM cache: (k, v), each head-major [K, Smax, H]; rows [0, S) ~ N(0, 1)
    (roped keys after the per-head k_norm have RMS ~ |gamma| ~ 1), rows [S, Smax) = ``fill``."""
    smax = seq_len if max_seq_len is None else max_seq_len
    if not 0 <= seq_len <= smax:
        raise ValueError(f"seq_len={seq_len} must satisfy 0 <= seq_len <= max_seq_len={smax}")
    shape = (cfg.num_kv_heads, seq_len, cfg.head_dim)
    z = _normals(key, {"k": shape, "v": shape})
    pad = jnp.full((cfg.num_kv_heads, smax - seq_len, cfg.head_dim), fill, jnp.float32)
    return jnp.concatenate([z["k"], pad], axis=1), jnp.concatenate([z["v"], pad], axis=1)


def init_cache(
    key: jax.Array,
    cfg: ExpertConfig,
    seq_len: int,
    *,
    max_seq_len: int | None = None,
    rope_delta: int = 0,
    fill: float = 0.0,
    dtype=jnp.float32,
) -> KVCache:
    """A random ``KVCache`` [L, K, Smax, H] (see ``init_cache_layer``); Smax defaults to S.
    ``dtype``: storage dtype (a bf16 VLM stores a bf16 cache); generated one layer at a time."""
    check_cache_scalars(seq_len, rope_delta, max_seq_len=seq_len if max_seq_len is None else max_seq_len)
    k, v = _init_cache_layers(
        jax.random.split(key, cfg.num_layers),
        cfg=cfg,
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        fill=fill,
        dtype=dtype,
    )
    return KVCache.create(k, v, seq_len, rope_delta)


@functools.partial(jax.jit, static_argnames=("cfg", "seq_len", "max_seq_len", "fill", "dtype"))
def _init_cache_layers(keys, *, cfg, seq_len, max_seq_len, fill, dtype):
    return jax.lax.map(
        lambda k: tuple(
            a.astype(dtype) for a in init_cache_layer(k, cfg, seq_len, max_seq_len=max_seq_len, fill=fill)
        ),
        keys,
    )


# ---- HF names ------------------------------------------------------------------------------
ACTION_IN_PREFIX = "action_in_proj."
ACTION_OUT_PREFIX = "action_out_proj."
# Keys of a full HF ``Qwen3VLTextModel`` state dict that the expert does not use.
IGNORED_KEYS = ("embed_tokens.weight",)


def layer_to_hf(field: str, w: np.ndarray, cfg: ExpertConfig) -> np.ndarray:
    """One layer's golden array of ``field`` -> HF's shape (a reshape: head axes merged)."""
    return np.asarray(w).reshape(spec(field).hf_shape(cfg))


def _trunk_indices(num_layers: int) -> dict[str, list[int]]:
    """``nn.Sequential`` indices of the MLPEncoder trunk: Linear, SiLU, (n-1) x [RMSNorm, Linear, SiLU],
    RMSNorm, Linear."""
    n = num_layers
    return {
        "w_in": [0],
        "hidden_norm": [2 + 3 * i for i in range(n - 1)],
        "hidden_w": [3 + 3 * i for i in range(n - 1)],
        "out_norm": [3 * n - 1],
        "w_out": [3 * n],
    }


def hf_names(cfg: ExpertConfig, *, expert_prefix: str = "") -> list[str]:
    """Every parameter name ``to_hf_state_dict`` writes (freqs buffers excluded), in order."""
    return list(to_hf_state_dict(zeros_params(cfg), cfg, expert_prefix=expert_prefix, with_freqs=False))


def zeros_params(cfg: ExpertConfig) -> ExpertParams:
    """All-zero ``ExpertParams`` of ``cfg``'s shapes (numpy float32): the template whose HF names and
    shapes define the state-dict layout."""
    layers = LayerParams(
        **{k: np.zeros((cfg.num_layers,) + s, np.float32) for k, s in layer_param_shapes(cfg).items()}
    )
    ain = ActionInParams(
        **{
            k: np.zeros(s, np.float32)
            for k, s in action_in_shapes(cfg.action_in, action_dim=cfg.action_dim, hidden=cfg.hidden).items()
        }
    )
    return ExpertParams(
        action_in=ain,
        layers=layers,
        final_norm=np.zeros(cfg.hidden, np.float32),
        action_out=ActionOutParams(
            w=np.zeros((cfg.hidden, cfg.action_dim), np.float32), b=np.zeros(cfg.action_dim, np.float32)
        ),
    )


def to_hf_state_dict(
    params: ExpertParams, cfg: ExpertConfig, *, expert_prefix: str = "", with_freqs: bool = True
) -> dict[str, np.ndarray]:
    """HF-format state dict of contiguous float32 numpy arrays (``[out, in]`` Linear weights).

    Args:
      expert_prefix: prepended to the decoder names (``"expert."`` in alpamayo checkpoints).
      with_freqs: also write the Fourier ``freqs`` buffers (exact fp32 values, as an fp32
        checkpoint stores them; ``cfg.action_in.bf16_freqs`` rounding happens at load time).
    """
    check_layer_params(params.layers, cfg, stacked=cfg.num_layers)
    sd: dict[str, np.ndarray] = {}
    layers = {s.field: np.asarray(getattr(params.layers, s.field), np.float32) for s in LAYER_PARAMS}
    for i in range(cfg.num_layers):
        for s in LAYER_PARAMS:
            sd[f"{expert_prefix}layers.{i}.{s.hf_suffix}"] = layer_to_hf(s.field, layers[s.field][i], cfg)
    sd[f"{expert_prefix}{FINAL_NORM_HF}"] = np.asarray(params.final_norm, np.float32)

    ain = params.action_in
    idx = _trunk_indices(cfg.action_in.num_layers)
    trunk = f"{ACTION_IN_PREFIX}encoder.trunk."
    sd[f"{trunk}0.weight"] = np.asarray(ain.w_in, np.float32).T
    sd[f"{trunk}0.bias"] = np.asarray(ain.b_in, np.float32)
    for i, (jn, jw) in enumerate(zip(idx["hidden_norm"], idx["hidden_w"], strict=True)):
        sd[f"{trunk}{jn}.weight"] = np.asarray(ain.hidden_norm[i], np.float32)
        sd[f"{trunk}{jw}.weight"] = np.asarray(ain.hidden_w[i], np.float32).T
        sd[f"{trunk}{jw}.bias"] = np.asarray(ain.hidden_b[i], np.float32)
    sd[f"{trunk}{idx['out_norm'][0]}.weight"] = np.asarray(ain.out_norm, np.float32)
    sd[f"{trunk}{idx['w_out'][0]}.weight"] = np.asarray(ain.w_out, np.float32).T
    sd[f"{trunk}{idx['w_out'][0]}.bias"] = np.asarray(ain.b_out, np.float32)
    sd[f"{ACTION_IN_PREFIX}norm.weight"] = np.asarray(ain.ln_scale, np.float32)
    sd[f"{ACTION_IN_PREFIX}norm.bias"] = np.asarray(ain.ln_bias, np.float32)
    if with_freqs:
        f = fourier_freqs(cfg.action_in, bf16=False)[None, :]
        for c in range(cfg.action_dim):
            sd[f"{ACTION_IN_PREFIX}sinus.{c}.freqs"] = f.copy()
        sd[f"{ACTION_IN_PREFIX}timestep_fourier_encoder.freqs"] = f.copy()
    sd[f"{ACTION_OUT_PREFIX}weight"] = np.asarray(params.action_out.w, np.float32).T
    sd[f"{ACTION_OUT_PREFIX}bias"] = np.asarray(params.action_out.b, np.float32)
    return {k: np.array(v, np.float32, order="C", copy=True) for k, v in sd.items()}  # writable, owned


def _is_float(x) -> bool:
    if hasattr(x, "is_floating_point"):  # torch.Tensor, without importing torch
        return bool(x.is_floating_point())
    dtype = np.asarray(x).dtype
    return bool(np.issubdtype(dtype, np.floating) or dtype == jnp.bfloat16)


def _as_numpy(x, key: str, *, allow_nonfinite: bool = False) -> np.ndarray:
    """float32 numpy view of a numpy / jax / torch tensor (bf16 and fp16 are widened exactly).

    Raises ValueError naming ``key`` for a non-float tensor (int, bool: not a weight, never converted)
    and, unless ``allow_nonfinite``, for a NaN / Inf after the cast to float32 (in the checkpoint, or
    a float64 value beyond float32's range that overflowed), with the count and the first index.
    """
    if not _is_float(x):
        raise ValueError(f"state dict key {key!r} has dtype {x.dtype}; expected a floating-point tensor")
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        x = (x if str(x.dtype) == "torch.float32" else x.float()).numpy()
    src = np.asarray(x)
    with np.errstate(over="ignore"):  # an overflow is reported below, by key, with its count
        a = src.astype(np.float32, copy=False)
    if not allow_nonfinite:
        bad = ~np.isfinite(a)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            was = src[first]
            why = "overflows float32 (|x| > 3.4e38)" if np.isfinite(was) else "is not finite"
            raise ValueError(f"state dict key {key!r} holds {int(bad.sum())} non-finite value(s) as float32, "
                             f"the first at index {first} (value {was!r} {why}); a broken checkpoint is "
                             "refused (pass allow_nonfinite=True to load it anyway)")
    return a


def _rounded_like(values: np.ndarray, x) -> np.ndarray:
    """float32 ``values`` rounded to the dtype of tensor ``x`` (fp16, bf16, ...) and widened back."""
    if hasattr(x, "detach"):
        import torch

        return torch.from_numpy(values).to(x.dtype).float().numpy()
    return np.asarray(values).astype(np.asarray(x).dtype).astype(np.float32)


def from_hf_state_dict(
    state: Mapping[str, object], cfg: ExpertConfig, *, expert_prefix: str = "", strict: bool = True,
    allow_nonfinite: bool = False,
) -> ExpertParams:
    """``ExpertParams`` from an HF-format state dict (numpy, jax or torch tensors; any float dtype).

    Raises ValueError naming the key for a missing tensor, a wrong shape, a NaN / Inf weight or one
    that overflows float32 (count and first index; ``allow_nonfinite=True`` loads such a broken model
    on purpose, e.g. to show that a parity check fails on it), ``freqs`` buffers that are not
    ``logspace(0, log10(max_freq), num_freqs)`` (exact or bf16-rounded), or (``strict``) an
    unexpected key. ``embed_tokens.weight`` of a full HF model is ignored.
    """
    ref = to_hf_state_dict(zeros_params(cfg), cfg, expert_prefix=expert_prefix, with_freqs=False)
    missing = [k for k in ref if k not in state]
    if missing:
        raise ValueError(f"state dict lacks {len(missing)} expected keys, e.g. {missing[:3]}")
    got: dict[str, np.ndarray] = {}
    for k, want in ref.items():
        a = _as_numpy(state[k], k, allow_nonfinite=allow_nonfinite)
        if a.shape != want.shape:
            raise ValueError(f"state dict key {k!r} has shape {a.shape}, expected {want.shape}")
        got[k] = a
    freq_keys = [f"{ACTION_IN_PREFIX}sinus.{c}.freqs" for c in range(cfg.action_dim)]
    freq_keys.append(f"{ACTION_IN_PREFIX}timestep_fourier_encoder.freqs")
    exact, rounded = fourier_freqs(cfg.action_in, bf16=False), fourier_freqs(cfg.action_in, bf16=True)
    for k in freq_keys:
        if k in state:
            f = _as_numpy(state[k], k).reshape(-1)
            # a checkpoint stores the buffer in its own dtype: exact, or rounded to bf16 / fp16 / ...
            ok = f.shape == exact.shape and (
                np.allclose(f, exact, rtol=1e-6) or np.array_equal(f, rounded)
                or np.array_equal(f, _rounded_like(exact, state[k]).reshape(-1)))
            if not ok:
                raise ValueError(
                    f"state dict key {k!r} = {f} is not logspace(0, log10({cfg.action_in.max_freq}), "
                    f"{cfg.action_in.num_freqs}) (exact, bf16-rounded or rounded to the tensor's dtype)"
                )
    if strict:
        known = set(ref) | set(freq_keys) | {expert_prefix + k for k in IGNORED_KEYS}
        extra = [k for k in state if k not in known]
        if extra:
            raise ValueError(
                f"state dict has {len(extra)} unexpected keys, e.g. {extra[:3]} (pass strict=False)"
            )

    layers = {
        s.field: np.stack(
            [got[f"{expert_prefix}layers.{i}.{s.hf_suffix}"].reshape(s.golden_shape(cfg)) for i in range(cfg.num_layers)]
        )
        for s in LAYER_PARAMS
    }
    idx = _trunk_indices(cfg.action_in.num_layers)
    trunk = f"{ACTION_IN_PREFIX}encoder.trunk."
    h = cfg.action_in.hidden

    def stack(keys, suffix, transpose, shape):
        arrs = [got[f"{trunk}{j}.{suffix}"].T if transpose else got[f"{trunk}{j}.{suffix}"] for j in keys]
        return np.stack(arrs) if arrs else np.zeros(shape, np.float32)

    ain = ActionInParams(
        w_in=got[f"{trunk}0.weight"].T,
        b_in=got[f"{trunk}0.bias"],
        hidden_norm=stack(idx["hidden_norm"], "weight", False, (0, h)),
        hidden_w=stack(idx["hidden_w"], "weight", True, (0, h, h)),
        hidden_b=stack(idx["hidden_w"], "bias", False, (0, h)),
        out_norm=got[f"{trunk}{idx['out_norm'][0]}.weight"],
        w_out=got[f"{trunk}{idx['w_out'][0]}.weight"].T,
        b_out=got[f"{trunk}{idx['w_out'][0]}.bias"],
        ln_scale=got[f"{ACTION_IN_PREFIX}norm.weight"],
        ln_bias=got[f"{ACTION_IN_PREFIX}norm.bias"],
    )
    return ExpertParams(
        action_in=jax.tree.map(jnp.asarray, ain),
        layers=LayerParams(**{k: jnp.asarray(v) for k, v in layers.items()}),
        final_norm=jnp.asarray(got[f"{expert_prefix}{FINAL_NORM_HF}"]),
        action_out=ActionOutParams(
            w=jnp.asarray(got[f"{ACTION_OUT_PREFIX}weight"].T), b=jnp.asarray(got[f"{ACTION_OUT_PREFIX}bias"])
        ),
    )


# ---- files and torch -----------------------------------------------------------------------
def save_safetensors(
    path: str | os.PathLike, params: ExpertParams, cfg: ExpertConfig, *, expert_prefix: str = ""
) -> None:
    """Write ``to_hf_state_dict`` to a safetensors file (float32)."""
    from safetensors.numpy import save_file

    save_file(to_hf_state_dict(params, cfg, expert_prefix=expert_prefix), os.fspath(path))


def load_safetensors(
    path: str | os.PathLike, cfg: ExpertConfig, *, expert_prefix: str = "", strict: bool = True,
    allow_nonfinite: bool = False,
) -> ExpertParams:
    """Read an HF-format safetensors file (see ``from_hf_state_dict``).

    Raises FileNotFoundError for a missing file and ValueError naming the path for anything that is
    not a readable safetensors file (a folder, an empty, truncated or garbage file).
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"checkpoint {path!r} does not exist")
    if not os.path.isfile(path):
        raise ValueError(f"checkpoint {path!r} is not a file; expected a .safetensors file")
    try:
        state = load_file(path)
    except (SafetensorError, OSError) as e:
        raise ValueError(f"checkpoint {path!r} is not a readable safetensors file ({e})") from None
    return from_hf_state_dict(state, cfg, expert_prefix=expert_prefix, strict=strict,
                              allow_nonfinite=allow_nonfinite)


def to_torch_state_dict(
    params: ExpertParams, cfg: ExpertConfig, *, expert_prefix: str = "", with_freqs: bool = True
) -> dict:
    """``to_hf_state_dict`` as float32 ``torch.Tensor`` s (loadable with ``load_state_dict``)."""
    import torch

    return {
        k: torch.from_numpy(v.copy())
        for k, v in to_hf_state_dict(params, cfg, expert_prefix=expert_prefix, with_freqs=with_freqs).items()
    }


def from_torch_state_dict(
    state: Mapping[str, object], cfg: ExpertConfig, *, expert_prefix: str = "", strict: bool = True,
    allow_nonfinite: bool = False,
) -> ExpertParams:
    """``ExpertParams`` from a torch state_dict (any float dtype; see ``from_hf_state_dict``)."""
    return from_hf_state_dict(state, cfg, expert_prefix=expert_prefix, strict=strict,
                              allow_nonfinite=allow_nonfinite)
