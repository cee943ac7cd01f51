"""Checkpoints in other float dtypes load; non-float tensors, non-finite weights and unreadable files are
clear errors."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from jaxref.action import fourier_freqs
from jaxref.config import ExpertConfig
from jaxref.weights import (
    from_hf_state_dict,
    from_torch_state_dict,
    init_params,
    load_safetensors,
    save_safetensors,
    to_torch_state_dict,
)

CFG = ExpertConfig.tiny()
FREQS = "action_in_proj.timestep_fourier_encoder.freqs"


@pytest.fixture(scope="module")
def params():
    import jax

    return init_params(jax.random.key(0), CFG)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_a_checkpoint_in_another_float_dtype_loads_with_its_own_freqs(params, dtype, tmp_path):
    sd = {k: v.to(dtype) for k, v in to_torch_state_dict(params, CFG).items()}  # freqs rounded to dtype too
    if dtype == torch.float16:  # fp16 rounds 59.948 to 59.94, neither exact nor bf16 (60.0)
        f = sd[FREQS].float().numpy().reshape(-1)
        assert not np.array_equal(f, fourier_freqs(CFG.action_in, bf16=True))
    got = from_torch_state_dict(sd, CFG)
    save_file(sd, str(tmp_path / "ckpt.safetensors"))
    from_file = load_safetensors(tmp_path / "ckpt.safetensors", CFG)
    # every weight is the fp32 weight rounded to the checkpoint's dtype (numpy's / torch's own rounding)
    want = sd["layers.0.self_attn.q_proj.weight"].float().numpy()  # [N*H, D]; golden wq is [N, H, D]
    np.testing.assert_array_equal(np.asarray(got.layers.wq[0]).reshape(want.shape), want)
    np.testing.assert_array_equal(np.asarray(from_file.layers.wq[0]), np.asarray(got.layers.wq[0]))


def test_freqs_that_are_not_a_rounding_of_logspace_are_still_refused(params):
    sd = to_torch_state_dict(params, CFG)
    sd[FREQS] = (sd[FREQS] * 1.01).half()
    with pytest.raises(ValueError, match=f"(?s){FREQS}.*is not logspace"):
        from_torch_state_dict(sd, CFG)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool], ids=str)
def test_integer_and_bool_weights_are_refused_naming_the_key(params, dtype):
    sd = to_torch_state_dict(params, CFG)
    key = "layers.1.mlp.down_proj.weight"
    sd[key] = sd[key].to(dtype)
    with pytest.raises(ValueError, match=f"state dict key '{key}' has dtype torch.{str(dtype).split('.')[1]}; "
                                         "expected a floating-point tensor"):
        from_torch_state_dict(sd, CFG)
    np_sd = {k: v.numpy() for k, v in to_torch_state_dict(params, CFG).items()}
    np_sd[key] = np_sd[key].astype(np.int64)
    with pytest.raises(ValueError, match=f"'{key}' has dtype int64"):
        from_hf_state_dict(np_sd, CFG)


@pytest.mark.parametrize("kind", ["truncated", "empty", "garbage", "folder"])
def test_unreadable_checkpoints_are_value_errors_naming_the_path(params, tmp_path, kind):
    good = tmp_path / "good.safetensors"
    save_safetensors(good, params, CFG)
    bad = tmp_path / f"{kind}.safetensors"
    data = good.read_bytes()
    if kind == "folder":
        bad.mkdir()
    else:
        bad.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"\x00garbage" * 64}[kind])
    with pytest.raises(ValueError, match=f"checkpoint '{bad}' is not"):
        load_safetensors(bad, CFG)
    with pytest.raises(FileNotFoundError, match="missing.safetensors' does not exist"):
        load_safetensors(tmp_path / "missing.safetensors", CFG)


# ---- non-finite and overflowing weights (issue 30) ----------------------------------------------
@pytest.fixture(scope="module")
def state(params):
    from jaxref.weights import to_hf_state_dict

    return to_hf_state_dict(params, CFG, with_freqs=False)


@settings(max_examples=15, deadline=None)
@given(data=st.data(), bad=st.sampled_from([np.nan, np.inf, -np.inf, 1e300, -3.5e38]), count=st.integers(1, 3))
def test_nonfinite_or_overflowing_weights_are_refused_naming_key_count_and_index(state, data, bad, count):
    """A NaN / Inf weight loaded silently, and a float64 1e300 became inf on the cast to float32: a
    broken model then "passed" parity (NaN on both sides). Refused unless asked for explicitly."""
    key = data.draw(st.sampled_from(sorted(state)))
    a = state[key].astype(np.float64)  # a float64 checkpoint: 1e300 / -3.5e38 overflow float32
    count = min(count, a.size)  # a tensor may hold fewer elements than the drawn count
    flat = data.draw(st.lists(st.integers(0, a.size - 1), min_size=count, max_size=count, unique=True))
    a.flat[flat] = bad
    sd = {**state, key: a}
    first = tuple(int(i) for i in np.unravel_index(min(flat), a.shape))
    with pytest.raises(ValueError, match=re.escape(f"{key!r} holds {count} non-finite value(s) as float32, the "
                                                   f"first at index {first}")):
        from_hf_state_dict(sd, CFG)
    loaded = from_hf_state_dict(sd, CFG, allow_nonfinite=True)  # on purpose: the parity tool shows it fails
    import jax

    leaves = jax.tree.leaves(loaded)
    assert sum(int((~np.isfinite(np.asarray(x))).sum()) for x in leaves) == count


def test_nonfinite_weights_are_refused_from_files_and_torch_too(params, tmp_path):
    sd = to_torch_state_dict(params, CFG)
    key = "layers.1.mlp.down_proj.weight"
    sd[key][2, 5] = float("nan")
    with pytest.raises(ValueError, match=re.escape(f"{key!r} holds 1 non-finite value(s) as float32, the first at "
                                                   "index (2, 5)")):
        from_torch_state_dict(sd, CFG)
    save_file(sd, str(tmp_path / "nan.safetensors"))
    with pytest.raises(ValueError, match=r"holds 1 non-finite value"):
        load_safetensors(tmp_path / "nan.safetensors", CFG)
    assert np.isnan(np.asarray(load_safetensors(tmp_path / "nan.safetensors", CFG, allow_nonfinite=True)
                               .layers.w_down)).sum() == 1
