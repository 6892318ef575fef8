"""Tree attention: T queries over a prefix KV plus a tree block with an arbitrary (non-square) mask.

Contract (reference twin: ``kernels.reference.tree_attention_ref``)::

    tree_attention(q [T,Hq,D], k_cache [cap,Hkv,D], v_cache [cap,Hkv,D], prefix_len, tree_mask [T,tree_len],
                   scale) -> out [T,Hq,D] (q.dtype)

Keys ``[0, prefix_len)`` are visible to every query; key ``prefix_len + j`` is visible to query ``i`` iff
``tree_mask[i, j]``. ``T != tree_len`` is allowed (the draft expands ``w`` leaves of an ``n``-node tree: a
``(w, n)`` mask; the target verifies a square one). GQA: ``Hq`` is a multiple of ``Hkv``. A query row that
sees no key outputs zeros (only padding rows with ``prefix_len == 0`` can). q and the cache are expected
already rotated (``kernels.rope_kv_write`` before it).

Fused variant ``rope_tree_attention(qkv, positions, inv_freq, k_cache, v_cache, write_slots, Hq, prefix_len,
tree_mask, scale)``: the same launch does ``rope_kv_write``'s work. Every program rotates its q rows in registers
(cos / sin per row: once per token instead measured the same time, H200 2026-11-30); the last split of
each (row block, kv head) rotates the T new keys, writes them and the values at ``write_slots``, passes a CTA
barrier and reads the tree keys back through L2 (``.cg``). Its extra contract: every write slot is a tree slot,
``prefix_len <= write_slots[t] < prefix_len + tree_len`` (the prefix splits read while the last one writes; every
producer in the runtime writes at prefix_len + tree slot), and T <= ROPE_MAX_TOKENS (each row block writes all T
new keys of its kv head: identical values, read back only after its own writes). The runtime uses it for
single-token steps only (ROPE_FASTER_MAX_TOKENS: where it measured faster).

Work split. One program owns one (row block, kv head, split): rows are the ``T * Hq/Hkv`` (token, head in
group) pairs that share one kv head, so each K/V tile is loaded once for the whole GQA group and fed to
``tl.dot`` with M = BLOCK_M rows. The prefix key blocks are divided over ``num_splits`` programs
(split-KV, flash-decoding style); the tree keys (usually one block) go to the last split, which has the
fewest prefix blocks.

Split-KV combine inside the same launch. Each split writes its unnormalised partial (acc, running max m,
running sum l, in float32) to a workspace, then increments a per-(row block, kv head) counter with an
acq_rel atomic after a CTA barrier (the CUTLASS "semaphore" pattern: barrier orders every thread's stores
before thread 0's release). The program that sees ``count == num_splits - 1`` arrives last: it reads
all partials (``.cg``, L2 only), merges them with the usual max-rescaling and writes the output, then
resets the counter to 0. No spinning, no co-residency assumption, one launch, static shapes: capturable
in CUDA graphs. The counters live in a cached buffer per (device, stream) that is zero between launches;
two launches on *different streams of one device at the same time* each get their own buffer.

Prefetch before the PDL wait (``prefix_ready=True``, PREFETCH_PREFIX). Under programmatic dependent launch the kernel
may start while the launch before it still runs; by default it waits (``griddepcontrol.wait``) before reading
anything. A caller that knows the launch right before this one writes neither the prefix keys / values nor
``prefix_len`` nor the positions (the runtime's single-token step: that launch is the QKV GEMM, which writes q and the
new k / v only) passes ``prefix_ready``: each program then loads its first prefix block and computes q's RoPE angles
before the wait, and folds that block in first (the same order as the loop: bitwise the same output). With the QKV
GEMM released early (``kernels.pdl`` role ``pre_attention``) the attention's programs take the SMs the GEMM leaves
idle and stream their K/V beside it. H200 2026-11-30 (bench/results/step_variants_2026-11-30_prefetch.json,
..._pre_attention_default.json): Llama-3-8B single-token step 4.362 -> 4.307 ms, the attention's exposed time 376 ->
304 us per step; after rope_kv_write on multi-token steps it measured slower (8B rows 8 +0.04 ms, 1B rows 16
+0.11 ms), so the runtime passes it on the fused single-token path only. Why (compiled offline with the device's
Triton 3.6): Triton stages each loaded tile into shared memory right after its load (the TTGIR puts the tile's
`local_alloc` next to its `tt.load`, before the wait), so a program reaches the wait only once its K/V have arrived,
and q's load, issued after the wait, adds a second memory latency. Behind a long launch (the QKV GEMM, ~12-16 us)
the first one is hidden; behind rope_kv_write (~3 us) it is not, and the two latencies now run in series where the
plain launch overlapped them.

For CUDA graphs, ``prefix_len`` may be a 1-element integer device tensor: the grid and split count are
then sized from ``cap`` and the kernel reads the length on device, so one graph serves every step.

Roofline (H200, bf16, Llama-3-8B head shape Hq=32, Hkv=8, D=128): bytes = ctx * Hkv * D * 2 (K,V) * 2 B
= 4 KiB per context token (64 MiB at 16K, 15.6 us at 4.29 TB/s); FLOPs = 4 * T * Hq * ctx * D, so the
intensity is T * G FLOP/B (G = Hq/Hkv = 4): T=8 is 32 FLOP/B (bandwidth-bound), T=64 is 256 FLOP/B,
past the H200's ~200 FLOP/B bf16 ridge, so big verify trees are tensor-core/issue-bound.
Measured (H200, CUDA graph, bench/bench_kernels.py, 2026-11-29): 16K context T=8 36 us (44% of the copy
ceiling), T=64 82 us; 1K context 15-35 us (launch + combine latency dominate). Against SDPA with a bool
mask: 10x faster at 16K/T=8, 1.2x at 1K/T=64; against eager matmul+softmax 4-9x.
Known cost: the combine is one program per tile reading the partials in sequence (latency-bound, several
us at 16+ splits). It reads only the splits that own prefix blocks plus the last one, and a split takes at least
MIN_BLOCKS_PER_SPLIT blocks, or is one KEYS_PER_SPLIT-key block (H200, 2026-11-30: 8B rows 8 ctx 2000
21.9 -> 13.2 us, floor 1.9 us); a hierarchical or multi-program combine is the next step.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, pdl_start

LOG2E = 1.4426950408889634  # 1 / ln(2): softmax runs on exp2
TARGET_PROGRAMS_PER_SM = 2  # split-KV aims for this many programs per SM
MAX_SPLITS = 64
KEYS_PER_SPLIT = 256
"""The wide tile (CUDA, head dims <= 128, <= 64 rows per program, no tile override): one block of this many prefix
keys per split (one stage, 8 warps), loaded at once instead of in four dependent 64-key steps. H200 2026-11-30
(bench/results/attention_splits_gpu_2026-11-30_tiles.json), summed over ctx 512/1024/2000, us: 8B rows 1 29.8 ->
28.0, rows 8 37.6 -> 33.3, rows 16 48.9 -> 45.6; 1B rows 1 28.2 -> 25.9, rows 8 34.8 -> 31.5, rows 16 38.8 -> 39.2.
Elsewhere (CPU, wider heads, bigger row blocks, an explicit block_n or num_stages) the 64-key (32 for head
dims > 128) tile, pipelined over 3 stages, with MIN_BLOCKS_PER_SPLIT."""
MIN_BLOCKS_PER_SPLIT = 4
"""Prefix blocks a split takes at least outside the wide tile (the rest of the splits stay empty and are not
merged): fewer, longer splits trade parallelism for a shorter serial merge. bench/bench_attention_splits.py swept
it on the GPU at the 64-key tile:
H200 2026-11-30 (bench/results/attention_splits_gpu_2026-11-30.json), Llama-3-8B shapes, ctx 512/1024/2000
summed, us: rows 8: 1 -> 47.3, 2 -> 39.3, 4 -> 37.7, 8 -> 48.6; rows 16: 70.6, 57.9, 49.1, 53.8; rows 1: 37.6,
30.3, 30.2, 38.5. 4 is the best on the sum at every row count (2 wins at ctx <= 1024 by <= 1.3 us)."""
SMEM_BUDGET = 192 * 1024  # bytes of pipelined tiles per program (H200: 227 KiB/block, rest for layouts)
ROPE_MAX_TOKENS = 64
"""rope_tree_attention's T limit: every row block's last split writes all T new keys of its kv head."""
ROPE_FASTER_MAX_TOKENS = 1
"""Steps of up to this many tokens are faster with rope_tree_attention than with rope_kv_write + tree_attention, so
the runtime's `kernels.rope_attention` uses it only there (TritonAttention.rope_max_tokens). H200, CUDA-graph step
replays (bench/bench_step_variants.py, bench/results/step_variants_2026-11-30_{2bd79c2,c19e99f}.json): Llama-3-8B
rows 1 4.523 -> 4.458 ms (logits identical); rows 8 4.669 -> 5.020, rows 16 4.903 -> 5.703, Llama-3.2-1B rows 16
1.153 -> 1.334 ms. The extra time grows with T x D, the new-key tile the last split rotates and writes (q's cos /
sin per (token, head) row or once per token: the same time), not with spills (bench/kernel_resources.py: the same
registers and stack with and without the fused path). Nsight Compute (2026-11-30, 8B rows 8,
bench/results/ncu_2026-11-30_60a42eb_r8_attention/): 32.5 us against 5.4 + 18.0 us, 45% more instructions (the
accurate sin / cos per (token, head) row: 4x redundant across the GQA group) from a program twice as long, whose
top stall is instruction fetch; with the QKV GEMM released early it still loses at 8 / 16 rows."""
PREFETCH_PREFIX = True
"""Whether a launch whose caller says `prefix_ready` loads its first prefix K/V block (and q's RoPE angles) before its
PDL wait, i.e. beside the kernel launched right before it (with a `pre_attention` early release: kernels/pdl.py). An
experiment switch for side-by-side runs (bench/bench_step_variants.py `attn_noprefetch`)."""
MAX_REGISTERS: int | None = None
"""A register budget per thread for the CUDA launch (Triton's `maxnreg`), or None: ptxas' own choice (~240 for the 8B
wide tile, no spills: Nsight Compute and bench/kernel_resources.py agree). 128 measured slower, 255 the same
(2026-11-30, bench/results/step_variants_2026-11-30_spills.json): an experiment switch, off."""
PREFETCH_HOLD = False
"""Experiment switch (CUDA only; not measured on a GPU yet; bench/bench_step_variants.py patch `attn_hold`): with
prefix_ready, pass the prefetched K/V tiles through an opaque move after the PDL wait, so their shared-memory staging
is placed after the wait and the loads stay in flight across it (without it Triton stages them before the wait, and
q's load, after the wait, runs in series with them: the prefetch's loss behind short launches). Offline (Triton 3.6,
sm_90a): the same registers and SASS length, no shared-memory store before the wait (32 before it without)."""
TMA_PREFIX = False
"""Experiment switch (not measured on a GPU yet; bench/bench_step_variants.py patch `attn_tma`): load the prefix K/V
blocks as whole [BLOCK_N, D] boxes through tensor descriptors (TMA on Hopper) instead of per-element pointers, whose
address arithmetic is ~20% of the wide tile's instructions (Nsight Compute source counters, 2026-11-30). Keys past
prefix_len in the last block are read and masked (scores -inf, V rows zeroed): the same result as the masked
pointer loads. Caches a descriptor cannot cover (not row-contiguous, boxes over 256) keep the pointers."""
WIDE_WARPS: int | None = None
"""Warps of the wide tile's programs (None: 8). An experiment switch (bench/bench_step_variants.py `attn_w16`): Nsight
Compute reads the 8-warp program as instruction-latency-bound (2 warps per scheduler, ~10 cycles per instruction);
16 warps give each scheduler 4 at <= 128 registers a thread (offline sm_90a compile: 8B rows 1 / 8 spill 20 / 4 bytes,
the 1B's 64-row tile 896). Not measured on a GPU yet."""
_COUNTERS_INIT = 1024  # int32 counters per (device, stream), grown on demand

_counter_cache: dict[tuple, torch.Tensor] = {}
_sm_count_cache: dict[int, int] = {}


@triton.jit
def _load_kv(k_ptrs, v_ptrs, key_ok, L2_ONLY: tl.constexpr):
    """A key tile: K as [D, BLOCK_N], V as [BLOCK_N, D]. `L2_ONLY`: ``.cg`` (keys this program wrote itself)."""
    if L2_ONLY:
        k = tl.load(k_ptrs, mask=key_ok[None, :], other=0.0, cache_modifier=".cg")
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0, cache_modifier=".cg")
    else:
        k = tl.load(k_ptrs, mask=key_ok[None, :], other=0.0)
        v = tl.load(v_ptrs, mask=key_ok[:, None], other=0.0)
    return k, v


TMA_OUT_OF_BOUNDS_ROW = tl.constexpr(1 << 30)
"""A box row past any cache: a TMA box there moves no data and reads as zeros (an empty split's prefetch)."""


@triton.jit
def _prefix_tile_tma(KDesc, VDesc, b, owned, prefix_len, col, BLOCK_N: tl.constexpr):
    """TMA_PREFIX: prefix block `b` as whole [BLOCK_N, D] boxes through the tensor descriptors at (b * BLOCK_N, col):
    (K [D, BLOCK_N], V [BLOCK_N, D], key_ok [BLOCK_N]), no per-element addresses. `owned` False (an empty split):
    the box lies past the cache and moves nothing. Keys past prefix_len come in the block that straddles it: their
    scores are masked and their V rows zeroed there (what a masked load gives: a non-finite stale value cannot leak
    through p = 0); rows past the cache read as zeros."""
    keys = b * BLOCK_N + tl.arange(0, BLOCK_N)
    key_ok = keys < prefix_len
    row = tl.where(owned, b * BLOCK_N, TMA_OUT_OF_BOUNDS_ROW)
    k = tl.trans(KDesc.load([row, col]))
    v = VDesc.load([row, col])
    if (b + 1) * BLOCK_N > prefix_len:  # the straddling block only: one select
        v = tl.where(key_ok[:, None], v, 0.0)
    return k, v, key_ok


@triton.jit
def _hold(x):
    """x through an opaque PTX move with side effects (CUDA only): ordered after the PDL wait that precedes it, so what
    consumes it (the tile's shared-memory store) cannot be placed before that wait, while the load stays in flight."""
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=x.dtype, is_pure=False, pack=2)


@triton.jit
def _prefix_block(k_head, v_head, b, prefix_len, d, stride_kc, stride_vc, BLOCK_N: tl.constexpr):
    """Prefix block `b`: its K [D, BLOCK_N] and V [BLOCK_N, D] pointers (for `_load_kv`) and its keys' mask."""
    keys = b * BLOCK_N + tl.arange(0, BLOCK_N)
    key_ok = keys < prefix_len
    return (k_head + keys[None, :].to(tl.int64) * stride_kc + d[:, None],
            v_head + keys[:, None].to(tl.int64) * stride_vc + d[None, :], key_ok)


@triton.jit
def _attend_tile(acc, m_i, l_i, q, k, v, visible, qk_scale, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr):
    """One online-softmax step over a loaded key tile (`_load_kv`); scores live in the log2 domain."""
    if UPCAST:
        k = k.to(tl.float32)
        v = v.to(tl.float32)
    s = tl.dot(q, k, input_precision=DOT_PRECISION) * qk_scale
    s = tl.where(visible, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    # A row that has seen only masked keys keeps m = -inf; use 0 as its pivot so exp2 gives 0, not NaN.
    m_pivot = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m_i - m_pivot)
    p = tl.exp2(s - m_pivot[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
    return acc, m_new, l_i


@triton.jit
def _attend_block(
    acc, m_i, l_i, q, k_ptrs, v_ptrs, key_ok, visible, qk_scale,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, L2_ONLY: tl.constexpr,
):
    """Load a BLOCK_N key tile and fold it in (`_load_kv`, `_attend_tile`)."""
    k, v = _load_kv(k_ptrs, v_ptrs, key_ok, L2_ONLY)
    return _attend_tile(acc, m_i, l_i, q, k, v, visible, qk_scale, UPCAST, DOT_PRECISION)


@triton.jit
def _rope_angles(pos, freq):
    """cos and sin [R, D] of the RoPE angles float32(pos) * inv_freq[d % (D/2)] (`kernels.rope`'s maths)."""
    angle = pos[:, None] * freq[None, :]
    return tl.cos(angle), tl.sin(angle)


@triton.jit
def _rope_rows(ptrs, swapped_ptrs, mask, cos, sin, sign):
    """RoPE (rotate-half) of rows loaded at `ptrs` [R, D], in float32: x * cos + sign * x[(d + D/2) % D] * sin
    (whole rows: no split halves)."""
    x = tl.load(ptrs, mask=mask, other=0.0).to(tl.float32)
    xs = tl.load(swapped_ptrs, mask=mask, other=0.0).to(tl.float32)
    return x * cos + sign[None, :] * xs * sin


@triton.jit
def _merge_partial(m_tot, l_tot, o_tot, WsAcc, WsM, WsL, ws, d, HEAD_DIM: tl.constexpr):
    """Fold one split's partial (rows `ws` of the workspace) into the running (max, sum, output)."""
    m_s = tl.load(WsM + ws, cache_modifier=".cg")
    l_s = tl.load(WsL + ws, cache_modifier=".cg")
    a_s = tl.load(WsAcc + ws[:, None] * HEAD_DIM + d[None, :], cache_modifier=".cg")
    m_new = tl.maximum(m_tot, m_s)
    m_pivot = tl.where(m_new == float("-inf"), 0.0, m_new)
    w_old = tl.exp2(m_tot - m_pivot)
    w_s = tl.exp2(m_s - m_pivot)
    return m_new, l_tot * w_old + l_s * w_s, o_tot * w_old[:, None] + a_s * w_s[:, None]


@triton.jit
def _tree_attention_kernel(
    Q, K, V, KDesc, VDesc, Out, Mask, prefix_arg, WsAcc, WsM, WsL, Counter, Pos, InvFreq, Slots,
    n_rows, tree_len, num_splits, min_blocks, qk_scale, n_tok, num_q_heads,
    stride_qt, stride_qh, stride_kc, stride_kh, stride_vc, stride_vh, stride_ot, stride_oh, stride_mt,
    stride_pos, stride_slot,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
    SPLIT: tl.constexpr, PREFIX_IN_TENSOR: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr,
    USE_PDL: tl.constexpr, ROPE: tl.constexpr, BLOCK_T: tl.constexpr, PREFETCH: tl.constexpr, TMA: tl.constexpr,
    HOLD: tl.constexpr,
):
    # PREFETCH (the caller's `prefix_ready`: the prefix K/V, prefix_len and the positions were not written by the
    # launch right before this one): this split's first prefix block and q's RoPE angles are loaded before the PDL
    # wait, beside the previous kernel; everything the previous kernel writes (q, the new k / v) is read after it.
    if not PREFETCH:
        pdl_start(USE_PDL)
    pid_m = tl.program_id(0)
    kvh = tl.program_id(1)
    split = tl.program_id(2)
    if PREFIX_IN_TENSOR:
        prefix_len = tl.load(prefix_arg).to(tl.int32)
    else:
        prefix_len = prefix_arg

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    tok = rows // GROUP
    head = kvh * GROUP + rows % GROUP
    d = tl.arange(0, HEAD_DIM)
    k_head = K + kvh * stride_kh
    v_head = V + kvh * stride_vh

    # Prefix keys: every row sees every key below prefix_len; this split owns blocks [lo, hi).
    n_blocks = tl.cdiv(prefix_len, BLOCK_N)
    per_split = tl.maximum(tl.cdiv(n_blocks, num_splits), min_blocks)  # >= min_blocks: fewer partials to merge
    lo = split * per_split
    hi = tl.minimum(lo + per_split, n_blocks)
    if PREFETCH:  # block lo (all keys masked off when this split owns none: lo * BLOCK_N >= prefix_len)
        if TMA:
            k0, v0, ok0 = _prefix_tile_tma(KDesc, VDesc, lo, lo < hi, prefix_len, kvh * HEAD_DIM, BLOCK_N)
        else:
            k_ptrs, v_ptrs, ok0 = _prefix_block(k_head, v_head, lo, prefix_len, d, stride_kc, stride_vc, BLOCK_N)
            k0, v0 = _load_kv(k_ptrs, v_ptrs, ok0, False)
    if ROPE:
        d_swap = (d + HEAD_DIM // 2) % HEAD_DIM
        sign = tl.where(d < HEAD_DIM // 2, -1.0, 1.0)
        freq = tl.load(InvFreq + d % (HEAD_DIM // 2))
        pos = tl.load(Pos + tok * stride_pos, mask=row_ok, other=0).to(tl.float32)
        q_cos, q_sin = _rope_angles(pos, freq)
    if PREFETCH:
        pdl_start(USE_PDL)
        if HOLD:  # the tiles pass through an opaque move after the wait: their shared-memory staging comes after it
            k0 = _hold(k0)
            v0 = _hold(v0)

    q_ptrs = Q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d[None, :]
    if ROPE:  # Q is the QKV projection's output: rotate this program's q rows in registers
        q = _rope_rows(q_ptrs, Q + tok[:, None] * stride_qt + head[:, None] * stride_qh + d_swap[None, :],
                       row_ok[:, None], q_cos, q_sin, sign).to(Q.dtype.element_ty)
    else:
        q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    first = lo
    if PREFETCH:
        if lo < hi:
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k0, v0, ok0[None, :] & row_ok[:, None], qk_scale,
                                         UPCAST, DOT_PRECISION)
        first = lo + 1
    for b in range(first, hi):
        if TMA:
            k, v, key_ok = _prefix_tile_tma(KDesc, VDesc, b, True, prefix_len, kvh * HEAD_DIM, BLOCK_N)
            acc, m_i, l_i = _attend_tile(acc, m_i, l_i, q, k, v, key_ok[None, :] & row_ok[:, None], qk_scale, UPCAST,
                                         DOT_PRECISION)
        else:
            k_ptrs, v_ptrs, key_ok = _prefix_block(k_head, v_head, b, prefix_len, d, stride_kc, stride_vc, BLOCK_N)
            acc, m_i, l_i = _attend_block(acc, m_i, l_i, q, k_ptrs, v_ptrs, key_ok, key_ok[None, :] & row_ok[:, None],
                                          qk_scale, UPCAST, DOT_PRECISION, False)

    # Tree keys prefix_len + j: visible per (token, j) through the mask. Owned by the last split.
    if split == num_splits - 1:
        if ROPE:  # first the n_tok new keys / values of this kv head into the cache (every row block writes the
            # same values), then a CTA barrier: the tree loop below reads them back through L2
            t_idx = tl.arange(0, BLOCK_T)
            t_ok = t_idx < n_tok
            t_row = Q + t_idx[:, None].to(tl.int64) * stride_qt
            k_col = (num_q_heads + kvh) * HEAD_DIM
            v_col = (num_q_heads + tl.num_programs(1) + kvh) * HEAD_DIM
            t_pos = tl.load(Pos + t_idx * stride_pos, mask=t_ok, other=0).to(tl.float32)
            t_cos, t_sin = _rope_angles(t_pos, freq)
            k_new = _rope_rows(t_row + k_col + d[None, :], t_row + k_col + d_swap[None, :], t_ok[:, None], t_cos,
                               t_sin, sign)
            v_new = tl.load(t_row + v_col + d[None, :], mask=t_ok[:, None], other=0.0)
            slot = tl.load(Slots + t_idx * stride_slot, mask=t_ok, other=0).to(tl.int64)
            tl.store(k_head + slot[:, None] * stride_kc + d[None, :], k_new.to(K.dtype.element_ty), mask=t_ok[:, None])
            tl.store(v_head + slot[:, None] * stride_vc + d[None, :], v_new.to(V.dtype.element_ty), mask=t_ok[:, None])
            tl.debug_barrier()
        for tb in range(0, tl.cdiv(tree_len, BLOCK_N)):
            j = tb * BLOCK_N + tl.arange(0, BLOCK_N)
            j_ok = j < tree_len
            vis = tl.load(Mask + tok[:, None] * stride_mt + j[None, :], mask=row_ok[:, None] & j_ok[None, :], other=0)
            keys = (prefix_len + j).to(tl.int64)
            acc, m_i, l_i = _attend_block(
                acc, m_i, l_i, q,
                k_head + keys[None, :] * stride_kc + d[:, None],
                v_head + keys[:, None] * stride_vc + d[None, :],
                j_ok, vis != 0, qk_scale, UPCAST, DOT_PRECISION, ROPE,
            )

    out_ptrs = Out + tok[:, None] * stride_ot + head[:, None] * stride_oh + d[None, :]
    if not SPLIT:
        l_safe = tl.where(l_i == 0.0, 1.0, l_i)
        tl.store(out_ptrs, (acc / l_safe[:, None]).to(Out.dtype.element_ty), mask=row_ok[:, None])
    else:
        tile = pid_m * tl.num_programs(1) + kvh
        r = tl.arange(0, BLOCK_M)
        slot = (tile * num_splits + split) * BLOCK_M + r
        tl.store(WsAcc + slot[:, None] * HEAD_DIM + d[None, :], acc)
        tl.store(WsM + slot, m_i)
        tl.store(WsL + slot, l_i)
        tl.debug_barrier()  # every thread's partial stores precede the release below
        count = tl.atomic_add(Counter + tile, 1, sem="acq_rel", scope="gpu")
        if count == num_splits - 1:  # last split of this tile to arrive: merge all partials
            tl.debug_barrier()
            m_tot = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_tot = tl.zeros([BLOCK_M], dtype=tl.float32)
            o_tot = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
            # Only splits that own prefix blocks, then the last (tree keys): the others wrote m = -inf, l = 0,
            # which merge to nothing (a CUDA-graph launch sized from the cache capacity has many such).
            used = tl.minimum(tl.cdiv(n_blocks, tl.maximum(per_split, 1)), num_splits - 1)
            for s_idx in range(0, used):
                m_tot, l_tot, o_tot = _merge_partial(m_tot, l_tot, o_tot, WsAcc, WsM, WsL,
                                                     (tile * num_splits + s_idx) * BLOCK_M + r, d, HEAD_DIM)
            m_tot, l_tot, o_tot = _merge_partial(m_tot, l_tot, o_tot, WsAcc, WsM, WsL,
                                                 (tile * num_splits + num_splits - 1) * BLOCK_M + r, d, HEAD_DIM)
            l_safe = tl.where(l_tot == 0.0, 1.0, l_tot)
            tl.store(out_ptrs, (o_tot / l_safe[:, None]).to(Out.dtype.element_ty), mask=row_ok[:, None])
            tl.atomic_xchg(Counter + tile, 0)  # ready for the next launch on this stream


def attention_tile(n_rows: int, head_dim: int, elt_size: int, cuda: bool, *, block_m: int | None = None,
                   block_n: int | None = None, num_stages: int | None = None,
                   num_warps: int | None = None) -> tuple[int, int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, stages, warps, wide) of a launch over `n_rows` query rows (tokens x GQA group): the
    heuristic, or the given overrides. wide: one KEYS_PER_SPLIT-key block per split (CUDA, head dims <= 128, <= 64
    rows per program, no tile override). Pure: bench/kernel_resources.py compiles the same tiles offline."""
    bm = block_m or min(128 if n_rows >= 128 else 64, max(16, triton.next_power_of_2(n_rows)))
    wide = cuda and head_dim <= 128 and bm <= 64 and not (block_n or num_stages)
    bn = block_n or (KEYS_PER_SPLIT if wide else 64 if head_dim <= 128 else 32)
    stages = num_stages or (1 if wide else 3)
    if not (block_n or num_stages):  # shrink the pipeline until q + K/V stages fit in shared memory
        bn, stages = _fit_shared_memory(bm, bn, head_dim, elt_size, stages)
    if num_warps is None and wide and WIDE_WARPS is not None:
        if isinstance(WIDE_WARPS, bool) or not isinstance(WIDE_WARPS, int) or WIDE_WARPS not in (4, 8, 16):
            raise ValueError(f"kernels.tree_attention.WIDE_WARPS: expected 4, 8, 16 or None, got {WIDE_WARPS!r}")
        num_warps = WIDE_WARPS
    return bm, bn, stages, num_warps or (4 if bm < 64 and bn < 256 else 8), wide


def _sm_count(device: torch.device) -> int:
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _sm_count_cache:
        _sm_count_cache[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _sm_count_cache[idx]


def _counters(device: torch.device, needed: int) -> torch.Tensor:
    """Self-resetting split counters, one buffer per (device, stream).

    A buffer first needed during CUDA graph capture is allocated inside the capture (graph pool; its
    zero-fill is recorded and replays harmlessly), so warm-up on another stream is not required.
    """
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _counter_cache.get(key)
    if buf is None or buf.numel() < needed:
        buf = torch.zeros(max(needed, _COUNTERS_INIT), dtype=torch.int32, device=device)
        _counter_cache[key] = buf
    return buf


def _fit_shared_memory(bm: int, bn: int, d: int, elt: int, stages: int) -> tuple[int, int]:
    """(block_n, stages) with q [bm, d] + stages x (K + V) [bn, d] tiles under SMEM_BUDGET bytes."""
    while elt * (bm * d + stages * 2 * bn * d) > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif bn > 16:
            bn //= 2
        else:
            break
    return bn, stages


def num_splits_for(sms: int, base_programs: int, n_blocks: int) -> int:
    """Splits of each (row block, kv head) on a GPU of `sms` multiprocessors: TARGET_PROGRAMS_PER_SM programs per SM,
    at most one prefix block each and MAX_SPLITS. Pure: bench/kernel_resources.py sizes its offline launches with it."""
    return max(1, min(MAX_SPLITS, n_blocks, TARGET_PROGRAMS_PER_SM * sms // max(base_programs, 1)))


def _pick_num_splits(device: torch.device, base_programs: int, n_blocks: int) -> int:
    return num_splits_for(_sm_count(device), base_programs, n_blocks) if device.type == "cuda" else 1


def tree_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    prefix_len: int | torch.Tensor,
    tree_mask: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    block_n: int | None = None,
    block_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    min_blocks_per_split: int | None = None,
    prefix_ready: bool = False,
) -> torch.Tensor:
    """Attention of q [T,Hq,D] over k/v_cache [cap,Hkv,D] keys [0, prefix_len) + masked tree keys.

    Args:
        q: [T, Hq, D] queries (fp32, fp16 or bf16); the last dim must be contiguous.
        k_cache, v_cache: [cap, Hkv, D]; tree key j lives at slot ``prefix_len + j``.
        prefix_len: Python int, or a 1-element int32/int64 tensor on q's device (CUDA-graph friendly:
            the split count is then sized from ``cap``; the caller guarantees prefix_len + tree_len <= cap).
        tree_mask: [T, tree_len] bool (or uint8); may be non-square.
        scale: softmax scale (usually D ** -0.5).
        out: optional [T, Hq, D] output buffer of q's dtype.
        num_splits, block_n, block_m, num_warps, num_stages: tuning overrides (tests, benchmarks);
            None picks the heuristic.
        min_blocks_per_split: prefix blocks a split takes at least (None: 1 for the wide tile, else
            MIN_BLOCKS_PER_SPLIT).
        prefix_ready: the caller's promise that the launch right before this one (in stream order) writes
            neither the prefix keys / values [0, prefix_len) nor prefix_len (e.g. a QKV projection or
            rope_kv_write, which write q and tree slots; the runtime passes it on the fused single-token path
            only, where it measured faster). With PDL the kernel then loads its first prefix block before
            waiting for that launch (PREFETCH_PREFIX).

    Returns:
        out [T, Hq, D] in q's dtype.
    """
    t, hq, d = q.shape
    _check_attention_operands("tree_attention", q, k_cache, v_cache, prefix_len, tree_mask)
    if q.stride(-1) != 1:
        raise ValueError(f"tree_attention: q needs a contiguous last dim, got strides {q.stride()}")
    out = _out_buffer("tree_attention", out, q.shape, q.dtype, q.device)
    return _launch(q, k_cache, v_cache, prefix_len, tree_mask, scale, out, None, num_splits=num_splits,
                   block_n=block_n, block_m=block_m, num_warps=num_warps, num_stages=num_stages,
                   min_blocks_per_split=min_blocks_per_split, prefix_ready=prefix_ready)


def rope_tree_attention(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    write_slots: torch.Tensor,
    num_heads: int,
    prefix_len: int | torch.Tensor,
    tree_mask: torch.Tensor,
    scale: float,
    *,
    out: torch.Tensor | None = None,
    num_splits: int | None = None,
    block_n: int | None = None,
    prefix_ready: bool = False,
) -> torch.Tensor:
    """``kernels.rope_kv_write`` and ``tree_attention`` in one launch: the q rows are rotated in registers, and the
    last split of each kv head rotates the T new keys, writes them and the values to the caches at
    ``write_slots``, then attends to the tree keys. Same result as the two kernels (q rounded to qkv's dtype).

    Args:
        qkv: [T, (Hq + 2 Hkv) * D] QKV projection output (not rotated); last dim contiguous, any row stride.
        positions, inv_freq, write_slots, num_heads: as ``kernels.rope_kv_write`` (Hkv is k_cache's).
        k_cache, v_cache, prefix_len, tree_mask, scale, out, num_splits, block_n, prefix_ready: as
            ``tree_attention`` (out is [T, Hq, D] of qkv's dtype; prefix_ready also covers `positions`).

    Extra contract (not checked: that would sync with the host): every write slot is a tree slot,
    ``prefix_len <= write_slots[t] < prefix_len + tree_len`` (the prefix splits read their keys while the last
    split writes), and T <= ROPE_MAX_TOKENS (every row block writes all T new keys of its kv head).

    Returns:
        out [T, Hq, D] in qkv's dtype.
    """
    from kernels.rope import check_rope_operands

    if qkv.dim() != 2:
        raise ValueError(f"rope_tree_attention: qkv must be 2-d [T, (Hq + 2 Hkv) * D], got {tuple(qkv.shape)}")
    t, width = qkv.shape
    if k_cache.dim() != 3:
        raise ValueError(f"rope_tree_attention: k_cache must be [cap, Hkv, D], got {tuple(k_cache.shape)}")
    hkv = k_cache.shape[1]
    d = check_rope_operands("rope_tree_attention", t, qkv.device, positions, inv_freq, k_cache, v_cache,
                            write_slots, num_heads, hkv)
    if width != (num_heads + 2 * hkv) * d:
        raise ValueError(f"rope_tree_attention: qkv width {width} != (Hq + 2 Hkv) * D = "
                         f"({num_heads} + 2 * {hkv}) * {d}")
    if qkv.stride(-1) != 1 or not qkv.dtype.is_floating_point:
        raise ValueError(f"rope_tree_attention: qkv must be floating point with a contiguous last dim, "
                         f"got {qkv.dtype} strides {qkv.stride()}")
    if t > ROPE_MAX_TOKENS:
        raise ValueError(f"rope_tree_attention: T={t} > ROPE_MAX_TOKENS={ROPE_MAX_TOKENS} (use rope_kv_write and "
                         "tree_attention)")
    q = qkv[:, : num_heads * d].view(t, num_heads, d)  # the launch reads strides only: a view of the q columns
    _check_attention_operands("rope_tree_attention", q, k_cache, v_cache, prefix_len, tree_mask)
    out = _out_buffer("rope_tree_attention", out, q.shape, qkv.dtype, qkv.device)
    return _launch(q, k_cache, v_cache, prefix_len, tree_mask, scale, out, (positions, inv_freq, write_slots),
                   num_splits=num_splits, block_n=block_n, prefix_ready=prefix_ready)


def _out_buffer(fn: str, out: torch.Tensor | None, shape: torch.Size, dtype: torch.dtype,
                device: torch.device) -> torch.Tensor:
    """`out` checked ([T, Hq, D] of `dtype` on `device`, contiguous last dim), or a new contiguous one."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if out.shape != shape or out.dtype != dtype or out.device != device or out.stride(-1) != 1:
        raise ValueError(f"{fn}: out must be [T, Hq, D] = {tuple(shape)} of {dtype} on {device} with a contiguous last "
                         f"dim, got {tuple(out.shape)} {out.dtype} on {out.device}")
    return out


def _check_attention_operands(fn: str, q, k_cache, v_cache, prefix_len, tree_mask) -> None:
    """Shapes, GQA, head dim, contiguity and the prefix bound; errors name `fn` and the argument."""
    t, hq, d = q.shape
    if k_cache.dim() != 3:
        raise ValueError(f"{fn}: k_cache must be [cap, Hkv, D], got {tuple(k_cache.shape)}")
    cap, hkv, dk = k_cache.shape
    if dk != d or v_cache.shape != k_cache.shape:
        raise ValueError(f"{fn}: head dims differ: q {tuple(q.shape)}, k {tuple(k_cache.shape)}, "
                         f"v {tuple(v_cache.shape)}")
    if hq % hkv:
        raise ValueError(f"{fn}: Hq={hq} is not a multiple of Hkv={hkv}")
    if d not in (16, 32, 64, 128, 256):
        raise ValueError(f"{fn}: head dim {d} unsupported (16, 32, 64, 128, 256)")
    if tree_mask.dim() != 2 or tree_mask.shape[0] != t:
        raise ValueError(f"{fn}: tree_mask must be [T={t}, tree_len], got {tuple(tree_mask.shape)}")
    for name, x in (("k_cache", k_cache), ("v_cache", v_cache), ("tree_mask", tree_mask)):
        if x.stride(-1) != 1:
            raise ValueError(f"{fn}: {name} needs a contiguous last dim, got strides {x.stride()}")
    tree_len = tree_mask.shape[1]
    if not isinstance(prefix_len, torch.Tensor) and not 0 <= prefix_len <= cap - tree_len:
        raise ValueError(f"{fn}: prefix_len {prefix_len} + tree_len {tree_len} exceeds cap {cap}")


def _launch(q, k_cache, v_cache, prefix_len, tree_mask, scale, out, rope, *, num_splits=None, block_n=None,
            block_m=None, num_warps=None, num_stages=None, min_blocks_per_split=None,
            prefix_ready=False) -> torch.Tensor:
    """The kernel launch behind tree_attention and rope_tree_attention (`rope`: positions, inv_freq, slots)."""
    t, hq, d = q.shape
    cap, hkv, _ = k_cache.shape
    if t == 0:
        return out
    tree_len = tree_mask.shape[1]
    prefix_in_tensor = isinstance(prefix_len, torch.Tensor)

    group = hq // hkv
    n_rows = t * group
    bm, bn, stages, warps, wide = attention_tile(n_rows, d, q.element_size(), q.is_cuda, block_m=block_m,
                                                 block_n=block_n, num_stages=num_stages, num_warps=num_warps)
    m_blocks = triton.cdiv(n_rows, bm)
    max_prefix = (cap - tree_len) if prefix_in_tensor else prefix_len
    n_blocks = triton.cdiv(max_prefix, bn)
    splits = num_splits or _pick_num_splits(q.device, m_blocks * hkv, n_blocks)
    mask = tree_mask.view(torch.uint8) if tree_mask.dtype == torch.bool else tree_mask

    if splits > 1:
        tiles = m_blocks * hkv
        ws_acc = torch.empty(tiles * splits * bm * d, dtype=torch.float32, device=q.device)
        ws_ml = torch.empty(2, tiles * splits * bm, dtype=torch.float32, device=q.device)
        ws_m, ws_l = ws_ml[0], ws_ml[1]
        counter = _counters(q.device, tiles)
    else:
        ws_acc = ws_m = ws_l = counter = out  # unused (SPLIT=False prunes every access)
    if rope is None:
        pos = freq = slots = out  # unused (ROPE=False prunes every access)
        pos_stride = slot_stride = 0
    else:
        pos, freq, slots = rope
        pos_stride, slot_stride = pos.stride(0), slots.stride(0)

    upcast = q.device.type == "cpu"  # the interpreter computes bf16 wrongly: upcast right after loads
    grid = (m_blocks, hkv, splits)
    descs = _prefix_descriptors(k_cache, v_cache, bn) if TMA_PREFIX else None
    k_desc, v_desc = descs if descs is not None else (k_cache, v_cache)  # unused without TMA (pruned)
    _tree_attention_kernel[grid](
        q, k_cache, v_cache, k_desc, v_desc, out, mask, prefix_len, ws_acc, ws_m, ws_l, counter, pos, freq, slots,
        n_rows, tree_len, splits, max(1, min_blocks_per_split or (1 if wide else MIN_BLOCKS_PER_SPLIT)),
        float(scale) * LOG2E, t, hq,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        out.stride(0), out.stride(1), mask.stride(0), pos_stride, slot_stride,
        GROUP=group, BLOCK_M=bm, BLOCK_N=bn, HEAD_DIM=d, SPLIT=splits > 1, PREFIX_IN_TENSOR=prefix_in_tensor,
        UPCAST=upcast, DOT_PRECISION="ieee" if (upcast or q.dtype == torch.float32) else "tf32",
        ROPE=rope is not None,
        BLOCK_T=triton.next_power_of_2(t) if rope is not None else 1,
        PREFETCH=bool(prefix_ready and PREFETCH_PREFIX), TMA=descs is not None,
        HOLD=bool(prefix_ready and PREFETCH_PREFIX and PREFETCH_HOLD and q.is_cuda),  # inline PTX: not interpreted
        num_warps=warps, num_stages=stages, **pdl_options(q.device),
        **_register_budget(q.device),
    )
    return out


def _prefix_descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor, block_n: int):
    """TMA_PREFIX: (K, V) tensor descriptors over the caches as [cap, Hkv * D] with [block_n, D] boxes, or None where
    a cache cannot be one (not row-contiguous, rows not 16-byte multiples: TMA's alignment; a box dimension over
    256 elements: TMA's limit)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    cap, hkv, d = k_cache.shape
    if block_n > 256 or d > 256:
        return None
    out = []
    for c in (k_cache, v_cache):
        if c.stride() != (hkv * d, d, 1) or (hkv * d * c.element_size()) % 16 or c.data_ptr() % 16:
            return None
        out.append(TensorDescriptor.from_tensor(c.view(cap, hkv * d), [block_n, d]))
    return tuple(out)


def _register_budget(device: torch.device) -> dict:
    """The launch keyword for MAX_REGISTERS on CUDA (checked: an int in 24..255), else nothing."""
    if MAX_REGISTERS is None or device.type != "cuda":
        return {}
    if isinstance(MAX_REGISTERS, bool) or not isinstance(MAX_REGISTERS, int) or not 24 <= MAX_REGISTERS <= 255:
        raise ValueError(f"kernels.tree_attention.MAX_REGISTERS: expected an int in 24..255 or None, "
                         f"got {MAX_REGISTERS!r}")
    return {"maxnreg": MAX_REGISTERS}


def default_scale(head_dim: int) -> float:
    """The usual softmax scale 1/sqrt(D)."""
    return 1.0 / math.sqrt(head_dim)
