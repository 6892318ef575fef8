"""The GEMM + all-reduce section of bench/bench_kernels.py: TP = 2 in two spawned processes (NCCL), Triton GEMM +
one-shot symmetric-memory all-reduce vs cuBLAS + NCCL all_reduce, eager and inside CUDA graphs, M 1/4/8/16 on
Llama-3-8B o_proj / down_proj shards, a stress run of back-to-back calls, and (opt-in) a tile-config sweep.
Fixed iteration counts timed with CUDA events (adaptive counts could differ between ranks and deadlock a
collective); weight copies rotate past L2. Skipped with a note on a one-GPU machine."""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import tempfile
import time
import traceback

import torch

from bench.kernel_bench_common import BF16_TOL, ERRORS, HBM_PEAK_GBS, NCCL_ENV, gbs, max_err, record

GEMM_AR_ITERS = 200
GEMM_AR_TIMEOUT_S = 150
GEMM_AR_SHAPES = {"o_proj_tp2": (4096, 2048), "down_proj_tp2": (4096, 7168)}  # (N, K shard) Llama-3-8B TP=2


def _time_events(fn, iters: int) -> float:
    """Mean ms per call over ``iters`` back-to-back calls (same count on every rank)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


GEMM_AR_TUNE = [  # (protocol, block_n, block_k, num_warps, num_stages)
    ("ll", 32, 256, 4, 4), ("ll", 32, 128, 4, 4), ("ll", 32, 512, 8, 3), ("ll", 64, 256, 8, 3),
    ("barrier", 32, 256, 4, 4),
]


def _gemm_ar_tune(rank, world, dev, group, rows) -> None:
    """Graph-replay time of the fused kernel per tile config, plus a K=128 shape (the exchange floor)."""
    from kernels import gemm_allreduce
    from kernels.gemm_allreduce import SYMM_CONFIG

    for shape_name, (n, k) in {**GEMM_AR_SHAPES, "comm_floor": (4096, 128)}.items():
        x = torch.randn(8, k, device=dev, dtype=torch.bfloat16)
        copies = max(2, math.ceil(100 * 2**20 / (n * k * 2)))
        ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) for _ in range(copies)]
        out = torch.empty(8, n, device=dev, dtype=torch.bfloat16)
        for proto, bn, bk, warps, stages in GEMM_AR_TUNE:
            SYMM_CONFIG.update(protocol=proto, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages)
            for w in ws[:2]:
                gemm_allreduce(x, w, group, method="symm_mem", out=out)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for w in ws:
                    gemm_allreduce(x, w, group, method="symm_mem", out=out)
            graph.replay()
            torch.cuda.synchronize()
            dist_barrier(group)
            ms = _time_events(graph.replay, 20) / copies
            rows.append(dict(shape=f"{shape_name} M8", provider=f"{proto} bn{bn} bk{bk} w{warps} s{stages}",
                             us=ms * 1e3, gbs=gbs(n * k * 2, ms)))
            del graph
            torch.cuda.synchronize()
            dist_barrier(group)


def dist_barrier(group) -> None:
    import torch.distributed as dist

    dist.barrier(group=group)


def _gemm_ar_stress(dev, group, rank: int, calls: int = 300) -> dict:
    """Back-to-back fused calls with fresh inputs each time (races between calls would show here)."""
    import torch.distributed as dist

    from kernels import gemm_allreduce

    gen = torch.Generator(device=dev).manual_seed(99 + rank)
    n, k = GEMM_AR_SHAPES["o_proj_tp2"]
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) / k**0.5
    xs = torch.randn(calls, 16, k, device=dev, dtype=torch.bfloat16, generator=gen)
    outs = torch.empty(calls, 16, n, device=dev, dtype=torch.bfloat16)
    for i in range(calls):
        gemm_allreduce(xs[i, : 1 + i % 16], w, group, method="symm_mem", out=outs[i, : 1 + i % 16])
    want = (xs.float() @ w.float().t()).contiguous()
    dist.all_reduce(want, group=group)
    err = max(max_err(outs[i, : 1 + i % 16], want[i, : 1 + i % 16]) for i in range(calls))
    return dict(shape=f"o_proj_tp2 stress {calls} calls, M 1..16", provider="symm_mem_eager", max_err=err,
                ok=err <= BF16_TOL * max(1.0, want.abs().max().item()))


def _gemm_ar_worker(rank: int, world: int, port: int, out_path: str, quick: bool, tune: bool = False) -> None:
    import torch.distributed as dist

    from kernels import gemm_allreduce
    from kernels.gemm_allreduce import prepare_gemm_allreduce

    os.environ.update(NCCL_ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    rows, errors = [], []
    try:
        group = dist.new_group(list(range(world)))
        dist.all_reduce(torch.ones(1, device=dev), group=group)  # NCCL communicator up before any capture
        if tune:
            _gemm_ar_tune(rank, world, dev, group, rows)
            return
        l2_bytes = 2 * 50 * 2**20
        for shape_name, (n, k) in GEMM_AR_SHAPES.items():
            prepare_gemm_allreduce(group, n, dev)
            copies = max(2, math.ceil(l2_bytes / (n * k * 2)))  # rotate weights: > 2x L2 in flight
            gen = torch.Generator(device=dev).manual_seed(10 + rank)
            ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16, generator=gen) / k**0.5 for _ in range(copies)]
            for m in (1, 4, 8, 16):
                x = torch.randn(m, k, device=dev, dtype=torch.bfloat16, generator=gen)
                want = (x.float() @ ws[0].float().t()).contiguous()
                dist.all_reduce(want, group=group)
                tol = BF16_TOL * max(1.0, want.abs().max().item())  # bf16 eps x output scale (x2 roundings)
                got = gemm_allreduce(x, ws[0], group, method="symm_mem")
                err_symm = max_err(got, want)
                got_nccl = gemm_allreduce(x, ws[0], group, method="nccl")
                err_nccl = max_err(got_nccl, want)
                outs = {p: torch.empty(m, n, device=dev, dtype=torch.bfloat16) for p in ("symm_mem", "nccl")}
                counter = [0]

                def call(method, counter=counter, x=x, outs=outs, ws=ws, copies=copies):
                    w = ws[counter[0] % copies]
                    counter[0] += 1
                    gemm_allreduce(x, w, group, method=method, out=outs[method])

                nbytes = n * k * 2 + m * k * 2 + m * n * 2
                for method in ("nccl", "symm_mem"):
                    for _ in range(10):
                        call(method)
                    torch.cuda.synchronize()
                    dist.barrier(group=group)
                    ms = _time_events(lambda method=method: call(method), GEMM_AR_ITERS)
                    err = err_symm if method == "symm_mem" else err_nccl
                    rows.append(dict(shape=f"{shape_name} M{m}", provider=f"{method}_eager", us=ms * 1e3,
                                     gbs=gbs(nbytes, ms), max_err=err, ok=err <= tol))
                    graph = torch.cuda.CUDAGraph()
                    reps = 2 * copies
                    with torch.cuda.graph(graph):
                        for _ in range(reps):
                            call(method)
                    graph.replay()
                    torch.cuda.synchronize()
                    dist.barrier(group=group)
                    ms = _time_events(graph.replay, 20) / reps
                    last = ws[(counter[0] - 1) % copies]  # weight of the graph's final call
                    want_last = (x.float() @ last.float().t()).contiguous()
                    dist.all_reduce(want_last, group=group)
                    err = max_err(outs[method], want_last)
                    rows.append(dict(shape=f"{shape_name} M{m}", provider=f"{method}_graph", us=ms * 1e3,
                                     gbs=gbs(nbytes, ms), max_err=err, ok=err <= tol))
                    torch.cuda.synchronize()
                    dist.barrier(group=group)
                    del graph
        rows.append(_gemm_ar_stress(dev, group, rank))
    except Exception as exc:
        errors.append({"section": "gemm_allreduce", "rank": rank, "error": repr(exc),
                       "traceback": traceback.format_exc()})
        traceback.print_exc()
    finally:
        if rank == 0 or errors:
            with open(f"{out_path}.rank{rank}", "w") as f:
                json.dump({"rows": rows, "errors": errors}, f)
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def section_gemm_allreduce(dev, quick: bool, tune: bool = False) -> None:
    import torch.multiprocessing as mp

    world = 2
    if torch.cuda.device_count() < world:
        record("gemm_allreduce", shape="-", provider="skipped",
               note=f"needs {world} GPUs, found {torch.cuda.device_count()}")
        return
    os.environ.update(NCCL_ENV)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "gemm_ar.json")
        ctx = mp.start_processes(_gemm_ar_worker, args=(world, port, out_path, quick, tune), nprocs=world,
                                 start_method="spawn", join=False)
        deadline = time.time() + GEMM_AR_TIMEOUT_S
        try:
            while not ctx.join(timeout=5):
                if time.time() > deadline:
                    for p in ctx.processes:
                        p.kill()
                    raise TimeoutError(f"gemm_allreduce workers still running after {GEMM_AR_TIMEOUT_S}s (deadlock?)")
        finally:
            for rank in range(world):
                path = f"{out_path}.rank{rank}"
                if os.path.exists(path):
                    with open(path) as f:
                        res = json.load(f)
                    for row in res["rows"]:
                        if isinstance(row.get("gbs"), float):
                            row["pct_peak"] = 100 * row["gbs"] / HBM_PEAK_GBS
                        record("gemm_allreduce_tune" if tune else "gemm_allreduce", **row)
                    ERRORS.extend(res["errors"])
