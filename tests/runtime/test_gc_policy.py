"""The collector frozen around the decode loop, its pauses recorded as host.gc spans."""

from __future__ import annotations

import gc
import json

from runtime.gc_policy import gc_policy
from runtime.metrics import Timeline
from tests.runtime.test_engine import PROMPTS, make_cfg, reference_outputs, run


class Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def gc_spans(records) -> list[dict]:
    """The extra fields of the host.gc spans among trace records (a Timeline's, or a run's traces)."""
    return [json.loads(r.extra) for r in records if r.name == "host.gc"]


def test_freeze_moves_what_exists_out_of_the_collections_and_gives_it_back_on_exit():
    frozen_before = gc.get_freeze_count()
    Cycle()  # garbage made before the block: the entry's collection frees it
    timeline = Timeline("gc")
    with gc_policy(timeline) as between_requests:
        frozen = gc.get_freeze_count()
        assert frozen > frozen_before
        for _ in range(3):
            Cycle()
        between_requests()  # collects the three cycles, freezes what is left
        assert gc.get_freeze_count() >= frozen
        gc.collect()  # a full collection inside the block is recorded
    assert gc.get_freeze_count() == frozen_before
    spans = gc_spans(timeline.records())
    assert [s["generation"] for s in spans] == [2, 2]
    assert spans[0]["collected"] >= 3  # the three cycles
    gc.collect()  # after the block: no hook, no record
    assert len(gc_spans(timeline.records())) == 2


def test_only_full_or_long_collections_are_recorded():
    timeline = Timeline("gc")
    with gc_policy(timeline, min_s=10.0):
        Cycle()
        gc.collect(1)  # a younger generation's collection under min_s is not recorded; a full one always is
        gc.collect()
    assert [s["generation"] for s in gc_spans(timeline.records())] == [2]


def test_a_disabled_collector_is_not_frozen_or_collected():
    frozen_before = gc.get_freeze_count()
    gc.disable()
    try:
        with gc_policy() as between_requests:
            between_requests()
            assert gc.get_freeze_count() == frozen_before
    finally:
        gc.enable()


def test_a_run_decodes_the_same_with_the_collector_frozen_and_unfreezes_after():
    expected, eos = reference_outputs("tiny-llama")
    cfg = make_cfg("autoregressive")
    frozen_before = gc.get_freeze_count()
    out = run(cfg, PROMPTS, eos=eos)  # one rank, in process: the policy applies to this interpreter
    assert out["outputs"] == expected
    assert gc.get_freeze_count() == frozen_before
    spans = gc_spans(out["traces"])
    assert all(set(s) == {"generation", "collected", "uncollectable"} for s in spans)
    # the collection between two requests is inside the timed region: recorded
    assert sum(s["generation"] == 2 for s in spans) >= len(PROMPTS) - 1
