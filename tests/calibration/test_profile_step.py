"""calibration/profile_step.py on CPU: a tiny model's step is timed, profiled and written."""

from __future__ import annotations

import json

from calibration.profile_step import main


def test_profile_step_on_cpu_writes_a_summary(tmp_path):
    s = main(["--preset", "tiny-llama", "--dtype", "float32", "--device", "cpu", "--backend", "reference",
              "--rows", "4", "--ctx", "16", "--reps", "3", "--out", str(tmp_path)])
    assert s["wall_step_s"] > 0 and s["kernel_launches"] == 0  # no CUDA on CPU
    # the profiled step ran the model's layers: their linear ops appear among the top host ops
    assert any("linear" in r["op"] or "addmm" in r["op"] or "mm" in r["op"] for r in s["top_host_ops"])
    saved = json.loads((tmp_path / "profile_step_tiny-llama_reference_r4.json").read_text())
    assert saved["top_device_kernels"] == []  # CPU ops carry no device time
    assert saved["rows"] == 4 and saved["ctx"] == 16 and saved["fused"] is False
    assert (tmp_path / "profile_step_tiny-llama_reference_r4.trace.json").stat().st_size > 0
    # the floor: every weight byte once + K/V of ctx + rows tokens, over the H200's HBM bandwidth
    from conf.presets import MODEL_PRESETS

    shape = MODEL_PRESETS["tiny-llama"]
    assert 0 < saved["byte_floor_s"] < 1e-6 and saved["graph_over_floor"] is None
    kv = 2 * shape.num_layers * shape.num_kv_heads * shape.head_dim * 4 * (16 + 4)
    assert saved["byte_floor_s"] * 4.29e12 > kv


def test_profile_step_fused_path_on_cpu(tmp_path):
    """--fused runs the Triton path (interpreter on CPU) and tags the file."""
    s = main(["--preset", "tiny-llama", "--dtype", "float32", "--device", "cpu", "--backend", "triton",
              "--fused", "--rows", "2", "--ctx", "8", "--reps", "1", "--out", str(tmp_path)])
    assert s["fused"] is True and s["wall_step_s"] > 0
    assert (tmp_path / "profile_step_tiny-llama_triton_fused_r2.json").exists()
