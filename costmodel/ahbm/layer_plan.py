"""Placement of one transformer decoder layer on the AHBM mesh: the plain-data plan that both the
analytic layer model (``costmodel.ahbm.layer``) and its event simulation
(``costmodel.ahbm.sim.layer``) read, as the attention model and simulation both read
``jaxref.attention``'s plans. It holds no timing: only who computes what, how many bytes and
element-ops each PE / CUBE / link gets, and the HBM capacity check.

Mesh: ``sips`` SIPs, each a ``mesh_y`` x ``mesh_x`` mesh of CUBEs with ``pes_per_cube`` PEs
(``costmodel.hardware.AHBM``). Weights are bf16 (2 B), activations bf16, GEMM accumulators fp32.

Placement (Megatron-LM tensor parallelism, Shoeybi et al. 2019, over every CUBE of every SIP):

* QKV [D, (N + 2K) H] column-parallel over all PEs (kv head k's Q / K / V columns, (G + 2) H, on
  the PEs of its CUBE Group, the C CUBEs that hold head k's KV cache and run its attention, when
  the groups cover the mesh). Every CUBE holds the layer input x [M, D] (after the previous
  all-reduce).
* after QKV, a **group all-gather** of the head's (G + 2) H outputs over the group's sub-mesh
  (decode replicates Q on every rank, ADR-0060 section 4; prefill needs head i's Q on CUBE i and
  the K / V blocks on their owners: an all-gather is an upper bound of that all-to-all).
* attention: the ADR-0060 kernel as ``costmodel.ahbm`` models it (decode-SP: C = the group's
  CUBEs, P = 8; prefill-SP: the ring, C = G), the K groups in parallel; when K x C exceeds the
  mesh's CUBEs the groups run in ``waves``.
* after attention, a group all-gather of the head's G H outputs (decode: from the group root;
  prefill: one head per CUBE) so each CUBE holds the rows of W_o it multiplies.
* W_o [N H, D] row-parallel: each CUBE owns N H / CUBEs rows (its group's heads), its P PEs split
  the D columns; partial sums [M, D] -> **all-reduce** over all CUBEs.
* FFN gate + up [D, 2F] column-parallel over all PEs (F / PEs columns of each, SwiGLU local);
  down [F, D] row-parallel like W_o (the CUBE's F rows are the ones its PEs produced);
  all-reduce.
* norms, RoPE, SwiGLU and residual adds are element-ops on MATH, spread over the PEs that hold the
  data (norms / residuals on the all-reduce's shards: every PE gets elements / PEs).

All-reduce of V bytes per CUBE (bandwidth-optimal rings, Patarasuk & Yuan 2009, dimension by
dimension as on a 2D mesh / torus): reduce-scatter along the mesh rows (ring of ``mesh_x``), then
the columns (``mesh_y``), then across SIPs (ring of ``sips`` over UCIe: CUBE (r, c) of SIP i with
CUBE (r, c) of SIP i + 1), then all-gather back (SIPs, columns, rows). A ring over a line of L
CUBEs closes with an (L - 1)-hop edge on the opposite-direction links (full duplex, so no link is
shared). A group all-gather runs the same row / column rings on the group's sub-mesh.

GEMM on one PE (M rows, inner k, n columns): the PE streams its weight slice from its HBM in
sub-tiles of ``gemm_tile_k`` rows, with the activations' matching sub-tile, through the engine;
M is processed in ``m_block``-row blocks whose fp32 accumulators fit half the TCM (the weights are
re-streamed once per block); outputs are written back to HBM (bf16). Decode's M = batch pads to
the engine's ``gemm_tile_m`` rows.

Capacity: every CUBE holds its 1 / CUBEs share of the weights and of the KV cache (K V heads x S x
H x 2 (K and V) x 2 B x layers x batch), the layer input x [M, D] and its FFN hidden shard.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal

from costmodel._pytree import pytree_dataclass
from costmodel.ahbm.config import MODELS, AhbmConfig, is_tile
from costmodel.hardware import AHBM, spec
from jaxref.attention.reduce import cube_mesh_shape
from jaxref.config import ExpertConfig
from jaxref.validation import check_choice, choices_of, require

Phase = Literal["decode", "prefill"]
PHASES = choices_of(Phase)
SIP_COUNTS = (1, 2, 4)  # 1, a pair, a 2 x 2 ring (ADR-0060 section B: 4 SIPs for the full model)
WEIGHT_BYTES = 2  # bf16 weights
ACT_BYTES = 2  # bf16 activations (GEMM inputs / outputs, collective payloads)
ACC_BYTES = 4  # fp32 GEMM accumulators in TCM
# element-ops per element on MATH (what the kernel text of each op does per element)
RMSNORM_OPS = 4  # square, sum, x * rsqrt(mean), * weight
RESIDUAL_OPS = 1  # add
ROPE_OPS = 3  # x * cos, rotate(x) * sin, add
SWIGLU_OPS = 5  # silu(g) = g / (1 + exp(-g)): exp, add, divide; * g; * up


@pytree_dataclass
class MeshSpec:
    """What the layer model needs beyond ``costmodel.hardware.AHBM``: the SIP-to-SIP UCIe link count
    (the HBM capacity is ``AHBM.hbm_bytes_per_cube``)."""

    sip_links: int = spec(
        "links", "[assumed] 4 UCIe links per direction between adjacent SIPs: the facing edges' CUBEs (one per "
        "mesh row) each use one of their UCIe ports (ADR-0060: up to 4 per CUBE, N/E/W/S); SIPs form a ring "
        "(2 SIPs: one pair, 4 SIPs: a 2 x 2 ring)", static=True, default=4)


@dataclasses.dataclass(frozen=True)
class LayerShape:
    """Decoder-layer geometry: D width, N q heads, K kv heads, H head_dim, F ffn, L layers;
    ``attention`` names the ``costmodel.ahbm.config.MODELS`` geometry of its attention."""

    name: str
    width: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    layers: int
    attention: str

    def __post_init__(self):
        for f in ("width", "heads", "kv_heads", "head_dim", "ffn", "layers"):
            v = getattr(self, f)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{f}={v!r} must be a positive int")
        check_choice("attention", self.attention, MODELS)
        geom = MODELS[self.attention][0]
        require((geom.num_heads, geom.num_kv_heads, geom.head_dim) == (self.heads, self.kv_heads, self.head_dim),
                f"attention={self.attention!r} has (N, K, H) = {(geom.num_heads, geom.num_kv_heads, geom.head_dim)}, "
                f"expected the layer's {(self.heads, self.kv_heads, self.head_dim)}")

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    @property
    def weight_params(self) -> int:
        """Weights of one layer: QKV, W_o, FFN gate / up / down (norm weights are negligible)."""
        D, H = self.width, self.head_dim
        return D * (self.heads + 2 * self.kv_heads) * H + self.heads * H * D + 3 * D * self.ffn

    @classmethod
    def llama3_70b(cls) -> LayerShape:
        """ADR-0060's model (Llama-3-70B): D 8192, 64 / 8 heads, H 128, F 28672, 80 layers."""
        return cls("llama3_70b", 8192, 64, 8, 128, 28672, 80, "llama3_70b")

    @classmethod
    def alpamayo(cls) -> LayerShape:
        """The Alpamayo action expert (``jaxref.config.ExpertConfig.alpamayo_tt``)."""
        e = ExpertConfig.alpamayo_tt()
        return cls("alpamayo", e.hidden, e.num_heads, e.num_kv_heads, e.head_dim, e.ffn, e.num_layers, "alpamayo")


SHAPES = {"llama3_70b": LayerShape.llama3_70b, "alpamayo": LayerShape.alpamayo}


@dataclasses.dataclass(frozen=True)
class LayerConfig:
    """One operating point: model, phase, context S, batch B (decode only), SIPs, attention knobs.

    decode: B sequences each generate one token against S cached keys (GEMM rows M = B);
    prefill: one prompt of S tokens (M = S). ``attn_tile`` None: chosen by the analytic model
    (``costmodel.ahbm.layer.resolve``)."""

    phase: Phase
    seq_len: int
    batch: int = 1
    sips: int = 4
    model: str = "llama3_70b"
    attn_tile: int | None = None
    pipeline: str = "opt3"

    def __post_init__(self):
        check_choice("phase", self.phase, Phase)
        check_choice("model", self.model, SHAPES)
        check_choice("sips", self.sips, SIP_COUNTS)
        for f in ("seq_len", "batch"):
            v = getattr(self, f)
            require(isinstance(v, int) and not isinstance(v, bool) and v > 0, f"{f}={v!r} must be a positive int")
        if self.phase == "prefill":
            require(self.batch == 1, f"batch={self.batch} must be 1 for phase='prefill' (one prompt of seq_len tokens)")
            G = self.shape.group
            require(self.seq_len >= G, f"seq_len={self.seq_len} must be >= G = {G} for the prefill ring")
        if self.attn_tile is not None:
            require(is_tile(self.attn_tile), f"attn_tile={self.attn_tile!r} must be a legal attention TILE "
                                             "(32 or a multiple of 64 up to 4096)")

    @property
    def shape(self) -> LayerShape:
        return SHAPES[self.model]()

    @property
    def rows(self) -> int:
        """M: GEMM rows (tokens) of one layer step."""
        return self.batch if self.phase == "decode" else self.seq_len

    def replace(self, **kw) -> LayerConfig:
        return dataclasses.replace(self, **kw)


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One PE's share of a GEMM: out [rows, n] = A [rows, k] . W [k, n], rows in m_block blocks."""

    name: str
    rows: int
    k: int
    n: int
    m_block: int

    @property
    def blocks(self) -> int:
        return -(-self.rows // self.m_block)


@dataclasses.dataclass(frozen=True)
class Collective:
    """A collective of ``nbytes`` per CUBE over rings: ``lines`` is ((axis, length), ...) in order,
    axis 'row' / 'col' (CUBE NOC) or 'sip' (UCIe); ``kind`` 'all_reduce' (reduce-scatter along the
    lines, then all-gather back in reverse) or 'all_gather' (each CUBE starts with nbytes / CUBEs)."""

    name: str
    kind: str
    nbytes: float
    lines: tuple
    pes_per_cube: int

    @property
    def members(self) -> int:
        return math.prod(length for _, length in self.lines)


@dataclasses.dataclass(frozen=True)
class Elementwise:
    """Element-ops on the MATH engine of the busiest PE."""

    name: str
    elem_ops: float


@dataclasses.dataclass(frozen=True)
class Attention:
    """The attention kernel's configuration, run ``waves`` times (groups beyond the mesh), on a
    spec whose SIP budget is ``sips``."""

    name: str
    cfg: AhbmConfig
    waves: int
    sips: int


@dataclasses.dataclass(frozen=True)
class LayerPlan:
    cfg: LayerConfig
    parts: tuple
    capacity: dict

    @property
    def shape(self) -> LayerShape:
        return self.cfg.shape


def _m_block(hw: AHBM, rows: int, n: int) -> int:
    """Rows per M block: fp32 accumulators of a block fit half the TCM (the other half holds the
    streamed operand sub-tiles), a multiple of the engine's M tile, at most M padded."""
    tm = int(hw.gemm_tile_m)
    fit = int(float(hw.tcm_bytes_per_pe) / 2 // (ACC_BYTES * n) // tm) * tm
    require(fit >= tm, f"a {tm}-row block of {n} fp32 accumulators does not fit half of tcm_bytes_per_pe="
                       f"{float(hw.tcm_bytes_per_pe):.0f}")
    return min(fit, -(-rows // tm) * tm)


def capacity(cfg: LayerConfig, hw: AHBM) -> dict:
    """Bytes per CUBE the operating point needs (weights, KV cache, activations) vs the CUBE's HBM."""
    s = cfg.shape
    cubes = cfg.sips * hw.cubes
    weights = s.layers * s.weight_params * WEIGHT_BYTES
    kv = s.layers * cfg.batch * cfg.seq_len * s.kv_heads * s.head_dim * 2 * ACT_BYTES
    act = cfg.rows * s.width * ACT_BYTES + cfg.rows * 2 * s.ffn * ACT_BYTES / cubes
    need = (weights + kv) / cubes + act
    return {"weights_bytes": float(weights), "kv_bytes": float(kv), "activation_bytes_per_cube": float(act),
            "need_bytes_per_cube": float(need), "hbm_bytes_per_cube": float(hw.hbm_bytes_per_cube),
            "fits": bool(need <= float(hw.hbm_bytes_per_cube))}


def attention_part(cfg: LayerConfig, hw: AHBM) -> Attention:
    """The attention kernel of the operating point (``attn_tile`` must be set)."""
    require(cfg.attn_tile is not None, "attn_tile=None: resolve the attention tile first (costmodel.ahbm.layer.resolve)")
    s = cfg.shape
    cubes = cfg.sips * hw.cubes
    if cfg.phase == "decode":
        C = 1 << max(0, min(int(math.log2(max(1, cubes // s.kv_heads))), int(math.log2(hw.cubes))))
        acfg = AhbmConfig("decode_sp", cfg.seq_len, batch=cfg.batch, tile=cfg.attn_tile, cubes=C,
                          pes=hw.pes_per_cube, pipeline=cfg.pipeline, model=s.attention)
    else:
        C = s.group
        acfg = AhbmConfig("prefill_sp", cfg.seq_len, tile=cfg.attn_tile, cubes=C, pes=hw.pes_per_cube,
                          pipeline=cfg.pipeline, model=s.attention)
    waves = -(-s.kv_heads * C // cubes)
    return Attention("attention", acfg, waves, max(cfg.sips, -(-s.kv_heads * C // hw.cubes)))


def check_capacity(cfg: LayerConfig, hw: AHBM) -> dict:
    """``capacity(cfg, hw)``, or a ValueError saying what the point needs per CUBE where it does not fit
    (independent of the attention tile: checked before one is chosen, ``costmodel.ahbm.layer``)."""
    cap = capacity(cfg, hw)
    if not cap["fits"]:
        raise ValueError(
            f"capacity: model={cfg.model!r} phase={cfg.phase!r} seq_len={cfg.seq_len} batch={cfg.batch} on sips="
            f"{cfg.sips} needs {cap['need_bytes_per_cube'] / 1e9:.1f} GB per CUBE (weights "
            f"{cap['weights_bytes'] / 1e9:.0f} GB + KV {cap['kv_bytes'] / 1e9:.0f} GB over {cfg.sips * hw.cubes} "
            f"CUBEs, activations {cap['activation_bytes_per_cube'] / 1e9:.2f} GB), more than hbm_bytes_per_cube="
            f"{cap['hbm_bytes_per_cube'] / 1e9:.0f} GB; use more SIPs or a shorter context / smaller batch")
    return cap


def plan(cfg: LayerConfig, hw: AHBM, mesh: MeshSpec | None = None) -> LayerPlan:
    """The layer's parts in execution order; raises ValueError when it does not fit the HBM."""
    mesh = MeshSpec() if mesh is None else mesh
    cap = check_capacity(cfg, hw)
    s, M, P = cfg.shape, cfg.rows, hw.pes_per_cube
    cubes = cfg.sips * hw.cubes
    pes = cubes * P
    D, H, F = s.width, s.head_dim, s.ffn
    att = attention_part(cfg, hw)
    C = att.cfg.cubes
    g_rows, g_cols = cube_mesh_shape(C)
    group_lines = tuple(x for x in (("row", g_cols), ("col", g_rows)) if x[1] > 1)
    mesh_lines = tuple(x for x in (("row", hw.mesh_x), ("col", hw.mesh_y), ("sip", cfg.sips)) if x[1] > 1)

    def gemm(name, k, n):
        return Gemm(name, M, k, n, _m_block(hw, M, n))

    ceil = lambda a, b: -(-a // b)
    qkv_cols = (s.group + 2) * H  # one kv head's Q, K, V columns
    parts = (
        Elementwise("norm_1", ceil(M * D, pes) * RMSNORM_OPS),
        gemm("qkv", D, ceil(qkv_cols * s.kv_heads, pes)),
        Elementwise("rope", ceil(M * (s.heads + s.kv_heads) * H, pes) * ROPE_OPS),
        Collective("qkv_gather", "all_gather", M * qkv_cols * ACT_BYTES, group_lines, P),
        att,
        Collective("o_gather", "all_gather", M * s.group * H * ACT_BYTES, group_lines, P),
        gemm("out_proj", ceil(s.heads * H, cubes), ceil(D, P)),
        Collective("all_reduce_1", "all_reduce", M * D * ACT_BYTES, mesh_lines, P),
        Elementwise("residual_norm_2", ceil(M * D, pes) * (RESIDUAL_OPS + RMSNORM_OPS)),
        gemm("ffn_up", D, ceil(2 * F, pes)),
        Elementwise("swiglu", M * ceil(F, pes) * SWIGLU_OPS),
        gemm("ffn_down", ceil(F, cubes), ceil(D, P)),
        Collective("all_reduce_2", "all_reduce", M * D * ACT_BYTES, mesh_lines, P),
        Elementwise("residual_2", ceil(M * D, pes) * RESIDUAL_OPS),
    )
    return LayerPlan(cfg, parts, cap)


__all__ = ["ACC_BYTES", "ACT_BYTES", "PHASES", "SHAPES", "SIP_COUNTS", "WEIGHT_BYTES", "Attention", "Collective",
           "Elementwise", "Gemm", "LayerConfig", "LayerPlan", "LayerShape", "MeshSpec", "attention_part", "capacity",
           "plan"]
