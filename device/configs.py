"""Per-op configuration of the expert's ttnn graph as typed, validated dataclasses.

Each config builds the real ttnn object (or the emulation's stand-in with the same field names)
with ``build(ns)``, where ``ns`` is the op namespace (``ttnn`` or a ``device.emulation`` namespace).
Matmuls use the one program-config type and legality rule of the project,
``costmodel.blackhole.program_config.MatmulProgramConfig``.
Values are those of the port (``seeds/EXPERT_NOTES.md``: tuned 1D-multicast matmuls on the 11x10
grid, flash-decode SDPA with k_chunk 128, 16 cores per user).
"""

from __future__ import annotations

import dataclasses
import math

from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.param_table import device_shapes

TILE = 32  # rows / columns of a ttnn tile
GRID = (11, 10)  # Blackhole p150 compute grid with one column left for fast dispatch: 110 cores
WEIGHT_FORMATS = ("bfp8", "bf16")
CACHE_FORMATS = ("bf16", "bfp8")
ATTN_MODES = ("decode", "standard")
FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")


def _require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


@dataclasses.dataclass(frozen=True)
class ComputeConfig:
    """``ttnn.WormholeComputeKernelConfig`` (the class ttnn uses for Blackhole too)."""

    math_fidelity: str = "HiFi2"  # LoFi / HiFi2 / HiFi3 / HiFi4: multiplier mantissa bits per pass
    math_approx_mode: bool = False  # approximate SFPU functions (exp, recip)
    fp32_dest_acc_en: bool = True  # accumulate in fp32 destination registers
    packer_l1_acc: bool = True  # accumulate partial K blocks in L1

    def __post_init__(self):
        _require(self.math_fidelity in FIDELITIES, f"math_fidelity={self.math_fidelity!r}; expected one of {FIDELITIES}")

    def build(self, ns):
        return ns.WormholeComputeKernelConfig(
            math_fidelity=getattr(ns.MathFidelity, self.math_fidelity), math_approx_mode=self.math_approx_mode,
            fp32_dest_acc_en=self.fp32_dest_acc_en, packer_l1_acc=self.packer_l1_acc)


@dataclasses.dataclass(frozen=True)
class SDPAConfig:
    """``ttnn.SDPAProgramConfig`` (decode: only k_chunk_size matters; q_chunk_size is unused there)."""

    q_chunk_size: int
    k_chunk_size: int
    exp_approx_mode: bool = False
    max_cores_per_head_batch: int = 16
    grid: tuple[int, int] = GRID

    def __post_init__(self):
        for name in ("q_chunk_size", "k_chunk_size"):
            v = getattr(self, name)
            _require(v > 0 and v % TILE == 0, f"{name}={v} must be a positive multiple of {TILE}")
        _require(self.max_cores_per_head_batch > 0, f"max_cores_per_head_batch={self.max_cores_per_head_batch} must be > 0")

    def build(self, ns):
        return ns.SDPAProgramConfig(
            compute_with_storage_grid_size=ns.CoreCoord(*self.grid), q_chunk_size=self.q_chunk_size,
            k_chunk_size=self.k_chunk_size, exp_approx_mode=self.exp_approx_mode,
            max_cores_per_head_batch=self.max_cores_per_head_batch)


# The notes' tuned (in0_block_w, per_core_N) at alpamayo_tt widths (trace-timed, M = 64 rows).
TUNED_MATMULS = {(1536, 4096): (8, 2), (2048, 1536): (8, 1), (1536, 6144): (8, 2), (6144, 1536): (48, 1)}


def matmul_config(k: int, n: int, m: int, *, fused_activation: str | None = None) -> MatmulProgramConfig:
    """The notes' tuned 1D in0-multicast config for a tuned shape; otherwise in0_block_w = the largest
    divisor of the K tiles up to 8 and the fewest output tiles per core (a divisor of the N tiles) that
    fit the 110-core grid (``GraphConfig.check`` validates it)."""
    kt, nt = k // TILE, n // TILE
    if (k, n) in TUNED_MATMULS:
        bw, pn = TUNED_MATMULS[(k, n)]
    else:
        bw = max(d for d in range(1, min(8, kt) + 1) if kt % d == 0)
        pn = min(d for d in range(1, nt + 1) if nt % d == 0 and nt // d <= GRID[0] * GRID[1])
    return MatmulProgramConfig(in0_block_w=float(bw), per_core_N=float(pn), per_core_M=float(math.ceil(m / TILE)),
                               grid_x=GRID[0], grid_y=GRID[1], fused_activation=fused_activation)


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """Everything the graph needs besides the model geometry (validated against ``ExpertConfig``).

    Attributes:
      weights: 'bfp8' (default, as the port) or 'bf16' matmul weights.
      cache: format of the VLM KV caches ('bf16' as the port, or 'bfp8').
      attn_mode: 'decode' (flash-decode over the 8-user view) or 'standard' (FlashAttention-2 SDPA).
      k_chunk: K/V rows per SDPA chunk (128: the port's decode choice).
      q_chunk: query rows per chunk of the standard SDPA (32 in the notes' table).
      compute: compute-kernel config of the matmuls and SDPA.
    """

    weights: str = "bfp8"
    cache: str = "bf16"
    attn_mode: str = "decode"
    k_chunk: int = 128
    q_chunk: int = 32
    compute: ComputeConfig = dataclasses.field(default_factory=ComputeConfig)

    def __post_init__(self):
        _require(self.weights in WEIGHT_FORMATS, f"weights={self.weights!r}; expected one of {WEIGHT_FORMATS}")
        _require(self.cache in CACHE_FORMATS, f"cache={self.cache!r}; expected one of {CACHE_FORMATS}")
        _require(self.attn_mode in ATTN_MODES, f"attn_mode={self.attn_mode!r}; expected one of {ATTN_MODES}")

    @property
    def mask_format(self) -> str:
        """decode: the bfp4 mask of the notes; standard: bf16 (the notes' [1, 1, 64, Smax] bf16 mask)."""
        return "bfp4" if self.attn_mode == "decode" else "bf16"

    def mask_rows(self, cfg: ExpertConfig) -> int:
        """Mask rows: the G*T "heads" of one user in the decode view, or the T query rows."""
        return cfg.group * cfg.num_tokens if self.attn_mode == "decode" else cfg.num_tokens

    def check(self, cfg: ExpertConfig) -> None:
        """Raise ValueError if this graph cannot run ``cfg`` (tile alignment, chunking)."""
        T, H, smax = cfg.num_tokens, cfg.head_dim, cfg.max_seq_len
        _require(T % TILE == 0, f"num_tokens={T} must be a multiple of {TILE} (tile rows; fill_cache offset)")
        _require(H == TILE or H % (2 * TILE) == 0,
                 f"head_dim={H} must be {TILE} or a multiple of {2 * TILE} (rotary_embedding_hf)")
        _require(smax % self.k_chunk == 0, f"max_seq_len={smax} must be a multiple of k_chunk={self.k_chunk}")
        _require(T % self.q_chunk == 0 or self.attn_mode == "decode",
                 f"num_tokens={T} must be a multiple of q_chunk={self.q_chunk}")
        _require(cfg.hidden % TILE == 0 and cfg.ffn % TILE == 0, f"hidden={cfg.hidden} / ffn={cfg.ffn} must be tile multiples")
        shapes, hw = device_shapes(cfg), blackhole_p150a()
        for name, pc in self.matmuls(cfg).items():
            k, n = shapes[name]
            pc.validate(name, hw, M=T, K=k, N=n, weight_dtype=self.weights, fp32_dest_acc=self.compute.fp32_dest_acc_en)

    def sdpa(self) -> SDPAConfig:
        return SDPAConfig(q_chunk_size=self.q_chunk, k_chunk_size=self.k_chunk)

    def matmuls(self, cfg: ExpertConfig) -> dict[str, MatmulProgramConfig]:
        """Program config of every weight matmul of a layer, keyed by device tensor name."""
        shapes = device_shapes(cfg)
        return {name: matmul_config(*shapes[name], cfg.num_tokens, fused_activation="silu" if name == "w1" else None)
                for name in ("wqkv", "wo", "w1", "w3", "w2")}
