"""Contract tests: trace records and messages round-trip through their one (de)serialiser."""

from __future__ import annotations

import json

import pytest

from conf.messages import DraftProposal, Stop, VerifiedPath, decode, encode, wire_capacity
from conf.rundir import atomic_write_json, read_run, write_run
from conf.trace import TraceRecord, read_traces, shapes_str, to_chrome_trace, write_traces


def _record(**kw):
    base = dict(name="op.gemm", shapes=shapes_str((8, 4096), (4096, 14336)), tp=2, ctx=1024, device="cpu",
                start_s=0.5, duration_s=1.25e-4, run_id="r1", group="target", rank=1, iteration=3, tokens=8)
    base.update(kw)
    return TraceRecord(**base)


def test_trace_roundtrip_through_jsonl(tmp_path):
    recs = [_record(), _record(name="step.verify", shapes="", extra=json.dumps({"tree": 8}))]
    write_traces(tmp_path / "t.jsonl", recs)
    assert read_traces(tmp_path / "t.jsonl") == recs
    assert recs[0].shapes == "8x4096,4096x14336"


def test_trace_reader_names_file_line_and_field(tmp_path):
    p = tmp_path / "bad.jsonl"
    good = _record().to_dict()
    bad = dict(good)
    bad.pop("duration_s")
    p.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: missing fields \['duration_s'\]"):
        read_traces(p)
    p.write_text(json.dumps({**good, "colour": "red"}) + "\n")
    with pytest.raises(ValueError, match=r"unknown fields \['colour'\]"):
        read_traces(p)


def test_trace_record_rejects_negative_duration():
    with pytest.raises(ValueError, match="duration_s"):
        _record(duration_s=-1.0)


def test_chrome_trace_uses_microseconds():
    ev = to_chrome_trace([_record()])["traceEvents"][0]
    assert ev["ts"] == pytest.approx(0.5e6) and ev["dur"] == pytest.approx(125.0)
    assert ev["pid"] == "target" and ev["tid"] == 1 and ev["ph"] == "X"


@pytest.mark.parametrize(
    "msg",
    [DraftProposal.make_dummy(1), DraftProposal.make_dummy(8),
     DraftProposal(7, 11, (5, 9, 3, 4), (-1, 0, 0, 1)),
     VerifiedPath.make_dummy(0), VerifiedPath.make_dummy(5), VerifiedPath(2, 4, (1, 2, 3), (0, 2), stop=True),
     Stop(3, 9)],
    ids=lambda m: type(m).__name__,
)
def test_messages_roundtrip_with_padding(msg):
    wire = encode(msg)
    assert len(wire) <= wire_capacity(8)
    padded = wire + [0] * (wire_capacity(8) - len(wire))
    assert decode(padded) == msg


def test_message_validation():
    with pytest.raises(ValueError, match="root"):
        DraftProposal(0, 0, (1, 2), (0, 0))
    with pytest.raises(ValueError, match=r"parent_indices\[1\] = 2 must point to an earlier node"):
        DraftProposal(0, 0, (1, 2, 3), (-1, 2, 0))
    with pytest.raises(ValueError, match=r"parent_indices\[3\] = -1 must point to an earlier node"):
        DraftProposal(0, 0, (1, 2, 3, 4), (-1, 0, 1, -1))  # a second root, after valid nodes
    with pytest.raises(ValueError, match=r"parent_indices\[2\] = 2 must point to an earlier node"):
        DraftProposal(0, 0, (1, 2, 3), (-1, 0, 2))  # its own parent
    assert DraftProposal(0, 0, (7,), (-1,)).num_nodes == 1  # the root alone
    with pytest.raises(ValueError, match="bonus"):
        VerifiedPath(0, 0, (1, 2), (0, 1))
    with pytest.raises(ValueError, match="unknown message kind"):
        decode([9, 0, 0, 0])


def test_run_dir_roundtrip_and_atomic_files(tmp_path):
    write_run(tmp_path / "run", {"a": 1}, {"git_sha": "abc", "seed": 3}, {"tokens_per_s": 12.5, "hist": [1, 2]})
    run = read_run(tmp_path / "run")
    assert run["metrics"]["tokens_per_s"] == 12.5 and run["meta"]["seed"] == 3 and run["config"] == {"a": 1}
    assert (tmp_path / "run" / "metrics.csv").read_text().splitlines() == ["tokens_per_s", "12.5"]
    assert not list((tmp_path / "run").glob(".*tmp"))
    with pytest.raises(FileNotFoundError, match="metrics.json is missing"):
        atomic_write_json(tmp_path / "other" / "config.json", {})
        read_run(tmp_path / "other")


def test_git_sha_env_override(monkeypatch):
    """A copied tree with a stale .git records the commit its caller names."""
    from conf.rundir import GIT_SHA_ENV, git_sha

    monkeypatch.setenv(GIT_SHA_ENV, "0123abc")
    assert git_sha() == "0123abc"
    monkeypatch.delenv(GIT_SHA_ENV)
    assert git_sha() != "0123abc"


def test_span_medians_of_spans_and_their_extra_fields():
    """conf.trace.span_medians (the device scripts' summaries): the spans' median, each extra field's median over the
    records that carry it (ms), None for a field no record carries and for no records at all."""
    import json as _json

    from conf.trace import TraceRecord, span_medians

    def rec(dur: float, **extra) -> TraceRecord:
        return TraceRecord("step.verify", "", 1, 0, "cpu", 0.0, dur, "r", extra=_json.dumps(extra))

    recs = [rec(0.004, device_s=0.0039, launched_s=1e-4), rec(0.005, device_s=0.0041), rec(0.006, device_s=None)]
    row = span_medians(recs, ("device_s", "launched_s", "decided_s"), "test")
    assert row["n"] == 3 and row["span_ms"] == pytest.approx(5.0)
    assert row["device_ms"] == pytest.approx(4.0) and row["launched_ms"] == pytest.approx(0.1)
    assert row["decided_ms"] is None
    assert span_medians([], ("device_s",), "test") == {"n": 0, "span_ms": None, "device_ms": None}
