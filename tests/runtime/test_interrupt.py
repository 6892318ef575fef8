"""Ctrl-C on `python generate.py` (marker `slow`: a real run, stopped mid-way): one line on stderr, exit code 130,
the finished requests saved in outputs.jsonl (config.json / metrics.json marked interrupted), and no rank process left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ctrl_c_saves_the_finished_requests_and_leaves_no_rank(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-u", "generate.py", "model=tiny", "workload=default", "workload.num_requests=100000",
           "workload.max_new_tokens=16", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # the progress line (every 10 s on a pipe) comes once tokens are being generated: requests have finished
        deadline = time.monotonic() + 240
        for line in proc.stderr:
            if "tok/s" in line or time.monotonic() > deadline:
                break
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the ranks run in child processes"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted (Ctrl-C): every rank stopped"]
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"rank processes left behind: {[p.pid for p in alive]}"
    saved = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    assert saved and [item["request"] for item in saved] == list(range(len(saved)))
    assert all(len(item["tokens"]) == 16 and item["stop"] == "max_new_tokens" for item in saved)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["interrupted"] is True and metrics["num_requests_done"] == len(saved)
    assert f"{len(saved)} finished request(s) saved" in out
