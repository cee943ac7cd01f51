"""Per-op configuration of the expert's ttnn graph as typed, validated dataclasses.

Each config builds the real ttnn object (or the emulation's stand-in with the same field names)
with ``build(ns)``, where ``ns`` is the op namespace (``ttnn`` or a ``device.emulation`` namespace).
Matmuls use the one program-config type and legality rule of the project,
``costmodel.blackhole.program_config.MatmulProgramConfig``.
Values come from the one port description ``costmodel.blackhole.port.Port`` (``GraphConfig.port``,
``GraphConfig.from_port``): tuned 1D-multicast matmuls on the 11x10 grid, flash-decode SDPA with
k_chunk 128, 16 cores per user (``seeds/EXPERT_NOTES.md``).
"""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.port import GRID, Port, mask_dtype_for, matmul_shapes
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.hardware import blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.numerics.formats import TILE  # rows / columns of a ttnn tile
from jaxref.validation import check_choice, require

WEIGHT_FORMATS = ("bfp8", "bf16")
CACHE_FORMATS = ("bf16", "bfp8")
ATTN_MODES = ("decode", "standard")
FIDELITIES = ("LoFi", "HiFi2", "HiFi3", "HiFi4")


@dataclasses.dataclass(frozen=True)
class ComputeConfig:
    """``ttnn.WormholeComputeKernelConfig`` (the class ttnn uses for Blackhole too)."""

    math_fidelity: str = "HiFi2"  # LoFi / HiFi2 / HiFi3 / HiFi4: multiplier mantissa bits per pass
    math_approx_mode: bool = False  # approximate SFPU functions (exp, recip)
    fp32_dest_acc_en: bool = True  # accumulate in fp32 destination registers
    packer_l1_acc: bool = True  # accumulate partial K blocks in L1

    def __post_init__(self):
        check_choice("math_fidelity", self.math_fidelity, FIDELITIES)

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
            require(v > 0 and v % TILE == 0, f"{name}={v} must be a positive multiple of {TILE}")
        require(self.max_cores_per_head_batch > 0, f"max_cores_per_head_batch={self.max_cores_per_head_batch} must be > 0")

    def build(self, ns):
        return ns.SDPAProgramConfig(
            compute_with_storage_grid_size=ns.CoreCoord(*self.grid), q_chunk_size=self.q_chunk_size,
            k_chunk_size=self.k_chunk_size, exp_approx_mode=self.exp_approx_mode,
            max_cores_per_head_batch=self.max_cores_per_head_batch)


@dataclasses.dataclass(frozen=True)
class GraphConfig:
    """Everything the graph needs besides the model geometry: a view of the port description
    (``costmodel.blackhole.port.Port``), from which every value below is derived (``port(cfg)``).

    Attributes:
      weights: 'bfp8' (default, as the port) or 'bf16' matmul weights.
      cache: format of the VLM KV caches ('bf16' as the port, or 'bfp8').
      attn_mode: 'decode' (flash-decode over the 8-user view) or 'standard' (FlashAttention-2 SDPA).
      k_chunk: K/V rows per SDPA chunk (128: the port's decode choice).
      q_chunk: query rows per chunk of the standard SDPA (32 in the notes' table).
      cores_per_head: ``max_cores_per_head_batch`` of the decode SDPA (16).
      compute: compute-kernel config of the matmuls and SDPA.
      matmul_overrides: (name, MatmulProgramConfig) pairs replacing the port's tuned configs.
    """

    weights: str = "bfp8"
    cache: str = "bf16"
    attn_mode: str = "decode"
    k_chunk: int = 128
    q_chunk: int = 32
    cores_per_head: int = 16
    compute: ComputeConfig = dataclasses.field(default_factory=ComputeConfig)
    matmul_overrides: tuple[tuple[str, MatmulProgramConfig], ...] = ()

    def __post_init__(self):
        check_choice("weights", self.weights, WEIGHT_FORMATS)
        check_choice("cache", self.cache, CACHE_FORMATS)
        check_choice("attn_mode", self.attn_mode, ATTN_MODES)

    @classmethod
    def from_port(cls, port: Port, *, compute: ComputeConfig | None = None) -> GraphConfig:
        """The graph configuration that runs ``port`` (its matmul configs pinned as overrides)."""
        require(port.mask == mask_dtype_for(port.attn_mode),
                 f"port mask={port.mask!r}: the device graph uploads a {mask_dtype_for(port.attn_mode)} mask in "
                 f"attn_mode={port.attn_mode!r}")
        compute = ComputeConfig(math_fidelity=port.fidelity) if compute is None else \
            dataclasses.replace(compute, math_fidelity=port.fidelity)
        return cls(weights=port.weights, cache=port.cache, attn_mode=port.attn_mode, k_chunk=port.k_chunk,
                   q_chunk=port.q_chunk, cores_per_head=port.cores_per_head, compute=compute,
                   matmul_overrides=tuple(port.matmuls.items()))

    def port(self, cfg: ExpertConfig) -> Port:
        """The port description this graph runs at ``cfg``'s geometry."""
        return Port.for_expert(cfg, matmuls=dict(self.matmul_overrides), grid=GRID, attn_mode=self.attn_mode,
                               weights=self.weights, cache=self.cache, k_chunk=self.k_chunk, q_chunk=self.q_chunk,
                               cores_per_head=self.cores_per_head, fidelity=self.compute.math_fidelity)

    @property
    def mask_format(self) -> str:
        """decode: the bfp4 mask of the notes; standard: bf16 (the notes' [1, 1, 64, Smax] bf16 mask)."""
        return mask_dtype_for(self.attn_mode)

    def mask_rows(self, cfg: ExpertConfig) -> int:
        """Mask rows: the G*T "heads" of one user in the decode view, or the T query rows."""
        return self.port(cfg).mask_rows(cfg)

    def check(self, cfg: ExpertConfig) -> None:
        """Raise ValueError if this graph cannot run ``cfg`` (tile alignment, chunking, matmul legality)."""
        T, H = cfg.num_tokens, cfg.head_dim
        require(T % TILE == 0, f"num_tokens={T} must be a multiple of {TILE} (tile rows; fill_cache offset)")
        require(H == TILE or H % (2 * TILE) == 0,
                 f"head_dim={H} must be {TILE} or a multiple of {2 * TILE} (rotary_embedding_hf)")
        require(cfg.hidden % TILE == 0 and cfg.ffn % TILE == 0, f"hidden={cfg.hidden} / ffn={cfg.ffn} must be tile multiples")
        port = self.port(cfg)
        port.check(cfg)
        for name, (M, K, N) in matmul_shapes(cfg).items():  # the compute config's destination-register limit
            port.matmuls[name].validate(name, blackhole_p150a(), M=M, K=K, N=N, weight_dtype=self.weights,
                                        fp32_dest_acc=self.compute.fp32_dest_acc_en)

    def sdpa(self) -> SDPAConfig:
        return SDPAConfig(q_chunk_size=self.q_chunk, k_chunk_size=self.k_chunk,
                          max_cores_per_head_batch=self.cores_per_head)

    def matmuls(self, cfg: ExpertConfig) -> dict[str, MatmulProgramConfig]:
        """Program config of every weight matmul of a layer, keyed by device tensor name."""
        return dict(self.port(cfg).matmuls)
