"""The one description of the Blackhole port (``Port``), composed of concern-sized parts declared once.

  ``precision``  the storage formats: the golden's own ``jaxref.precision.Precision`` (default
                 ``Precision.device()``, whose defaults are declared there only);
  ``attention``  the SDPA kernel and its program config (``SdpaProgramConfig``: mode, k_chunk,
                 q_chunk, cores_per_head, grid);
  ``matmuls``    the program config of each weight matmul (``MatmulConfigs``: a read-only mapping
                 keyed by the parameter table's device names ``wqkv``, ``wo``, ``w1``, ``w3``, ``w2``);
  ``compute``    the compute-kernel config (``ComputeConfig``: math fidelity, fp32 accumulation).

Its readers take the parts, never copies of their fields: the golden rounds with
``port.precision``; the device graph (``device.graph.TTExpert(..., port=port)``) builds its ttnn
configs with ``port.attention.build(ns)``, ``port.matmuls[name].build(ns)``, ``port.compute.build(ns)``;
the cost model's ``BlackholeConfig`` holds the port plus what is not the port (Smax, S, fusions).
A ``Port`` is a pytree (the matmul and SDPA knobs are its leaves, everything else is static), so
the cost model differentiates and vmaps through it and a change of any static choice is a new jit key.

Construction validates the static parts (formats, kernel, keys, fused activations); the knobs may
be relaxed reals or tracers there, as in ``MatmulProgramConfig``. ``check(cfg, hw)`` is the one
legality entry (integer knobs, the matmul and SDPA rules at ``cfg``'s shapes) that the device graph,
its emulation and the cost model all call. ``replace`` changes a part or, by its own name, a field of
one part (``port.replace(cache='bfp8', k_chunk=256.0)``).

Values of the port (seeds/EXPERT_NOTES.md): bfp8 weights, bf16 activations and gammas, bf16 VLM
cache, flash-decode SDPA over the 8-user view with a bfp4 mask (standard SDPA: bf16 mask), k_chunk
128, 16 cores per user, HiFi2, the notes' tuned 1D in0-multicast matmuls on the chip's grid.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping

import jax

from costmodel._pytree import pytree_dataclass, static_field
from costmodel.blackhole.program_config import MatmulProgramConfig
from costmodel.blackhole.sdpa_program_config import SdpaProgramConfig
from costmodel.hardware import GRID, TILE, Blackhole, blackhole_p150a
from jaxref.config import ExpertConfig
from jaxref.param_table import LAYER_PARAMS, LINEAR, device_names, device_shapes
from jaxref.precision import Precision
from jaxref.validation import check_choice, check_dtype
from jaxref.vocabulary import (
    ActivationFormat,
    AttnMode,
    CacheFormat,
    MaskFormat,
    MathFidelity,
    MatmulChoice,
    NormWeightFormat,
    WeightFormat,
)

# weight matmuls of a layer, in graph order, by their parameter-table device names
MATMULS = tuple(n for n in device_names() if any(s.device_name == n and s.kind == LINEAR for s in LAYER_PARAMS))
FUSED_ACTIVATION = {"w1": "silu"}  # the gate projection's SiLU runs fused into its matmul
# The notes' tuned (in0_block_w, per_core_N) per weight, trace-timed at alpamayo_tt widths ([K, N]
# below, M = 64 rows); another geometry falls back to ``fit_heuristic``.
TUNED = {"wqkv": ((1536, 4096), 8, 2), "wo": ((2048, 1536), 8, 1), "w1": ((1536, 6144), 8, 2),
         "w3": ((1536, 6144), 8, 2), "w2": ((6144, 1536), 48, 1)}
# the device's storage format of each precision field (the golden's Precision allows fp32 too)
DEVICE_FORMATS = {"weights": WeightFormat, "norm_weights": NormWeightFormat, "activations": ActivationFormat,
                  "cache": CacheFormat, "mask": MaskFormat}


def mask_dtype_for(attn_mode: str) -> str:
    """decode: the notes' bfp4 mask; standard: bf16 (the notes' [1, 1, 64, Smax] bf16 mask)."""
    check_choice("attn_mode", attn_mode, AttnMode)
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
    check_choice("matmuls", choice, MatmulChoice)
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


@jax.tree_util.register_pytree_node_class
class MatmulConfigs(Mapping):
    """Read-only mapping weight name -> ``MatmulProgramConfig``, in the order given; a pytree whose
    leaves are the configs' leaves (names are tree metadata)."""

    __slots__ = ("_configs",)

    def __init__(self, configs: Mapping[str, MatmulProgramConfig]):
        object.__setattr__(self, "_configs", dict(configs))

    def __setattr__(self, name, value):
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __getitem__(self, name: str) -> MatmulProgramConfig:
        return self._configs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self.items()) == dict(other.items())

    def __hash__(self) -> int:
        return hash(tuple(self._configs.items()))

    def __repr__(self) -> str:
        return f"MatmulConfigs({self._configs!r})"

    def replace(self, **changes: MatmulProgramConfig) -> MatmulConfigs:
        """These configs with some replaced by name."""
        unknown = set(changes) - set(self._configs)
        if unknown:
            raise ValueError(f"matmuls overrides {sorted(unknown)} unknown; expected names in {list(self._configs)}")
        return MatmulConfigs({**self._configs, **changes})

    def tree_flatten(self):
        return tuple(self._configs.values()), tuple(self._configs)

    @classmethod
    def tree_unflatten(cls, names, children):
        return cls(dict(zip(names, children)))


@dataclasses.dataclass(frozen=True)
class ComputeConfig:
    """``ttnn.WormholeComputeKernelConfig`` of the matmuls, norms and SDPA (the class ttnn uses for
    Blackhole too).

    Attributes:
      fidelity: math fidelity (``jaxref.vocabulary.MathFidelity``): multiplier passes per product.
      fp32_dest_acc_en: accumulate in fp32 destination registers (halves the subblock tiles).
      packer_l1_acc: accumulate partial K blocks in L1.
      math_approx_mode: approximate SFPU functions (exp, recip).
    """

    fidelity: str = "HiFi2"
    fp32_dest_acc_en: bool = True
    packer_l1_acc: bool = True
    math_approx_mode: bool = False

    def __post_init__(self):
        check_choice("fidelity", self.fidelity, MathFidelity)
        for name in ("fp32_dest_acc_en", "packer_l1_acc", "math_approx_mode"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}={getattr(self, name)!r} must be a bool")

    def build(self, ns):
        """The ttnn object (``ns``: ``ttnn`` or a ``device.emulation`` namespace)."""
        return ns.WormholeComputeKernelConfig(
            math_fidelity=getattr(ns.MathFidelity, self.fidelity), math_approx_mode=self.math_approx_mode,
            fp32_dest_acc_en=self.fp32_dest_acc_en, packer_l1_acc=self.packer_l1_acc)


@pytree_dataclass
class Port:
    """One setting of the port (see the module docstring).

    Attributes:
      matmuls: program config per weight (keys: ``MATMULS``, graph order); a plain mapping is
        converted to ``MatmulConfigs``.
      attention: the SDPA kernel and program config.
      precision: storage formats (weights, norm_weights, activations, cache, mask).
      compute: compute-kernel config (fidelity, destination accumulation).
    """

    matmuls: MatmulConfigs
    attention: SdpaProgramConfig = SdpaProgramConfig()
    precision: Precision = static_field(default=Precision.device())
    compute: ComputeConfig = static_field(default=ComputeConfig())

    def __post_init__(self):
        # static parts only: the knobs (leaves) may be tracers, relaxed reals or JAX's placeholders
        if not isinstance(self.precision, Precision):
            raise TypeError(f"precision is a {type(self.precision).__name__}; expected a jaxref.precision.Precision")
        for name, allowed in DEVICE_FORMATS.items():
            check_dtype(name, getattr(self.precision, name), allowed)
        for name, cls in (("attention", SdpaProgramConfig), ("compute", ComputeConfig)):
            if not isinstance(getattr(self, name), cls):
                raise TypeError(f"{name} is a {type(getattr(self, name)).__name__}; expected a {cls.__name__}")
        if not isinstance(self.matmuls, Mapping):
            raise TypeError(f"matmuls is a {type(self.matmuls).__name__}; expected a mapping name -> MatmulProgramConfig")
        if set(self.matmuls) != set(MATMULS):
            raise ValueError(f"matmuls has keys {sorted(self.matmuls)}; expected the weight matmuls {list(MATMULS)}")
        for name, pc in self.matmuls.items():
            if not isinstance(pc, MatmulProgramConfig):
                raise TypeError(f"matmuls[{name!r}] is a {type(pc).__name__}; expected a MatmulProgramConfig")
            if pc.fused_activation != FUSED_ACTIVATION.get(name):
                raise ValueError(f"matmuls[{name!r}].fused_activation={pc.fused_activation!r}; the graph "
                                 f"needs {FUSED_ACTIVATION.get(name)!r}")
        object.__setattr__(self, "matmuls", MatmulConfigs({n: self.matmuls[n] for n in MATMULS}))

    @classmethod
    def for_expert(cls, cfg: ExpertConfig, *, matmuls: str | Mapping[str, MatmulProgramConfig] = "tuned",
                   grid: tuple[int, int] = GRID, attn_mode: str = "decode", **changes) -> Port:
        """The port at ``cfg``'s geometry on a ``grid`` of cores: ``matmuls`` 'tuned' / 'default'
        (``port_matmuls``) or a mapping overriding some of the tuned ones; the mask format follows
        ``attn_mode`` (``mask_dtype_for``) unless given; ``changes`` as in ``replace``."""
        base = MatmulConfigs(port_matmuls(cfg, matmuls if isinstance(matmuls, str) else "tuned", grid=grid))
        if not isinstance(matmuls, str):
            base = base.replace(**matmuls)
        port = cls(matmuls=base, attention=SdpaProgramConfig(attn_mode=attn_mode, grid_x=grid[0], grid_y=grid[1]),
                   precision=Precision.device(mask=mask_dtype_for(attn_mode)))
        return port.replace(**changes)

    def replace(self, **changes) -> Port:
        """This port with some parts replaced (``attention=...``) or some fields of a part, each by
        its own name (``cache='bfp8'``, ``k_chunk=256.0``, ``attn_mode='standard'``, ``fidelity='HiFi4'``)."""
        own = {f.name for f in dataclasses.fields(self)}
        parts = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                 if dataclasses.is_dataclass(getattr(self, f.name))}
        new = {k: v for k, v in changes.items() if k in own}
        routed: dict[str, dict] = {}
        for key, value in changes.items():
            if key in own:
                continue
            owners = [p for p, part in parts.items() if key in {f.name for f in dataclasses.fields(part)}]
            if len(owners) != 1:
                raise ValueError(f"{key}={value!r}: expected a part of the port {sorted(own)} or a field of exactly "
                                 f"one part (found in {owners or 'none'})")
            routed.setdefault(owners[0], {})[key] = value
        for name, kw in routed.items():
            part = new.get(name, parts[name])
            new[name] = part.replace(**kw) if hasattr(part, "replace") else dataclasses.replace(part, **kw)
        return dataclasses.replace(self, **new)

    # ---- derived views ----------------------------------------------------------------------
    def mask_rows(self, cfg: ExpertConfig) -> int:
        """Mask rows of the device graph: the kernel's query rows (G*T decode, T standard)."""
        return self.attention.query_rows(group=cfg.group, num_tokens=cfg.num_tokens)

    def setting(self) -> dict:
        """Plain-Python summary of every part's fields, by their own names (reports, JSON): the
        knobs as floats; each matmul's three block sizes."""
        out = {}
        for f in dataclasses.fields(self):
            part = getattr(self, f.name)
            if f.name == "matmuls":
                out.update({n: {k: float(getattr(m, k)) for k in ("in0_block_w", "per_core_N", "per_core_M")}
                            for n, m in part.items()})
                continue
            for g in dataclasses.fields(part):
                v = getattr(part, g.name)
                out[g.name] = v if isinstance(v, (str, bool, int)) or v is None else float(v)
        return out

    def check(self, cfg: ExpertConfig, hw: Blackhole | None = None, *, smax=None, fold_heads: bool = False) -> None:
        """The one legality rule of a port: raise ValueError unless every matmul config is legal at
        ``cfg``'s shapes on ``hw`` (default p150a) and the SDPA config runs over a cache of ``smax``
        rows (default ``cfg.max_seq_len``; ``fold_heads``: the cost model's folded standard SDPA)."""
        hw = blackhole_p150a() if hw is None else hw
        prec = self.precision
        for name, (M, K, N) in matmul_shapes(cfg).items():
            self.matmuls[name].validate(name, hw, M=M, K=K, N=N, weight_dtype=prec.weights,
                                        act_dtype=prec.activations, fp32_dest_acc=self.compute.fp32_dest_acc_en)
        self.attention.validate(hw, smax=cfg.max_seq_len if smax is None else smax, num_tokens=cfg.num_tokens,
                                group=cfg.group, head_dim=cfg.head_dim, kv_dtype=prec.cache, mask_dtype=prec.mask,
                                act_dtype=prec.activations, fold_heads=fold_heads)


__all__ = ["DEVICE_FORMATS", "FUSED_ACTIVATION", "MATMULS", "TUNED", "ComputeConfig", "MatmulConfigs", "Port",
           "fit_heuristic", "mask_dtype_for", "matmul_shapes", "port_matmuls"]
