"""The alternatives ``report_plan.plan_search`` prices for one report row's op: every legal config of
the op's kind, each also with the other formats and the lower math fidelities (flagged).

Each generator returns (change text, changed spec, flag) for every alternative (the row's own excluded)
that the op's one legality rule accepts; none restates a rule:

* 1D / 2D multicast matmul (``MatmulSpec``): every in0_block_w dividing K/32, with (1D in0-multicast)
  every per_core_N whose split fits the grid, by ``MatmulProgramConfig.validate``;
* DRAM-sharded matmul (``MatmulSpec`` of kind ``dram_sharded``): every in0_block_w dividing the
  row's own. ttnn requires in0_block_w to divide the in0 L1 shard's width in tiles (tt-metal
  matmul_device_operation.cpp, the DRAM-sharded config's validation; later versions also accept a
  multiple of it), a width the op report does not print: the divisors of the row's own in0_block_w are
  the values known to divide it. per_core_N is not searched (it sets the output's L1 shard width,
  which the model does not price: the workers split N by the DRAM banks), nor
  num_workers_per_dram_bank (absent from the config ttnn prints in the reports read here, and a
  change re-pads the weights per bank). Then ``MatmulProgramConfig.validate``;
* MinimalMatmul (``MinimalMatmulSpec``): M / K / N block sizes over every block count of each
  dimension, at the smallest block giving that count (ceil(tiles / count): the model prices a
  dimension by its block count, and a larger block of the same count only pads more and needs more
  L1), and the row's own block; the row's own subblock where it divides the new block, else the one
  ttnn's chooser picks (``ttnn_subblock``); the grid kept. Then ``MinimalMatmulSpec.validate``;
* SDPA (``SdpaDecodeSpec`` / ``SdpaStandardSpec``): k_chunk a tile multiple dividing the cache rows,
  with cores_per_head 1..16 (decode) or q_chunk a tile multiple dividing the query rows (standard), by
  ``SdpaProgramConfig.validate``.

Formats and fidelity: a matmul's weights (``WeightFormat``) or an SDPA's KV cache (``CacheFormat``)
in every other format of the vocabulary, and every math fidelity of fewer passes than the row's
(``MathFidelity``). Either is flagged (``WEIGHT_FLAG`` / ``KV_FLAG``, ``FIDELITY_FLAG``, joined by '; '
when both change): the model prices their bytes and passes, not their accuracy.
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.kinds.minimal_matmul import MinimalMatmulSpec
from costmodel.blackhole.opspecs import MatmulSpec, SdpaDecodeSpec, SdpaStandardSpec
from costmodel.blackhole.program_config import DRAM_SHARDED, MCAST_1D_IN0, ttnn_subblock
from costmodel.blackhole.sdpa_program_config import MAX_CORES_PER_HEAD
from costmodel.hardware import TILE, fidelity_passes
from jaxref.validation import choices_of
from jaxref.vocabulary import CacheFormat, MathFidelity, WeightFormat

WEIGHT_FLAG = "weight format: accuracy not modelled (check with a parity run)"
KV_FLAG = ("KV-cache format: accuracy not modelled (check with a parity run); the rows writing the cache "
           "are not re-priced")
FIDELITY_FLAG = "fidelity: accuracy not modelled (check with a parity run)"


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def change_text(pairs) -> str:
    """'name old->new, ...' of the (name, old, new) pairs that change."""
    return ", ".join(f"{name} {old}->{new}" for name, old, new in pairs if old != new)


def flag_of(*, fmt_flag: str, fmt_changed: bool, fidelity_changed: bool) -> str:
    """The flag of a candidate: its format flag and / or ``FIDELITY_FLAG`` ('' for a config change only)."""
    return "; ".join(f for f, on in ((fmt_flag, fmt_changed), (FIDELITY_FLAG, fidelity_changed)) if on)


def fidelities(own: str) -> list[str]:
    """``own`` and every math fidelity of fewer passes (a higher one is never priced faster)."""
    return [own] + [f for f in choices_of(MathFidelity) if fidelity_passes(f) < fidelity_passes(own)]


def _formats(own: str, vocabulary) -> list[str]:
    return [own] + [f for f in choices_of(vocabulary) if f != own]


def matmul_candidates(spec: MatmulSpec, board) -> list[tuple[str, MatmulSpec, str]]:
    """The alternatives of a ttnn matmul row (module docstring: 1D / 2D multicast, DRAM-sharded)."""
    c = spec.cfg
    kt, nt = spec.K // TILE, spec.N // TILE
    own_bw, own_pn = int(c.in0_block_w), int(c.per_core_N)
    if c.kind == DRAM_SHARDED:
        blocks, splits = divisors(own_bw), [own_pn]
    else:
        blocks = divisors(kt)
        splits = [d for d in divisors(nt) if nt // d <= board.grid_cores] if c.kind == MCAST_1D_IN0 else [own_pn]
    out = []
    for bw in blocks:
        for pn in splits:
            cfg = dataclasses.replace(c, in0_block_w=float(bw), per_core_N=float(pn), out_subblock_h=None,
                                      out_subblock_w=None)
            for wd in _formats(spec.weight_dtype, WeightFormat):
                try:
                    cfg.validate("matmul", board, M=spec.M, K=spec.K, N=spec.N, weight_dtype=wd,
                                 act_dtype=spec.act_dtype, fp32_dest_acc=True)
                except ValueError:
                    continue
                for fid in fidelities(spec.fidelity):
                    if (bw, pn, wd, fid) == (own_bw, own_pn, spec.weight_dtype, spec.fidelity):
                        continue
                    text = change_text((("in0_block_w", own_bw, bw), ("per_core_N", own_pn, pn),
                                        ("weights", spec.weight_dtype, wd), ("fidelity", spec.fidelity, fid)))
                    flag = flag_of(fmt_flag=WEIGHT_FLAG, fmt_changed=wd != spec.weight_dtype,
                                   fidelity_changed=fid != spec.fidelity)
                    out.append((text, dataclasses.replace(spec, cfg=cfg, weight_dtype=wd, fidelity=fid), flag))
    return out


def block_sizes(tiles: int, own: int) -> list[int]:
    """The smallest block of every block count of a dimension of ``tiles`` tiles, and ``own``."""
    return sorted({math.ceil(tiles / count) for count in range(1, tiles + 1)} | {own})


def minimal_subblock(spec: MinimalMatmulSpec, m_block: int, n_block: int) -> tuple[int, int]:
    """The subblock a MinimalMatmul row keeps at new (M, N) blocks: its own where it divides them, else
    the one ttnn's chooser picks for them (``ttnn_subblock``)."""
    own = (spec.subblock_h, spec.subblock_w)
    if m_block % own[0] == 0 and n_block % own[1] == 0:
        return own
    return ttnn_subblock(m_block, n_block, fp32_dest_acc=spec.fp32_dest_acc)


def minimal_matmul_candidates(spec: MinimalMatmulSpec, board) -> list[tuple[str, MinimalMatmulSpec, str]]:
    """The alternatives of a MinimalMatmul row (module docstring)."""
    s = spec
    own_sub = (s.subblock_h, s.subblock_w)
    out = []
    for m in block_sizes(s.M // TILE, s.m_block):
        for k in block_sizes(s.K // TILE, s.k_block):
            for n in block_sizes(s.N // TILE, s.n_block):
                sub = minimal_subblock(s, m, n)
                for wd in _formats(s.weight_dtype, WeightFormat):
                    new = dataclasses.replace(s, m_block=m, k_block=k, n_block=n, subblock_h=sub[0],
                                              subblock_w=sub[1], weight_dtype=wd)
                    try:
                        new.validate(board)
                    except ValueError:
                        continue
                    for fid in fidelities(s.fidelity):
                        if (m, k, n, wd, fid) == (s.m_block, s.k_block, s.n_block, s.weight_dtype, s.fidelity):
                            continue
                        text = change_text((("M_block_size", s.m_block, m), ("K_block_size", s.k_block, k),
                                            ("N_block_size", s.n_block, n),
                                            ("subblock", "x".join(map(str, own_sub)), "x".join(map(str, sub))),
                                            ("weights", s.weight_dtype, wd), ("fidelity", s.fidelity, fid)))
                        flag = flag_of(fmt_flag=WEIGHT_FLAG, fmt_changed=wd != s.weight_dtype,
                                       fidelity_changed=fid != s.fidelity)
                        out.append((text, dataclasses.replace(new, fidelity=fid), flag))
    return out


def validate_sdpa(spec, board, attn=None, kv_dtype=None) -> None:
    """``SdpaProgramConfig.validate`` of an SDPA row's op (``attn`` / ``kv_dtype``: a candidate's)
    with the query rows in the view of its kernel: G*T of one token in decode, T in standard."""
    decode = isinstance(spec, SdpaDecodeSpec)
    (attn or spec.attn).validate(board, smax=spec.smax_rows, num_tokens=1 if decode else spec.q_rows,
                                 group=spec.q_rows if decode else 1, head_dim=spec.head_dim,
                                 kv_dtype=kv_dtype or spec.kv_dtype, mask_dtype=spec.mask_dtype,
                                 act_dtype=spec.act_dtype)


def sdpa_candidates(spec: SdpaDecodeSpec | SdpaStandardSpec, board) -> list[tuple[str, object, str]]:
    """The alternatives of an SDPA row's op (module docstring)."""
    a = spec.attn
    decode = isinstance(spec, SdpaDecodeSpec)
    smax = int(spec.smax_rows)
    k_chunks = [TILE * d for d in divisors(smax // TILE)]
    if decode:
        name, own, values = "cores_per_head", int(a.cores_per_head), range(1, MAX_CORES_PER_HEAD + 1)
    else:
        name, own, values = "q_chunk", int(a.q_chunk), [TILE * d for d in divisors(max(spec.q_rows // TILE, 1))]
    out = []
    for k in k_chunks:
        for v in values:
            attn = dataclasses.replace(a, k_chunk=float(k), **{name: float(v)})
            for kv in _formats(spec.kv_dtype, CacheFormat):
                try:
                    validate_sdpa(spec, board, attn, kv)
                except ValueError:
                    continue
                for fid in fidelities(spec.fidelity):
                    if (k, v, kv, fid) == (int(a.k_chunk), own, spec.kv_dtype, spec.fidelity):
                        continue
                    text = change_text((("k_chunk", int(a.k_chunk), k), (name, own, v), ("kv", spec.kv_dtype, kv),
                                        ("fidelity", spec.fidelity, fid)))
                    flag = flag_of(fmt_flag=KV_FLAG, fmt_changed=kv != spec.kv_dtype,
                                   fidelity_changed=fid != spec.fidelity)
                    out.append((text, dataclasses.replace(spec, attn=attn, kv_dtype=kv, fidelity=fid), flag))
    return out


def candidates(spec, board) -> list[tuple[str, object, str]]:
    """The alternatives of a searched row's op (its op spec, not a ``ChipSpec``), by its kind."""
    if isinstance(spec, MatmulSpec):
        return matmul_candidates(spec, board)
    if isinstance(spec, MinimalMatmulSpec):
        return minimal_matmul_candidates(spec, board)
    if isinstance(spec, SdpaDecodeSpec | SdpaStandardSpec):
        return sdpa_candidates(spec, board)
    raise ValueError(f"no plan candidates for {type(spec).__name__}; expected MatmulSpec, MinimalMatmulSpec or an "
                     "SDPA spec")


__all__ = ["FIDELITY_FLAG", "KV_FLAG", "WEIGHT_FLAG", "block_sizes", "candidates", "change_text", "divisors",
           "fidelities", "flag_of", "matmul_candidates", "minimal_matmul_candidates", "minimal_subblock", "sdpa_candidates",
           "validate_sdpa"]
