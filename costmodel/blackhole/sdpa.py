"""Roofline models of ttnn's SDPA ops on Blackhole: flash-decode and standard (times in microseconds).

The config type and its legality rule: ``sdpa_program_config.SdpaProgramConfig``. Same building
blocks as ``ops`` (page reads at a core's request rate or its share of the achievable bandwidth,
q-norm overlap of a chunk's round trip, read and math); see its docstring.
"""

from __future__ import annotations

import math

from costmodel.blackhole.ops import (
    barrier_read_us,
    cycles_us,
    launch_us,
    overlap,
    read_us,
    us_of,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import TILE, Blackhole, tile_bytes
from costmodel.smooth import Relax, sceil, smin

# online softmax per 32x32 score tile (ttnn SDPA compute kernel, per K chunk): add the mask, row
# max, subtract the max, exp, row sum; the running-max rescale of the output and of the sum is per
# output tile (q_chunk x head_dim), not per score tile, and is counted apart (SDPA_RESCALE_PASSES)
SOFTMAX_PASSES = 5
SOFTMAX_PASSES_NO_MASK = 4  # causal decode with cur_pos: no mask tile to add
SDPA_RESCALE_PASSES = 2  # per output tile per chunk: out * exp(m_old - m_new), + P.V
SDPA_COMBINE_PASSES = 3  # worker partial merge at the reducer: rescale own, rescale other, add


def chunk_math_us(hw: Blackhole, fit: FitParams, *, q_tiles, k_tiles, head_tiles, masked: bool, fidelity: str):
    """Compute time of one K chunk of an SDPA work item, us: the QK^T and PV tile products
    (2 x q_tiles x k_tiles x head_tiles) and the online softmax, counted in elementwise passes over
    tiles: ``SOFTMAX_PASSES`` (``SOFTMAX_PASSES_NO_MASK`` without a mask) per score tile
    (q_tiles x k_tiles) and ``SDPA_RESCALE_PASSES`` per output tile (q_tiles x head_tiles), each at
    [eltwise_cycles_per_tile]. Shapes: tile counts, floats (relaxable)."""
    passes = SOFTMAX_PASSES if masked else SOFTMAX_PASSES_NO_MASK
    eltwise_tiles = q_tiles * k_tiles * passes + q_tiles * head_tiles * SDPA_RESCALE_PASSES
    return cycles_us(hw, 2 * q_tiles * k_tiles * head_tiles * hw.tile_matmul_cycles(fidelity)
                     + eltwise_tiles * fit.eltwise_cycles_per_tile)


def decode_cores_per_user(hw: Blackhole, attn: SdpaProgramConfig, *, users: int, grid_cores: int | None = None,
                          relax: Relax | None = None):
    """Cores per (batch, kv head): min(max_cores_per_head_batch, grid cores // users) (sdpa_decode
    factory); ``grid_cores`` is the program config's grid (default: the chip's ttnn compute grid)."""
    grid = hw.grid_cores if grid_cores is None else grid_cores
    return smin(attn.cores_per_head, float(max(grid // users, 1)), relax=relax)


def sdpa_decode_us(hw: Blackhole, fit: FitParams, attn: SdpaProgramConfig, *, smax_rows, users: int, q_rows: int,
                   head_dim: int, kv_dtype: str, mask_dtype: str | None, act_dtype: str = "bf16",
                   fidelity: str = "HiFi2", grid_cores: int | None = None, pairs_per_core: int = 1,
                   relax: Relax | None = None):
    """``scaled_dot_product_attention_decode`` over ``smax_rows`` cache rows, us.

    The port views the cache as ``users`` = kv heads with one head each and the q heads x tokens
    of a group as ``q_rows`` "heads". Non-causal with a mask, the kernel reads all ``smax_rows``
    cache rows (``mask_dtype=None``: causal decode with ``cur_pos``, no mask read, ``smax_rows`` =
    the rows up to cur_pos rounded up to whole chunks). Each user gets C = min(cores_per_head,
    grid // users) cores; the Smax/k_chunk chunks are split over A = min(chunks, C) of them; a chunk costs its DRAM round trip, its
    K+V+mask pages at the core's request rate or its bytes at the core's share of the bandwidth
    (shared with the average number of busy cores), and its compute
    (QK^T and PV tile products, online softmax over the score tiles). Then A-1 workers send their
    partial (output + max/sum stats) to the reducer over the NoC and it merges them one by one:
    the NoC-reduction slope when chunks < C, the DRAM slope once every core is busy.

    ``pairs_per_core`` > 1: more pairs than cores (ttnn gives a batch grid // batch cores and each core
    ceil(kv heads / those) heads), so each core runs its pairs one after another, every chunk of a pair
    on that one core (C = 1), while users / pairs_per_core cores read alike.
    """
    if not (isinstance(pairs_per_core, int) and pairs_per_core >= 1):
        raise ValueError(f"pairs_per_core={pairs_per_core!r}; expected an integer >= 1")
    if pairs_per_core > 1 and users <= (hw.grid_cores if grid_cores is None else grid_cores):
        raise ValueError(f"pairs_per_core={pairs_per_core} with {users} users on a grid of as many cores or more: "
                         "ttnn runs several pairs on a core only when the pairs outnumber the cores")
    act, kv = tile_bytes(act_dtype), tile_bytes(kv_dtype)
    mk, mask_rows = (0, 0) if mask_dtype is None else (tile_bytes(mask_dtype), q_rows // TILE)
    qt, ht = q_rows // TILE, head_dim // TILE
    kc = attn.k_chunk / TILE
    chunks = smax_rows / attn.k_chunk
    cores = decode_cores_per_user(hw, attn, users=users, grid_cores=grid_cores, relax=relax)
    active = smin(chunks, cores, relax=relax)
    chunks_per_core = sceil(chunks / active, relax=relax)
    chunk_tiles, chunk_bytes = 2 * kc * ht + mask_rows * kc, 2 * kc * ht * kv + mask_rows * kc * mk
    # the chunks split unevenly (64 over 13 cores: 5 on the critical core, 4.9 on average); the
    # critical core shares DRAM with the average number of busy readers over its run
    readers = users * chunks / chunks_per_core / pairs_per_core
    t_read = read_us(hw, fit, chunk_tiles, chunk_bytes, readers, relax=relax)
    t_math = chunk_math_us(hw, fit, q_tiles=qt, k_tiles=kc, head_tiles=ht, masked=mask_dtype is not None,
                           fidelity=fidelity)
    t_chunk = overlap(fit, fit.dram_latency_us, t_read, t_math)
    t_q = read_us(hw, fit, qt * ht, qt * ht * act, users, relax=relax)  # one read per user, multicast to its cores
    partial_bytes = qt * ht * act + 2 * qt * act  # output tiles + max and sum columns
    hops = (hw.grid_x + hw.grid_y) / 2.0  # mean Manhattan distance to the reducer
    t_merge = (us_of(partial_bytes / hw.noc_link_bytes_per_s) + cycles_us(hw, hops * hw.noc_hop_cycles)
               + cycles_us(hw, (qt * ht + 2 * qt) * SDPA_COMBINE_PASSES * fit.eltwise_cycles_per_tile))
    t_final = cycles_us(hw, qt * ht * fit.eltwise_cycles_per_tile)  # 1/sum normalisation
    return (launch_us(fit, users * cores / pairs_per_core, fit.launch_sdpa_us) + fit.dram_latency_us + t_q
            + pairs_per_core * (chunks_per_core * t_chunk + t_final)
            + (active - 1.0) * t_merge)


# get_barrier_read_threshold<q_tile_bytes, num_cores>() of ttnn's SDPA readers (tt-metal
# ttnn/cpp/ttnn/operations/transformer/sdpa/device/kernels/dataflow/dataflow_common.hpp, used by
# reader_interleaved.cpp @ 008dd2ddd0dc3bb7154bc13d054b1902f1e2a5a5; num_cores is the program's whole
# grid, sdpa_program_factory.cpp @ 000e7c053de83f4dd8bb52da5aa09bda2ead7ce4): (512 / num_cores) *
# (1024 + 128) bytes between read barriers, "8KB of data before a single barrier for 8x8 grid"
SDPA_BARRIER_BYTES_X_CORES = 512
SDPA_BARRIER_BYTES_PER_SLOT = 1024 + 128


def sdpa_barrier_tiles(grid_cores: int, q_tile_bytes: int) -> int:
    """Pages the standard-SDPA reader issues before each ``noc_async_read_barrier``:
    ((512 // grid_cores) * 1152) // q_tile_bytes, integer divisions as in the kernel, where
    ``grid_cores`` is the program's whole grid (not the cores that get work). 0 (a grid over 512
    cores) never triggers the in-loop barrier: the whole chunk goes out before the final one,
    returned here as 0 for the caller to treat as one group per chunk."""
    return ((SDPA_BARRIER_BYTES_X_CORES // grid_cores) * SDPA_BARRIER_BYTES_PER_SLOT) // q_tile_bytes


def sdpa_standard_us(hw: Blackhole, fit: FitParams, attn: SdpaProgramConfig, *, smax_rows, q_heads: int,
                     q_rows: int, head_dim: int, kv_dtype: str, mask_dtype: str, act_dtype: str = "bf16",
                     fidelity: str = "HiFi2", relax: Relax | None = None):
    """``scaled_dot_product_attention`` (is_causal=False, additive mask), us.

    Work items are (q head, q chunk) pairs, ``q_heads * q_rows / q_chunk`` of them, spread over
    the grid; every item streams the whole K/V of its kv head (Smax/k_chunk chunks) plus its mask
    rows. The reader (reader_interleaved.cpp, ``read_chunk_with_padding``) reads each chunk's K,
    mask and V as three streams and waits on a read barrier every ``sdpa_barrier_tiles`` pages
    (2 bf16 tiles on the 110-core grid), so each group of pages costs a DRAM round trip overlapped
    with its read (``ops.barrier_read_us``); the reader runs concurrently with the compute of the
    previous chunk (double-buffered K/V/mask). Few items: one core's round trips bound it; many
    items: the aggregate DRAM bandwidth does. ``q_rows`` is T for GQA q heads, G*T with the group's
    q heads folded onto rows.
    """
    kv, mk = tile_bytes(kv_dtype), tile_bytes(mask_dtype)
    ht = head_dim // TILE
    qc, kc = attn.q_chunk / TILE, attn.k_chunk / TILE
    items = q_heads * q_rows / attn.q_chunk
    cores = smin(items, float(hw.grid_cores), relax=relax)
    items_per_core = sceil(items / cores, relax=relax)
    chunks = smax_rows / attn.k_chunk
    readers = items / items_per_core  # average busy cores over the critical core's run

    def stream_us(tiles, nbytes):
        return chunk_stream_us(hw, fit, tiles, nbytes, readers, act_dtype=act_dtype, relax=relax)

    t_read = (stream_us(kc * ht, kc * ht * kv) + stream_us(qc * kc, qc * kc * mk)
              + stream_us(kc * ht, kc * ht * kv))
    t_math = chunk_math_us(hw, fit, q_tiles=qc, k_tiles=kc, head_tiles=ht, masked=True, fidelity=fidelity)
    t_chunk = overlap(fit, t_read, t_math)
    return (launch_us(fit, cores, fit.launch_sdpa_us) + fit.dram_latency_us
            + items_per_core * (q_chunk_io_us(hw, fit, qc * ht, act_dtype=act_dtype, readers=cores, relax=relax)
                                + chunks * t_chunk))


def chunk_stream_us(hw: Blackhole, fit: FitParams, tiles, nbytes, readers, *, act_dtype: str,
                    relax: Relax | None = None):
    """One ``read_chunk_with_padding`` call of the standard-SDPA reader (a K, V or mask chunk: ``tiles``
    pages, ``nbytes`` bytes) while ``readers`` cores read alike, us: a read barrier every
    ``sdpa_barrier_tiles`` pages of the grid (the last one closes the call), each group of pages the
    overlap of a DRAM round trip and its read (``ops.barrier_read_us``)."""
    per_barrier = sdpa_barrier_tiles(hw.grid_cores, tile_bytes(act_dtype))
    groups = 1.0 if per_barrier == 0 else sceil(tiles / per_barrier, relax=relax)
    return barrier_read_us(hw, fit, tiles, nbytes, readers, groups=groups, relax=relax)


def q_chunk_io_us(hw: Blackhole, fit: FitParams, out_tiles, *, act_dtype: str, readers, relax: Relax | None = None):
    """Per q chunk of a standard-SDPA work item, us: its Q tiles (``out_tiles`` = q chunk x head dim
    tiles) read while ``readers`` cores read theirs, and the final 1/sum normalisation of its output."""
    return (read_us(hw, fit, out_tiles, out_tiles * tile_bytes(act_dtype), readers, relax=relax)
            + cycles_us(hw, out_tiles * fit.eltwise_cycles_per_tile))


def causal_k_chunks(*, rows: int, q_chunk: int, k_chunk: int) -> list[int]:
    """K chunks each q chunk of a causal prefill processes: those holding a key row at or before its
    last query row (reader_interleaved.cpp's ``k_chunk * Sk_chunk_t < q_high_idx``, the compute kernel's
    ``k_chunk_end``), up to the last chunk. ``rows``: query rows = key rows (Sq = Sk)."""
    last = math.ceil(rows / k_chunk)
    return [min(math.ceil((q + 1) * q_chunk / k_chunk), last) for q in range(rows // q_chunk)]


def sdpa_causal_us(hw: Blackhole, fit: FitParams, attn: SdpaProgramConfig, *, rows: int, q_heads: int,
                   head_dim: int, kv_dtype: str, act_dtype: str = "bf16", fidelity: str = "HiFi2"):
    """``scaled_dot_product_attention`` with ``is_causal=True`` over a prefill (query rows = key rows =
    ``rows``, no mask input, no chunk offset), us.

    What the program does (tenstorrent/tt-metal ttnn/cpp/ttnn/operations/transformer/sdpa/device/ on
    main from May 2026: pull requests #44480 and #44614, the rule quoted in issue #55766 against
    sdpa_program_factory.cpp @ 0b01ab90e38, 2026-07-22):

    * q chunk q processes ``causal_k_chunks`` K chunks (q + 1 with equal chunk sizes): the chunks past
      the diagonal are neither read nor computed;
    * the work items (q head, q chunk) are paired zigzag, chunk q with chunk n - 1 - q of the same head
      (``q_chunk_remapping.hpp``), so every pair costs the same; with an even number of q chunks the
      pairs are dealt over the whole grid in contiguous ranges, ``pairs // cores`` each and one more to
      the first ``pairs % cores`` cores (``global_q_pair_distribute``), which bound the op;
    * no mask is read: the writer builds the causal mask tiles in L1 once, and the compute adds them
      on the diagonal chunk of each q chunk only (``SOFTMAX_PASSES`` there, ``SOFTMAX_PASSES_NO_MASK``
      on the others);
    * every core reads its own K and V chunks from DRAM at every step (the K/V forwarding chain of
      the non-causal program is off when causal: ``if (!is_causal && ...)``), with the reader's read
      barrier every ``sdpa_barrier_tiles`` pages, as ``sdpa_standard_us``; a kv head's K/V is read
      again for each of its q heads.

    A step costs the q-norm overlap of its K and V reads and its compute (``chunk_math_us``); each q
    chunk adds its Q read and the final normalisation. Chunk sizes must be concrete (an odd number
    of q chunks, whose pairs the program does not deal this way, raises ValueError).
    """
    q_chunk, k_chunk = int(attn.q_chunk), int(attn.k_chunk)
    ks = causal_k_chunks(rows=rows, q_chunk=q_chunk, k_chunk=k_chunk)
    if len(ks) % 2:
        raise ValueError(f"rows={rows} / q_chunk={q_chunk} = {len(ks)} q chunks: the causal pair split needs an "
                         "even number")
    kv = tile_bytes(kv_dtype)
    ht, qc, kc = head_dim // TILE, q_chunk / TILE, k_chunk / TILE
    pairs = q_heads * len(ks) // 2
    cores = min(pairs, hw.grid_cores)
    pairs_per_core = math.ceil(pairs / cores)
    # pair (q, n-1-q) costs ks[q] + ks[n-1-q] steps: n + 1 for every pair with equal chunks, their mean otherwise
    steps = pairs_per_core * 2 * sum(ks) / len(ks)
    q_chunks = 2 * pairs_per_core
    readers = pairs / pairs_per_core  # average busy cores over the busiest core's run
    t_read = 2 * chunk_stream_us(hw, fit, kc * ht, kc * ht * kv, readers, act_dtype=act_dtype)  # K, then V

    def step(masked):
        return overlap(fit, t_read, chunk_math_us(hw, fit, q_tiles=qc, k_tiles=kc, head_tiles=ht, masked=masked,
                                                  fidelity=fidelity))

    t_q = q_chunk_io_us(hw, fit, qc * ht, act_dtype=act_dtype, readers=cores)
    return (launch_us(fit, hw.grid_cores, fit.launch_sdpa_us) + fit.dram_latency_us
            + q_chunks * (t_q + step(True)) + (steps - q_chunks) * step(False))
