"""The program config ttnn picks for a matmul called without one (an op report's
``program_config: std::nullopt`` rows), for the interleaved forms whose choice needs no L1 estimate.

tenstorrent/tt-metal ttnn/cpp/ttnn/operations/matmul/device/config/matmul_program_config.cpp @
001cea9a, ``create_simple_matmul_program_config`` (reached for non-sharded inputs without a user
grid), on the device's compute grid:

* A unbatched, B batched, all interleaved: ``get_mcast_1d_config(fuse_batch=false, mcast_in0=false)``;
* a narrow shape (height / width ratio > 8, or all in DRAM with a side of at most one tile) with all
  interleaved: wide (N > M) -> ``get_mcast_1d_config(mcast_in0=true)``, tall -> ``mcast_in0=false``,
  both with ``fuse_batch=false`` (the batches loop);
* anything else goes through an L1-size estimate (``get_per_core_factor``) to a 2D or a
  non-multicast config: not modelled here (``None``).

``get_mcast_1d_config``: mcast_in0 -> per_core_M = M/32, per_core_N = ceil(ceil(N / cores) / 32);
otherwise per_core_M = ceil(ceil(M / cores) / 32), per_core_N = N/32; in0_block_w = 2 if K/32 is
even, else 1; the subblock of ``get_matmul_subblock_params`` (``program_config.ttnn_subblock``); the
output block the per-core block (the L1 fallback of ``get_multi_dim_per_core_factor`` is not taken
for blocks whose buffers fit, which the caller's ``validate`` checks).
"""

from __future__ import annotations

import math

from costmodel.blackhole.program_config import MCAST_1D_IN0, MCAST_1D_IN1, MatmulProgramConfig, ttnn_subblock
from costmodel.hardware import TILE

NARROW_SHAPE_RATIO_THRESHOLD = 8  # is_narrow_shape


def is_narrow_shape(height: int, width: int, *, all_dram: bool) -> bool:
    """ttnn's ``is_narrow_shape``: one side more than 8x the other, or (all in DRAM) a side <= 32."""
    ratio = max(height, width) // min(height, width)
    if ratio > NARROW_SHAPE_RATIO_THRESHOLD:
        return True
    return all_dram and (height <= TILE or width <= TILE)


def mcast_1d_config(*, M: int, K: int, N: int, grid: tuple[int, int], mcast_in0: bool,
                    fp32_dest_acc: bool) -> MatmulProgramConfig:
    """ttnn's ``get_mcast_1d_config`` with ``fuse_batch=false`` (M is one batch's rows)."""
    cores = grid[0] * grid[1]
    if mcast_in0:
        pcm, pcn = M // TILE, math.ceil(math.ceil(N / cores) / TILE)
    else:
        pcm, pcn = math.ceil(math.ceil(M / cores) / TILE), N // TILE
    sh, sw = ttnn_subblock(pcm, pcn, fp32_dest_acc=fp32_dest_acc)
    return MatmulProgramConfig(in0_block_w=2.0 if (K // TILE) % 2 == 0 else 1.0, per_core_N=float(pcn),
                               per_core_M=float(pcm), kind=MCAST_1D_IN0 if mcast_in0 else MCAST_1D_IN1,
                               grid_x=grid[0], grid_y=grid[1], out_subblock_h=sh, out_subblock_w=sw,
                               fuse_batch=False)


def auto_config(*, M: int, K: int, N: int, batch_a: int, batch_b: int, grid: tuple[int, int], all_interleaved: bool,
                all_dram: bool, fp32_dest_acc: bool) -> MatmulProgramConfig | None:
    """The config ttnn picks for ``matmul([batch_a, M, K], [batch_b, K, N])`` without a program
    config (module docstring), or None where its choice needs the L1 estimate (not modelled).
    M, K, N: padded sizes in elements."""
    if not all_interleaved:
        return None
    if batch_a == 1 and batch_b > 1:
        return mcast_1d_config(M=M, K=K, N=N, grid=grid, mcast_in0=False, fp32_dest_acc=fp32_dest_acc)
    if not is_narrow_shape(M, N, all_dram=all_dram):
        return None
    return mcast_1d_config(M=M, K=K, N=N, grid=grid, mcast_in0=N > M, fp32_dest_acc=fp32_dest_acc)


__all__ = ["NARROW_SHAPE_RATIO_THRESHOLD", "auto_config", "is_narrow_shape", "mcast_1d_config"]
