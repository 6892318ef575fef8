"""tests/tolerances.py: the bound follows dtype and reduction length; bit equality needs a reason; NaN never passes."""

from __future__ import annotations

import pytest
import torch

from tests.tolerances import assert_bitwise, assert_close, poisoned, tolerance


def test_the_bound_grows_with_the_reduction_length_and_the_dtype():
    fp32 = [tolerance(torch.float32, n) for n in (1, 16, 256, 4096)]
    assert fp32 == sorted(fp32) and len(set(fp32)) == 4
    assert tolerance(torch.float32, 1) < tolerance(torch.float16, 1) < tolerance(torch.bfloat16, 1)
    assert tolerance(torch.float64, 4096) < tolerance(torch.float32, 1)
    assert 2 * torch.finfo(torch.float16).eps <= tolerance(torch.float16, 64) < 3 * torch.finfo(torch.float16).eps
    for bad in (0, -3, 2.0, True):
        with pytest.raises(ValueError, match="reduction must be an int >= 1"):
            tolerance(torch.float32, bad)


def test_a_reordered_long_float32_sum_passes():
    """Sequential vs pairwise-blocked float32 sums of 4096 terms differ in the last bits, within the bound."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4096, generator=g)
    sequential = torch.zeros(64)
    for j in range(x.shape[1]):
        sequential = sequential + x[:, j]
    blocked = x.view(64, 64, 64).sum(-1).sum(-1)
    assert not torch.equal(sequential, blocked)  # the two orders really differ
    assert_close(sequential, blocked, torch.float32, reduction=4096, what="reordered sum")
    with pytest.raises(AssertionError, match="elements outside"):  # a bound without the length is too tight for it
        assert_close(sequential, blocked, torch.float32, reduction=1, what="reordered sum")


def test_a_real_error_and_nan_fail_with_the_details():
    want = torch.linspace(-1, 1, 100)
    got = want.clone()
    got[37] += 1e-3
    with pytest.raises(AssertionError, match=r"1/100 elements outside.*worst index \(37,\).*NaNs 0"):
        assert_close(got, want, torch.float32, reduction=256, what="shifted")
    with pytest.raises(AssertionError, match=r"NaNs 3"):
        assert_close(poisoned((3,), torch.float32), torch.zeros(3), torch.float32, reduction=1)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(want[:5], want, torch.float32, reduction=1)


def test_bitwise_needs_a_reason_and_equal_bits():
    a = torch.randn(8, dtype=torch.float16)
    for reason in ("", "   ", None):
        with pytest.raises(ValueError, match="reason must say why"):
            assert_bitwise(a, a.clone(), reason=reason)
    assert_bitwise(a, a.clone(), reason="a copy")
    b = a.clone()
    b[2] += 1
    with pytest.raises(AssertionError, match=r"1/8 elements differ in bits.*worst index \(2,\)"):
        assert_bitwise(b, a, reason="a copy")
    with pytest.raises(AssertionError, match="NaNs 2"):  # unwritten poisoned buffers are never equal results
        assert_bitwise(poisoned((2,), torch.float32), poisoned((2,), torch.float32), reason="a copy")
    with pytest.raises(AssertionError, match="dtype"):
        assert_bitwise(a, a.float(), reason="a copy")
    zero = torch.zeros(1)
    with pytest.raises(AssertionError, match="differ in bits"):  # -0.0 == 0.0 numerically, not in bits
        assert_bitwise(-zero, zero, reason="a copy")
