"""Launcher paths (runtime/launch.py): torchrun, a deepspeed-style environment, and the in-process single rank.

This module doubles as the tiny script the launcher tests start: `python -m tests.runtime.test_launch ok|fail`
runs `launch()` on a 1 + 1 split; rank 0 prints `RESULT {json}`. By hand:
`torchrun --nproc_per_node 2 -m tests.runtime.test_launch ok`.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf.messages import Stop
from runtime.comm import LeaderChannel
from runtime.launch import COMM_ENV_DEFAULTS, launch
from tests.runtime.test_parallel import make_cfg

REPO = Path(__file__).resolve().parents[2]


def _report(ctx, cfg):
    """The draft leader sends one message; rank 0 reports what the launcher set up."""
    ch = LeaderChannel(ctx, 4)
    got = None
    if ctx.role == "draft":
        ch.send(Stop(7, 1))
    else:
        got = ch.recv()
    ch.close()
    return {"rank": ctx.rank, "world_size": ctx.world_size, "role": ctx.role, "launcher": ctx.extra["launcher"],
            "local_size": os.environ.get("LOCAL_SIZE"), "got": [got.request_id, got.iteration] if got else None,
            "nvls": {k: os.environ.get(k) for k in COMM_ENV_DEFAULTS}}


def _fail_on_draft(ctx, cfg):
    """The draft raises while the target leader waits (60 s deadline) for its message."""
    if ctx.role == "draft":
        raise ValueError("draft exploded")
    LeaderChannel(ctx, 4).recv()


def _raise_in_process(ctx, cfg):
    raise KeyError("no such request")


def _run_script(args: list[str]) -> None:
    (mode,) = [a for a in args if not a.startswith("--local_rank")]  # deepspeed adds --local_rank=N
    fn = _report if mode == "ok" else _fail_on_draft
    result = launch(fn, make_cfg(1, 1, timeout_s=60.0))
    if result is not None:
        print("RESULT " + json.dumps(result), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_SIZE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(REPO), **extra)
    return env


def _torchrun(mode: str) -> tuple[subprocess.CompletedProcess[str], float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "tests.runtime.test_launch", mode]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    return proc, time.monotonic() - start


def _result_line(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("RESULT "):])


def test_torchrun_runs_both_ranks_and_returns_rank0_result():
    proc, _ = _torchrun("ok")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = _result_line(proc.stdout)
    assert res["rank"] == 0 and res["world_size"] == 2 and res["role"] == "target"
    assert res["launcher"] == "torchrun"
    assert res["got"] == [7, 1]  # the draft leader's message arrived
    assert res["local_size"] == "2"  # set for DeepSpeed from LOCAL_WORLD_SIZE
    assert res["nvls"] == COMM_ENV_DEFAULTS


@pytest.mark.slow
def test_torchrun_failing_rank_exits_nonzero_promptly():
    proc, elapsed = _torchrun("fail")
    assert proc.returncode != 0
    assert "rank 1 (draft) failed: ValueError: draft exploded" in proc.stderr
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_deepspeed_style_environment():
    """What the `deepspeed` launcher sets up, without its import cost: one process per rank with RANK,
    LOCAL_RANK, LOCAL_SIZE, CROSS_RANK, MASTER_ADDR/PORT and a leading `--local_rank=N` argument."""
    port = str(_free_port())
    procs = []
    for rank in range(2):
        env = _env(RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank), LOCAL_SIZE="2", CROSS_RANK="0",
                   CROSS_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        cmd = [sys.executable, "-m", "tests.runtime.test_launch", f"--local_rank={rank}", "ok"]
        procs.append(subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-2000:] + outs[1][1][-2000:]
    res = _result_line(outs[0][0])
    assert res["launcher"] == "deepspeed" and res["world_size"] == 2 and res["got"] == [7, 1]
    assert "RESULT" not in outs[1][0]  # only rank 0 returns a result


@pytest.mark.slow
def test_deepspeed_launcher():
    """The per-node launcher the `deepspeed` command runs: RANK/LOCAL_RANK/LOCAL_SIZE/CROSS_RANK/... in the
    environment and a `--local_rank=N` argument in front of the script's own (the script drops it)."""
    world_info = base64.urlsafe_b64encode(json.dumps({"localhost": [0, 1]}).encode()).decode()
    cmd = [sys.executable, "-m", "deepspeed.launcher.launch", f"--world_info={world_info}", "--node_rank=0",
           "--master_addr=127.0.0.1", f"--master_port={_free_port()}", "--module", "tests.runtime.test_launch", "ok"]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    res = _result_line(proc.stdout)  # only rank 0 prints a result
    assert res["launcher"] == "deepspeed" and res["world_size"] == 2 and res["got"] == [7, 1]
    assert res["local_size"] == "2"


def test_single_rank_failure_names_the_rank():
    with pytest.raises(RuntimeError, match=r"^rank 0 \(target\) failed: KeyError: 'no such request'$"):
        launch(_raise_in_process, make_cfg(1, 0))


def test_spawn_needs_a_module_level_function():
    with pytest.raises(TypeError, match="module-level function"):
        launch(lambda ctx, cfg: None, make_cfg(1, 1))


if __name__ == "__main__":
    _run_script(sys.argv[1:])


@pytest.mark.parametrize(
    ("device", "cuda", "omp", "expected"),
    [
        ("auto", True, None, 1),  # GPU rank: one thread (host bookkeeping only)
        ("cuda", True, None, 1),
        ("auto", False, None, 4),  # CPU ranks share the 8 cores between 2 ranks
        ("cpu", True, None, 4),
        ("auto", True, "3", None),  # OMP_NUM_THREADS set: torch keeps what it read
    ],
)
def test_host_threads(monkeypatch, device, cuda, omp, expected):
    import runtime.launch as launch_mod

    monkeypatch.setattr(launch_mod.torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(launch_mod.os, "cpu_count", lambda: 8)
    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert launch_mod.host_threads(make_cfg(1, 1, device=device).parallel, ranks_on_host=2) == expected
