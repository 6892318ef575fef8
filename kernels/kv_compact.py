"""KV compaction after re-rooting: gather kept tree slots to a contiguous run, all layers in one launch.

    kv_compact(kv [L, 2, cap, H, D], src_slots [n] int64, dst_start) -> None   (in place)
    kv[:, :, dst_start + i] = kv[:, :, src_slots[i]]   for every i with src_slots[i] >= 0

(reference: ``kv_compact_ref``). Negative entries are skipped, so a CUDA graph can pad ``src_slots`` to
a fixed length; ``dst_start`` may be an int or a 1-element device tensor for the same reason.

Overlap. Sources and destinations may overlap arbitrarily (e.g. slot 7 -> 5 while slot 5 -> 3). One
program owns one (layer, k|v) plane and one column chunk of the H*D row, for *all* n rows: it loads
every source row chunk into registers, passes a CTA barrier, then stores. Programs touch disjoint
(plane, column) ranges, so no program can overwrite another's sources, and inside a program every load
precedes every store: gather-then-scatter, the reference's semantics. When n exceeds MAX_ROWS the rows
are processed in chunks of MAX_ROWS in increasing order; that is still exact for forward compaction
(sources ascending with ``src_slots[i] >= dst_start + i``, which re-rooting always produces) and
documented as the only supported overlap pattern beyond MAX_ROWS.

Compilation. The runtime calls this with a different row count almost every re-root (the kept slots), so
nothing in the launch may depend on n beyond its value: the row block is fixed (`ROW_BLOCK`) and n and the
destination are not specialised on, so one compiled kernel serves every n for a given cache layout (a
per-n block size recompiled the kernel mid-run, ~0.1-0.3 s per new power of two, on the draft's critical
path: an H200 run under cProfile showed 4-6 compilations on each side).

Roofline: bytes = 2 (read + write) * L * 2 * n * H * D * elt. Llama-3-8B (L=32, H=8, D=128, bf16) moving
64 slots = 16 MiB -> 3.9 us at 4.29 TB/s. Each row chunk is BLOCK_C contiguous elements (>= 128 B).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROW_BLOCK = 64  # rows held in registers at once: all-overlap-safe up to this n (forward compaction beyond)
MAX_ROWS = ROW_BLOCK
TILE_ELEMS = 8192  # rows x columns per program tile (registers)


@triton.jit(do_not_specialize=["dst_arg", "n"])
def _kv_compact_kernel(
    KV, Src, dst_arg, n, row_len, stride_l, stride_kv, stride_slot,
    DST_IN_TENSOR: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    plane = tl.program_id(0)
    pid_c = tl.program_id(1)
    base = KV + (plane // 2).to(tl.int64) * stride_l + (plane % 2).to(tl.int64) * stride_kv
    if DST_IN_TENSOR:
        dst_start = tl.load(dst_arg).to(tl.int64)
    else:
        dst_start = dst_arg
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < row_len
    for r0 in range(0, n, BLOCK_R):
        r = r0 + tl.arange(0, BLOCK_R)
        src = tl.load(Src + r, mask=r < n, other=-1)
        ok = (src >= 0)[:, None] & col_ok[None, :]
        vals = tl.load(base + src[:, None] * stride_slot + cols[None, :], mask=ok)
        tl.debug_barrier()  # every thread's loads of this chunk precede any thread's stores
        dst = (dst_start + r).to(tl.int64)
        tl.store(base + dst[:, None] * stride_slot + cols[None, :], vals, mask=ok)
        tl.debug_barrier()


def kv_compact(kv: torch.Tensor, src_slots: torch.Tensor, dst_start: int | torch.Tensor) -> None:
    """In place: for all layers and both K and V, kv[:, :, dst_start + i] = kv[:, :, src_slots[i]].

    Args:
        kv: [L, 2, cap, H, D] cache; each slot's [H, D] must be contiguous.
        src_slots: [n] int64 source slots; entries < 0 are skipped (padding).
        dst_start: first destination slot (int, or a 1-element int device tensor).
    """
    if kv.dim() != 5 or kv.shape[1] != 2:
        raise ValueError(f"kv_compact: kv must be [L, 2, cap, H, D], got {tuple(kv.shape)}")
    n_layers, _, cap, h, d = kv.shape
    if kv.stride(4) != 1 or kv.stride(3) != d:
        raise ValueError("kv_compact: each slot's [H, D] block must be contiguous")
    if src_slots.dim() != 1 or src_slots.dtype not in (torch.int64, torch.int32):
        raise ValueError("kv_compact: src_slots must be a 1-d int64/int32 tensor")
    n = src_slots.shape[0]
    dst_in_tensor = isinstance(dst_start, torch.Tensor)
    if not dst_in_tensor and not 0 <= dst_start <= cap - n:
        raise ValueError(f"kv_compact: destination [{dst_start}, {dst_start + n}) exceeds cap {cap}")
    if n == 0:
        return
    row_len = h * d
    block_r = ROW_BLOCK  # independent of n: one compilation (module docstring)
    block_c = min(triton.next_power_of_2(row_len), max(16, TILE_ELEMS // block_r))
    grid = (n_layers * 2, triton.cdiv(row_len, block_c))
    _kv_compact_kernel[grid](
        kv, src_slots, dst_start, n, row_len, kv.stride(0), kv.stride(1), kv.stride(2),
        DST_IN_TENSOR=dst_in_tensor, BLOCK_R=block_r, BLOCK_C=block_c, num_warps=4,
    )
