"""What a simulation records: running totals (`Tally`), one `IterationRow` per verify and step `Event`s.

Hot-path rule: processes append rows and events here (slotted types built from positional arguments);
`TraceRecord` objects, CSV rows and metric dicts are built once at the end (metrics.py, `to_trace_records`).

`IterationRow` holds the cells of iterations.csv (`ITERATION_COLUMNS` without `ranks`: the runtime's verified
draft ranks, written empty by the simulator). The target writes a row when its verify ends; the draft fills in
its round's fields when that verify's path arrives and when it has re-rooted on it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from conf.rundir import ITERATION_COLUMNS
from conf.trace import TraceRecord


@dataclass(slots=True)
class IterationRow:
    """One verify (autoregressive: one forward), a row of iterations.csv. Times in seconds.

    Rows of a request tile the target's timeline after its prefill. The target builds the row when its verify
    ends, from its own fields (the first nine, positional in the hot path); the draft fields that follow describe
    the draft's round after this verify's proposal and keep their defaults for autoregressive runs (hit and
    refills also for chain runs and a request's last verify). CSV order: `to_dict`.
    """

    request: int
    iteration: int
    start_s: float
    """The target starts waiting for this iteration's proposal (end of its previous verify or prefill)."""
    end_s: float
    """The verify ends."""
    verify_s: float
    """The target forward (+ its KV compaction); target_idle_s = end_s - start_s - verify_s."""
    message_s: float
    """This proposal's delay + its verified path's delay."""
    target_idle_s: float
    accepted: int
    """Draft tokens accepted."""
    emitted: int
    """accepted + bonus, before the stop at max_new_tokens truncates the last verify of a request (as the
    runtime's iterations.csv; `Tally.generated_tokens` is after truncation)."""
    expand_s: float = 0.0
    """The draft forwards after sending the proposal (overlapping the verify in async_tree) and the refill after
    re-rooting on this verify's path."""
    reroot_s: float = 0.0
    """The re-root + selection + KV compaction."""
    draft_idle_s: float = 0.0
    """The draft's wait for the verified path."""
    hit: bool | None = None
    """Whether the bonus token was already a tree node (None: no re-root)."""
    refills: int | None = None
    """The draft forwards the next proposal waited for after this verify's re-root (the refill to bs nodes; a
    chain's gamma forwards); None for autoregressive runs and a request's last verify."""

    def to_dict(self) -> dict[str, Any]:
        """The row keyed by ITERATION_COLUMNS, in their order (ranks: ''; hit: 0/1, refills: a count, or '' where
        they do not apply)."""
        out = {c: "" if c == "ranks" else getattr(self, c) for c in ITERATION_COLUMNS}
        out["hit"] = "" if self.hit is None else int(self.hit)
        out["refills"] = "" if self.refills is None else int(self.refills)
        return out


class Event(NamedTuple):
    """One span on a group's timeline: a step (group target / draft) or a message in flight (group link)."""

    name: str
    """step.prefill | step.verify | step.expand | step.reroot | msg.proposal | msg.verified."""
    group: str
    start_s: float
    duration_s: float
    request: int
    iteration: int
    """-1: the prefill and the first proposal's growth."""
    tokens: int
    """Query rows of the step (expand: forwards x w; reroot: kept tokens; 0 for messages)."""
    ctx: int
    """Context (KV) tokens before the step."""


class Tally:
    """Running totals of one simulation (instance state only: two simulations never share counters)."""

    __slots__ = ("generated_tokens", "verifies", "verify_s", "draft_forwards", "expand_s", "target_busy_s",
                 "draft_busy_s", "draft_busy_end_s", "prefill_s", "reroots", "hits", "accept_hist", "wall_s",
                 "iterations", "polled_expansions", "polled_rounds", "expected_tokens")

    def __init__(self) -> None:
        self.generated_tokens = 0
        self.verifies = 0
        """Target verify steps (forwards in autoregressive mode)."""
        self.verify_s = 0.0
        self.draft_forwards = 0
        self.expand_s = 0.0
        self.target_busy_s = 0.0
        self.draft_busy_s = 0.0
        self.draft_busy_end_s = 0.0
        """End of the draft's last busy interval (may pass wall_s: work cut short by the stop)."""
        self.prefill_s = 0.0
        """Target prefill time, summed over requests (part of wall_s)."""
        self.reroots = 0
        self.hits = 0
        self.accept_hist: dict[int, int] = {}
        """Tokens per verify incl. the bonus (uncapped) -> count."""
        self.wall_s = 0.0
        """End of the last request's last verify."""
        self.iterations = 0
        self.polled_expansions = 0
        """spec.d=poll: overlapped expansions, summed over rounds (their mean is the d the run settled on)."""
        self.polled_rounds = 0
        self.expected_tokens = 0.0
        """Expected tokens of the proposals sent, under the tree's weights (`TreeStates.expected_tokens`), summed:
        what serial_tree's pilots score d by (simulation.serial_auto_d), as the runtime's tuner scores its rounds."""


def iteration_dicts(rows: list[IterationRow]) -> list[dict[str, Any]]:
    """Rows as dicts keyed by ITERATION_COLUMNS, in order (`IterationRow.to_dict`)."""
    return [row.to_dict() for row in rows]


def to_trace_records(events: list[Event], run_id: str, device: str, tp: dict[str, int]) -> list[TraceRecord]:
    """Events as conf.trace records (group target / draft / link; the request id in `extra`)."""
    return [
        TraceRecord(name=e.name, shapes="", tp=tp.get(e.group, 1), ctx=e.ctx, device=device, start_s=e.start_s,
                    duration_s=e.duration_s, run_id=run_id, group=e.group, rank=0, iteration=e.iteration,
                    tokens=e.tokens, extra=json.dumps({"request": e.request}))
        for e in events
    ]
