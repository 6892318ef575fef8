"""bench/bench_kernels.py and its GEMM + all-reduce section on a machine without GPUs: a clear refusal, and the
two-process section records why it did not run (both share one result list: bench/kernel_bench_common.py)."""

from __future__ import annotations

import sys

import pytest
import torch

from bench import bench_kernels
from bench.bench_gemm_allreduce import section_gemm_allreduce
from bench.kernel_bench_common import ROWS


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="a machine with fewer than 2 GPUs")
def test_gemm_allreduce_section_records_its_skip_in_the_shared_rows():
    before = len(ROWS)
    section_gemm_allreduce(None, quick=True)
    assert ROWS[before:] == [{"section": "gemm_allreduce", "shape": "-", "provider": "skipped",
                              "note": f"needs 2 GPUs, found {torch.cuda.device_count()}"}]
    assert bench_kernels.SECTIONS["gemm_allreduce"] is section_gemm_allreduce
    del ROWS[before:]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_kernel_benchmark_refuses_without_cuda(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_kernels.py", "--quick"])
    assert bench_kernels.main() == 2
    assert "needs a CUDA GPU" in capsys.readouterr().out
