"""Shared pieces of the kernel benchmarks (bench/bench_kernels.py, bench/bench_gemm_allreduce.py): the H200
constants, the result rows and errors of one run, timing and error helpers."""

from __future__ import annotations

import torch

HBM_PEAK_GBS = 4290.0  # measured copy ceiling, H200 SXM (reference/device-h200.md)
BF16_TOL = 1.6e-2  # 2 x bf16 eps (7.81e-3), as tests/tolerances.py
FP32_TOL = 1e-4  # fp32 inputs; GPU tl.dot (ieee) and cuBLAS reduce in different orders
LLAMA3_8B = dict(hidden=4096, inter=14336, hq=32, hkv=8, head_dim=128, layers=32)
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

ROWS: list[dict] = []
ERRORS: list[dict] = []


def record(section: str, **row) -> None:
    row = {"section": section, **row}
    ROWS.append(row)
    shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in row.items()}
    print("  " + " ".join(f"{k}={v}" for k, v in shown.items()), flush=True)


def bench_ms(fn, graph: bool = False) -> float:
    import triton.testing

    if graph:
        with torch.cuda.stream(torch.cuda.Stream()):
            return triton.testing.do_bench_cudagraph(fn, rep=50, return_mode="median")
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def run_providers(section: str, shape: str, providers: dict, nbytes: float | None) -> None:
    """Time each provider (name -> (fn, in_cuda_graph)); a failing provider is reported, not fatal."""
    for name, (fn, graph) in providers.items():
        try:
            fn()
            ms = bench_ms(fn, graph=graph)
            row = dict(shape=shape, provider=name, us=ms * 1e3)
            if nbytes:
                row.update(gbs=gbs(nbytes, ms), pct_peak=100 * gbs(nbytes, ms) / HBM_PEAK_GBS)
            record(section, **row)
        except Exception as exc:
            ERRORS.append({"section": section, "shape": shape, "provider": name, "error": repr(exc)})
            print(f"  {section} {shape} {name} failed: {exc!r}", flush=True)


def gbs(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b.double()).abs().max().item()
