"""bench/code_ab.py over synthetic step_replay and bench_runtime records: medians per side, b / a, paired ratios."""

from __future__ import annotations

import json

import pytest

from bench.code_ab import main


def _steps(ms8: float, ms1: float) -> dict:
    return {"benchmark": "step_replay", "device": "NVIDIA H200", "results": [
        {"preset": "llama3-8b", "role": "target", "rows": 8, "replay_s": ms8 * 1e-3, "floor_s": 3.775e-3},
        {"preset": "llama3-8b", "role": "target", "rows": 1, "replay_s": ms1 * 1e-3, "floor_s": 3.775e-3}]}


def _runtime(ar: list[float], chain: list[float]) -> dict:
    row = lambda mode, tps: {"system": "swiftspec", "mode": mode, "status": "ok", "tokens_per_s": tps[-1],  # noqa: E731
                             "tokens_per_s_repeats": tps, "iteration_time_s": 1 / tps[0], "verify_time_s": 4e-3,
                             "mean_accept_len": 1.0}
    return {"rows": [row("autoregressive", ar), row("chain", chain),
                     {"system": "transformers", "mode": "greedy", "status": "ok", "tokens_per_s": 37.0},
                     {"system": "swiftspec", "mode": "serial_tree", "status": "error: boom"}]}


def _write(folder, name, rec):
    (folder / name).write_text(json.dumps(rec))


def test_medians_ratios_and_missing_runs(tmp_path, capsys):
    work = tmp_path / "work"
    work.mkdir()
    _write(work, "a_r1_steps.json", _steps(4.30, 4.20))
    _write(work, "b_r1_steps.json", _steps(4.40, 4.20))
    _write(work, "a_r2_steps.json", _steps(4.32, 4.22))
    _write(work, "b_r2_steps.json", _steps(4.42, 4.18))
    _write(work, "a_r1_runtime.json", _runtime([200.0, 210.0], [300.0, 320.0]))
    _write(work, "b_r1_runtime.json", _runtime([220.0, 210.0], [330.0, 320.0]))
    _write(work, "a_r2_runtime.json", _runtime([200.0, 200.0], [300.0, 300.0]))
    (work / "b_r2_runtime.json").write_text("{not json")  # a run cut short
    (work / "notes.txt").write_text("ignored")
    rec = main([str(work), "--out", str(tmp_path / "out"), "--rounds", "2", "--source", "a=main@1",
                "--source", "b=prune@2"])
    assert json.loads((tmp_path / "out" / "ab.json").read_text()) == rec
    assert rec["sources"] == {"a": "main@1", "b": "prune@2"} and rec["device"] == "NVIDIA H200"
    s = rec["step_replays"]["llama3-8b target rows 8"]
    assert s["a"]["median_s"] == pytest.approx(4.31e-3) and s["b"]["median_s"] == pytest.approx(4.41e-3)
    assert s["b_over_a"] == pytest.approx(4.41 / 4.31)
    ar = rec["workload_a_colocated"]["autoregressive"]
    assert ar["a"]["median_tokens_per_s"] == 200.0 and ar["b"]["median_tokens_per_s"] == 215.0
    assert ar["b_over_a"] == pytest.approx(215 / 200)
    assert ar["paired_b_over_a"] == pytest.approx((220 / 200 + 210 / 210) / 2)  # round 1 only: b's round 2 is lost
    assert set(rec["workload_a_colocated"]) == {"autoregressive", "chain"}  # peers and failed rows left out
    assert any(m.startswith("b_r2_runtime.json: JSONDecodeError") for m in rec["missing"])
    assert "b_r2_runtime.json" in rec["missing"]
    out = capsys.readouterr().out
    assert "| llama3-8b target rows 8 | 4.310 | 4.410 | 1.0232 |" in out and "| autoregressive | 200.0 | 215.0 |" in out


def test_one_side_only_leaves_the_ratio_empty(tmp_path):
    _write(tmp_path, "a_r1_steps.json", _steps(4.3, 4.2))
    rec = main([str(tmp_path), "--out", str(tmp_path / "out")])
    assert rec["step_replays"]["llama3-8b target rows 1"]["b_over_a"] is None and rec["missing"] == []


@pytest.mark.parametrize("argv,match", [(["--source", "c=x"], r"--source: 'c=x' is not a=DESC or b=DESC"),
                                        (["--source", "a"], r"--source: 'a' is not")])
def test_bad_arguments_are_named(tmp_path, argv, match):
    with pytest.raises(SystemExit, match=match):
        main([str(tmp_path), "--out", str(tmp_path), *argv])
    with pytest.raises(SystemExit, match="is not a folder"):
        main([str(tmp_path / "nope"), "--out", str(tmp_path)])
