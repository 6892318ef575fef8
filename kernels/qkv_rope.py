"""Fused decode-step QKV projection + RoPE + KV-cache write: ``skinny_linear`` and ``rope_kv_write`` in one launch.

The runtime's target under ``kernels.target_qkv_rope`` (``runtime.fused_decode.KernelPlan(skinny=True,
qkv_rope=True)``; bench/bench_step_variants.py variants skinny_pdl_late_qkvrope and qkvrope_pre_early), tested
under the Triton CPU interpreter (tests/kernels/test_qkv_rope.py, tests/runtime/test_model.py). In the CUDA-graph
step on the H200, two programs per head (PAIR_SPLIT) released early with the attention loading its prefix beside it:
Llama-3-8B steps 1-3% faster than the skinny GEMM + rope_kv_write, but the Llama-3.2-1B's slower than its fused RoPE
attention: the target only (docs/LOG.md).

Contract (reference: ``rope_kv_write_ref(skinny_linear_ref(x, w_qkv), ...)`` in ``kernels.reference``)::

    qkv_rope_kv_write(x [T, K], w_qkv [(Hq + 2 Hkv) * D, K], positions [T], inv_freq [D/2],
                      k_cache [cap, Hkv, D], v_cache [cap, Hkv, D], write_slots [T], Hq, Hkv) -> q [T, Hq, D]
    == rope_kv_write(skinny_linear(x, w_qkv), positions, inv_freq, k_cache, v_cache, write_slots, Hq, Hkv)

    qkv[t, n]                  = sum_k x[t, k] * w_qkv[n, k]  float32 accumulation, rounded once to x.dtype
    angle[t, i]                = float32(positions[t]) * inv_freq[i]                 (i < D/2, float32)
    rope(y)[:D/2]              = y[:D/2] * cos(angle) - y[D/2:] * sin(angle)         (rotate-half, HF Llama)
    rope(y)[D/2:]              = y[D/2:] * cos(angle) + y[:D/2] * sin(angle)
    q[t, h]                    = rope(qkv[t, q head h])   rounded once to x.dtype (or q_out's dtype)
    k_cache[write_slots[t], h] = rope(qkv[t, k head h])   rounded once to k_cache.dtype
    v_cache[write_slots[t], h] = qkv[t, v head h]         cast to v_cache.dtype

T <= 64 (``skinny_linear.MAX_M``: decode steps and verification trees); larger batches belong to cuBLAS.

What is fused. The two-kernel path launches the weight-streaming GEMM (``kernels.skinny_linear``), which writes
qkv [T, (Hq + 2 Hkv) * D] to memory, then ``kernels.rope_kv_write``, which reads it back, rotates q and k and
scatters k and v into the caches. Here the GEMM's epilogue does the RoPE and the cache writes from registers:
one launch (and one launch boundary, with or without PDL) per layer instead of two, and no qkv round trip
(24 KiB per token for Llama-3-8B: negligible in bytes, so the launch boundary is the whole point).

Numerics. The product accumulates in float32 (``tl.dot``) and is rounded once to x.dtype before RoPE, exactly
where the two-kernel path rounds it when it stores qkv; RoPE then runs in float32 from those rounded values
with float32 cos/sin, the same expressions in the same order as ``kernels/rope.py``, and each output is
rounded once to its destination. So the result equals the two-kernel path whenever the two GEMMs round qkv
to the same value, which they do unless their float32 sums differ in order: the tile shapes differ (BLOCK_N
here is D/2 per accumulator), and the order of the terms inside one ``tl.dot`` is the hardware's (the BLAS
library's under the interpreter). Which one: under the CPU interpreter the two paths are BITWISE equal when the
tiles match (D/2 = skinny_linear's BLOCK_N of 16, i.e. head dims 16 and 32: the tests assert torch.equal for q
and both caches in fp32, fp16 and bf16); with other head dims (e.g. 128) the matmul tiles differ and the results
agree to float32 rounding of qkv (about 1e-6 in fp32; tested with tolerances). On a GPU (not run yet) bitwise
equality is not guaranteed: qkv is within one x.dtype ulp of the two-kernel path's for fp16/bf16 (a few
float32 ulps for fp32 x), followed by the identical RoPE. Dropping the rounding would be slightly more accurate
but would no longer reproduce the two-kernel path, so it is kept. Under ``TRITON_INTERPRET=1`` bf16 operands are
upcast to float32 right after the loads (bf16 arithmetic is wrong in the interpreter) and float32 -> bf16 casts
truncate instead of rounding to nearest (the interpreter's quirk, shared by both paths there).

Work split. Program (h, c) (grid (Hq + 2 Hkv, PAIR_SPLIT), no split-K) streams chunk c of head h's rotation
pairs over the whole of K: PAIR_SPLIT 1 takes all D/2 pairs, 2 half of them. For its pair columns i it loads two
[BLOCK_K, BLOCK_HALF] weight tiles (rows h*D + i and h*D + D/2 + i) into two [BLOCK_M, BLOCK_HALF] float32
accumulators, so the epilogue pairs column i with i + D/2 without shuffles (BLOCK_M = next_pow2(T) >= 16 for tl.dot;
BLOCK_HALF = the chunk, masked up to a power of two >= 16). x [T, K] is re-read from L2 by every
program. Head h < Hq is rotated and stored to q; h < Hq + Hkv is rotated and stored at
k_cache[write_slots[t], h - Hq]; the rest is stored raw at v_cache[write_slots[t], h - Hq - Hkv]. BLOCK_K is
256 (128 from T > 16 on), halved while ``num_stages`` pipelined x and w tiles exceed ``skinny_linear.SMEM_BUDGET``.

Roofline (H200, bf16, 4.29 TB/s copy ceiling). Llama-3-8B qkv weight [6144, 4096] is 50.3 MB -> 11.7 us at
the ceiling (skinny_linear measured 18.6-18.9 us for it). But one program per head gives 48 programs (Hq 32 +
2 * Hkv 8; fewer per tensor-parallel shard) for 132 SMs, where skinny_linear sizes its grid to >= ~2 programs
per SM: only 48 SMs stream weights, each 1 MB, and the ceiling holds only if one SM can pull ~89 GB/s
(4.29 TB/s / 48). Whether the saved launch outweighs the narrower grid is a trade-off to be measured later on
the H200; it has NOT been measured yet. (If it loses, the next step is split-K over K with a float32
workspace and the RoPE epilogue in the reduce, or several programs per head.)

``write_slots`` must be distinct and in [0, cap) (not checked: that would need a host sync); duplicates leave one
of the writers, unspecified which. ``q_out`` must not overlap x, w_qkv or the caches (every program reads all
of x). CUDA graphs: capturable; the launch configuration depends only on shapes (T, K, heads, D), positions
and slots are read on device, nothing syncs with the host, and nothing is allocated when ``q_out`` is given.
PDL: ``pdl_start(USE_PDL)`` follows the index math, before any load; launched with ``pdl_role``'s trigger ("gemm" by
default).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import check_role, pdl_options, pdl_start
from kernels.rope import check_rope_operands, q_out_buffer
from kernels.skinny_linear import MAX_M, SMEM_BUDGET, m_bucket

FN = "qkv_rope_kv_write"
PAIR_SPLIT = 2
"""Programs per head (each takes an equal share of its D/2 rotation pairs, at least MIN_DOT of them): 2 (96 at 8B, the
tuned skinny QKV GEMM's count). One per head (48 programs for 132 SMs) and four (192) ran slower; equal shares
of all heads' pairs over one program per SM the same (docs/LOG.md)."""
MIN_DOT = 16  # tl.dot needs every tile dim >= 16


@triton.jit
def _qkv_rope_kv_write_kernel(
    X, W, Pos, InvFreq, Q, Kc, Vc, Slots,
    T, K, num_heads, num_kv_heads, half,
    stride_xm, stride_wn, stride_pos, stride_slot,
    stride_q0, stride_q1, stride_k0, stride_k1, stride_v0, stride_v1,
    BLOCK_M: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr,
):
    h = tl.program_id(0)  # head index in the q|k|v row; neighbouring programs stream neighbouring weight rows
    rm = tl.arange(0, BLOCK_M)
    i = tl.program_id(1) * BLOCK_HALF + tl.arange(0, BLOCK_HALF)  # column inside one half of the head
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < T
    i_ok = i < half
    row1 = (h * 2 * half + i).to(tl.int64)  # weight rows of the head's first half; the second is + half
    pdl_start(USE_PDL)  # after the index math (no load before it): measured the better place

    x_ptrs = X + rm[:, None] * stride_xm + rk[None, :]
    w1_ptrs = W + row1[None, :] * stride_wn + rk[:, None]  # [BLOCK_K, BLOCK_HALF] view of w
    w2_ptrs = w1_ptrs + half * stride_wn
    acc1 = tl.zeros([BLOCK_M, BLOCK_HALF], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_M, BLOCK_HALF], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            w1 = tl.load(w1_ptrs, mask=i_ok[None, :], other=0.0)
            w2 = tl.load(w2_ptrs, mask=i_ok[None, :], other=0.0)
        else:
            k_ok = (k0 + rk) < K
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w1 = tl.load(w1_ptrs, mask=i_ok[None, :] & k_ok[:, None], other=0.0)
            w2 = tl.load(w2_ptrs, mask=i_ok[None, :] & k_ok[:, None], other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w1 = w1.to(tl.float32)
            w2 = w2.to(tl.float32)
        acc1 = tl.dot(x, w1, acc1, input_precision=DOT_PRECISION)
        acc2 = tl.dot(x, w2, acc2, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K
        w1_ptrs += BLOCK_K
        w2_ptrs += BLOCK_K

    # The two-kernel path stores qkv in x's dtype and RoPE reads it back: round here the same way.
    y1 = acc1.to(X.dtype.element_ty).to(tl.float32)
    y2 = acc2.to(X.dtype.element_ty).to(tl.float32)
    ok = m_ok[:, None] & i_ok[None, :]
    slot = tl.load(Slots + rm * stride_slot, mask=m_ok, other=0).to(tl.int64)
    n_qk = num_heads + num_kv_heads
    if h < n_qk:
        pos = tl.load(Pos + rm * stride_pos, mask=m_ok, other=0).to(tl.float32)
        angle = pos[:, None] * tl.load(InvFreq + i, mask=i_ok, other=0.0).to(tl.float32)[None, :]
        cos = tl.cos(angle)
        sin = tl.sin(angle)
        r1 = y1 * cos - y2 * sin
        r2 = y2 * cos + y1 * sin
        if h < num_heads:
            q_ptr = Q + rm[:, None].to(tl.int64) * stride_q0 + h * stride_q1 + i[None, :]
            tl.store(q_ptr, r1.to(Q.dtype.element_ty), mask=ok)
            tl.store(q_ptr + half, r2.to(Q.dtype.element_ty), mask=ok)
        else:
            k_ptr = Kc + slot[:, None] * stride_k0 + (h - num_heads) * stride_k1 + i[None, :]
            tl.store(k_ptr, r1.to(Kc.dtype.element_ty), mask=ok)
            tl.store(k_ptr + half, r2.to(Kc.dtype.element_ty), mask=ok)
    else:
        v_ptr = Vc + slot[:, None] * stride_v0 + (h - n_qk) * stride_v1 + i[None, :]
        tl.store(v_ptr, y1.to(Vc.dtype.element_ty), mask=ok)
        tl.store(v_ptr + half, y2.to(Vc.dtype.element_ty), mask=ok)


def _block_k(t: int, k: int, block_half: int, elem_bytes: int, num_stages: int) -> int:
    """256 (128 for T > 16), at most next_pow2(K), halved while the pipelined tiles exceed SMEM_BUDGET."""
    bm = m_bucket(t)
    bk = min(256 if bm <= 16 else 128, max(MIN_DOT, triton.next_power_of_2(k)))
    while bk > 32 and num_stages * (bm + 2 * block_half) * bk * elem_bytes > SMEM_BUDGET:
        bk //= 2
    return bk


def _check_x(x: torch.Tensor) -> tuple[int, int]:
    """x [T, K]: 2-d, T <= MAX_M, floating point, contiguous last dim. Returns (T, K)."""
    if x.dim() != 2:
        raise ValueError(f"{FN}: x must be 2-d [T, K], got {tuple(x.shape)}")
    t, k = x.shape
    if t > MAX_M:
        raise ValueError(f"{FN}: x has T={t} rows, more than MAX_M={MAX_M} (use the two-kernel path with cuBLAS)")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{FN}: x must be floating point, got {x.dtype}")
    if x.stride(-1) != 1:
        raise ValueError(f"{FN}: x needs a contiguous last dim")
    return t, k


def _check_w_qkv(w_qkv: torch.Tensor, x: torch.Tensor, num_heads: int, num_kv_heads: int, d: int) -> None:
    """w_qkv [(Hq + 2 Hkv) * D, K] of x's dtype and device, contiguous last dim."""
    n, k = (num_heads + 2 * num_kv_heads) * d, x.shape[1]
    if w_qkv.dim() != 2 or tuple(w_qkv.shape) != (n, k):
        raise ValueError(f"{FN}: w_qkv must be [(Hq + 2 Hkv) * D, K] = [({num_heads} + 2 * {num_kv_heads}) * {d}, "
                         f"{k}] = [{n}, {k}], got {tuple(w_qkv.shape)}")
    if w_qkv.dtype != x.dtype:
        raise ValueError(f"{FN}: w_qkv dtype {w_qkv.dtype} must match x's {x.dtype}")
    if w_qkv.stride(-1) != 1:
        raise ValueError(f"{FN}: w_qkv needs a contiguous last dim")
    if w_qkv.device != x.device:
        raise ValueError(f"{FN}: w_qkv is on {w_qkv.device}, x on {x.device}")


def _tiles(t: int, k: int, half: int, elem_bytes: int, num_stages: int, block_k: int | None,
           pair_split: int = PAIR_SPLIT) -> tuple[int, int]:
    """(BLOCK_HALF, BLOCK_K): a program's chunk of the D/2 rotation pairs (`pair_split` chunks per head, masked up to
    a power of two >= MIN_DOT), and the K tile: `block_k` as given (checked), else `_block_k`."""
    if isinstance(pair_split, bool) or pair_split not in (1, 2, 4):
        raise ValueError(f"{FN}: pair_split must be 1, 2 or 4, got {pair_split!r}")
    block_half = max(MIN_DOT, triton.next_power_of_2(triton.cdiv(half, pair_split)))
    if block_k is None:
        block_k = _block_k(t, k, block_half, elem_bytes, num_stages)
    elif not isinstance(block_k, int) or block_k < MIN_DOT or block_k & (block_k - 1):
        raise ValueError(f"{FN}: block_k must be a power of two >= {MIN_DOT}, got {block_k!r}")
    return block_half, block_k


def qkv_rope_kv_write(
    x: torch.Tensor,
    w_qkv: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    write_slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    *,
    q_out: torch.Tensor | None = None,
    block_k: int | None = None,
    num_warps: int = 4,
    num_stages: int = 4,
    pdl_role: str = "gemm",
    pair_split: int = PAIR_SPLIT,
) -> torch.Tensor:
    """x @ w_qkv.T, RoPE on q and k, k and v written to the caches at ``write_slots``; returns q (module docstring).

    Args:
        x: [T, K] activations (fp32, fp16 or bf16), T <= 64, last dim contiguous.
        w_qkv: [(Hq + 2 Hkv) * D, K] (nn.Linear layout: q rows, then k rows, then v rows), x's dtype and device,
            last dim contiguous.
        positions: [T] int32/int64 token positions.
        inv_freq: [D/2] float32 inverse frequencies (``runtime.model.rope_inv_freq``), contiguous.
        k_cache, v_cache: [cap, Hkv, D], last dim contiguous; any float dtype (the stores cast).
        write_slots: [T] int32/int64 distinct cache slots in [0, cap).
        num_heads, num_kv_heads: Hq and Hkv (of this tensor-parallel shard).
        q_out: optional float [T, Hq, D] buffer with a contiguous last dim (not overlapping the inputs).
        block_k, num_warps, num_stages: tile configuration overrides (block_k: a power of two >= 16; default
            from T, K, D and the shared-memory budget). Untuned.
        pdl_role: the `kernels.pdl` role of the launch ("pre_attention" when a prefix_ready attention follows).
        pair_split: programs per head, 1, 2 or 4 (PAIR_SPLIT, the tuned one).

    Returns:
        q [T, Hq, D]: ``q_out`` if given, else a new contiguous tensor of x's dtype.
    """
    t, k = _check_x(x)
    d = check_rope_operands(FN, t, x.device, positions, inv_freq, k_cache, v_cache, write_slots, num_heads,
                            num_kv_heads)
    _check_w_qkv(w_qkv, x, num_heads, num_kv_heads, d)
    q_out = q_out_buffer(FN, q_out, t, num_heads, d, x.dtype, x.device)
    for name, v in (("num_warps", num_warps), ("num_stages", num_stages)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{FN}: {name} must be a positive int, got {v!r}")
    check_role(FN, pdl_role)
    half = d // 2
    block_half, block_k = _tiles(t, k, half, x.element_size(), num_stages, block_k, pair_split)
    if t == 0:
        return q_out

    upcast = x.device.type == "cpu"
    _qkv_rope_kv_write_kernel[(num_heads + 2 * num_kv_heads, triton.cdiv(half, block_half))](
        x, w_qkv, positions, inv_freq, q_out, k_cache, v_cache, write_slots,
        t, k, num_heads, num_kv_heads, half,
        x.stride(0), w_qkv.stride(0), positions.stride(0), write_slots.stride(0),
        q_out.stride(0), q_out.stride(1), k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        BLOCK_M=m_bucket(t), BLOCK_HALF=block_half, BLOCK_K=block_k, EVEN_K=k % block_k == 0,
        UPCAST=upcast, DOT_PRECISION="ieee" if (upcast or x.dtype == torch.float32) else "tf32",
        num_warps=num_warps, num_stages=num_stages, **pdl_options(x.device, pdl_role),
    )
    return q_out
