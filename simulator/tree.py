"""The draft tree of the simulator: best-first growth, top-bs selection and re-rooting, over ranks.

A node is named by its **rank path** relative to the current root: `(0, 2)` is the draft's 3rd-ranked
child of the draft's top child of the root. Token ids in the simulator's messages are these ranks (the
draft's rank of the token under its parent); the root carries token 0.

Policy (the runtime's, DESIGN.md "The async loop"):
- **weight** of a node = sum over its path of `belief[depth][rank]`, the draft's own log-probability proxy
  (`PositionalAcceptance.belief`: log of the positional probability, made non-increasing in rank). Weights
  are relative to the current root (with a per-depth table, a re-rooted subtree is re-weighted at its new
  depths, a proxy the single-row default does not notice), so a state is fully described by the set of
  expanded nodes;
- **expansion**: one draft forward takes the `w` highest-weight unexpanded leaves (an expanded node's
  `topk` children all exist; the root exists) and expands them; children of a leaf expanded in this batch
  are not candidates until the next batch. Ties go to the lexicographically smaller path (parent before
  child, lower rank first), so the expanded children of a node always form a rank prefix 0..k-1;
- **selection**: the `bs` highest-weight existing nodes, root included (ancestor-closed because weights
  never increase along a path or along sibling ranks), in best-first order, so parents precede children;
- **re-rooting**: after a verify the draft walks the accepted ranks; if the last accepted node is expanded
  and the bonus rank is < topk the bonus node exists (**hit**) and its subtree survives, re-expressed
  relative to it; otherwise (**miss**) a new tree starts at the bonus token. A miss behind a last accepted
  node never expanded leaves that token **pending** (no draft KV): the refill's first forward feeds it too.
- capacity: at most `max_nodes` expanded nodes (the runtime's tree region of the KV cache holds the
  expanded nodes' KV); a full tree does not expand.

Speed: states are immutable and interned (`TreeStates`, one instance per simulation, no globals), and every
transition (expand d times, select, re-root) is memoised per state, so a simulated iteration costs a few
dict look-ups once the common states have been seen. Memoisation never changes a result.

Not here: which rank is the true token (acceptance.py), costs (cost_model.py), time (processes.py).
"""

from __future__ import annotations

import math
from heapq import heappop, heappush

Path = tuple[int, ...]
EMPTY = 0
"""State id of a fresh tree: only the (unexpanded) root."""


class TreeStates:
    """Interned draft-tree states (sets of expanded rank paths) with memoised transitions."""

    def __init__(self, belief: list[list[float]], topk: int, w: int, max_nodes: int,
                 max_states: int = 200_000) -> None:
        if topk < 1 or w < 1 or max_nodes < 1:
            raise ValueError(f"TreeStates: topk={topk}, w={w}, max_nodes={max_nodes} must be >= 1")
        self.belief = [list(row) + [row[-1]] * max(0, topk - len(row)) for row in belief]
        self.topk = topk
        self.w = w
        self.max_nodes = max_nodes
        self.max_states = max_states
        self._clear()

    def _clear(self) -> None:
        self._path_ids: dict[Path, int] = {(): 0}
        self._paths: list[Path] = [()]
        self._logw: list[float] = [0.0]
        self._state_ids: dict[tuple[int, ...], int] = {(): EMPTY}
        self._expanded: list[tuple[int, ...]] = [()]  # sorted path ids of expanded nodes, per state
        self._expand_memo: dict[tuple[int, int], tuple[int, int]] = {}
        self._refill_memo: dict[tuple[int, int], tuple[int, int]] = {}
        self._select_memo: dict[tuple[int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._yield_memo: dict[tuple[int, int], float] = {}
        self._reroot_memo: dict[tuple[int, tuple[int, ...]], tuple[int, bool, int]] = {}

    # ---- interning -------------------------------------------------------------------------------
    def _pid(self, path: Path) -> int:
        pid = self._path_ids.get(path)
        if pid is None:
            pid = len(self._paths)
            parent = self._path_ids[path[:-1]]
            row = self.belief[min(len(path) - 1, len(self.belief) - 1)]
            self._logw.append(self._logw[parent] + row[path[-1]])
            self._paths.append(path)
            self._path_ids[path] = pid
        return pid

    def _sid(self, expanded: set[int] | frozenset[int]) -> int:
        key = tuple(sorted(expanded))
        sid = self._state_ids.get(key)
        if sid is None:
            sid = len(self._expanded)
            self._state_ids[key] = sid
            self._expanded.append(key)
        return sid

    def maybe_trim(self) -> None:
        """Drop all memoised states when there are more than `max_states` (call between requests only)."""
        if len(self._expanded) > self.max_states:
            self._clear()

    # ---- queries -----------------------------------------------------------------------------------
    def num_expanded(self, sid: int) -> int:
        """Expanded nodes (nodes whose KV the draft holds) in state `sid`."""
        return len(self._expanded[sid])

    def size(self, sid: int) -> int:
        """Existing nodes: the root plus all `topk` children of every expanded node."""
        return 1 + self.topk * len(self._expanded[sid])

    def paths(self, sid: int) -> list[Path]:
        """Rank paths of the expanded nodes of `sid` (sorted), for tests and debugging."""
        return sorted(self._paths[p] for p in self._expanded[sid])

    def num_states(self) -> int:
        """States interned so far."""
        return len(self._expanded)

    # ---- transitions -------------------------------------------------------------------------------
    def expand(self, sid: int, times: int) -> tuple[int, int]:
        """State after `times` draft forwards from `sid`, and how many forwards ran (a full tree stops)."""
        key = (sid, times)
        hit = self._expand_memo.get(key)
        if hit is not None:
            return hit
        expanded = set(self._expanded[sid])
        done = 0
        for _ in range(times):
            if not self._expand_once(expanded):
                break
            done += 1
        out = (self._sid(expanded), done)
        self._expand_memo[key] = out
        return out

    def _frontier(self, expanded: set[int]) -> list[tuple[float, Path]]:
        """Heap of candidate leaves: per expanded node its lowest-rank unexpanded child, or the root."""
        if 0 not in expanded:
            return [(0.0, ())]
        paths, pid_of = self._paths, self._path_ids
        heap: list[tuple[float, Path]] = []
        for p in expanded:
            path = paths[p]
            k = 0
            while k < self.topk and pid_of.get((*path, k)) in expanded:
                k += 1
            if k < self.topk:
                c = self._pid((*path, k))
                heap.append((-self._logw[c], paths[c]))
        heap.sort()
        return heap

    def _expand_once(self, expanded: set[int]) -> bool:
        """One draft forward over the w best unexpanded leaves, in place; False if nothing to expand."""
        room = self.max_nodes - len(expanded)
        if room <= 0:
            return False
        heap = self._frontier(expanded)
        taken: list[int] = []
        while heap and len(taken) < min(self.w, room):
            _, path = heappop(heap)
            pid = self._pid(path)
            taken.append(pid)
            if path and path[-1] + 1 < self.topk:  # the next sibling exists already: a candidate now
                s = self._pid((*path[:-1], path[-1] + 1))
                if s not in expanded:
                    heappush(heap, (-self._logw[s], self._paths[s]))
        expanded.update(taken)
        return bool(taken)

    def refill(self, sid: int, bs: int) -> tuple[int, int]:
        """Expand until the tree has >= `bs` nodes (or is full): (state, draft forwards run)."""
        key = (sid, bs)
        hit = self._refill_memo.get(key)
        if hit is not None:
            return hit
        done = 0
        out = sid
        while self.size(out) < bs:
            nxt, n = self.expand(out, 1)
            if n == 0:
                break
            out, done = nxt, done + n
        self._refill_memo[key] = (out, done)
        return out, done

    def select(self, sid: int, bs: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Top-`bs` subtree of `sid` as (token_ids, parent_indices), root first, parents before children."""
        key = (sid, bs)
        hit = self._select_memo.get(key)
        if hit is not None:
            return hit
        expanded = set(self._expanded[sid])
        heap: list[tuple[float, Path]] = [(0.0, ())]
        index_of: dict[Path, int] = {}
        tokens: list[int] = []
        parents: list[int] = []
        expected = 0.0  # sum of exp(weight) over the selected nodes, the root's 1 included
        while heap and len(tokens) < bs:
            neg_logw, path = heappop(heap)
            expected += math.exp(-neg_logw)
            index_of[path] = len(tokens)
            tokens.append(path[-1] if path else 0)
            parents.append(index_of[path[:-1]] if path else -1)
            if self._pid(path) in expanded:
                c = self._pid((*path, 0))
                heappush(heap, (-self._logw[c], self._paths[c]))
            if path and path[-1] + 1 < self.topk:
                s = self._pid((*path[:-1], path[-1] + 1))
                heappush(heap, (-self._logw[s], self._paths[s]))
        out = (tuple(tokens), tuple(parents))
        self._select_memo[key] = out
        self._yield_memo[key] = expected
        return out

    def expected_tokens(self, sid: int, bs: int) -> float:
        """Expected tokens of verifying `select(sid, bs)` under the weights: 1 (the bonus) + the summed acceptance
        probabilities exp(weight) of the selected non-root nodes (the runtime's `DraftTree.expected_tokens`)."""
        key = (sid, bs)
        if key not in self._yield_memo:
            self.select(sid, bs)
        return self._yield_memo[key]

    def reroot(self, sid: int, ranks: tuple[int, ...]) -> tuple[int, bool, int]:
        """Re-root `sid` along `ranks` = (accepted ranks..., bonus rank).

        Returns (new state, hit, expanded nodes kept). A miss returns the fresh tree EMPTY.
        """
        key = (sid, ranks)
        out = self._reroot_memo.get(key)
        if out is not None:
            return out
        accepted, bonus = ranks[:-1], ranks[-1]
        expanded = self._expanded[sid]
        last = self._path_ids.get(accepted)
        if last is None or bonus >= self.topk or last not in set(expanded):
            out = (EMPTY, False, 0)
        else:
            root = (*accepted, bonus)
            k = len(root)
            kept = {self._pid(self._paths[p][k:]) for p in expanded if self._paths[p][:k] == root}
            out = (self._sid(kept), True, len(kept))
        self._reroot_memo[key] = out
        return out

    def pending(self, sid: int, ranks: tuple[int, ...]) -> bool:
        """Whether re-rooting `sid` along `ranks` leaves a verified token without draft KV: the last accepted node
        exists and was never expanded (the runtime's `Reroot.pending`). Always a miss; its refill's first forward
        feeds that token in front of the new root (one more row)."""
        accepted, expanded = ranks[:-1], self._expanded[sid]
        if accepted:  # the node exists: its parent is expanded (expanded paths are all interned)
            parent = self._path_ids.get(accepted[:-1])
            if parent not in expanded or accepted[-1] >= self.topk:
                return False
        return self._path_ids.get(accepted) not in expanded
