"""The one description of the Blackhole port (``Port``): formats, attention, SDPA chunking, matmul configs.

Everything else is derived from a ``Port``:

  * the golden's precision policy: ``port.precision()`` (a ``jaxref.precision.Precision``; jaxref
    itself imports nothing from here, and ``Precision.device()`` is tested equal to
    ``Port.for_expert(cfg).precision()``);
  * the device graph's configuration: ``device.configs.GraphConfig.from_port(port)`` (matmul program
    configs, SDPA program config, compute-kernel fidelity, mask format and rows);
  * the cost model's configuration: ``costmodel.blackhole.graph.BlackholeConfig.from_port(port, ...)``.

Matmul program configs are keyed by the parameter table's device tensor names
(``jaxref.param_table``: ``wqkv``, ``wo``, ``w1``, ``w3``, ``w2``) and are the project's one type
``MatmulProgramConfig``; a ``Port`` is built for one geometry (``Port.for_expert(cfg)``) and
``check(cfg, hw)`` applies the one legality rule to each matmul at that geometry's shapes.

Values of the port (seeds/EXPERT_NOTES.md): bfp8 weights, bf16 activations and gammas, bf16 VLM
cache, flash-decode SDPA over the 8-user view with a bfp4 mask (standard SDPA: bf16 mask), k_chunk
128, 16 cores per user, HiFi2, the notes' tuned 1D in0-multicast matmuls on the 11x10 grid.
"""

from __future__ import annotations

import dataclasses
import math
import types
from collections.abc import Mapping

from costmodel.blackhole.ops import ACT_DTYPES, KV_DTYPES, MASK_DTYPES, WEIGHT_DTYPES, check_dtype
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.hardware import FIDELITY_PASSES, TILE, Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.param_table import LAYER_PARAMS, LINEAR, device_names, device_shapes
from jaxref.precision import Precision

ATTN_MODES = ("decode", "standard")
# weight matmuls of a layer, in graph order, by their parameter-table device names
MATMULS = tuple(n for n in device_names() if any(s.device_name == n and s.kind == LINEAR for s in LAYER_PARAMS))
FUSED_ACTIVATION = {"w1": "silu"}  # the gate projection's SiLU runs fused into its matmul
GRID = (11, 10)  # p150a compute grid with one column left for fast dispatch: 110 cores
# The notes' tuned (in0_block_w, per_core_N) per weight, trace-timed at alpamayo_tt widths ([K, N]
# below, M = 64 rows); another geometry falls back to ``fit_heuristic``.
TUNED = {"wqkv": ((1536, 4096), 8, 2), "wo": ((2048, 1536), 8, 1), "w1": ((1536, 6144), 8, 2),
         "w3": ((1536, 6144), 8, 2), "w2": ((6144, 1536), 48, 1)}
MATMUL_CHOICES = ("tuned", "default")


def mask_dtype_for(attn_mode: str) -> str:
    """decode: the notes' bfp4 mask; standard: bf16 (the notes' [1, 1, 64, Smax] bf16 mask)."""
    if attn_mode not in ATTN_MODES:
        raise ValueError(f"attn_mode={attn_mode!r} unknown; expected one of {list(ATTN_MODES)}")
    return "bfp4" if attn_mode == "decode" else "bf16"


def matmul_shapes(cfg: ExpertConfig) -> dict[str, tuple[int, int, int]]:
    """(M, K, N) of each weight matmul: M = T tokens, the weight's device shape [K, N] (param table)."""
    shapes = device_shapes(cfg)
    return {name: (cfg.num_tokens, *shapes[name]) for name in MATMULS}


def fit_heuristic(*, M: int, K: int, N: int, grid: tuple[int, int] = GRID,
                  fused_activation: str | None = None) -> MatmulProgramConfig:
    """1D in0-multicast config for an untuned shape: in0_block_w = the largest divisor of K/32 up
    to 8, per_core_N = the smallest divisor of N/32 whose split fits the grid."""
    kt, nt = K // TILE, N // TILE
    bw = max(d for d in range(1, min(8, kt) + 1) if kt % d == 0)
    pn = min(d for d in range(1, nt + 1) if nt % d == 0 and nt // d <= grid[0] * grid[1])
    return MatmulProgramConfig(float(bw), float(pn), float(math.ceil(M / TILE)), grid_x=grid[0], grid_y=grid[1],
                               fused_activation=fused_activation)


def port_matmuls(cfg: ExpertConfig, choice: str = "tuned", *, grid: tuple[int, int] = GRID
                 ) -> dict[str, MatmulProgramConfig]:
    """Program config of every weight matmul: ``'tuned'`` (the notes' configs where the shape is the
    notes', else ``fit_heuristic``) or ``'default'`` (ttnn's own heuristic, no program config)."""
    if choice not in MATMUL_CHOICES:
        raise ValueError(f"matmuls={choice!r} unknown; expected one of {list(MATMUL_CHOICES)}")
    out = {}
    for name, (M, K, N) in matmul_shapes(cfg).items():
        act = FUSED_ACTIVATION.get(name)
        if choice == "default":
            out[name] = MatmulProgramConfig.default_heuristic(M=M, K=K, N=N, grid_x=grid[0], grid_y=grid[1],
                                                              fused_activation=act)
        elif TUNED[name][0] == (K, N):
            _, bw, pn = TUNED[name]
            out[name] = MatmulProgramConfig(float(bw), float(pn), float(M // TILE), grid_x=grid[0], grid_y=grid[1],
                                            fused_activation=act)
        else:
            out[name] = fit_heuristic(M=M, K=K, N=N, grid=grid, fused_activation=act)
    return out


@dataclasses.dataclass(frozen=True)
class Port:
    """One setting of the port (frozen; formats and knobs validated on construction).

    Attributes:
      matmuls: program config per weight (keys: ``MATMULS``), read-only mapping.
      weights: matmul weight format ('bfp8' / 'bf16' / 'bfp4'); activations: op outputs ('bf16').
      norm_weights: RMSNorm gammas ('bf16' on device).
      cache: format of the VLM KV caches ('bf16' / 'bfp8').
      mask: format of the additive mask (``mask_dtype_for(attn_mode)`` unless given).
      attn_mode: 'decode' (flash-decode over the 8-user view) or 'standard' (SDPA over the q heads).
      k_chunk: K/V rows per SDPA chunk; q_chunk: query rows per chunk (standard SDPA);
      cores_per_head: ``max_cores_per_head_batch`` of the decode SDPA.
      fidelity: math fidelity of matmuls and SDPA (compute-kernel config).
    """

    matmuls: Mapping[str, MatmulProgramConfig]
    weights: str = "bfp8"
    activations: str = "bf16"
    norm_weights: str = "bf16"
    cache: str = "bf16"
    mask: str = "bfp4"
    attn_mode: str = "decode"
    k_chunk: int = 128
    q_chunk: int = 32
    cores_per_head: int = 16
    fidelity: str = "HiFi2"

    def __post_init__(self):
        check_dtype("weights", self.weights, WEIGHT_DTYPES)
        check_dtype("activations", self.activations, ACT_DTYPES)
        check_dtype("norm_weights", self.norm_weights, ("bf16",))
        check_dtype("cache", self.cache, KV_DTYPES)
        check_dtype("mask", self.mask, MASK_DTYPES)
        check_dtype("fidelity", self.fidelity, tuple(FIDELITY_PASSES))
        mask_dtype_for(self.attn_mode)  # names the bad mode
        for name in ("k_chunk", "q_chunk"):
            v = getattr(self, name)
            if not (isinstance(v, int) and v > 0 and v % TILE == 0):
                raise ValueError(f"{name}={v!r} must be a positive multiple of {TILE}")
        if not (isinstance(self.cores_per_head, int) and 1 <= self.cores_per_head <= 16):
            raise ValueError(f"cores_per_head={self.cores_per_head!r} must be an integer in [1, 16]")
        if set(self.matmuls) != set(MATMULS):
            raise ValueError(f"matmuls has keys {sorted(self.matmuls)}; expected the weight matmuls {list(MATMULS)}")
        for name, pc in self.matmuls.items():
            if not isinstance(pc, MatmulProgramConfig):
                raise TypeError(f"matmuls[{name!r}] is a {type(pc).__name__}; expected a MatmulProgramConfig")
            if pc.fused_activation != FUSED_ACTIVATION.get(name):
                raise ValueError(f"matmuls[{name!r}].fused_activation={pc.fused_activation!r}; the graph "
                                 f"needs {FUSED_ACTIVATION.get(name)!r}")
        object.__setattr__(self, "matmuls", types.MappingProxyType({n: self.matmuls[n] for n in MATMULS}))

    def __hash__(self):
        return hash((tuple(self.matmuls.items()), *(getattr(self, f.name) for f in dataclasses.fields(self)[1:])))

    def __eq__(self, other):
        return isinstance(other, Port) and dict(self.matmuls) == dict(other.matmuls) and all(
            getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self)[1:])

    @classmethod
    def for_expert(cls, cfg: ExpertConfig, *, matmuls: str | Mapping[str, MatmulProgramConfig] = "tuned",
                   grid: tuple[int, int] = GRID, attn_mode: str = "decode", mask: str | None = None,
                   **fields) -> Port:
        """The port at ``cfg``'s geometry: ``matmuls`` 'tuned' / 'default' (``port_matmuls``) or a
        mapping overriding some of the tuned ones; the mask format follows ``attn_mode`` unless given."""
        base = port_matmuls(cfg, matmuls if isinstance(matmuls, str) else "tuned", grid=grid)
        if not isinstance(matmuls, str):
            unknown = set(matmuls) - set(MATMULS)
            if unknown:
                raise ValueError(f"matmuls overrides {sorted(unknown)} unknown; expected names in {list(MATMULS)}")
            base.update(matmuls)
        return cls(matmuls=base, attn_mode=attn_mode, mask=mask_dtype_for(attn_mode) if mask is None else mask,
                   **fields)

    def replace(self, **changes) -> Port:
        return dataclasses.replace(self, **changes)

    # ---- derived views ----------------------------------------------------------------------
    def precision(self) -> Precision:
        """The golden's rounding policy for this port (fp32 math between the rounding points)."""
        return Precision(name=f"device(w={self.weights},kv={self.cache},mask={self.mask})", weights=self.weights,
                         norm_weights=self.norm_weights, activations=self.activations, cache=self.cache,
                         mask=self.mask)

    def mask_rows(self, cfg: ExpertConfig) -> int:
        """Mask rows: the G*T "heads" of one user in the decode view, or the T query rows."""
        return cfg.group * cfg.num_tokens if self.attn_mode == "decode" else cfg.num_tokens

    def check(self, cfg: ExpertConfig, hw: Blackhole | None = None) -> None:
        """Raise ValueError if a matmul config is illegal at ``cfg``'s shapes on ``hw`` (default p150a)
        or the SDPA chunking does not fit the cache (k_chunk | Smax; standard: q_chunk | T)."""
        hw = blackhole_p150a() if hw is None else hw
        for name, (M, K, N) in matmul_shapes(cfg).items():
            self.matmuls[name].validate(name, hw, M=M, K=K, N=N, weight_dtype=self.weights,
                                        act_dtype=self.activations)
        if cfg.max_seq_len % self.k_chunk:
            raise ValueError(f"max_seq_len={cfg.max_seq_len} must be a multiple of k_chunk={self.k_chunk}")
        if self.attn_mode == "standard" and cfg.num_tokens % self.q_chunk:
            raise ValueError(f"num_tokens={cfg.num_tokens} must be a multiple of q_chunk={self.q_chunk}")


__all__ = ["ATTN_MODES", "FUSED_ACTIVATION", "GRID", "MATMULS", "MATMUL_CHOICES", "TUNED", "Port", "fit_heuristic",
           "mask_dtype_for", "matmul_shapes", "port_matmuls"]
