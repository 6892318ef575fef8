"""scripts/gpu.sh on CPU: unknown recipes and bad arguments are refused; `pack` writes a commit's code; `ab` runs both
trees round by round and summarises them (the tiny pair through AB_RUNTIME; the step replays need a GPU and are
listed as missing here); `peers` measures ours beside the compiled peers per shape and skips the real pair without
its GGUF."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GPU_SH = str(ROOT / "scripts" / "gpu.sh")
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")


def _env(**extra: str) -> dict:
    """This interpreter first on PATH (the recipes call python3), one thread."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
            "OMP_NUM_THREADS": "1", **extra}


def _run(*args: str, timeout: int = 60, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", GPU_SH, *args], env=_env(**env), capture_output=True, text=True, timeout=timeout)


def test_unknown_recipe_and_bad_arguments_are_refused(tmp_path):
    proc = _run("nope")
    assert proc.returncode == 2 and "gpu.sh: unknown recipe 'nope'" in proc.stdout
    assert "gpu.sh ab A B OUT" in proc.stdout  # the recipes' list
    proc = _run("ab", "x", str(tmp_path))
    assert proc.returncode == 2 and "usage: scripts/gpu.sh ab A B OUT" in proc.stderr
    proc = _run("ab", str(tmp_path), str(tmp_path), str(tmp_path / "out"))
    assert proc.returncode == 2 and "has no bench/bench_runtime.py" in proc.stderr


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs this checkout's git")
def test_pack_writes_the_commits_code_and_its_source(tmp_path):
    proc = _run("pack", "HEAD", str(tmp_path / "a"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert (tmp_path / "a" / "SOURCE").read_text().split() == ["HEAD", sha]
    for path in ("runtime/engine.py", "policy/depth_tuner.py", "calibration/runtime_kernels.py",
                 "bench/bench_runtime.py", "conf/generate.yaml", "generate.py"):
        assert (tmp_path / "a" / path).is_file(), path
    assert not (tmp_path / "a" / "bench" / "results").exists() and not (tmp_path / "a" / "docs").exists()
    proc = _run("pack", "no-such-ref", str(tmp_path / "b"))
    assert proc.returncode == 2 and "pack: no-such-ref is not a commit here" in proc.stderr


@pytest.mark.slow
def test_ab_runs_both_trees_and_writes_the_summary(tmp_path):
    out = tmp_path / "out"
    proc = _run("ab", str(ROOT), str(ROOT), str(out), timeout=400, AB_ROUNDS="1", AB_REPEATS="1", AB_BUDGET_S="60",
                AB_RUNTIME="preset=tiny device=cpu modes=[autoregressive,chain] presets.tiny.peers=[]")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rec = json.loads((out / "ab.json").read_text())
    assert rec["rounds"] == 1 and rec["sources"] == {"a": str(ROOT), "b": str(ROOT)}
    assert sorted(rec["missing"]) == ["a_r1_steps.json", "b_r1_steps.json"]  # CPU: the replays refuse to run
    for mode in ("autoregressive", "chain"):
        cell = rec["workload_a_colocated"][mode]
        assert cell["a"]["median_tokens_per_s"] > 0 and cell["b"]["median_tokens_per_s"] > 0
        assert cell["b_over_a"] > 0 and cell["paired_b_over_a"] > 0
    log = (out / "ab.log").read_text()
    assert log.index("round 1, a: step replays") < log.index("round 1, b: step replays")
    assert "needs a CUDA GPU" in log and (out / "ab_runs.tar.gz").is_file()
    assert "| chain |" in proc.stdout


@pytest.mark.slow
@pytest.mark.skipif((ROOT / ".cache" / "models" / "smollm2-135m-instruct.gguf").exists(),
                    reason="the GGUF is here: the real pair would run on CPU")
def test_peers_runs_each_shape_and_skips_the_real_pair_without_its_gguf(tmp_path):
    out = tmp_path / "out"
    proc = _run("peers", str(out), timeout=500, PEERS_SHAPES="tiny real_pair", PEERS_A_S="400",
                PEERS_EXTRA="device=cpu repeats=1 warmup_new_tokens=4 peer_compile.enabled=false")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [path] = out.glob("runtime_tiny_*.json")
    rows = {(r["system"], r["mode"]): r for r in json.loads(path.read_text())["rows"]}
    assert {("gptfast_compiled", "chain"), ("transformers_compiled", "greedy")} <= set(rows)
    assert all(r["status"] == "ok" for r in rows.values()), {k: r.get("reason") for k, r in rows.items()}
    assert "real pair skipped: missing .cache/models/smollm2-135m-instruct.gguf" in proc.stdout
    table = (out / "peers_table.md").read_text()
    assert "| AR time per output token |" in table and table.strip() in proc.stdout
