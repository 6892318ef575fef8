"""Fused RoPE + KV-cache write: the whole post-QKV-projection step of one attention layer in one launch.

Contract (reference twin: ``kernels.reference.rope_kv_write_ref``)::

    rope_kv_write(qkv [T, (Hq + 2 Hkv) * D], positions [T], inv_freq [D/2], k_cache [cap, Hkv, D],
                  v_cache [cap, Hkv, D], write_slots [T], Hq, Hkv) -> q [T, Hq, D] (qkv.dtype)

    angle[t, i]   = float32(positions[t]) * inv_freq[i]                  (i < D/2, float32)
    rope(x)[:D/2] = x[:D/2] * cos(angle) - x[D/2:] * sin(angle)          (rotate-half convention of HF
    rope(x)[D/2:] = x[D/2:] * cos(angle) + x[:D/2] * sin(angle)           Llama: cos/sin of cat([f, f]))
    q[t, h]                    = rope(q_in[t, h])   rounded once to qkv.dtype (or q_out's dtype)
    k_cache[write_slots[t], h] = rope(k_in[t, h])   rounded once to k_cache.dtype
    v_cache[write_slots[t], h] = v_in[t, h]         cast to v_cache.dtype

What is fused. The eager path (runtime/model.py: rope_cos_sin + apply_rope on q and k + two index_copy_)
is about a dozen small launches per layer (neg/cat/mul/mul/add for q and again for k, the casts, the two
scatters; the cos/sin table once per forward) with [T, H, D] intermediates between them. Here one
program reads each qkv element once, computes cos/sin of its token's angles in registers and writes q,
the rotated k and the raw v straight to their destinations.

Numerics. All maths is float32 with one final rounding: x * cos + rotate_half(x) * sin from the input
values and float32 cos/sin. The torch path instead rounds cos/sin to the model dtype and rounds each
product and the sum to it (bf16: ~3 roundings of 2^-8 each), so in bf16 the two differ by a few bf16
ulps; the kernel is the more accurate one. In float32 they agree to float32 rounding (cos/sin
implementations differ by ~1 ulp; Triton 3.x lowers float32 ``tl.cos``/``tl.sin`` on NVIDIA to libdevice
``__nv_cosf``/``__nv_sinf``, not the ``.approx`` instructions, so large angles keep full range reduction).
The angle itself is rounded to float32 exactly as torch rounds it, so ``positions`` beyond 2^24 are not
exact in either. Under ``TRITON_INTERPRET=1`` float32 -> bf16 stores truncate instead of rounding to
nearest (an interpreter quirk), so CPU bf16 results can be one bf16 ulp off; GPUs round to nearest.

Layout and work split. The qkv row is viewed as Hq + 2 Hkv heads of D (q heads, then k, then v). Grid
(T, cdiv(Hq + 2 Hkv, BLOCK_H)): one program owns one token and a block of BLOCK_H heads, loaded as two
[BLOCK_H, D/2] halves (each row D/2 contiguous elements); head index h < Hq goes to q, h < Hq + Hkv to
k_cache (rotated), the rest to v_cache (not rotated), each by a masked store. BLOCK_H * D <= 4096, so
Llama-3-8B (48 heads of 128) takes 2 programs per token. Hq need not be a power of two; D must be even
(D/2 need not be a power of two either: the half is masked).

``q_out`` may alias qkv's q columns (``qkv[:, :Hq*D].view(T, Hq, D)``: RoPE in place): every element is
read and written by the same program, loads before stores. ``write_slots`` must be distinct and in
[0, cap) (not checked: that would need a host sync). Duplicates leave one of the writers, unspecified
which, as ``index_copy_`` does.

CUDA graphs: the launch configuration depends only on shapes (T, heads, D); positions and slots are read
on device, nothing syncs with the host, so one graph per T serves every step.

Roofline (H200, bf16, Llama-3-8B Hq=32, Hkv=8, D=128): bytes = 2 (read + write) * 48 * 128 * 2 B =
24 KiB per token: T=64 is 1.5 MiB, 0.4 us at 4.29 TB/s, so the kernel is launch-bound like the eager
chain it replaces, but at one launch instead of ~12.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, pdl_start

TILE_ELEMS = 4096  # heads x D elements per program


@triton.jit
def _rope_kv_write_kernel(
    QKV, Pos, InvFreq, Q, K, V, Slots,
    num_heads, num_kv_heads, half,
    stride_qkv, stride_pos, stride_slot, stride_q0, stride_q1, stride_k0, stride_k1, stride_v0, stride_v1,
    BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)
    t = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)  # head index in the q|k|v row
    i = tl.arange(0, BLOCK_HALF)  # column inside one half of a head
    i_ok = i < half
    d = 2 * half

    pos = tl.load(Pos + t * stride_pos).to(tl.float32)
    angle = pos * tl.load(InvFreq + i, mask=i_ok, other=0.0).to(tl.float32)  # [BLOCK_HALF] float32
    cos = tl.cos(angle)[None, :]
    sin = tl.sin(angle)[None, :]

    n_qk = num_heads + num_kv_heads
    ok = (h < n_qk + num_kv_heads)[:, None] & i_ok[None, :]
    row = QKV + t * stride_qkv + h[:, None].to(tl.int64) * d + i[None, :]
    x1 = tl.load(row, mask=ok, other=0.0).to(tl.float32)  # first half of every head
    x2 = tl.load(row + half, mask=ok, other=0.0).to(tl.float32)  # second half
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin

    is_q = (h < num_heads)[:, None] & ok
    q_ptr = Q + t * stride_q0 + h[:, None].to(tl.int64) * stride_q1 + i[None, :]
    tl.store(q_ptr, r1.to(Q.dtype.element_ty), mask=is_q)
    tl.store(q_ptr + half, r2.to(Q.dtype.element_ty), mask=is_q)

    slot = tl.load(Slots + t * stride_slot).to(tl.int64)
    is_k = ((h >= num_heads) & (h < n_qk))[:, None] & ok
    k_ptr = K + slot * stride_k0 + (h - num_heads)[:, None].to(tl.int64) * stride_k1 + i[None, :]
    tl.store(k_ptr, r1.to(K.dtype.element_ty), mask=is_k)
    tl.store(k_ptr + half, r2.to(K.dtype.element_ty), mask=is_k)

    is_v = (h >= n_qk)[:, None] & ok
    v_ptr = V + slot * stride_v0 + (h - n_qk)[:, None].to(tl.int64) * stride_v1 + i[None, :]
    tl.store(v_ptr, x1.to(V.dtype.element_ty), mask=is_v)
    tl.store(v_ptr + half, x2.to(V.dtype.element_ty), mask=is_v)


def check_rope_operands(fn: str, t: int, device: torch.device, positions: torch.Tensor, inv_freq: torch.Tensor,
                        k_cache: torch.Tensor, v_cache: torch.Tensor, write_slots: torch.Tensor, num_heads: int,
                        num_kv_heads: int) -> int:
    """Check the RoPE + KV-write operands of `fn` for T = `t` rows on `device`; returns the head dim D. Errors
    name `fn` and the argument (shared by rope_kv_write and kernels.qkv_rope.qkv_rope_kv_write)."""
    if num_heads < 1 or num_kv_heads < 1:
        raise ValueError(f"{fn}: num_heads={num_heads} and num_kv_heads={num_kv_heads} must be >= 1")
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.dim() != 3 or cache.shape[1] != num_kv_heads:
            raise ValueError(f"{fn}: {name} must be [cap, Hkv={num_kv_heads}, D], got {tuple(cache.shape)}")
        if cache.stride(-1) != 1:
            raise ValueError(f"{fn}: {name} needs a contiguous last dim")
        if not cache.dtype.is_floating_point:
            raise ValueError(f"{fn}: {name} must be floating point, got {cache.dtype}")
    d = k_cache.shape[2]
    if v_cache.shape[2] != d:
        raise ValueError(f"{fn}: v_cache head dim {v_cache.shape[2]} != k_cache head dim {d}")
    if d % 2:
        raise ValueError(f"{fn}: head dim D={d} (from k_cache) must be even")
    for name, idx in (("positions", positions), ("write_slots", write_slots)):
        if idx.dim() != 1 or idx.shape[0] != t or idx.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{fn}: {name} must be a [T={t}] int32/int64 tensor, got {tuple(idx.shape)} {idx.dtype}")
    if inv_freq.shape != (d // 2,) or inv_freq.dtype != torch.float32 or inv_freq.stride(0) != 1:
        raise ValueError(f"{fn}: inv_freq must be a contiguous [D/2={d // 2}] float32 tensor, "
                         f"got {tuple(inv_freq.shape)} {inv_freq.dtype}")
    for name, other in (("positions", positions), ("inv_freq", inv_freq), ("k_cache", k_cache),
                        ("v_cache", v_cache), ("write_slots", write_slots)):
        if other.device != device:
            raise ValueError(f"{fn}: {name} is on {other.device}, the input on {device}")
    return d


def q_out_buffer(fn: str, q_out: torch.Tensor | None, t: int, num_heads: int, d: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """The q output of `fn`: `q_out` checked (a float [T, Hq, D] tensor on `device` with a contiguous last dim), or
    a new contiguous one of `dtype` (shared by rope_kv_write and kernels.qkv_rope.qkv_rope_kv_write)."""
    if q_out is None:
        return torch.empty(t, num_heads, d, dtype=dtype, device=device)
    if (q_out.shape != (t, num_heads, d) or q_out.stride(-1) != 1 or not q_out.dtype.is_floating_point
            or q_out.device != device):
        raise ValueError(f"{fn}: q_out must be a float [T={t}, Hq={num_heads}, D={d}] tensor on {device} with a "
                         f"contiguous last dim, got {tuple(q_out.shape)} {q_out.dtype} on {q_out.device}")
    return q_out


def rope_kv_write(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    inv_freq: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    write_slots: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
    *,
    q_out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Rotate q and k of ``qkv`` by RoPE, write k and v to the caches at ``write_slots``; returns q.

    Args:
        qkv: [T, (Hq + 2 Hkv) * D] (fp32, fp16 or bf16): q heads, then k heads, then v heads. The last
            dim must be contiguous; any row stride (e.g. a column slice of a wider GEMM output).
        positions: [T] int32/int64 token positions (any values, e.g. tree depths [5, 6, 6, 7]).
        inv_freq: [D/2] float32 inverse frequencies (``runtime.model.rope_inv_freq``, scaled or not).
        k_cache, v_cache: [cap, Hkv, D], last dim contiguous; any float dtype (the stores cast).
        write_slots: [T] int32/int64 distinct cache slots in [0, cap).
        num_heads, num_kv_heads: Hq and Hkv (of this tensor-parallel shard).
        q_out: optional [T, Hq, D] buffer, last dim contiguous (may alias qkv's q columns).

    Returns:
        q [T, Hq, D]: ``q_out`` if given, else a new contiguous tensor of qkv's dtype.
    """
    if qkv.dim() != 2:
        raise ValueError(f"rope_kv_write: qkv must be 2-d [T, (Hq + 2 Hkv) * D], got {tuple(qkv.shape)}")
    t, width = qkv.shape
    d = check_rope_operands("rope_kv_write", t, qkv.device, positions, inv_freq, k_cache, v_cache, write_slots,
                            num_heads, num_kv_heads)
    if width != (num_heads + 2 * num_kv_heads) * d:
        raise ValueError(f"rope_kv_write: qkv width {width} != (Hq + 2 Hkv) * D = "
                         f"({num_heads} + 2 * {num_kv_heads}) * {d} = {(num_heads + 2 * num_kv_heads) * d}")
    if qkv.stride(-1) != 1:
        raise ValueError("rope_kv_write: qkv needs a contiguous last dim")
    if not qkv.dtype.is_floating_point:
        raise ValueError(f"rope_kv_write: qkv must be floating point, got {qkv.dtype}")
    q_out = q_out_buffer("rope_kv_write", q_out, t, num_heads, d, qkv.dtype, qkv.device)
    if t == 0:
        return q_out

    half = d // 2
    block_half = triton.next_power_of_2(half)
    n_heads = num_heads + 2 * num_kv_heads
    block_h = min(triton.next_power_of_2(n_heads), max(1, TILE_ELEMS // (2 * block_half)))
    grid = (t, triton.cdiv(n_heads, block_h))
    _rope_kv_write_kernel[grid](
        qkv, positions, inv_freq, q_out, k_cache, v_cache, write_slots,
        num_heads, num_kv_heads, half,
        qkv.stride(0), positions.stride(0), write_slots.stride(0), q_out.stride(0), q_out.stride(1),
        k_cache.stride(0), k_cache.stride(1), v_cache.stride(0), v_cache.stride(1),
        BLOCK_H=block_h, BLOCK_HALF=block_half, num_warps=4, **pdl_options(qkv.device),
    )
    return q_out
