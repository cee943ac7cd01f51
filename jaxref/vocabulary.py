"""The project's vocabulary: every named choice as a ``Literal`` type, declared once.

The bottom of the import tree (imports only ``typing``): the golden (``jaxref``), the cost models
(``costmodel``) and the device graph (``device``) all read their allowed values from here, and
every check is ``jaxref.validation.check_choice(name, value, TheLiteral)``; the tuple of values, where
one is needed (argparse ``choices``, a loop over formats), is ``jaxref.validation.choices_of``.

Number formats (``jaxref.numerics``; on the device, ttnn's ``float32`` / ``bfloat16`` /
``bfloat8_b`` / ``bfloat4_b``):
  NumberFormat      every storage format the golden emulates
  WeightFormat      matmul weights the device ports (block formats group along the output axis)
  CacheFormat       K/V cache rows
  MaskFormat        the additive attention mask
  ActivationFormat  op outputs of the device graph (ttnn's interleaved bf16 activations)
  NormWeightFormat  RMSNorm gammas on the device
  LayoutFormat      tensors a tilize / untilize converts between row-major sticks and tiles (the Blackhole
                    model prices bf16 and fp32 ones)

Kernels and configs:
  AttnMode          'decode' (flash-decode over the users' view) / 'standard' (SDPA over q heads)
  MathFidelity      matrix-engine passes per multiply (LoFi 1 ... HiFi4 4)
  MatmulKind        the four ttnn matmul program-config kinds (``MatmulProgramConfig.kind``)
  MatmulChoice      'tuned' (the port's program configs) / 'default' (ttnn's own heuristic)
  ReduceKind        how decode-SP ranks combine their partial softmax states (jaxref.attention, AHBM)
"""

from __future__ import annotations

from typing import Literal

NumberFormat = Literal["fp32", "bf16", "bfp8", "bfp4"]
WeightFormat = Literal["bf16", "bfp8", "bfp4"]
CacheFormat = Literal["bf16", "bfp8", "bfp4"]
MaskFormat = Literal["bf16", "bfp8", "bfp4"]
ActivationFormat = Literal["bf16"]
NormWeightFormat = Literal["bf16"]
LayoutFormat = Literal["bf16", "fp32"]

AttnMode = Literal["decode", "standard"]
MathFidelity = Literal["LoFi", "HiFi2", "HiFi3", "HiFi4"]
MatmulKind = Literal["mcast_1d_in0", "mcast_1d_in1", "mcast_2d", "dram_sharded"]
MatmulChoice = Literal["tuned", "default"]
ReduceKind = Literal["tree", "all_to_all", "all_reduce"]

__all__ = ["ActivationFormat", "AttnMode", "CacheFormat", "LayoutFormat", "MaskFormat", "MathFidelity", "MatmulChoice",
           "MatmulKind", "NormWeightFormat", "NumberFormat", "ReduceKind", "WeightFormat"]
