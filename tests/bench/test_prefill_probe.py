"""bench/prefill_probe.py on CPU: the code path (torch kernels; the Triton and graph variants need a GPU)."""

import json

import pytest

from bench.prefill_probe import main


def test_probe_times_each_length_and_writes_its_record(tmp_path, capsys):
    result = main(["--presets", "tiny-llama,tiny-llama-draft", "--lengths", "8,24", "--kernels", "reference",
                   "--warmup", "1", "--reps", "2", "--device", "cpu", "--out", str(tmp_path), "--cprofile", "3"])
    # --cprofile: each preset's host profile at the first length, the functions with the most own time
    assert capsys.readouterr().out.count("Ordered by: internal time") == 2
    rows = result["rows"]
    assert [(r["preset"], r["prompt_tokens"]) for r in rows] == [
        ("tiny-llama", 8), ("tiny-llama", 24), ("tiny-llama-draft", 8), ("tiny-llama-draft", 24)]
    assert all(0 < r["host_s"] <= r["wall_s"] for r in rows)
    (written,) = tmp_path.glob("prefill_probe_*.json")
    assert json.loads(written.read_text())["rows"] == rows and result["git_sha"]


@pytest.mark.parametrize("args, message", [
    (["--lengths", "1"], "a prefill needs >= 2 prompt tokens"),
    (["--lengths", "a,b"], "expected comma-separated integers"),
    (["--kernels", "cudnn"], "'cudnn' is not one of graph, triton, reference"),
    (["--kernels", "graph"], "CUDA graphs need a CUDA device"),
])
def test_probe_refuses_bad_arguments(args, message):
    with pytest.raises(SystemExit, match=message):
        main(["--device", "cpu", "--out", "", *args])
