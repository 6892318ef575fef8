"""The decode step's RMSNorm split across a GEMM boundary: residual add + sums of squares in the producing GEMM's
epilogue, the scaling in the consuming GEMM's prologue, no norm launch between them.

    skinny_linear_residual(x, w, residual, counters=c)  -> (new_residual [M, N] residual.dtype, sumsq [T, M] float32)
    skinny_linear(h, w2, norm_in=(sumsq, norm_weight, eps)),  swiglu(h, wg, wu, norm_in=...),
    qkv_rope_kv_write(h, ..., norm_in=...)              -> the product of the normed h, as if fed add_rmsnorm's output

The producer (o and down projections: ``kernels.skinny_linear``'s weight-streaming GEMM, same tile and split as
``skinny_linear_partials``) has program (b, s) compute its float32 partial of N tile b over K chunk s. With split_k
S > 1 it stores it to a [S, M, N] float32 workspace, waits for all its threads' stores (``tl.debug_barrier``) and
counts itself in with ``tl.atomic_add(counters + b, 1, sem="acq_rel")`` (GPU scope); the program that sees S - 1
(the last of tile b to finish) reads the S partials of its tile (``.cg`` loads: other SMs wrote them, so L1 is
bypassed), sums them in split order s = 0..S-1 and runs the epilogue, then sets counters[b] back to 0
(``tl.atomic_xchg``): the buffer is all zeros again when the launch ends, so the next launch (or CUDA-graph replay)
needs no memset. With S = 1 there is no workspace and no atomic: every program runs the epilogue on its own tile.
The epilogue, per [BLOCK_M, BLOCK_N] tile and with ``dt`` the residual's dtype (``add_rmsnorm_partials``'s rounding)::

    y                = sum over s of partial[s]              float32, split order
    h                = round_dt(round_dt(y) + residual)      (float32 add)      -> new_residual[:, tile b]
    sumsq[b, m]      = sum over the tile's columns of float32(h[m])^2          (masked columns add 0)

The consumer (QKV, SwiGLU, LM head: ``NORM_IN`` on ``_skinny_kernel``, ``_swiglu_kernel``,
``_qkv_rope_kv_write_kernel``) gets h = new_residual as its x and ``norm_in = (sumsq, norm_weight, eps)``; every
program sums sumsq over the T tiles once (``kernels.norm.rstd_from_sumsq``: chunks of up to 128 tiles, tl.sum over
the tile axis, a fixed order), rstd[m] = 1 / sqrt(sum / K + eps), and forms each x tile in its K loop right before
tl.dot as round_dt(h * rstd * norm_weight) (``kernels.norm.norm_scale``, the norm kernel's (h * rstd) * w order).
Its weights stream exactly as without the switch; with it off the kernels are unchanged (constexpr-guarded: the
plain kernels' sm_90 PTX at 8B tiles is instruction for instruction the one from before, offline compile, 2026-12-01).
Unlike the failed prologue experiment (``kernels.norm_gemm``: every consuming program re-read every partial and
redid the row's norm, 1.5x slower) no program here recomputes a whole row: the producer's last program per tile
touches its own tile's S partials once, and the consumer reads T * M floats of sums (T = cdiv(N, BLOCK_N): 128 for
the 8B's o projection, 64 for its down projection).

Rounding contract: new_residual is bitwise ``add_rmsnorm_partials``'s (of ``skinny_linear_partials`` at the same
tile and split: the same per-element operations). The consumer's normed x equals the norm kernel's except that the
sum of squares runs in another order (per producer tile, then over tiles, against one row reduction), so rstd, hence
x and the product, may differ in the last bits: equal within tolerance, not bitwise. The result is deterministic
(no atomics touch data; the last program's split-order sum does not depend on which program arrives last).

Counters: ``counters`` is an int32 buffer of >= T zeros owned by the caller (``new_counters``; the model keeps one per
call site, allocated once outside any CUDA-graph capture); every launch leaves it zero. Two launches must not use the
same counters concurrently (on two streams): a model's steps run in stream order. Capturable in CUDA graphs: no host
syncs, nothing allocated when ``new_residual``, ``sumsq``, ``workspace`` and ``counters`` are given. Cost model: S * M *
N * 4 B of partials written and read once more (as ``add_rmsnorm_partials`` reads them), T * M * 4 B of sums, and per
consumer program T * BLOCK_M * 4 B of sums (L2) plus the norm weight's BLOCK_K elements per K step; against one ~3 us
norm launch (one CTA's latency, exposed) saved per norm: 2 * num_layers per step.

Experiment switch (``runtime.model.NORM_EPILOGUE``, bench/bench_step_variants.py patch ``norm_epilogue``, off), measured
slower on the H200 (2026-12-01, git 88027cd, CUDA-graph step replays at ctx 1024,
bench/results/step_variants_2026-12-01_88027cd_norm_epilogue.json): Llama-3-8B rows 1 / 8 / 16 4.363 / 4.541 / 4.662 ->
4.512 / 4.749 / 4.812 ms, Llama-3.2-1B rows 1 / 16 0.956 / 1.077 -> 1.171 / 1.303 ms. Per kernel (exposed time, 8B rows
8 / 1B rows 1, bench/results/step_variants_2026-12-01_18df897_norm_epilogue_profile.json): the norms saved 159 / 64 us,
but the consumers' per-tile scaling costs SwiGLU +3.7 / +6.6 us and QKV +4.5 / +5.5 us per call (the x tiles' transform
between their loads and tl.dot), the producers' last-arriver tail +1.8 / +1.7 us per call. Even with a free consumer
(e.g. the norm weight folded into its weight columns and rstd, a per-row scalar, applied in its epilogue) the producers'
cost leaves ~1.4 us per 8B layer, ~1% of a step. The GPU tests (tests/gpu/test_norm_epilogue_gpu.py: 18) pass. On CPU it
runs under TRITON_INTERPRET=1 (programs one after another: the counters work the same) with operands upcast to float32
right after the loads.
"""

from __future__ import annotations

import importlib

import torch
import triton
import triton.language as tl

from kernels.pdl import check_role, pdl_options, pdl_start
from kernels.skinny_linear import skinny_coords, skinny_tile

# the module, not the package's same-named function (kernels/__init__.py re-exports skinny_linear); its CONFIGS are
# read at call time, so the benchmarks' patches apply here too
_skinny = importlib.import_module("kernels.skinny_linear")
MIN_BLOCK_N = 16
"""The narrowest N tile a skinny configuration may have (``kernels.skinny_linear._resolve``): ``new_counters(n)``
holds cdiv(n, MIN_BLOCK_N) counters, enough for any tile of an N-column projection."""


@triton.jit
def _residual_epilogue(y, R, NewRes, SumSq, pid_n, rm, rn, m_ok, n_ok, stride_rm, stride_nrm, stride_sq):
    """add_rmsnorm_partials's new residual of tile pid_n from its float32 product y, and the tile's sums of squares."""
    ok = m_ok[:, None] & n_ok[None, :]
    h = y.to(NewRes.dtype.element_ty).to(tl.float32)  # the rounded projection, then the fp32 add
    h += tl.load(R + rm[:, None] * stride_rm + rn[None, :], mask=ok, other=0.0).to(tl.float32)
    h_rounded = h.to(NewRes.dtype.element_ty)
    tl.store(NewRes + rm[:, None] * stride_nrm + rn[None, :], h_rounded, mask=ok)
    hf = h_rounded.to(tl.float32)  # masked columns: y = 0 and residual 0, so they add 0
    tl.store(SumSq + pid_n * stride_sq + rm, tl.sum(hf * hf, axis=1), mask=m_ok)


@triton.jit
def _skinny_residual_kernel(
    X, W, Part, R, NewRes, SumSq, Counters, M, N, K, K_CHUNK,
    stride_xm, stride_wn, stride_ps, stride_pm, stride_rm, stride_nrm, stride_sq,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr, UPCAST: tl.constexpr, DOT_PRECISION: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)
    pid_n, pid_s, rm, rn, rk, m_ok, n_ok, k_lo, k_hi = skinny_coords(M, N, K, K_CHUNK, BLOCK_M, BLOCK_N, BLOCK_K)
    acc = skinny_tile(X, W, rm, rn, rk, m_ok, n_ok, k_lo, k_hi, K, stride_xm, stride_wn,
                      X, X, 0, 0, 0.0,  # no NORM_IN: the o / down inputs are no residual
                      BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, UPCAST, DOT_PRECISION, False, 1)
    if SPLIT_K == 1:
        _residual_epilogue(acc, R, NewRes, SumSq, pid_n, rm, rn, m_ok, n_ok, stride_rm, stride_nrm, stride_sq)
    else:
        ok = m_ok[:, None] & n_ok[None, :]
        p = Part + rm[:, None] * stride_pm + rn[None, :]
        tl.store(p + pid_s * stride_ps, acc, mask=ok)
        tl.debug_barrier()  # every thread's partial stored before the count below releases them
        arrived = tl.atomic_add(Counters + pid_n, 1, sem="acq_rel")  # GPU scope
        if arrived == SPLIT_K - 1:  # the last program of tile pid_n: the other splits' partials are visible
            y = tl.load(p, mask=ok, other=0.0, cache_modifier=".cg")  # split order, as add_rmsnorm_partials
            for s in tl.static_range(1, SPLIT_K):
                y += tl.load(p + s * stride_ps, mask=ok, other=0.0, cache_modifier=".cg")
            _residual_epilogue(y, R, NewRes, SumSq, pid_n, rm, rn, m_ok, n_ok, stride_rm, stride_nrm, stride_sq)
            tl.atomic_xchg(Counters + pid_n, 0)  # zero again for the next launch / replay: no memset


def new_counters(n: int, device: torch.device | str) -> torch.Tensor:
    """A zeroed int32 counters buffer for ``skinny_linear_residual`` of an N = `n` column projection, any tile
    (cdiv(n, MIN_BLOCK_N) counters). Allocate it once, outside CUDA-graph capture: every launch leaves it zero."""
    return torch.zeros(triton.cdiv(n, MIN_BLOCK_N), dtype=torch.int32, device=device)


def _check(fn: str, name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype,
           device: torch.device) -> None:
    if tuple(t.shape) != shape or t.dtype != dtype or t.device != device or not t.is_contiguous():
        raise ValueError(f"{fn}: {name} must be a contiguous {list(shape)} {dtype} tensor on {device}, got "
                         f"{list(t.shape)} {t.dtype} on {t.device}")


def skinny_linear_residual(
    x: torch.Tensor,
    w: torch.Tensor,
    residual: torch.Tensor,
    *,
    new_residual: torch.Tensor | None = None,
    sumsq: torch.Tensor | None = None,
    workspace: torch.Tensor | None = None,
    counters: torch.Tensor | None = None,
    split_k: int | None = None,
    pdl_role: str = "gemm",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(new_residual, sumsq) of round(round(x @ w.T) + residual) in one launch (module docstring).

    Args:
        x: [M, K] (M <= 64), w: [N, K] (x's dtype), as ``skinny_linear_partials``; the tile and split_k are its
            (``CONFIGS`` or the heuristic), ``split_k`` overrides the split.
        residual: [M, N] floating point, contiguous, on x's device.
        new_residual: optional [M, N] output in residual.dtype (contiguous); may be ``residual`` itself (each element
            is read and then written by one program), must not overlap it otherwise.
        sumsq: optional [T, M] float32 output, T = cdiv(N, BLOCK_N): the sums of squares of new_residual per N tile,
            for a consumer's ``norm_in=(sumsq, norm_weight, eps)``.
        workspace: for split_k > 1, an optional contiguous float32 tensor of >= split_k * M * N elements.
        counters: for split_k > 1, an int32 buffer of >= T zeros (``new_counters``), left zero; without one a
            zeroed buffer is allocated per call (not for CUDA graphs: allocate it once outside the capture).
        pdl_role: the `kernels.pdl` role of the launch.

    Returns:
        (new_residual [M, N] in residual.dtype, sumsq [T, M] float32). new_residual is bitwise
        ``add_rmsnorm_partials(skinny_linear_partials(x, w, S), residual, ...)[1]``.
    """
    fn = "skinny_linear_residual"
    m, n, k = _skinny._check_operands(x, w, fn)
    cfg = _skinny._resolve(x, m, n, k, fn, split_k=split_k)
    check_role(fn, pdl_role)
    if not isinstance(residual, torch.Tensor) or not residual.dtype.is_floating_point:
        raise ValueError(f"{fn}: residual must be a floating-point [M, N] = [{m}, {n}] tensor")
    _check(fn, "residual", residual, (m, n), residual.dtype, x.device)
    sk, bn = cfg["split_k"], cfg["block_n"]
    tiles = triton.cdiv(n, bn)
    if new_residual is None:
        new_residual = torch.empty_like(residual)
    else:
        _check(fn, "new_residual", new_residual, (m, n), residual.dtype, x.device)
        if new_residual is not residual and _overlaps(new_residual, residual):
            raise ValueError(f"{fn}: new_residual must be residual itself or not overlap it")
    if sumsq is None:
        sumsq = torch.empty(tiles, m, dtype=torch.float32, device=x.device)
    else:
        _check(fn, "sumsq", sumsq, (tiles, m), torch.float32, x.device)
    if m == 0 or n == 0:
        return new_residual, sumsq
    part = x  # placeholders at split_k 1: no workspace, no atomics
    if sk > 1:
        part = _skinny.split_workspace(workspace, sk, m, n, x.device, fn)
        if counters is None:
            counters = torch.zeros(tiles, dtype=torch.int32, device=x.device)
        elif (counters.dtype != torch.int32 or counters.device != x.device or counters.dim() != 1
              or not counters.is_contiguous() or counters.numel() < tiles):
            raise ValueError(f"{fn}: counters must be a contiguous 1-d int32 tensor on {x.device} with >= {tiles} "
                             f"elements (N tiles), got {list(counters.shape)} {counters.dtype} on {counters.device}")
    bk = cfg["block_k"]
    upcast = x.device.type == "cpu"
    _skinny_residual_kernel[(tiles, sk)](
        x, w, part, residual, new_residual, sumsq, counters if sk > 1 else x, m, n, k,
        _skinny.split_chunk(k, sk) if sk > 1 else k,
        x.stride(0), w.stride(0), part.stride(0) if sk > 1 else 0, part.stride(-2) if sk > 1 else 0,
        residual.stride(0), new_residual.stride(0), sumsq.stride(0),
        SPLIT_K=sk, BLOCK_M=_skinny.m_bucket(m), BLOCK_N=bn, BLOCK_K=bk, EVEN_K=k % (sk * bk) == 0,
        UPCAST=upcast, DOT_PRECISION="ieee" if (upcast or x.dtype == torch.float32) else "tf32",
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], **pdl_options(x.device, pdl_role),
    )
    return new_residual, sumsq


def _overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two contiguous tensors share storage bytes."""
    a0, b0 = a.data_ptr(), b.data_ptr()
    return a0 < b0 + b.numel() * b.element_size() and b0 < a0 + a.numel() * a.element_size()

