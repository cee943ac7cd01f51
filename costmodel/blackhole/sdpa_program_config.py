"""The one SDPA program-config type (``SdpaProgramConfig``), its one legality rule, and the query-row rule.

Beside ``program_config.MatmulProgramConfig`` and in its style: a frozen pytree whose three knobs
the relaxed cost model differentiates through (``k_chunk``, ``q_chunk``, ``cores_per_head``: float
leaves, integers in a concrete config; ``validate`` rejects fractions) and whose kernel choice and
grid are static. One type serves the cost model (``costmodel.blackhole.sdpa`` prices it), the port
(``costmodel.blackhole.port.Port.attention``) and the device graph (``build(ns)`` makes ttnn's
``SDPAProgramConfig`` or the emulation's stand-in with the same field names).

``attn_mode`` picks the kernel: 'decode' (``scaled_dot_product_attention_decode`` over the users' view:
each kv head a user with its G*T query rows as "heads"; ``q_chunk`` unused) or 'standard'
(``scaled_dot_product_attention`` over the q heads, T query rows each, or G*T with the group's q heads
folded onto rows).
"""

from __future__ import annotations

from costmodel._pytree import pytree_dataclass, static_field
from costmodel.hardware import GRID, TILE, Blackhole, tile_bytes
from jaxref.validation import check_choice, check_dtype, check_int
from jaxref.vocabulary import ActivationFormat, AttnMode, CacheFormat, MaskFormat

MAX_CORES_PER_HEAD = 16  # SDPAProgramConfig.max_cores_per_head_batch cap (REFERENCE §2)


def query_rows(attn_mode: str, *, group: int, num_tokens: int, fold_heads: bool = False) -> int:
    """Query rows per attention head as the kernel sees them: G*T in decode (the users' view) or with
    the group's q heads folded onto rows, T for standard GQA q heads. The mask has as many rows."""
    check_choice("attn_mode", attn_mode, AttnMode)
    return group * num_tokens if (attn_mode == "decode" or fold_heads) else num_tokens


def sdpa_l1_bytes(*, q_rows, k_chunk, head_dim: int, kv_dtype: str, mask_dtype: str, act_dtype: str = "bf16"):
    """L1 per core of an SDPA work item: Q, double-buffered K/V/mask chunks, the score block, and
    three output-sized buffers (PV intermediate, running accumulator, output). Tracer-safe."""
    qt, kc, ht = q_rows / TILE, k_chunk / TILE, head_dim / TILE
    act, kv, mk = tile_bytes(act_dtype), tile_bytes(kv_dtype), tile_bytes(mask_dtype)
    return qt * ht * act + 2 * 2 * kc * ht * kv + 2 * qt * kc * mk + qt * kc * act + 3 * qt * ht * act


@pytree_dataclass
class SdpaProgramConfig:
    """ttnn's ``SDPAProgramConfig`` and the kernel it configures.

    Attributes:
      k_chunk: K/V rows per chunk (``k_chunk_size``), both kernels.
      q_chunk: query rows per work item (``q_chunk_size``), standard SDPA only.
      cores_per_head: ``max_cores_per_head_batch`` (<= ``MAX_CORES_PER_HEAD``), flash-decode only.
      attn_mode: 'decode' | 'standard' (``jaxref.vocabulary.AttnMode``).
      grid_x, grid_y: ``compute_with_storage_grid_size`` (columns x rows of cores).
      exp_approx_mode: approximate exp in the softmax.
    """

    k_chunk: float = 128.0
    q_chunk: float = 32.0
    cores_per_head: float = float(MAX_CORES_PER_HEAD)
    attn_mode: str = static_field(default="decode")
    grid_x: int = static_field(default=GRID[0])
    grid_y: int = static_field(default=GRID[1])
    exp_approx_mode: bool = static_field(default=False)

    def __post_init__(self):
        # only static fields here: the leaves may be tracers (vmap / grad) or JAX's placeholders
        check_choice("attn_mode", self.attn_mode, AttnMode)
        for name in ("grid_x", "grid_y"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v >= 1):
                raise ValueError(f"{name}={v!r} must be an integer >= 1")
        if not isinstance(self.exp_approx_mode, bool):
            raise TypeError(f"exp_approx_mode={self.exp_approx_mode!r} must be a bool")

    @property
    def grid(self) -> tuple[int, int]:
        return (self.grid_x, self.grid_y)

    def query_rows(self, *, group: int, num_tokens: int, fold_heads: bool = False) -> int:
        """``query_rows`` of this config's kernel."""
        return query_rows(self.attn_mode, group=group, num_tokens=num_tokens, fold_heads=fold_heads)

    # ---- the one legality rule --------------------------------------------------------------
    def validate(self, hw: Blackhole, *, smax, num_tokens: int, group: int, head_dim: int, kv_dtype: str,
                 mask_dtype: str, act_dtype: str = "bf16", fold_heads: bool = False) -> None:
        """Raise ValueError (naming the field, the value and what was expected) unless this config runs
        attention over a cache of ``smax`` rows (the last ``num_tokens`` the expert's own K/V) on ``hw``.

        Rules: the formats are the device's; folding needs the standard kernel; the grid fits the
        chip's; Smax a tile multiple; k_chunk a tile multiple dividing Smax; decode: 1 <= cores_per_head
        <= 16; standard: q_chunk a tile multiple dividing the query rows; the circular buffers fit L1.
        """
        check_dtype("kv_dtype", kv_dtype, CacheFormat)
        check_dtype("mask_dtype", mask_dtype, MaskFormat)
        check_dtype("act_dtype", act_dtype, ActivationFormat)
        if fold_heads and self.attn_mode != "standard":
            raise ValueError(f"fold_heads=True needs attn_mode='standard', got attn_mode={self.attn_mode!r}")
        if not (self.grid_x <= hw.grid_x and self.grid_y <= hw.grid_y):
            raise ValueError(f"attention: core grid {self.grid_x}x{self.grid_y} must fit the {hw.name} compute grid "
                             f"{hw.grid_x}x{hw.grid_y}")
        smax_i = check_int("smax", smax, lo=1)
        if smax_i % TILE:
            raise ValueError(f"smax={smax_i} must be a multiple of {TILE}")
        k = check_int("k_chunk", self.k_chunk, lo=TILE)
        if k % TILE:
            raise ValueError(f"k_chunk={k} must be a multiple of {TILE}")
        if smax_i % k:
            raise ValueError(f"k_chunk={k} must divide smax={smax_i}")
        q_rows = self.query_rows(group=group, num_tokens=num_tokens, fold_heads=fold_heads)
        if self.attn_mode == "decode":
            cph = check_int("cores_per_head", self.cores_per_head, lo=1)
            if cph > MAX_CORES_PER_HEAD:
                raise ValueError(f"cores_per_head={cph} must be <= {MAX_CORES_PER_HEAD} (max_cores_per_head_batch)")
            chunk_rows = q_rows
        else:
            q = check_int("q_chunk", self.q_chunk, lo=TILE)
            if q % TILE:
                raise ValueError(f"q_chunk={q} must be a multiple of {TILE}")
            if q_rows % q:
                raise ValueError(f"q_chunk={q} must divide the {q_rows} query rows per head "
                                 f"({'G*T, heads folded' if fold_heads else 'T'})")
            chunk_rows = q
        l1 = float(sdpa_l1_bytes(q_rows=chunk_rows, k_chunk=k, head_dim=head_dim, kv_dtype=kv_dtype,
                                 mask_dtype=mask_dtype, act_dtype=act_dtype))
        if l1 > float(hw.l1_bytes_per_core):
            raise ValueError(f"k_chunk={k}: SDPA circular buffers need {l1 / 1024:.0f} KB of L1 per core; "
                             f"the core has {hw.l1_bytes_per_core / 1024:.0f} KB")

    # ---- the ttnn object ------------------------------------------------------------------------
    def build(self, ns):
        """ttnn's ``SDPAProgramConfig`` (``ns``: ``ttnn`` or a ``device.emulation`` namespace); the decode
        kernel ignores ``q_chunk_size``."""
        return ns.SDPAProgramConfig(
            compute_with_storage_grid_size=ns.CoreCoord(self.grid_x, self.grid_y), q_chunk_size=int(self.q_chunk),
            k_chunk_size=int(self.k_chunk), exp_approx_mode=self.exp_approx_mode,
            max_cores_per_head_batch=int(self.cores_per_head))


__all__ = ["MAX_CORES_PER_HEAD", "SdpaProgramConfig", "query_rows", "sdpa_l1_bytes"]
