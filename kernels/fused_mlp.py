"""Fused SwiGLU: silu(x @ w_gate.T) * (x @ w_up.T) in one tile kernel (reference: ``swiglu_ref``).

Each program computes the *same* [BLOCK_M, BLOCK_I] output tile of both GEMMs, so every x tile is loaded
once for both, and the activation and product are applied in registers before the only store: the
[M, I] gate and up intermediates never touch HBM (SwiftSpec §3.4, "fused SwiGLU").

Roofline (decode, M <= 64): weights dominate. Llama-3-8B at TP=1 (K=4096, I=14336, bf16) streams
2 * I * K * 2 B = 235 MB per call, 55 us at 4.29 TB/s; x and the output are < 2 MB. Intensity is
~M FLOP/B, far below the H200's ~200 FLOP/B ridge, so the kernel is bandwidth-bound and the tile shape
is chosen to spread I over enough programs (BLOCK_I=64 -> 224 programs for I=14336) with a deep
software pipeline over K. For M >= 128 a real GEMM (cuBLAS on a concatenated gate_up weight) wins;
the paper sees the same loss at 70B (Table 8).

FP8 weights (``weight_bits=8``, ``kernels.skinny_linear.quantize_rows_fp8``): w_gate / w_up float8 e4m3 with one
float32 scale per intermediate row (``scale_gate`` / ``scale_up``); the tiles are converted after the load as in
``kernels.skinny_linear.fp8_operands`` (the dots in fp16) and each accumulator is scaled by its rows' scales before
the activation. Half the weight bytes stream.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, pdl_start
from kernels.skinny_linear import fp8_operands

BLOCK_I = 64
"""Intermediate columns per program (the default tile; `block_i` overrides it per call): 224 programs for the 8B's
I = 14336, 128 for the 1B's 8192."""
BLOCK_K = 128
"""K elements per step (at most next_pow2(K); `block_k` overrides it per call)."""
FP8_TILES: dict[tuple[int, int, int], dict[str, int]] = {
    (8192, 2048, 16): {"block_i": 64, "block_k": 256},
    (14336, 4096, 16): {"block_i": 64, "block_k": 128},
}
"""(I, K, m_bucket) -> {block_i, block_k} of fp8 weights (`scale_gate` / `scale_up`), in place of BLOCK_I / BLOCK_K:
bench/bench_fp8_tiles.py on the H200: the 1B's K step 256 (~6% per call at M 1); the 8B's is the default tile. Measured
in the step with kernels.skinny_linear.FP8_CONFIGS (its comment)."""


@triton.jit
def _swiglu_kernel(
    X, Wg, Wu, Sg, Su, Out, M, I, K,
    stride_xm, stride_wgi, stride_wui, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr, HAS_SCALE: tl.constexpr,
):
    pdl_start(USE_PDL)
    pid_i = tl.program_id(0)  # fastest axis: neighbouring programs stream neighbouring weight rows
    pid_m = tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    ri = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    i_ok = ri < I
    acc_g = tl.zeros([BLOCK_M, BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_I], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < K
        x = tl.load(X + rm[:, None] * stride_xm + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        wg = tl.load(Wg + ri[None, :] * stride_wgi + kk[:, None], mask=i_ok[None, :] & k_ok[:, None], other=0.0)
        wu = tl.load(Wu + ri[None, :] * stride_wui + kk[:, None], mask=i_ok[None, :] & k_ok[:, None], other=0.0)
        if HAS_SCALE:  # fp8 weights: converted in registers, the dots in fp16 (kernels.skinny_linear.fp8_operands)
            wg, xh = fp8_operands(wg, x)
            wu, _ = fp8_operands(wu, x)  # the same x conversion (left to dead-code elimination)
            x = xh
        if UPCAST:
            x = x.to(tl.float32)
            wg = wg.to(tl.float32)
            wu = wu.to(tl.float32)
        acc_g = tl.dot(x, wg, acc_g, input_precision=DOT_PRECISION)
        acc_u = tl.dot(x, wu, acc_u, input_precision=DOT_PRECISION)
    if HAS_SCALE:  # each intermediate row's scale, on the float32 accumulators before the activation
        acc_g = acc_g * tl.load(Sg + ri, mask=i_ok, other=0.0)[None, :]
        acc_u = acc_u * tl.load(Su + ri, mask=i_ok, other=0.0)[None, :]
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u  # silu(g) * u in fp32
    if Out.dtype.element_ty == tl.float16:  # an fp16 output (the next fp8 GEMM's input) saturates, never inf
        h = tl.minimum(tl.maximum(h, -65504.0), 65504.0)
    out_ok = m_ok[:, None] & i_ok[None, :]
    tl.store(Out + rm[:, None] * stride_om + ri[None, :], h.to(Out.dtype.element_ty), mask=out_ok)


def swiglu(
    x: torch.Tensor,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    block_m: int | None = None,
    block_i: int | None = None,
    block_k: int | None = None,
    scale_gate: torch.Tensor | None = None,
    scale_up: torch.Tensor | None = None,
    fp8_tiles: Mapping[tuple[int, int, int], dict[str, int]] = FP8_TILES,
) -> torch.Tensor:
    """silu(x @ w_gate.T) * (x @ w_up.T) with x [M,K], w_gate/w_up [I,K]; returns [M,I] in x.dtype.

    ``out`` is an optional [M, I] buffer; ``block_*`` override the tile heuristic (tests, benchmarks).
    ``scale_gate`` / ``scale_up``: the weights are float8 e4m3 with these float32 row scales [I] (both or neither).
    ``fp8_tiles``: the tiles of fp8 weights per (I, K, BLOCK_M) (default the tuned FP8_TILES; a sweep passes its own).
    """
    m, k = x.shape
    i = w_gate.shape[0]
    if w_gate.shape != (i, k) or w_up.shape != (i, k):
        raise ValueError(f"swiglu: weights must be [I,K={k}], got {tuple(w_gate.shape)}, {tuple(w_up.shape)}")
    fp8 = torch.float8_e4m3fn
    scaled = scale_gate is not None or scale_up is not None
    if scaled or w_gate.dtype == fp8 or w_up.dtype == fp8:
        for name, w, sc in (("gate", w_gate, scale_gate), ("up", w_up, scale_up)):
            if w.dtype != fp8 or sc is None or sc.dtype != torch.float32 or tuple(sc.shape) != (i,) \
                    or sc.stride(0) != 1 or sc.device != x.device or w.device != x.device:
                got = "None" if sc is None else f"{sc.dtype} {list(sc.shape)} on {sc.device}"
                raise ValueError(f"swiglu: fp8 weights need both scales: w_{name} must be {fp8} on {x.device} "
                                 f"(got {w.dtype} on {w.device}) and scale_{name} a contiguous float32 [{i}] tensor "
                                 f"on {x.device} (got {got})")
    elif w_gate.dtype != x.dtype or w_up.dtype != x.dtype:
        raise ValueError(f"swiglu: the weights ({w_gate.dtype}, {w_up.dtype}) must match x ({x.dtype})")
    if x.stride(-1) != 1 or w_gate.stride(-1) != 1 or w_up.stride(-1) != 1:
        raise ValueError("swiglu: x and the weights need a contiguous last dim")
    if out is None:
        out = torch.empty(m, i, dtype=x.dtype, device=x.device)
    if m == 0:
        return out
    upcast = x.device.type == "cpu"
    bm = block_m or min(64, max(16, triton.next_power_of_2(m)))
    tile = fp8_tiles.get((i, k, bm), {}) if scaled else {}
    bi = block_i or tile.get("block_i", BLOCK_I)
    bk = block_k or tile.get("block_k", min(BLOCK_K, max(16, triton.next_power_of_2(k))))
    grid = (triton.cdiv(i, bi), triton.cdiv(m, bm))
    _swiglu_kernel[grid](
        x, w_gate, w_up, w_gate if scale_gate is None else scale_gate, w_up if scale_up is None else scale_up,
        out, m, i, k,
        x.stride(0), w_gate.stride(0), w_up.stride(0), out.stride(0),
        BLOCK_M=bm, BLOCK_I=bi, BLOCK_K=bk, HAS_SCALE=scaled,
        UPCAST=upcast, DOT_PRECISION="ieee" if (upcast or x.dtype == torch.float32) else "tf32",
        num_warps=4, num_stages=4, **pdl_options(x.device, "gemm"),
    )
    return out
