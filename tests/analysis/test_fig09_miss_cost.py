"""Fig. 9 (what a miss costs): idle before a verify classed by the previous re-root, from iterations.csv rows
written here with known values; measured and simulated runs of one configuration side by side."""

from __future__ import annotations

import pytest

from analysis import fig09_miss_cost
from analysis.runs import RunDirError, load_run, load_runs
from tests.analysis.test_figures import make_run


def _rows(hits: list[int], idle_after_hit: float, idle_after_miss: float, request: int = 0,
          refills: list[int] | None = None, idle_after_refill: float = 0.0) -> list[dict]:
    """iterations.csv rows: iteration i's idle follows iteration i - 1's hit (the first row's idle: 9 s); with
    `refills` (the column since the fourteenth session) a hit with refills > 0 is followed by `idle_after_refill`."""
    out = []
    for i, hit in enumerate(hits):
        before = hits[i - 1] if i else None
        refilled = bool(refills and i and refills[i - 1])
        idle = (9.0 if i == 0 else idle_after_miss if not before else idle_after_refill if refilled
                else idle_after_hit)
        row = dict(request=request, iteration=i, start_s=i, end_s=i + 1, verify_s=0.5, expand_s=0.3,
                   reroot_s=0.01, message_s=0.001, target_idle_s=idle, draft_idle_s=0.0, accepted=1, emitted=2,
                   hit=hit, ranks="1.-1" if not hit else "0.1")
        if refills is not None:
            row["refills"] = refills[i]
        out.append(row)
    return out


def test_idle_is_classed_by_the_previous_reroot_per_request(tmp_path):
    hits = [1, 1, 0, 1, 0, 0, 1, 1]  # previous outcomes of rows 1..7: H H M H M M H
    rows = _rows(hits, 0.2, 1.5) + _rows(hits, 0.4, 2.5, request=1)
    run = load_run(make_run(tmp_path, "r", iterations=rows))
    s = fig09_miss_cost.idle_by_outcome(run, skip=1)  # each request's first row (idle 9 s) left out
    assert s["iterations"] == 14 and s["miss_share"] == pytest.approx(6 / 14)
    assert s["hit_idle_s"] == pytest.approx(0.3) and s["miss_idle_s"] == pytest.approx(2.0)  # medians over both
    assert s["mean_idle_hit_s"] == pytest.approx((4 * 0.2 + 4 * 0.4) / 14)
    assert s["mean_idle_s"] == pytest.approx(s["mean_idle_hit_s"] + (3 * 1.5 + 3 * 2.5) / 14)
    assert fig09_miss_cost.idle_by_outcome(run, skip=3)["iterations"] == 10


def test_measured_and_simulated_side_by_side(tmp_path):
    hits = [1, 0, 1, 1, 0, 1]
    make_run(tmp_path, "meas", source="runtime", iterations=_rows(hits, 0.2, 1.5), spec={"bs": 8, "w": 8, "d": 3})
    make_run(tmp_path, "sim", source="sim", iterations=_rows(hits, 0.4, 1.7), spec={"bs": 8, "w": 8, "d": 3})
    make_run(tmp_path, "ar", source="runtime", mode="autoregressive")  # no tree: left out
    _, data = fig09_miss_cost.make_figure(load_runs([tmp_path]), skip=1)
    med = data.panels["median"].series
    assert med["after a hit (measured)"].x == ["async tree, bs 8 w 8 d 3"]
    assert med["after a hit (measured)"].y == [pytest.approx(200.0)]  # ms
    assert med["after a miss (simulated)"].y == [pytest.approx(1700.0)]
    assert med["after a miss (measured)"].extra["share"] == [pytest.approx(2 / 5)]
    assert "after a refilled hit (measured)" not in med  # no run records refills: hits are not split
    mean = data.panels["mean"].series
    assert mean["after a miss (simulated)"].y == [pytest.approx(2 * 1700.0 / 5)]


def test_refilled_hits_are_their_own_class(tmp_path):
    """With `refills`: a hit whose next proposal still refilled (a never-expanded leaf) is classed apart from a
    ready hit and from a miss; the mean idle splits into the three parts."""
    hits = [1, 1, 0, 1, 1, 0, 1, 1]
    refills = [0, 1, 1, 1, 0, 1, 0, 0]  # every miss refills; hits 1 and 3 refilled
    run = load_run(make_run(tmp_path, "r", iterations=_rows(hits, 0.2, 1.5, refills=refills,
                                                           idle_after_refill=1.4)))
    s = fig09_miss_cost.idle_by_outcome(run, skip=1)  # previous outcomes of rows 1..7: H R M R H M H
    assert s["iterations"] == 7
    assert (s["hit_idle_s"], s["refilled_idle_s"], s["miss_idle_s"]) == (pytest.approx(0.2), pytest.approx(1.4),
                                                                           pytest.approx(1.5))
    assert (s["hit_share"], s["refilled_share"], s["miss_share"]) == (pytest.approx(3 / 7), pytest.approx(2 / 7),
                                                                       pytest.approx(2 / 7))
    assert s["mean_idle_s"] == pytest.approx((3 * 0.2 + 2 * 1.4 + 2 * 1.5) / 7)
    make_run(tmp_path / "both", "meas", source="runtime", iterations=_rows(hits, 0.2, 1.5, refills=refills,
                                                                          idle_after_refill=1.4))
    _, data = fig09_miss_cost.make_figure(load_runs([tmp_path / "both"]), skip=1)
    med, mean = data.panels["median"].series, data.panels["mean"].series
    assert med["after a refilled hit (measured)"].y == [pytest.approx(1400.0)]
    assert mean["after a miss (measured)"].extra["refill_share"] == [pytest.approx(4 / 7)]


def test_bad_input_is_named(tmp_path):
    make_run(tmp_path, "ar", mode="autoregressive")
    with pytest.raises(RunDirError, match="none of the 1 runs is a tree mode"):
        fig09_miss_cost.make_figure(load_runs([tmp_path / "ar"]))
    make_run(tmp_path, "short", iterations=_rows([1, 0], 0.1, 1.0))
    with pytest.raises(RunDirError, match=r"short: iterations.csv has no iteration after the first 10"):
        fig09_miss_cost.make_figure(load_runs([tmp_path / "short"]))
    make_run(tmp_path, "noidle", iterations=[{"request": 0, "iteration": 0, "hit": 1}])
    with pytest.raises(RunDirError, match=r"noidle: iterations.csv has no column 'target_idle_s'"):
        fig09_miss_cost.idle_by_outcome(load_run(tmp_path / "noidle"))


def test_ranks_stay_text(tmp_path):
    """iterations.csv's `ranks` ("1.1" = ranks 1 and 1, "1.-1" a miss) is read as text, not as a number."""
    run = load_run(make_run(tmp_path, "r", iterations=_rows([1, 0], 0.1, 1.0)))
    rows = run.iterations()
    assert [r["ranks"] for r in rows] == ["0.1", "1.-1"] and rows[0]["hit"] == 1.0
