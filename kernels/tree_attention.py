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
(cos / sin per row: once per token instead measured the same time); the last split of
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

Prefetch before the PDL wait (``prefix_ready=True``). Under programmatic dependent launch the kernel
may start while the launch before it still runs; by default it waits (``griddepcontrol.wait``) before reading
anything. A caller that knows the launch right before this one writes neither the prefix keys / values nor
``prefix_len`` nor the positions (the runtime's single-token step: that launch is the QKV GEMM, which writes q and the
new k / v only) passes ``prefix_ready``: each program then loads its first prefix block and computes q's RoPE angles
before the wait, and folds that block in first (the same order as the loop: bitwise the same output). With the QKV GEMM
released early (``kernels.pdl`` role ``pre_attention``) the attention's programs take the SMs the GEMM leaves idle and
stream their K/V beside it (~0.05 ms per Llama-3-8B single-token step on the H200). After rope_kv_write on multi-token
steps it is slower, so the runtime passes it on the fused single-token path only. Why (compiled offline with the
device's Triton 3.6): Triton stages each loaded tile into shared memory right after its load (the TTGIR puts the tile's
`local_alloc` next to its `tt.load`, before the wait), so a program reaches the wait only once its K/V have arrived, and
q's load, issued after the wait, adds a second memory latency. Behind a long launch (the QKV GEMM, ~12-16 us) the first
one is hidden; behind rope_kv_write (~3 us) it is not, and the two latencies now run in series where the plain launch
overlapped them.

For CUDA graphs, ``prefix_len`` may be a 1-element integer device tensor: the grid and split count are
then sized from ``cap`` and the kernel reads the length on device, so one graph serves every step.

Roofline (H200, bf16, Llama-3-8B head shape Hq=32, Hkv=8, D=128): bytes = ctx * Hkv * D * 2 (K,V) * 2 B
= 4 KiB per context token (64 MiB at 16K, 15.6 us at 4.29 TB/s); FLOPs = 4 * T * Hq * ctx * D, so the
intensity is T * G FLOP/B (G = Hq/Hkv = 4): T=8 is 32 FLOP/B (bandwidth-bound), T=64 is 256 FLOP/B,
past the H200's ~200 FLOP/B bf16 ridge, so big verify trees are tensor-core/issue-bound.
Measured (H200, CUDA graph, bench/bench_kernels.py): 16K context T=8 36 us (44% of the copy
ceiling), T=64 82 us; 1K context 15-35 us (launch + combine latency dominate). Against SDPA with a bool
mask: 10x faster at 16K/T=8, 1.2x at 1K/T=64; against eager matmul+softmax 4-9x.
Known cost: the combine is one program per tile reading the partials in sequence (latency-bound, several
us at 16+ splits). It reads only the splits that own prefix blocks plus the last one, and a split takes at least
MIN_BLOCKS_PER_SPLIT blocks, or is one KEYS_PER_SPLIT-key block (8B rows 8 ctx 2000 on the H200: 21.9 -> 13.2 us,
floor 1.9 us); a hierarchical or multi-program combine is the next step.
"""

from __future__ import annotations

import math

import torch
import triton

from kernels.pdl import pdl_options
from kernels.tree_attention_kernel import _tree_attention_kernel  # noqa: F401  (re-exported: bench, tests)

LOG2E = 1.4426950408889634  # 1 / ln(2): softmax runs on exp2
TARGET_PROGRAMS_PER_SM = 2  # split-KV aims for this many programs per SM
MAX_SPLITS = 64
KEYS_PER_SPLIT = 256
"""The wide tile (CUDA, head dims <= 128, <= 64 rows per program, no tile override): one block of this many prefix keys
per split (one stage, 8 warps), loaded at once instead of in four dependent 64-key steps: 6-11% faster attention at 1-16
rows on the H200 (bench/bench_attention_splits.py). Elsewhere (CPU, wider heads, bigger row blocks, an explicit block_n
or num_stages) the 64-key (32 for head dims > 128) tile, pipelined over 3 stages, with MIN_BLOCKS_PER_SPLIT."""
MIN_BLOCKS_PER_SPLIT = 4
"""Prefix blocks a split takes at least outside the wide tile (the rest of the splits stay empty and are not
merged): fewer, longer splits trade parallelism for a shorter serial merge. 4 was the best of 1 / 2 / 4 / 8 summed
over Llama-3-8B shapes at ctx 512-2000 and 1-16 rows on the H200 (bench/bench_attention_splits.py)."""
SMEM_BUDGET = 192 * 1024  # bytes of pipelined tiles per program (H200: 227 KiB/block, rest for layouts)
ROPE_MAX_TOKENS = 64
"""rope_tree_attention's T limit: every row block's last split writes all T new keys of its kv head."""
ROPE_FASTER_MAX_TOKENS = 1
"""Steps of up to this many tokens are faster with rope_tree_attention than with rope_kv_write + tree_attention, so
the runtime's `kernels.rope_attention` uses it only there (TritonAttention.rope_max_tokens): a Llama-3-8B one-row
step ~1.5% faster, 8 / 16-row steps 8-16% slower (H200 CUDA-graph replays, bench/bench_step_variants.py). The extra
time grows with T x D, the new-key tile the last split rotates and writes, not with spills; Nsight Compute shows 45%
more instructions (the accurate sin / cos per (token, head) row: 4x redundant across the GQA group) from a program
twice as long, whose top stall is instruction fetch."""
TMA_MAX_HEAD_DIM = 64
"""Launches on CUDA of at most TMA_MAX_TOKENS tokens at head dims of at most this load their prefix K/V as whole
[BLOCK_N, D] boxes through tensor descriptors (TMA on Hopper) instead of per-element pointers, whose address arithmetic
is ~20% of the wide tile's instructions: the 1B draft's one-row refill gains (0.968-0.979 -> 0.962 ms per step on the
H200), the 8B target's steps lose (docs/LOG.md). Keys past prefix_len in the last block are read and masked (scores
-inf, V rows zeroed): the same result as the masked pointer loads. Caches a descriptor cannot cover (not
row-contiguous, boxes over 256) keep the pointers."""
TMA_MAX_TOKENS = 1
"""The most tokens (query rows before GQA) a launch taking the descriptors has (TMA_MAX_HEAD_DIM)."""


def use_tma_prefix(head_dim: int, tokens: int, device: torch.device) -> bool:
    """Whether a launch of `tokens` tokens at `head_dim` on `device` loads its prefix through descriptors: CUDA, at most
    TMA_MAX_TOKENS tokens and a head dim of at most TMA_MAX_HEAD_DIM (the interpreter keeps the pointers)."""
    return device.type == "cuda" and head_dim <= TMA_MAX_HEAD_DIM and tokens <= TMA_MAX_TOKENS


WIDE_MAX_ROWS = 256
"""The most query rows (tokens x GQA group) a launch may have and still take the wide tile (CUDA, head dims <= 128, no
tile override): 64, 128 or 256. Past 64 its row block starts at 64 (then the halving: 32 rows per program, 3-8 row
blocks per kv head) instead of one 128-row program per kv head on the 64-key tile: the 1B draft's 32-row expansion
(128 rows) ~7% faster, Llama-3-8B 32 / 64-row verifies 2-5% (H200 CUDA-graph steps). The default of the launches'
`wide_max_rows` argument; checked against the reference on the GPU at 64 and 256 (tests/gpu/test_attention_gpu.py)."""
_COUNTERS_INIT = 1024  # int32 counters per (device, stream), grown on demand

_counter_cache: dict[tuple, torch.Tensor] = {}
_sm_count_cache: dict[int, int] = {}


def attention_tile(n_rows: int, head_dim: int, elt_size: int, cuda: bool, *, block_m: int | None = None,
                   block_n: int | None = None, num_stages: int | None = None, num_warps: int | None = None,
                   wide_max_rows: int = WIDE_MAX_ROWS) -> tuple[int, int, int, int, bool]:
    """(BLOCK_M, BLOCK_N, stages, warps, wide) of a launch over `n_rows` query rows (tokens x GQA group): the
    heuristic, or the given overrides. wide: one KEYS_PER_SPLIT-key block per split (CUDA, head dims <= 128, <= 64
    rows per program, no tile override); `wide_max_rows`: see WIDE_MAX_ROWS. Pure: tools/kernel_resources.py
    compiles the same tiles offline."""
    if type(wide_max_rows) is not int or wide_max_rows not in (64, 128, 256):
        raise ValueError(f"tree_attention: wide_max_rows: expected 64, 128 or 256, got {wide_max_rows!r}")
    bm = block_m or min(128 if n_rows >= 128 else 64, max(16, triton.next_power_of_2(n_rows)))
    wide_ok = cuda and head_dim <= 128 and not (block_n or num_stages)
    if block_m is None and wide_ok and 64 < n_rows <= wide_max_rows:
        bm = 64
    wide = wide_ok and bm <= 64
    if block_m is None and wide and bm > 16:  # two row blocks per kv head and split: more, shorter programs
        bm //= 2
    bn = block_n or (KEYS_PER_SPLIT if wide else 64 if head_dim <= 128 else 32)
    stages = num_stages or (1 if wide else 3)
    if not (block_n or num_stages):  # shrink the pipeline until q + K/V stages fit in shared memory
        bn, stages = _fit_shared_memory(bm, bn, head_dim, elt_size, stages)
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
    wide_max_rows: int = WIDE_MAX_ROWS,
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
        wide_max_rows: the most query rows that take the wide tile (64, 128 or 256; WIDE_MAX_ROWS).
        prefix_ready: the caller's promise that the launch right before this one (in stream order) writes
            neither the prefix keys / values [0, prefix_len) nor prefix_len (e.g. a QKV projection or
            rope_kv_write, which write q and tree slots; the runtime passes it on the fused single-token path
            only, where it measured faster). With PDL the kernel then loads its first prefix block before
            waiting for that launch.

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
                   min_blocks_per_split=min_blocks_per_split, prefix_ready=prefix_ready,
                   wide_max_rows=wide_max_rows)


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
    """`out` checked ([T, Hq, D] of `dtype`, or float16 for an fp8-weight o projection, on `device`, contiguous last
    dim), or a new contiguous one."""
    if out is None:
        return torch.empty(shape, dtype=dtype, device=device)
    if out.shape != shape or out.dtype not in (dtype, torch.float16) or out.device != device or out.stride(-1) != 1:
        raise ValueError(f"{fn}: out must be [T, Hq, D] = {tuple(shape)} of {dtype} (or float16) on {device} with a "
                         f"contiguous last dim, got {tuple(out.shape)} {out.dtype} on {out.device}")
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
            prefix_ready=False, wide_max_rows=WIDE_MAX_ROWS) -> torch.Tensor:
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
                                                 block_n=block_n, num_stages=num_stages, num_warps=num_warps,
                                                 wide_max_rows=wide_max_rows)
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
    descs = _prefix_descriptors(k_cache, v_cache, bn) if use_tma_prefix(d, t, q.device) else None
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
        PREFETCH=prefix_ready, TMA=descs is not None,
        num_warps=warps, num_stages=stages, **pdl_options(q.device),
    )
    return out


def _prefix_descriptors(k_cache: torch.Tensor, v_cache: torch.Tensor, block_n: int):
    """`use_tma_prefix`: (K, V) tensor descriptors over the caches as [cap, Hkv * D] with [block_n, D] boxes, or None
    where a cache cannot be one (not row-contiguous, rows not 16-byte multiples: TMA's alignment; a box dimension over
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


def default_scale(head_dim: int) -> float:
    """The usual softmax scale 1/sqrt(D)."""
    return 1.0 / math.sqrt(head_dim)
