"""kernels.norm_epilogue: the producer (skinny_linear_residual) against skinny_linear_partials + add_rmsnorm_partials,
and each consumer's norm_in (skinny_linear, swiglu, qkv_rope_kv_write) against the plain kernel fed add_rmsnorm's
normed rows (Triton interpreter on CPU, which runs the programs one after another: the split-K counters take the
same path as on a GPU, without the concurrency). The new residual is bitwise equal; the consumers' products within
tolerance (their sum of squares runs per tile, then over tiles: another order than the norm kernel's).
"""

from __future__ import annotations

import pytest
import torch

from kernels import (
    add_rmsnorm,
    add_rmsnorm_partials,
    qkv_rope_kv_write,
    skinny_linear,
    skinny_linear_partials,
    skinny_linear_residual,
    swiglu,
)
from kernels.norm_epilogue import new_counters
from kernels.reference import normed_input_ref, skinny_linear_ref, skinny_linear_residual_ref
from kernels.skinny_linear import CONFIGS
from tests.kernels.tolerances import assert_close, poisoned

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
EPS = 1e-5
K, N, BLOCK_N = 96, 80, 32  # N = 80: three tiles of 32, the last one ragged (16 columns masked)


def _tile(monkeypatch, n, k, split_k, block_n=BLOCK_N, block_k=32):
    monkeypatch.setitem(CONFIGS, (n, k, 16), {"block_n": block_n, "block_k": block_k, "split_k": split_k,
                                              "num_warps": 4, "num_stages": 2})


def _producer_inputs(m, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, K, generator=g).to(dtype)
    w = (torch.randn(N, K, generator=g) / K**0.5).to(dtype)  # O(1) outputs
    residual = torch.randn(m, N, generator=g).to(dtype)
    return x, w, residual


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("split_k", [1, 2, 4])
def test_producer_matches_partials_then_norm(split_k, m, dtype, monkeypatch):
    """Bitwise add_rmsnorm_partials's new residual; sumsq per tile = the reference's, its sum over tiles = the row
    sums of squares; the counters zero after the call; a second call on new data (same counters) right too."""
    _tile(monkeypatch, N, K, split_k)
    counters = new_counters(N, "cpu")
    norm_w = torch.ones(N, dtype=dtype)
    for call in range(2):
        x, w, residual = _producer_inputs(m, dtype, seed=split_k * 100 + m * 10 + call)
        before = residual.clone()
        bufs = poisoned((m, N), dtype), poisoned((3, m), torch.float32)
        new_res, sumsq = skinny_linear_residual(x, w, residual, new_residual=bufs[0], sumsq=bufs[1],
                                                counters=counters)
        assert new_res is bufs[0] and sumsq is bufs[1]
        _, want = add_rmsnorm_partials(skinny_linear_partials(x, w), residual, norm_w, EPS)
        assert torch.equal(new_res, want), f"call {call}: new_residual must be bitwise add_rmsnorm_partials's"
        ref_res, ref_sq = skinny_linear_residual_ref(x, w, residual, split_k, BLOCK_N)  # another matmul order
        assert_close(new_res, ref_res, dtype, f"call {call}: new_residual vs reference")
        assert_close(sumsq, ref_sq, dtype, f"call {call}: sumsq per tile vs reference")
        assert_close(sumsq.sum(0), (want.double() ** 2).sum(1), torch.float32, f"call {call}: row sums of squares")
        assert not counters.any(), f"call {call}: counters left {counters.tolist()}"
        assert torch.equal(residual, before), "residual was modified"


def test_producer_allocates_and_updates_in_place(monkeypatch):
    """Without buffers (workspace, counters and outputs allocated); new_residual=residual (in place) is allowed."""
    _tile(monkeypatch, N, K, 2)
    x, w, residual = _producer_inputs(3, torch.float32, seed=4)
    new_res, sumsq = skinny_linear_residual(x, w, residual)
    assert sumsq.shape == (3, 3) and sumsq.dtype == torch.float32
    in_place, sumsq2 = skinny_linear_residual(x, w, residual, new_residual=residual)
    assert in_place is residual and torch.equal(residual, new_res) and torch.equal(sumsq2, sumsq)
    empty_res, empty_sq = skinny_linear_residual(x[:0], w, residual[:0])
    assert empty_res.shape == (0, N) and empty_sq.shape == (3, 0)


def _normed_case(m, k, dtype, seed, tiles=3):
    """Residual rows h [m, k], their sums of squares in `tiles` column groups (as a producer stores them), a norm
    weight; and add_rmsnorm's normed rows of h (the plain path's consumer input)."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(m, k, generator=g).to(dtype)
    norm_w = (1 + 0.5 * torch.randn(k, generator=g)).to(dtype)
    hf = h.float()
    sumsq = torch.stack([(c ** 2).sum(-1) for c in hf.tensor_split(tiles, dim=1)])
    normed, _ = add_rmsnorm(h, None, norm_w, EPS)
    return h, (sumsq, norm_w, EPS), normed


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("m,split_k", [(1, 1), (3, 2), (8, 1)])
def test_skinny_linear_norm_in_matches_norm_then_gemm(m, split_k, dtype, monkeypatch):
    """Also with the consumer's own K split (rstd is per row) and K = 100 (masked K tail, norm weight masked too)."""
    for k in (96, 100):
        _tile(monkeypatch, 48, k, split_k)
        h, norm_in, normed = _normed_case(m, k, dtype, seed=m * 10 + split_k + k)
        w = (torch.randn(48, k, generator=torch.Generator().manual_seed(k)) / k**0.5).to(dtype)
        got = skinny_linear(h, w, norm_in=norm_in)
        assert_close(got, skinny_linear(normed, w), dtype, f"skinny_linear norm_in K={k}")
        assert_close(got, skinny_linear_ref(normed_input_ref(h, *norm_in), w), dtype, f"vs reference K={k}")
        out = poisoned((m, 48), torch.float32)  # the LM head's float32 logits
        skinny_linear(h, w, norm_in=norm_in, out=out)
        assert_close(out, skinny_linear(normed, w, out=torch.empty(m, 48)), torch.float32 if dtype == torch.float32
                     else dtype, f"float32 out K={k}")
        parts = skinny_linear_partials(h, w, norm_in=norm_in)
        assert_close(parts.sum(0), skinny_linear_partials(normed, w).sum(0), dtype, f"partials K={k}")


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("m", [1, 5])
def test_swiglu_norm_in_matches_norm_then_swiglu(m, dtype):
    h, norm_in, normed = _normed_case(m, 100, dtype, seed=m)
    g = torch.Generator().manual_seed(7)
    wg, wu = ((torch.randn(48, 100, generator=g) / 10).to(dtype) for _ in range(2))
    got = swiglu(h, wg, wu, norm_in=norm_in, block_k=32)
    assert_close(got, swiglu(normed, wg, wu, block_k=32), dtype, "swiglu norm_in")


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("t,k", [(1, 64), (5, 40)])
def test_qkv_rope_norm_in_matches_norm_then_qkv_rope(t, k, dtype):
    """K = 40: the masked K tail (BLOCK_K 64 > K)."""
    hq, hkv, d = 4, 2, 16
    h, norm_in, normed = _normed_case(t, k, dtype, seed=t + k)
    g = torch.Generator().manual_seed(3)
    w = (torch.randn((hq + 2 * hkv) * d, k, generator=g) / k**0.5).to(dtype)
    pos = torch.arange(t) + 50
    slots = torch.randperm(2 * t + 3, generator=g)[:t]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    caches = [torch.zeros(2 * t + 3, hkv, d, dtype=dtype) for _ in range(4)]
    q = qkv_rope_kv_write(h, w, pos, inv_freq, caches[0], caches[1], slots, hq, hkv, norm_in=norm_in)
    want = qkv_rope_kv_write(normed, w, pos, inv_freq, caches[2], caches[3], slots, hq, hkv)
    assert_close(q, want, dtype, "q")
    assert_close(caches[0], caches[2], dtype, "k_cache")
    assert_close(caches[1], caches[3], dtype, "v_cache")


def _bad_cases():
    x, w, r = _producer_inputs(3, torch.float32, seed=9)
    h, (sq, nw, eps), _ = _normed_case(3, K, torch.float32, seed=9)
    buf = torch.zeros(241)  # a residual and a new_residual one element apart
    return [  # (function, message the ValueError must match, call)
        ("skinny_linear_residual", r"residual must be a contiguous \[3, 80\]",
         lambda: skinny_linear_residual(x, w, r[:2])),
        ("skinny_linear_residual", "residual must be a floating-point",
         lambda: skinny_linear_residual(x, w, r.int())),
        ("skinny_linear_residual", r"w must be \[N, K=96\]", lambda: skinny_linear_residual(x, w[:, :64], r)),
        ("skinny_linear_residual", r"new_residual must be a contiguous \[3, 80\] torch.float32",
         lambda: skinny_linear_residual(x, w, r, new_residual=torch.empty(3, 80, dtype=torch.float16))),
        ("skinny_linear_residual", "new_residual must be residual itself or not overlap it",
         lambda: skinny_linear_residual(x, w, buf[:240].view(3, 80), new_residual=buf[1:241].view(3, 80))),
        ("skinny_linear_residual", r"sumsq must be a contiguous \[3, 3\] torch.float32",
         lambda: skinny_linear_residual(x, w, r, sumsq=torch.empty(2, 3))),
        ("skinny_linear_residual", "counters must be a contiguous 1-d int32 tensor",
         lambda: skinny_linear_residual(x, w, r, split_k=2, counters=torch.zeros(2, dtype=torch.int32))),
        ("skinny_linear_residual", "counters must be a contiguous 1-d int32",
         lambda: skinny_linear_residual(x, w, r, split_k=2, counters=torch.zeros(8))),
        ("skinny_linear_residual", "workspace must be a contiguous float32",
         lambda: skinny_linear_residual(x, w, r, split_k=2, workspace=torch.empty(10))),
        ("skinny_linear_residual", "pdl_role must be one of", lambda: skinny_linear_residual(x, w, r, pdl_role="x")),
        ("skinny_linear", r"norm_in's sumsq must be float32 \[T >= 1, M=3\]",
         lambda: skinny_linear(h, w, norm_in=(sq[:, :2], nw, eps))),
        ("skinny_linear", "norm_in's sumsq must be float32", lambda: skinny_linear(h, w, norm_in=(sq.half(), nw, eps))),
        ("skinny_linear", r"norm_in's norm_weight must be a contiguous floating-point \[K=96\]",
         lambda: skinny_linear(h, w, norm_in=(sq, nw[:64], eps))),
        ("skinny_linear", "norm_in's eps must be a float >= 0", lambda: skinny_linear(h, w, norm_in=(sq, nw, -1.0))),
        ("skinny_linear", r"norm_in must be a tuple \(sumsq, norm_weight, eps\)",
         lambda: skinny_linear(h, w, norm_in=[sq, nw, eps])),
        ("skinny_linear_partials", "norm_in's norm_weight",
         lambda: skinny_linear_partials(h, w, norm_in=(sq, nw.int(), eps))),
        ("swiglu", "norm_in's sumsq", lambda: swiglu(h, w, w, norm_in=(sq.t(), nw, eps))),
        ("qkv_rope_kv_write", "norm_in's norm_weight",
         lambda: qkv_rope_kv_write(h[:, :64], torch.zeros(128, 64), torch.arange(3), torch.ones(8),
                                   torch.zeros(8, 2, 16), torch.zeros(8, 2, 16), torch.arange(3), 4, 2,
                                   norm_in=(sq, nw, eps))),
    ]


def test_bad_operands_name_the_function_and_argument(monkeypatch):
    _tile(monkeypatch, N, K, 1)
    for fn, msg, call in _bad_cases():
        with pytest.raises(ValueError, match=f"{fn}: .*{msg}|{fn}: {msg}"):
            call()
