"""Draft tree of ranks: small cases derived by hand, plus properties of selection and re-rooting.

Belief used by the hand cases: one row p = [0.6, 0.3, 0.1] (topk 3), weights = sum of log p along a path:
() 0; (0) ln .6; (1) ln .3; (2) ln .1; (0,0) ln .36; (0,1) = (1,0) = ln .18; (1,1) ln .09 ...
"""

from __future__ import annotations

import math

import pytest

from simulator.tree import EMPTY, TreeStates

P = [0.6, 0.3, 0.1]


def _states(w: int = 2, max_nodes: int = 64, topk: int = 3) -> TreeStates:
    return TreeStates([[math.log(p) for p in P]], topk=topk, w=w, max_nodes=max_nodes)


def test_first_forward_expands_only_the_root():
    ts = _states()
    sid, n = ts.expand(EMPTY, 1)
    assert n == 1
    assert ts.paths(sid) == [()]
    assert ts.size(sid) == 4  # root + its 3 children


def test_batch_takes_the_w_best_existing_leaves_and_defers_their_children():
    ts = _states(w=2)
    sid, n = ts.expand(EMPTY, 2)
    assert n == 2
    # second forward: leaves (0) ln .6, (1) ln .3, (2) ln .1 -> the two best
    assert ts.paths(sid) == [(), (0,), (1,)]
    # third forward: leaves (0,0) ln .36, (0,1) ln .18, (1,0) ln .18, (2) ln .1: the tie (0,1) = (1,0)
    # goes to the lexicographically smaller path
    sid, _ = ts.expand(sid, 1)
    assert ts.paths(sid) == [(), (0,), (0, 0), (0, 1), (1,)]


def test_selection_is_the_top_bs_subtree_in_best_first_order():
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 2)  # expanded (), (0), (1)
    tokens, parents = ts.select(sid, 4)
    # existing: () 0, (0) ln .6, (0,0) ln .36, (1) ln .3, (0,1) = (1,0) ln .18, ...
    assert tokens == (0, 0, 0, 1)
    assert parents == (-1, 0, 1, 0)


def test_expected_tokens_sum_the_selected_paths_acceptance_probabilities():
    """1 for the bonus (the root) + each selected node's path probability, as the runtime's
    DraftTree.expected_tokens: () 1, (0) .6, (0,0) .36, (1) .3 for the top 4."""
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 2)
    assert ts.expected_tokens(sid, 4) == pytest.approx(1 + 0.6 + 0.36 + 0.3)
    assert ts.expected_tokens(EMPTY, 8) == pytest.approx(1.0)  # a fresh tree proposes the root alone


def test_selection_never_includes_children_of_unexpanded_nodes():
    ts = _states(w=1)
    sid, _ = ts.expand(EMPTY, 1)  # only the root expanded: a star
    tokens, parents = ts.select(sid, 8)
    assert tokens == (0, 0, 1, 2)  # root + 3 children: the whole tree is smaller than bs
    assert parents == (-1, 0, 0, 0)


@pytest.mark.parametrize("w,times,bs", [(1, 3, 4), (2, 4, 6), (4, 3, 9), (8, 2, 16)], ids=str)
def test_selection_is_ancestor_closed_and_parents_come_first(w, times, bs):
    ts = _states(w=w)
    sid, _ = ts.expand(EMPTY, times)
    tokens, parents = ts.select(sid, bs)
    assert parents[0] == -1
    assert all(0 <= p < i for i, p in enumerate(parents) if i > 0)
    assert len(tokens) == min(bs, ts.size(sid))


def test_reroot_hit_keeps_the_subtree_relative_to_the_bonus_node():
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 3)  # (), (0), (0,0), (0,1), (1)
    new, hit, kept = ts.reroot(sid, (0,))  # nothing accepted, bonus = the root's top child
    assert hit
    assert ts.paths(new) == [(), (0,), (1,)]
    assert kept == 3
    new, hit, kept = ts.reroot(sid, (0, 1))  # (0) accepted, bonus (0,1): expanded, no expanded children
    assert hit and ts.paths(new) == [()] and kept == 1


def test_reroot_on_an_existing_unexpanded_node_is_a_hit_with_nothing_kept():
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 2)  # (), (0), (1)
    new, hit, kept = ts.reroot(sid, (1, 2))  # (1) expanded, so (1,2) exists, unexpanded
    assert hit and new == EMPTY and kept == 0


@pytest.mark.parametrize("ranks", [(3,), (2, 0), (0, 0, 0)], ids=["beyond-topk", "parent-unexpanded",
                                                                    "deep-unexpanded"])
def test_reroot_miss_starts_a_fresh_tree(ranks):
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 2)  # (), (0), (1)
    assert ts.reroot(sid, ranks) == (EMPTY, False, 0)


@pytest.mark.parametrize("ranks,pending", [((1, 2), False), ((3,), False), ((2, 0), True), ((0, 0, 0), True)],
                         ids=["hit", "beyond-topk-at-an-expanded-node", "parent-unexpanded", "deep-unexpanded"])
def test_a_miss_behind_a_never_expanded_node_leaves_its_token_pending(ranks, pending):
    """The runtime's `Reroot.pending`: the last accepted node has no draft KV when it was never expanded."""
    ts = _states(w=2)
    sid, _ = ts.expand(EMPTY, 2)  # (), (0), (1)
    assert ts.pending(sid, ranks) is pending
    if pending:
        assert ts.reroot(sid, ranks)[1] is False  # always a miss


def test_capacity_stops_expansion():
    ts = _states(w=4, max_nodes=5)
    sid, n = ts.expand(EMPTY, 10)
    assert ts.num_expanded(sid) == 5
    # root; then its 3 children (only 3 leaves exist); then 1 leaf (room for one); the 4th finds it full
    assert n == 3


def test_refill_reaches_bs_nodes():
    ts = _states(w=2)
    sid, n = ts.refill(EMPTY, 6)
    assert ts.size(sid) >= 6 and n == 2


def test_memoisation_returns_identical_results_and_instances_are_independent():
    a, b = _states(w=2), _states(w=2)
    sa, _ = a.expand(EMPTY, 3)
    sb, _ = b.expand(EMPTY, 3)
    assert a.paths(sa) == b.paths(sb)
    assert a.expand(EMPTY, 3) == a.expand(EMPTY, 3)
    assert a.select(sa, 5) == b.select(sb, 5)
