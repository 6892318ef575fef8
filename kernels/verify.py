"""Greedy tree verification on device: longest accepted path + bonus token, no host sync.

    greedy_verify(target_argmax [N], token_ids [N], parent [N], num_nodes)
        -> (path [N] int64 padded with -1, num_accepted 0-d int64, bonus 0-d int64)

(reference: ``greedy_verify_ref``). Node 0 is the root, always accepted; node i > 0 is accepted iff its
parent is accepted and ``token_ids[i] == target_argmax[parent[i]]``. The path is the deepest accepted
chain, root first; among equally deep chains, the lowest node index at each depth from the root down.
``num_accepted`` counts the draft tokens on it (root excluded); ``bonus = target_argmax[path[-1]]``.

One program holds the whole tree (N <= 128) in registers. Parent lookups are one-hot [N, N] masks
(a register "gather"); the first two passes use pointer jumping (log2 N doublings), so no pass walks
the tree node by node:
  1. acceptance and depth: AND of edge matches and count of edges from each node up to the root;
  2. nodes on some deepest accepted chain are marked and the marks are pushed up to every ancestor;
  3. the path descends from the root, taking the lowest-index marked child at each depth (a loop of
     num_accepted steps of one [N] reduction each).
Cost is O(N^2 log N) ALU work on one SM (~0.1 M ops at N=64): a few microseconds, all launch and
latency, against a host loop that syncs per node. ``num_nodes`` may be a 1-element device tensor (CUDA graphs
with a padded tree).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_NODES = 128


@triton.jit
def _gather(values, onehot):
    """values[parent[i]] for each i, with onehot[i, j] = (parent[i] == j)."""
    return tl.sum(tl.where(onehot, values[None, :], 0), axis=1)


@triton.jit
def _greedy_verify_kernel(
    Argmax, Tokens, Parent, num_nodes_arg, Path, NumAccepted, Bonus, N,
    NUM_NODES_IN_TENSOR: tl.constexpr, BLOCK: tl.constexpr, LOG_BLOCK: tl.constexpr,
):
    if NUM_NODES_IN_TENSOR:
        num_nodes = tl.load(num_nodes_arg).to(tl.int32)
    else:
        num_nodes = num_nodes_arg
    idx = tl.arange(0, BLOCK)
    valid = (idx < num_nodes) & (idx < N)
    is_child = valid & (idx > 0)
    par = tl.load(Parent + idx, mask=is_child, other=0).to(tl.int32)
    par = tl.where(is_child & (par >= 0) & (par < BLOCK), par, 0)
    tok = tl.load(Tokens + idx, mask=valid, other=0)
    amax = tl.load(Argmax + idx, mask=valid, other=0)
    onehot = (par[:, None] == idx[None, :]) & is_child[:, None]  # [child, parent]
    edge_ok = is_child & (tok == _gather(amax, onehot))

    # 1. pointer jumping: ok[i] = all edges between i and anc[i] match, dep[i] = their count. After
    #    LOG_BLOCK doublings anc is the root for every node, so ok is "accepted" and dep the depth.
    anc = par
    ok = tl.where(idx == 0, 1, edge_ok.to(tl.int32))
    dep = is_child.to(tl.int32)
    for _ in range(LOG_BLOCK):
        jump = anc[:, None] == idx[None, :]
        ok = ok & _gather(ok, jump)
        dep = dep + _gather(dep, jump)
        anc = _gather(anc, jump)
    accepted = valid & (ok != 0)
    best = tl.max(tl.where(accepted, dep, 0), axis=0)

    # 2. mark the deepest accepted nodes, then their ancestors: step k adds the 2^k-th ancestors,
    #    so after LOG_BLOCK steps every ancestor at distance < BLOCK is marked.
    marked = (accepted & (dep == best)).to(tl.int32)
    anc = par
    for _ in range(LOG_BLOCK):
        jump = (anc[:, None] == idx[None, :]) & valid[:, None]
        marked = tl.maximum(marked, tl.max(tl.where(jump & (marked[:, None] != 0), 1, 0), axis=0))
        anc = _gather(anc, jump)

    # 3. descend from the root through the lowest-index marked child, best steps
    cur = tl.zeros([], dtype=tl.int32)
    path = tl.where(idx == 0, 0, -1).to(tl.int64)
    for step in range(1, best + 1):
        cand = (marked != 0) & is_child & (par == cur)
        cur = tl.min(tl.where(cand, idx, BLOCK), axis=0)
        path = tl.where(idx == step, cur.to(tl.int64), path)

    tl.store(Path + idx, path, mask=idx < N)
    tl.store(NumAccepted, best.to(tl.int64))
    tl.store(Bonus, tl.sum(tl.where(idx == cur, amax, 0), axis=0))


def greedy_verify(
    target_argmax: torch.Tensor,
    token_ids: torch.Tensor,
    parent: torch.Tensor,
    num_nodes: int | torch.Tensor,
    *,
    out: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Longest accepted root-to-node path of a draft tree under greedy decoding, on device.

    Args:
        target_argmax: [N] int64, the target's argmax token at each tree node.
        token_ids: [N] int64, the draft token of each node (node 0 is the root).
        parent: [N] int64, parent index (-1 for the root); parents precede children.
        num_nodes: number of real nodes (<= N); int or 1-element device tensor. Rows beyond are padding.
        out: optional (path [N] int64, num_accepted 0-d int64, bonus 0-d int64) buffers.

    Returns:
        (path [N] padded with -1, num_accepted 0-d int64, bonus 0-d int64).
    """
    n = token_ids.shape[0]
    if target_argmax.shape != (n,) or parent.shape != (n,):
        raise ValueError("greedy_verify: target_argmax, token_ids and parent must all be [N]")
    if not 1 <= n <= MAX_NODES:
        raise ValueError(f"greedy_verify: N={n} outside [1, {MAX_NODES}]")
    if not isinstance(num_nodes, torch.Tensor) and not 1 <= num_nodes <= n:
        raise ValueError(f"greedy_verify: num_nodes={num_nodes} outside [1, {n}]")
    dev = token_ids.device
    if out is None:
        out = (
            torch.empty(n, dtype=torch.int64, device=dev),
            torch.empty((), dtype=torch.int64, device=dev),
            torch.empty((), dtype=torch.int64, device=dev),
        )
    path, num_acc, bonus = out
    block = max(16, triton.next_power_of_2(n))
    _greedy_verify_kernel[(1,)](
        target_argmax, token_ids, parent, num_nodes, path, num_acc, bonus, n,
        NUM_NODES_IN_TENSOR=isinstance(num_nodes, torch.Tensor), BLOCK=block, LOG_BLOCK=block.bit_length() - 1,
        num_warps=4,
    )
    return path, num_acc, bonus
