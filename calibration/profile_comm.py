"""The comm section of calibration/profile_ops.py: collectives and messages between 2 ranks.

`comm_worker` (the `--comm-worker` subprocess of profile_ops.py) spawns 2 ranks with `runtime.launch`; both
run `comm_rank`, the same calls in the same order, and rank 0 appends one JSON row per measurement to a file
that `profile_ops.section_comm` turns into trace records:

| record       | what                                                                                    |
|--------------|-----------------------------------------------------------------------------------------|
| op.allreduce | all-reduce of AR_BYTES, eager (CUDA events over AR_ITERS back-to-back calls) and inside |
|              | a CUDA graph of AR_GRAPH_CALLS calls (GPU only)                                         |
| op.p2p       | raw torch.distributed send/recv ping-pong (one way = RTT / 2)                           |
| op.message   | the runtime's LeaderChannel ping-pong with MSG_NODES-node messages; again over the Unix   |
|              | socket (UnixLeaderChannel, transport UNIX_TRANSPORT) when the two ranks share a host      |
"""

from __future__ import annotations

import json
import socket
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

AR_BYTES = (16, 256, 1024, 8192, 65536, 262144, 1 << 20, 4 << 20, 16 << 20)
AR_ITERS, AR_GRAPH_CALLS, AR_GRAPH_REPLAYS = 50, 10, 5
P2P_BYTES = (16, 1024, 65536, 1 << 20)
MSG_NODES = (4, 16, 64, 256, 1024)
UNIX_TRANSPORT = "runtime.unix_channel.UnixLeaderChannel"
"""`transport` of the Unix-socket message records (calibrate.py fits them as the `message_unix` operator)."""
QUICK = {"ar_bytes": (16, 4096), "p2p_bytes": (16, 1024), "msg_nodes": (4, 16)}
"""--quick (CPU smoke test): a few small sizes."""


def _append_row(path: str, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def comm_rank(ctx: Any, cfg: Any, rows_path: str = "", quick: bool = False) -> None:
    """Both ranks run the same calls in the same order; rank 0 appends one JSON row per measurement."""
    import torch.distributed as dist

    from runtime.comm import LeaderChannel
    from runtime.unix_channel import UnixLeaderChannel

    dev, cuda = ctx.device, ctx.device.type == "cuda"
    group = ctx.world_group
    dtype = torch.bfloat16 if cuda else torch.float32
    elt = torch.tensor([], dtype=dtype).element_size()
    me = ctx.rank

    def out(row: dict[str, Any]) -> None:
        if me == 0:
            _append_row(rows_path, row)

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    def fence() -> None:  # both ranks past this point, device idle
        sync()
        dist.all_reduce(torch.zeros(1, device=dev), group=group)
        sync()

    def timed(fn: Callable[[], Any], iters: int) -> float:
        fence()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3 / iters
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - t) / iters

    ar_bytes = QUICK["ar_bytes"] if quick else AR_BYTES
    for nbytes in ar_bytes:  # 1. all-reduce, eager
        x = torch.zeros(max(1, nbytes // elt), dtype=dtype, device=dev)
        for _ in range(5):
            dist.all_reduce(x, group=group)
        s = timed(lambda x=x: dist.all_reduce(x, group=group), AR_ITERS)
        out({"name": "op.allreduce", "seconds": s, "bytes": x.numel() * elt, "mode": "eager", "iters": AR_ITERS})

    for nbytes in (QUICK["p2p_bytes"] if quick else P2P_BYTES):  # 2. raw send/recv ping-pong
        a = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        b = torch.zeros_like(a)
        rtts = []
        fence()
        for r in range(25):
            t = time.perf_counter()
            if me == 0:
                dist.send(a, dst=1)
                dist.recv(b, src=1)
            else:
                dist.recv(b, src=0)
                dist.send(a, dst=0)
            sync()
            if r >= 5:
                rtts.append(time.perf_counter() - t)
        out({"name": "op.p2p", "seconds": statistics.median(rtts) / 2, "bytes": a.numel() * 4,
             "transport": "torch.distributed send/recv", "rounds": len(rtts)})

    # 3. the runtime's leader channel: over torch.distributed, and over a Unix socket when the two ranks share a host
    hosts: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(hosts, socket.gethostname(), group=group)
    channels = [(LeaderChannel, "runtime.comm.LeaderChannel")]
    if len(set(hosts)) == 1:
        channels.append((UnixLeaderChannel, UNIX_TRANSPORT))
    for channel, transport in channels:
        for nodes in (QUICK["msg_nodes"] if quick else MSG_NODES):
            fence()
            ch = channel(ctx, max_nodes=nodes, timeout_s=30.0)
            rtts = ch.ping_pong(num_rounds=30)
            ch.close()
            if rtts:
                out({"name": "op.message", "seconds": statistics.median(rtts[5:]) / 2, "bytes": ch.wire_bytes,
                     "max_nodes": nodes, "transport": transport, "rounds": len(rtts) - 5})

    if cuda:  # 4. all-reduce inside a CUDA graph (last: the riskiest part)
        for nbytes in ar_bytes:
            x = torch.zeros(max(1, nbytes // elt), dtype=dtype, device=dev)
            fence()
            stream = torch.cuda.Stream(dev)
            stream.wait_stream(torch.cuda.current_stream(dev))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    dist.all_reduce(x, group=group)
            torch.cuda.current_stream(dev).wait_stream(stream)
            fence()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(AR_GRAPH_CALLS):
                    dist.all_reduce(x, group=group)
            graph.replay()
            s = timed(graph.replay, AR_GRAPH_REPLAYS) / AR_GRAPH_CALLS
            out({"name": "op.allreduce", "seconds": s, "bytes": x.numel() * elt, "mode": "graph",
                 "calls_per_graph": AR_GRAPH_CALLS})
            del graph
    fence()


def comm_worker(rows_path: str, device: str, quick: bool) -> int:
    """Subprocess entry: spawn 2 ranks (runtime.launch) that run `comm_rank`."""
    from conf.schema import ExperimentConfig, ParallelConfig, SpecConfig, freeze
    from runtime.launch import launch

    cfg = ExperimentConfig(parallel=ParallelConfig(target_gpus=1, draft_gpus=1, device=device, timeout_s=60.0),
                           spec=SpecConfig(mode="autoregressive"), run_name="profile_comm")
    cfg.validate()
    import calibration.profile_comm as this  # spawned ranks import the rank function by module name

    launch(partial(this.comm_rank, rows_path=rows_path, quick=quick), freeze(cfg))
    return 0
