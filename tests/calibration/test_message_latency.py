"""calibration/message_latency.py: deliveries read off synthetic leader spans with known times."""

from __future__ import annotations

import json

import pytest

from calibration.message_latency import deliveries, main, message_latency
from conf.trace import TRACE_FILE, TraceRecord, write_traces


def _rec(name: str, group: str, rank: int, it: int, start: float, dur: float, extra: str = "") -> TraceRecord:
    return TraceRecord(name=name, shapes="", tp=1, ctx=0, device="t", start_s=start, duration_s=dur, run_id="t",
                       group=group, rank=rank, iteration=it, extra=extra)


def test_deliveries_pair_each_send_with_the_waiting_receive():
    sends = [_rec("comm.send", "draft", 1, i, 1.0 + i, 0.01) for i in range(3)]  # end at 1.01, 2.01, 3.01
    recvs = [_rec("comm.recv", "target", 0, 0, 0.5, 0.52),   # waited 0.51 s, ends 0.2 ms late
             _rec("comm.recv", "target", 0, 1, 2.02, 0.001),  # started after the send ended: not waiting
             _rec("comm.recv", "target", 0, 2, 3.0, 0.0105)]  # waited 0.01 s, ends 0.5 ms late
    got = deliveries(sends, recvs)
    assert [round(w, 6) for w, _, _ in got] == [0.51, 0.01] and [round(d, 6) for _, d, _ in got] == [0.01, 0.0005]
    assert [r.iteration for _, _, r in got] == [0, 2]


def test_run_dir_by_direction_and_wait(tmp_path):
    recs = []
    for it in range(10, 20):
        t = it * 0.01
        recs += [_rec("comm.send", "draft", 1, it, t, 1e-5), _rec("comm.recv", "target", 0, it, t - 0.002, 0.00211),
                 _rec("comm.send", "target", 0, it, t + 0.005, 1e-5),
                 _rec("comm.recv", "draft", 1, it, t + 0.0049, 0.00013)]
        recs.append(_rec("comm.recv", "target", 2, it, 0.0, 1.0))  # a TP peer: ignored
    recs.append(_rec("comm.send", "draft", 1, 3, 0.0, 1e-5))  # before SKIP_ITERATIONS: ignored
    write_traces(tmp_path / TRACE_FILE, recs)
    res = message_latency(tmp_path)
    assert res["draft->target"]["long_wait"]["n"] == 10 and res["draft->target"]["short_wait"]["n"] == 0
    assert res["draft->target"]["long_wait"]["median_ms"] == pytest.approx(0.1, abs=1e-6)
    assert res["target->draft"]["short_wait"]["median_ms"] == pytest.approx(0.02, abs=1e-6)
    with pytest.raises(SystemExit, match="--short-wait-ms: expected > 0, got 0"):
        main([str(tmp_path), "--short-wait-ms", "0"])
    with pytest.raises(FileNotFoundError, match="no traces.jsonl"):
        message_latency(tmp_path / "nope")


def test_arrival_marks_split_the_delivery(tmp_path):
    """Receive spans with the unix channel's arrival mark: delivery = hop (send end -> bytes out) + after."""
    recs = []
    for it in range(10, 20):
        t = it * 0.01
        slept = it % 2 == 0
        # the draft's send ends at t + 1e-5; the bytes come out 0.06 ms later, the span closes 0.01 ms after that
        recs += [_rec("comm.send", "draft", 1, it, t, 1e-5),
                 _rec("comm.recv", "target", 0, it, t - 0.002, 0.00208,
                      json.dumps({"arrive_s": 0.00207, "decoded_s": 0.002074, "slept": slept}))]
    write_traces(tmp_path / TRACE_FILE, recs)
    cell = message_latency(tmp_path)["draft->target"]["long_wait"]
    assert cell["n"] == 10 and cell["median_ms"] == pytest.approx(0.07, abs=1e-6)
    assert cell["hop_ms"] == pytest.approx(0.06, abs=1e-6) and cell["after_ms"] == pytest.approx(0.01, abs=1e-6)
    assert cell["slept"] == 0.5 and cell["decode_ms"] == pytest.approx(0.004, abs=1e-6)
    assert "hop_ms" not in message_latency(tmp_path)["target->draft"]["long_wait"]  # no receives that way


def test_json_names_the_analysis_and_the_runs(tmp_path):
    recs = [_rec("comm.send", "draft", 1, it, it * 0.01, 1e-5) for it in range(10, 14)]
    recs += [_rec("comm.recv", "target", 0, it, it * 0.01 - 0.001, 0.00102) for it in range(10, 14)]
    write_traces(tmp_path / TRACE_FILE, recs)
    out = tmp_path / "lat.json"
    main([str(tmp_path), "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["benchmark"] == "message_latency" and data["git_sha"] and data["date"]
    assert data["runs_git_sha"] == ["?"] and data["device"] == ["?"]  # no config.json in this synthetic run dir
    assert data["config"] == {"short_wait_ms": 0.8, "skip_iterations": 10} and len(data["runs"]) == 1
