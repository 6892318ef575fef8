"""Run dirs are readable by others and hold no empty log file: the writers (conf/rundir.py) and an entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conf.rundir import FILE_MODE, atomic_write_bytes, atomic_write_json

REPO = Path(__file__).resolve().parents[2]


def test_atomic_writes_leave_0644_files_and_no_temporaries(tmp_path):
    old = os.umask(0o077)  # even under a strict umask the result is readable by everyone
    try:
        atomic_write_json(tmp_path / "a" / "m.json", {"x": 1})
        atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    finally:
        os.umask(old)
    assert json.loads((tmp_path / "a" / "m.json").read_text()) == {"x": 1}
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert {p.stat().st_mode & 0o777 for p in (tmp_path / "a" / "m.json", tmp_path / "b.bin")} == {FILE_MODE}
    assert not list(tmp_path.rglob(".*tmp"))


def test_simulate_run_dir_is_readable_and_has_no_log_file(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "simulate.py", "workload.num_requests=1", "workload.max_new_tokens=16",
           f"hydra.run.dir={run_dir}"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = [p for p in run_dir.iterdir() if p.is_file()]
    assert {"config.json", "metrics.json", "iterations.csv"} <= {p.name for p in files}
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in files), [(p.name, oct(p.stat().st_mode)) for p in files]
    assert not list(run_dir.glob("*.log"))
