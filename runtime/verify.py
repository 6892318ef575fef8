"""Tree verification: which drafted nodes the target accepts, and its bonus token.

- `greedy_verify` (temperature 0): the longest root-down path whose every token equals the target's
  argmax at its parent, plus the bonus token (the target's argmax at the last accepted node). Pure tensor
  ops with static shapes and no host round trip: the reference twin of `kernels.greedy_verify` (same
  signature and semantics), and the implementation the engine uses with `kernels=reference`.
- `verify_proposal`: the engine's entry point; greedy through the selected backend, or the lossless
  tree rejection sampler of `runtime.sampling` at temperature > 0. One host sync per verify (to build
  the `VerifiedPath` message), none per node.

Siblings of a top-k tree carry distinct tokens, so at most one child of an accepted node can match; for
duplicate siblings the tie rule of `kernels.greedy_verify` (lowest index per depth) is reproduced.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from runtime.sampling import sample_tree


def greedy_verify(
    target_argmax: torch.Tensor, token_ids: torch.Tensor, parent: torch.Tensor, num_nodes: int | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Longest accepted root-down path of a padded tree, and the bonus token.

    Args:
        target_argmax: [N] int64, the target's argmax next token after each node.
        token_ids: [N] int64, node tokens; node 0 is the root (always accepted).
        parent: [N] int64, parent index (< own index) of each node; -1 for the root and padding.
        num_nodes: real nodes (int or 0-d / 1-element tensor); rows at or beyond it are padding.

    Returns:
        path: [N] int64, accepted node indices root first, then -1 padding.
        num_accepted: [] int64, accepted draft nodes (path length - 1).
        bonus: [] int64, the target's argmax after the last accepted node.

    Node i is accepted iff token_ids[i] == target_argmax[parent[i]] and its parent is accepted. The path
    is the deepest accepted chain; among equally deep chains (only possible with duplicate sibling
    tokens), the lowest node index at each depth from the root down: `kernels.greedy_verify` semantics.
    Everything is static-shape tensor work over ceil(log2 N) pointer-jumping rounds: after round r,
    `up[r][i]` is i's 2^r-th ancestor (clamped at the root).
    """
    n = token_ids.shape[0]
    idx = torch.arange(n, device=token_ids.device)
    real = idx < torch.as_tensor(num_nodes, device=token_ids.device).reshape(())
    is_child = real & (idx > 0) & (parent >= 0)
    par = torch.where(is_child, parent, torch.zeros_like(parent))  # root and padding point at node 0
    rounds = max(1, (n - 1).bit_length())

    # 1. acceptance (all edges up to the root match) and depth, by pointer jumping
    ok = (is_child & (token_ids == target_argmax[par])) | (idx == 0)
    depth = is_child.long()
    up = [par]
    for _ in range(rounds):
        a = up[-1]
        ok = ok & ok[a]
        depth = depth + depth[a]
        up.append(a[a])
    # 2. nodes with a deepest accepted node below them (or themselves): marks flow up 1, 2, 4, ... levels
    best = torch.where(ok, depth, torch.zeros_like(depth)).max()
    marked = ok & (depth == best)
    for a in up[:-1]:
        lifted = torch.zeros_like(marked).scatter_reduce(0, a, marked, reduce="amax")
        marked = marked | (lifted & real)
    # 3. keep the lowest-index marked child of every node; the path is where all ancestors were kept
    sib_min = torch.full_like(idx, n).scatter_reduce(0, par, torch.where(marked & is_child, idx, n), reduce="amin")
    keep = (marked & (sib_min[par] == idx)) | (idx == 0)
    for a in up[:-1]:
        keep = keep & keep[a]
    # Kept nodes form one chain; parents precede children, so sorting them first lists it root-down.
    order = torch.sort(torch.where(keep, idx, idx + n), stable=True).values
    count = keep.sum()
    path = torch.where(idx < count, order, torch.full_like(order, -1))
    return path, count - 1, target_argmax[order[count - 1]]


def _triton_greedy_verify():
    """The Triton twin (`kernels.greedy_verify`, same signature), imported only when selected."""
    from kernels import greedy_verify

    return greedy_verify


@dataclass(frozen=True)
class Verdict:
    """Outcome of one verify: the accepted path (proposal indices, root first) and the bonus token."""

    path: tuple[int, ...]
    bonus: int
    # oracle runs: the drawn bonus token's draft rank (or NO_RANK); the draft resolves the token (`bonus` is the
    # target's placeholder). None otherwise.
    bonus_rank: int | None = None

    @property
    def num_accepted(self) -> int:
        """Draft tokens accepted (root excluded)."""
        return len(self.path) - 1


def verify_proposal(
    logits: torch.Tensor,
    token_ids: torch.Tensor,
    parents: torch.Tensor,
    num_nodes: int,
    temperature: float,
    generator: torch.Generator | None,
    backend: str = "reference",
) -> Verdict:
    """Verify one padded proposal against the target's logits.

    logits: [N, vocab] fp32 target logits after each node; token_ids, parents: [N] as in `greedy_verify`.
    `backend` picks the greedy implementation (reference | triton); `generator` is the request's own
    generator, used only at temperature > 0.
    """
    if temperature > 0:
        if generator is None:
            raise ValueError("sampling verification needs the request's torch.Generator")
        path, bonus = sample_tree(logits[:num_nodes], token_ids[:num_nodes].tolist(),
                                  parents[:num_nodes].tolist(), temperature, generator)
        return Verdict(tuple(path), bonus)
    fn = greedy_verify
    if backend == "triton":
        fn = _triton_greedy_verify()
    path_t, count, bonus_t = fn(logits.argmax(dim=-1), token_ids, parents, num_nodes)
    # the one host sync of a verify: path, count and bonus in a single device-to-host copy
    *path_list, n, bonus = torch.cat([path_t, count.reshape(1), bonus_t.reshape(1)]).tolist()
    return Verdict(tuple(path_list[: n + 1]), bonus)
