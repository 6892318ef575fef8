"""The suite's two ways to compare floating-point tensors: `assert_close` (two numeric paths) and `assert_bitwise`.

Two ways of computing the same result (kernel vs reference, TMA vs pointer loads, split-KV vs one pass, graph vs
eager, ...) read the same rounded inputs but may sum in different orders and blockings: Triton's CPU interpreter
runs `tl.dot` through numpy's BLAS, whose kernel depends on the CPU (and OPENBLAS_CORETYPE), and GPU kernels
differ in tile shapes and FMA contraction. So they agree only up to rounding, bounded as follows.

- Accumulation. Narrow dtypes (fp16, bf16) and fp32 accumulate in float32 (eps_acc = 2^-23); float64 in float64.
  An n-term sum of unit-scale terms carries a rounding error that grows like sqrt(n) * eps_acc for independent
  roundings (n * eps_acc is the worst case, never approached by blocked sums of random data). We allow
  C_ACC * sqrt(n) * eps_acc with C_ACC = 8: the difference of two paths (x sqrt 2), over thousands of elements
  (a 4-5 sigma tail), for sums whose partial sums grow like sqrt(k).
- Output rounding. Each path rounds its result to `dtype` once (half an ulp); two values a hair apart in float32
  can round to neighbours, so we allow 2 * eps(dtype).

  tol = C_ACC * sqrt(reduction) * eps_acc + 2 * eps(dtype),  |actual - expected| <= tol * (1 + |expected|)

`reduction` is the number of terms summed into one output element along its longest chain (a GEMM: K; attention:
head_dim + keys; an elementwise op: 1). The absolute part (tol * 1) covers outputs near zero from cancelling
unit-scale terms. Log-probabilities are the log of a sum: a relative error tol of the sum is an absolute error tol
of its log, whatever the value's size, so they are compared with `relative=False` (|actual - expected| <= tol).
Examples: fp32 with K = 256 -> 1.5e-5; fp16 -> 2e-3 (2 eps); bf16 (GPU only) -> 1.6e-2.
A whole decoder forward chains its layers' sums: `forward_terms` gives its `reduction`. Not covered: float32 Triton
GEMMs on NVIDIA GPUs, whose tl.dot rounds inputs to TF32 by default (tests/gpu keep a norm-wise bound for those).

`assert_bitwise` is the only way to demand equal bits, and it takes the reason why the two paths are provably the
same operations in the same order (a copy, a gather, the same kernel run twice on the same inputs).
Integer and bool tensors (token ids, masks, indices) are compared with torch.equal directly.
"""

from __future__ import annotations

import math

import numpy as np
import torch

C_ACC = 8.0  # safety factor on the sqrt(n) accumulation term (see the module docstring)


def tolerance(dtype: torch.dtype, reduction: int) -> float:
    """The relative-and-absolute bound for two paths that each sum `reduction` terms and round to `dtype`."""
    if not dtype.is_floating_point:
        raise ValueError(f"tolerance: dtype must be a floating-point dtype, got {dtype}")
    if isinstance(reduction, bool) or not isinstance(reduction, int) or reduction < 1:
        raise ValueError(f"tolerance: reduction must be an int >= 1 (terms summed per element), got {reduction!r}")
    eps_out = torch.finfo(dtype).eps
    eps_acc = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps
    return C_ACC * math.sqrt(reduction) * eps_acc + 2 * eps_out


def forward_terms(shape, keys: int) -> int:
    """`reduction` for a whole decoder forward of `shape` (a conf.presets.ModelShape) over `keys` cached keys: the
    terms along its longest chain, layer after layer (their rounding errors add up like one longer sum): the input
    norm, QKV GEMM (hidden each), attention (head_dim + keys), output projection (q_size), MLP norm and gate/up
    (hidden each), down projection (intermediate); then the final norm and the LM head (hidden each)."""
    h = shape.hidden_size
    per_layer = 4 * h + shape.head_dim + keys + shape.num_heads * shape.head_dim + shape.intermediate_size
    return shape.num_layers * per_layer + 2 * h


def _tensor(x) -> torch.Tensor:
    if isinstance(x, np.ndarray) or not isinstance(x, torch.Tensor):
        x = torch.as_tensor(np.asarray(x))
    return x.detach().cpu()


def _worst(err: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.unravel_index(torch.argmax(err), err.shape)) if err.dim() else ()


def assert_close(actual, expected, dtype: torch.dtype, *, reduction: int, what: str = "",
                 relative: bool = True) -> None:
    """|actual - expected| <= tol * (1 + |expected|) elementwise (tol alone with relative=False: log-probabilities),
    tol = tolerance(dtype, reduction); NaN fails.

    The failure message reports the bound, max and mean absolute error, the worst index and the NaN count.
    """
    tol = tolerance(dtype, reduction)
    a, e = _tensor(actual), _tensor(expected)
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    a, e = a.double(), e.double()
    err = (a - e).abs()
    bound = tol * (1 + e.abs()) if relative else torch.full_like(e, tol)
    bad = ~(err <= bound)  # NaN counts as bad
    if bool(bad.any()):
        err_f = torch.nan_to_num(err, nan=float("inf"))
        finite = err_f[torch.isfinite(err_f)]
        worst = _worst(err_f)
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{err.numel()} elements outside tol {tol:.3g}{' * (1 + |expected|)' * relative} "
            f"({dtype}, reduction {reduction}); max abs err {err_f.max().item():.3e}, mean abs err "
            f"{(finite.mean().item() if finite.numel() else float('nan')):.3e}, worst index {worst} "
            f"(got {a[worst].item():.6g}, want {e[worst].item():.6g}), NaNs {int(torch.isnan(a).sum())}"
        )


def assert_bitwise(actual, expected, *, reason: str, what: str = "") -> None:
    """The same dtype, shape and bits (NaN in `actual` fails: an unwritten poisoned buffer is never a result).

    `reason` says why the two paths are provably the same operations in the same order; it must not be empty.
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError("assert_bitwise: reason must say why the two paths are the same operations in order")
    a, e = _tensor(actual), _tensor(expected)
    assert a.dtype == e.dtype, f"{what}: dtype {a.dtype} != {e.dtype} (bitwise: {reason})"
    assert a.shape == e.shape, f"{what}: shape {tuple(a.shape)} != {tuple(e.shape)} (bitwise: {reason})"
    if not a.dtype.is_floating_point:
        assert torch.equal(a, e), f"{what}: {int((a != e).sum())}/{a.numel()} elements differ (bitwise: {reason})"
        return
    nan = int(torch.isnan(a).sum())
    bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    differ = a.contiguous().view(bits) != e.contiguous().view(bits)
    if nan or bool(differ.any()):
        err = torch.nan_to_num((a.double() - e.double()).abs(), nan=float("inf"))
        worst = _worst(torch.where(differ, err, torch.zeros_like(err)))
        raise AssertionError(
            f"{what}: {int(differ.sum())}/{a.numel()} elements differ in bits, expected none ({reason}); "
            f"max abs diff {err.max().item():.3e}, worst index {worst} (got {a[worst].item():.6g}, "
            f"want {e[worst].item():.6g}), NaNs {nan}"
        )


def poisoned(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """An output buffer full of NaN (or -7 for integers), so unwritten elements fail the comparison."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, -7, dtype=dtype)
