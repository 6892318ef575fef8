"""The draft tree: best-first growth, top-`bs` selection, padded step tensors and re-rooting.

SwiftSpec [P] §3.1-3.2 (notes: reference/paper-swiftspec.md §1.4-1.6). Glossary:

- **root**: the last verified token. Its KV is not in any cache yet; it is the first input of the next
  forward (draft expansion or target verify), at position `prefix_len` (its depth is 0).
- **weight**: cumulative draft log-probability of a node's path below the root (root = 0). Log-probs are
  <= 0, so weights never increase along a path and the top-`bs` nodes form an ancestor-closed subtree.
- **expanded**: a node fed to the draft forward. Its KV then sits at its **tree slot** in the draft
  cache's tree region (`prefix_len + slot`) and its top-k children are in the tree. Slots are given out in
  expansion order, so a parent's slot is below its children's and the used slots are `[0, num_slots)`.
- **frontier**: the unexpanded nodes; each step expands the `w` of highest weight (ties: lower node id). Kept
  lazily: a parent's children come best first (their weights never increase, their ids do), so a later sibling is
  never taken before an earlier one, and the heap holds only each parent's first unexpanded child; taking a node
  pushes its next sibling. The order taken equals that of a heap of every unexpanded node, with w + 1 pushes per
  expansion instead of w x k (bench/bench_host_path.py). `select` walks the same way.

This module is host-side bookkeeping plus the construction of the small padded tensors that the model's
`AttnMeta` needs. It runs no model and touches no cache: `Reroot` says which tree slots the cache keeps.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class Node:
    """A snapshot of one draft-tree node (`DraftTree.nodes[i]`: built on access, for tests and diagnostics; the
    tree itself keeps its nodes in parallel lists)."""

    token: int
    parent: int  # node id of the parent; -1 for the root
    depth: int  # 0 for the root
    logprob: float  # its weight minus its parent's: the (clamped) draft log-prob of `token` (0 for the root)
    weight: float  # cumulative log-prob of the path from the root (0 for the root)
    slot: int = -1  # tree slot of its KV in the draft cache; -1 = not fed to the draft yet
    children: list[int] | tuple[int, ...] = ()  # node ids, in descending draft log-prob; () for a leaf

    @property
    def expanded(self) -> bool:
        """True once the node's KV is written (it was fed to a draft forward)."""
        return self.slot >= 0


class _NodeView(Sequence[Node]):
    """`DraftTree.nodes`: read-only `Node` snapshots of a tree's parallel lists."""

    def __init__(self, tree: DraftTree) -> None:
        self._tree = tree

    def __len__(self) -> int:
        return len(self._tree.tokens)

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self._tree.node(k) for k in range(*i.indices(len(self)))]
        return self._tree.node(range(len(self))[i])


@dataclass
class TreeStats:
    """Counters carried from tree to tree across re-rootings (one per request)."""

    hits: int = 0  # verified bonus token was already a node: its subtree survived
    misses: int = 0  # it was not: a new tree started at it
    expansions: int = 0  # draft forwards over tree nodes
    expanded_nodes: int = 0  # nodes fed to those forwards (<= w per expansion)


@dataclass(frozen=True)
class StepInputs:
    """Padded static inputs of one forward over tree nodes (rows = w for a draft step, bs for a verify).

    Rows beyond `num_real` are padding: token 0, position `prefix_len`, they write a free tree slot and
    see only that slot (so their softmax is well defined); their outputs are ignored.

    Held as host lists and mask bytes: a CUDA-graph step copies them into its staging buffer as they are
    (`StepGraph.load_inputs`; each torch op here cost ~10-30 us of host time before every replay on the H200
    host). The eager path reads them as tensors (`token_ids`, ..., built once on first access).
    """

    ids: list[int]  # [rows] token ids
    pos: list[int]  # [rows] prefix_len + depth
    slots: list[int]  # [rows] slot written, relative to the tree region start (prefix_len)
    mask_flat: bytes | bytearray  # [rows * max_len] row-major 0/1: query i sees tree slot j
    max_len: int  # mask columns (tree slots the step sees)
    parent_rows: list[int]  # [rows] row index of the parent within these rows; -1 root / padding
    num_real: int  # rows holding real nodes

    def __post_init__(self) -> None:
        rows = len(self.ids)
        if not len(self.pos) == len(self.slots) == len(self.parent_rows) == rows or \
                len(self.mask_flat) != rows * self.max_len:
            raise ValueError(f"StepInputs: {rows} ids, {len(self.pos)} positions, {len(self.slots)} slots, "
                             f"{len(self.parent_rows)} parents and {len(self.mask_flat)} mask bytes do not make "
                             f"{rows} rows x {self.max_len} columns")

    @property
    def rows(self) -> int:
        return len(self.ids)

    @functools.cached_property
    def token_ids(self) -> torch.Tensor:
        """[rows] int64."""
        return torch.tensor(self.ids, dtype=torch.long)

    @functools.cached_property
    def positions(self) -> torch.Tensor:
        """[rows] int64."""
        return torch.tensor(self.pos, dtype=torch.long)

    @functools.cached_property
    def tree_slots(self) -> torch.Tensor:
        """[rows] int64."""
        return torch.tensor(self.slots, dtype=torch.long)

    @functools.cached_property
    def tree_mask(self) -> torch.Tensor:
        """[rows, max_len] bool."""
        return bool_mask(self.mask_flat, self.rows, self.max_len)

    @functools.cached_property
    def parents(self) -> torch.Tensor:
        """[rows] int64."""
        return torch.tensor(self.parent_rows, dtype=torch.long)


def ancestor_mask(parents: list[int], rows: int) -> torch.Tensor:
    """[rows, rows] bool: row i sees column j iff node j is node i or one of its ancestors.

    `parents[i]` < i (parents precede children); rows beyond `len(parents)` see only themselves.
    Example, parents = [-1, 0, 0, 1] (root, two children, one grandchild under node 1):
        1 0 0 0
        1 1 0 0
        1 0 1 0
        1 1 0 1
    """
    if rows == 0:
        return torch.zeros(0, 0, dtype=torch.bool)
    return bool_mask(ancestor_bytes(parents, rows), rows, rows)


def ancestor_bytes(parents: list[int], rows: int) -> bytearray:
    """`ancestor_mask` as row-major 0/1 bytes (what a verify step copies to the device)."""
    if len(parents) > rows:
        raise ValueError(f"ancestor_mask: {len(parents)} nodes do not fit {rows} rows")
    # Row i = row parents[i] plus column i (this runs every verify).
    flat = bytearray(rows * rows)
    for i in range(rows):
        p = parents[i] if i < len(parents) else -1
        if p >= 0:
            flat[i * rows:(i + 1) * rows] = flat[p * rows:(p + 1) * rows]
        flat[i * rows + i] = 1
    return flat


def bool_mask(flat: bytes | bytearray, rows: int, cols: int) -> torch.Tensor:
    """A [rows, cols] bool tensor (a copy) of row-major 0/1 bytes: masks are filled on the host as bytes, then
    converted with one tensor op instead of one indexed write per row."""
    return torch.frombuffer(bytearray(flat), dtype=torch.uint8).view(rows, cols).to(torch.bool)


def proposal_inputs(token_ids: list[int], parents: list[int], prefix_len: int, rows: int) -> StepInputs:
    """Verify-step inputs of a proposal (root first, parents before children), padded to `rows` (= bs).

    Node i is written at tree slot i; its position is `prefix_len + depth(i)`.
    """
    n = len(token_ids)
    if n > rows:
        raise ValueError(f"proposal has {n} nodes, more than the verify width {rows}")
    depth = [0] * rows
    for i, p in enumerate(parents):
        depth[i] = 0 if p < 0 else depth[p] + 1
    return StepInputs(
        ids=list(token_ids) + [0] * (rows - n),
        pos=[prefix_len + d for d in depth],
        slots=list(range(rows)),
        mask_flat=ancestor_bytes(list(parents), rows),
        max_len=rows,
        parent_rows=list(parents) + [-1] * (rows - n),
        num_real=n,
    )


@dataclass(frozen=True)
class Reroot:
    """Outcome of re-rooting along a verified path, and the draft-cache plan that goes with it.

    The draft cache applies it as `cache.keep(prefix_len + tensor(keep_slots), dst_start=prefix_len)`
    (one gather over every layer), then `prefix_len += num_promoted`: the path nodes' KV becomes prefix,
    and the surviving subtree's KV is compacted right after it, in its new tree slots 0, 1, ...
    """

    tree: DraftTree  # the new tree, rooted at the bonus token
    hit: bool
    keep_slots: tuple[int, ...]  # old tree slots kept: promoted path nodes first, then survivors
    num_promoted: int  # leading entries of keep_slots that join the prefix
    pending: tuple[int, ...]  # verified tokens without draft KV (fed before the new root is expanded)


class DraftTree:
    """A draft tree for one request. Mutated by `plan_expansion` / `grow(_topk)`; `reroot` returns a new tree.

    Nodes are ids into parallel lists (`tokens`, `parents`, `weights`, ...): an expansion appends w x k children
    with a few list extends per parent, not w x k objects (bench/bench_host_path.py; the draft's host time per
    expansion is on the async loop's critical path). A parent's children are consecutive ids, created together,
    best first: `children(i)` is a range. `nodes[i]` gives a `Node` snapshot.
    """

    def __init__(self, root_token: int, stats: TreeStats | None = None) -> None:
        self.tokens: list[int] = [root_token]
        self.parents: list[int] = [-1]  # -1 for the root
        self.depths: list[int] = [0]
        self.weights: list[float] = [0.0]  # cumulative log-prob from the root
        self.slots: list[int] = [-1]  # tree slot of the node's KV; -1 = not expanded
        self.first_child: list[int] = [-1]  # id of the first child; -1 = a leaf
        self.num_children: list[int] = [0]
        self.num_slots = 0  # tree slots in use: [0, num_slots)
        self.stats = stats if stats is not None else TreeStats()
        # heap of (-weight, node id): the root while unexpanded, then each parent's first unexpanded child
        self._frontier: list[tuple[float, int]] = [(-0.0, 0)]
        # the last `select` as (bs, node ids), kept while the tree does not change; any expansion clears it
        self._selected: tuple[int, list[int]] | None = None

    # ---- queries -------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def root_token(self) -> int:
        """Token of the root (the last verified token)."""
        return self.tokens[0]

    @property
    def nodes(self) -> _NodeView:
        """Read-only `Node` snapshots, indexable by node id (built on access: not for the hot path)."""
        return _NodeView(self)

    def node(self, i: int) -> Node:
        """A snapshot of node i."""
        p = self.parents[i]
        kids = self.children(i)
        return Node(token=self.tokens[i], parent=p, depth=self.depths[i],
                    logprob=self.weights[i] - self.weights[p] if p >= 0 else 0.0, weight=self.weights[i],
                    slot=self.slots[i], children=list(kids) if kids else ())

    def children(self, i: int) -> range:
        """Node ids of node i's children, best first (empty for a leaf)."""
        first = self.first_child[i]
        return range(first, first + self.num_children[i])

    def frontier(self, w: int) -> list[int]:
        """The `w` highest-weight unexpanded nodes (fewer if the tree has fewer), best first."""
        heap, out = list(self._frontier), []
        while heap and len(out) < w:
            _, i = heapq.heappop(heap)
            out.append(i)
            self._push_next_sibling(heap, i)
        return out

    def _push_next_sibling(self, heap: list[tuple[float, int]], i: int) -> None:
        """Push node i's next sibling (the best child of its parent after it), if any, onto `heap`."""
        p = self.parents[i]
        if p >= 0 and i + 1 < self.first_child[p] + self.num_children[p]:
            heapq.heappush(heap, (-self.weights[i + 1], i + 1))

    def select(self, bs: int) -> list[int]:
        """Node ids of the top-`bs` subtree, in best-first order (root first, parents before children).

        A best-first walk from the root: it pops the highest-weight node whose parent is already taken,
        so the result is ancestor-closed even under equal weights, and (weights being non-increasing
        along paths) it is exactly the set of the `min(bs, len(self))` highest-weight nodes. Lazily, as the
        frontier: a taken node pushes its first child and its next sibling.
        """
        if self._selected is not None and self._selected[0] == bs:
            return list(self._selected[1])
        heap = [(-0.0, 0)]
        taken: list[int] = []
        first, weights = self.first_child, self.weights
        while heap and len(taken) < bs:
            _, i = heapq.heappop(heap)
            taken.append(i)
            if first[i] >= 0:
                heapq.heappush(heap, (-weights[first[i]], first[i]))
            self._push_next_sibling(heap, i)
        self._selected = (bs, list(taken))
        return taken

    def expected_tokens(self, selection: list[int]) -> float:
        """Expected tokens of verifying `selection` (from `select`, root first) if the weights were the acceptance
        log-probabilities: 1 for the bonus token (the root's weight is 0) + each node's exp(weight), the
        probability that its whole path is accepted. The DepthTuner's trial yield (policy/depth_tuner.py)."""
        return sum(math.exp(self.weights[i]) for i in selection)

    def proposal(self, selection: list[int]) -> tuple[list[int], list[int]]:
        """(token ids, parent indices within the selection) of a selection, as `DraftProposal` wants."""
        index = {node: k for k, node in enumerate(selection)}
        tokens = [self.tokens[i] for i in selection]
        parents = [index[self.parents[i]] if k else -1 for k, i in enumerate(selection)]
        return tokens, parents

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root down to `node`."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    # ---- growth --------------------------------------------------------------------------------------
    def can_expand(self, w: int, max_len: int) -> bool:
        """True if an expansion fits: `w` more slots (real and padding rows) within `max_len` tree slots."""
        return bool(self._frontier) and self.num_slots + w <= max_len

    def plan_expansion(self, w: int, prefix_len: int, max_len: int) -> tuple[list[int], StepInputs]:
        """In place: take the `w` best frontier nodes, give them tree slots, build the draft step's inputs.

        The returned nodes count as expanded from now on (their KV is written by the forward the caller
        runs next). Rows are padded to `w`, mask columns to `max_len` tree slots.
        """
        if not self.can_expand(w, max_len):
            raise RuntimeError(f"cannot expand: {self.num_slots} + {w} slots > {max_len} or empty frontier")
        self._selected = None
        chosen, frontier = [], self._frontier
        while frontier and len(chosen) < w:
            i = heapq.heappop(frontier)[1]
            chosen.append(i)
            self._push_next_sibling(frontier, i)
        slots, parents = self.slots, self.parents
        start = self.num_slots
        for s, i in enumerate(chosen, start):
            slots[i] = s
        self.num_slots = start + len(chosen)
        pad = list(range(self.num_slots, start + w))  # free slots for padding rows
        # The [w, max_len] mask as bytes (this runs on the critical path of every draft step).
        flat = bytearray(w * max_len)
        for row, i in enumerate(chosen):
            base, node = row * max_len, i
            while node >= 0:  # the node and its ancestors (all expanded, so all hold slots)
                flat[base + slots[node]] = 1
                node = parents[node]
        for row, s in enumerate(pad, start=len(chosen)):
            flat[row * max_len + s] = 1
        self.stats.expansions += 1
        self.stats.expanded_nodes += len(chosen)
        return chosen, StepInputs(
            ids=[self.tokens[i] for i in chosen] + [0] * len(pad),
            pos=[prefix_len + self.depths[i] for i in chosen] + [prefix_len] * len(pad),
            slots=list(range(start, self.num_slots)) + pad,
            mask_flat=flat,
            max_len=max_len,
            parent_rows=[-1] * w,
            num_real=len(chosen),
        )

    def grow(self, expanded: list[int], logprobs: torch.Tensor, topk: int) -> None:
        """In place: add the `topk` most likely children of each expanded node.

        logprobs: [>= len(expanded), vocab] draft log-probs, row r for node expanded[r] (padding rows after).
        """
        k = min(topk, logprobs.shape[-1])
        top_lp, top_tok = torch.topk(logprobs[: len(expanded)].float(), k, dim=-1)  # [n, k], descending
        self.grow_topk(expanded, top_lp, top_tok)

    def grow_topk(self, expanded: list[int], top_lp: torch.Tensor | np.ndarray, top_tok: torch.Tensor | np.ndarray,
                  belief: list[list[float]] | None = None) -> None:
        """In place: add children from precomputed top-k: top_lp/top_tok [>= len(expanded), k] (descending per row,
        log-probs and token ids: tensors on any device, or numpy arrays; only the first len(expanded) rows are read).

        Children are added in column order (so column 0 is the first child); a row's log-probs are clamped to
        <= 0 and must not increase along the row (torch.topk's order: the lazy frontier relies on it). One host
        transfer: both tensors' needed rows are read together. A node gets its children once (expanded once).
        `belief` (the oracle's `spec.oracle_belief=table`): the log-prob of a rank-r child of a node at depth k
        is `belief[min(k, len - 1)][r]` (non-increasing in r, covering every column) instead of the model's.
        """
        n = len(expanded)
        if top_lp.shape[0] < n or top_tok.shape[0] < n or top_lp.shape[-1] != top_tok.shape[-1]:
            raise ValueError(f"top-k tensors {tuple(top_lp.shape)} / {tuple(top_tok.shape)} do not cover "
                             f"{n} expanded nodes with equal k")
        k = top_tok.shape[-1]
        if n == 0 or k == 0:
            return
        if belief is not None and min(len(row) for row in belief) < k:
            raise ValueError(f"belief rows cover {min(len(row) for row in belief)} ranks, fewer than top-k {k}")
        self._selected = None
        first_child, num_children, depths = self.first_child, self.num_children, self.depths
        for i in expanded:
            if first_child[i] >= 0:
                raise RuntimeError(f"node {i} already has children (a node is expanded once)")
        if isinstance(top_lp, np.ndarray):  # host arrays (a readback graph's pinned copies): no torch op
            lp_rows, tok_rows = top_lp[:n].tolist(), top_tok[:n].tolist()
        else:  # one device -> host copy: token ids (< 2**24 for any vocabulary here) ride along as float64 exactly
            both = torch.stack((top_lp[:n].to(torch.float64), top_tok[:n].to(torch.float64))).cpu()
            lp_rows, tok_rows = both.tolist()
        # The draft's host time per expansion (w x k children; bench/bench_host_path.py): per parent, a few list
        # extends; constant columns once per expansion; one heap push per parent (its first child: lazy frontier).
        first, weights, parents = len(self.tokens), self.weights, self.parents
        for toks in tok_rows:
            self.tokens.extend(map(int, toks))
        for r, i in enumerate(expanded):
            lps = lp_rows[r] if belief is None else belief[min(depths[i], len(belief) - 1)][:k]
            base = weights[i]
            weights.extend([base + lp if lp < 0.0 else base for lp in lps])  # clamped: weights never increase
            parents.extend([i] * k)
            depths.extend([depths[i] + 1] * k)
            first_child[i], num_children[i] = first + r * k, k
            heapq.heappush(self._frontier, (-weights[first + r * k], first + r * k))
        added = n * k
        self.slots.extend([-1] * added)
        first_child.extend([-1] * added)
        num_children.extend([0] * added)

    # ---- re-rooting ----------------------------------------------------------------------------------
    def reroot(self, path: list[int], bonus: int) -> Reroot:
        """Re-root at the bonus token after the verified `path` (node ids, root first).

        Hit: the bonus is a child of the last path node; the new tree is that child's subtree (node ids
        renumbered in creation order, slots compacted in slot order, weights and depths re-based).
        Miss: the new tree is the bonus token alone. In both cases the path nodes with KV join the
        prefix; those without KV (only ever the last one, a leaf never expanded) are `pending`.
        """
        if not path or path[0] != 0:
            raise ValueError(f"verified path must start at the root (node 0), got {path}")
        for a, b in zip(path, path[1:]):
            if self.parents[b] != a:
                raise ValueError(f"verified path {path} is not a root-down path of the tree")
        slots = self.slots
        with_kv = [i for i in path if slots[i] >= 0]
        if with_kv != path[: len(with_kv)]:
            raise RuntimeError(f"path nodes with KV must be a prefix of the path: {path}")
        pending = tuple(self.tokens[i] for i in path[len(with_kv):])
        landing = next((c for c in self.children(path[-1]) if self.tokens[c] == bonus), None)
        if landing is None:
            self.stats.misses += 1
            new_tree, survivors = DraftTree(bonus, self.stats), []
        else:
            self.stats.hits += 1
            new_tree, survivors = self._subtree(landing)
        return Reroot(
            tree=new_tree,
            hit=landing is not None,
            keep_slots=tuple(slots[i] for i in with_kv) + tuple(survivors),
            num_promoted=len(with_kv),
            pending=pending,
        )

    def _subtree(self, top: int) -> tuple[DraftTree, list[int]]:
        """A new tree holding `top`'s subtree, and the old slots of its expanded nodes in slot order."""
        members = [top]
        for i in members:  # breadth-first; appending while iterating visits every descendant
            members.extend(self.children(i))
        members.sort()  # creation order: parents before children (and each parent's children stay consecutive)
        slots, weights, depths = self.slots, self.weights, self.depths
        old_slots = sorted(slots[i] for i in members if slots[i] >= 0)
        new_slot = {s: k for k, s in enumerate(old_slots)}
        new_id = {old: k for k, old in enumerate(members)}
        tree = DraftTree(self.tokens[top], self.stats)
        w0, d0 = weights[top], depths[top]
        tree.tokens = [self.tokens[i] for i in members]
        tree.parents = [-1] + [new_id[self.parents[i]] for i in members[1:]]
        tree.depths = [depths[i] - d0 for i in members]
        tree.weights = [0.0] + [weights[i] - w0 for i in members[1:]]
        tree.slots = [new_slot[slots[i]] if slots[i] >= 0 else -1 for i in members]
        tree.first_child = [new_id[self.first_child[i]] if self.first_child[i] >= 0 else -1 for i in members]
        tree.num_children = [self.num_children[i] for i in members]
        tree.num_slots = len(old_slots)
        # the lazy frontier: the root if unexpanded, else each expanded node's first unexpanded child (its expanded
        # children are a prefix of its children: siblings are taken best first)
        heads = [] if tree.slots[0] >= 0 else [0]
        for i in range(len(members)):
            if tree.slots[i] >= 0:
                first = next((c for c in tree.children(i) if tree.slots[c] < 0), None)
                if first is not None:
                    heads.append(first)
        tree._frontier = [(-tree.weights[k], k) for k in heads]
        heapq.heapify(tree._frontier)
        return tree, old_slots
