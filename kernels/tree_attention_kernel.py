"""The device code of the tree attention (`kernels.tree_attention`: the contract, the launch and the tile
choices): the split-KV program over prefix + tree keys with its helpers, the fused RoPE and K/V write of the
last split, and the in-kernel merge of the splits' partials. Its host side picks the tile, the splits and the
constexpr switches and launches `_tree_attention_kernel`."""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.pdl import pdl_start


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
    """`use_tma_prefix`: prefix block `b` as whole [BLOCK_N, D] boxes through the tensor descriptors at
    (b * BLOCK_N, col): (K [D, BLOCK_N], V [BLOCK_N, D], key_ok [BLOCK_N]), no per-element addresses. `owned` False
    (an empty split): the box lies past the cache and moves nothing. Keys past prefix_len come in the block that
    straddles it: their scores are masked and their V rows zeroed there (what a masked load gives: a non-finite stale
    value cannot leak through p = 0); rows past the cache read as zeros."""
    keys = b * BLOCK_N + tl.arange(0, BLOCK_N)
    key_ok = keys < prefix_len
    row = tl.where(owned, b * BLOCK_N, TMA_OUT_OF_BOUNDS_ROW)
    k = tl.trans(KDesc.load([row, col]))
    v = VDesc.load([row, col])
    if (b + 1) * BLOCK_N > prefix_len:  # the straddling block only: one select
        v = tl.where(key_ok[:, None], v, 0.0)
    return k, v, key_ok


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
