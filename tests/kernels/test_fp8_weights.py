"""FP8 weights (`weight_bits=8`): quantize_rows_fp8, and skinny_linear / its partials / swiglu with float8 e4m3 weights
and per-row scales against float32 references on the dequantized weights (Triton interpreter on CPU: the tiles are
upcast to float32 after the conversion there, so the arithmetic checked is the kernels' scaling; the GPU test checks
the H200's fp16 dots)."""

from __future__ import annotations

import pytest
import torch

from kernels import skinny_linear, skinny_linear_partials, swiglu
from kernels.reference import skinny_linear_ref, swiglu_ref
from kernels.skinny_linear import FP8, FP8_MAX, quantize_rows_fp8
from tests.tolerances import assert_close, poisoned


def _weights(n, k, seed, rows_scale=None):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n, k, generator=g) / k**0.5
    if rows_scale is not None:  # rows of very different magnitudes: one scale per row must follow them
        w = w * torch.logspace(-3, 1, n)[:, None]
    return w


def _dequant(q, scale):
    return q.float() * scale[:, None]


def test_quantize_rows_fp8_keeps_each_rows_range_and_rounding():
    w = _weights(64, 96, seed=0, rows_scale=True)
    w[5] = 0.0  # an all-zero row: scale 0
    q, scale = quantize_rows_fp8(w)
    assert q.dtype == FP8 and scale.dtype == torch.float32 and q.shape == w.shape and scale.shape == (64,)
    assert scale[5] == 0.0 and torch.all(_dequant(q, scale)[5] == 0)
    amax = q.float().abs().amax(dim=1)
    assert torch.all(amax[torch.arange(64) != 5] == FP8_MAX)  # each row's largest magnitude maps to e4m3's max
    rel = (_dequant(q, scale) - w).abs() / w.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)
    assert rel.max() <= 2.0**-4  # e4m3: 3 mantissa bits, half an ulp of the row's top binade at most
    err = (_dequant(q, scale) - w).abs().max() / w.abs().max()
    assert err > 0  # fp8 is lossy: the check above is not vacuous


def test_quantize_rows_fp8_rejects_non_matrices():
    with pytest.raises(ValueError, match="2-D floating-point"):
        quantize_rows_fp8(torch.zeros(4, dtype=torch.int32))


@pytest.mark.parametrize("m", [1, 5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("n,k,bn,bk,sk", [(96, 256, 64, 128, 1), (96, 200, 32, 64, 2), (80, 200, 64, 64, 3)],
                         ids=["even", "ragged_split2", "ragged_split3"])
def test_skinny_linear_fp8_matches_the_dequantized_product(n, k, bn, bk, sk, dtype, m):
    w = _weights(n, k, seed=n + k + sk, rows_scale=True)
    q, scale = quantize_rows_fp8(w)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dtype)
    out = poisoned((m, n), dtype)
    res = skinny_linear(x, q, w_scale=scale, out=out, block_n=bn, block_k=bk, split_k=sk)
    assert res is out
    assert_close(out, skinny_linear_ref(x.float(), _dequant(q, scale)), dtype, reduction=k,
                 what=f"M={m} N={n} K={k} split {sk}")
    parts = skinny_linear_partials(x, q, sk, w_scale=scale, block_n=bn, block_k=bk)
    assert_close(parts.sum(0), skinny_linear_ref(x.float(), _dequant(q, scale)), torch.float32, reduction=k,
                 what="sum of partials")


@pytest.mark.parametrize("m,k,i", [(1, 96, 80), (5, 130, 200)], ids=["M1_K96_I80", "M5_K130_I200"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_swiglu_fp8_matches_the_dequantized_reference(m, k, i, dtype):
    qg, sg = quantize_rows_fp8(_weights(i, k, seed=1, rows_scale=True))
    qu, su = quantize_rows_fp8(_weights(i, k, seed=2))
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(3)).to(dtype)
    out = poisoned((m, i), dtype)
    res = swiglu(x, qg, qu, out=out, block_k=32, scale_gate=sg, scale_up=su)
    assert res is out
    assert_close(out, swiglu_ref(x.float(), _dequant(qg, sg), _dequant(qu, su)), dtype, reduction=k,
                 what=f"M,K,I={m, k, i}")


def test_fp8_weights_take_their_own_tiles():
    """With fp8 weights the skinny GEMMs look their tile up in the fp8 table (FP8_CONFIGS by default) before the bf16
    one (CONFIGS), and the fused SwiGLU in its fp8 tiles (FP8_TILES); bf16 weights of the same shape keep the bf16
    table; the products on those tiles stay right. The tables are passed in (`configs`, `fp8_configs`, `fp8_tiles`)."""
    import importlib

    sl = importlib.import_module("kernels.skinny_linear")
    n, k = 96, 256
    tables = {"configs": {(n, k, 16): {"block_n": 32, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2}},
              "fp8_configs": {(n, k, 16): {"block_n": 64, "block_k": 64, "split_k": 2, "num_warps": 4,
                                           "num_stages": 2}}}
    bf16_tile, fp8_tile = (sl.pick_config(3, n, k, fp8=fp8, **tables) for fp8 in (False, True))
    assert bf16_tile["split_k"] == 1 and fp8_tile["split_k"] == 2
    assert sl.pick_config(3, 80, k, fp8=True, **tables) == sl.pick_config(3, 80, k, **tables)  # no fp8 tile: as bf16
    assert sl.pick_config(3, n, k, fp8=True) == sl.pick_config(3, n, k, fp8=True, configs=sl.CONFIGS,
                                                                 fp8_configs=sl.FP8_CONFIGS)  # the defaults
    w = _weights(n, k, seed=11)
    q, scale = quantize_rows_fp8(w)
    x = torch.randn(3, k, generator=torch.Generator().manual_seed(12))
    parts = skinny_linear_partials(x, q, w_scale=scale, **{key: fp8_tile[key] for key in sl.CONFIG_KEYS})
    assert parts.shape == (2, 3, n)
    assert skinny_linear_partials(x, w, **{key: bf16_tile[key] for key in sl.CONFIG_KEYS}).shape == (1, 3, n)
    want = skinny_linear_ref(x, _dequant(q, scale))
    assert_close(parts.sum(0), want, torch.float32, reduction=k, what="fp8 partials on their tile")
    assert_close(skinny_linear(x, q, w_scale=scale, **{key: fp8_tile[key] for key in sl.CONFIG_KEYS}), want,
                 torch.float32, reduction=k, what="fp8 product on its tile")
    looked: list = []

    class Spy(dict):
        def get(self, key, default=None):
            looked.append(key)
            return super().get(key, default)

    tiles = Spy({(80, 96, 16): {"block_i": 16, "block_k": 32}})
    qg, sg = quantize_rows_fp8(_weights(80, 96, seed=13))
    qu, su = quantize_rows_fp8(_weights(80, 96, seed=14))
    xs = torch.randn(2, 96, generator=torch.Generator().manual_seed(15))
    got = swiglu(xs, qg, qu, scale_gate=sg, scale_up=su, fp8_tiles=tiles)
    assert looked == [(80, 96, 16)]
    assert_close(got, swiglu_ref(xs, _dequant(qg, sg), _dequant(qu, su)), torch.float32, reduction=96,
                 what="fp8 swiglu on its tile")
    wg, wu = _weights(80, 96, seed=13), _weights(80, 96, seed=14)
    swiglu(xs, wg, wu)
    assert looked == [(80, 96, 16)]  # bf16 / fp32 weights never read the fp8 table


def test_fp8_weights_without_their_scales_are_refused():
    q, scale = quantize_rows_fp8(_weights(32, 64, seed=0))
    x = torch.randn(1, 64)
    with pytest.raises(ValueError, match=r"fp8 weights need w_scale, a contiguous float32 \[32\]"):
        skinny_linear(x, q)
    with pytest.raises(ValueError, match=r"fp8 weights need w_scale.*got torch.float64 \[32\]"):
        skinny_linear(x, q, w_scale=scale.double())
    with pytest.raises(ValueError, match="with w_scale, w must be torch.float8_e4m3fn"):
        skinny_linear_partials(x, q.float(), 1, w_scale=scale)
    with pytest.raises(ValueError, match="swiglu: fp8 weights need both scales: w_up"):
        swiglu(x, q, q, scale_gate=scale)
    with pytest.raises(ValueError, match="swiglu: fp8 weights need both scales: w_gate"):
        swiglu(x, q, q)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("n,k,i", [(3072, 2048, 8192)], ids=["llama3.2_1b"])
@pytest.mark.parametrize("m", [1, 8])
def test_gpu_fp8_projections_at_the_1b_shapes(n, k, i, m):
    """bf16 activations with fp8 weights on the GPU (the hardware's fp8 -> bf16 converts, the tuned bf16 tiles): the
    1B's QKV, o partials and SwiGLU against float32 products with the dequantized weights."""
    dev = "cuda"
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m)).to(dev, torch.bfloat16)
    q, s = (t.to(dev) for t in quantize_rows_fp8(_weights(n, k, seed=4)))
    assert_close(skinny_linear(x, q, w_scale=s), skinny_linear_ref(x.float(), _dequant(q, s)), torch.bfloat16,
                 reduction=k, what="qkv")
    qo, so = (t.to(dev) for t in quantize_rows_fp8(_weights(k, k, seed=5)))
    parts = skinny_linear_partials(x, qo, w_scale=so)
    assert_close(parts.sum(0), skinny_linear_ref(x.float(), _dequant(qo, so)), torch.float32, reduction=k,
                 what="o partials")
    qg, sg = (t.to(dev) for t in quantize_rows_fp8(_weights(i, k, seed=6)))
    qu, su = (t.to(dev) for t in quantize_rows_fp8(_weights(i, k, seed=7)))
    assert_close(swiglu(x, qg, qu, scale_gate=sg, scale_up=su),
                 swiglu_ref(x.float(), _dequant(qg, sg), _dequant(qu, su)), torch.bfloat16, reduction=k, what="swiglu")
