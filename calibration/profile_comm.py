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


class _CommBench:
    """One rank's side of the communication profile: both ranks make the same calls in the same order; rank 0
    appends one JSON row per measurement to `rows_path`."""

    def __init__(self, ctx: Any, rows_path: str) -> None:
        self.ctx, self.rows_path = ctx, rows_path
        self.dev, self.cuda = ctx.device, ctx.device.type == "cuda"
        self.group, self.me = ctx.world_group, ctx.rank
        self.dtype = torch.bfloat16 if self.cuda else torch.float32
        self.elt = torch.tensor([], dtype=self.dtype).element_size()

    def out(self, row: dict[str, Any]) -> None:
        if self.me == 0:
            _append_row(self.rows_path, row)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.dev)

    def fence(self) -> None:
        """Both ranks past this point, the device idle."""
        import torch.distributed as dist

        self.sync()
        dist.all_reduce(torch.zeros(1, device=self.dev), group=self.group)
        self.sync()

    def timed(self, fn: Callable[[], Any], iters: int) -> float:
        """Seconds per call of `fn` over `iters` calls after a fence (CUDA events on a GPU, else the host clock)."""
        self.fence()
        if self.cuda:
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

    def allreduce_eager(self, ar_bytes: Any) -> None:
        import torch.distributed as dist

        for nbytes in ar_bytes:
            x = torch.zeros(max(1, nbytes // self.elt), dtype=self.dtype, device=self.dev)
            for _ in range(5):
                dist.all_reduce(x, group=self.group)
            s = self.timed(lambda x=x: dist.all_reduce(x, group=self.group), AR_ITERS)
            self.out({"name": "op.allreduce", "seconds": s, "bytes": x.numel() * self.elt, "mode": "eager",
                      "iters": AR_ITERS})

    def p2p(self, p2p_bytes: Any) -> None:
        """Raw send/recv ping-pong: half the median round trip."""
        import torch.distributed as dist

        for nbytes in p2p_bytes:
            a = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=self.dev)
            b = torch.zeros_like(a)
            rtts = []
            self.fence()
            for r in range(25):
                t = time.perf_counter()
                if self.me == 0:
                    dist.send(a, dst=1)
                    dist.recv(b, src=1)
                else:
                    dist.recv(b, src=0)
                    dist.send(a, dst=0)
                self.sync()
                if r >= 5:
                    rtts.append(time.perf_counter() - t)
            self.out({"name": "op.p2p", "seconds": statistics.median(rtts) / 2, "bytes": a.numel() * 4,
                      "transport": "torch.distributed send/recv", "rounds": len(rtts)})

    def leader_channels(self, msg_nodes: Any) -> None:
        """The runtime's leader channel: over torch.distributed, and over a Unix socket when both ranks share a host."""
        import torch.distributed as dist

        from runtime.comm import LeaderChannel
        from runtime.unix_channel import UnixLeaderChannel

        hosts: list[Any] = [None] * self.ctx.world_size
        dist.all_gather_object(hosts, socket.gethostname(), group=self.group)
        channels = [(LeaderChannel, "runtime.comm.LeaderChannel")]
        if len(set(hosts)) == 1:
            channels.append((UnixLeaderChannel, UNIX_TRANSPORT))
        for channel, transport in channels:
            for nodes in msg_nodes:
                self.fence()
                ch = channel(self.ctx, max_nodes=nodes, timeout_s=30.0)
                rtts = ch.ping_pong(num_rounds=30)
                ch.close()
                if rtts:
                    self.out({"name": "op.message", "seconds": statistics.median(rtts[5:]) / 2,
                              "bytes": ch.wire_bytes, "max_nodes": nodes, "transport": transport,
                              "rounds": len(rtts) - 5})

    def allreduce_graph(self, ar_bytes: Any) -> None:
        """All-reduce inside a CUDA graph, AR_GRAPH_CALLS per graph."""
        import torch.distributed as dist

        for nbytes in ar_bytes:
            x = torch.zeros(max(1, nbytes // self.elt), dtype=self.dtype, device=self.dev)
            self.fence()
            stream = torch.cuda.Stream(self.dev)
            stream.wait_stream(torch.cuda.current_stream(self.dev))
            with torch.cuda.stream(stream):
                for _ in range(3):
                    dist.all_reduce(x, group=self.group)
            torch.cuda.current_stream(self.dev).wait_stream(stream)
            self.fence()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(AR_GRAPH_CALLS):
                    dist.all_reduce(x, group=self.group)
            graph.replay()
            s = self.timed(graph.replay, AR_GRAPH_REPLAYS) / AR_GRAPH_CALLS
            self.out({"name": "op.allreduce", "seconds": s, "bytes": x.numel() * self.elt, "mode": "graph",
                      "calls_per_graph": AR_GRAPH_CALLS})
            del graph


def comm_rank(ctx: Any, cfg: Any, rows_path: str = "", quick: bool = False) -> None:
    """Both ranks run the same calls in the same order; rank 0 appends one JSON row per measurement: all-reduce
    (eager), send/recv, the leader channels, then all-reduce inside a CUDA graph (last: the riskiest part)."""
    bench = _CommBench(ctx, rows_path)
    ar_bytes = QUICK["ar_bytes"] if quick else AR_BYTES
    bench.allreduce_eager(ar_bytes)
    bench.p2p(QUICK["p2p_bytes"] if quick else P2P_BYTES)
    bench.leader_channels(QUICK["msg_nodes"] if quick else MSG_NODES)
    if bench.cuda:
        bench.allreduce_graph(ar_bytes)
    bench.fence()


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
