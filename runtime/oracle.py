"""Acceptance oracle: verify outcomes drawn from a seeded acceptance model (shape-realistic runs).

With random weights nothing is ever accepted, so performance runs of big shapes replace the *outcome* of
each verify (how many drafted tokens are accepted, and which token comes next) by a draw from the
acceptance model the simulator uses (`conf.schema.AcceptanceConfig`); every forward, kernel and message
still runs for real. Off by default (`spec.oracle`); a run that used it is labelled `oracle` in its metrics
and outputs, and its tokens are not a model's output.

Models:
- positional (and family: the acceptance family's table, policy/acceptance_family.py): at an accepted node
  of depth `k` (root = 0), the target's next token is the draft's rank-r child with probability
  `positional[k][r]` (depths beyond the table reuse its last row; entries are multiplied by `scale`), and none
  of them otherwise.
- replay: iteration i replays record i (cyclically) of a recorded run: accept `accepted` tokens along the
  rank-0 chain (fewer if the proposal is shallower), then bonus rank 0 if the record was a hit, else none.

How the two groups agree without new message fields: both sides own an `AcceptanceOracle` seeded from
(`workload.seed`, request) and call `walk` on the same proposals in the same order, so they draw the same
outcomes. The target keeps the accepted path's KV and reports it; the draft resolves the outcome's bonus
*rank* into a token of its own tree (`resolve_bonus`: the rank-r child of the last accepted node, a hit if
the draft has it; otherwise a token that is not a child, a miss). The target's bonus token in the message is
a placeholder (its argmax); the next proposal's root token is the emitted token.

Ranks within a proposal: the draft sends nodes best-first, so the children of a node appear in decreasing
draft probability; the r-th child in the proposal is the draft's rank-r child.

Draws: each rank is the inverse CDF of the depth's row (plus "none") at one float64 uniform of the request's
stream, the uniforms taken from the generator `UNIFORM_BATCH` at a time, so a walk runs no torch op (two sides that
walk the same proposals in the same order still read the same uniforms). The oracle stands in for the verdict a real
run computes on the GPU, and both leaders walk it on their critical path, so a walk must cost next to nothing. Runs
recorded before iterations.csv had its `ranks` column drew each rank as a `torch.multinomial` instead
(`MULTINOMIAL`): `reconstruct_ranks` reads their stream that way.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import torch

from conf.schema import AcceptanceConfig
from policy.acceptance import PositionalAcceptance, load_acceptance, read_replay

NO_RANK = -1  # the target's token is none of the draft's ranked children
UNIFORM, MULTINOMIAL = "uniform", "multinomial"
"""How a rank was drawn from a request's stream: uniform (the oracle's draws) | multinomial (a torch.multinomial per
rank: runs recorded without a `ranks` column; `reconstruct_ranks` only)."""
UNIFORM_BATCH = 256
"""Uniforms taken from the generator per refill (one torch op per 256 ranks)."""


@dataclass(frozen=True)
class OracleOutcome:
    """One drawn verify outcome over a proposal."""

    path: tuple[int, ...]  # accepted proposal indices, root first
    bonus_rank: int  # draft rank of the next token under the last accepted node, or NO_RANK


def load_positional(cfg: AcceptanceConfig) -> list[list[float]]:
    """The positional table (from `cfg.file` if given: {"positional": rows} or the rows; kind=family: the family
    member's), scaled by `cfg.scale`: the simulator's reading of it (policy/acceptance.py, torch-free), so both
    validate it alike (every row must sum to <= 1, before and after the scale)."""
    acc = load_acceptance(cfg, topk=1)
    assert isinstance(acc, PositionalAcceptance)
    return acc.table


def oracle_belief(cfg: AcceptanceConfig, topk: int) -> list[list[float]]:
    """The draft's tree-growth log-probs under `spec.oracle_belief=table`: the simulator's belief of the same
    acceptance model (log of the unscaled positional table, non-increasing in rank, floored; a replay's
    `acceptance.replay_belief`), one row per depth and `topk` ranks, so runtime and simulator grow one tree."""
    return load_acceptance(cfg, topk).belief(topk)


def load_replay(path: str | Path) -> list[tuple[int, bool]]:
    """(accepted, hit) per iteration of a recorded run (its iterations.csv, or JSON), read as the simulator reads
    it (`policy.acceptance.read_replay`: errors name the file and row); an unrecorded hit counts as a miss.
    JSON entries need an integer `accepted` and a boolean or null `hit` (no "2" / "true" strings)."""
    verifies, _ = read_replay(str(path))
    if not verifies:
        raise ValueError(f"acceptance.file: {path} holds no iterations to replay")
    return [(accepted, bool(hit)) for accepted, hit in verifies]


def _children(parents: tuple[int, ...] | list[int]) -> list[list[int]]:
    kids: list[list[int]] = [[] for _ in parents]
    for i, p in enumerate(parents):
        if p >= 0:
            kids[p].append(i)
    return kids


class AcceptanceOracle:
    """Seeded verify outcomes for one request (one per side; equal seeds give equal outcomes)."""

    def __init__(self, cfg: AcceptanceConfig, generator: torch.Generator) -> None:
        """`generator` is this request's oracle stream (the same seed on the draft and target side)."""
        self.kind = cfg.kind
        self.generator = generator
        self.table = load_positional(cfg) if cfg.kind != "replay" else []
        # per depth row: the cumulative probabilities of its ranks; a uniform at or past the last is "none"
        self._cdf = [list(accumulate(row)) for row in self.table]
        self._uniforms: list[float] = []
        self.replay = load_replay(cfg.file) if cfg.kind == "replay" else []
        self._step = 0

    def walk(self, parents: tuple[int, ...] | list[int]) -> OracleOutcome:
        """Draw the outcome of verifying a proposal with these parent indices (root first, best-first)."""
        kids = _children(parents)
        if self.kind == "replay":
            accepted, hit = self.replay[self._step % len(self.replay)]
            self._step += 1
            path = [0]
            while len(path) <= accepted and kids[path[-1]]:
                path.append(kids[path[-1]][0])
            return OracleOutcome(tuple(path), 0 if hit else NO_RANK)
        path = [0]
        while True:
            rank = self._draw_rank(len(path) - 1)
            node = path[-1]
            if rank == NO_RANK or rank >= len(kids[node]):
                return OracleOutcome(tuple(path), rank)
            path.append(kids[node][rank])

    def _draw_rank(self, depth: int) -> int:
        d = min(depth, len(self.table) - 1)
        if not self._uniforms:  # consumed from the end: reverse so that the stream is read in order
            self._uniforms = torch.rand(UNIFORM_BATCH, dtype=torch.float64, generator=self.generator).tolist()[::-1]
        cdf = self._cdf[d]
        r = bisect_right(cdf, self._uniforms.pop())  # the first rank whose cumulative probability exceeds u
        return NO_RANK if r == len(cdf) else r


class _MultinomialStream(AcceptanceOracle):
    """The stream read as runs recorded without a `ranks` column drew it: a torch.multinomial per rank."""

    def _draw_rank(self, depth: int) -> int:
        row = self.table[min(depth, len(self.table) - 1)]
        probs = torch.tensor(row + [max(0.0, 1.0 - sum(row))], dtype=torch.float64)
        r = int(torch.multinomial(probs, 1, generator=self.generator))
        return NO_RANK if r == len(row) else r


def reconstruct_ranks(cfg: AcceptanceConfig, seed: int, request: int, verifies: list[tuple[int, bool | None]],
                      draws: str = UNIFORM) -> list[list[int]]:
    """The draft ranks a positional oracle drew for one request's verifies, from its seed alone: a verify
    with `accepted` tokens consumed exactly accepted + 1 draws (one per accepted depth, then the rank that
    was not proposed), so replaying the stream in order recovers every rank. The bonus is -1 unless the run
    recorded a hit. `draws`: UNIFORM, or MULTINOMIAL (how every run without a ranks column drew). Raises ValueError
    if the stream contradicts the record (an accepted depth drawing "none", or a hit without a rank): a different
    seed, table, torch generator or `draws` than the run's.

    For runs recorded before iterations.csv had its `ranks` column (runtime/metrics.py ITERATION_COLUMNS).
    """
    from runtime.controller import request_generator

    if cfg.kind == "replay":
        raise ValueError(f"acceptance.kind={cfg.kind}: only a positional or family oracle's draws can be reconstructed")
    if draws not in (UNIFORM, MULTINOMIAL):
        raise ValueError(f"reconstruct_ranks: draws must be {UNIFORM} or {MULTINOMIAL}, got {draws!r}")
    stream = _MultinomialStream if draws == MULTINOMIAL else AcceptanceOracle
    oracle = stream(cfg, request_generator(seed, request, "oracle", "cpu"))
    out = []
    for i, (accepted, hit) in enumerate(verifies):
        ranks = [oracle._draw_rank(depth) for depth in range(accepted + 1)]
        if any(r == NO_RANK for r in ranks[:-1]) or (hit and ranks[-1] == NO_RANK):
            raise ValueError(f"request {request}, verify {i}: the oracle stream drew {ranks} for {accepted} "
                             f"accepted (hit {hit}): not this run's stream")
        out.append(ranks[:-1] + [ranks[-1] if hit else -1])
    return out


def resolve_bonus(children_tokens: list[int], bonus_rank: int, fallback: int) -> int:
    """The drawn next token, as a token id of the draft's tree.

    Args:
        children_tokens: tokens of the last accepted node's children in the draft tree, by draft rank.
        bonus_rank: the outcome's rank (or NO_RANK).
        fallback: the target's own token, used for a miss unless it happens to be a child.
    """
    if 0 <= bonus_rank < len(children_tokens):
        return children_tokens[bonus_rank]
    taken = set(children_tokens)
    if fallback not in taken:
        return fallback
    return next(t for t in range(len(taken) + 1) if t not in taken)
