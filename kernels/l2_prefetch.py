"""L2 prefetch of the next projection's weights from inside a latency-bound kernel (Hopper: sm_90+).

A decode step streams every weight once; between the weight-streaming GEMMs sit kernels that are latency-bound
(the tree attention ~10 us per 8B layer for ~1 us of K/V bytes, the add + RMSNorm ~3 us for a few KB). HBM idles
there, and each GEMM after them ramps up from an empty memory pipeline. A kernel given a prefetch range issues
``cp.async.bulk.prefetch.L2.global`` (one TMA request per CHUNK_BYTES, no registers, no completion to wait for) for
its share of the range before its own work, so the next GEMM's first weight tiles are L2 hits. The weights are
never written by a kernel, so the requests may go out before the PDL wait.

A cache hint only: results are bitwise the same with or without it. CUDA sm_90+ only; elsewhere (the CPU
interpreter, older GPUs) `prefetch_operands` returns no range and the kernels skip it.

Contract of a range: (tensor, n_bytes) -> `n_bytes // CHUNK_BYTES` whole chunks from the tensor's first byte
(its data pointer must be 16-byte aligned; the tail under one chunk is not prefetched).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK_BYTES = 4096
"""Bytes per bulk prefetch request (a multiple of 16)."""
_capable: dict[int, bool] = {}


@triton.jit
def l2_prefetch(base, n_chunks, pid, nprog, CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    """Program `pid` of `nprog` requests its contiguous share of the `n_chunks` CHUNK-byte chunks from `base` into
    L2, BLOCK requests at a time (lanes past the share repeat its last chunk: a duplicate hint, no access)."""
    per = tl.cdiv(n_chunks, nprog)
    lo = pid * per
    hi = tl.minimum(lo + per, n_chunks)
    if lo < hi:
        byte_base = base.to(tl.pointer_type(tl.int8))
        size = tl.full([BLOCK], CHUNK, tl.int32)
        for c in range(lo, hi, BLOCK):
            idx = tl.minimum(c + tl.arange(0, BLOCK), hi - 1).to(tl.int64)
            tl.inline_asm_elementwise(
                "cp.async.bulk.prefetch.L2.global [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,r",
                [byte_base + idx * CHUNK, size], dtype=tl.int32, is_pure=False, pack=1,
            )


def prefetch_capable(device: torch.device) -> bool:
    """Whether `device` takes the bulk L2 prefetch (CUDA, compute capability >= 9.0)."""
    if device.type != "cuda":
        return False
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _capable:
        _capable[idx] = torch.cuda.get_device_capability(idx)[0] >= 9
    return _capable[idx]


def prefetch_operands(spec: tuple[torch.Tensor, int] | None, device: torch.device,
                      fn: str) -> tuple[torch.Tensor | None, int]:
    """(tensor, whole chunks) of a prefetch range for a launch on `device`; (None, 0) when there is none to issue
    (no range, fewer bytes than one chunk, or a device without the instruction). Errors name `fn`."""
    if spec is None or not prefetch_capable(device):
        return None, 0
    t, n_bytes = spec
    if not isinstance(t, torch.Tensor) or t.device != device:
        raise ValueError(f"{fn}: prefetch tensor must be a tensor on {device}, got "
                         f"{t.device if isinstance(t, torch.Tensor) else type(t).__name__}")
    if not isinstance(n_bytes, int) or n_bytes < 0:
        raise ValueError(f"{fn}: prefetch bytes must be an int >= 0, got {n_bytes!r}")
    if t.data_ptr() % 16:
        raise ValueError(f"{fn}: prefetch tensor must start 16-byte aligned, got address {t.data_ptr():#x}")
    n_bytes = min(n_bytes, t.numel() * t.element_size())
    chunks = n_bytes // CHUNK_BYTES
    return (t, chunks) if chunks else (None, 0)


def block_for(num_warps: int) -> int:
    """Requests per loop step: one per thread of the program."""
    return triton.next_power_of_2(32 * num_warps)
