"""parallel.gc: the collector frozen around the decode loop, its pauses recorded as host.gc spans."""

from __future__ import annotations

import dataclasses
import gc
import json

import pytest

from conf import build_config
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
    with gc_policy("freeze", timeline) as between_requests:
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


def test_default_leaves_the_collector_alone_and_still_records_its_pauses():
    frozen_before = gc.get_freeze_count()
    timeline = Timeline("gc")
    with gc_policy("default", timeline, min_s=10.0) as between_requests:
        assert gc.get_freeze_count() == frozen_before
        between_requests()
        assert gc.get_freeze_count() == frozen_before
        Cycle()
        gc.collect(1)  # a younger generation's collection under min_s is not recorded; a full one always is
        gc.collect()
    assert [s["generation"] for s in gc_spans(timeline.records())] == [2]


def test_a_disabled_collector_is_not_frozen_or_collected():
    frozen_before = gc.get_freeze_count()
    gc.disable()
    try:
        with gc_policy("freeze") as between_requests:
            between_requests()
            assert gc.get_freeze_count() == frozen_before
    finally:
        gc.enable()


def test_an_unknown_mode_is_refused_by_field_name():
    with pytest.raises(ValueError, match=r"parallel.gc: 'off' is not one of freeze, default"), gc_policy("off"):
        pass
    cfg = make_cfg("autoregressive")
    with pytest.raises(ValueError, match=r"parallel.gc: 'never' is not one of freeze, default"):
        build_config(dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, gc="never")))


@pytest.mark.parametrize("mode", ["freeze", "default"])
def test_a_run_decodes_the_same_under_either_mode_and_unfreezes_after(mode):
    expected, eos = reference_outputs("tiny-llama")
    cfg = make_cfg("autoregressive")
    cfg = build_config(dataclasses.replace(cfg, parallel=dataclasses.replace(cfg.parallel, gc=mode)))
    frozen_before = gc.get_freeze_count()
    out = run(cfg, PROMPTS, eos=eos)  # one rank, in process: the policy applies to this interpreter
    assert out["outputs"] == expected
    assert gc.get_freeze_count() == frozen_before
    spans = gc_spans(out["traces"])
    assert all(set(s) == {"generation", "collected", "uncollectable"} for s in spans)
    if mode == "freeze":  # the collection between two requests is inside the timed region: recorded
        assert sum(s["generation"] == 2 for s in spans) >= len(PROMPTS) - 1
