"""Parity of the expert's ttnn graph with the JAX golden: ``python -m device.parity``.

On a Blackhole (``--backend chip``, the default) the graph runs on the chip through ttnn; with
``--backend emulation`` the same graph runs here on ``device.emulation`` (JAX versions of its ttnn
ops). Without a chip and without that flag the script says so, exits with status 2 and prints no
numbers. Both backends compare against the golden on the same weights and inputs:

* chosen layers, each fed the fp32 golden's input of that layer (as bf16): vs the fp32 golden
  (exact attention over S rows) and vs the device-precision golden (``Precision.device``, the
  tail-slot attention with the device's mask);
* one traced step (velocity at t = 0) and, unless ``--no-sample``, the 10-step sample compared
  teacher-forced (targets), free-running and against the golden's own sensitivity baseline
  (``device.trajectory``);
* the traced stack vs the same stack run eagerly (a trace must replay bit for bit; on the
  emulation the trace runs the compiled layer of ``device.fast_twin``, the eager pass every ttnn call);
  the emulation's other passes (layers, step, sample) run that compiled layer too unless ``--eager``;
* the golden runs in a thread of its own from the start, beside the graph's setup and passes (on a
  chip it is done before the timed ones), and on the emulation so do the op report's eager pass and then the teacher-forced
  steps (on a second emulated device, beside the free-running sample); every number is what a single
  thread gives;
* ``--localise`` (and any layer below target): the layer op by op, the first divergent op named
  (``device.divergence``).

Rows fail closed (``device.parity_checks``): the exit status is 1 when any row misses its target,
2 on bad input (a checkpoint holding NaN / Inf included).

The report's device-parity section (``experiments.report.sections.device_parity``) runs the same
``run`` on the emulation. Writes ``parity.json``, ``parity.md`` and ``ops.csv`` (one row per device op of an eager pass,
ttnn-profiler style; host durations only on a chip, measured around ``synchronize_device``) into
``--out``. Weights and the VLM cache are random (bf16-valued, garbage 7.0 in rows [S, Smax); one
layer rolled per layer, see ``device.parity_model``) unless ``--checkpoint`` names an HF-format safetensors file (read one layer
at a time: ``device.checkpoint_stream``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import dataclasses
import functools
import os
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

from costmodel.blackhole.port import Port
from device.checkpoint_stream import CheckpointStream
from device.divergence import localise
from device.emulation import Emulation
from device.fast_twin import FastTwin
from device.graph import TTExpert, check_graph
from device.parity_checks import TARGETS, abs_text, describe, failures, metric, pcc_text
from device.parity_model import GeneratedModel
from device.recorded_report import write_op_report
from device.recorder import Recorder
from device.trajectory import compare_sample, golden_pair, teacher_forced_points
from experiments.report.render import md_table
from experiments.timing import time_repeats
from jaxref.action import action_in_proj, action_out_proj
from jaxref.config import ExpertConfig
from jaxref.expert import CacheContext, expert_rope, expert_stack, velocity
from jaxref.layers import decoder_layer
from jaxref.numerics import round_bf16
from jaxref.numerics.formats import CACHE_GARBAGE as GARBAGE  # cache rows [S, Smax) hold this
from jaxref.options import ExpertOptions
from jaxref.param_table import FINAL_NORM_HF, LAYER_PARAMS
from jaxref.precision import Precision, cast
from jaxref.validation import (
    atomic_output,
    atomic_write_text,
    choices_of,
    cli_main,
    dumps_strict,
    input_file,
    output_dir,
)
from jaxref.vocabulary import AttnMode, CacheFormat, WeightFormat


class NoChip(RuntimeError):
    """No Blackhole chip is reachable from this process (the reason is the message)."""


def open_chip():
    """(ttnn, device) of the first Blackhole, or raise ``NoChip`` saying why (never opens a mock)."""
    try:
        import ttnn
    except (ImportError, OSError, RuntimeError) as exc:
        raise NoChip(f"ttnn is not importable here ({type(exc).__name__}: {exc})") from None
    if os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        raise NoChip("TT_METAL_MOCK_CLUSTER_DESC_PATH is set: ttnn sees a mock cluster descriptor, not a chip")
    if ttnn.GetNumAvailableDevices() < 1:
        raise NoChip("ttnn finds no Tenstorrent device")
    try:
        device = ttnn.open_device(device_id=0, l1_small_size=32768, trace_region_size=64 << 20)
    except Exception as exc:  # noqa: BLE001 - any failure to open means: no usable chip
        raise NoChip(f"ttnn.open_device failed ({type(exc).__name__}: {exc})") from None
    if "BLACKHOLE" not in str(device.arch()).upper():
        ttnn.close_device(device)
        raise NoChip(f"the device is not a Blackhole ({device.arch()})")
    return ttnn, device


def chip_status() -> str | None:
    """None when ttnn can see a real device, else why not (cheap: does not open a device)."""
    try:
        import ttnn
    except (ImportError, OSError, RuntimeError) as exc:
        return f"ttnn is not importable here ({type(exc).__name__})"
    if os.environ.get("TT_METAL_MOCK_CLUSTER_DESC_PATH"):
        return "only a mock cluster descriptor is configured (TT_METAL_MOCK_CLUSTER_DESC_PATH)"
    return None if ttnn.GetNumAvailableDevices() > 0 else "ttnn finds no Tenstorrent device"


@dataclasses.dataclass(frozen=True)
class Problem:
    """What to run: model geometry, S, which layers to compare, the port the graph runs."""

    cfg: ExpertConfig
    seq_len: int
    port: Port
    layers: tuple[int, ...]
    seed: int = 0
    sample: bool = True
    checkpoint: str | None = None
    expert_prefix: str = ""
    localise: bool = False  # op-by-op comparison of every compared layer (always for a failing one)
    fast: bool = True  # emulation: the compiled layer (device.fast_twin) in every pass but the op report's


def _model(p: Problem):
    """(params, golden layer sources, final norm, model, cache factory, x0).

    Random model (default): ``device.parity_model.GeneratedModel``, layer i generated from one
    layer of bf16-valued weights and cache rows (garbage in rows [S, Smax)); on the emulation the
    device buffers are generated too, so the full 64-layer expert runs in bounded memory.
    ``--checkpoint``: its weights read one layer at a time (``device.checkpoint_stream``: the golden
    reads layer i inside its scan, the device buffers are read per layer), the same generated
    cache. ``model``: ``GeneratedModel`` / ``CheckpointStream``, whose ``emulation_layers`` /
    ``host_layer`` give the device buffers; ``cache factory``: (ns, device, upload) -> per-layer
    (k, v) device buffers. ``sources``: the golden's layer sources by precision, as ``opts`` in
    ``run``: "fp32" (the exact attention) reads the S valid cache rows alone, "device" (the tail-slot
    form, as the graph) the whole [K, Smax, H] layer with its fill rows.
    """
    k_p, k_x = jax.random.split(jax.random.PRNGKey(p.seed))
    cfg, port = p.cfg, p.port
    model = GeneratedModel.build(k_p, cfg, p.seq_len, fill=GARBAGE)
    x0 = jax.random.normal(k_x, (cfg.num_tokens, cfg.action_dim), jnp.float32)

    def caches(ns, device, upload):
        if hasattr(ns, "generated_tensor"):
            return model.emulation_caches(ns, device, fmt=port.precision.cache)
        return [upload(*(np.asarray(a) for a in model.cache_layer(i))) for i in range(cfg.num_layers)]

    if p.checkpoint:
        stream = CheckpointStream(p.checkpoint, cfg, expert_prefix=p.expert_prefix)
        sources = {"fp32": stream.layer_source(functools.partial(model.cache_layer, valid_only=True)),
                   "device": stream.layer_source(model.cache_layer)}
        return stream.rest(), sources, stream.final_norm(), stream, caches, x0
    final_norm = np.asarray(model.params.final_norm, np.float32).reshape(1, 1, 1, -1)
    sources = {"fp32": model.layer_source(valid_only=True), "device": model.layer_source()}
    return model.params, sources, final_norm, model, caches, x0


class _Layers:
    """A sequence of per-layer device arrays made on demand (one layer in host memory at a time)."""

    def __init__(self, n: int, make):
        self.n, self.make = n, make

    def __len__(self):
        return self.n

    def __iter__(self):
        return (self.make(i) for i in range(self.n))


class _InOrder:
    """A one-worker pool that runs each submitted call at once, in the caller's thread (``run``'s
    ``overlap=False``); its futures hold the result or the exception, as a pool's would."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False

    def submit(self, fn, *args, **kwargs) -> concurrent.futures.Future:
        fut = concurrent.futures.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - handed to whoever reads the future, as a pool does
            fut.set_exception(exc)
        return fut


def run(p: Problem, ns, device, *, backend: str, out_dir: pathlib.Path | None = None, sync=None,
        clock=None, overlap: bool = True) -> dict:
    """Run the graph on (ns, device) against the golden; returns the results (see the module docstring).

    With ``fast`` on the emulation every pass but the op report's eager one runs the compiled layer
    (``device.fast_twin``); the traced stack through it is checked bit for bit against that eager
    pass (``traced_vs_eager_max_abs``). Every row is a ``device.parity_checks.metric``. ``clock``:
    an ``experiments.timing.PhaseClock`` timing the phases (benchmarks), or None. ``overlap=False``:
    the golden's and the op report's passes run in this thread, one after another, instead of
    beside the device's (the same numbers; a benchmark then sees each phase's CPU alone).
    """
    phase = clock if clock is not None else (lambda _name: contextlib.nullcontext())
    cfg, port, S = p.cfg, p.port, p.seq_len
    with phase("model"):
        params, sources, final_norm, model, make_caches, x0 = _model(p)

    def tagged(ex, rec):  # the layer_fn swap point, used here to label the per-op CSV rows
        def layer(i, *args):
            rec.state.tag = f"layer {i}"
            return ex.layer(i, *args)
        return layer

    def device_model():
        """(recorder, graph, its layer_fn, caches) on ``device``: the weights uploaded (chip) or
        generated (emulation), the layer compiled once on the emulation (``device.fast_twin``)."""
        with phase("device: model"):
            layers = (model.emulation_layers(ns, device, weights=port.precision.weights)
                      if hasattr(ns, "generated_tensor") else _Layers(cfg.num_layers, model.host_layer))
            rec = Recorder(ns)
            rec.state.sync = sync
            ex = TTExpert(rec, device, layers, final_norm, cfg=cfg, port=port)
            fast = FastTwin(ex, ns) if isinstance(ns, Emulation) and p.fast else tagged(ex, rec)
            ex.layer_fn = fast
            caches = make_caches(ns, device, ex.upload_cache)
            ex.set_context(S)
        return rec, ex, fast, caches

    dev_prec = port.precision  # the golden's rounding points: the port's own storage formats
    ctx = CacheContext.create(S)
    emb = velocity_input(params, x0, cfg)
    res: dict = {"backend": backend, "num_layers": cfg.num_layers, "hidden": cfg.hidden, "seq_len": S,
                 "max_seq_len": cfg.max_seq_len, "weights": port.precision.weights,
                 "cache": port.precision.cache, "attn_mode": port.attention.attn_mode, "model": "checkpoint" if p.checkpoint else RANDOM_MODEL,
                 "targets": dict(TARGETS), "layers": []}
    opts = {"fp32": ExpertOptions(attention="exact", precision=Precision.fp32()),
            "device": ExpertOptions(attention="tail_slot", precision=dev_prec)}
    rope = {k: expert_rope(S, 0, cfg=cfg, precision=o.precision) for k, o in opts.items()}

    # The golden runs in a thread of its own, beside the graph's passes (both mostly wait on XLA, which
    # releases the GIL); each side's numbers are what they would be alone (they share no array but the
    # read-only model). On a chip the golden is done before the timed passes (op report, replays).
    # The chosen layers run last on the device: each writes its own cache rows before reading them,
    # so where they run changes no number.
    def golden_inputs():
        """(the chosen layers' inputs, the fp32 velocity at (x0, t = 0)): one fp32 stack on ``emb``,
        ``velocity``'s own stack (``velocity`` = action_in_proj -> expert_stack -> action_out_proj; the
        same bits as calling it, tested), so the golden runs that stack once."""
        with phase("golden: hidden (fp32 stack)"):
            out, hidden = expert_stack(sources["fp32"], params.final_norm, emb, ctx, cfg=cfg, return_hidden=True)
            x_ins = {i: np.asarray(round_bf16(emb if i == 0 else hidden[i - 1])) for i in p.layers}
            return x_ins, np.asarray(action_out_proj(params.action_out, out))

    def golden_rest(x_ins):
        out = {}
        for i in p.layers:
            with phase("golden: layers"):
                layer, ck, cv = sources["device"](jnp.asarray(i, jnp.int32))
                kv = {"fp32": (ck[:, :S], cv[:, :S]), "device": (ck, cv)}  # the fp32 source's rows, not generated twice
                out[i] = {k: np.asarray(decoder_layer(layer, jnp.asarray(x_ins[i]), kv[k], S, rope[k], cfg=cfg,
                                                      options=o)) for k, o in opts.items()}
        with phase("golden: step (device precision)"):
            v_devg = np.asarray(velocity(params, x0, 0.0, ctx, cfg=cfg, layers=sources["device"], options=opts["device"]))
        return out, v_devg

    def golden_sample():
        with phase("golden: sample pair"):
            return golden_pair(lambda x, t: velocity(params, x, t, ctx, cfg=cfg, layers=sources["fp32"]), np.asarray(x0),
                               num_steps=cfg.num_steps)

    def op_report(ex_r, rec_r, device_r, caches_r):
        """The op report's pass (every ttnn call, one at a time): its output and the CSV's rows."""
        n_before = len(rec_r.state.log)
        layer_fn, ex_r.layer_fn = ex_r.layer_fn, tagged(ex_r, rec_r)
        eager = ex_r.forward(np.asarray(emb), caches_r, traced=False)
        ex_r.layer_fn = layer_fn
        written = None
        if out_dir is not None:
            with atomic_output(out_dir / "ops.csv") as tmp:
                written = write_op_report(tmp, rec_r.state.log[n_before:], backend=backend, ttnn=ns, device=device_r)
        return eager, written

    def teacher_forced(ex_t, caches_t):
        """The graph's velocities at the golden trajectory's points (``device.trajectory``), once the
        golden pair is there."""
        with phase("device: waits for the golden sample pair"):
            _, gold_vs = pair.result()
        with phase("device: teacher-forced steps"):
            return ex_t.steps(params.action_in, params.action_out, *teacher_forced_points(np.asarray(x0), gold_vs),
                              caches_t)

    def beside():
        """On the emulation the op report's pass and then the teacher-forced steps run in a thread of
        their own, beside the free-running sample: on a second emulated device with its own recorder,
        graph object (the steps through a compiled layer of its own) and caches; the generated weights,
        read only, are shared. It shares no buffer with the other passes, so each side's numbers are
        unchanged. Returns (op report's output, CSV rows, teacher-forced velocities or None, the second
        graph: its calls and compilations)."""
        with phase("op report (eager stack, own thread)"):
            device_r = ns.open_device(0)
            rec_r = Recorder(ns)
            ex_r = TTExpert(rec_r, device_r, ex.weights, final_norm, cfg=cfg, port=port)
            caches_r = make_caches(ns, device_r, ex_r.upload_cache)
            ex_r.set_context(S)
            eager, written = op_report(ex_r, rec_r, device_r, caches_r)
        tf_vs = None
        if p.sample:
            ex_r.layer_fn = FastTwin(ex_r, ns) if p.fast else tagged(ex_r, rec_r)
            tf_vs = teacher_forced(ex_r, caches_r)
        return eager, written, tf_vs, (rec_r, ex_r.layer_fn)

    # One thread runs the golden, in order: the sample pair first (the teacher-forced steps wait for
    # it), then the layer inputs, the layers and the step; on the emulation another runs the op report
    # and then the teacher-forced steps (``beside``), while this one runs the free-running sample.
    emulated = isinstance(ns, Emulation)
    # The golden needs only the model: it starts before the graph's buffers are made (the graph's
    # legality checked first, so a bad port fails at once, not after the golden's passes).
    check_graph(port, cfg)
    pool = (lambda: concurrent.futures.ThreadPoolExecutor(max_workers=1)) if overlap else _InOrder
    with pool() as golden, pool() as aside:
        pair = golden.submit(golden_sample) if p.sample else None
        inputs = golden.submit(golden_inputs)
        gold = golden.submit(lambda: golden_rest(inputs.result()[0]))
        rec, ex, fast, caches = device_model()
        report = aside.submit(beside) if emulated else None
        if not emulated:
            with phase("device: waits for the golden"):
                gold.result()  # the chip's timed passes run alone
                if pair is not None:
                    pair.result()
            with phase("device: op report (eager stack)"):
                eager, written = op_report(ex, rec, device, caches)
        rec.state.sync = None
        with phase("device: traced stack"):
            traced = ex.forward(np.asarray(emb), caches)
        replay_ms = _time_replays(ex, emb, caches) if backend == "chip" else None
        with phase("device: sample / step"):
            # the step at (x0, t = 0) is the traced stack through action_out_proj (``TTExpert.step``: emb is
            # its action_in_proj), also the sample's first: the stack is not run again for it
            v_dev = np.asarray(action_out_proj(params.action_out, traced))
            if p.sample:
                a_dev, vs_dev = ex.sample(params.action_in, params.action_out, np.asarray(x0), caches, seq_len=S,
                                          v0=v_dev)
        if p.sample and not emulated:  # a chip runs one pass at a time
            tf_vs = teacher_forced(ex, caches)
        with phase("device: waits for the golden's layer inputs"):
            x_ins, v_fp32 = inputs.result()
        got = {}
        for i in p.layers:
            with phase("device: layers"):
                got[i] = ex.run_layer(i, x_ins[i], caches)
        with phase("device: waits for the golden"):
            gold_layers, v_devg = gold.result()
        if emulated:
            with phase("device: waits for the op report and the teacher-forced steps"):
                eager, written, tf_vs, (rec_r, twin_r) = report.result()
        if p.sample:
            gold_a, gold_vs = pair.result()
            sample = compare_sample(tf_vs, gold_a, gold_vs, a_dev, vs_dev)

    for i in p.layers:
        row = {"layer": i, "vs_fp32": metric(gold_layers[i]["fp32"], got[i], TARGETS["layer"]),
               "vs_device_golden": metric(gold_layers[i]["device"], got[i], TARGETS["layer_device"])}
        if p.localise or row["vs_fp32"]["pass"] is False or row["vs_device_golden"]["pass"] is False:
            layer, ck, cv = sources["device"](jnp.asarray(i, jnp.int32))
            x_in = jnp.asarray(x_ins[i])

            def golden_layer(tap, layer=layer, ck=ck, cv=cv, x_in=x_in):
                return decoder_layer(layer, x_in, (ck, cv), S, rope["device"], cfg=cfg, options=opts["device"], tap=tap)

            with phase("device: localise"):
                row["ops"] = localise(ex, i, x_ins[i], caches, golden_layer,
                                      kv_fmt_cast=lambda a: np.asarray(cast(jnp.asarray(a), port.precision.cache)))
        res["layers"].append(row)
    if written is not None:
        res["csv_rows"], res["csv_durations"] = written["rows"], written["durations"]
    res["traced_vs_eager_max_abs"] = float(np.max(np.abs(traced - eager)))
    if replay_ms is not None:
        res["trace_replay_ms"] = replay_ms
    res["step"] = {"vs_fp32": metric(v_fp32, v_dev, TARGETS["velocity"]),
                   "vs_device_golden": metric(v_devg, v_dev, TARGETS["velocity_device"])}
    if p.sample:
        res["sample"] = sample
        # the fp32 golden's v(x0, 0) twice: its layer-input stack and its sample's first step (index 0: from x0)
        res["golden_self"] = metric(gold_vs[0, 0], v_fp32, TARGETS["golden_self"])
    res["calls"] = len(rec.state.log) + (len(rec_r.state.log) if emulated else 0)
    if isinstance(fast, FastTwin):
        res["compilations"] = fast.compilations + (twin_r.compilations if isinstance(twin_r, FastTwin) else 0)
    return res


def velocity_input(params, x0, cfg: ExpertConfig):
    """The expert input at t = 0 (host fp32 action_in_proj, as the device port computes it)."""
    return action_in_proj(params.action_in, x0, 0.0, cfg=cfg.action_in)


def _time_replays(ex: TTExpert, emb, caches, n: int = 20) -> dict[str, float]:
    """Chip only: wall time of ``forward`` (upload + trace replay + readback), median / min over n."""
    t = time_repeats({"forward": lambda: ex.forward(np.asarray(emb), caches)}, reps=n, warmup=0)["forward"]
    return {"median_ms": t.median_s * 1e3, "min_ms": t.min_s * 1e3, "n": n}


RANDOM_MODEL = "random: one layer of weights and cache rows, rolled per layer"
RANDOM_NOTE = ("The random model's layers are one layer of bf16-valued weights and cache rows rolled by "
               "layer-dependent shifts (`device.parity_model`): the 64 layers are not independent draws, so "
               "layer-to-layer statistics and how errors accumulate over depth are not those of a trained (or "
               "independently drawn) 64-layer model; `--checkpoint` runs a real one.")
TRAJECTORY_NOTE = ("Sample: the targets apply to the *teacher-forced* velocity only (the graph's velocity at the "
                   "golden's x_t, t: the port error of one step). The free-running column compares each side "
                   "along its own trajectory; the baseline column is the fp32 golden against itself started one "
                   "bf16 rounding step away (x_0 + 1 ulp): the Euler sampler amplifies any difference that size "
                   "(the Fourier action embedding is very sensitive to x), so a free-running PCC near the "
                   "baseline's is the sampler, not the port, and is never a failure.")


def markdown(results: list[dict]) -> str:
    """The parity tables of one or more runs (layers and step; the sample's per-step table; op-by-op
    tables of localised layers; notes)."""
    header = ["run", "layer / quantity", "PCC vs fp32", "max-abs vs fp32", "PCC vs device golden",
              "max-abs vs device golden"]
    table, extra, notes = [], [], set()
    for r in results:
        run = f"{r['backend']}, L={r['num_layers']} D={r['hidden']} S={r['seq_len']} Smax={r['max_seq_len']}, " \
              f"{r['weights']} w, {r['attn_mode']}"
        rows = [(f"layer {x['layer']}", x["vs_fp32"], x["vs_device_golden"]) for x in r["layers"]]
        rows.append(("step velocity (traced)", r["step"]["vs_fp32"], r["step"]["vs_device_golden"]))
        for q, a, b in rows:
            table.append([run, q, pcc_text(a), abs_text(a), pcc_text(b), abs_text(b)])
        if "golden_self" in r:  # the fp32 golden against itself (device.parity_checks: golden_self)
            g = r["golden_self"]
            table.append([run, "fp32 golden vs itself: v(x0, 0), stack vs sample step 0", pcc_text(g), abs_text(g),
                          "-", "-"])
        trace = "0 (bit for bit)" if r["traced_vs_eager_max_abs"] == 0 else f"{r['traced_vs_eager_max_abs']:.1e} FAIL"
        table.append([run, "traced vs eager stack, max-abs", "-", trace, "-", "-"])
        if r.get("model", "").startswith("random"):
            notes.add(RANDOM_NOTE)
        if "sample" in r:
            notes.add(TRAJECTORY_NOTE)
            s = r["sample"]
            steps = [[str(x["step"]), f"{x['t']:.1f}", pcc_text(x["teacher_forced"]), abs_text(x["teacher_forced"]),
                      pcc_text(x["free_running"]), pcc_text(x["baseline"])] for x in s["steps"]]
            steps.append(["final action", "1.0", "-", "-", pcc_text(s["action_free_running"]),
                          pcc_text(s["action_baseline"])])
            extra.append(f"10-step sample ({run}): velocity PCC vs the fp32 golden per Euler step (target "
                         f"{s['steps'][0]['teacher_forced']['target']} on the teacher-forced column)\n\n" + md_table(
                             ["step", "t", "teacher-forced PCC", "teacher-forced max-abs", "free-running PCC",
                              "golden baseline PCC (x_0 + 1 bf16 ulp)"], steps))
        for x in r["layers"]:
            if "ops" in x:
                loc = x["ops"]
                first = loc["first_divergence"]
                head = (f"first divergence: **{first['op']}** ({describe(first)}, max-abs {abs_text(first)})"
                        if first else "no op below target")
                extra.append(f"Layer {x['layer']} op by op vs the device golden ({run}): {head}\n\n" + md_table(
                    ["op", "PCC", "max-abs"], [[o["op"], pcc_text(o), abs_text(o)] for o in loc["ops"]]))
    return "\n\n".join([md_table(header, table), *extra, *sorted(notes)])


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m device.parity", description=__doc__.split("\n\n")[0],
                                 epilog="example: python -m device.parity --backend emulation --preset tiny "
                                        "--out /tmp/parity")
    ap.add_argument("--backend", choices=("chip", "emulation"), default="chip")
    ap.add_argument("--preset", default="alpamayo_tt", help="alpamayo_tt / alpamayo_r1 / tiny (tiny runs at H = 32)")
    ap.add_argument("--num-layers", type=int, default=None)
    ap.add_argument("--layers", default=None, help="comma-separated layers to compare (default: first, middle, last)")
    ap.add_argument("--seq-len", type=int, default=None, help="S (default: 4600, or 100 for tiny)")
    ap.add_argument("--weights", choices=choices_of(WeightFormat), default="bfp8")
    ap.add_argument("--cache", choices=choices_of(CacheFormat), default="bf16")
    ap.add_argument("--attn-mode", choices=choices_of(AttnMode), default="decode")
    ap.add_argument("--no-sample", action="store_true", help="skip the 10-step sample")
    ap.add_argument("--checkpoint", default=None, help="HF-format safetensors file of the expert")
    ap.add_argument("--expert-prefix", default="", help="key prefix in the checkpoint (e.g. 'expert.')")
    ap.add_argument("--localise", "--first-divergence", action="store_true",
                    help="compare every chosen layer op by op with the golden and name the first op below target "
                         "(always done for a layer that misses its target)")
    ap.add_argument("--eager", action="store_true",
                    help="emulation: every pass one ttnn call at a time (default: the layer compiled once, "
                         "device.fast_twin, bit for bit the same; the op report's pass is eager either way)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=output_dir, default="parity_out",
                    help="folder for parity.json / parity.md / ops.csv (existing or new)")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def problem_from_args(a: argparse.Namespace) -> Problem:
    """The run described by the arguments; raises ValueError naming the argument, its value and
    what was expected (checked before any computation)."""
    over = {}
    if a.num_layers is not None:
        if a.num_layers < 1:
            raise ValueError(f"--num-layers={a.num_layers} must be >= 1")
        over["num_layers"] = a.num_layers
    if a.preset == "tiny":
        over["head_dim"] = 32  # rotary_embedding_hf needs head_dim 32 or a multiple of 64
    try:
        cfg = ExpertConfig.preset(a.preset, **over)
    except ValueError as exc:
        raise ValueError(f"--preset: {exc}") from None
    L = cfg.num_layers
    if a.layers is None:
        layers = sorted({0, L // 2, L - 1})
    else:
        try:
            layers = sorted({int(s) for s in a.layers.split(",")})
        except ValueError:
            raise ValueError(f"--layers={a.layers!r} must be comma-separated layer indices, e.g. '0,31,63'") from None
        bad = [i for i in layers if not 0 <= i < L]
        if bad:
            raise ValueError(f"--layers={a.layers!r}: entries {bad} outside [0, {L}) (the model has {L} layers)")
    seq_len = a.seq_len if a.seq_len is not None else (100 if a.preset == "tiny" else 4600)
    try:
        cfg.check_seq_len(seq_len)
    except ValueError as exc:
        raise ValueError(f"--seq-len: {exc}") from None
    return Problem(cfg=cfg, seq_len=seq_len, layers=tuple(layers), seed=a.seed, sample=not a.no_sample,
                   port=Port.for_expert(cfg, weights=a.weights, cache=a.cache, attn_mode=a.attn_mode),
                   checkpoint=a.checkpoint, expert_prefix=a.expert_prefix, localise=a.localise, fast=not a.eager)


def check_checkpoint(path: str, cfg: ExpertConfig, *, expert_prefix: str = "") -> None:
    """Raise ValueError unless ``path`` is a readable safetensors file holding every decoder
    parameter of ``cfg`` (and the final norm) in HF's shape. Reads only the header."""
    from safetensors import safe_open

    f = input_file(path, name="--checkpoint", expected="an HF-format .safetensors file")
    try:
        with safe_open(str(f), framework="numpy") as st:
            shapes = {k: tuple(st.get_slice(k).get_shape()) for k in st.keys()}  # noqa: SIM118 - not a dict
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types for a bad file
        raise ValueError(f"--checkpoint={path!r} is not a readable safetensors file "
                         f"({type(exc).__name__}: {exc})") from None
    want = {f"{expert_prefix}layers.{i}.{s.hf_suffix}": s.hf_shape(cfg)
            for i in range(cfg.num_layers) for s in LAYER_PARAMS}
    want[expert_prefix + FINAL_NORM_HF] = (cfg.hidden,)
    missing = [k for k in want if k not in shapes]
    if missing:
        raise ValueError(f"--checkpoint={path!r} lacks {len(missing)} of the {len(want)} decoder tensors of this "
                         f"geometry (L={cfg.num_layers}, --expert-prefix={expert_prefix!r}), e.g. {missing[0]!r}")
    wrong = [(k, shapes[k], v) for k, v in want.items() if shapes[k] != v]
    if wrong:
        k, got, exp = wrong[0]
        raise ValueError(f"--checkpoint={path!r}: {k!r} has shape {list(got)}, this geometry needs {list(exp)} "
                         f"({len(wrong)} tensors differ; wrong --preset / --num-layers?)")


def check_finite_checkpoint(path: str, cfg: ExpertConfig, *, expert_prefix: str = "") -> None:
    """Raise ValueError with the count when a tensor of the checkpoint holds NaN / Inf (the golden and the
    graph would both be NaN and nothing could be compared). Reads one tensor at a time."""
    bad = CheckpointStream(path, cfg, expert_prefix=expert_prefix).nonfinite()
    if bad:
        k = next(iter(bad))
        raise ValueError(f"--checkpoint={path!r} holds {sum(bad.values())} non-finite values (NaN / Inf) in "
                         f"{len(bad)} tensors, e.g. {bad[k]} in {k!r}: nothing to compare against")


def main(argv=None) -> int:
    """The command line (``jaxref.validation.cli_main``): every input error, the output folder included, is
    ``error: ...`` and status 2 before any computation."""
    return cli_main(build_parser(), argv, run_cli)


def run_cli(a: argparse.Namespace) -> int:
    p = problem_from_args(a)
    out = a.out
    if p.checkpoint:
        check_checkpoint(p.checkpoint, p.cfg, expert_prefix=p.expert_prefix)
        check_finite_checkpoint(p.checkpoint, p.cfg, expert_prefix=p.expert_prefix)
    if a.backend == "chip":
        try:
            ns, device = open_chip()
        except NoChip as exc:
            print(f"device.parity: no Blackhole chip: {exc}. Nothing was run and nothing is reported. "
                  "Run on a machine with a Blackhole, or pass --backend emulation to run the same graph on "
                  "the JAX emulation of its ttnn ops.", file=sys.stderr)
            return 2
        sync = lambda: ns.synchronize_device(device)
    else:
        ns = Emulation()
        device, sync = ns.open_device(0), None
    out.mkdir(parents=True, exist_ok=True)
    try:
        res = run(p, ns, device, backend=a.backend, out_dir=out, sync=sync)
    finally:
        ns.close_device(device)
    md = markdown([res])
    bad = failures(res)
    if res["traced_vs_eager_max_abs"] != 0:
        bad.append(f"traced vs eager stack: max-abs {res['traced_vs_eager_max_abs']:.3e} (a trace must replay bit for bit)")
    res["failures"] = bad
    atomic_write_text(out / "parity.json", dumps_strict(res, indent=2) + "\n")
    atomic_write_text(out / "parity.md", f"# ttnn graph parity ({a.backend})\n\n{md}\n")
    print(md)
    print(f"\nwrote {out / 'parity.json'}, {out / 'parity.md'}, {out / 'ops.csv'}")
    if bad:
        print(f"device.parity: FAIL: {len(bad)} rows miss their target:\n  " + "\n  ".join(bad), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
