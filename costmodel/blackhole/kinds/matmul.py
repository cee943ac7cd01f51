"""``ttnn.linear`` / ``ttnn.matmul`` with a MatmulMultiCoreReuse* program config: the spec, its price
(by the config's kind, ``ops.matmul_us`` / ``matmul_2d_us`` / ``matmul_dram_sharded_us``), its core
split, its op codes and its op-report row (read and written). A config-less row gets ttnn's own
choice (``matmul_auto_config``)."""

from __future__ import annotations

import dataclasses

from costmodel.blackhole.matmul_auto_config import auto_config
from costmodel.blackhole.ops import (
    dram_sharded_workers,
    matmul_2d_us,
    matmul_dram_sharded_us,
    matmul_us,
)
from costmodel.blackhole.params import FitParams
from costmodel.blackhole.program_config import (
    DRAM_SHARDED,
    IN0_SHARD_LAYOUT,
    MCAST_1D_IN0,
    MCAST_1D_IN1,
    MCAST_2D,
    MatmulProgramConfig,
)
from costmodel.blackhole.report_line import (
    ReportLine,
    Skip,
    batches,
    compute_kernel,
    finite,
    frozen,
    l1_resident,
    matmul_program_config,
    no_sharding,
    tensor,
)
from costmodel.hardware import TILE, Blackhole
from costmodel.smooth import Relax
from jaxref.vocabulary import ActivationFormat, WeightFormat


@frozen
class MatmulSpec:
    """``ttnn.linear([M,K] act, [K,N] weights)`` with a matmul program config, priced by ``cfg.kind``:
    ``mcast_1d_in0`` / ``mcast_1d_in1`` by ``ops.matmul_us``, ``mcast_2d`` by ``ops.matmul_2d_us``,
    ``dram_sharded`` by ``ops.matmul_dram_sharded_us``.
    ``in0_l1`` / ``out_l1``: activation input / output L1-interleaved (1D and 2D kinds; DRAM-interleaved
    otherwise). ``in0_sharded``: the activation is L1-sharded the way the kind reads it
    (``IN0_SHARD_LAYOUT``: width-sharded for 1D in0-multicast, height-sharded for 1D in1-multicast,
    block-sharded for 2D; exclusive with ``in0_l1``). ``batch``: batches of a batched matmul ([batch, M, K] x [batch or 1, K, N] with the
    per-batch split, ``fuse_batch=False``; 1D and 2D kinds): each batch runs the whole K loop.
    ``in0_last_ktile_w``: logical K mod 32 of the activation (ttnn's ``in0_last_ktile_w``; 0: K tile-aligned),
    whose last K tile the 1D kinds' interleaved in0 reader zeroes past the logical K (``ops.ktile_pad_us``)."""

    M: int
    K: int
    N: int
    cfg: MatmulProgramConfig
    weight_dtype: str
    act_dtype: str = "bf16"
    fidelity: str = "HiFi2"
    fused_activation: bool = False
    in0_l1: bool = False
    out_l1: bool = False
    batch: int = 1
    in0_sharded: bool = False
    in0_last_ktile_w: int = 0
    op_class = "matmul"

    def us(self, hw: Blackhole, fit: FitParams, relax: Relax | None = None):
        c = self.cfg
        if not (isinstance(self.batch, int) and self.batch >= 1):
            raise ValueError(f"batch={self.batch!r} must be an integer >= 1")
        if self.in0_sharded and self.in0_l1:
            raise ValueError("in0_sharded=True and in0_l1=True: the activation is either L1-sharded or "
                             "L1-interleaved; expected at most one")
        if self.in0_last_ktile_w and (c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1) or self.in0_sharded):
            raise ValueError(f"in0_last_ktile_w={self.in0_last_ktile_w}: the ragged-K padding is modelled for the 1D "
                             f"kinds' interleaved in0 reader; got kind={c.kind!r}, in0_sharded={self.in0_sharded}")
        if c.kind == MCAST_2D:
            if self.fused_activation:
                raise ValueError("the mcast_2d matmul models no fused activation; got fused_activation=True")
            return matmul_2d_us(hw, fit, M=self.M, K=self.K, N=self.N, in0_block_w=c.in0_block_w,
                                per_core_M=c.per_core_M, per_core_N=c.per_core_N, weight_dtype=self.weight_dtype,
                                act_dtype=self.act_dtype, fidelity=self.fidelity, in0_l1=self.in0_l1,
                                in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch, relax=relax)
        if c.kind == DRAM_SHARDED:
            if self.batch != 1:
                raise ValueError(f"the dram_sharded matmul models one batch; got batch={self.batch}")
            if self.fused_activation or self.in0_l1 or self.out_l1 or self.in0_sharded:
                raise ValueError(f"the dram_sharded matmul takes its activation and output L1-sharded by "
                                 f"construction (not flagged) and models no fused activation; got "
                                 f"fused_activation={self.fused_activation}, in0_l1={self.in0_l1}, "
                                 f"in0_sharded={self.in0_sharded}, out_l1={self.out_l1}")
            return matmul_dram_sharded_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                                          act_dtype=self.act_dtype, fidelity=self.fidelity, relax=relax)
        if c.kind not in (MCAST_1D_IN0, MCAST_1D_IN1):
            raise ValueError(f"matmul program config kind={c.kind!r} is not modelled; the cost model prices "
                             f"{[MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D, DRAM_SHARDED]}")
        return matmul_us(hw, fit, c, M=self.M, K=self.K, N=self.N, weight_dtype=self.weight_dtype,
                         act_dtype=self.act_dtype, fidelity=self.fidelity, fused_activation=self.fused_activation,
                         in0_l1=self.in0_l1, in0_sharded=self.in0_sharded, out_l1=self.out_l1, batch=self.batch,
                         in0_last_ktile_w=self.in0_last_ktile_w, relax=relax)



KIND_NAMES = {"mcast_1d_in0": "1D in0-multicast", "mcast_1d_in1": "1D in1-multicast",
              "mcast_2d": "2D multicast", "dram_sharded": "DRAM-sharded"}


def read(ln: ReportLine, hw: Blackhole, cls: str = "matmul") -> MatmulSpec:
    """A matmul row as a ``MatmulSpec``; ``Skip`` with the reason for a form the model does not price."""
    pc = ln.attr("program_config") or "std::nullopt"
    x, w = ln.shape("INPUT_0"), ln.shape("INPUT_1")
    ba, bb = batches(ln)
    name = pc.split("(")[0].strip()
    if name != "std::nullopt" and not name.startswith("MatmulMultiCoreReuse"):
        raise Skip(f"program-config kind not modelled: {name}")
    act, wdt = ln.dtype("INPUT_0", ActivationFormat), ln.dtype("INPUT_1", WeightFormat)
    M, K, N = x[2], x[3], w[3]
    if w[2] != K:
        raise ln.fail(ln.dim_col("INPUT_1", "Y"), f"K={w[2]} of the weights != K={K} of the activations")
    if name == "std::nullopt":
        memories = [ln.memory(p) for p in ("INPUT_0", "INPUT_1", "OUTPUT_0")]
        grid = (hw.grid_x, hw.grid_y)
        cfg = auto_config(M=M, K=K, N=N, batch_a=ba, batch_b=bb, grid=grid,
                          all_interleaved=all("INTERLEAVED" in m for m in memories),
                          all_dram=all("DRAM" in m for m in memories), fp32_dest_acc=ln.fp32_dest_acc())
        if cfg is None:
            raise Skip("no program config, and ttnn's own choice for this shape (an L1-size estimate to a 2D "
                        "or non-multicast config) is not modelled")
        pc = matmul_program_config(cfg)  # the report form, read back below as a given config would be
        if finite(ln.get("CORE COUNT")) not in (None, float(cfg.num_cores(M=M, N=N))):
            raise Skip(f"no program config; CORE COUNT differs from the {cfg.num_cores(M=M, N=N)} cores of ttnn's "
                        f"choice as modelled ({KIND_NAMES[cfg.kind]})")
    ln.config_grid(pc, hw)  # a grid larger than the chip is an error, whatever the kind
    for key in ("in0_block_w", "per_core_M", "per_core_N"):
        ln.config_int(pc, key)
    try:
        cfg = MatmulProgramConfig.parse(pc)
    except ValueError as e:
        if "is not a matmul config this project models" in str(e):
            raise Skip(f"program-config kind not modelled: {name}") from None
        raise ln.fail("ATTRIBUTES", str(e)) from None
    batch = max(ba, bb)
    if batch > 1 and cfg.kind == DRAM_SHARDED:
        raise Skip("batched operands on a DRAM-sharded matmul")
    if batch > 1 and cfg.fuse_batch:
        if bb > 1:
            raise Skip("fuse_batch with batched weights (ttnn folds the batch into M only for unbatched weights)")
        M, batch = M * ba, 1  # the batch folded into M: one matmul of ba*M rows
    if cfg.kind == DRAM_SHARDED:  # activation and output L1-sharded, weights DRAM width-sharded, by construction
        if "SHARDED" not in ln.memory("INPUT_1") or "DRAM" not in ln.memory("INPUT_1"):
            raise Skip(f"DRAM-sharded config with weights in {ln.memory('INPUT_1').removeprefix('DEV_0_')} "
                        "(expected DRAM width-sharded)")
    else:
        no_sharding(ln, "INPUT_1", "OUTPUT_0")
    in0_sharded = cfg.kind != DRAM_SHARDED and in0_sharded_read(ln, cfg, M=M, N=N)
    if l1_resident(ln, "INPUT_1") and cfg.kind != DRAM_SHARDED:
        raise Skip(f"weights in L1 ({ln.memory('INPUT_1').removeprefix('DEV_0_')}); the model streams the "
                    "weights from DRAM")
    if cfg.fused_activation not in (None, "silu"):
        raise Skip(f"fused activation not modelled ({cfg.fused_activation})")
    if cfg.kind in (MCAST_2D, DRAM_SHARDED) and cfg.fused_activation is not None:
        raise Skip(f"fused activation on a {KIND_NAMES[cfg.kind]} matmul not modelled ({cfg.fused_activation})")
    try:
        cfg.validate("matmul", hw, M=M, K=K, N=N, weight_dtype=wdt, act_dtype=act, fp32_dest_acc=ln.fp32_dest_acc())
    except ValueError as e:
        raise Skip(f"program config outside the model's {KIND_NAMES[cfg.kind]} form ({e})") from None
    interleaved_l1 = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1, MCAST_2D)  # the L1 flags of the 1D and 2D models
    # the 1D factory's in0_last_ktile_w (logical K mod 32), zeroed by the interleaved in0 reader (ops.ktile_pad_us);
    # a transposed in0 pads rows instead (in0_last_ktile_h), not modelled
    ragged_1d = cfg.kind in (MCAST_1D_IN0, MCAST_1D_IN1) and not in0_sharded and ln.attr("transpose_a") != "true"
    return MatmulSpec(M, K, N, cfg, wdt, act, ln.fidelity(), cfg.fused_activation == "silu",
                      in0_l1=interleaved_l1 and not in0_sharded and l1_resident(ln, "INPUT_0"),
                      out_l1=interleaved_l1 and l1_resident(ln, "OUTPUT_0"), batch=int(batch), in0_sharded=in0_sharded,
                      in0_last_ktile_w=ln.logical("INPUT_0")[3] % TILE if ragged_1d else 0)


def in0_sharded_read(ln: ReportLine, cfg: MatmulProgramConfig, *, M: int, N: int) -> bool:
    """Whether a 1D / 2D multicast matmul row's in0 is L1-sharded the way its kind reads it
    (``IN0_SHARD_LAYOUT``); skips in0 sharded otherwise (in DRAM, or another layout than the kind's),
    and a 1D in0-multicast row whose CORE COUNT exceeds its output cores: the factory then runs
    in0 senders on cores without output work (num_cores = max(output cores, shard cores):
    matmul_multicore_reuse_mcast_1d_program_factory.cpp @ 00629f0f), which the model does not price."""
    memory = ln.memory("INPUT_0")
    if "SHARDED" not in memory:
        return False
    layout = IN0_SHARD_LAYOUT[cfg.kind]
    if memory.removeprefix("DEV_0_") != f"L1_{layout}":
        raise Skip(f"sharded operand (INPUT_0 {memory.removeprefix('DEV_0_')}); the model reads an L1 {layout} in0 "
                    f"with a {KIND_NAMES[cfg.kind]} config and streams other operands interleaved")
    cores = finite(ln.get("CORE COUNT"))
    if cfg.kind == MCAST_1D_IN0 and cores is not None and cores > cfg.num_cores(M=M, N=N):
        raise Skip(f"in0 sharded over more cores ({cores:g} in CORE COUNT) than hold output blocks "
                    f"({cfg.num_cores(M=M, N=N)}): sender-only cores not modelled")
    return True



OP_CLASSES = {"matmul": ("MatmulDeviceOperation", "Matmul")}  # first: written; ttnn renames ops between versions
SPECS = (MatmulSpec,)


def cores(spec: MatmulSpec, hw: Blackhole) -> int:
    """The split ``MatmulSpec.us`` prices: the config's output-block cores, or a DRAM-sharded config's workers."""
    if spec.cfg.kind == DRAM_SHARDED:
        return dram_sharded_workers(hw, spec.cfg)
    return spec.cfg.num_cores(M=spec.M, N=spec.N)


def record(spec: MatmulSpec, hw: Blackhole):
    """(op code, attributes, inputs, outputs, fidelity) of ``spec``'s report row."""
    c, fid = spec.cfg, spec.fidelity
    if spec.fused_activation != (c.fused_activation == "silu"):
        raise ValueError(f"fused_activation={spec.fused_activation} but the program config's is "
                         f"{c.fused_activation!r}; a report carries one (the config's)")
    if spec.batch > 1 and c.fuse_batch:
        raise ValueError(f"batch={spec.batch} with fuse_batch=True: a fused batch is one matmul of batch*M rows "
                         "(write it with batch=1)")
    b = int(spec.batch)
    attrs = {"program_config": matmul_program_config(c),
             "compute_kernel_config": compute_kernel(fid), "output_dtype": "DataType::BFLOAT16",
             "bcast_batch": "true" if b == 1 else "false", "transpose_a": "false", "transpose_b": "false",
             "user_run_batched": "false", "untilize_out": "false"}
    l1, dram, weights = "DEV_0_L1_INTERLEAVED", "DEV_0_DRAM_INTERLEAVED", "DEV_0_DRAM_INTERLEAVED"
    in0 = f"DEV_0_L1_{IN0_SHARD_LAYOUT[c.kind]}" if spec.in0_sharded else l1 if spec.in0_l1 else dram
    out = l1 if spec.out_l1 else dram
    if c.kind == DRAM_SHARDED:  # activation and output L1 width-sharded, weights DRAM width-sharded: the form's own
        in0, out, weights = "DEV_0_L1_WIDTH_SHARDED", "DEV_0_L1_WIDTH_SHARDED", "DEV_0_DRAM_WIDTH_SHARDED"
    in0_desc = tensor((1, b, spec.M, spec.K), spec.act_dtype, memory=in0)
    if spec.in0_last_ktile_w:  # the logical K whose last tile is ragged
        in0_desc = dataclasses.replace(in0_desc, logical=(1, b, spec.M, spec.K - TILE + spec.in0_last_ktile_w))
    return (OP_CLASSES["matmul"][0], attrs, [in0_desc, tensor((1, b, spec.K, spec.N), spec.weight_dtype, memory=weights)],
            [tensor((1, b, spec.M, spec.N), spec.act_dtype, memory=out)], fid)
