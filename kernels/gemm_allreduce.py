"""GEMM + all-reduce for tensor-parallel row-parallel linears (o_proj, down_proj) at small batch.

    gemm_allreduce(x [M,K], w [N,K], group) -> [M,N] = sum over the group's ranks of x @ w.T

(reference: ``gemm_allreduce_ref`` = matmul + ``dist.all_reduce``).

Fast path ("symm_mem": CUDA, M <= 16, world size > 1): one Triton launch does the GEMM and a one-shot
all-reduce over peer memory (``torch.distributed._symmetric_memory``; unicast NVLink stores and loads
only, never multicast: run with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1). Program b owns
output columns [b*BLOCK_N, (b+1)*BLOCK_N) and computes its [M, BLOCK_N] partial (weights streamed once,
fp32 accumulate). Two exchange protocols (``SYMM_CONFIG["protocol"]``):

* "ll" (default; the LL protocol SwiftSpec borrows from NCCL, paper §3.3): each fp32 partial is packed
  with a 32-bit flag into one 8-byte word (8-byte stores are single-copy atomic, so data and flag arrive
  together) and *pushed* into every rank's buffer slab [parity][my rank]; then the program polls its own
  buffer with volatile loads until every word of every rank's slab carries this call's flag, unpacks and
  sums in rank order (bit-identical results on every rank). No barrier, no atomics, one NVLink hop.
  The flag is a per-program epoch kept in device memory (read, +1, written back by program b itself),
  so nothing is incremented from the host and the launch is capturable in CUDA graphs. Slabs are double
  buffered on the epoch's parity: rank A can only start call e+2 (writing the slab B read in call e)
  after seeing B's call-(e+1) push, which B issued in a later kernel than its call-e reads.
  Because epochs are per program, a workspace is keyed by (group, N, BLOCK_N): every call on it runs
  the same grid, so all ranks' programs b see the same epoch sequence (every rank must make the same
  calls in the same order, true for TP).
* "barrier": partials in fp32 in my own buffer, then a blockwise cross-GPU barrier (release-CAS 0->1 on
  each peer's signal slot [b, my rank], acquire-CAS 1->0 on mine; self-resetting, PyTorch symmetric-
  memory recipe), peer loads, and a second barrier before the buffer may be reused. Two barrier round
  trips cost ~12 us on the H200 pair (measured), so it is kept only as a cross-check.

Program b only waits for program b of each peer, and the grid is kept <= the SM count so that every
program is resident (no program can wait on one that is not scheduled).

Setup is collective: the first call for a (group, N) allocates, zeroes and rendezvous the buffer on every
rank, so it must happen outside CUDA graph capture (warm-up); ``prepare_gemm_allreduce`` does it
explicitly.

Fallback ("nccl", and everything on CPU): ``x @ w.T`` then ``dist.all_reduce`` on the group (gloo on
CPU). "auto" picks symm_mem when it applies and symmetric memory is available, else nccl.

Roofline (H200, bf16, Llama-3-8B at TP=2): o_proj shard w [4096, 2048] = 16 MiB (3.9 us at 4.29 TB/s),
down_proj shard [4096, 7168] = 56 MiB (13.7 us). The LL exchange pushes M*N*8 B (512 KiB at M=16) per
peer over NVLink (~2 us at ~280 GB/s) after one one-way latency; an NCCL all-reduce costs ~40 us eager
and ~9.5 us inside a graph on the same machine (reference/device-h200.md).
Measured (2x H200, CUDA graphs, M=1..16, bench/bench_kernels.py): o_proj 8.4-9.9 us vs
cuBLAS + NCCL 14.3-15.7 us; down_proj 19.6-21 us vs 27.6-28.8 us; exchange floor (K=128) ~5 us with
"ll" against ~13 us with "barrier". Eager launches are host-bound (~60 us) for both.
"""

from __future__ import annotations

import importlib.util
import warnings

import torch
import torch.distributed as dist
import triton
import triton.language as tl

MAX_M = 16  # the fast path is a small-batch path: one M tile per program
SIGNAL_BASE = 64  # first int32 signal slot we use; lower slots stay free for torch's own barrier()
SIGNAL_PAD_BYTES_MIN = 2048  # torch's signal pad size in older releases (newer ones report it)
# Fused-kernel config (block_n=None: widest tile that keeps the grid <= the SM count); tuned on H200.
SYMM_CONFIG: dict[str, int | str | None] = {
    "protocol": "ll", "block_n": None, "block_k": 256, "num_warps": 4, "num_stages": 4,
}
_workspaces: dict[tuple, _SymmWorkspace] = {}


@triton.jit
def _gemm_tile(X, W, M, N, K, stride_xm, stride_wn, pid, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr):
    """[BLOCK_M, BLOCK_N] fp32 tile of x @ w.T for output columns pid*BLOCK_N..."""
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        x = tl.load(X + rm[:, None] * stride_xm + kk[None, :], mask=(rm < M)[:, None] & (kk < K)[None, :], other=0.0)
        w = tl.load(W + rn[None, :] * stride_wn + kk[:, None], mask=(rn < N)[None, :] & (kk < K)[:, None], other=0.0)
        acc = tl.dot(x, w, acc)
    return acc


@triton.jit
def _block_barrier(signal_pad_ptrs, slot_base, RANK: tl.constexpr, WORLD: tl.constexpr):
    """Meet program (same id) of every peer: release my signal to them, acquire theirs to me."""
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(WORLD):
        remote = tl.load(pads + peer).to(tl.pointer_type(tl.int32))
        while tl.atomic_cas(remote + slot_base + RANK, 0, 1, sem="release", scope="sys") != 0:
            pass
    local = tl.load(pads + RANK).to(tl.pointer_type(tl.int32))
    for peer in tl.static_range(WORLD):
        while tl.atomic_cas(local + slot_base + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass


@triton.jit
def _gemm_allreduce_kernel(
    X, W, Out, Partial, buffer_ptrs, signal_pad_ptrs, M, N, K,
    stride_xm, stride_wn, stride_om,
    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, SIGNAL_SLOT0: tl.constexpr,
):
    pid = tl.program_id(0)
    acc = _gemm_tile(X, W, M, N, K, stride_xm, stride_wn, pid, BLOCK_M, BLOCK_N, BLOCK_K)
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    tile = rm[:, None] * N + rn[None, :]  # partials are [M, N] fp32, row-major, in every rank's buffer
    ok = m_ok[:, None] & n_ok[None, :]
    tl.store(Partial + tile, acc, mask=ok)

    tl.debug_barrier()  # all threads' partial stores precede the release in the barrier
    _block_barrier(signal_pad_ptrs, SIGNAL_SLOT0 + pid * WORLD, RANK, WORLD)
    tl.debug_barrier()
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for r in tl.static_range(WORLD):  # fixed order: identical sums on every rank
        peer = tl.load(bufs + r).to(tl.pointer_type(tl.float32))
        total += tl.load(peer + tile, mask=ok, other=0.0, cache_modifier=".cv")
    tl.store(Out + rm[:, None] * stride_om + rn[None, :], total.to(Out.dtype.element_ty), mask=ok)
    tl.debug_barrier()  # all threads' peer reads precede the release below
    _block_barrier(signal_pad_ptrs, SIGNAL_SLOT0 + pid * WORLD, RANK, WORLD)


@triton.jit
def _gemm_allreduce_ll_kernel(
    X, W, Out, Epoch, buffer_ptrs, M, N, K, slab,
    stride_xm, stride_wn, stride_om,
    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid = tl.program_id(0)
    acc = _gemm_tile(X, W, M, N, K, stride_xm, stride_wn, pid, BLOCK_M, BLOCK_N, BLOCK_K)
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = (rm < M)[:, None] & (rn < N)[None, :]
    tile = rm[:, None] * N + rn[None, :]

    epoch = tl.load(Epoch + pid) + 1  # this program's call count: the same on every rank
    tl.store(Epoch + pid, epoch)
    parity = epoch % 2
    flag = epoch.to(tl.int64) << 32
    # LL word: flag in the high half, the fp32 bits (zero-extended) in the low half
    packed = acc.to(tl.int32, bitcast=True).to(tl.uint32, bitcast=True).to(tl.int64) | flag
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(WORLD):  # push my partial into slab [parity][RANK] of every rank
        dst = tl.load(bufs + peer).to(tl.pointer_type(tl.int64))
        tl.store(dst + (parity * WORLD + RANK) * slab + tile, packed, mask=ok)

    local = tl.load(bufs + RANK).to(tl.pointer_type(tl.int64))
    total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for src in tl.static_range(WORLD):  # fixed rank order: identical sums on every rank
        ptrs = local + (parity * WORLD + src) * slab + tile
        word = tl.load(ptrs, mask=ok, other=flag, volatile=True)
        while tl.max(((word >> 32) != epoch).to(tl.int32), axis=None) > 0:
            word = tl.load(ptrs, mask=ok, other=flag, volatile=True)
        total += word.to(tl.int32).to(tl.float32, bitcast=True)
    tl.store(Out + rm[:, None] * stride_om + rn[None, :], total.to(Out.dtype.element_ty), mask=ok)


class _SymmWorkspace:
    """One rank's symmetric buffer for one (group, N, BLOCK_N, protocol), plus the LL epochs.

    LL: int64 words [2 parity][world][MAX_M * N]; barrier: fp32 partials [MAX_M * N] at the same base.
    """

    def __init__(self, group: dist.ProcessGroup, n: int, block_n: int, protocol: str, device: torch.device) -> None:
        import torch.distributed._symmetric_memory as symm_mem

        if hasattr(symm_mem, "enable_symm_mem_for_group"):  # needed before torch 2.9, a no-op after
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm_mem.enable_symm_mem_for_group(group.group_name)
        world = dist.get_world_size(group)
        self.slab = MAX_M * n
        self.block_n = block_n
        self.protocol = protocol
        self.buffer = symm_mem.empty(2 * world * self.slab, dtype=torch.int64, device=device)
        self.buffer.zero_()  # LL flags must start at 0 (epochs start at 1)
        self.partial = self.buffer.view(torch.float32)[: self.slab]
        self.epoch = torch.zeros(triton.cdiv(n, block_n), dtype=torch.int32, device=device)
        self.handle = symm_mem.rendezvous(self.buffer, group)
        self.rank = self.handle.rank
        self.world = self.handle.world_size
        self.signal_slots = getattr(self.handle, "signal_pad_size", SIGNAL_PAD_BYTES_MIN) // 4
        self.handle.barrier()  # every rank's zeroed buffer exists before anyone pushes into it


def symm_mem_available() -> bool:
    """True when torch has CUDA symmetric memory (the fast path's requirement)."""
    return torch.cuda.is_available() and importlib.util.find_spec("torch.distributed._symmetric_memory") is not None


def _pick_block_n(n: int, sm_count: int) -> int:
    """Widest column tile that still gives every SM (at most one) program: memory-bound GEMV-like work."""
    bn = 16
    while bn < 128 and triton.cdiv(n, bn) > sm_count:
        bn *= 2
    return bn


def _workspace(group: dist.ProcessGroup, n: int, device: torch.device) -> _SymmWorkspace:
    sm_count = torch.cuda.get_device_properties(device).multi_processor_count
    block_n = SYMM_CONFIG["block_n"] or _pick_block_n(n, sm_count)
    protocol = SYMM_CONFIG["protocol"]
    key = (group.group_name, str(device), n, block_n, protocol)
    ws = _workspaces.get(key)
    if ws is None:
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "gemm_allreduce: symmetric memory must be set up before CUDA graph capture; call "
                "prepare_gemm_allreduce (or gemm_allreduce once per output width N) on every rank first"
            )
        if triton.cdiv(n, block_n) > sm_count:
            raise ValueError(f"gemm_allreduce: N={n} needs more programs than {sm_count} SMs; use method='nccl'")
        ws = _SymmWorkspace(group, n, block_n, protocol, device)
        _workspaces[key] = ws
    return ws


def prepare_gemm_allreduce(group: dist.ProcessGroup, n: int, device: torch.device) -> None:
    """Collective: allocate, zero and rendezvous the symmetric buffer for outputs [<= 16, n].

    Call on every rank of ``group`` outside CUDA graph capture; the first ``gemm_allreduce`` call with
    this N does the same lazily.
    """
    _workspace(group, n, device)


def _gemm_allreduce_symm(x: torch.Tensor, w: torch.Tensor, group: dist.ProcessGroup, out: torch.Tensor) -> None:
    m, k = x.shape
    n = w.shape[0]
    ws = _workspace(group, n, x.device)
    grid = (triton.cdiv(n, ws.block_n),)
    tiles = dict(BLOCK_M=MAX_M, BLOCK_N=ws.block_n, BLOCK_K=SYMM_CONFIG["block_k"],
                 num_warps=SYMM_CONFIG["num_warps"], num_stages=SYMM_CONFIG["num_stages"])
    if ws.protocol == "ll":
        _gemm_allreduce_ll_kernel[grid](
            x, w, out, ws.epoch, ws.handle.buffer_ptrs_dev, m, n, k, ws.slab,
            x.stride(0), w.stride(0), out.stride(0), RANK=ws.rank, WORLD=ws.world, **tiles,
        )
        return
    if SIGNAL_BASE + grid[0] * ws.world > ws.signal_slots:
        raise ValueError(f"gemm_allreduce: signal pad too small for {grid[0]} programs x {ws.world} ranks")
    _gemm_allreduce_kernel[grid](
        x, w, out, ws.partial, ws.handle.buffer_ptrs_dev, ws.handle.signal_pad_ptrs_dev, m, n, k,
        x.stride(0), w.stride(0), out.stride(0), RANK=ws.rank, WORLD=ws.world, SIGNAL_SLOT0=SIGNAL_BASE, **tiles,
    )


def gemm_allreduce(
    x: torch.Tensor,
    w: torch.Tensor,
    group: dist.ProcessGroup | None,
    *,
    method: str = "auto",
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Row-parallel linear: (x @ w.T) all-reduced (summed) over ``group``; returns [M, N] in x.dtype.

    Args:
        x: [M, K] this rank's activation shard.
        w: [N, K] this rank's weight shard (nn.Linear layout).
        group: the TP process group; None or a group of one means no reduction.
        method: "auto" | "symm_mem" (one-launch GEMM + one-shot peer-memory all-reduce, CUDA only,
            M <= 16) | "nccl" (matmul + dist.all_reduce; the only choice on CPU).
        out: optional [M, N] output buffer of x's dtype.
    """
    m, k = x.shape
    n = w.shape[0]
    if w.shape != (n, k):
        raise ValueError(f"gemm_allreduce: w must be [N, K={k}], got {tuple(w.shape)}")
    world = 1 if group is None else dist.get_world_size(group)
    if method not in ("auto", "symm_mem", "nccl"):
        raise ValueError(f"gemm_allreduce: unknown method {method!r}")
    if method == "symm_mem":
        if not x.is_cuda:
            raise RuntimeError("gemm_allreduce(method='symm_mem') needs CUDA tensors; on CPU use 'nccl' (gloo)")
        if m > MAX_M or world < 2:
            raise ValueError(f"gemm_allreduce(method='symm_mem') needs M <= {MAX_M} and world > 1, got M={m}, {world}")
        if x.stride(-1) != 1 or w.stride(-1) != 1:
            raise ValueError("gemm_allreduce: x and w need a contiguous last dim")
    use_symm = method == "symm_mem" or (
        method == "auto" and x.is_cuda and world > 1 and m <= MAX_M and symm_mem_available()
        and x.stride(-1) == 1 and w.stride(-1) == 1
    )
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if use_symm and m > 0:
        _gemm_allreduce_symm(x, w, group, out)
        return out
    torch.matmul(x, w.t(), out=out)
    if world > 1:
        dist.all_reduce(out, group=group)
    return out
