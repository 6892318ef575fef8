"""add_rmsnorm vs the float32 reference (Triton interpreter on CPU)."""

from __future__ import annotations

import pytest
import torch

from kernels import add_rmsnorm
from kernels.reference import add_rmsnorm_ref
from tests.tolerances import assert_bitwise, assert_close, poisoned

SHAPES = [(1, 1), (3, 100), (17, 257), (4, 4096)]  # (M, N)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def _inputs(m, n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(m, n, generator=g) * 3).to(dtype)
    res = torch.randn(m, n, generator=g).to(dtype)
    w = (1 + 0.5 * torch.randn(n, generator=g)).to(dtype)
    return x, res, w


@pytest.mark.parametrize("with_residual", [True, False], ids=["residual", "no_residual"])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"M{m}_N{n}" for m, n in SHAPES])
def test_matches_reference(shape, dtype, with_residual):
    x, res, w = _inputs(*shape, dtype, seed=shape[0] * 31 + shape[1])
    res_in = res if with_residual else None
    x_before, res_before = x.clone(), res.clone()
    bufs = (poisoned(shape, dtype), poisoned(shape, dtype)) if with_residual else None
    normed, new_res = add_rmsnorm(x, res_in, w, 1e-5, out=bufs)
    want_normed, want_res = add_rmsnorm_ref(x, res_in, w, 1e-5)
    assert_close(new_res, want_res, dtype, reduction=1, what="new_residual")
    assert_close(normed, want_normed, dtype, reduction=shape[1], what="normed")  # mean of squares over N
    assert_bitwise(x, x_before, reason="an input the kernel must not write", what="x")
    assert_bitwise(res, res_before, reason="an input the kernel must not write", what="residual")
    if not with_residual:
        assert new_res is x


def test_norm_scale_invariance():
    """rmsnorm(c * h) == rmsnorm(h) for c > 0 (eps negligible): a property the reference also has."""
    x, res, w = _inputs(5, 64, torch.float32, seed=9)
    a, _ = add_rmsnorm(x, res, w, 1e-12)
    b, _ = add_rmsnorm(4 * x, 4 * res, w, 1e-12)
    assert_close(a, b, torch.float32, reduction=64, what="scale invariance")



def test_row_warps_default_and_override():
    """16 warps for rows of >= 2,048 elements (measured on the H200), block_n / 512 below (unchanged); a `num_warps`
    passed in applies to both kernels and a bad one is named."""
    import kernels.norm as norm

    assert [norm._row_warps(b) for b in (64, 1024, 2048, 4096, 16384)] == [1, 2, 16, 16, 16]
    assert norm._row_warps(4096, 4) == 4
    for bad in (3, 64, True, "8"):
        with pytest.raises(ValueError, match=r"add_rmsnorm: num_warps: expected a power of two in 1..32"):
            norm._row_warps(4096, bad)
    x, w = torch.randn(2, 64), torch.ones(64)
    assert torch.equal(norm.add_rmsnorm(x, None, w, 1e-5, num_warps=2)[0], norm.add_rmsnorm(x, None, w, 1e-5)[0])
