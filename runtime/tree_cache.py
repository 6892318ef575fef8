"""The evolving tree cache: where tree nodes' KV lives, and how it is kept after a verify.

Layout of a request's cache (draft and target alike; SwiftSpec [P] §3.2, notes §1.5):

    [0, prefix_len)                      prefix: KV of every verified token except the root, contiguous
    [prefix_len, prefix_len + max_len)   tree region: tree slot j lives at prefix_len + j

Draft, after a verified path arrives (`runtime.tree.Reroot`): one `KVCache.keep` gathers, over every layer
at once, the path nodes' KV into the next prefix slots and the surviving subtree's KV right after them;
everything else in the tree region is free. Worked example ([P] Fig. 4, prefix_len = 4, tree slots
0..7 = t11..t18, verified path r=t11 -> t12 -> t15, bonus t17 hit, t17 expanded with child t18 expanded):

    keep_slots = (0, 1, 4, 6, 7)   # t11, t12, t15 (promoted: num_promoted = 3), then t17, t18
    cache.keep(4 + keep_slots, dst_start=4)
    prefix_len = 4 + 3             # t17 (the new root) sits at tree slot 0, t18 at slot 1

Positions stay valid because a node's RoPE position is prefix_len + depth, before and after: promoted
nodes had depth k below the old root, which is exactly their new prefix slot offset.

Target, after a verify of proposal nodes 0..n-1 written at tree slots 0..n-1: keep the root and the
accepted nodes (`path`, in proposal indices) and drop the rest; the bonus token becomes the next root.

Nothing is recomputed. The caller owns `prefix_len`: `keep_accepted` returns the new value; after a re-root it is
prefix_len + `Reroot.num_promoted` (DraftWorker.advance, which defers the gather to DraftWorker.compact).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from runtime.attention import AttnMeta
from runtime.kv_cache import KVCache
from runtime.tree import StepInputs

if TYPE_CHECKING:
    from runtime.graphs import PrefillGraphs


def prefill(model: torch.nn.Module, cache: KVCache, attn: object, prompt: list[int],
            device: torch.device | str, graphs: PrefillGraphs | None = None) -> int:
    """Write the KV of all prompt tokens but the last (which becomes the root) at slots [0, n-1); returns n-1.
    `graphs` (kernels.prefill_graph): replay its captured prefill of the prompt's length bucket where one fits, else
    an eager forward (which skips the LM head: a prefill keeps only the K/V)."""
    prefix_len = len(prompt) - 1
    if prefix_len and not (graphs is not None and graphs.run(prompt[:-1])):
        ids = torch.tensor(prompt[:-1], device=device)
        model(ids, AttnMeta.causal(0, prefix_len, device), cache, attn, logits=False)
    return prefix_len


def step_meta(inp: StepInputs, prefix_len: int, device: torch.device | str) -> AttnMeta:
    """AttnMeta of a forward over tree rows (a draft expansion or a verify) after `prefix_len` tokens."""
    return AttnMeta.tree(
        prefix_len=prefix_len,
        tree_len=inp.tree_mask.shape[1],
        write_slots=(prefix_len + inp.tree_slots).to(device),
        positions=inp.positions.to(device),
        tree_mask=inp.tree_mask.to(device),
    )


def keep_accepted(cache: KVCache, prefix_len: int, path: tuple[int, ...] | list[int]) -> int:
    """In place: keep the verified root and accepted nodes of a target verify; returns the new prefix length.

    `path` holds proposal indices (= tree slots of the verify step), root first.
    """
    keep_slots(cache, prefix_len, path)
    return prefix_len + len(path)


def keep_slots(cache: KVCache, prefix_len: int, slots: tuple[int, ...] | list[int]) -> None:
    """In place: move tree slots `slots` (in order) to [prefix_len, prefix_len + len(slots)), one gather over
    every layer; nothing is launched when they already sit there (see `in_place`). Slots must be ascending
    (tree slots of a root-down path, then of its surviving subtree): the forward compaction `KVCache.keep`
    supports for any count on CUDA."""
    src = compaction_sources(prefix_len, slots)
    if src is not None:
        apply_compaction(cache, prefix_len, src)


def apply_compaction(cache: KVCache, prefix_len: int, sources: list[int]) -> None:
    """In place: gather cache slots `sources` (from `compaction_sources`) to [prefix_len, ...), every layer."""
    cache.keep(torch.tensor(sources, dtype=torch.long, device=cache.device), prefix_len)


def compaction_sources(prefix_len: int, slots: tuple[int, ...] | list[int]) -> list[int] | None:
    """The cache slots `keep_slots` gathers to [prefix_len, ...), or None when nothing moves (`in_place`); a
    CUDA-graph step applies them itself (`runtime.graphs.StepGraph` keep_rows). Checks the forward order."""
    if in_place(slots):
        return None
    if any(b <= a for a, b in zip(slots, slots[1:])) or slots[0] < 0:
        raise ValueError(f"keep_slots: tree slots must be ascending and >= 0 (forward compaction), got {list(slots)}")
    return [prefix_len + s for s in slots]


def in_place(slots: tuple[int, ...] | list[int]) -> bool:
    """Whether keeping tree slots `slots` at the prefix end moves nothing (slots are 0, 1, ..., n-1, or none).
    Autoregressive steps and chains (accepted nodes are a prefix of the proposal) are."""
    return all(s == i for i, s in enumerate(slots))
