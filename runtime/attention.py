"""Attention metadata and attention backends (plain torch reference, Triton tree attention).

`AttnMeta` describes one forward of a single request: which positions the T new tokens have (for RoPE),
which cache slots their keys/values are written to, and what each of them may attend to. The visible cache
region is [0, prefix_len + tree_len): every query sees the whole prefix [0, prefix_len), and query i sees tree
slot prefix_len + j iff `tree_mask[i, j]` (its ancestors and itself). The new tokens' slots lie inside the
visible region. Worked example, a verify step over a 3-node tree (root r, children a, b) after a 5-token prefix:

    prefix_len = 5, tree_len = 3, write_slots = [5, 6, 7], positions = [5, 6, 6]
    tree_mask = [[1, 0, 0],   # r sees itself
                 [1, 1, 0],   # a sees r and itself
                 [1, 0, 1]]   # b sees r and itself (not its sibling a)

A draft expansion of w leaves uses a non-square mask: T = w queries over a tree region of tree_len > w slots.
Prefill and autoregressive decode are the square causal case (`AttnMeta.causal`).

Backends take q [T, Hq, D] and one layer's cache (k, v each [capacity, Hkv, D]) after the new keys/values
were written, and return [T, Hq, D]. Grouped-query attention maps query head h to kv head h // (Hq / Hkv).
The backend is chosen explicitly by name (`make_attention_backend`); nothing flips a global.
This module knows nothing of TP or speculation policy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class AttnMeta:
    """What the T new tokens of one forward see and where their K/V go."""

    # [T] RoPE positions of the new tokens.
    positions: torch.Tensor
    # [T] cache slots where the new tokens' keys/values are written: tree slots, inside
    # [prefix_len, prefix_len + tree_len) (kernels.rope_tree_attention relies on it: its prefix splits read while
    # the last one writes).
    write_slots: torch.Tensor
    # Every query sees slots [0, prefix_len). A 1-element device tensor inside CUDA graphs (runtime/graphs.py;
    # the Triton backend only), so that one captured step serves every prefix length.
    prefix_len: int | torch.Tensor
    # Slots [prefix_len, prefix_len + tree_len) are visible through tree_mask.
    tree_len: int
    # [T, tree_len] bool: query i may see slot prefix_len + j; includes the query's own slot.
    tree_mask: torch.Tensor

    def __post_init__(self) -> None:
        """Check shapes (cheap, no device sync)."""
        t = self.positions.shape[0]
        if self.positions.dim() != 1 or self.write_slots.shape != (t,):
            raise ValueError(f"AttnMeta: positions {tuple(self.positions.shape)} and write_slots "
                             f"{tuple(self.write_slots.shape)} must both be [T]")
        if self.tree_mask.shape != (t, self.tree_len) or self.tree_mask.dtype != torch.bool:
            raise ValueError(f"AttnMeta: tree_mask must be bool [T={t}, tree_len={self.tree_len}], got "
                             f"{self.tree_mask.dtype} {tuple(self.tree_mask.shape)}")
        if isinstance(self.prefix_len, torch.Tensor):
            if self.prefix_len.numel() != 1:
                raise ValueError(f"AttnMeta: a tensor prefix_len must have one element, got {self.prefix_len.shape}")
        elif self.prefix_len < 0:
            raise ValueError(f"AttnMeta: prefix_len {self.prefix_len} must be >= 0")
        if self.tree_len < 0:
            raise ValueError(f"AttnMeta: tree_len {self.tree_len} must be >= 0")

    @property
    def num_tokens(self) -> int:
        """T, the number of new tokens (queries)."""
        return self.positions.shape[0]

    @property
    def visible_len(self) -> int:
        """Length of the visible cache region [0, prefix_len + tree_len)."""
        return self.prefix_len + self.tree_len

    @staticmethod
    def causal(start: int, n: int, device: torch.device | str = "cpu") -> AttnMeta:
        """Prefill or autoregressive decode: n tokens at slots/positions start..start+n-1, causal among them."""
        idx = torch.arange(start, start + n, device=device)
        mask = torch.ones(n, n, dtype=torch.bool, device=device).tril()
        return AttnMeta(positions=idx, write_slots=idx.clone(), prefix_len=start, tree_len=n, tree_mask=mask)

    @staticmethod
    def tree(
        prefix_len: int,
        tree_len: int,
        write_slots: torch.Tensor,
        positions: torch.Tensor,
        tree_mask: torch.Tensor,
    ) -> AttnMeta:
        """A tree step: T queries written at `write_slots`, seeing the prefix and the tree slots `tree_mask` allows."""
        return AttnMeta(positions=positions, write_slots=write_slots, prefix_len=prefix_len, tree_len=tree_len,
                        tree_mask=tree_mask)


def visible_mask(meta: AttnMeta) -> torch.Tensor:
    """[T, prefix_len + tree_len] bool: the full visibility of every query (prefix columns all true)."""
    prefix = torch.ones(meta.num_tokens, meta.prefix_len, dtype=torch.bool, device=meta.tree_mask.device)
    return torch.cat([prefix, meta.tree_mask], dim=1)


class AttentionBackend:
    """Interface: attention of T queries over the visible region of one layer's cache."""

    name = "abstract"
    rope_max_tokens = 0
    """Steps of up to this many tokens may call `rope_attend` (RoPE + K/V write inside the attention); 0: none."""

    def __call__(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMeta, scale: float,
        prefix_ready: bool = False, out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """q [T, Hq, D], k_cache / v_cache [capacity, Hkv, D] -> [T, Hq, D] in q's dtype (or `out_dtype`: float16 for
        an fp8-weight o projection). `prefix_ready`: the launch right before wrote neither the prefix K/V nor
        prefix_len nor the positions (kernels.tree_attention: a backend may then load the prefix before its PDL wait;
        others ignore it)."""
        raise NotImplementedError


class ReferenceAttention(AttentionBackend):
    """Plain torch, fp32 math, deterministic: the exactness oracle (and the CPU default)."""

    name = "reference"

    def __call__(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMeta, scale: float,
        prefix_ready: bool = False, out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """q [T, Hq, D], k_cache / v_cache [capacity, Hkv, D] -> [T, Hq, D] in q's dtype or `out_dtype`
        (`prefix_ready` ignored)."""
        t, hq, d = q.shape
        n = meta.visible_len
        hkv = k_cache.shape[1]
        if n > k_cache.shape[0]:
            raise ValueError(f"attention: visible region {n} exceeds the cache capacity {k_cache.shape[0]}")
        k = k_cache[:n].float()  # [n, Hkv, D]
        v = v_cache[:n].float()
        qg = q.float().view(t, hkv, hq // hkv, d)  # [T, Hkv, group, D]: query h uses kv head h // group
        scores = torch.einsum("thgd,nhd->hgtn", qg, k) * scale  # [Hkv, group, T, n]
        scores = scores.masked_fill(~visible_mask(meta), -math.inf)
        probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("hgtn,nhd->thgd", probs, v)  # [T, Hkv, group, D]
        return out.reshape(t, hq, d).to(out_dtype or q.dtype)


class TritonAttention(AttentionBackend):
    """Triton tree attention (`kernels.tree_attention`): split-KV over prefix + tree block, GQA, one launch."""

    name = "triton"

    def __init__(self) -> None:
        """Import the kernels package lazily, so the reference path never needs Triton."""
        from kernels import rope_tree_attention, tree_attention
        from kernels.tree_attention import ROPE_FASTER_MAX_TOKENS

        self._tree_attention = tree_attention
        self._rope_tree_attention = rope_tree_attention
        self.rope_max_tokens = ROPE_FASTER_MAX_TOKENS  # where the fused launch measured faster (single-token steps)

    def __call__(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMeta, scale: float,
        prefix_ready: bool = False, out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """q [T, Hq, D], k_cache / v_cache [capacity, Hkv, D] -> [T, Hq, D] in q's dtype or `out_dtype`. The model
        passes `prefix_ready` only after the fused QKV + RoPE GEMM (kernels.qkv_rope): after rope_kv_write (multi-token
        steps) the prefetch is slower, the previous launch too short to hide it behind."""
        return self._tree_attention(q, k_cache, v_cache, meta.prefix_len, meta.tree_mask, scale,
                                    prefix_ready=prefix_ready,
                                    out=None if out_dtype in (None, q.dtype) else q.new_empty(q.shape, dtype=out_dtype))

    def rope_attend(
        self, qkv: torch.Tensor, inv_freq: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttnMeta,
        scale: float, num_heads: int, out_dtype: torch.dtype | None = None,
    ) -> torch.Tensor:
        """RoPE + K/V write + attention in one launch (`kernels.rope_tree_attention`): qkv [T, (Hq + 2 Hkv) * D]
        not rotated -> [T, Hq, D] (in qkv's dtype or `out_dtype`). For T <= `rope_max_tokens`; meta's write slots must
        be tree slots (every producer in the runtime writes at prefix_len + tree slot)."""
        out = None
        if out_dtype not in (None, qkv.dtype):
            out = qkv.new_empty((qkv.shape[0], num_heads, k_cache.shape[-1]), dtype=out_dtype)
        return self._rope_tree_attention(qkv, meta.positions, inv_freq, k_cache, v_cache, meta.write_slots, num_heads,
                                         meta.prefix_len, meta.tree_mask, scale, prefix_ready=True, out=out)


_BACKENDS: dict[str, type[AttentionBackend]] = {"reference": ReferenceAttention, "triton": TritonAttention}


def make_attention_backend(name: str) -> AttentionBackend:
    """The backend called `name` (the kernels preset's backend: reference | triton)."""
    if name not in _BACKENDS:
        raise ValueError(f"attention backend: unknown {name!r}; allowed: {sorted(_BACKENDS)}")
    return _BACKENDS[name]()
