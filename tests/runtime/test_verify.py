"""Greedy tree verification on hand-built logits (+-100 pattern), and against a naive walk."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.verify import greedy_verify, verify_proposal

VOCAB = 6
# Tree used throughout: root r=5, node1 tok0 (under r), node2 tok2 (under 1), node3 tok1 (under r).
TOKENS = [5, 0, 2, 1]
PARENTS = [-1, 0, 1, 0]


def _logits(argmax_per_node: list[int]) -> torch.Tensor:
    """[N, VOCAB]: -100 everywhere, +100 at each row's chosen token."""
    out = torch.full((len(argmax_per_node), VOCAB), -100.0)
    out[torch.arange(len(argmax_per_node)), torch.tensor(argmax_per_node)] = 100.0
    return out


def _greedy(argmax: list[int], tokens=TOKENS, parents=PARENTS, num_nodes=None):
    path, n_acc, bonus = greedy_verify(torch.tensor(argmax), torch.tensor(tokens), torch.tensor(parents),
                                       len(tokens) if num_nodes is None else num_nodes)
    return path.tolist(), int(n_acc), int(bonus)


@pytest.mark.parametrize(
    "argmax, expected",
    [
        ([0, 2, 4, 3], ([0, 1, 2, -1], 2, 4)),  # full accept along r-0-2, bonus 4
        ([3, 2, 4, 3], ([0, -1, -1, -1], 0, 3)),  # first token rejected: bonus = target's token
        ([0, 1, 4, 3], ([0, 1, -1, -1], 1, 1)),  # mid-path reject: tok2 != 1 under node1
        ([1, 2, 4, 2], ([0, 3, -1, -1], 1, 2)),  # accepted through the second child
    ],
    ids=["full-accept", "reject-first", "reject-mid", "sibling"],
)
def test_greedy_hand_built(argmax, expected):
    assert _greedy(argmax) == expected
    verdict = verify_proposal(_logits(argmax), torch.tensor(TOKENS), torch.tensor(PARENTS), 4, 0.0, None)
    path, n_acc, bonus = expected
    assert verdict.path == tuple(path[: n_acc + 1]) and verdict.bonus == bonus and verdict.num_accepted == n_acc


def test_padding_rows_are_never_accepted():
    # Node 3 (tok1 under root) would match argmax 1 at the root, but only 3 nodes are real.
    assert _greedy([1, 2, 4, 3], num_nodes=3) == ([0, -1, -1, -1], 0, 1)


def test_empty_draft_gives_the_bonus_only():
    assert _greedy([4], tokens=[5], parents=[-1]) == ([0], 0, 4)


def test_several_requests_with_different_tree_sizes():
    chain = ([7, 1, 2, 3, 4], [-1, 0, 1, 2, 3])
    assert _greedy([1, 2, 3, 4, 0], *chain) == ([0, 1, 2, 3, 4], 4, 0)  # whole chain + bonus
    assert _greedy([1, 2, 0, 4, 0], *chain) == ([0, 1, 2, -1, -1], 2, 0)
    wide = ([7, 0, 1, 2], [-1, 0, 0, 0])
    assert _greedy([2, 5, 5, 3], *wide) == ([0, 3, -1, -1], 1, 3)


def _naive(argmax, tokens, parents, n):
    path = [0]
    while True:
        kids = [i for i in range(1, n) if parents[i] == path[-1] and tokens[i] == argmax[path[-1]]]
        if not kids:
            return path, argmax[path[-1]]
        path.append(kids[0])


@st.composite
def _trees(draw):
    n = draw(st.integers(1, 12))
    parents, tokens = [-1], [draw(st.integers(0, VOCAB - 1))]
    for i in range(1, n):
        p = draw(st.integers(0, i - 1))
        used = {tokens[j] for j in range(i) if parents[j] == p}
        free = [t for t in range(VOCAB) if t not in used]
        if not free:
            break
        parents.append(p)
        tokens.append(draw(st.sampled_from(free)))
    argmax = draw(st.lists(st.integers(0, VOCAB - 1), min_size=len(tokens), max_size=len(tokens)))
    pad = draw(st.integers(0, 3))
    return tokens, parents, argmax, pad


@settings(max_examples=150, deadline=None)
@given(_trees())
def test_greedy_matches_naive_walk(case):
    tokens, parents, argmax, pad = case
    n = len(tokens)
    tok_p = tokens + [argmax[0]] * pad  # padding that would match the root's argmax
    par_p = parents + [-1] * pad
    path, n_acc, bonus = _greedy(argmax + [0] * pad, tok_p, par_p, num_nodes=n)
    want_path, want_bonus = _naive(argmax, tokens, parents, n)
    assert path == want_path + [-1] * (n + pad - len(want_path))
    assert n_acc == len(want_path) - 1 and bonus == want_bonus


@st.composite
def _trees_with_duplicates(draw):
    n = draw(st.integers(1, 16))
    parents = [-1] + [draw(st.integers(0, i - 1)) for i in range(1, n)]
    tokens = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))  # 3 tokens: many duplicate siblings
    argmax = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    return tokens, parents, argmax, draw(st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(_trees_with_duplicates())
def test_greedy_matches_the_kernel_reference_twin_incl_ties(case):
    """Same semantics as kernels.reference.greedy_verify_ref, duplicate siblings included."""
    ref = pytest.importorskip("kernels.reference")
    tokens, parents, argmax, pad = case
    args = (torch.tensor(argmax + [0] * pad), torch.tensor(tokens + [0] * pad),
            torch.tensor(parents + [-1] * pad), len(tokens))
    ours = greedy_verify(*args)
    theirs = ref.greedy_verify_ref(*args)
    assert [t.tolist() for t in ours] == [t.tolist() for t in theirs]


def test_triton_backend_matches_reference():
    """The engine's backend switch reaches kernels.greedy_verify (Triton interpreter on CPU)."""
    pytest.importorskip("kernels")
    tokens, parents = torch.tensor(TOKENS), torch.tensor(PARENTS)
    for argmax in ([0, 2, 4, 3], [3, 2, 4, 3], [1, 2, 4, 2]):
        a = verify_proposal(_logits(argmax), tokens, parents, 4, 0.0, None, backend="reference")
        b = verify_proposal(_logits(argmax), tokens, parents, 4, 0.0, None, backend="triton")
        assert a == b
