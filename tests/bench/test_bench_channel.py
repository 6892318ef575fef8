"""bench/bench_channel.py on CPU: both leader channels measured side by side and written with their metadata."""

from __future__ import annotations

import json

from bench.bench_channel import main


def test_channel_benchmark_writes_both_kinds(tmp_path):
    result = main(["--device", "cpu", "--rounds", "20", "--nodes", "4", "--out", str(tmp_path)])
    saved = json.loads(next(tmp_path.glob("channel_cpu_*.json")).read_text())
    assert saved == result and saved["backend"] == "gloo" and saved["git_sha"]
    for kind in ("dist", "unix"):
        stats = saved["results"][kind]["4"]
        assert stats["rounds"] == 20 and 0 < stats["p5_us"] <= stats["median_us"] <= stats["p95_us"]
