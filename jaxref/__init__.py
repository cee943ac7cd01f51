"""Pure-JAX references: the Alpamayo action expert golden, ADR-0060 attention algorithms, TT numerics."""

from jaxref.action import (
    ActionInParams,
    ActionOutParams,
    UnicycleConfig,
    action_in_proj,
    action_out_proj,
    action_to_traj,
    euler_sample,
)
from jaxref.cache_attention import attend_exact, attend_tail_slot, attention_over_rows
from jaxref.config import ActionInConfig, ExpertConfig
from jaxref.expert import (
    CacheContext,
    ExpertParams,
    KVCache,
    LayerSource,
    expert_stack,
    sample,
    sample_jit,
    velocity,
    velocity_jit,
)
from jaxref.layers import LayerParams, decoder_layer, rms_norm
from jaxref.options import ExpertOptions
from jaxref.precision import Precision
from jaxref.weights import (
    from_hf_state_dict,
    init_cache,
    init_params,
    load_safetensors,
    save_safetensors,
    to_hf_state_dict,
)

# The flax NNX wrapper lives in ``jaxref.nnx`` (imported on demand: it pulls in flax).
__all__ = [
    "ActionInConfig",
    "ActionInParams",
    "ActionOutParams",
    "CacheContext",
    "ExpertConfig",
    "ExpertOptions",
    "ExpertParams",
    "KVCache",
    "LayerParams",
    "LayerSource",
    "Precision",
    "UnicycleConfig",
    "action_in_proj",
    "action_out_proj",
    "action_to_traj",
    "attend_exact",
    "attend_tail_slot",
    "attention_over_rows",
    "decoder_layer",
    "euler_sample",
    "expert_stack",
    "from_hf_state_dict",
    "init_cache",
    "init_params",
    "load_safetensors",
    "rms_norm",
    "sample",
    "sample_jit",
    "save_safetensors",
    "to_hf_state_dict",
    "velocity",
    "velocity_jit",
]
