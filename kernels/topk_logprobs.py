"""The draft's head: the k most likely next tokens of each row and their log-probabilities, in two small launches.

Contract (reference twin: ``kernels.reference.topk_logprobs_ref``)::

    topk_logprobs(logits [R, V] float32, k, scale=1.0) -> (values [R, k] float32, ids [R, k] int64)

    values[r, j] = log_softmax(logits[r] * scale)[ids[r, j]], descending in j
    ids[r]       = the k largest entries of logits[r] * scale; among equal values the lower token id first

Why. Each draft expansion ends with these children (runtime/draft_worker.py `_top_children`). torch's
``topk(log_softmax(x), k)`` over a Llama-3.2-1B vocabulary (128,256) costs 88-106 us in a CUDA graph at 1-17 rows on
an H200 (log_softmax 29 us, topk 59-77 us: bench/bench_draft_head.py) against a floor of one read of
the logits (0.5 MB a row: 2 us at 17 rows), on the critical path of every refill after a miss and of every serial
expansion. Both torch kernels run one block per row, latency-bound.

How. Kernel 1, grid (R, S): each program owns a segment of BLOCK contiguous logits of one row (S = cdiv(V, BLOCK)),
held in registers: its max m, its sum of exp(x - m) and its k largest values with their ids (k rounds of max +
lowest-index argmax, each masking the winner). Kernel 2, grid (R,): one program per row merges the S segments:
lse = M + log(sum_s l_s exp(m_s - M)), then k rounds of max + argmax over the S x k candidates (segment-major, so
ties still go to the lower id), and writes value - lse. Workspace: R x S x (2 + 2k) floats, from the caching
allocator (capturable in a CUDA graph; no host sync).

Numerics. lse is computed as in log_softmax (max-shifted sum of exponentials in float32), but summed per segment
and rescaled: values agree with torch's log_softmax to float32 rounding (~1e-6 at these vocabularies); the ids are
those of the k largest scaled logits (log_softmax is monotonic), ordered by (value desc, id asc). torch's topk
leaves the order of equal values unspecified. ``V >= k`` (not checked on the device: the caller clamps k).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 2048  # logits per segment program (8 KB of float32 in registers: 16 a thread at 4 warps)
MAX_K = 64


@triton.jit
def _segment_topk_kernel(X, stride_x, V, scale, SegM, SegL, SegV, SegI, K: tl.constexpr, BLOCK: tl.constexpr):
    r, s = tl.program_id(0), tl.program_id(1)
    n_seg = tl.num_programs(1)
    offs = s * BLOCK + tl.arange(0, BLOCK)
    ok = offs < V
    x = tl.load(X + r * stride_x + offs, mask=ok, other=float("-inf")).to(tl.float32) * scale
    x = tl.where(ok, x, float("-inf"))
    m = tl.max(x, axis=0)
    l_sum = tl.sum(tl.where(ok, tl.exp(x - m), 0.0), axis=0)
    base = (r * n_seg + s)
    tl.store(SegM + base, m)
    tl.store(SegL + base, l_sum)
    lane = tl.arange(0, BLOCK)
    for j in tl.static_range(K):
        v = tl.max(x, axis=0)
        i = tl.argmax(x, axis=0, tie_break_left=True)
        tl.store(SegV + base * K + j, v)
        tl.store(SegI + base * K + j, (s * BLOCK + i).to(tl.int64))
        x = tl.where(lane == i, float("-inf"), x)


@triton.jit
def _merge_topk_kernel(SegM, SegL, SegV, SegI, n_seg, OutV, OutI, K: tl.constexpr, BLOCK_S: tl.constexpr,
                       BLOCK_C: tl.constexpr):
    r = tl.program_id(0)
    segs = tl.arange(0, BLOCK_S)
    seg_ok = segs < n_seg
    m = tl.load(SegM + r * n_seg + segs, mask=seg_ok, other=float("-inf"))
    l_seg = tl.load(SegL + r * n_seg + segs, mask=seg_ok, other=0.0)
    big = tl.max(m, axis=0)
    lse = big + tl.log(tl.sum(tl.where(seg_ok, l_seg * tl.exp(m - big), 0.0), axis=0))
    cand = tl.arange(0, BLOCK_C)
    cand_ok = cand < n_seg * K
    vals = tl.load(SegV + r * n_seg * K + cand, mask=cand_ok, other=float("-inf"))
    ids = tl.load(SegI + r * n_seg * K + cand, mask=cand_ok, other=0)
    for j in tl.static_range(K):
        v = tl.max(vals, axis=0)
        i = tl.argmax(vals, axis=0, tie_break_left=True)
        tl.store(OutV + r * K + j, v - lse)
        tl.store(OutI + r * K + j, tl.sum(tl.where(cand == i, ids, 0), axis=0))
        vals = tl.where(cand == i, float("-inf"), vals)


def topk_logprobs(logits: torch.Tensor, k: int, scale: float = 1.0, *,
                  block: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [R, k] float32, ids [R, k] int64) of `logits` [R, V] (see the module docstring). `block`: logits per
    segment program (a power of two; default BLOCK), for tests."""
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"topk_logprobs: logits must be [rows, vocab] float32, got {tuple(logits.shape)} "
                         f"{logits.dtype}")
    rows, vocab = logits.shape
    if not 1 <= k <= min(vocab, MAX_K):
        raise ValueError(f"topk_logprobs: k must be in [1, min(vocab {vocab}, {MAX_K})], got {k}")
    block = block or BLOCK
    if block & (block - 1) or block < 16:
        raise ValueError(f"topk_logprobs: block must be a power of two >= 16, got {block}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    n_seg = triton.cdiv(vocab, block)
    dev = logits.device
    seg_m = torch.empty(rows, n_seg, dtype=torch.float32, device=dev)
    seg_l = torch.empty_like(seg_m)
    seg_v = torch.empty(rows, n_seg, k, dtype=torch.float32, device=dev)
    seg_i = torch.empty(rows, n_seg, k, dtype=torch.int64, device=dev)
    values = torch.empty(rows, k, dtype=torch.float32, device=dev)
    ids = torch.empty(rows, k, dtype=torch.int64, device=dev)
    if rows == 0:
        return values, ids
    _segment_topk_kernel[(rows, n_seg)](logits, logits.stride(0), vocab, float(scale), seg_m, seg_l, seg_v, seg_i,
                                        K=k, BLOCK=block, num_warps=4)
    _merge_topk_kernel[(rows,)](seg_m, seg_l, seg_v, seg_i, n_seg, values, ids, K=k,
                                BLOCK_S=triton.next_power_of_2(n_seg), BLOCK_C=triton.next_power_of_2(n_seg * k),
                                num_warps=4)
    return values, ids
