"""greedy_verify: hand-built trees with hand-written answers, then random trees vs the reference."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from kernels import greedy_verify
from kernels.reference import greedy_verify_ref
from tests.kernels.trees import build, root_path
from tests.tolerances import poisoned


@dataclass(frozen=True)
class Case:
    """A tree (parents), its draft tokens, the target argmax per node, and the expected answer."""

    name: str
    parent: list[int]
    tokens: list[int]
    argmax: list[int]
    path: list[int]
    bonus: int


CASES = [
    Case("root_only", [-1], [11], [42], [0], 42),
    Case("chain_all_accepted", [-1, 0, 1, 2], [1, 2, 3, 4], [2, 3, 4, 5], [0, 1, 2, 3], 5),
    Case("chain_first_token_wrong", [-1, 0, 1, 2], [1, 9, 3, 4], [2, 3, 4, 5], [0], 2),
    Case("chain_mismatch_mid_path", [-1, 0, 1, 2], [1, 2, 9, 4], [2, 3, 4, 5], [0, 1], 3),
    # star: only child 3 carries the target's token at the root
    Case("star_one_match", [-1, 0, 0, 0, 0], [0, 5, 6, 7, 8], [7, 1, 1, 1, 1], [0, 3], 1),
    # two branches, the deeper accepted one has the higher index
    Case("deeper_branch_wins", [-1, 0, 0, 2, 3, 1], [0, 4, 4, 6, 8, 3], [4, 9, 6, 8, 2, 0], [0, 2, 3, 4], 2),
    # duplicate children with equal tokens, both extend to depth 2: lowest index at each depth
    Case("duplicate_tie_lowest_index", [-1, 0, 0, 2, 1], [0, 5, 5, 7, 7], [5, 7, 7, 1, 3], [0, 1, 4], 3),
    # the accepted leaf sits under an accepted node that also has a rejected child
    Case("rejected_sibling", [-1, 0, 1, 1, 2], [0, 3, 1, 5, 6], [3, 5, 6, 0, 8], [0, 1, 3], 0),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hand_built(case):
    n = len(case.parent)
    out = (poisoned((n,), torch.int64), poisoned((), torch.int64), poisoned((), torch.int64))
    path, num_acc, bonus = greedy_verify(
        torch.tensor(case.argmax), torch.tensor(case.tokens), torch.tensor(case.parent), n, out=out
    )
    assert path.tolist() == case.path + [-1] * (n - len(case.path))
    assert int(num_acc) == len(case.path) - 1
    assert int(bonus) == case.bonus
    ref = greedy_verify_ref(torch.tensor(case.argmax), torch.tensor(case.tokens), torch.tensor(case.parent), n)
    assert [t.tolist() for t in ref] == [path.tolist(), int(num_acc), int(bonus)]


def _random_instance(kind, n, seed, vocab=4):
    """A tree whose tokens often match the parent's argmax (small vocab), so long paths get accepted."""
    g = torch.Generator().manual_seed(seed)
    parent = build(kind, n, seed)
    argmax = torch.randint(0, vocab, (n,), generator=g)
    tokens = torch.randint(0, vocab, (n,), generator=g)
    match = torch.rand(n, generator=g) < 0.6
    for i in range(1, n):
        if match[i]:
            tokens[i] = argmax[parent[i]]
    return argmax, tokens, torch.tensor(parent)


SIZES = [1, 2, 3, 8, 17, 33, 64]


@pytest.mark.parametrize("seed", range(3), ids=lambda s: f"seed{s}")
@pytest.mark.parametrize("kind", ["chain", "star", "binary", "random"])
@pytest.mark.parametrize("n", SIZES, ids=lambda n: f"n{n}")
def test_random_trees_match_reference(n, kind, seed):
    argmax, tokens, parent = _random_instance(kind, n, seed * 101 + n)
    path, num_acc, bonus = greedy_verify(argmax, tokens, parent, n)
    want_path, want_acc, want_bonus = greedy_verify_ref(argmax, tokens, parent, n)
    assert path.tolist() == want_path.tolist()
    assert int(num_acc) == int(want_acc) and int(bonus) == int(want_bonus)
    # independent property: the path is a root chain whose every token equals the argmax at its parent
    k = int(num_acc)
    nodes = path[: k + 1].tolist()
    assert nodes == root_path(parent.tolist(), nodes[-1])
    assert all(int(tokens[c]) == int(argmax[p]) for p, c in zip(nodes, nodes[1:]))
    assert (path[k + 1 :] == -1).all()


@pytest.mark.parametrize("as_tensor", [False, True], ids=["int", "tensor"])
def test_padding_nodes_are_ignored(as_tensor):
    """Nodes at index >= num_nodes (CUDA-graph padding) never join the path, even if they would match."""
    argmax = torch.tensor([1, 2, 3, 4, 5, 6])
    tokens = torch.tensor([0, 1, 2, 9, 3, 5])
    parent = torch.tensor([-1, 0, 1, 0, 2, 4])  # nodes 4, 5 would extend the chain 0-1-2
    num_nodes = torch.tensor([4]) if as_tensor else 4
    path, num_acc, bonus = greedy_verify(argmax, tokens, parent, num_nodes)
    assert path.tolist() == [0, 1, 2, -1, -1, -1]
    assert int(num_acc) == 2 and int(bonus) == 3
