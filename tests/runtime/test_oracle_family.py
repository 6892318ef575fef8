"""The runtime's acceptance oracle and the simulator draw verify outcomes from one distribution.

Both read the acceptance model through policy/acceptance.py (one torch-free implementation); they draw with
different generators (the oracle: a torch.Generator per request; the simulator: numpy uniforms per token
position). On the proposals the simulator's draft sends (fresh trees of the presets), N walks of each are compared
with Pearson's two-sample chi-square test on (accepted length, bonus rank) outcomes, bins with a pooled count
below 10 merged. Each case rejects at p < 1e-3, so with the fixed seeds below a correct pair fails a case with
probability 1e-3 (about 1% over the 9 cases); the test also checks it does reject a draft 5 points weaker.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch

from conf.schema import AcceptanceConfig
from policy.acceptance import BEYOND_TABLE, load_acceptance
from runtime.oracle import NO_RANK, AcceptanceOracle
from simulator.tree import EMPTY, TreeStates
from tests.conftest import build

N = 6000
ALPHA = 1e-3
PRESETS = {name: build("simulate", [f"acceptance={name}"]).acceptance for name in ("weak", "paper_qwen2", "strong")}
SHAPES = [(8, 8, 8, 1), (16, 8, 8, 4), (8, 2, 4, 6)]
"""(bs, w, topk, expansions after the refill) of the fresh trees the walks verify."""


def _chi2_sf(x: float, df: int) -> float:
    """P(chi-square with df degrees of freedom > x): 1 - the regularised lower incomplete gamma P(df/2, x/2),
    summed as its power series (converges for every x; the terms fall once n > x/2 - df/2)."""
    a, h = df / 2.0, x / 2.0
    if h <= 0.0:
        return 1.0
    term = math.exp(a * math.log(h) - h - math.lgamma(a + 1.0))
    total, n = term, 0
    while term > 1e-17 * total:
        n += 1
        term *= h / (a + n)
        total += term
    return max(0.0, 1.0 - total)


def _two_sample_p(a: Counter, b: Counter) -> float:
    """Pearson's chi-square two-sample test (equal sample sizes) over the union of outcomes; rare outcomes (pooled
    count < 10) are merged into one bin."""
    keys = sorted(set(a) | set(b), key=lambda k: -(a[k] + b[k]))
    bins = [(a[k], b[k]) for k in keys if a[k] + b[k] >= 10]
    rest = (sum(a[k] for k in keys if a[k] + b[k] < 10), sum(b[k] for k in keys if a[k] + b[k] < 10))
    if sum(rest) > 0:
        bins.append(rest)
    na, nb = sum(a.values()), sum(b.values())
    stat = 0.0
    for x, y in bins:
        ex, ey = (x + y) * na / (na + nb), (x + y) * nb / (na + nb)
        stat += (x - ex) ** 2 / ex + (y - ey) ** 2 / ey
    return _chi2_sf(stat, max(1, len(bins) - 1))


def _proposal(cfg: AcceptanceConfig, bs: int, w: int, topk: int, d: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    trees = TreeStates(load_acceptance(cfg, topk).belief(topk), topk, w, 256)
    sid, _ = trees.refill(EMPTY, bs)
    sid, _ = trees.expand(sid, d)
    return trees.select(sid, bs)


def _oracle_outcomes(cfg: AcceptanceConfig, parents: tuple[int, ...], seed: int) -> Counter:
    oracle = AcceptanceOracle(cfg, torch.Generator().manual_seed(seed))
    out: Counter = Counter()
    for _ in range(N):
        o = oracle.walk(parents)
        out[(len(o.path) - 1, o.bonus_rank)] += 1
    return out


def _simulator_outcomes(cfg: AcceptanceConfig, tokens: tuple[int, ...], parents: tuple[int, ...],
                        seed: int, topk: int) -> Counter:
    acc = load_acceptance(cfg, topk)
    children = {(p, t): i for i, (p, t) in enumerate(zip(parents, tokens))}
    depth = len(tokens) + 1
    uniforms = np.random.default_rng(seed).random(N * depth).tolist()
    out: Counter = Counter()
    for i in range(N):
        ranks, nodes = acc.walk(children, uniforms, i * depth)
        bonus = ranks[-1]
        # the oracle reports a bonus outside the proposal's children as that rank, or NO_RANK past the table
        out[(len(nodes) - 1, NO_RANK if bonus == BEYOND_TABLE else bonus)] += 1
    return out


@pytest.mark.parametrize("preset", sorted(PRESETS))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "bs{}_w{}_k{}_d{}".format(*s))
def test_oracle_and_simulator_draw_one_distribution(preset, shape):
    cfg = PRESETS[preset]
    bs, w, topk, d = shape
    tokens, parents = _proposal(cfg, bs, w, topk, d)
    oracle = _oracle_outcomes(cfg, parents, seed=11)
    sim = _simulator_outcomes(cfg, tokens, parents, seed=12, topk=topk)
    assert _two_sample_p(oracle, sim) > ALPHA, (preset, shape, sorted(oracle.items()), sorted(sim.items()))
    # the accepted lengths alone agree too, and their means are the proposal's
    lengths_o = Counter({k: 0 for k in range(bs)})
    lengths_s = Counter({k: 0 for k in range(bs)})
    for (k, _), n in oracle.items():
        lengths_o[k] += n
    for (k, _), n in sim.items():
        lengths_s[k] += n
    assert _two_sample_p(lengths_o, lengths_s) > ALPHA


def test_the_test_rejects_a_weaker_draft():
    """Power: walks of a 0.85 top-1 draft against the strong preset's (0.9) on one proposal are rejected."""
    strong = PRESETS["strong"]
    weaker = AcceptanceConfig(kind="family", top1=0.85, decay=strong.decay, depth_gain=strong.depth_gain)
    tokens, parents = _proposal(strong, 16, 8, 8, 4)
    assert _two_sample_p(_oracle_outcomes(weaker, parents, seed=11),
                         _simulator_outcomes(strong, tokens, parents, seed=12, topk=8)) < ALPHA


def test_chi2_tail_matches_known_quantiles():
    # chi-square quantiles: df 1 at 3.841 (p 0.05), df 4 at 18.467 (p 0.001), df 10 at 29.588 (p 0.001)
    assert _chi2_sf(3.841459, 1) == pytest.approx(0.05, abs=1e-6)
    assert _chi2_sf(18.46683, 4) == pytest.approx(0.001, abs=1e-6)
    assert _chi2_sf(29.58830, 10) == pytest.approx(0.001, abs=1e-6)
    assert _chi2_sf(0.0, 3) == 1.0
