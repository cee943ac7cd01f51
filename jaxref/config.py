"""Model presets of the Alpamayo action expert and its attention geometry.

Dimension vocabulary (used everywhere in this project):
  B batch (trajectories), T expert/query tokens, S keys (valid VLM cache rows), Smax cache capacity,
  N q heads, K kv heads, G = N // K group size, H head_dim, D model width, F MLP width.

Presets are frozen, validated dataclasses: ``ExpertConfig.alpamayo_tt()``, ``.alpamayo_r1()``,
``.tiny()``. Any field can be overridden with ``dataclasses.replace`` (validation re-runs).
"""

from __future__ import annotations

import dataclasses

from jaxref.validation import check_choice, require


def check_tail_slot_seq_len(seq_len: int, *, max_seq_len: int, num_tokens: int) -> None:
    """The tail-slot bound, checked here only: 0 <= S <= Smax - T (the device writes the T own K/V
    rows into cache rows [Smax - T, Smax))."""
    if not 0 <= seq_len <= max_seq_len - num_tokens:
        raise ValueError(
            f"seq_len={seq_len} must satisfy 0 <= seq_len <= max_seq_len - num_tokens = "
            f"{max_seq_len} - {num_tokens} = {max_seq_len - num_tokens}: the last {num_tokens} cache "
            "rows hold the expert's own K/V")

@dataclasses.dataclass(frozen=True)
class ActionInConfig:
    """action_in_proj (``PerWaypointActionInProjV2``): Fourier features -> MLP trunk -> LayerNorm."""

    num_freqs: int = 10  # Fourier frequencies per scalar, logspace(0, log10(max_freq), num_freqs)
    max_freq: float = 100.0  # highest Fourier frequency (cycles per unit input)
    hidden: int = 512  # trunk width h (the port uses 512; the upstream code default is 1024)
    num_layers: int = 2  # trunk layers: Linear(in,h)+SiLU, then (num_layers-1) x [RMSNorm, Linear(h,h), SiLU]
    norm_eps: float = 1e-5  # eps of the trunk RMSNorms and of the final LayerNorm
    bf16_freqs: bool = True  # round the stored freqs buffer to bf16 (59.948 -> 60.0) as a bf16 checkpoint does

    def __post_init__(self):
        require(self.num_freqs > 0, f"num_freqs={self.num_freqs} must be > 0")
        require(self.max_freq > 0, f"max_freq={self.max_freq} must be > 0")
        require(self.hidden > 0, f"hidden={self.hidden} must be > 0")
        require(self.num_layers >= 1, f"num_layers={self.num_layers} must be >= 1")
        require(self.norm_eps > 0, f"norm_eps={self.norm_eps} must be > 0")

    @property
    def in_features(self) -> int:
        """Per-token input width: 3 scalars (accel, curvature, t) x 2 (sin, cos) x num_freqs."""
        return 3 * 2 * self.num_freqs


@dataclasses.dataclass(frozen=True)
class ExpertConfig:
    """Geometry of the action expert (a Qwen3-VL text decoder without token embedding)."""

    num_layers: int  # L: decoder layers; layer i attends to VLM KV-cache layer i
    hidden: int  # D: residual-stream width
    num_heads: int  # N: query heads
    num_kv_heads: int  # K: key/value heads (GQA); must divide num_heads
    head_dim: int  # H: per-head width (even, for RoPE)
    ffn: int  # F: SwiGLU MLP width
    rope_theta: float = 5e6  # RoPE base
    rms_eps: float = 1e-6  # eps of every decoder RMSNorm (layer, per-head q/k, final)
    num_tokens: int = 64  # T: action tokens (waypoints) per trajectory
    action_dim: int = 2  # channels per waypoint: normalized acceleration, curvature
    max_seq_len: int = 8192  # Smax: VLM cache capacity; the last T rows are expert scratch on device
    num_steps: int = 10  # Euler flow-matching steps of sample()
    action_in: ActionInConfig = dataclasses.field(default_factory=ActionInConfig)

    def __post_init__(self):
        for name in ("num_layers", "hidden", "num_heads", "num_kv_heads", "head_dim", "ffn",
                     "num_tokens", "action_dim", "max_seq_len", "num_steps"):
            v = getattr(self, name)
            require(isinstance(v, int) and v > 0, f"{name}={v!r} must be a positive int")
        require(self.num_heads % self.num_kv_heads == 0,
                 f"num_heads={self.num_heads} not divisible by num_kv_heads={self.num_kv_heads}")
        require(self.head_dim % 2 == 0, f"head_dim={self.head_dim} must be even for RoPE")
        require(self.rope_theta > 1.0, f"rope_theta={self.rope_theta} must be > 1")
        require(self.rms_eps > 0, f"rms_eps={self.rms_eps} must be > 0")
        require(self.max_seq_len > self.num_tokens,
                 f"max_seq_len={self.max_seq_len} must exceed num_tokens={self.num_tokens} "
                 "(the last num_tokens rows of the cache are expert scratch)")

    # ---- derived geometry -------------------------------------------------------------------
    @property
    def group(self) -> int:
        """G: query heads per kv head."""
        return self.num_heads // self.num_kv_heads

    @property
    def q_width(self) -> int:
        """N*H: width of the q projection output."""
        return self.num_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """K*H: width of each of the k and v projection outputs."""
        return self.num_kv_heads * self.head_dim

    @property
    def max_context(self) -> int:
        """Largest valid VLM cache length S for the device's tail-slot layout: Smax - T."""
        return self.max_seq_len - self.num_tokens

    def check_seq_len(self, seq_len: int, *, max_seq_len: int | None = None) -> None:
        """Raise ValueError unless 0 <= seq_len <= Smax - T (tail rows are the expert's scratch)."""
        check_tail_slot_seq_len(seq_len, max_seq_len=self.max_seq_len if max_seq_len is None else max_seq_len,
                                num_tokens=self.num_tokens)

    # ---- presets ----------------------------------------------------------------------------
    @classmethod
    def alpamayo_tt(cls, **overrides) -> ExpertConfig:
        """The Blackhole device port (seeds/EXPERT_NOTES.md): 64 layers, D 1536, 16/8 heads, F 6144."""
        base = {"num_layers": 64, "hidden": 1536, "num_heads": 16, "num_kv_heads": 8, "head_dim": 128,
                "ffn": 6144, "rope_theta": 5e6, "rms_eps": 1e-6, "num_tokens": 64, "action_dim": 2, "max_seq_len": 8192}
        return cls(**{**base, **overrides})

    @classmethod
    def alpamayo_r1(cls, **overrides) -> ExpertConfig:
        """Third-party reading of the public R1 checkpoint (unverified): 36 layers, D 2048, F 8256."""
        base = {"num_layers": 36, "hidden": 2048, "num_heads": 16, "num_kv_heads": 8, "head_dim": 128,
                "ffn": 8256, "rope_theta": 5e6, "rms_eps": 1e-6, "num_tokens": 64, "action_dim": 2, "max_seq_len": 8192}
        return cls(**{**base, **overrides})

    @classmethod
    def tiny(cls, **overrides) -> ExpertConfig:
        """A small model for tests: same code paths (GQA G=2, T=64 tokens), seconds on a CPU."""
        base = {"num_layers": 2, "hidden": 64, "num_heads": 4, "num_kv_heads": 2, "head_dim": 16, "ffn": 128,
                "rope_theta": 5e6, "rms_eps": 1e-6, "num_tokens": 64, "action_dim": 2, "max_seq_len": 256,
                "action_in": ActionInConfig(hidden=32, num_layers=2)}
        return cls(**{**base, **overrides})

    @classmethod
    def preset(cls, name: str, **overrides) -> ExpertConfig:
        """Look a preset up by name ('alpamayo_tt', 'alpamayo_r1', 'tiny')."""
        presets = {"alpamayo_tt": cls.alpamayo_tt, "alpamayo_r1": cls.alpamayo_r1, "tiny": cls.tiny}
        check_choice("preset", name, presets)
        return presets[name](**overrides)
