"""What a simulation records: running totals (`Tally`), per-iteration rows and step events.

Hot-path rule: processes append plain lists and tuples here; `TraceRecord` objects, CSV rows and metric
dicts are built once at the end (metrics.py, `to_trace_records`).

Iteration row (`ITERATION_COLUMNS`, one per verify; AR: one per forward). Times in seconds:

- start_s: the target starts waiting for this iteration's proposal (end of its previous verify or prefill);
  end_s: the verify ends. Rows of a request tile the target's timeline after its prefill;
- verify_s: the target forward (+ its KV compaction); target_idle_s = end_s - start_s - verify_s;
- expand_s, reroot_s, draft_idle_s, hit: the draft's round that follows this verify's proposal: the draft
  forwards after sending it (overlapping the verify in async_tree) and the refill after re-rooting, the
  re-root + selection + KV compaction, the wait for the verified path, whether its bonus token was already
  a tree node (empty for autoregressive and chain, and for the last verify of a request);
- message_s: this proposal's delay + its verified path's delay;
- accepted: draft tokens accepted; emitted: accepted + bonus, before the stop at max_new_tokens truncates
  the last verify of a request (as the runtime's iterations.csv; `generated_tokens` is after truncation);
- refills: the draft forwards the next proposal waited for after this verify's re-root (the refill to bs nodes;
  a chain's gamma forwards); empty for autoregressive runs and a request's last verify.

Event tuple: (name, group, start_s, duration_s, request, iteration, tokens, ctx).
"""

from __future__ import annotations

import json
from typing import Any

from conf.rundir import ITERATION_COLUMNS
from conf.trace import TraceRecord

(REQUEST, ITERATION, START, END, VERIFY, EXPAND, REROOT, MESSAGE, TARGET_IDLE, DRAFT_IDLE, ACCEPTED, EMITTED,
 HIT, REFILLS) = range(len(ITERATION_COLUMNS) - 1)
"""Row indices (a row holds no `ranks`: the runtime's verified draft ranks, written empty by the simulator)."""

Event = tuple[str, str, float, float, int, int, int, int]


class Tally:
    """Running totals of one simulation (instance state only: two simulations never share counters)."""

    __slots__ = ("generated_tokens", "verifies", "verify_s", "draft_forwards", "expand_s", "target_busy_s",
                 "draft_busy_s", "draft_busy_end_s", "prefill_s", "reroots", "hits", "accept_hist", "wall_s",
                 "iterations", "polled_expansions", "polled_rounds")

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


def iteration_dicts(rows: list[list[Any]]) -> list[dict[str, Any]]:
    """Rows as dicts keyed by ITERATION_COLUMNS (hit: 0/1, refills: a count, or '' where they do not apply)."""
    out = []
    for row in rows:
        d = dict(zip(ITERATION_COLUMNS[:HIT], row))
        d["hit"] = "" if row[HIT] is None else int(row[HIT])
        d["ranks"] = ""
        d["refills"] = "" if row[REFILLS] is None else int(row[REFILLS])
        out.append(d)
    return out


def to_trace_records(events: list[Event], run_id: str, device: str, tp: dict[str, int]) -> list[TraceRecord]:
    """Events as conf.trace records (group target / draft / link; the request id in `extra`)."""
    return [
        TraceRecord(name=name, shapes="", tp=tp.get(group, 1), ctx=ctx, device=device, start_s=start,
                    duration_s=dur, run_id=run_id, group=group, rank=0, iteration=it, tokens=tokens,
                    extra=json.dumps({"request": req}))
        for name, group, start, dur, req, it, tokens, ctx in events
    ]
