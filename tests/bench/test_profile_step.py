"""bench/profile_step.py on CPU: a tiny model's step is timed, profiled and written."""

from __future__ import annotations

import json

from bench.profile_step import main


def test_profile_step_on_cpu_writes_a_summary(tmp_path):
    s = main(["--preset", "tiny-llama", "--dtype", "float32", "--device", "cpu", "--backend", "reference",
              "--rows", "4", "--ctx", "16", "--reps", "3", "--out", str(tmp_path)])
    assert s["wall_step_s"] > 0 and s["kernel_launches"] == 0  # no CUDA on CPU
    # the profiled step ran the model's layers: their linear ops appear among the top host ops
    assert any("linear" in r["op"] or "addmm" in r["op"] or "mm" in r["op"] for r in s["top_host_ops"])
    saved = json.loads((tmp_path / "profile_step_tiny-llama_reference.json").read_text())
    assert saved["rows"] == 4 and saved["ctx"] == 16
    assert (tmp_path / "profile_step_tiny-llama_reference.trace.json").stat().st_size > 0
