"""Slow, obviously-correct PyTorch twins of every kernel in this package.

Each function here has the same signature and semantics as its Triton counterpart (minus the tuning
keywords) and is the oracle in ``tests/kernels``; the runtime can select them with
``kernels=reference``. They favour clarity over speed: host loops, float32 maths, dense masks.
They do not promise CUDA-graph capturability (``greedy_verify_ref`` syncs with the host per node).
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def tree_attention_ref(
    q: torch.Tensor,  # [T, Hq, D]
    k_cache: torch.Tensor,  # [cap, Hkv, D]
    v_cache: torch.Tensor,  # [cap, Hkv, D]
    prefix_len: int | torch.Tensor,
    tree_mask: torch.Tensor,  # [T, tree_len] bool
    scale: float,
    *,
    out: torch.Tensor | None = None,  # [T, Hq, D], q.dtype
) -> torch.Tensor:
    """Dense float32 attention of T queries over prefix KV [0, prefix_len) plus masked tree KV.

    Key ``prefix_len + j`` is visible to query ``i`` iff ``tree_mask[i, j]``. A query row that sees no key
    at all (possible only for padding rows when ``prefix_len == 0``) outputs zeros, like the kernel.
    """
    p = int(prefix_len)
    t, hq, d = q.shape
    tree_len = tree_mask.shape[1]
    hkv = k_cache.shape[1]
    group = hq // hkv
    k = k_cache[: p + tree_len].float().repeat_interleave(group, dim=1)  # [S, Hq, D]
    v = v_cache[: p + tree_len].float().repeat_interleave(group, dim=1)
    visible = torch.cat(
        [torch.ones(t, p, dtype=torch.bool, device=q.device), tree_mask.to(torch.bool)], dim=1
    )  # [T, S]
    scores = torch.einsum("thd,shd->hts", q.float(), k) * scale  # [Hq, T, S]
    scores = scores.masked_fill(~visible[None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # all-masked rows -> 0
    res = torch.einsum("hts,shd->thd", probs, v).to(q.dtype)
    if out is not None:
        out.copy_(res)
        return out
    return res


def swiglu_ref(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """silu(x @ w_gate.T) * (x @ w_up.T), computed in float32, returned in x.dtype. x [M,K], w [I,K]."""
    g = x.float() @ w_gate.float().t()
    u = x.float() @ w_up.float().t()
    return (torch.nn.functional.silu(g) * u).to(x.dtype)


def add_rmsnorm_ref(
    x: torch.Tensor,  # [M, N]
    residual: torch.Tensor | None,  # [M, N]
    weight: torch.Tensor,  # [N]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rmsnorm(x + residual) * weight, x + residual); the sum is rounded to x.dtype before the norm."""
    new_residual = x if residual is None else (x.float() + residual.float()).to(x.dtype)
    h = new_residual.float()
    rstd = torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
    normed = (h * rstd * weight.float()).to(x.dtype)
    return normed, new_residual


def kv_compact_ref(kv: torch.Tensor, src_slots: torch.Tensor, dst_start: int | torch.Tensor) -> None:
    """In place: kv[:, :, dst_start + i] = kv[:, :, src_slots[i]] for every i with src_slots[i] >= 0.

    kv is [L, 2, cap, H, D]. All sources are gathered before any destination is written (advanced
    indexing makes a copy), so overlapping source and destination ranges are fine.
    """
    keep = src_slots >= 0
    idx = torch.nonzero(keep).flatten()
    if idx.numel() == 0:
        return
    vals = kv[:, :, src_slots[idx]].clone()
    kv[:, :, int(dst_start) + idx] = vals


def greedy_verify_ref(
    target_argmax: torch.Tensor,  # [N] int64
    token_ids: torch.Tensor,  # [N] int64
    parent: torch.Tensor,  # [N] int64, -1 for the root, parents precede children
    num_nodes: int | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy tree verification: (path [N] padded with -1, num_accepted 0-d, bonus 0-d), all int64.

    Node 0 is the root and always accepted; node i > 0 is accepted iff its parent is accepted and
    token_ids[i] == target_argmax[parent[i]]. The path is the deepest accepted chain; among equally deep
    chains it takes the lowest node index at each depth, from the root down (lexicographic order).
    """
    n = token_ids.shape[0]
    nn = int(num_nodes)
    amax, tok, par = target_argmax.tolist(), token_ids.tolist(), parent.tolist()
    accepted = [False] * nn
    depth = [0] * nn
    accepted[0] = True
    for i in range(1, nn):
        p = par[i]
        accepted[i] = accepted[p] and tok[i] == amax[p]
        depth[i] = depth[p] + 1
    best = max(depth[i] for i in range(nn) if accepted[i])
    on_best = [accepted[i] and depth[i] == best for i in range(nn)]
    for i in range(nn - 1, 0, -1):  # children after parents: one backward sweep marks all ancestors
        if on_best[i]:
            on_best[par[i]] = True
    path = [0]
    for _ in range(best):
        cur = path[-1]
        path.append(min(i for i in range(1, nn) if on_best[i] and par[i] == cur))
    dev = token_ids.device
    path_t = torch.full((n,), -1, dtype=torch.int64, device=dev)
    path_t[: len(path)] = torch.tensor(path, dtype=torch.int64, device=dev)
    return (
        path_t,
        torch.tensor(best, dtype=torch.int64, device=dev),
        torch.tensor(amax[path[-1]], dtype=torch.int64, device=dev),
    )


def gemm_allreduce_ref(x: torch.Tensor, w: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """x @ w.T summed over ``group`` (a row-parallel linear): matmul, then ``dist.all_reduce``."""
    y = x @ w.t()
    if group is not None and dist.get_world_size(group) > 1:
        dist.all_reduce(y, group=group)
    return y


def rope_kv_write_ref(
    qkv: torch.Tensor,  # [T, (Hq + 2 Hkv) * D]
    positions: torch.Tensor,  # [T] int
    inv_freq: torch.Tensor,  # [D/2] float32
    k_cache: torch.Tensor,  # [cap, Hkv, D]
    v_cache: torch.Tensor,  # [cap, Hkv, D]
    write_slots: torch.Tensor,  # [T] int
    num_heads: int,
    num_kv_heads: int,
    *,
    q_out: torch.Tensor | None = None,  # [T, Hq, D]
) -> torch.Tensor:
    """RoPE (rotate-half) on q and k in float32, k and v scattered to the caches at ``write_slots``; returns q.

    angle = float32(position) * inv_freq; each output is x * cos + rotate_half(x) * sin from float32 cos/sin
    and inputs, rounded once to its destination's dtype (q: qkv.dtype or q_out's). v is copied unrotated.
    """
    t = qkv.shape[0]
    d = k_cache.shape[-1]
    half = d // 2
    q, k, v = qkv.float().split([num_heads * d, num_kv_heads * d, num_kv_heads * d], dim=-1)
    angle = positions.float()[:, None] * inv_freq.float()[None, :]  # [T, D/2]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]  # [T, 1, D/2]

    def rope(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    q_rot = rope(q.reshape(t, num_heads, d))
    k_cache.index_copy_(0, write_slots.long(), rope(k.reshape(t, num_kv_heads, d)).to(k_cache.dtype))
    v_cache.index_copy_(0, write_slots.long(), v.reshape(t, num_kv_heads, d).to(v_cache.dtype))
    if q_out is not None:
        q_out.copy_(q_rot)
        return q_out
    return q_rot.to(qkv.dtype)


def skinny_linear_ref(x: torch.Tensor, w: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (x [M,K], w [N,K]) computed in float32, rounded once to x.dtype (or out's dtype)."""
    res = x.float() @ w.float().t()
    if out is not None:
        out.copy_(res)
        return out
    return res.to(x.dtype)


def skinny_linear_partials_ref(
    x: torch.Tensor, w: torch.Tensor, split_k: int, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """[split_k, M, N] float32: partial s = x[:, ks] @ w[:, ks].T over K chunk s (zeros if the chunk is empty).

    Chunk s is [s*C, min((s+1)*C, K)) with C = cdiv(K, split_k) rounded up to a multiple of 16, as in
    kernels/skinny_linear.py; summing the partials over s gives x @ w.T.
    """
    m, k = x.shape
    chunk = ((k + split_k - 1) // split_k + 15) // 16 * 16
    res = torch.zeros(split_k, m, w.shape[0], dtype=torch.float32, device=x.device)
    for s in range(split_k):
        lo, hi = min(s * chunk, k), min((s + 1) * chunk, k)
        res[s] = x[:, lo:hi].float() @ w[:, lo:hi].float().t()
    if out is not None:
        out.copy_(res)
        return out
    return res


def add_rmsnorm_partials_ref(
    partials: torch.Tensor,  # [S, M, N] float32
    residual: torch.Tensor,  # [M, N]
    weight: torch.Tensor,  # [N]
    eps: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rmsnorm_ref(x, residual, weight, eps) with x = the partials summed in split order (float32) and
    rounded to residual.dtype: the projection output a GEMM would have stored."""
    acc = partials[0].clone()
    for s in range(1, partials.shape[0]):
        acc += partials[s]
    return add_rmsnorm_ref(acc.to(residual.dtype), residual, weight, eps)


def topk_logprobs_ref(logits: torch.Tensor, k: int, scale: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Twin of ``kernels.topk_logprobs``: (values, ids) of the k largest log-softmax entries of `logits` * `scale`."""
    top = torch.topk(torch.log_softmax(logits.float() * scale, dim=-1), k, dim=-1)
    return top.values, top.indices
