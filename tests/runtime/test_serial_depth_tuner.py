"""The runtime's serial_tree with d auto (runtime.controller.SerialDepthTuner, policy/depth_tuner.py): each round's d
is the tuner's, the output stays the target's greedy decode (lossless whatever d a round takes), and the run records
the tuner's rule and the d it ended on."""

from __future__ import annotations

from policy.depth_tuner import SerialDepthTuner
from tests.runtime.test_engine import make_cfg, reference_outputs, run


def test_colocated_serial_auto_d_climbs_and_stays_lossless(monkeypatch):
    """Short trials (2 rounds per candidate, none skipped or settled) so that a 5-prompt run of 24 tokens each tries
    several d: every output equals the plain greedy decode, the re-root spans carry more than one d, and the
    metrics say d_rule runtime with d_used the last round's d."""
    monkeypatch.setattr(SerialDepthTuner, "TRIAL", 2)
    monkeypatch.setattr(SerialDepthTuner, "SETTLE", 0)
    monkeypatch.setattr(SerialDepthTuner, "SKIP", 0)
    expected, eos = reference_outputs("tiny-llama")
    out = run(make_cfg("serial_tree", bs=8, w=2, topk=4), eos=eos)  # d0 = ceil(7 / 2) = 4, within [1, 7]
    assert out["outputs"] == expected
    d_per_round = [r.extra_fields()["d"] for r in out["traces"] if r.name == "step.reroot"]
    assert len(set(d_per_round)) > 1 and all(1 <= d <= 7 for d in d_per_round)
    assert d_per_round[0] == 4  # the breadth rule first
    m = out["metrics"]
    assert m["d"] == "auto" and m["d_rule"] == "runtime" and m["d_used"] == d_per_round[-1]


def test_fixed_serial_d_is_recorded_as_fixed():
    expected, eos = reference_outputs("tiny-llama")
    out = run(make_cfg("serial_tree", bs=6, w=1, topk=2, d="4"), eos=eos)
    assert out["outputs"] == expected
    assert {r.extra_fields()["d"] for r in out["traces"] if r.name == "step.reroot"} == {4}
    assert out["metrics"]["d_rule"] == "fixed" and out["metrics"]["d_used"] == 4
