"""The acceptance family: positional tables from three interpretable parameters, weak draft to strong.

A positional table (policy/acceptance.py) gives `p[d][r]`, the probability that the target's next token is
the draft's rank-r child of a correct node at depth d. The family writes it through the **miss survival**
S_d(r): the probability that the target's token is not among the draft's top r children,

    S_d(r) = ((1 - top1) * r^(-decay)) ^ (1 + depth_gain * d)        for r >= 1,  S_d(0) = 1,
    p[d][r] = S_d(r) - S_d(r + 1),                                       r = 0 .. RANKS - 1,

and S_d(RANKS) is the mass beyond every drafted rank (a token the draft does not rank: a miss whatever the tree).

- `top1` in [0, 1]: the top-ranked child's acceptance at depth 0 (`p[0][0] = top1`);
- `decay` in [0, 10]: how fast the mass the top-1 misses falls off with rank. Of the miss mass 1 - top1 at
  depth 0, a fraction 1 - 2^-decay is the draft's second child, and the top r children leave (1 - top1) r^-decay.
  0: a miss is never any drafted child; large: nearly every miss is the second child;
- `depth_gain` in [0, 1]: deeper nodes are easier (a correct path makes the next token more predictable): the
  log of the survival grows by that factor per depth. 0: every depth alike.

So `top1` moves a draft from weak to strong along the depth-0 acceptance and `decay` sets how much a wider tree
recovers of what the chain misses. The measured SmolLM2 tables are fitted members (`fit_family`: weighted least
squares on log S over depths and ranks); docs/ACCEPTANCE.md gives the fits and the presets.

Also here, torch-free, for checks: the exact expected tokens of verifying a given proposal under a table
(`proposal_expected_tokens`) and of a chain (`chain_expected_tokens`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from conf.schema import FAMILY_RANGES

RANKS = 32
"""Ranks per depth row of a family table (the mass past them is beyond every drafted rank)."""
DEPTHS = 32
"""Depth rows of a family table; deeper verifies reuse the last row (as any positional table)."""
RANGES = FAMILY_RANGES
"""The family's parameters and their closed valid ranges (the config schema checks the same)."""


def check_family(top1: float, decay: float, depth_gain: float) -> None:
    """Raise ValueError (one line, naming `acceptance.<field>` and its range) for a value outside the family."""
    for name, value in (("top1", top1), ("decay", decay), ("depth_gain", depth_gain)):
        low, high = RANGES[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"acceptance.{name}: {value!r} is outside the acceptance family's range "
                             f"[{low:g}, {high:g}]")


def family_table(top1: float, decay: float, depth_gain: float, ranks: int = RANKS,
                 depths: int = DEPTHS) -> list[list[float]]:
    """The family member's positional table: `depths` rows of `ranks` probabilities (module docstring)."""
    check_family(top1, decay, depth_gain)
    miss = 1.0 - top1
    table = []
    for d in range(depths):
        power = 1.0 + depth_gain * d
        surv = [1.0] + [(miss * r ** -decay) ** power for r in range(1, ranks + 1)]
        table.append([max(0.0, surv[r] - surv[r + 1]) for r in range(ranks)])
    return table


def fit_family(table: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """The family member closest to a measured positional table: (top1, decay, depth_gain).

    Least squares on log S_d(r) (r = 1 .. the table's ranks, every depth row), each point weighted by
    reach_d * S_d(r) (the chance a verify reaches depth d along top-1 accepts, times the survival itself: an
    error in log S then counts as the absolute error in probability it makes where verifies get to). For each
    depth_gain on a 0.001 grid the weighted line log S / (1 + g d) = log(1 - top1) - decay log r is solved in
    closed form; the best g wins. Fitted values are clipped to the family's ranges."""
    points: list[tuple[int, float, float, float]] = []  # (depth, log r, log S, weight)
    reach = 1.0
    for d, row in enumerate(table):
        surv = 1.0
        for r in range(1, len(row) + 1):
            surv -= row[r - 1]
            if surv > 1e-9:
                points.append((d, math.log(r), math.log(surv), reach * surv))
        reach *= row[0]
    if len(points) < 2:
        raise ValueError("fit_family: the table leaves no miss mass to fit (every row's top-1 is 1)")
    best: tuple[float, float, float, float] | None = None
    for step in range(0, 1001):
        g = step / 1000.0
        sw = sx = sy = sxx = sxy = 0.0
        for d, x, y, wt in points:
            y = y / (1.0 + g * d)
            sw += wt
            sx += wt * x
            sy += wt * y
            sxx += wt * x * x
            sxy += wt * x * y
        var = sxx * sw - sx * sx
        slope = (sxy * sw - sx * sy) / var if var > 0 else 0.0
        icpt = (sy - slope * sx) / sw
        err = sum(wt * (y - (1.0 + g * d) * (icpt + slope * x)) ** 2 for d, x, y, wt in points)
        if best is None or err < best[0]:
            best = (err, icpt, slope, g)
    assert best is not None
    _, icpt, slope, g = best
    top1 = min(1.0, max(0.0, 1.0 - math.exp(icpt)))
    decay = min(RANGES["decay"][1], max(0.0, -slope))
    return top1, decay, g


def chain_expected_tokens(table: Sequence[Sequence[float]], gamma: int) -> float:
    """Exact expected tokens per verify (accepted + bonus) of a gamma-chain of top-ranked drafts:
    sum over k = 0 .. gamma of prod_{j < k} p[j][0] (depths past the table reuse its last row)."""
    total, alive = 1.0, 1.0
    for k in range(gamma):
        alive *= table[min(k, len(table) - 1)][0]
        total += alive
    return total


def proposal_expected_tokens(table: Sequence[Sequence[float]], tokens: Sequence[int],
                             parents: Sequence[int]) -> float:
    """Exact expected tokens of verifying one proposal (root first, parents before children; `tokens[i]` is
    node i's draft rank under its parent): 1 (the bonus) + the summed probability that each non-root node's whole
    path is accepted, the product of p[depth][rank] along it. A rank past a row has probability 0."""
    prob = [1.0] * len(tokens)
    depth = [0] * len(tokens)
    total = 1.0
    for i in range(1, len(tokens)):
        p = parents[i]
        depth[i] = depth[p] + 1
        row = table[min(depth[i] - 1, len(table) - 1)]
        prob[i] = prob[p] * (row[tokens[i]] if tokens[i] < len(row) else 0.0)
        total += prob[i]
    return total
