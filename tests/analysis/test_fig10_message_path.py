"""Fig. 10 (where a leader message's time goes): hop / decode / bookkeeping medians from synthetic leader spans
whose times are known."""

from __future__ import annotations

import json

import pytest

from analysis import fig10_message_path
from analysis.runs import RunDirError, load_run, load_runs
from conf.trace import TraceRecord
from tests.analysis.test_figures import make_run


def _rec(name: str, group: str, rank: int, it: int, start: float, dur: float, extra: dict | None = None):
    return TraceRecord(name=name, shapes="", tp=1, ctx=0, device="NVIDIA H200", start_s=start, duration_s=dur,
                       run_id="t", group=group, rank=rank, iteration=it, extra=json.dumps(extra) if extra else "")


def _traces(hop: float, decode: float, book: float, marks: bool = True) -> list[TraceRecord]:
    """Per iteration: the draft's proposal send ends at t; the waiting target's receive (started 1 ms before)
    takes the bytes `hop` later, decodes for `decode`, closes its span `book` after that; the verified path back
    the same way (the draft waited 0.5 ms)."""
    out = []
    for it in range(10, 20):
        t = it * 0.01
        for sender, receiver, s_rank, r_rank, t_send, waited in (("draft", "target", 1, 0, t, 1e-3),
                                                                  ("target", "draft", 0, 1, t + 0.005, 5e-4)):
            out.append(_rec("comm.send", sender, s_rank, it, t_send - 1e-5, 1e-5))
            arrive = waited + hop
            extra = {"arrive_s": arrive, "decoded_s": arrive + decode, "slept": False} if marks else {}
            out.append(_rec("comm.recv", receiver, r_rank, it, t_send - waited, arrive + decode + book, extra))
    return out


def test_the_delivery_splits_into_hop_decode_and_bookkeeping(tmp_path):
    run = load_run(make_run(tmp_path, "r", source="runtime", traces=_traces(4e-6, 20e-6, 9e-6)))
    parts = fig10_message_path.message_parts(run)
    for direction in ("draft->target", "target->draft"):
        p = parts[direction]
        assert p["messages"] == 10
        assert p["hop_s"] == pytest.approx(4e-6, abs=1e-9) and p["decode_s"] == pytest.approx(20e-6, abs=1e-9)
        assert p["bookkeeping_s"] == pytest.approx(9e-6, abs=1e-9)


def test_figure_stacks_each_configuration_per_direction_and_names_bad_input(tmp_path):
    make_run(tmp_path, "a", source="runtime", traces=_traces(4e-6, 20e-6, 9e-6), bs=8, w=16, d=3)
    make_run(tmp_path, "a__r1", source="runtime", traces=_traces(6e-6, 22e-6, 11e-6), bs=8, w=16, d=3)
    make_run(tmp_path, "sim", source="sim", traces=[])  # simulated: left out
    _, data = fig10_message_path.make_figure(load_runs([tmp_path]))
    panel = data.panels["draft->target"]
    assert panel.series["hop"].x == ["async tree, bs 8 w 16 d 3"]
    assert panel.series["hop"].y == [pytest.approx(5.0)] and panel.series["decode"].y == [pytest.approx(21.0)]
    assert panel.series["bookkeeping"].y == [pytest.approx(10.0)]
    assert panel.series["hop"].extra["messages"] == [20.0]
    make_run(tmp_path / "old", "nomarks", source="runtime", traces=_traces(4e-6, 0, 0, marks=False))
    with pytest.raises(RunDirError, match=r"nomarks: its target leader's comm.recv spans have no arrival mark"):
        fig10_message_path.make_figure(load_runs([tmp_path / "old"]))
    with pytest.raises(RunDirError, match="none of the 1 runs is a runtime run with a draft group"):
        fig10_message_path.make_figure(load_runs([tmp_path / "sim"]))
