"""skinny_linear_normed / swiglu_normed against their two-launch forms, add_rmsnorm_partials then skinny_linear /
swiglu (Triton interpreter on CPU; bf16 is upcast after the loads there, so it covers loads, stores and rounding).
Both outputs are compared to rounding (each program sums the squares per K chunk: another order than the norm
kernel's row reduction; the new residual is summed in another kernel). Narrow K tiles make several chunks per row.
"""

from __future__ import annotations

import sys

import pytest
import torch

from kernels import add_rmsnorm_partials, skinny_linear, skinny_linear_normed, swiglu, swiglu_normed
from kernels.reference import skinny_linear_normed_ref, swiglu_normed_ref
from kernels.skinny_linear import CONFIGS
from tests.tolerances import assert_bitwise, assert_close, poisoned

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
EPS = 1e-5
# (S, M, K, N, block_k): one chunk; even chunks; K=100 ends inside a chunk (the masked path)
CASES = [(1, 1, 64, 48, 64), (2, 3, 128, 96, 32), (3, 2, 100, 80, 32)]
IDS = [f"S{s}_M{m}_K{k}_N{n}_bk{bk}" for s, m, k, n, bk in CASES]


def _inputs(s, m, k, n, dtype, seed, weights=1):
    g = torch.Generator().manual_seed(seed)
    partials = torch.randn(s, m, k, generator=g)
    residual = torch.randn(m, k, generator=g).to(dtype)
    norm_w = (1 + 0.5 * torch.randn(k, generator=g)).to(dtype)
    ws = [(torch.randn(n, k, generator=g) / k**0.5).to(dtype) for _ in range(weights)]  # O(1) outputs
    return partials, residual, norm_w, ws


def _tile(monkeypatch, n, k, block_k, split_k=1):
    monkeypatch.setitem(CONFIGS, (n, k, 16), {"block_n": 32, "block_k": block_k, "split_k": split_k, "num_warps": 4,
                                              "num_stages": 2})


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_skinny_linear_normed_matches_norm_then_gemm(case, dtype, monkeypatch):
    s, m, k, n, bk = case
    _tile(monkeypatch, n, k, bk)
    partials, residual, norm_w, (w,) = _inputs(s, m, k, n, dtype, seed=s * 100 + k)
    before = (partials.clone(), residual.clone())
    h, want_res = add_rmsnorm_partials(partials, residual, norm_w, EPS)
    want = skinny_linear(h, w)
    bufs = poisoned((m, n), dtype), poisoned((m, k), dtype)
    out, new_res = skinny_linear_normed(partials, residual, norm_w, EPS, w, out=bufs[0], new_residual=bufs[1])
    assert out is bufs[0] and new_res is bufs[1]
    assert_close(new_res, want_res, dtype, reduction=s + 1, what="new_residual")
    assert_close(out, want, dtype, reduction=2 * k, what=f"skinny_linear_normed {case}")  # the norm's K, the GEMM's K
    assert_bitwise(partials, before[0], reason="an input the kernel must not write", what="partials")
    assert_bitwise(residual, before[1], reason="an input the kernel must not write", what="residual")
    out2, new_res2 = skinny_linear_normed(partials, residual, norm_w, EPS, w)  # allocated outputs
    same = "the same kernel on the same inputs, run twice: determinism"
    assert_bitwise(out2, out, reason=same, what="out")
    assert_bitwise(new_res2, new_res, reason=same, what="new_residual")


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_swiglu_normed_matches_norm_then_swiglu(case, dtype, monkeypatch):
    s, m, k, i, bk = case
    fused_mlp = sys.modules["kernels.fused_mlp"]
    monkeypatch.setattr(fused_mlp, "BLOCK_I", 32)
    monkeypatch.setattr(fused_mlp, "BLOCK_K", bk)
    partials, residual, norm_w, (wg, wu) = _inputs(s, m, k, i, dtype, seed=s * 100 + k + 1, weights=2)
    h, want_res = add_rmsnorm_partials(partials, residual, norm_w, EPS)
    want = swiglu(h, wg, wu)
    bufs = poisoned((m, i), dtype), poisoned((m, k), dtype)
    mid, new_res = swiglu_normed(partials, residual, norm_w, EPS, wg, wu, out=bufs[0], new_residual=bufs[1])
    assert mid is bufs[0] and new_res is bufs[1]
    assert_close(new_res, want_res, dtype, reduction=s + 1, what="new_residual")
    assert_close(mid, want, dtype, reduction=2 * k, what=f"swiglu_normed {case}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_match_the_references(dtype):
    partials, residual, norm_w, (w, wg, wu) = _inputs(2, 3, 96, 64, dtype, seed=11, weights=3)
    for got, want, what in ((skinny_linear_normed(partials, residual, norm_w, EPS, w),
                             skinny_linear_normed_ref(partials, residual, norm_w, EPS, w), "skinny_linear_normed"),
                            (swiglu_normed(partials, residual, norm_w, EPS, wg, wu),
                             swiglu_normed_ref(partials, residual, norm_w, EPS, wg, wu), "swiglu_normed")):
        assert_close(got[0], want[0], dtype, reduction=2 * 96, what=what)
        assert_close(got[1], want[1], dtype, reduction=3, what=f"{what} new_residual")


def test_weight_views_and_empty_batch():
    """gate / up as row slices of one fused [2I, K] weight (as the runtime's w13), and M = 0 (nothing launched)."""
    partials, residual, norm_w, (w13,) = _inputs(2, 2, 64, 96, torch.float32, seed=5)
    wg, wu = w13.chunk(2, dim=0)
    h, _ = add_rmsnorm_partials(partials, residual, norm_w, EPS)
    assert_close(swiglu_normed(partials, residual, norm_w, EPS, wg, wu)[0], swiglu(h, wg, wu), torch.float32,
                 reduction=2 * 64, what="views")
    out, new_res = skinny_linear_normed(partials[:, :0], residual[:0], norm_w, EPS, w13)
    assert out.shape == (0, 96) and new_res.shape == (0, 64)


def test_split_k_tiles_are_refused(monkeypatch):
    partials, residual, norm_w, (w,) = _inputs(2, 2, 128, 96, torch.float32, seed=7)
    _tile(monkeypatch, 96, 128, 32, split_k=2)
    with pytest.raises(ValueError, match=r"skinny_linear_normed: the tuned split_k for \[96, 128\] is 2"):
        skinny_linear_normed(partials, residual, norm_w, EPS, w)


def _bad_cases():
    p, r, nw, (w,) = _inputs(2, 3, 64, 48, torch.float32, seed=9)
    wide = torch.zeros(3, 128)
    return [  # (function, message the ValueError must match, call)
        ("skinny_linear_normed", "partials must be float32", lambda: skinny_linear_normed(p.half(), r, nw, EPS, w)),
        ("skinny_linear_normed", "partials must be float32", lambda: skinny_linear_normed(p[0], r, nw, EPS, w)),
        ("skinny_linear_normed", "partials needs at least one split",
         lambda: skinny_linear_normed(p[:0], r, nw, EPS, w)),
        ("skinny_linear_normed", "partials has M=65 rows",
         lambda: skinny_linear_normed(torch.zeros(1, 65, 64), torch.zeros(65, 64), nw, EPS, w)),
        ("skinny_linear_normed", "residual must be", lambda: skinny_linear_normed(p, r[:2], nw, EPS, w)),
        ("skinny_linear_normed", "norm_weight must be", lambda: skinny_linear_normed(p, r, nw[:32], EPS, w)),
        ("skinny_linear_normed", r"w must be \[N, K=64\]", lambda: skinny_linear_normed(p, r, nw, EPS, w[:, :32])),
        ("skinny_linear_normed", r"w \(torch.float16", lambda: skinny_linear_normed(p, r, nw, EPS, w.half())),
        ("skinny_linear_normed", "w needs a contiguous last dim",
         lambda: skinny_linear_normed(p, r, nw, EPS, w.t().contiguous().t())),
        ("skinny_linear_normed", "residual needs a contiguous last dim",
         lambda: skinny_linear_normed(p, wide[:, ::2], nw, EPS, w)),
        ("skinny_linear_normed", r"out must be \[3, 48\]",
         lambda: skinny_linear_normed(p, r, nw, EPS, w, out=torch.empty(3, 47))),
        ("skinny_linear_normed", "new_residual must be",
         lambda: skinny_linear_normed(p, r, nw, EPS, w, new_residual=torch.empty(3, 64, dtype=torch.float16))),
        ("skinny_linear_normed", "new_residual must not overlap",
         lambda: skinny_linear_normed(p, r, nw, EPS, w, new_residual=r)),
        ("skinny_linear_normed", "out must not overlap",
         lambda: skinny_linear_normed(p, r, nw, EPS, w, out=p[0, :, :48])),
        ("skinny_linear_normed", "pdl_role must be one of",
         lambda: skinny_linear_normed(p, r, nw, EPS, w, pdl_role="attention")),
        ("swiglu_normed", r"w_up must be \[48, 64\]", lambda: swiglu_normed(p, r, nw, EPS, w, w[:40])),
        ("swiglu_normed", r"w_gate \(torch.float16", lambda: swiglu_normed(p, r, nw, EPS, w.half(), w)),
        ("swiglu_normed", "residual must be", lambda: swiglu_normed(p, r.t(), nw, EPS, w, w)),
        ("swiglu_normed", r"out must be \[3, 48\]",
         lambda: swiglu_normed(p, r, nw, EPS, w, w, out=torch.empty(3, 48, dtype=torch.float16))),
    ]


def test_bad_operands_name_the_function_and_argument():
    for fn, msg, call in _bad_cases():
        with pytest.raises(ValueError, match=f"{fn}: .*{msg}|{fn}: {msg}"):
            call()


def test_prologue_tile_keeps_the_pipeline_in_shared_memory():
    """The 8B QKV tile (BLOCK_K 256, 4 stages) with the down projection's 4 partials would need ~320 KiB of staged
    operands (more than the H200's 227 KiB): BLOCK_K is halved to fit SMEM_BUDGET; small tiles are kept."""
    from kernels.norm_gemm import prologue_tile
    from kernels.skinny_linear import SMEM_BUDGET

    assert prologue_tile(4, 16, 64, 256, 4, 2) == (64, 4)
    assert prologue_tile(2, 16, 64, 128, 4, 2, weights=2) == (64, 4)
    assert prologue_tile(1, 16, 32, 64, 2, 4) == (64, 2)
    bk, stages = prologue_tile(8, 64, 64, 256, 4, 2)  # 4 stages do not fit at BLOCK_K 32: stages go
    assert (bk, stages) == (32, 2) and stages * bk * (8 * 64 * 4 + (64 + 1 + 64) * 2) <= SMEM_BUDGET
