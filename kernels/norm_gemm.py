"""Split-K sum + residual add + RMSNorm in the prologue of the weight-streaming GEMM that consumes the normed rows.

    skinny_linear_normed(partials, residual, norm_weight, eps, w)        -> (x @ w.T [M, N], new_residual [M, K])
    swiglu_normed(partials, residual, norm_weight, eps, w_gate, w_up)    -> (silu(x @ w_gate.T) * (x @ w_up.T) [M, I],
                                                                             new_residual [M, K])

where ``x, new_residual = kernels.norm.add_rmsnorm_partials(partials, residual, norm_weight, eps)``: the decode
step's norm between the o / down projection partials and the next QKV / SwiGLU GEMM becomes part of that GEMM, one
launch (~2.7 us of exposed time on the H200, one CTA's latency) fewer per norm.

Measured slower (H200, 2026-11-30, bench/results/step_variants_experiments_053c53d.json): every program of the
consuming GEMM re-reads the partials and redoes the norm, so the QKV / SwiGLU GEMMs grow from 508 / 1,892 us to
2,066 / 3,016 us per Llama-3-8B step at 8 rows: 7.14 vs 4.61 ms (1B: 1.79 vs 1.13 ms). Kept as an experiment
switch (`runtime.model.NORM_PROLOGUE`), off.

Rounding contract (add_rmsnorm_partials's, per row, the residual's dtype ``dt``): y = sum of the S float32 partials
in split order; h = round_dt(round_dt(y) + residual) (fp32 add) is new_residual; rstd = 1 / sqrt(sum(h^2) / K + eps);
x = round_dt(h * rstd * norm_weight) is what the GEMM multiplies (as the norm kernel's output would be). Every
program computes rstd itself in a pre-pass over K (BLOCK_K chunks, summed per chunk), so its sum of squares runs in
another order than the norm kernel's single row reduction: rstd, hence x and the product, may differ in the last bits
(equal within tolerance, not bitwise). new_residual involves no reduction and is bitwise equal; program 0 stores it
in its pre-pass. The main K loop then recomputes each x tile from the partials, the residual and the norm weight
(elementwise, in registers) right before tl.dot with the weight tile(s), which stream exactly as in
``kernels.skinny_linear`` (split_k 1 only: a K split would need every row's full sum of squares per split) and
``kernels.fused_mlp``.

Cost model: per program the prologue reads each of its rows twice (pre-pass and main loop), S * K * 4 + 2 K bytes
per row per pass (partials, residual; plus the norm weight, 2 K bytes per program), from L2: at 8B (K = 4096, bf16,
M = 1) 40 KiB per pass for the SwiGLU (S = 2, the o projection's split) and 72 KiB for the QKV (S = 4, the down
projection's), against the 1 MiB / 512 KiB of weights such a program streams; plus the pre-pass's latency before the
first weight tile's dot. The weights stream as before. The prologue's bytes grow with M: at the 8-row verify
(S = 4) ~1.1 MiB of partials per program per pass against its 512 KiB of weights (QKV), likely more than the ~2.7 us
launch it saves; measure per row count (bench/bench_step_variants.py's cases) before making it a default anywhere.
Tiles: the plain kernels' (``pick_config`` split_k 1; ``fused_mlp.BLOCK_I`` / ``BLOCK_K``), except that the software
pipeline now also stages the float32 partials and the residual: ``prologue_tile`` halves BLOCK_K (then drops stages)
while num_stages such K steps would exceed ``kernels.skinny_linear.SMEM_BUDGET``, the plain heuristic's rule. The
8B QKV tile (BLOCK_K 256, 4 stages) would otherwise need ~320 KiB of shared memory at S = 4 (ptxas, via
bench/kernel_resources.py --gemms), more than the H200's 227 KiB: it runs with BLOCK_K 64, the SwiGLU with 64 too.
An experiment switch (``runtime.model.NORM_PROLOGUE``, bench/bench_step_variants.py patch ``norm_prologue``), not
yet measured on a GPU. On CPU it runs under TRITON_INTERPRET=1 with operands upcast to float32 right after the loads.
"""

from __future__ import annotations

import importlib

import torch
import triton
import triton.language as tl

from kernels.pdl import check_role, pdl_options, pdl_start

# the modules, not the package's same-named functions (kernels/__init__.py re-exports skinny_linear); their tile
# choices are read at call time, so the benchmarks' patches of CONFIGS / BLOCK_I apply here too
_skinny = importlib.import_module("kernels.skinny_linear")
_fused_mlp = importlib.import_module("kernels.fused_mlp")


@triton.jit
def _new_residual(P, R, rm, kk, ok, stride_ps, stride_pm, stride_rm, SPLITS: tl.constexpr):
    """add_rmsnorm_partials's new residual for a [BLOCK_M, BLOCK_K] tile, in the residual's dtype."""
    p = P + rm[:, None] * stride_pm + kk[None, :]
    y = tl.load(p, mask=ok, other=0.0)  # split order, as the norm kernel sums them
    for s in tl.static_range(1, SPLITS):
        y += tl.load(p + s * stride_ps, mask=ok, other=0.0)
    h = y.to(R.dtype.element_ty).to(tl.float32)  # the rounded projection, then the fp32 add
    h += tl.load(R + rm[:, None] * stride_rm + kk[None, :], mask=ok, other=0.0).to(tl.float32)
    return h.to(R.dtype.element_ty)


@triton.jit
def _tile_mask(m_ok, kk, K, EVEN_K: tl.constexpr):
    if EVEN_K:  # no K mask: full-width vector loads
        ok = m_ok[:, None]
    else:
        ok = m_ok[:, None] & (kk < K)[None, :]
    return ok


@triton.jit
def _rstd_pass(P, R, NewRes, rm, m_ok, rk, K, eps, stride_ps, stride_pm, stride_rm, stride_nrm, store,
               SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """Per row 1 / sqrt(mean(h^2) + eps) over all K; with `store` (one program) also writes h, the new residual."""
    ss = tl.zeros([BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        ok = _tile_mask(m_ok, kk, K, EVEN_K)
        h = _new_residual(P, R, rm, kk, ok, stride_ps, stride_pm, stride_rm, SPLITS)
        if store:
            tl.store(NewRes + rm[:, None] * stride_nrm + kk[None, :], h, mask=ok)
        hf = h.to(tl.float32)
        ss += tl.sum(hf * hf, axis=1)
    return 1.0 / tl.sqrt(ss / K + eps)


@triton.jit
def _normed_tile(P, R, G, rm, kk, ok, rstd, K, stride_ps, stride_pm, stride_rm, SPLITS: tl.constexpr,
                 EVEN_K: tl.constexpr):
    """The normed x tile [BLOCK_M, BLOCK_K] (residual dtype), as the norm kernel would have stored it."""
    if EVEN_K:
        g = tl.load(G + kk).to(tl.float32)
    else:
        g = tl.load(G + kk, mask=kk < K, other=0.0).to(tl.float32)
    h = _new_residual(P, R, rm, kk, ok, stride_ps, stride_pm, stride_rm, SPLITS).to(tl.float32)
    return (h * rstd[:, None] * g[None, :]).to(R.dtype.element_ty)  # the norm kernel's (h * rstd) * w order


@triton.jit
def _skinny_normed_kernel(
    P, R, G, W, Out, NewRes, M, N, K, eps,
    stride_ps, stride_pm, stride_rm, stride_wn, stride_om, stride_nrm,
    SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)  # first: the partials and the residual are the previous kernels' outputs
    pid_n = tl.program_id(0)  # neighbouring programs stream neighbouring weight rows, as _skinny_kernel
    rm = tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    rstd = _rstd_pass(P, R, NewRes, rm, m_ok, rk, K, eps, stride_ps, stride_pm, stride_rm, stride_nrm, pid_n == 0,
                      SPLITS, BLOCK_M, BLOCK_K, EVEN_K)
    w_ptrs = W + rn[None, :].to(tl.int64) * stride_wn + rk[:, None]  # [BLOCK_K, BLOCK_N] view of w
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        ok = _tile_mask(m_ok, kk, K, EVEN_K)
        x = _normed_tile(P, R, G, rm, kk, ok, rstd, K, stride_ps, stride_pm, stride_rm, SPLITS, EVEN_K)
        if EVEN_K:
            w = tl.load(w_ptrs, mask=n_ok[None, :], other=0.0)
        else:
            w = tl.load(w_ptrs, mask=n_ok[None, :] & (kk < K)[:, None], other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            w = w.to(tl.float32)
        acc = tl.dot(x, w, acc, input_precision=DOT_PRECISION)
        w_ptrs += BLOCK_K
    tl.store(Out + rm[:, None] * stride_om + rn[None, :], acc.to(Out.dtype.element_ty),
             mask=m_ok[:, None] & n_ok[None, :])


@triton.jit
def _swiglu_normed_kernel(
    P, R, G, Wg, Wu, Out, NewRes, M, I, K, eps,
    stride_ps, stride_pm, stride_rm, stride_wgi, stride_wui, stride_om, stride_nrm,
    SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
    UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)
    pid_i = tl.program_id(0)  # neighbouring programs stream neighbouring weight rows, as _swiglu_kernel
    rm = tl.arange(0, BLOCK_M)
    ri = pid_i * BLOCK_I + tl.arange(0, BLOCK_I)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    i_ok = ri < I
    rstd = _rstd_pass(P, R, NewRes, rm, m_ok, rk, K, eps, stride_ps, stride_pm, stride_rm, stride_nrm, pid_i == 0,
                      SPLITS, BLOCK_M, BLOCK_K, EVEN_K)
    acc_g = tl.zeros([BLOCK_M, BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_I], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        ok = _tile_mask(m_ok, kk, K, EVEN_K)
        x = _normed_tile(P, R, G, rm, kk, ok, rstd, K, stride_ps, stride_pm, stride_rm, SPLITS, EVEN_K)
        if EVEN_K:
            w_ok = i_ok[None, :]
        else:
            w_ok = i_ok[None, :] & (kk < K)[:, None]
        wg = tl.load(Wg + ri[None, :].to(tl.int64) * stride_wgi + kk[:, None], mask=w_ok, other=0.0)
        wu = tl.load(Wu + ri[None, :].to(tl.int64) * stride_wui + kk[:, None], mask=w_ok, other=0.0)
        if UPCAST:
            x = x.to(tl.float32)
            wg = wg.to(tl.float32)
            wu = wu.to(tl.float32)
        acc_g = tl.dot(x, wg, acc_g, input_precision=DOT_PRECISION)
        acc_u = tl.dot(x, wu, acc_u, input_precision=DOT_PRECISION)
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u  # silu(g) * u in fp32, as _swiglu_kernel
    tl.store(Out + rm[:, None] * stride_om + ri[None, :], h.to(Out.dtype.element_ty),
             mask=m_ok[:, None] & i_ok[None, :])


def prologue_tile(splits: int, block_m: int, block_n: int, block_k: int, num_stages: int, elem_bytes: int,
                  weights: int = 1) -> tuple[int, int]:
    """(block_k, num_stages) for a normed GEMM from the plain kernel's tile: a pipelined K step stages the S float32
    partials and the residual ([BLOCK_M, BLOCK_K] each), the norm weight and `weights` [BLOCK_N, BLOCK_K] weight
    tiles; BLOCK_K is halved (not below 32), then stages dropped (not below 2), while num_stages steps exceed
    SMEM_BUDGET (a conservative estimate, as ``pick_config``'s)."""
    def smem(bk: int, stages: int) -> int:
        return stages * bk * (splits * block_m * 4 + (block_m + 1 + weights * block_n) * elem_bytes)

    while block_k > 32 and smem(block_k, num_stages) > _skinny.SMEM_BUDGET:
        block_k //= 2
    while num_stages > 2 and smem(block_k, num_stages) > _skinny.SMEM_BUDGET:
        num_stages -= 1
    return block_k, num_stages


def _span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last) byte addresses a tensor's elements occupy."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    (a0, a1), (b0, b1) = _span(a), _span(b)
    return a0 < b1 and b0 < a1


def _check_operands(fn: str, partials: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor,
                    weights: dict[str, torch.Tensor]) -> tuple[int, int, int, int]:
    """(S, M, K, N) of valid operands; a ValueError naming `fn` and the argument otherwise."""
    if partials.dim() != 3 or partials.dtype != torch.float32:
        raise ValueError(f"{fn}: partials must be float32 [S, M, K], got {tuple(partials.shape)} {partials.dtype}")
    s, m, k = partials.shape
    if s < 1:
        raise ValueError(f"{fn}: partials needs at least one split (S >= 1), got shape {tuple(partials.shape)}")
    if m > _skinny.MAX_M:
        raise ValueError(f"{fn}: partials has M={m} rows, more than MAX_M={_skinny.MAX_M}")
    if residual.shape != (m, k) or residual.device != partials.device or not residual.dtype.is_floating_point:
        raise ValueError(f"{fn}: residual must be a floating-point [{m}, {k}] tensor on {partials.device}, got "
                         f"{tuple(residual.shape)} {residual.dtype} on {residual.device}")
    if norm_weight.shape != (k,) or norm_weight.device != partials.device or not norm_weight.dtype.is_floating_point:
        raise ValueError(f"{fn}: norm_weight must be a floating-point [{k}] tensor on {partials.device}, got "
                         f"{tuple(norm_weight.shape)} {norm_weight.dtype} on {norm_weight.device}")
    n = None
    for name, w in weights.items():
        if w.dim() != 2 or w.shape[1] != k or (n is not None and w.shape[0] != n):
            want = f"[N, K={k}]" if n is None else f"[{n}, {k}]"
            raise ValueError(f"{fn}: {name} must be {want}, got shape {tuple(w.shape)}")
        if w.dtype != residual.dtype or w.device != partials.device:
            raise ValueError(f"{fn}: {name} ({w.dtype}, {w.device}) must match residual ({residual.dtype}, "
                             f"{partials.device})")
        n = w.shape[0]
    for name, t in (("partials", partials), ("residual", residual), ("norm_weight", norm_weight), *weights.items()):
        if t.stride(-1) != 1:
            raise ValueError(f"{fn}: {name} needs a contiguous last dim")
    return s, m, k, n


def _buffer(fn: str, name: str, t: torch.Tensor | None, shape: tuple[int, int], like: torch.Tensor,
            inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """`t` checked ([shape] in like's dtype and device, contiguous last dim, overlapping no input), or a new one."""
    if t is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    if tuple(t.shape) != shape or t.dtype != like.dtype or t.device != like.device or t.stride(-1) != 1:
        raise ValueError(f"{fn}: {name} must be {list(shape)} {like.dtype} on {like.device} with a contiguous last "
                         f"dim, got {list(t.shape)} {t.dtype} on {t.device}")
    # every program reads the partials and the residual to the end, while program 0 stores the new residual early
    if any(_overlaps(t, x) for x in inputs):
        raise ValueError(f"{fn}: {name} must not overlap partials, residual or the other output")
    return t


def _dot_flags(residual: torch.Tensor) -> dict:
    upcast = residual.device.type == "cpu"
    return {"UPCAST": upcast, "DOT_PRECISION": "ieee" if (upcast or residual.dtype == torch.float32) else "tf32"}


def skinny_linear_normed(
    partials: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    new_residual: torch.Tensor | None = None,
    pdl_role: str = "gemm",
) -> tuple[torch.Tensor, torch.Tensor]:
    """``skinny_linear(x, w)`` of ``x, new_residual = add_rmsnorm_partials(partials, residual, norm_weight, eps)``.

    partials: float32 [S, M, K] (S >= 1, M <= MAX_M); residual [M, K]; norm_weight [K]; w [N, K] in residual.dtype.
    Returns (out [M, N], new_residual [M, K]), both in residual.dtype; ``out`` / ``new_residual`` optionally give
    those buffers (neither may overlap an input). out equals the two-launch result within tolerance, new_residual
    bit for bit (module docstring). The tile is ``kernels.skinny_linear.pick_config``'s (CONFIGS or the heuristic;
    its split_k must be 1), narrowed by ``prologue_tile``. ``pdl_role``: the `kernels.pdl` role of the launch
    ("pre_attention" for the QKV projection feeding the fused RoPE attention, as ``skinny_linear``).
    """
    fn = "skinny_linear_normed"
    s, m, k, n = _check_operands(fn, partials, residual, norm_weight, {"w": w})
    check_role(fn, pdl_role)
    cfg = _skinny.pick_config(m, n, k, sms=_skinny.sm_count(residual.device), elem_bytes=residual.element_size())
    if cfg["split_k"] != 1:
        raise ValueError(f"{fn}: the tuned split_k for [{n}, {k}] is {cfg['split_k']}; the normed prologue needs "
                         f"split_k 1")
    new_residual = _buffer(fn, "new_residual", new_residual, (m, k), residual, (partials, residual))
    out = _buffer(fn, "out", out, (m, n), residual, (partials, residual, new_residual))
    if m == 0 or n == 0:
        return out, new_residual
    bm = _skinny.m_bucket(m)
    bk, stages = prologue_tile(s, bm, cfg["block_n"], cfg["block_k"], cfg["num_stages"], residual.element_size())
    _skinny_normed_kernel[(triton.cdiv(n, cfg["block_n"]),)](
        partials, residual, norm_weight, w, out, new_residual, m, n, k, float(eps),
        partials.stride(0), partials.stride(1), residual.stride(0), w.stride(0), out.stride(0),
        new_residual.stride(0),
        SPLITS=s, BLOCK_M=bm, BLOCK_N=cfg["block_n"], BLOCK_K=bk, EVEN_K=k % bk == 0,
        num_warps=cfg["num_warps"], num_stages=stages, **_dot_flags(residual),
        **pdl_options(residual.device, pdl_role),
    )
    return out, new_residual


def swiglu_normed(
    partials: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    w_gate: torch.Tensor,
    w_up: torch.Tensor,
    *,
    out: torch.Tensor | None = None,
    new_residual: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``swiglu(x, w_gate, w_up)`` of ``x, new_residual = add_rmsnorm_partials(partials, residual, norm_weight, eps)``.

    partials: float32 [S, M, K] (S >= 1, M <= MAX_M); residual [M, K]; norm_weight [K]; w_gate / w_up [I, K] in
    residual.dtype. Returns (mid [M, I], new_residual [M, K]) in residual.dtype; ``out`` / ``new_residual``
    optionally give those buffers (neither may overlap an input). mid equals the two-launch result within tolerance,
    new_residual bit for bit (module docstring). Tiles: ``kernels.fused_mlp.BLOCK_I`` / ``BLOCK_K``, read per call,
    through ``prologue_tile``.
    """
    fn = "swiglu_normed"
    s, m, k, i = _check_operands(fn, partials, residual, norm_weight, {"w_gate": w_gate, "w_up": w_up})
    new_residual = _buffer(fn, "new_residual", new_residual, (m, k), residual, (partials, residual))
    out = _buffer(fn, "out", out, (m, i), residual, (partials, residual, new_residual))
    if m == 0 or i == 0:
        return out, new_residual
    bm, bi = _skinny.m_bucket(m), _fused_mlp.BLOCK_I
    bk, stages = prologue_tile(s, bm, bi, min(_fused_mlp.BLOCK_K, max(16, triton.next_power_of_2(k))), 4,
                               residual.element_size(), weights=2)
    _swiglu_normed_kernel[(triton.cdiv(i, bi),)](
        partials, residual, norm_weight, w_gate, w_up, out, new_residual, m, i, k, float(eps),
        partials.stride(0), partials.stride(1), residual.stride(0), w_gate.stride(0), w_up.stride(0), out.stride(0),
        new_residual.stride(0),
        SPLITS=s, BLOCK_M=bm, BLOCK_I=bi, BLOCK_K=bk, EVEN_K=k % bk == 0,
        num_warps=4, num_stages=stages, **_dot_flags(residual), **pdl_options(residual.device, "gemm"),
    )
    return out, new_residual
