"""The expert as a ttnn graph (``TTExpert``), written once against an op namespace ``ns``.

``ns`` is ``ttnn`` itself on a Blackhole, or ``device.emulation.Emulation()`` here (optionally wrapped
in a ``device.recorder.Recorder``). The graph follows seeds/EXPERT_NOTES.md:

* persistent device buffers - weights, x [1, 1, T, D], cos / sin [1, 1, T, H], the mask
  [1, 1, rows, Smax] - are allocated in ``__init__``, before any trace capture (a buffer allocated
  after a capture can alias the trace's intermediates); the 64 VLM KV caches [1, K, Smax, H] are the
  caller's buffers (``upload_cache``), also allocated before the first ``forward``;
* per layer 19 ops (``layer``): rms_norm -> linear(wqkv) -> nlp_create_qkv_heads -> rms_norm(q),
  rms_norm(k) -> rotary_embedding_hf(q), (k) -> fill_cache(K), fill_cache(V) at row Smax - T ->
  attention -> nlp_concat_heads -> linear(wo) -> add -> rms_norm -> linear(w1, silu), linear(w3) ->
  mul -> linear(w2) -> add; ``layer_fn`` is the swap point for a fused kernel, signature
  ``(layer_idx, x, k_cache, v_cache) -> x``;
* every ttnn config comes from one ``costmodel.blackhole.port.Port`` (held as ``self.port``, built
  once): ``port.matmuls[name].build(ns)``, ``port.attention.build(ns)``, ``port.compute.build(ns)``, the
  storage formats ``port.precision``; ``check_graph`` is the one legality check (the graph's own
  shape rules, then ``Port.check``);
* attention ``decode``: the zero-copy 8-user view (cache [1, K, Smax, H] as [K, 1, Smax, H]; q
  [1, N, T, H] as [1, K, G T, H]) into ``scaled_dot_product_attention_decode`` with the [1, 1, G T, Smax]
  bfp4 mask, k_chunk 128; ``standard``: ``scaled_dot_product_attention`` on the GQA q with the
  [1, 1, T, Smax] mask;
* ``forward`` replays one trace of all layers + final norm, re-captured when a cache or the mask
  buffer address changes; ``set_context`` rewrites cos / sin / mask; ``step`` / ``sample`` run the
  action projections and the 10-step Euler loop on the host.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from costmodel.blackhole.port import Port
from device.host import host_tensor, layer_formats, mask_host, read_host, rope_host
from jaxref.action import ActionInParams, ActionOutParams, action_in_proj, action_out_proj, flow_times
from jaxref.config import ExpertConfig
from jaxref.numerics.formats import TILE
from jaxref.validation import require


def check_graph(port: Port, cfg: ExpertConfig) -> None:
    """Raise ValueError unless this graph can run ``port`` at ``cfg``: the graph's own shape rules
    (tile-aligned tokens and widths: fill_cache writes whole tile rows; rotary_embedding_hf's head_dim),
    then the port's one legality rule (``Port.check``: every matmul and the SDPA config)."""
    T, H = cfg.num_tokens, cfg.head_dim
    require(T % TILE == 0, f"num_tokens={T} must be a multiple of {TILE} (tile rows; fill_cache offset)")
    require(H == TILE or H % (2 * TILE) == 0,
            f"head_dim={H} must be {TILE} or a multiple of {2 * TILE} (rotary_embedding_hf)")
    require(cfg.hidden % TILE == 0 and cfg.ffn % TILE == 0,
            f"hidden={cfg.hidden} / ffn={cfg.ffn} must be tile multiples")
    port.check(cfg)


class TTExpert:
    """The expert's device graph (see the module docstring).

    Args:
      ns: op namespace (``ttnn`` or an emulation); device: from ``ns.open_device``.
      layers: per-layer device arrays (``device.host.layer_from_params`` / ``layer_from_hf``) or device
        buffers already in their device format (read once, in order: a lazy sequence works).
      final_norm: [1, 1, 1, D] gamma.
      cfg: model geometry; port: formats, attention kernel, op configs (default ``Port.for_expert(cfg)``).
    """

    def __init__(self, ns, device, layers: Sequence[dict[str, np.ndarray]], final_norm: np.ndarray, *,
                 cfg: ExpertConfig, port: Port | None = None):
        port = Port.for_expert(cfg) if port is None else port
        if not isinstance(port, Port):
            raise TypeError(f"port is a {type(port).__name__}; expected a costmodel.blackhole.port.Port")
        check_graph(port, cfg)
        if len(layers) != cfg.num_layers:
            raise ValueError(f"got {len(layers)} layers of weights, cfg has num_layers={cfg.num_layers}")
        self.ns, self.device, self.cfg, self.port = ns, device, cfg, port
        prec = port.precision
        T, D, H, smax = cfg.num_tokens, cfg.hidden, cfg.head_dim, cfg.max_seq_len
        fmts = layer_formats(prec.weights)
        # a layer's entries are host arrays (uploaded here) or device buffers already in their format
        # (the emulation's generated tensors: a full-size model without 64 layers of values at once)
        self.weights = [{name: a if hasattr(a, "buffer_address") else self._upload(a, fmts[name])
                         for name, a in layer.items()} for layer in layers]
        self.final_norm = self._upload(final_norm, prec.norm_weights)
        self.x = self._upload(np.zeros((1, 1, T, D), np.float32), prec.activations)
        self.cos = self._upload(np.zeros((1, 1, T, H), np.float32), prec.activations)
        self.sin = self._upload(np.zeros((1, 1, T, H), np.float32), prec.activations)
        self.mask_rows = port.mask_rows(cfg)
        self.mask = self._upload(np.zeros((1, 1, self.mask_rows, smax), np.float32), prec.mask)
        self.matmul = {name: c.build(ns) for name, c in port.matmuls.items()}
        self.sdpa_config = port.attention.build(ns)
        self.compute = port.compute.build(ns)
        self.tail_row = smax - T  # own K/V rows [Smax - T, Smax) of every cache (tile aligned: T % 32 == 0)
        self.layer_fn = self.layer
        self.seq_len: int | None = None
        self._trace = None  # (buffer-address key, trace id, output tensor)

    def _upload(self, array: np.ndarray, fmt: str):
        return self.ns.to_device(host_tensor(self.ns, array, fmt), self.device, memory_config=self.ns.DRAM_MEMORY_CONFIG)

    def _write(self, buf, array: np.ndarray, fmt: str) -> None:
        self.ns.copy_host_to_device_tensor(host_tensor(self.ns, array, fmt), buf)

    def upload_cache(self, k: np.ndarray, v: np.ndarray):
        """One layer's VLM cache rows k, v [K, Smax, H] -> device buffers [1, K, Smax, H] (cache format)."""
        want = (self.cfg.num_kv_heads, self.cfg.max_seq_len, self.cfg.head_dim)
        if k.shape != want or v.shape != want:
            raise ValueError(f"cache k / v must be [K, Smax, H] = {want}, got {k.shape} / {v.shape}")
        return tuple(self._upload(np.asarray(a, np.float32)[None], self.port.precision.cache) for a in (k, v))

    def set_context(self, seq_len: int, rope_delta: int = 0) -> None:
        """Write cos / sin for positions ``i + rope_delta + S`` and the mask for S into the persistent
        buffers (in place: the trace keeps its addresses). Requires S <= Smax - T."""
        self.cfg.check_seq_len(seq_len)
        cos, sin = rope_host(seq_len, rope_delta, self.cfg)
        act = self.port.precision.activations
        self._write(self.cos, cos, act)
        self._write(self.sin, sin, act)
        self._write(self.mask, mask_host(seq_len, self.cfg, rows=self.mask_rows), self.port.precision.mask)
        self.seq_len = seq_len

    # ---- the layer ----------------------------------------------------------------------
    def layer(self, i: int, x, k_cache, v_cache):
        """Decoder layer i: x [1, 1, T, D] -> [1, 1, T, D]; writes the own roped K / V into rows
        [Smax - T, Smax) of k_cache / v_cache [1, K, Smax, H]."""
        ns, cfg, w, eps = self.ns, self.cfg, self.weights[i], self.cfg.rms_eps
        N, K, T, H, smax = cfg.num_heads, cfg.num_kv_heads, cfg.num_tokens, cfg.head_dim, cfg.max_seq_len
        ck = self.compute
        h = ns.rms_norm(x, epsilon=eps, weight=w["input_norm"], compute_kernel_config=ck)
        qkv = ns.linear(h, w["wqkv"], program_config=self.matmul["wqkv"], compute_kernel_config=ck, dtype=ns.bfloat16)
        ns.deallocate(h)
        q, k, v = ns.experimental.nlp_create_qkv_heads(qkv, num_heads=N, num_kv_heads=K, transpose_k_heads=False)
        ns.deallocate(qkv)
        qn = ns.rms_norm(q, epsilon=eps, weight=w["q_norm"], compute_kernel_config=ck)
        kn = ns.rms_norm(k, epsilon=eps, weight=w["k_norm"], compute_kernel_config=ck)
        ns.deallocate(q)
        ns.deallocate(k)
        qr = ns.experimental.rotary_embedding_hf(qn, self.cos, self.sin)
        kr = ns.experimental.rotary_embedding_hf(kn, self.cos, self.sin)
        ns.deallocate(qn)
        ns.deallocate(kn)
        ns.fill_cache(k_cache, kr, 0, update_idx=self.tail_row)
        ns.fill_cache(v_cache, v, 0, update_idx=self.tail_row)
        ns.deallocate(kr)
        ns.deallocate(v)
        if self.port.attention.attn_mode == "decode":
            a = ns.transformer.scaled_dot_product_attention_decode(
                ns.reshape(qr, (1, K, (N // K) * T, H)), ns.reshape(k_cache, (K, 1, smax, H)),
                ns.reshape(v_cache, (K, 1, smax, H)), is_causal=False, attn_mask=self.mask, scale=H**-0.5,
                program_config=self.sdpa_config, compute_kernel_config=ck)
            a = ns.reshape(a, (1, N, T, H))
        else:
            a = ns.transformer.scaled_dot_product_attention(
                qr, k_cache, v_cache, attn_mask=self.mask, is_causal=False, scale=H**-0.5,
                program_config=self.sdpa_config, compute_kernel_config=ck)
        ns.deallocate(qr)
        c = ns.experimental.nlp_concat_heads(a)
        ns.deallocate(a)
        o = ns.linear(c, w["wo"], program_config=self.matmul["wo"], compute_kernel_config=ck, dtype=ns.bfloat16)
        ns.deallocate(c)
        x1 = ns.add(x, o)
        ns.deallocate(o)
        n = ns.rms_norm(x1, epsilon=eps, weight=w["post_norm"], compute_kernel_config=ck)
        g = ns.linear(n, w["w1"], program_config=self.matmul["w1"], compute_kernel_config=ck, dtype=ns.bfloat16)
        u = ns.linear(n, w["w3"], program_config=self.matmul["w3"], compute_kernel_config=ck, dtype=ns.bfloat16)
        ns.deallocate(n)
        m = ns.mul(g, u)
        ns.deallocate(g)
        ns.deallocate(u)
        d = ns.linear(m, w["w2"], program_config=self.matmul["w2"], compute_kernel_config=ck, dtype=ns.bfloat16)
        ns.deallocate(m)
        out = ns.add(x1, d)
        ns.deallocate(x1)
        ns.deallocate(d)
        return out

    def run_layer(self, i: int, x: np.ndarray, caches) -> np.ndarray:
        """Eager: layer i on a host input x [T, D] (uploaded as bf16 into the persistent x buffer)."""
        self._require_context()
        self._write(self.x, np.asarray(x, np.float32).reshape(self.x.shape), self.port.precision.activations)
        return read_host(self.ns, self.layer_fn(i, self.x, *caches[i]))[0, 0]

    def _stack(self, caches):
        x = self.x
        for i in range(self.cfg.num_layers):
            x_next = self.layer_fn(i, x, *caches[i])
            if x is not self.x:
                self.ns.deallocate(x)
            x = x_next
        return self.ns.rms_norm(x, epsilon=self.cfg.rms_eps, weight=self.final_norm, compute_kernel_config=self.compute)

    def _require_context(self) -> None:
        if self.seq_len is None:
            raise ValueError("call set_context(seq_len, rope_delta) before running the graph")

    # ---- the traced stack, step and sample -------------------------------------------------
    def forward(self, emb: np.ndarray, caches, *, traced: bool = True) -> np.ndarray:
        """All layers + final RMSNorm on the expert input emb [T, D]; returns the normed hidden [T, D].

        ``caches``: per layer (k, v) device buffers. Traced: one trace of the whole stack, captured on
        first use (after an eager run that compiles the programs) and re-captured when a cache or the
        mask buffer address changes; the output is read right after the replay. A namespace that runs
        each op as it records it (``CAPTURE_RUNS_OPS``: the emulation) needs no compiling run, and
        its capture's outputs are the results (a replay right after would run the stack twice, where
        a chip runs it once).
        """
        self._require_context()
        if len(caches) != self.cfg.num_layers:
            raise ValueError(f"got {len(caches)} cache layers, cfg has num_layers={self.cfg.num_layers}")
        ns = self.ns
        self._write(self.x, np.asarray(emb, np.float32).reshape(self.x.shape), self.port.precision.activations)
        if not traced:
            return read_host(ns, self._stack(caches))[0, 0]
        key = tuple(t.buffer_address() for kv in caches for t in kv) + (self.mask.buffer_address(),)
        runs_ops = getattr(ns, "CAPTURE_RUNS_OPS", False)
        captured = self._trace is None or self._trace[0] != key
        if captured:
            if self._trace is not None:
                ns.release_trace(self.device, self._trace[1])
            if not runs_ops:  # ttnn: compile every program before the capture
                ns.deallocate(self._stack(caches))
            tid = ns.begin_trace_capture(self.device, cq_id=0)
            out = self._stack(caches)
            ns.end_trace_capture(self.device, tid, cq_id=0)
            self._trace = (key, tid, out)
        if not (captured and runs_ops):  # a capture that ran the ops holds their results: the stack runs once
            ns.execute_trace(self.device, self._trace[1], cq_id=0, blocking=True)
        return read_host(ns, self._trace[2])[0, 0]

    def step(self, action_in: ActionInParams, action_out: ActionOutParams, x_t: np.ndarray, t: float, caches, *,
             traced: bool = True) -> np.ndarray:
        """One velocity: host fp32 action_in_proj -> device stack -> host fp32 action_out_proj. [T, A]."""
        emb = action_in_proj(action_in, np.asarray(x_t, np.float32), t, cfg=self.cfg.action_in)
        return np.asarray(action_out_proj(action_out, self.forward(np.asarray(emb), caches, traced=traced)))

    def steps(self, action_in: ActionInParams, action_out: ActionOutParams, xs: np.ndarray, ts, caches) -> np.ndarray:
        """Velocities at independent points (x_t [T, A], t), [B, T, A]: each one ``step`` (traced), in
        order. A ``layer_fn`` with a ``many`` method (``device.fast_twin.FastTwin``) instead runs
        each layer once for all B inputs (each uploaded into its own buffer, the persistent x left
        alone), the same numbers; the caches end as the last step leaves them."""
        many = getattr(self.layer_fn, "many", None)
        if many is None:
            return np.stack([self.step(action_in, action_out, x, float(t), caches) for x, t in zip(xs, ts, strict=True)])
        self._require_context()
        act = self.port.precision.activations
        hs = [self._upload(np.asarray(action_in_proj(action_in, np.asarray(x, np.float32), float(t),
                                                     cfg=self.cfg.action_in)).reshape(self.x.shape), act)
              for x, t in zip(xs, ts, strict=True)]
        for i in range(self.cfg.num_layers):
            hs = many(i, hs, *caches[i])
        outs = [read_host(self.ns, self.ns.rms_norm(h, epsilon=self.cfg.rms_eps, weight=self.final_norm,
                                                    compute_kernel_config=self.compute))[0, 0] for h in hs]
        return np.stack([np.asarray(action_out_proj(action_out, o)) for o in outs])

    def sample(self, action_in: ActionInParams, action_out: ActionOutParams, x0: np.ndarray, caches, *,
               seq_len: int, rope_delta: int = 0, traced: bool = True,
               v0: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Euler flow matching over ``cfg.num_steps`` steps (t = linspace(0, 1, steps + 1)) from x0 [T, A];
        cos / sin / mask are re-uploaded first (another trajectory may have changed them).
        ``v0``: the velocity at (x0, t = 0) [T, A] when the caller has it already (this graph's own
        ``step`` there, on these caches and this context): the first step then runs no stack.
        Returns (final action [T, A], per-step velocities [steps, T, A])."""
        self.set_context(seq_len, rope_delta)
        ts = np.asarray(flow_times(self.cfg.num_steps))
        x, vs = np.asarray(x0, np.float32), []
        for k, (t0, t1) in enumerate(itertools.pairwise(ts)):
            if k == 0 and v0 is not None:
                vs.append(np.asarray(v0, np.float32))
            else:
                vs.append(self.step(action_in, action_out, x, float(t0), caches, traced=traced))
            x = x + (t1 - t0) * vs[-1]
        return x, np.stack(vs)
