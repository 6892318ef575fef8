"""Python's cyclic garbage collector on a decode rank: frozen around the decode loop, its pauses in the trace.

A full (generation-2) collection walks every container object the process tracks. After torch, Triton, the
model and the CUDA graphs are built a rank holds a few hundred thousand of them, and one full collection takes
tens of milliseconds. The collector runs when allocations cross its thresholds, so the pause lands inside whichever
step allocated last: a verify of tens of milliseconds instead of a few (docs/LOG.md has the runs); frozen, no
generation-2 collection falls in a timed region.

    with gc_policy(timeline) as between_requests:
        ...decode...                 collect once, then `gc.freeze()` every object that exists (they move to a
        between_requests()           permanent generation that collections skip), on entry and at each
                                     `between_requests()`, so a collection walks only what was made since;
                                     `gc.unfreeze()` on exit (an in-process caller, e.g. a test or a benchmark,
                                     gets its collector back as it was). While the block runs each collection of
                                     generation 2, and any collection that took at least `min_s`, is recorded on
                                     `timeline` as a `host.gc` span (extra: generation, collected,
                                     uncollectable): the pauses show in traces.jsonl and the Chrome trace. A
                                     process whose collector is disabled is left so.

Freezing changes no result: objects in the permanent generation are still freed by reference counting; only a
reference cycle among them outlives the run's collections (a rank's setup objects live for the run anyway).
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def gc_policy(timeline: Any = None, min_s: float = 1e-3) -> Iterator[Callable[[], None]]:
    """Freeze the collector's objects for the block and record its pauses on `timeline` (module docstring).

    Yields the between-requests call (collect + freeze again)."""
    freeze = gc.isenabled()

    def between_requests() -> None:
        if freeze:
            gc.collect()
            gc.freeze()

    started: list[float] = []

    def hook(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(timeline.now())
            return
        if not started:  # a collection that began before the hook was installed
            return
        start = started.pop()
        duration = timeline.now() - start
        generation = info.get("generation", -1)
        if generation == 2 or duration >= min_s:
            timeline.add("host.gc", start, duration, extra={"generation": generation,
                                                            "collected": info.get("collected", 0),
                                                            "uncollectable": info.get("uncollectable", 0)})

    between_requests()
    if timeline is not None:
        gc.callbacks.append(hook)
    try:
        yield between_requests
    finally:
        if timeline is not None:
            gc.callbacks.remove(hook)
        if freeze:
            gc.unfreeze()
