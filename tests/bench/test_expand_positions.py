"""bench/expand_positions.py (refill vs overlapped expansions per run) and validate.py run's --override."""

from __future__ import annotations

import json

import pytest

from bench.expand_positions import expand_positions, main


def _span(it, start, dur, phase, device_s=None, name="step.expand"):
    extra = {"phase": phase} | ({} if device_s is None else {"device_s": device_s})
    return {"name": name, "shapes": "", "tp": 1, "ctx": 0, "device": "cpu", "start_s": start, "duration_s": dur,
            "run_id": "r", "group": "draft", "rank": 1, "iteration": it, "tokens": 8, "extra": json.dumps(extra)}


def test_positions_phases_and_device_time(tmp_path):
    run = tmp_path / "async_bs8_w8_d2"
    run.mkdir()
    spans = []
    for it in range(3):  # refill 1.0 ms then two overlapped 1.2 / 1.4 ms; listed out of order on purpose
        t = 10.0 * it
        spans += [_span(it, t + 2, 0.0014, "overlap", 0.0011), _span(it, t, 0.0010, "refill", 0.0009),
                  _span(it, t + 1, 0.0012, "overlap", 0.0010)]
    spans.append(_span(0, 0.5, 0.005, "-", name="step.verify"))
    (run / "traces.jsonl").write_text("\n".join(json.dumps(s) for s in spans) + "\n")
    got = expand_positions(run)
    assert got["positions"] == {"0r": {"median_ms": 1.0, "n": 3}, "1o": {"median_ms": 1.2, "n": 3},
                                "2o": {"median_ms": 1.4, "n": 3}}
    assert got["phase"]["overlap"] == {"median_ms": 1.3, "n": 6}
    assert got["overlap_minus_refill_ms"] == pytest.approx(0.3)
    assert got["device_phase"] == {"overlap": {"median_ms": 1.05, "n": 6}, "refill": {"median_ms": 0.9, "n": 3}}
    out = tmp_path / "summary.json"
    assert main([str(tmp_path), "--json", str(out)]) == 0  # a folder of run dirs
    assert json.loads(out.read_text())["runs"][0]["run"] == "async_bs8_w8_d2"


def test_bad_inputs_name_the_file(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="no traces.jsonl"):
        expand_positions(tmp_path)
    (tmp_path / "traces.jsonl").write_text('{"name": "step.expand"\n')
    with pytest.raises(ValueError, match=r"traces\.jsonl:1: not JSON"):
        expand_positions(tmp_path)
    assert main([str(tmp_path / "missing")]) == 2 and "no run dir" in capsys.readouterr().err


def test_validate_run_override_reaches_every_configuration(tmp_path, monkeypatch):
    """`validate.py run --override K=V` composes K=V into each oracle-pair configuration it launches."""
    import runtime.launch
    from bench import validate

    seen = []

    def fake_launch(fn, cfg):
        seen.extend(job for _, job in fn.keywords["jobs"])

    monkeypatch.setattr(runtime.launch, "launch", fake_launch)
    monkeypatch.setattr(validate, "real_pair_jobs", lambda out, notes: [])
    assert validate.main(["run", "--out", str(tmp_path), "--smoke", "--override", "trace.graph_events=true",
                          "--override", "trace.chrome=false"]) == 1  # nothing measured: the fake ran nothing
    assert seen and all(job.trace.graph_events and not job.trace.chrome for job in seen)
