"""scripts/gpu_colocated_ab.sh on CPU with the tiny pair (AB_BASE): the interleaved runs, ab.json and the table (the
workload-a runs themselves need a GPU; the timings here are not asserted)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_colocated_ab_runs_each_variant_per_round_and_writes_its_record(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "AB_ROUNDS": "1", "AB_MODES": "chain autoregressive", "AB_NEW_TOKENS": "8", "AB_REQUESTS": "1",
           "AB_BASE": "model=tiny parallel.device=cpu workload.prompt_tokens=16 workload.max_seq_len_tokens=128",
           "SWIFTSPEC_GIT_SHA": "0123abc", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", str(ROOT / "scripts/gpu_colocated_ab.sh"), str(tmp_path), "spec.gamma=4",
                           "spec.gamma=2 spec.topk=2"], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = json.loads((tmp_path / "ab.json").read_text())
    assert rec["git_sha"] == "0123abc" and rec["overrides"] == {"a": "spec.gamma=4", "b": "spec.gamma=2 spec.topk=2"}
    assert set(rec["runs"]) == {f"{m}__{v}_1" for m in ("chain", "autoregressive") for v in "ab"}
    assert set(rec["per_variant"]) == {f"{m}__{v}" for m in ("chain", "autoregressive") for v in "ab"}
    # an autoregressive run has no expansions: its means are None, not a crash of the summary
    assert rec["per_variant"]["autoregressive__a"]["expand_span_ms"] is None
    assert rec["per_variant"]["autoregressive__a"]["tokens_per_s"] > 0
    for name, run in rec["runs"].items():
        if name.startswith("autoregressive"):
            continue
        assert run["tokens_per_s"] > 0 and run["verify"]["n"] > 0 and run["verify"]["span_ms"] > 0
        assert run["verify"]["launched_ms"] is None  # no trace.graph_events on CPU
    assert "| chain__b_1 |" in proc.stdout and "chain__a rounds 1" in proc.stdout
    bad = subprocess.run(["bash", str(ROOT / "scripts/gpu_colocated_ab.sh"), str(tmp_path), "spec.gamma=4"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "gpu_colocated_ab: 2 to 6 variants expected, got 1" in bad.stderr
