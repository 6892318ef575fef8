"""bench/bench_host_path.py runs on CPU and writes its record (timings are not asserted: a benchmark, not a test)."""

from __future__ import annotations

import json

import pytest

from bench import bench_host_path


def test_host_path_benchmark_writes_every_piece(tmp_path):
    record = bench_host_path.main(["--reps", "3", "--out", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("host_path_*.json")).read_text())
    assert saved == json.loads(json.dumps(record))
    assert {"git_sha", "date", "device", "config"} <= set(saved)
    assert set(saved["median_us"]) == {
        "verify.proposal_inputs", "verify.inputs+load_inputs", "verify.inputs+tensors (before b594258)",
        "channel.unpack+decode (bs 8 proposal)",
        "draft.plan_expansion", "draft.plan_expansion+load_inputs", "draft.grow_topk",
        "draft.grow_topk (numpy: readback=spin)", "draft.plan_expansion+grow_topk",
        "draft.select",
        "draft.reroot (hit)"}
    assert all(v > 0 for v in saved["median_us"].values())


def test_host_path_benchmark_refuses_zero_reps(tmp_path):
    with pytest.raises(SystemExit, match="--reps: need at least 1 timed call, got 0"):
        bench_host_path.main(["--reps", "0", "--out", str(tmp_path)])
