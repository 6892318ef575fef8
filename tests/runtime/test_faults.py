"""Faults (runtime/launch.py, spawn mode): one failing rank ends the whole run promptly, naming that rank.

The healthy ranks are blocked in cross-group receives and TP collectives with a long timeout (60 s), so a
prompt end proves that the launcher, not a timeout, stopped them. Each rank writes its pid into a folder
passed through `cfg.run_name` (a test-only use of a free-text label), so the test can check that no rank
process survives.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from conf.messages import DraftProposal
from conf.schema import freeze
from runtime.comm import LeaderChannel
from runtime.launch import launch
from tests.runtime.test_parallel import make_cfg

FAILING_RANK = {"raise": 2, "exit": 1, "sigkill": 0}


def _fail_mid_run(ctx, cfg):
    """Two good rounds of draft -> target messages and TP all-reduces, then one rank fails its own way."""
    folder, how = cfg.run_name.rsplit("|", 1)
    Path(folder, f"{ctx.rank}.pid").write_text(str(os.getpid()))
    ch = LeaderChannel(ctx, 8)
    for it in range(3):
        if it == 2 and ctx.rank == FAILING_RANK[how]:
            if how == "raise":
                raise ValueError("boom from the draft")
            if how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        if ctx.role == "draft":
            ch.send(DraftProposal.make_dummy(4))
        else:
            ch.recv()
            x = torch.ones(1)
            dist.all_reduce(x, group=ctx.tp_group)
    ch.close()
    return "unreachable"


@pytest.mark.parametrize(
    "how,expected",
    [("raise", "rank 2 (draft) failed: ValueError: boom from the draft"),
     ("exit", "rank 1 (target) failed: exited with code 3 without reporting an error"),
     ("sigkill", "rank 0 (target) failed: killed by SIGKILL without reporting an error")],
    ids=["raise", "os._exit", "sigkill"],
)
def test_failing_rank_stops_the_run(tmp_path, how, expected):
    cfg = freeze(dataclasses.replace(make_cfg(2, 1, timeout_s=60.0), run_name=f"{tmp_path}|{how}"))
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        launch(_fail_mid_run, cfg)
    elapsed = time.monotonic() - start
    first_line = str(info.value).splitlines()[0]
    assert first_line.startswith(expected), first_line
    assert elapsed < 30, f"took {elapsed:.1f} s"
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 3
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # reaped: no rank process is left behind


def _fail_on_gpu(ctx, cfg):
    """1 + 1 on GPUs: the target leader polls an NCCL receive (60 s deadline) while the draft raises."""
    ch = LeaderChannel(ctx, 8)
    if ctx.role == "draft":
        ch.send(DraftProposal.make_dummy(4))
        ch.close()
        raise ValueError("draft GPU rank exploded")
    ch.recv()
    ch.recv()  # never comes


@pytest.mark.multi_gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_failing_rank_stops_a_gpu_run():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"^rank 1 \(draft\) failed: ValueError: draft GPU rank exploded"):
        launch(_fail_on_gpu, make_cfg(1, 1, timeout_s=60.0, device="cuda"))
    assert time.monotonic() - start < 30
