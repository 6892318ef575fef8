"""swiglu vs the float32 reference over irregular shapes (Triton interpreter on CPU)."""

from __future__ import annotations

import pytest
import torch

from kernels import swiglu
from kernels.reference import swiglu_ref
from tests.tolerances import assert_close, poisoned

SHAPES = [(1, 16, 1), (1, 96, 80), (5, 130, 200), (16, 64, 64), (33, 72, 48)]  # (M, K, I)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


def _inputs(m, k, i, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    # weights scaled like a real init (std 1/sqrt(K)) so gate/up stay O(1) and silu is in its curved part
    wg = (torch.randn(i, k, generator=g) / k**0.5).to(dtype)
    wu = (torch.randn(i, k, generator=g) / k**0.5).to(dtype)
    return x, wg, wu


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"M{m}_K{k}_I{i}" for m, k, i in SHAPES])
def test_matches_reference(shape, dtype):
    m, k, i = shape
    x, wg, wu = _inputs(m, k, i, dtype, seed=m * k + i)
    out = poisoned((m, i), dtype)
    res = swiglu(x, wg, wu, out=out, block_k=32)  # block_k=32 makes K loops with ragged tails
    assert res is out
    assert_close(out, swiglu_ref(x, wg, wu), dtype, reduction=k, what=f"M,K,I={shape}")


def test_default_tiles_and_weight_views():
    """Default tile choice, and gate/up given as row slices of one fused [2I, K] weight."""
    x, _, _ = _inputs(7, 48, 40, torch.float32, seed=1)
    w = torch.randn(80, 48, generator=torch.Generator().manual_seed(2)) / 7
    wg, wu = w[:40], w[40:]
    assert_close(swiglu(x, wg, wu), swiglu_ref(x, wg, wu), torch.float32, reduction=48, what="views")


def test_rejects_mismatched_weights():
    x, wg, wu = _inputs(2, 16, 8, torch.float32, seed=0)
    with pytest.raises(ValueError, match="weights"):
        swiglu(x, wg, wu[:, :8].contiguous())
