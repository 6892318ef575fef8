"""gemm_allreduce on CPU: the matmul + all_reduce fallback over gloo (2 spawned processes), and guards.

The symmetric-memory fast path needs CUDA peer memory; it is exercised by bench/bench_kernels.py on GPUs.
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels import gemm_allreduce
from kernels.reference import gemm_allreduce_ref
from tests.tolerances import assert_close

WORLD = 2
M, K, N = 3, 24, 40  # per-rank K shard


def _shard(rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(M, K, generator=g), torch.randn(N, K, generator=g)


def _worker(rank: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        group = dist.new_group(list(range(WORLD)))
        x, w = _shard(rank)
        y_auto = gemm_allreduce(x, w, group)  # auto -> nccl-style fallback on CPU (gloo)
        y_nccl = gemm_allreduce(x, w, group, method="nccl")
        y_ref = gemm_allreduce_ref(x, w, group)
        torch.save({"auto": y_auto, "nccl": y_nccl, "ref": y_ref}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_fallback_all_reduces_over_gloo(free_port):
    with tempfile.TemporaryDirectory() as tmp:
        mp.start_processes(_worker, args=(free_port, tmp), nprocs=WORLD, start_method="spawn", join=True)
        results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    expected = sum(x.double() @ w.double().t() for x, w in (_shard(r) for r in range(WORLD))).float()
    for rank, res in enumerate(results):
        for name in ("auto", "nccl", "ref"):
            assert_close(res[name], expected, torch.float32, reduction=WORLD * K, what=f"rank {rank} {name}")


def test_no_group_is_a_plain_matmul():
    x, w = _shard(0)
    assert_close(gemm_allreduce(x, w, None), x @ w.t(), torch.float32, reduction=K, what="group=None")


def test_symm_mem_path_refuses_cpu_tensors():
    x, w = _shard(0)
    with pytest.raises(RuntimeError, match="needs CUDA"):
        gemm_allreduce(x, w, None, method="symm_mem")
    with pytest.raises(ValueError, match="unknown method"):
        gemm_allreduce(x, w, None, method="nvls")
