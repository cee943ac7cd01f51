"""One module per ttnn op kind the Blackhole model prices, and the registry that dispatches to them.

Each kind module holds, for its op: the spec dataclass(es) (``SPECS``) with their price
(``spec.us(hw, fit)``), the core split that price assumes (``cores(spec, hw)``), its op codes
(``OP_CLASSES``: op class -> ttnn op codes, the first one written), how it reads an op-report row
(``read(line, hw, cls)``, ``report_line.Skip`` with the reason for a form it does not price) and,
where the expert's graph writes it, its report row (``record(spec, hw)``). The report reader, the
report writer, the graph and the emulation all go through this registry, so the CORE COUNT a report
row is written with is the split its time is priced with. Adding an op kind = one module here, added
to ``KINDS``, and its rows in the tests.

    kind module      op classes (OP_CODES)                  specs
    matmul           matmul                                 MatmulSpec
    minimal_matmul   minimal_matmul                         MinimalMatmulSpec
    norm             norm (RMSNorm, LayerNorm)              NormSpec
    norm_sharded     (norm's rows with the sharded program  NormShardedSpec
                     config: the norm reader hands them on)
    softmax          softmax                                SoftmaxSpec
    eltwise          eltwise (binary_ng add / mul)          EltwiseSpec
    unary            unary (SFPU op chains: silu, neg ...)  UnarySpec
    heads            create_heads, concat_heads,            HeadsSpec, HeadsDecodeSpec
                     create_heads_decode
    rope             rope                                   RopeSpec
    fill_cache       fill_cache                             FillCacheSpec
    sdpa             sdpa_decode, sdpa                      SdpaDecodeSpec, SdpaStandardSpec, SdpaCausalSpec
    data_movement    data_movement/<reshape, transpose,     DataMovementSpec
                     concat, slice>
    layout           layout/<tilize, untilize>              LayoutSpec, LayoutBlockSpec
    dram_read        (none: a microbenchmark)               DramReadSpec
"""

from __future__ import annotations

from costmodel.blackhole.kinds import (
    data_movement,
    dram_read,
    eltwise,
    fill_cache,
    heads,
    layout,
    matmul,
    minimal_matmul,
    norm,
    norm_sharded,
    rope,
    sdpa,
    softmax,
    unary,
)
from costmodel.blackhole.report_line import ReportLine
from costmodel.blackhole.report_schema import OpRecord
from costmodel.hardware import Blackhole

KINDS = (matmul, minimal_matmul, norm, norm_sharded, softmax, eltwise, unary, heads, rope, fill_cache, sdpa,
         data_movement, layout, dram_read)
OP_CODES: dict[str, tuple[str, ...]] = {cls: codes for k in KINDS for cls, codes in k.OP_CLASSES.items()}
CLASS_OF_CODE = {code: cls for cls, codes in OP_CODES.items() for code in codes}
KIND_OF_CLASS = {cls: k for k in KINDS for cls in k.OP_CLASSES}


def kind_of(spec):
    """The kind module of an op spec (a ``KernelSpec`` / ``ChipSpec``'s inner op); ValueError if none."""
    inner = getattr(spec, "inner", None)
    if inner is not None:
        return kind_of(inner)
    for k in KINDS:
        if isinstance(spec, k.SPECS):
            return k
    raise ValueError(f"{type(spec).__name__} is not an op kind of costmodel.blackhole.kinds")


def kind_name(spec) -> str:
    """The name of the kind module that prices an op spec ('matmul', 'norm', 'data_movement', ...):
    the ttnn op kind it is, whatever its formats, program config or board (``kind_of``)."""
    return kind_of(spec).__name__.rsplit(".", 1)[-1]


def read(line: ReportLine, hw: Blackhole, cls: str):
    """The op spec of a report row of op class ``cls`` (``CLASS_OF_CODE``), by its kind's reader."""
    return KIND_OF_CLASS[cls].read(line, hw, cls)


def cores(spec, hw: Blackhole) -> int:
    """Cores the model splits ``spec`` over (its kind's ``cores``; a ``ChipSpec`` on its own board, a
    ``KernelSpec`` as its inner op)."""
    if hasattr(spec, "board"):  # a ChipSpec
        return cores(spec.inner, spec.board())
    if getattr(spec, "inner", None) is not None:  # a KernelSpec
        return cores(spec.inner, hw)
    return kind_of(spec).cores(spec, hw)


def record(spec, hw: Blackhole, duration_us: float | None, *, heads: tuple[int, int] | None = None) -> OpRecord:
    """The op report row of ``spec`` (its kind's ``record``), CORE COUNT its kind's ``cores``; ``heads``:
    (q heads, kv heads) of a create-heads op (ignored for other ops). ValueError for a spec without a
    report form."""
    # a measurement wrapper (KernelSpec, ChipSpec) has no row of its own
    kind = next((k for k in KINDS if isinstance(spec, k.SPECS)), None)
    if kind is None or not hasattr(kind, "record"):
        raise ValueError(f"{type(spec).__name__} has no op-report form")
    # ``heads`` (a whole graph's, as ``write_csv`` passes it) says something of create-heads ops only
    code, attrs, ins, outs, fidelity = kind.record(spec, hw, **({"heads": heads} if "create_heads" in kind.OP_CLASSES
                                                              else {}))
    ns = None if duration_us is None else float(duration_us) * 1e3
    return OpRecord(code, attrs, tuple(ins), tuple(outs), fidelity, cores(spec, hw), ns, arch="blackhole",
                    available_cores=hw.grid_cores)
