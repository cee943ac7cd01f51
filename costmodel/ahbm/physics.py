"""Physical specification of the ADR-0060 AHBM attention kernels: what each case costs.

The analytic model in ``cases`` / ``pipeline`` is a closed-form surrogate of this machine,
``simulate`` executes it event by event. Every rate,
latency and capacity is a field of ``costmodel.hardware.AHBM`` (its metadata says unit and
source); the tile / key / message lists are ``jaxref.attention``'s plans. Times of an engine are
the ones below; engines are FIFO resources serving requests in the order they become ready
(a sub-tile's GEMM requests the engine once its operand landed and its dependencies are met;
ties by issue order); nothing else is charged.

Resources per PE: one HBM controller (all DMAs of the PE, FIFO; n bytes take
n / (pe_controller_bytes_per_s x hbm_efficiency), data lands dma_local_latency_s after the
transfer ends; the pseudo-channel interleave is ``hbm_interleave_bytes``), one GEMM engine, one
MATH engine (``math_elems_per_cycle_per_pe`` x clock element-ops per second), one TCM write port
(``tcm_bytes_per_s``), one IPCQ tx and one rx port, and the kernel's CPU (program order, one op at
a time: ``cpu_issue_s`` per primitive op, ``cpu_issue_composite_s`` per composite / ex_composite;
an op starts only after its issue). Per CUBE: one CUBE-NOC injection and one ejection port.
Per SIP: the 4x4 CUBE-NOC mesh of directed links (``cube_noc_bytes_per_s`` each, XY routing,
cut-through, FIFO; see that field). UCIe is used only across SIPs, which no kernel does.

GEMM time: 2 x pad(M, gemm_tile_m) x pad(K, gemm_tile_k) x pad(N, gemm_tile_n) /
(gemm_flops_per_cycle_per_pe x pe_clock_hz), pad = round up to a multiple.

Inner tile j of a sweep (rows = M-folded query rows, k_j = the tile's real key count, d = head
dim, bf16 operands = 2 B, fp32 accumulators = 4 B):

* QK_j = composite Q.K^T: K_j streamed in sub-tiles of gemm_tile_n keys (last one ragged); per
  sub-tile of k keys: DMA of k x d x 2 B (HBM controller; needs a free operand buffer, see
  ``composite_runahead_subtiles``), GEMM (M = rows, K = d, N = k), write-back of rows x k x 4 B
  (TCM port). Done when its last write-back ends.
* SM_j = softmax on MATH: 5 element-ops per score (scale, max, subtract, exp, sum) x rows x k_j
  + 5 per row (maximum, m - m_new, correction exp, l x corr, +); 9 primitive ops to issue
  (ADR-0060 section 3: ``l = l * corr + tl.sum(P)`` comes before the P.V composite). A tile the
  plan marks partial (on the causal diagonal, or holding fewer valid keys than the tile) first
  pays ``mask_ops_per_partial_tile`` score-sized MATH ops (mask build and add), each issued.
* PV_j = composite P.V: V_j streamed in sub-tiles of gemm_tile_k keys; per sub-tile DMA
  k x d x 2 B, GEMM (M = rows, K = k, N = d) accumulating in the engine; one write-back of
  rows x d x 4 B at the end.
* MG_j = O merge on MATH: 2 element-ops per output (O x corr + O_j) x rows x d; 2 primitive ops,
  O x corr issued before PV_j (TL;DR Kernel 1's ``O = O * corr + tl.composite(P, V)``), + after.

Dependencies: SM_j after QK_j and MG_{j-1}; PV_j's GEMM after SM_j (its V DMA may run ahead);
K / V / S buffers double-buffered (QK_j waits for QK_{j-2}; its GEMM for SM_{j-2}; PV_j for
PV_{j-2}); under opt2 the whole ex_composite of tile j + 1 (its V DMA included) waits for
SM_j (the P buffer). The CPU: opt1 issues QK_j, waits for it, issues SM_j (9 ops), O x corr and PV_j,
waits PV_j, issues the merge's +; opt3 as opt1 but QK_{j+1} is issued before waiting on QK_j (primed with QK_0);
opt2 (only where 'ex_composite' is in ``AHBM.commands``) issues QK_j and one ex_composite
(= V_j streaming + SM_j + PV_j + MG_j run by the scheduler) per tile and never waits.

Order inside a tile (the ADR kernel text ``O = O * corr + composite(P, V_j)``, as the simulation
runs it): QK_j's scale is its epilogue on MATH per sub-tile before that sub-tile's write-back;
P_j is ready after max, maximum, subtract and exp; every softmax op and O x corr are issued
before PV_j and run on MATH while it streams; only the final + waits for PV_j. Sub-tiles of
concurrent composites share the GEMM engine in the order they request it (a Q.K^T sub-tile
requests it when its operand landed and its predecessor ended; a P.V holds the engine's
accumulators from its first sub-tile to its last).

A visit (one query block's sweep of consecutive tiles on one PE) first DMAs its query rows
(rows x d x 2 B) and ends after its last merge. prefill normalises (rows x d MATH) and stores
O (rows x d x 2 B) after each visit; prefill_sp keeps a q block's fp32 (m, l, O) in HBM across
ring steps: a visit also loads rows x (d + 2) x 4 B with its query rows and stores them back
after the last merge. Ragged tiles and blocks use their real sizes throughout.

Cases (per kv head; the K kv heads run in parallel on disjoint CUBE Groups; the groups must fit
the ``sips`` budget: K x C <= sips x 16 CUBEs):

* decode (one PE): B requests one after another, each a visit over the whole KV (rows = G x T, T
  query tokens per step; the T tokens' causal mask among themselves is not charged);
  then normalise (rows x d MATH) and store (rows x d x 2 B DMA) per request.
* decode_sp: keys placed over R = C x P ranks by ``KVPlacement`` (``round_robin``: ceil / floor
  of S / R per rank; ``contiguous``: rank l holds clip(S - l B, 0, B), B = ceil(capacity / R),
  so only frontier ranks hold keys when S < capacity); each rank sweeps its keys for the B
  requests, then the reduce of ``reduce_plan(C, P, kind, cube_mesh)``'s rounds: payload
  B x G x (d + 2) x 4 B; a Level-2 message goes over IPCQ (tx / rx ports, ``ipcq_bytes_per_s``,
  + dma_local_latency_s), a Level-1 message over the CUBE NOC (route from the sub-mesh
  coordinates: the group is a rows x cols rectangle of the SIP mesh, cube id = row x cols + col;
  XY routes stay inside it, so its position does not matter). The reduce is data-driven (section
  4.3): each rank starts it when its own sweep ends (ragged ranks, empty contiguous ranks: 0), so
  the end is a max over ranks of (its sweep end + its longest path). A rank sends its (m, l, O)
  when it reaches the round (3 tl.sends, section 4), each receive (3 tl.recvs) is merged on MATH
  (B x G x (3 d + 8) element-ops, 11 primitives). Messages queue FIFO on every port / link they
  hold; a round's later queues serve each source's first message first. The root then
  normalises and stores (2 primitives).
* prefill (one PE): q blocks of TILE rows x G heads (rows = G x block rows), block i sweeps the
  causal tiles of ``Flash.plan`` (wholly future tiles skipped), B times.
* prefill_sp (ring): C = G CUBEs, one q head each (rows = block rows: q blocks of TILE rows, the last
  one ragged; KV tiles of min(TILE, B) keys, each block's last tile ragged), contiguous KV blocks of
  B = ceil(S / C) keys; at step s CUBE c holds block (c - s) mod C and its P PEs sweep q blocks
  i = p mod P against that block's causal tiles (``Ring.plan``). Ring neighbours are one CUBE-NOC
  hop apart (a Hamiltonian cycle of the sub-mesh). At the start of step s < C - 1 a CUBE
  forwards its block (K and V: 2 x B x d x 2 B) to the next CUBE (one message, delivered to all
  P PEs of the receiver), subject to the receiver's ``ring_recv_depth`` buffers. Blocks live in
  TCM if every PE fits ring_recv_depth blocks + its working set in ``tcm_bytes_per_pe``: then the
  PEs first DMA their own block into TCM and tile operands are read from TCM at
  ``tcm_bytes_per_s`` (no HBM DMA, no DMA latency); otherwise they are staged in HBM: each PE of
  the receiver writes the arriving block into its own HBM (block bytes on its controller, FIFO
  with its tile DMAs; the block counts as received when that write ends) and tiles stream from
  HBM like decode. A CUBE starts step s when it finished step s - 1 and holds the block. At the
  end every PE loads each of its q blocks' (m, l, O), normalises and stores O.
"""

__all__: list[str] = []  # documentation only: the machine the model and the simulation both implement
