"""Small tree builders for kernel tests: parent lists (parents precede children, root = node 0)."""

from __future__ import annotations

import torch


def chain(n: int) -> list[int]:
    return [-1] + list(range(n - 1))


def star(n: int) -> list[int]:
    return [-1] + [0] * (n - 1)


def binary(n: int) -> list[int]:
    return [-1] + [(i - 1) // 2 for i in range(1, n)]


def random_tree(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, n)]


def root_path(parent: list[int], node: int) -> list[int]:
    """Node indices from the root down to ``node``."""
    path = [node]
    while parent[path[-1]] >= 0:
        path.append(parent[path[-1]])
    return path[::-1]


def ancestor_mask(parent: list[int]) -> torch.Tensor:
    """[n, n] bool, mask[i, j] = node j is node i or one of its ancestors (the verify tree mask)."""
    n = len(parent)
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, root_path(parent, i)] = True
    return mask


SHAPES = {
    "single": lambda n: chain(1),
    "chain": chain,
    "star": star,
    "binary": binary,
}


def build(kind: str, n: int, seed: int = 0) -> list[int]:
    """Parent list of a tree of ``kind`` (single, chain, star, binary, random) with n nodes."""
    if kind == "random":
        return random_tree(n, seed)
    return SHAPES[kind](n)
