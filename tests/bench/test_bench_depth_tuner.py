"""bench/bench_depth_tuner.py: every trial policy runs on the simulator and the record names what each chose."""

from __future__ import annotations

import json

import pytest

from bench import bench_depth_tuner
from runtime.depth_tuner import DepthTuner


def test_depth_tuner_study_records_every_policy_and_restores_the_default(tmp_path):
    defaults = {k: getattr(DepthTuner, k) for k in bench_depth_tuner.KNOBS}
    assert defaults == dict(zip(bench_depth_tuner.KNOBS, bench_depth_tuner.POLICIES["expected x16"]))
    record = bench_depth_tuner.main(["--seeds", "2", "--cases", "1", "--out", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("depth_tuner_*.json")).read_text())
    assert saved == json.loads(json.dumps(record)) and {"git_sha", "date", "device", "config"} <= set(saved)
    case = saved["cases"][0]
    fixed = {int(d): tps for d, tps in case["fixed_tokens_per_s"].items()}  # JSON keys are strings
    assert case["best_fixed_d"] == max(fixed, key=fixed.get) and fixed[1] > 0
    for name in bench_depth_tuner.POLICIES:
        pol = case["policies"][name]
        assert len(pol["chosen"]) == 2 and all(d >= 1 for d in pol["chosen"]) and pol["mean_tokens_per_s"] > 0
    assert {k: getattr(DepthTuner, k) for k in bench_depth_tuner.KNOBS} == defaults


def test_depth_tuner_study_refuses_bad_arguments(tmp_path):
    with pytest.raises(SystemExit, match="--seeds: need at least 1, got 0"):
        bench_depth_tuner.main(["--seeds", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--profile: .*missing.json is not a file"):
        bench_depth_tuner.main(["--profile", str(tmp_path / "missing.json"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match=r"--policies: unknown \['nope'\]"):
        bench_depth_tuner.main(["--policies", "nope", "--out", str(tmp_path)])
