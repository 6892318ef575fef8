"""Draft tree: hand-derivable growth, selection, masks and re-rooting, plus property tests."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.tree import DraftTree, StepInputs, ancestor_mask, proposal_inputs

PREFIX = 5


def _logprobs(*rows: list[float]) -> torch.Tensor:
    return torch.tensor(rows).log()


def _seven_node_tree() -> DraftTree:
    """Root r=9 over vocab 4, w=2, topk=2, two expansions. Node (token, path probability):

        0:r(1) -> 1:tok0(.6) -> 3:tok2(.42), 4:tok1(.09)
               -> 2:tok1(.3) -> 5:tok0(.15), 6:tok3(.12)
    Slots: root 0, node 1 slot 1, node 2 slot 2.
    """
    tree = DraftTree(9)
    nodes, _ = tree.plan_expansion(2, PREFIX, 6)
    tree.grow(nodes, _logprobs([0.6, 0.3, 0.05, 0.05], [0.25] * 4), topk=2)
    nodes, _ = tree.plan_expansion(2, PREFIX, 6)
    tree.grow(nodes, _logprobs([0.05, 0.15, 0.7, 0.1], [0.5, 0.05, 0.05, 0.4]), topk=2)
    return tree


def test_first_expansion_is_the_root_with_one_padding_row():
    tree = DraftTree(9)
    nodes, inp = tree.plan_expansion(2, PREFIX, 4)
    assert nodes == [0] and inp.num_real == 1
    assert inp.token_ids.tolist() == [9, 0]
    assert inp.positions.tolist() == [5, 5]
    assert inp.tree_slots.tolist() == [0, 1]  # padding writes the next free slot
    assert inp.tree_mask.int().tolist() == [[1, 0, 0, 0], [0, 1, 0, 0]]


def test_growth_weights_and_structure():
    tree = _seven_node_tree()
    assert [n.token for n in tree.nodes] == [9, 0, 1, 2, 1, 0, 3]
    assert [n.parent for n in tree.nodes] == [-1, 0, 0, 1, 1, 2, 2]
    assert [n.depth for n in tree.nodes] == [0, 1, 1, 2, 2, 2, 2]
    expected = [1.0, 0.6, 0.3, 0.42, 0.09, 0.15, 0.12]
    assert [math.exp(n.weight) for n in tree.nodes] == pytest.approx(expected, rel=1e-5)
    assert [n.slot for n in tree.nodes] == [0, 1, 2, -1, -1, -1, -1]
    assert tree.stats.expansions == 2 and tree.stats.expanded_nodes == 3


def test_selection_is_top_bs_best_first():
    tree = _seven_node_tree()
    assert tree.select(4) == [0, 1, 3, 2]
    assert tree.select(5) == [0, 1, 3, 2, 5]
    assert tree.select(100) == [0, 1, 3, 2, 5, 6, 4]
    assert tree.frontier(2) == [3, 5]


def test_proposal_tensors_literal():
    tree = _seven_node_tree()
    tokens, parents = tree.proposal(tree.select(4))
    assert tokens == [9, 0, 2, 1] and parents == [-1, 0, 1, 0]
    inp = proposal_inputs(tokens, parents, PREFIX, rows=5)
    assert inp.token_ids.tolist() == [9, 0, 2, 1, 0]
    assert inp.positions.tolist() == [5, 6, 7, 6, 5]
    assert inp.parents.tolist() == [-1, 0, 1, 0, -1]
    assert inp.tree_mask.int().tolist() == [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 1, 1, 0, 0],
        [1, 0, 0, 1, 0],
        [0, 0, 0, 0, 1],  # padding sees itself only
    ]


def test_second_level_expansion_mask_is_non_square():
    tree = _seven_node_tree()
    nodes, inp = tree.plan_expansion(2, PREFIX, 6)
    assert nodes == [3, 5]
    assert inp.tree_slots.tolist() == [3, 4]
    assert inp.positions.tolist() == [7, 7]
    assert inp.tree_mask.int().tolist() == [[1, 1, 0, 1, 0, 0], [1, 0, 1, 0, 1, 0]]


def _grown_once_more() -> DraftTree:
    tree = _seven_node_tree()
    nodes, _ = tree.plan_expansion(2, PREFIX, 6)  # nodes 3 (slot 3) and 5 (slot 4)
    tree.grow(nodes, _logprobs([0.9, 0.05, 0.03, 0.02], [0.15, 0.5, 0.1, 0.25]), topk=2)
    return tree  # + 7:tok0 and 8:tok1 under 3; 9:tok1 and 10:tok3 under 5


def test_reroot_hit_keeps_subtree_and_compacts_slots():
    tree = _grown_once_more()
    rr = tree.reroot([0, 2], bonus=0)  # node 5 (token 0 under node 2) is the landing node
    assert rr.hit and tree.stats.hits == 1
    assert rr.keep_slots == (0, 2, 4) and rr.num_promoted == 2 and rr.pending == ()
    new = rr.tree
    assert [n.token for n in new.nodes] == [0, 1, 3]
    assert [n.parent for n in new.nodes] == [-1, 0, 0]
    assert [n.depth for n in new.nodes] == [0, 1, 1]
    assert [n.slot for n in new.nodes] == [0, -1, -1] and new.num_slots == 1
    assert [math.exp(n.weight) for n in new.nodes] == pytest.approx([1.0, 0.5, 0.25], rel=1e-5)
    assert new.frontier(5) == [1, 2]
    assert new.stats is tree.stats


def test_reroot_hit_on_unexpanded_leaf():
    tree = _grown_once_more()
    rr = tree.reroot([0, 1, 3], bonus=0)  # node 7
    assert rr.hit and rr.keep_slots == (0, 1, 3) and rr.num_promoted == 3
    assert len(rr.tree) == 1 and rr.tree.num_slots == 0


def test_reroot_miss_with_pending_leaf():
    tree = _grown_once_more()
    rr = tree.reroot([0, 1, 4], bonus=3)  # node 4 was never expanded: its token is pending
    assert not rr.hit and tree.stats.misses == 1
    assert rr.keep_slots == (0, 1) and rr.num_promoted == 2 and rr.pending == (1,)
    assert rr.tree.root_token == 3 and len(rr.tree) == 1


def test_reroot_rejects_a_path_that_is_not_in_the_tree():
    with pytest.raises(ValueError, match="root-down path"):
        _grown_once_more().reroot([0, 3], bonus=1)


def test_ancestor_mask_literal():
    assert ancestor_mask([-1, 0, 0, 1], 4).int().tolist() == [
        [1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]


def test_ancestor_mask_padding_rows_empty_and_too_many_nodes():
    m = ancestor_mask([-1, 0], 4)  # rows beyond the nodes see only themselves
    assert m.dtype == torch.bool and m.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    assert ancestor_mask([], 0).shape == (0, 0)
    with pytest.raises(ValueError, match="3 nodes do not fit 2 rows"):
        ancestor_mask([-1, 0, 1], 2)


# ---- properties -------------------------------------------------------------------------------------------

def _random_tree(seed: int, steps: int, w: int, topk: int, vocab: int = 6, max_len: int = 64) -> DraftTree:
    gen = torch.Generator().manual_seed(seed)
    tree = DraftTree(0)
    for _ in range(steps):
        if not tree.can_expand(w, max_len):
            break
        nodes, _ = tree.plan_expansion(w, PREFIX, max_len)
        logits = torch.randn(w, vocab, generator=gen) * 2
        tree.grow(nodes, torch.log_softmax(logits, -1), topk)
    return tree


def _ancestors_or_self(tree: DraftTree, i: int) -> set[int]:
    return set(tree.path_to(i))


tree_params = dict(seed=st.integers(0, 10_000), steps=st.integers(0, 6), w=st.integers(1, 4),
                   topk=st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(**tree_params, bs=st.integers(1, 20))
def test_selection_is_ancestor_closed_top_bs(seed, steps, w, topk, bs):
    tree = _random_tree(seed, steps, w, topk)
    sel = tree.select(bs)
    assert len(sel) == min(bs, len(tree)) and len(set(sel)) == len(sel) and sel[0] == 0
    pos = {n: k for k, n in enumerate(sel)}
    for n in sel[1:]:
        assert tree.nodes[n].parent in pos and pos[tree.nodes[n].parent] < pos[n]
    rest = [tree.nodes[i].weight for i in range(len(tree)) if i not in pos]
    if rest:
        assert min(tree.nodes[i].weight for i in sel) >= max(rest)


@settings(max_examples=60, deadline=None)
@given(**tree_params, bs=st.integers(1, 12))
def test_every_row_attends_exactly_to_its_ancestors_and_itself(seed, steps, w, topk, bs):
    tree = _random_tree(seed, steps, w, topk)
    sel = tree.select(bs)
    tokens, parents = tree.proposal(sel)
    inp = proposal_inputs(tokens, parents, PREFIX, rows=bs)
    for k, node in enumerate(sel):
        expected = {sel.index(a) for a in _ancestors_or_self(tree, node)}
        assert set(torch.nonzero(inp.tree_mask[k]).flatten().tolist()) == expected
        assert inp.positions[k] == PREFIX + tree.nodes[node].depth
    if tree.can_expand(w, 64):
        nodes, step = tree.plan_expansion(w, PREFIX, 64)
        for r, node in enumerate(nodes):
            slots = {tree.nodes[a].slot for a in _ancestors_or_self(tree, node)}
            assert set(torch.nonzero(step.tree_mask[r]).flatten().tolist()) == slots
            assert step.positions[r] == PREFIX + tree.nodes[node].depth


def _token_paths(tree: DraftTree, top: int) -> dict[tuple[int, ...], int]:
    """Token path below `top` (exclusive) -> node id, for every node in top's subtree."""
    out = {}
    for i in range(len(tree)):
        path = tree.path_to(i)
        if top in path:
            out[tuple(tree.nodes[j].token for j in path[path.index(top) + 1:])] = i
    return out


@settings(max_examples=60, deadline=None)
@given(**tree_params, pick=st.integers(0, 10_000), bonus=st.integers(0, 5))
def test_reroot_keeps_exactly_the_landing_subtree(seed, steps, w, topk, pick, bonus):
    tree = _random_tree(seed, steps, w, topk)
    last = pick % len(tree)
    path = tree.path_to(last)
    old_paths = None
    landing = next((c for c in tree.nodes[last].children if tree.nodes[c].token == bonus), None)
    if landing is not None:
        old_paths = _token_paths(tree, landing)
    rr = tree.reroot(path, bonus)
    assert rr.hit == (landing is not None)
    new_paths = _token_paths(rr.tree, 0)
    if landing is None:
        assert list(new_paths) == [()] and rr.tree.root_token == bonus
        return
    assert set(new_paths) == set(old_paths)
    for tp, new_id in new_paths.items():
        old, new = tree.nodes[old_paths[tp]], rr.tree.nodes[new_id]
        assert new.depth == old.depth - tree.nodes[landing].depth
        assert new.expanded == old.expanded
        if new.expanded:  # new slot k holds what old slot keep_slots[num_promoted + k] held
            assert rr.keep_slots[rr.num_promoted + new.slot] == old.slot
    assert sorted(n.slot for n in rr.tree.nodes if n.expanded) == list(range(rr.tree.num_slots))
    promoted = [tree.nodes[i].slot for i in path if tree.nodes[i].expanded]
    assert list(rr.keep_slots[: rr.num_promoted]) == promoted


# ---- grow vs grow_topk --------------------------------------------------------------------------------------

def _snapshot(tree: DraftTree) -> tuple:
    return ([(n.token, n.parent, n.depth, n.logprob, n.weight, n.slot, tuple(n.children)) for n in tree.nodes],
            tree.frontier(len(tree)), tree.num_slots)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 6), w=st.integers(1, 4), topk=st.integers(1, 5),
       ties=st.booleans(), int32=st.booleans(), host=st.booleans())
def test_grow_topk_builds_the_same_tree_as_grow(seed, steps, w, topk, ties, int32, host):
    """Tensors or (`host`: a readback graph's pinned copies) numpy arrays of the top-k grow the same tree as `grow`."""
    gen = torch.Generator().manual_seed(seed)
    vocab, max_len = 7, 64
    a, b = DraftTree(0), DraftTree(0)
    for _ in range(steps):
        if not a.can_expand(w, max_len):
            break
        nodes_a, _ = a.plan_expansion(w, PREFIX, max_len)
        nodes_b, _ = b.plan_expansion(w, PREFIX, max_len)
        assert nodes_a == nodes_b
        logits = torch.randn(w, vocab, generator=gen) * 2  # w rows: padding rows after the real ones
        if ties:
            logits = logits.round()
        logprobs = torch.log_softmax(logits, -1)
        a.grow(nodes_a, logprobs, topk)
        top_lp, top_tok = torch.topk(logprobs, min(topk, vocab), dim=-1)  # all rows, padding included
        top_tok = top_tok.int() if int32 else top_tok
        b.grow_topk(nodes_b, *((top_lp.numpy(), top_tok.numpy()) if host else (top_lp, top_tok)))
        assert _snapshot(a) == _snapshot(b)
    assert all(type(n.token) is int for n in b.nodes)


def test_grow_topk_clamps_positive_logprobs_and_reads_only_real_rows():
    tree = DraftTree(9)
    nodes, _ = tree.plan_expansion(2, PREFIX, 4)  # the root and one padding row
    top_lp = torch.tensor([[1e-7, -1.0], [5.0, 4.0]])  # padding row: garbage, ignored
    top_tok = torch.tensor([[3, 1], [99, 98]], dtype=torch.int32)
    tree.grow_topk(nodes, top_lp, top_tok)
    assert [(n.token, n.parent, n.logprob) for n in tree.nodes[1:]] == [(3, 0, 0.0), (1, 0, -1.0)]
    assert tree.nodes[0].children == [1, 2]


def _brute_select(tree: DraftTree, bs: int) -> list[int]:
    """The old eager walk: every child of a taken node goes on the heap (ties: lower id)."""
    import heapq

    heap, taken = [(-0.0, 0)], []
    while heap and len(taken) < bs:
        _, i = heapq.heappop(heap)
        taken.append(i)
        for c in tree.nodes[i].children:
            heapq.heappush(heap, (-tree.nodes[c].weight, c))
    return taken


@settings(max_examples=60, deadline=None)
@given(**tree_params, bs=st.integers(1, 20))
def test_lazy_selection_takes_the_eager_walks_order(seed, steps, w, topk, bs):
    """select pushes a taken node's first child and next sibling only; the order equals the walk that pushes
    every child (ties included: rounded logits below give equal log-probs)."""
    tree = _random_tree(seed, steps, w, topk)
    assert tree.select(bs) == _brute_select(tree, bs)


def test_children_are_a_range_of_consecutive_ids_and_nodes_are_snapshots():
    tree = _seven_node_tree()
    assert tree.children(0) == range(1, 3) and tree.children(2) == range(5, 7) and not tree.children(3)
    assert [list(tree.children(i)) for i in range(len(tree))] == [list(n.children) for n in tree.nodes]
    assert tree.nodes[-1] == tree.node(6) and len(tree.nodes[2:5]) == 3
    with pytest.raises(IndexError):
        tree.nodes[7]
    with pytest.raises(AttributeError):  # a snapshot: writing it cannot change the tree
        tree.nodes[3].slot = 5  # type: ignore[misc]


def test_grow_topk_refuses_a_second_growth_of_one_node_and_a_short_belief():
    tree = DraftTree(9)
    nodes, _ = tree.plan_expansion(1, PREFIX, 8)
    lp, tok = torch.tensor([[-0.1, -2.0]]), torch.tensor([[4, 5]])
    with pytest.raises(ValueError, match="belief rows cover 1 ranks, fewer than top-k 2"):
        tree.grow_topk(nodes, lp, tok, belief=[[-0.5]])
    tree.grow_topk(nodes, lp, tok)
    with pytest.raises(RuntimeError, match="node 0 already has children"):
        tree.grow_topk(nodes, lp, tok)
    assert len(tree) == 3  # the refused calls added nothing


def test_grow_topk_rejects_too_few_rows():
    tree = DraftTree(9)
    nodes, _ = tree.plan_expansion(2, PREFIX, 4)
    with pytest.raises(ValueError):
        tree.grow_topk(nodes, torch.zeros(0, 2), torch.zeros(0, 2, dtype=torch.long))


def test_with_pending_prepends_causal_rows_and_shifts_the_tree():
    """Two pending tokens in front of a 2-row expansion over 3 tree slots: the pending rows are causal among
    themselves, every tree row sees both of them and then its own mask, slots shift by 2."""
    from runtime.draft_worker import with_pending

    inp = StepInputs(ids=[7, 8], pos=[12, 13], slots=[0, 1], mask_flat=bytes([1, 0, 0, 1, 1, 0]), max_len=3,
                     parent_rows=[-1, -1], num_real=2)
    step = with_pending(inp, (5, 6), prefix_len=10)
    assert step.ids == [5, 6, 7, 8] and step.pos == [10, 11, 12, 13] and step.slots == [0, 1, 2, 3]
    assert step.parent_rows == [-1, -1, -1, -1] and step.num_real == 2 and step.max_len == 5
    assert step.tree_mask.int().tolist() == [[1, 0, 0, 0, 0],
                                             [1, 1, 0, 0, 0],
                                             [1, 1, 1, 0, 0],
                                             [1, 1, 1, 1, 0]]
    assert step.token_ids.dtype == torch.long and step.token_ids.tolist() == [5, 6, 7, 8]


def test_step_inputs_refuse_mismatched_lengths():
    with pytest.raises(ValueError, match=r"StepInputs: 2 ids, 1 positions, 2 slots, 2 parents and 4 mask bytes do "
                                         r"not make 2 rows x 2 columns"):
        StepInputs(ids=[1, 2], pos=[0], slots=[0, 1], mask_flat=bytes(4), max_len=2, parent_rows=[-1, 0],
                   num_real=2)


def test_expected_tokens_match_the_simulators_tree():
    """DraftTree.expected_tokens of a selection = 1 + the selected nodes' path probabilities, the number the
    simulator's tree gives for the same weights (simulator/tree.py TreeStates.expected_tokens)."""
    import math as _m

    from simulator.tree import EMPTY, TreeStates

    p = [0.6, 0.3, 0.1]
    tree = DraftTree(5)
    lp = torch.tensor([[_m.log(x) for x in p]])
    tree.grow_topk(tree.plan_expansion(1, PREFIX, 8)[0], lp, torch.tensor([[7, 8, 9]]))
    nodes, _ = tree.plan_expansion(2, PREFIX, 8)  # the two best children
    tree.grow_topk(nodes, lp.expand(2, 3), torch.tensor([[1, 2, 3], [4, 5, 6]]))
    ts = TreeStates([[_m.log(x) for x in p]], topk=3, w=2, max_nodes=64)
    sid, _ = ts.expand(EMPTY, 2)
    for bs in (1, 4, 6):
        assert tree.expected_tokens(tree.select(bs)) == pytest.approx(ts.expected_tokens(sid, bs))


def _eager_frontier(tree: DraftTree) -> list[int]:
    """Every unexpanded node, best first (ties: lower id): what the lazy frontier must give."""
    return [i for _, i in sorted((-n.weight, i) for i, n in enumerate(tree.nodes) if not n.expanded)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), steps=st.integers(1, 8), w=st.integers(1, 5), topk=st.integers(1, 5),
       ties=st.booleans(), reroot_at=st.integers(0, 7))
def test_lazy_frontier_takes_nodes_as_a_heap_of_every_unexpanded_node(seed, steps, w, topk, ties, reroot_at):
    """The frontier keeps only each parent's first unexpanded child; the nodes it gives and plan_expansion takes
    equal those of a full best-first order of every unexpanded node, through growth (with tied log-probs) and a
    re-root onto a surviving subtree."""
    gen = torch.Generator().manual_seed(seed)
    tree, max_len = DraftTree(0), 128
    for step in range(steps):
        if step == reroot_at and len(tree) > 1:
            child = tree.nodes[0].children[0] if tree.nodes[0].expanded else None
            if child is not None and tree.nodes[child].children:
                bonus = tree.nodes[tree.nodes[child].children[0]].token
                tree = tree.reroot([0, child], bonus).tree
        assert tree.frontier(len(tree)) == _eager_frontier(tree)
        if not tree.can_expand(w, max_len):
            break
        want = _eager_frontier(tree)[:w]
        nodes, _ = tree.plan_expansion(w, PREFIX, max_len)
        assert nodes == want
        logits = torch.randn(w, 6, generator=gen) * 2
        tree.grow(nodes, torch.log_softmax(logits.round() if ties else logits, -1), topk)
    assert tree.frontier(len(tree)) == _eager_frontier(tree)


def test_the_select_memo_goes_stale_on_expansion():
    tree = _random_tree(7, 3, 3, 3)
    sel = tree.select(4)
    assert tree._selected is not None and tree.select(4) == sel
    tree.plan_expansion(2, PREFIX, 64)
    assert tree._selected is None  # the tree changed: the memo does not hold
