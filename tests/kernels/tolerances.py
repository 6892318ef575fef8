"""Comparison tolerances for kernel tests, defined once per dtype, and the one assert helper.

Kernel and reference read the same rounded inputs and both accumulate in float32, so they differ by
(a) float32 summation order and (b) the final rounding to the output dtype. We allow two units of the
dtype's machine epsilon (torch.finfo(dtype).eps) both absolutely and relatively:
  float32  eps = 1.19e-7 -> 1e-5 (x ~80: the fp32 reductions here run over a few hundred terms)
  float16  eps = 9.77e-4 -> 2e-3  (2 eps: one output rounding on each side)
  bfloat16 eps = 7.81e-3 -> 1.6e-2 (2 eps; GPU only: the interpreter cannot compute in bf16)
"""

from __future__ import annotations

import torch

TOL: dict[torch.dtype, tuple[float, float]] = {  # dtype -> (atol, rtol)
    torch.float32: (1e-5, 1e-5),
    torch.float16: (2e-3, 2e-3),
    torch.bfloat16: (1.6e-2, 1.6e-2),
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, what: str = "") -> None:
    """Elementwise |actual - expected| <= atol + rtol * |expected| with the dtype's tolerances.

    The failure message reports max and mean absolute error, the worst index and the NaN count.
    """
    atol, rtol = TOL[dtype]
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    a = actual.detach().double().cpu()
    e = expected.detach().double().cpu()
    err = (a - e).abs()
    nan = int(torch.isnan(a).sum())
    bad = ~(err <= atol + rtol * e.abs())  # NaN counts as bad
    if bool(bad.any()):
        err_f = torch.nan_to_num(err, nan=float("inf"))
        worst = tuple(int(i) for i in torch.unravel_index(torch.argmax(err_f), err.shape))
        raise AssertionError(
            f"{what}: {int(bad.sum())}/{err.numel()} elements outside atol={atol}, rtol={rtol}; "
            f"max abs err {err_f.max().item():.3e}, mean abs err {err_f[torch.isfinite(err_f)].mean().item():.3e}, "
            f"worst index {worst} (got {a[worst].item():.6g}, want {e[worst].item():.6g}), NaNs {nan}"
        )


def poisoned(shape: tuple[int, ...] | torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """An output buffer full of NaN (or -7 for integers), so unwritten elements fail the comparison."""
    if dtype.is_floating_point:
        return torch.full(shape, float("nan"), dtype=dtype)
    return torch.full(shape, -7, dtype=dtype)
