"""Fused residual add + RMSNorm (reference: ``add_rmsnorm_ref``; ``add_rmsnorm_partials_ref``).

    new_residual = x + residual      (or x when residual is None), rounded to x.dtype
    normed       = new_residual * rsqrt(mean(new_residual^2) + eps) * weight   (fp32 maths, x.dtype out)

One program per row holds the whole row in registers (BLOCK_N = next_pow2(N), N <= 16K), so the row is
read once and both outputs are written once. Bytes per row: 2 reads + 2 writes of N elements (+ the
weight, L2-resident): for Llama-3-8B decode (N=4096, bf16, M<=64) that is <= 2 MiB, under 1 us of HBM
time, so the kernel is launch-bound; fusing saves the three extra launches and the intermediate round
trips of the eager add, pow/mean and mul chain.

``add_rmsnorm_partials`` takes x as float32 split-K partials [S, M, N] (``kernels.skinny_linear``): it sums
them, rounds to the residual's dtype and continues as above, replacing the GEMM's reduce launch.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import triton
import triton.language as tl

from kernels.pdl import pdl_options, pdl_start

EARLY_MAX_ROWS = 8
"""A norm launch over at most this many rows of >= WIDE_ROW elements (EARLY_MAX_ROWS_NARROW / _TINY for narrower rows)
takes the PDL role "norm", a larger one "small" (kernels.pdl: the default policy releases "norm" early, "small"
late), so the weight-streaming GEMM after a short norm has its blocks resident while the norm runs: 0.04-0.07 ms per
Llama-3-8B step at 1-8 rows on the H200. The Llama-3.2-1B loses from 8 rows on (likely its SwiGLU's 128 programs,
one per SM, no longer fit beside 8 norm programs in one wave), hence a limit per row width (docs/LOG.md)."""
EARLY_MAX_ROWS_NARROW = 4
"""EARLY_MAX_ROWS for rows of at least TINY_ROW and fewer than WIDE_ROW elements (the 1B's 2,048): early up to 4 rows
(steps of 2-4 rows: a pending token with its lone root, w 4) gains ~0.02 ms per 1B step; at 8 rows early costs as
much."""
EARLY_MAX_ROWS_TINY = 16
"""EARLY_MAX_ROWS for rows of fewer than TINY_ROW elements: the real pair's SmolLM2-135M (576) and its draft, whose
GEMMs are a few MB each (latency, not bandwidth): early saves ~3% per step at 1-16 rows; more rows were not measured,
so they stay late."""
WIDE_ROW = 4096
TINY_ROW = 1024


class EarlyRows(NamedTuple):
    """The row limits under which a norm launch takes the PDL role "norm" (`norm_role`): at most `wide` rows of >=
    `wide_row` elements, `narrow` rows of `tiny_row` to `wide_row`, `tiny` rows of fewer than `tiny_row`."""

    wide: int
    narrow: int
    tiny: int
    wide_row: int
    tiny_row: int


EARLY_ROWS = EarlyRows(EARLY_MAX_ROWS, EARLY_MAX_ROWS_NARROW, EARLY_MAX_ROWS_TINY, WIDE_ROW, TINY_ROW)
"""The tuned limits above: the default `early_rows` of the norm launches (a benchmark or test passes others)."""


def norm_role(rows: int, n: int, early_rows: EarlyRows = EARLY_ROWS) -> str:
    """The kernels.pdl role of a norm launch over `rows` rows of `n` elements ("norm": released early by default)."""
    for name, v in zip(EarlyRows._fields, early_rows):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"add_rmsnorm: early_rows.{name}: expected an int >= 0, got {v!r}")
    e = EarlyRows(*early_rows)
    limit = e.wide if n >= e.wide_row else e.tiny if n < e.tiny_row else e.narrow
    return "norm" if rows <= limit else "small"


def _row_warps(block_n: int, num_warps: int | None = None) -> int:
    """The warps of a norm row program over next_pow2(N) = block_n elements: `num_warps` when given (a power of two,
    1-32), else 16 for rows of 2,048 elements and more (the 8B's 4,096 and the 1B's 2,048; ~1% faster steps than fewer
    on the H200, docs/LOG.md), block_n / 512 below (SmolLM2-135M's 576 -> 2 warps; not measured). Both norm kernels
    take the same value, so their row reductions stay bit for bit alike."""
    if num_warps is not None:
        if isinstance(num_warps, bool) or not isinstance(num_warps, int) or num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"add_rmsnorm: num_warps: expected a power of two in 1..32 or None, got {num_warps!r}")
        return num_warps
    return 16 if block_n >= 2048 else min(16, max(1, block_n // 512))


@triton.jit
def _add_rmsnorm_kernel(
    X, R, W, Normed, NewRes, N, eps,
    stride_x, stride_r, stride_n, stride_nr,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    # The weight first, before the PDL wait: no kernel writes it, so it may be read while the previous kernel still
    # runs, and its load leaves the chain after the row's reduction (-0.04 to -0.05 ms per 8B step on the H200).
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)
    pdl_start(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    h = tl.load(X + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_RESIDUAL:
        h += tl.load(R + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)
        h_rounded = h.to(NewRes.dtype.element_ty)  # the residual stream is stored (and normed) in x.dtype
        tl.store(NewRes + row * stride_nr + cols, h_rounded, mask=ok)
        h = h_rounded.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    tl.store(Normed + row * stride_n + cols, (h * rstd * w).to(Normed.dtype.element_ty), mask=ok)


def add_rmsnorm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor,
    eps: float,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    num_warps: int | None = None,
    early_rows: EarlyRows = EARLY_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (normed [M,N], new_residual [M,N]), both in x.dtype; inputs are not modified.

    With ``residual=None`` the returned new_residual is ``x`` itself (no copy). ``out`` optionally gives
    the (normed, new_residual) buffers. ``num_warps``: per row program (None: the heuristic, ``_row_warps``);
    ``early_rows``: when the launch takes the PDL role "norm" (``norm_role``).
    """
    m, n = x.shape
    if weight.shape != (n,):
        raise ValueError(f"add_rmsnorm: weight must be [{n}], got {tuple(weight.shape)}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"add_rmsnorm: residual {tuple(residual.shape)} != x {tuple(x.shape)}")
    if x.stride(-1) != 1 or (residual is not None and residual.stride(-1) != 1) or weight.stride(-1) != 1:
        raise ValueError("add_rmsnorm: inputs need a contiguous last dim")
    if out is not None:
        normed, new_res = out
    else:
        normed = torch.empty_like(x)
        new_res = torch.empty_like(x) if residual is not None else x
    if residual is None:
        new_res = x
    if m == 0:
        return normed, new_res
    block_n = triton.next_power_of_2(n)
    _add_rmsnorm_kernel[(m,)](
        x, residual if residual is not None else x, weight, normed, new_res, n, float(eps),
        x.stride(0), residual.stride(0) if residual is not None else 0, normed.stride(0), new_res.stride(0),
        HAS_RESIDUAL=residual is not None, BLOCK_N=block_n,
        num_warps=_row_warps(block_n, num_warps), **pdl_options(x.device, norm_role(m, n, early_rows)),
    )
    return normed, new_res


@triton.jit
def _add_rmsnorm_partials_kernel(
    P, R, W, Normed, NewRes, N, eps,
    stride_ps, stride_pm, stride_r, stride_n, stride_nr,
    SPLIT_K: tl.constexpr, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr,
):
    cols = tl.arange(0, BLOCK_N)
    ok = cols < N
    w = tl.load(W + cols, mask=ok, other=0.0).to(tl.float32)  # before the PDL wait, as _add_rmsnorm_kernel
    pdl_start(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    p = P + row * stride_pm + cols
    y = tl.load(p, mask=ok, other=0.0)  # split order, as skinny_linear's reduce kernel sums them
    for s in tl.static_range(1, SPLIT_K):
        y += tl.load(p + s * stride_ps, mask=ok, other=0.0)
    # from here on _add_rmsnorm_kernel's operations and rounding order, x being the rounded projection
    h = y.to(NewRes.dtype.element_ty).to(tl.float32)
    h += tl.load(R + row * stride_r + cols, mask=ok, other=0.0).to(tl.float32)
    h_rounded = h.to(NewRes.dtype.element_ty)
    tl.store(NewRes + row * stride_nr + cols, h_rounded, mask=ok)
    h = h_rounded.to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / N + eps)
    tl.store(Normed + row * stride_n + cols, (h * rstd * w).to(Normed.dtype.element_ty), mask=ok)


def add_rmsnorm_partials(
    partials: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    *,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    num_warps: int | None = None,
    early_rows: EarlyRows = EARLY_ROWS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rmsnorm of a split-K projection given as float32 partials [S, M, N] (``skinny_linear_partials``).

    x = sum of the S partials in split order (float32), rounded to residual.dtype (the projection output a
    GEMM would have stored); then exactly ``add_rmsnorm(x, residual, weight, eps)``: the results are bitwise
    equal to ``skinny_linear`` (split_k = S) followed by ``add_rmsnorm``, one launch instead of two.
    Returns (normed, new_residual) in residual.dtype; ``out`` optionally gives those two [M, N] buffers (normed may
    be float16: the input of fp8-weight GEMMs, ``kernels.skinny_linear.fp8_operands``).
    Bytes per row: S * N * 4 partials + 2 N reads + 2 N writes, still launch-bound at decode sizes.
    ``num_warps``, ``early_rows``: as ``add_rmsnorm``'s.
    """
    if partials.dim() != 3 or partials.dtype != torch.float32:
        raise ValueError(f"add_rmsnorm_partials: partials must be float32 [S, M, N], got "
                         f"{tuple(partials.shape)} {partials.dtype}")
    s, m, n = partials.shape
    if s < 1:
        raise ValueError("add_rmsnorm_partials: partials needs at least one split (S >= 1)")
    if residual.shape != (m, n) or residual.device != partials.device:
        raise ValueError(f"add_rmsnorm_partials: residual must be [{m}, {n}] on {partials.device}, got "
                         f"{tuple(residual.shape)} on {residual.device}")
    if weight.shape != (n,):
        raise ValueError(f"add_rmsnorm_partials: weight must be [{n}], got {tuple(weight.shape)}")
    if partials.stride(-1) != 1 or residual.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("add_rmsnorm_partials: partials, residual and weight need a contiguous last dim")
    if out is not None:
        normed, new_res = out
        for name, t, dtypes in (("out[0] (normed)", normed, (residual.dtype, torch.float16)),
                                ("out[1] (new_residual)", new_res, (residual.dtype,))):
            if t.shape != (m, n) or t.dtype not in dtypes or t.stride(-1) != 1:
                raise ValueError(f"add_rmsnorm_partials: {name} must be [{m}, {n}] "
                                 f"{' or '.join(map(str, dict.fromkeys(dtypes)))} with a contiguous last dim, got "
                                 f"{tuple(t.shape)} {t.dtype}")
    else:
        normed, new_res = torch.empty_like(residual), torch.empty_like(residual)
    if m == 0:
        return normed, new_res
    block_n = triton.next_power_of_2(n)
    _add_rmsnorm_partials_kernel[(m,)](
        partials, residual, weight, normed, new_res, n, float(eps),
        partials.stride(0), partials.stride(1), residual.stride(0), normed.stride(0), new_res.stride(0),
        SPLIT_K=s, BLOCK_N=block_n,
        num_warps=_row_warps(block_n, num_warps),  # as add_rmsnorm: the same row reduction, bit for bit
        **pdl_options(residual.device, norm_role(m, n, early_rows)),
    )
    return normed, new_res
