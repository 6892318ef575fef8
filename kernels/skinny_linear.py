"""Weight-streaming GEMM for decode-time projections: x [M, K] @ w.T, w [N, K] (nn.Linear layout), M <= 64.

    skinny_linear(x, w)                      -> [M, N] in x.dtype       (reference: ``skinny_linear_ref``)
    skinny_linear_partials(x, w, split_k)    -> [split_k, M, N] float32 (``skinny_linear_partials_ref``)
    skinny_linear(x, q, w_scale=s)           -> the same with ``q, s = quantize_rows_fp8(w)``: w ~ q * s[:, None]

FP8 weights (``model.<role>.weight_bits=8``): ``q`` float8 e4m3 [N, K] with one float32 scale per output row; every
program converts its weight tiles right after the load (``fp8_operands``), accumulates in float32 as for bf16 weights
and multiplies its columns by their scales before the store (each split-K partial too, so the partials still sum to
the product). Half the weight bytes of bf16 stream (weight-only quantization). The dot runs in fp16: the H200
converts e4m3 to fp16 in one instruction per two weights; a bf16 x tile is converted to fp16 in the kernel (clamped
to its range: exact for |x| in [2^-14, 65504]), which costs more than the bytes saved, so a bf16 model hands these
GEMMs fp16 inputs (runtime/model.py). Converting the weights to bf16 instead bounds the GEMMs by the converts, not the
bytes: of the ways measured on the 1B's one-row step only fp16 dots on fp16 inputs beat the bf16 weights (0.83 against
0.97 ms on the H200; docs/LOG.md).

Program (b, s) computes output columns [b*BLOCK_N, (b+1)*BLOCK_N) over K chunk s with one [BLOCK_M, BLOCK_N]
float32 accumulator (BLOCK_M = next_pow2(M), at least 16 for tl.dot), so every weight byte is read exactly
once; x ([M, K], <= 512 KiB) is re-read from L2 by every program. The N axis is the fastest grid axis, so
neighbouring programs stream neighbouring weight rows. With split_k = 1 the tile is rounded and stored to
the output; with split_k > 1 each program stores its float32 partial into a [split_k, M, N] workspace and
a small kernel sums the partials in split order and rounds once (or ``kernels.norm.add_rmsnorm_partials``
does that sum inside the next residual add + RMSNorm, saving the reduce launch). Split s covers K range
[s*C, min((s+1)*C, K)) with C = cdiv(cdiv(K, split_k), 16) * 16 (16-element aligned chunks).

Roofline (H200, bf16, 4.29 TB/s copy ceiling): intensity is ~M FLOP/B, far below the ~200 FLOP/B ridge, so
time = weight bytes / bandwidth. Llama-3-8B: qkv [6144, 4096] 50.3 MB -> 11.7 us, o [4096, 4096] 33.6 MB
-> 7.8 us, down [4096, 14336] 117 MB -> 27.4 us, lm_head [128256, 4096] 1.05 GB -> 245 us. cuBLAS reaches
~75% of the floor on qkv and ~70% on o at M <= 16 because it launches too few thread blocks for 132 SMs to
keep enough loads in flight; here the grid is sized to >= ~2 programs per SM (narrow N tiles, then
split-K). Split-K costs 2 * split_k * M * N * 4 B of partial traffic (0.5 MB for o at M=16, split 2:
~0.1 us) plus one launch, which the fused norm removes.

Alone the best tile per shape is 0.91-1.10x cuBLAS on the H200 (bench/bench_skinny.py, weights rotated out of L2:
at 8-30 us per call both are bound by launch ramp and tail, not by the grid). In the runtime's step it is faster
(``kernels.skinny``, with programmatic dependent launch: ``kernels/pdl.py``): the reduce launches go (partials summed
in ``add_rmsnorm_partials``) and every projection can be launched dependent, ~0.2 ms per 8B step at 1 row.

Configuration: ``CONFIGS[(N, K, m_bucket(M))]`` (filled from bench/bench_skinny.py on the H200) overrides
the heuristic in ``pick_config``; explicit keywords override both. Capturable in CUDA graphs: no host
syncs, and nothing is allocated when ``out`` (and, for split_k > 1, ``workspace``) are given.
On CPU it runs under TRITON_INTERPRET=1 with operands upcast to float32 right after the loads.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import triton
import triton.language as tl

from kernels.pdl import check_role, pdl_options, pdl_start

MAX_M = 64  # one M tile per program; larger batches are compute-bound enough for cuBLAS
DEFAULT_SM_COUNT = 132  # H200; used off CUDA (the CPU interpreter)
SPLIT_ALIGN = 16  # split-K chunks are a multiple of 16 elements, so every chunk start stays 32-B aligned
SMEM_BUDGET = 160 * 1024  # bytes of pipelined tiles the heuristic allows (H200: 227 KiB per block)
CONFIG_KEYS = ("block_n", "block_k", "split_k", "num_warps", "num_stages")
"""Every tile configuration has these; an optional ``programs`` (> 0) asks for balanced columns instead of
block_n-wide tiles: that many column programs per K split, program b taking columns [b N / P, (b + 1) N / P), so
every program streams the same number of weight rows (+-1) and block_n becomes the widest share (rounded up to a
power of two, masked). With P = the SM count and split_k 1 each SM streams one equal share: the 8B QKV's 96 tiles
of 64 columns leave 36 of 132 SMs without weights to stream."""
# (N, K, m_bucket) -> {block_n, block_k, split_k, num_warps, num_stages}; tuned on the H200 by
# bench/bench_skinny.py (its JSON's "configs_literal"): Llama-3-8B and Llama-3.2-1B decode projections at M = 1, 8, 16
# (best total over the three). Other shapes: the heuristic.
# (4096, 4096, 16) and (2048, 2048, 16), the 8B / 1B o projections, from the CUDA-graph step instead (their output is
# always split-K partials summed in the next norm): split 2 beat split 1 there (bench/bench_step_variants.py); a plain
# skinny_linear at these shapes adds a reduce launch.
# (N, K, 32), the 1B draft's 32-row expansion (kernels at 17-32 rows): the bucket-16 tiles, whose QKV needs no reduce
# launch (the heuristic splits all three in two): ~0.045 ms per 32-row 1B CUDA-graph step.
CONFIGS: dict[tuple[int, int, int], dict[str, int]] = {
    (2048, 2048, 16): {"block_k": 256, "block_n": 16, "num_stages": 4, "num_warps": 4, "split_k": 2},
    (2048, 2048, 32): {"block_k": 256, "block_n": 16, "num_stages": 4, "num_warps": 4, "split_k": 1},
    (2048, 8192, 32): {"block_k": 128, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 4},
    (3072, 2048, 32): {"block_k": 256, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 1},
    (2048, 8192, 16): {"block_k": 128, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 4},
    (3072, 2048, 16): {"block_k": 256, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 1},
    (4096, 4096, 16): {"block_k": 256, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 2},
    (4096, 14336, 16): {"block_k": 128, "block_n": 64, "num_stages": 4, "num_warps": 4, "split_k": 4},
    (6144, 4096, 16): {"block_k": 256, "block_n": 64, "num_stages": 4, "num_warps": 4, "split_k": 1},
    (128256, 4096, 16): {"block_k": 128, "block_n": 64, "num_stages": 3, "num_warps": 4, "split_k": 1},
}
# (N, K, m_bucket) -> tile of the fp8-weight GEMMs (`w_scale`: half the bytes per tile of the bf16 ones, so other
# tiles win), looked up before CONFIGS: bench/bench_fp8_tiles.py on the H200 (M 1 / 8 / 16, fp16 inputs, the least
# summed time per call): the 1B o / down and the 8B projections stream best as split-K 8 (4 for the 8B QKV) of
# 64-column tiles with 128-wide K steps (the 1B QKV keeps its bf16 tile); with fused_mlp.FP8_TILES the 1B's
# CUDA-graph step runs ~4% faster at 1-16 rows. Shapes not here take CONFIGS, then the heuristic.
FP8_CONFIGS: dict[tuple[int, int, int], dict[str, int]] = {
    (2048, 2048, 16): {"block_k": 128, "block_n": 64, "num_stages": 3, "num_warps": 4, "split_k": 8},
    (2048, 8192, 16): {"block_k": 128, "block_n": 64, "num_stages": 4, "num_warps": 4, "split_k": 8},
    (3072, 2048, 16): {"block_k": 256, "block_n": 32, "num_stages": 4, "num_warps": 4, "split_k": 1},
    (4096, 4096, 16): {"block_k": 128, "block_n": 64, "num_stages": 3, "num_warps": 4, "split_k": 8},
    (4096, 14336, 16): {"block_k": 128, "block_n": 64, "num_stages": 3, "num_warps": 4, "split_k": 8},
    (6144, 4096, 16): {"block_k": 128, "block_n": 64, "num_stages": 4, "num_warps": 4, "split_k": 4},
}
_sm_counts: dict[int, int] = {}


FP8 = torch.float8_e4m3fn
"""The weight dtype of ``weight_bits=8`` (``quantize_rows_fp8``)."""
FP8_MAX = 448.0
"""The largest finite float8 e4m3fn value: a row's largest magnitude maps to it."""


def quantize_rows_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): w [N, K] as float8 e4m3fn with one float32 scale per row, w ~ q.float() * scale[:, None].

    scale = max |w[n]| / 448, so each row's largest magnitude is representable exactly up to e4m3's 3-bit mantissa
    (relative rounding error <= 2^-4 per element of a row's top binade). An all-zero row gets scale 0. Computed in
    float32, on w's device.
    """
    if w.dim() != 2 or not w.dtype.is_floating_point:
        raise ValueError(f"quantize_rows_fp8: w must be a 2-D floating-point [N, K] tensor, got {w.dtype} "
                         f"{tuple(w.shape)}")
    wf = w.detach().float()
    amax = wf.abs().amax(dim=1)
    scale = amax / FP8_MAX
    q = (wf / torch.where(amax > 0, scale, 1.0)[:, None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8)
    return q.contiguous(), scale.contiguous()


@triton.jit
def fp8_operands(w, x):
    """(w, x) for tl.dot with an fp8 weight tile: float32 x keeps float32; otherwise both fp16 (module docstring)."""
    if x.dtype == tl.float32:
        return w.to(tl.float32), x
    elif x.dtype == tl.float16:
        return w.to(tl.float16), x
    else:
        xf = tl.minimum(tl.maximum(x.to(tl.float32), -65504.0), 65504.0)  # fp16's largest finite magnitude
        return w.to(tl.float16), xf.to(tl.float16)


@triton.jit
def _skinny_kernel(
    X, W, S, Out, M, N, K, K_CHUNK,
    stride_xm, stride_wn, stride_os, stride_om,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr, BALANCED: tl.constexpr,
    HAS_SCALE: tl.constexpr,
):
    pid_n = tl.program_id(0)  # fastest axis: neighbouring programs stream neighbouring weight rows
    pid_s = tl.program_id(1)  # K split
    rm = tl.arange(0, BLOCK_M)
    if BALANCED:  # program b: columns [b * N // P, (b + 1) * N // P) of P column programs (<= BLOCK_N of them)
        n_lo = (pid_n * N) // tl.num_programs(0)
        n_hi = ((pid_n + 1) * N) // tl.num_programs(0)
    else:
        n_lo = pid_n * BLOCK_N
        n_hi = N
    rn = n_lo + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < n_hi
    k_lo = pid_s * K_CHUNK
    k_hi = tl.minimum(k_lo + K_CHUNK, K)
    pdl_start(USE_PDL)  # after the index math (no load before it): measured the better place
    x_ptrs = X + rm[:, None] * stride_xm + (k_lo + rk)[None, :]
    w_ptrs = W + rn[None, :].to(tl.int64) * stride_wn + (k_lo + rk)[:, None]  # [BLOCK_K, BLOCK_N] view of w
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:  # every chunk is a whole number of BLOCK_K tiles: no K mask, full-width vector loads
            x = tl.load(x_ptrs, mask=m_ok[:, None], other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            k_ok = (k0 + rk) < k_hi
            x = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w_ptrs, mask=n_ok[None, :] & k_ok[:, None], other=0.0)
        if HAS_SCALE:  # fp8 weights: converted in registers, the dot in fp16
            w, x = fp8_operands(w, x)
        if UPCAST:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    if HAS_SCALE:  # one scale per output column (weight row), applied once to the float32 accumulator
        acc = acc * tl.load(S + rn, mask=n_ok, other=0.0)[None, :]
    out_ptrs = Out + pid_s * stride_os + rm[:, None] * stride_om + rn[None, :]
    tl.store(out_ptrs, acc.to(Out.dtype.element_ty), mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _reduce_partials_kernel(
    P, Out, N, stride_ps, stride_pm, stride_om, SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)
    pid_n = tl.program_id(0)
    row = tl.program_id(1)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ok = cols < N
    p = P + row * stride_pm + cols
    acc = tl.load(p, mask=ok, other=0.0)  # split order, as add_rmsnorm_partials sums them
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(p + s * stride_ps, mask=ok, other=0.0)
    tl.store(Out + row * stride_om + cols, acc.to(Out.dtype.element_ty), mask=ok)


def m_bucket(m: int) -> int:
    """The BLOCK_M a batch of ``m`` rows runs with (16, 32 or 64): the M part of a ``CONFIGS`` key."""
    return max(16, triton.next_power_of_2(max(m, 1)))


def split_chunk(k: int, split_k: int) -> int:
    """K elements per split: cdiv(K, split_k) rounded up to ``SPLIT_ALIGN`` (the last split may be short)."""
    return triton.cdiv(triton.cdiv(k, split_k), SPLIT_ALIGN) * SPLIT_ALIGN


def sm_count(device: torch.device) -> int:
    """Multiprocessor count of a CUDA device (cached: no query inside a capture), else DEFAULT_SM_COUNT."""
    if device.type != "cuda":
        return DEFAULT_SM_COUNT
    idx = device.index if device.index is not None else torch.cuda.current_device()
    if idx not in _sm_counts:
        _sm_counts[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _sm_counts[idx]


def pick_config(m: int, n: int, k: int, *, sms: int = DEFAULT_SM_COUNT, elem_bytes: int = 2, fp8: bool = False,
                configs: Mapping[tuple[int, int, int], dict[str, int]] = CONFIGS,
                fp8_configs: Mapping[tuple[int, int, int], dict[str, int]] = FP8_CONFIGS) -> dict[str, int]:
    """``configs[(n, k, m_bucket(m))]`` if tuned (with ``fp8``, fp8 weights: ``fp8_configs`` first), else the
    heuristic below (a copy: safe to modify). The tables default to the tuned ``CONFIGS`` / ``FP8_CONFIGS``; a tile
    sweep or a test passes its own (``configs={}``: the heuristic alone).

    Heuristic: (block_n, split_k) from {64, 32, 16} x {1, 2, 4, 8} such that cdiv(N, block_n) * split_k
    >= 2 * sms (5% slack: 256 programs count on 132 SMs); among those, K % (split_k * block_k) == 0 first
    (no K masks), then the smallest split_k (no reduce), then the widest block_n. Splits that would leave a
    chunk shorter than block_k are not considered; when nothing reaches the target, the most programs win.
    block_k is 256 (128 from M > 16 on; at most next_pow2(K)), halved while num_stages (4) pipelined
    x and w tiles exceed ``SMEM_BUDGET``; num_warps 4. ``sms``: the GPU's SM count; ``elem_bytes``: of x.
    """
    bm = m_bucket(m)
    tuned = (fp8_configs.get((n, k, bm)) if fp8 else None) or configs.get((n, k, bm))
    if tuned is not None:
        return dict(tuned)
    num_stages = 4
    bk = min(256 if bm <= 16 else 128, max(16, triton.next_power_of_2(k)))
    want = 2 * sms * 0.95
    cands = []  # (reaches target, divides K, -split_k, block_n, programs)
    for sk in (1, 2, 4, 8):
        if sk > 1 and k < sk * bk:
            continue
        for bn in (64, 32, 16):
            progs = triton.cdiv(n, bn) * sk
            cands.append((progs >= want, sk == 1 or k % (sk * bk) == 0, -sk, bn, progs))
    reached = [c for c in cands if c[0]]
    best = max(reached) if reached else max(cands, key=lambda c: (c[4], c[1], c[2], c[3]))
    bn, sk = best[3], -best[2]
    while bk > 32 and num_stages * (bm + bn) * bk * elem_bytes > SMEM_BUDGET:
        bk //= 2
    return {"block_n": bn, "block_k": bk, "split_k": sk, "num_warps": 4, "num_stages": num_stages}


def _check_operands(x: torch.Tensor, w: torch.Tensor, fn: str,
                    w_scale: torch.Tensor | None = None) -> tuple[int, int, int]:
    if x.dim() != 2:
        raise ValueError(f"{fn}: x must be [M, K], got shape {tuple(x.shape)}")
    m, k = x.shape
    if w.dim() != 2 or w.shape[1] != k:
        raise ValueError(f"{fn}: w must be [N, K={k}], got shape {tuple(w.shape)}")
    if m > MAX_M:
        raise ValueError(f"{fn}: x has M={m} rows, more than MAX_M={MAX_M} (use torch.nn.functional.linear)")
    if w_scale is not None or w.dtype == FP8:
        if w.dtype != FP8 or w.device != x.device:
            raise ValueError(f"{fn}: with w_scale, w must be {FP8} on {x.device} (quantize_rows_fp8), got "
                             f"{w.dtype} on {w.device}")
        if (w_scale is None or w_scale.dtype != torch.float32 or tuple(w_scale.shape) != (w.shape[0],)
                or w_scale.device != x.device or w_scale.stride(0) != 1):
            got = "None" if w_scale is None else f"{w_scale.dtype} {list(w_scale.shape)} on {w_scale.device}"
            raise ValueError(f"{fn}: fp8 weights need w_scale, a contiguous float32 [{w.shape[0]}] tensor on "
                             f"{x.device}, got {got}")
    elif w.dtype != x.dtype or w.device != x.device:
        raise ValueError(f"{fn}: w ({w.dtype}, {w.device}) must match x ({x.dtype}, {x.device})")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{fn}: x must be floating point, got {x.dtype}")
    if x.stride(-1) != 1 or w.stride(-1) != 1:
        raise ValueError(f"{fn}: x and w need a contiguous last dim")
    return m, w.shape[0], k


def _resolve(x: torch.Tensor, m: int, n: int, k: int, fn: str, fp8: bool = False,
             **overrides: int | None) -> dict[str, int]:
    cfg = pick_config(m, n, k, sms=sm_count(x.device), elem_bytes=x.element_size(), fp8=fp8)
    cfg.update({key: v for key, v in overrides.items() if v is not None})
    for key in CONFIG_KEYS:
        v = cfg[key]
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{fn}: {key} must be a positive int, got {v!r}")
    programs = cfg.get("programs", 0)
    if isinstance(programs, bool) or not isinstance(programs, int) or programs < 0:
        raise ValueError(f"{fn}: programs must be an int >= 0 (0: tiles of block_n), got {programs!r}")
    if programs:  # balanced columns (at most one per column): the tile is the widest share, a power of two
        cfg["programs"] = min(programs, n)
        cfg["block_n"] = max(16, triton.next_power_of_2(triton.cdiv(n, cfg["programs"])))
    for key in ("block_n", "block_k"):
        if cfg[key] < 16 or cfg[key] & (cfg[key] - 1):
            raise ValueError(f"{fn}: {key} must be a power of two >= 16, got {cfg[key]}")
    return cfg


def _launch_partials(x: torch.Tensor, w: torch.Tensor, dst: torch.Tensor, cfg: dict[str, int], m: int, n: int,
                     k: int, pdl_role: str = "gemm", w_scale: torch.Tensor | None = None) -> None:
    """The GEMM kernel: dst is [M, N] (split_k 1) or [split_k, M, N] float32; launched with `pdl_role`'s trigger;
    `w_scale`: w is fp8 with these row scales."""
    sk, bk = cfg["split_k"], cfg["block_k"]
    chunk = split_chunk(k, sk) if sk > 1 else k
    upcast = x.device.type == "cpu"
    programs = cfg.get("programs", 0)
    grid = (programs or triton.cdiv(n, cfg["block_n"]), sk)
    _skinny_kernel[grid](
        x, w, w if w_scale is None else w_scale, dst, m, n, k, chunk,
        x.stride(0), w.stride(0), dst.stride(0) if dst.dim() == 3 else 0, dst.stride(-2),
        BLOCK_M=m_bucket(m), BLOCK_N=cfg["block_n"], BLOCK_K=bk, EVEN_K=k % (sk * bk) == 0, BALANCED=bool(programs),
        HAS_SCALE=w_scale is not None, UPCAST=upcast,
        DOT_PRECISION="ieee" if (upcast or x.dtype == torch.float32) else "tf32",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x.device, pdl_role),
    )


def _check_buffer(t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype | None, device: torch.device,
                  name: str, fn: str) -> None:
    if tuple(t.shape) != shape or (dtype is not None and t.dtype != dtype) or t.device != device:
        want = f"{list(shape)} {dtype if dtype is not None else 'float'} on {device}"
        raise ValueError(f"{fn}: {name} must be {want}, got {list(t.shape)} {t.dtype} on {t.device}")
    if t.stride(-1) != 1:
        raise ValueError(f"{fn}: {name} needs a contiguous last dim")


def skinny_linear_partials(
    x: torch.Tensor,
    w: torch.Tensor,
    split_k: int | None = None,
    *,
    out: torch.Tensor | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    w_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Split-K partials of x @ w.T: [split_k, M, N] float32, partial s over K chunk s (module docstring).

    Their sum (in split order) is the product; ``kernels.norm.add_rmsnorm_partials`` consumes them. ``out``
    is an optional [split_k, M, N] float32 buffer; the other keywords override the tile configuration
    (``split_k=None``: the configured one, ``CONFIGS`` or the heuristic, as ``skinny_linear`` picks it).
    ``w_scale``: w is float8 e4m3 with these float32 row scales (``quantize_rows_fp8``); each partial is scaled.
    """
    fn = "skinny_linear_partials"
    m, n, k = _check_operands(x, w, fn, w_scale)
    cfg = _resolve(x, m, n, k, fn, w_scale is not None, split_k=split_k, block_n=block_n, block_k=block_k,
                   num_warps=num_warps, num_stages=num_stages)
    split_k = cfg["split_k"]
    if out is None:
        out = torch.empty(split_k, m, n, dtype=torch.float32, device=x.device)
    else:
        _check_buffer(out, (split_k, m, n), torch.float32, x.device, "out", fn)
    if m > 0 and n > 0:
        _launch_partials(x, w, out, cfg, m, n, k, w_scale=w_scale)
    return out


def skinny_linear(
    x: torch.Tensor,
    w: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    split_k: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
    pdl_role: str = "gemm",
    w_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ w.T with x [M, K] (M <= 64), w [N, K]; returns [M, N] in x.dtype (float32 accumulation).

    ``out``: optional [M, N] buffer (any float dtype: the result is rounded once to it). ``workspace``: for
    split_k > 1, a contiguous float32 tensor of >= split_k * M * N elements (its first ones are used);
    without it one is allocated. ``pdl_role``: the `kernels.pdl` role whose trigger the GEMM launches with
    ("pre_attention" for the QKV projection feeding the fused RoPE attention); with split_k > 1 the GEMM keeps
    "gemm" and the reduce, the last launch, takes the role ("small" for "gemm").
    ``w_scale``: w is float8 e4m3 with these float32 row scales (``quantize_rows_fp8``).
    The other keywords override ``CONFIGS`` and the heuristic.
    """
    fn = "skinny_linear"
    m, n, k = _check_operands(x, w, fn, w_scale)
    cfg = _resolve(x, m, n, k, fn, w_scale is not None, split_k=split_k, block_n=block_n, block_k=block_k,
                   num_warps=num_warps, num_stages=num_stages)
    if out is None:
        out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    else:
        _check_buffer(out, (m, n), None, x.device, "out", fn)
        if not out.dtype.is_floating_point:
            raise ValueError(f"{fn}: out must be floating point, got {out.dtype}")
    if m == 0 or n == 0:
        return out
    sk = cfg["split_k"]
    check_role(fn, pdl_role)
    if sk == 1:
        _launch_partials(x, w, out, cfg, m, n, k, pdl_role, w_scale)
        return out
    need = sk * m * n
    if workspace is None:
        workspace = torch.empty(need, dtype=torch.float32, device=x.device)
    elif (workspace.dtype != torch.float32 or workspace.device != x.device or not workspace.is_contiguous()
          or workspace.numel() < need):
        raise ValueError(f"{fn}: workspace must be a contiguous float32 tensor on {x.device} with >= {need} "
                         f"elements (split_k * M * N), got {list(workspace.shape)} {workspace.dtype} "
                         f"on {workspace.device}")
    partials = workspace.view(-1)[:need].view(sk, m, n)
    _launch_partials(x, w, partials, cfg, m, n, k, w_scale=w_scale)
    block = min(1024, triton.next_power_of_2(n))
    _reduce_partials_kernel[(triton.cdiv(n, block), m)](
        partials, out, n, partials.stride(0), partials.stride(1), out.stride(0),
        SPLIT_K=sk, BLOCK_N=block, num_warps=4, **pdl_options(x.device, "small" if pdl_role == "gemm" else pdl_role),
    )
    return out
