"""qkv_rope_kv_write vs the two-kernel path (skinny_linear, then rope_kv_write) and the float32 references
(Triton interpreter on CPU; bf16 is upcast after the loads there, so bf16 covers loads, stores and rounding).

Both paths round qkv to x.dtype at the same point but sum the K terms in their own tiles (under the interpreter
tl.dot is numpy's BLAS, whose blocking depends on the CPU and the tile's shape; on a GPU, the MMA order): they agree
to float32 rounding over K, then one rounding of qkv and of the output (tests/tolerances.py).
"""

from __future__ import annotations

import pytest
import torch

from kernels import qkv_rope_kv_write, rope_kv_write, skinny_linear
from kernels.pdl import pdl
from kernels.reference import rope_kv_write_ref, skinny_linear_ref
from tests.tolerances import assert_bitwise, assert_close, poisoned

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (K, Hq, Hkv, D): K=40 is not a multiple of BLOCK_K (masked K tail); D=16 has halves of 8, masked up to the
# 16-wide tl.dot tile; Hq=6 is not a power of two
SHAPES = [(64, 4, 2, 16), (40, 4, 2, 32), (64, 6, 2, 32)]
SENTINEL = -7.25  # exact in every float dtype; never produced by the kernel for these inputs


def _inv_freq(d: int, theta: float = 10000.0) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))


def _inputs(t, k, hq, hkv, d, dtype, seed, cache_dtype=None, strided_x=False):
    """x, w (outputs O(1), like a real projection), tree-like positions, scattered distinct slots, caches
    full of SENTINEL."""
    g = torch.Generator().manual_seed(seed)
    if strided_x:  # a column slice of a wider activation buffer
        x = torch.randn(t, k + 24, generator=g).to(dtype)[:, 8 : 8 + k]
        assert not x.is_contiguous()
    else:
        x = torch.randn(t, k, generator=g).to(dtype)
    w = (torch.randn((hq + 2 * hkv) * d, k, generator=g) / k**0.5).to(dtype)
    depths = torch.tensor([0, 1, 1, 2, 2, 2, 3] * (t // 7 + 1))[:t]  # repeated, non-contiguous positions
    positions = depths + 40 * d  # large enough that high-frequency angles wrap many times
    cap = 3 * t + 5
    slots = torch.randperm(cap, generator=g)[:t]
    cache_dtype = cache_dtype or dtype
    k_cache = torch.full((cap, hkv, d), SENTINEL, dtype=cache_dtype)
    v_cache = torch.full((cap, hkv, d), SENTINEL, dtype=cache_dtype)
    return x, w, positions, slots, k_cache, v_cache


def _check_untouched(cache, slots, what):
    keep = torch.ones(cache.shape[0], dtype=torch.bool)
    keep[slots.long()] = False
    assert bool((cache[keep] == SENTINEL).all()), f"{what}: slots outside write_slots were modified"
    assert not bool((cache[slots.long()] == SENTINEL).any()), f"{what}: write_slots not (fully) written"


def _close_to_two_kernels(got, want, dtype, k, other="skinny_linear + rope_kv_write"):
    """(q, k_cache, v_cache) against another path's: a K-term GEMM, then the 2-term rotation for q and k."""
    for a, b, what, n in zip(got, want, ("q", "k_cache", "v_cache"), (k + 2, k + 2, k)):
        assert_close(a, b, dtype, reduction=n, what=f"{what} vs {other}")


@pytest.mark.parametrize("t", [1, 5, 16])
@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"K{s[0]}_Hq{s[1]}_Hkv{s[2]}_D{s[3]}" for s in SHAPES])
def test_matches_two_kernel_path_and_reference(shape, dtype, t):
    k, hq, hkv, d = shape
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, dtype, seed=t * 101 + k + hq * 7 + d)
    inv_freq = _inv_freq(d)
    x_before, w_before = x.clone(), w.clone()
    kc, vc = k_cache.clone(), v_cache.clone()
    q = qkv_rope_kv_write(x, w, pos, inv_freq, kc, vc, slots, hq, hkv)
    assert q.shape == (t, hq, d) and q.dtype == dtype and q.is_contiguous()

    k2, v2 = k_cache.clone(), v_cache.clone()  # the two launches it replaces
    q2 = rope_kv_write(skinny_linear(x, w), pos, inv_freq, k2, v2, slots, hq, hkv)
    _close_to_two_kernels((q, kc, vc), (q2, k2, v2), dtype, k)

    kr, vr = k_cache.clone(), v_cache.clone()  # float32 twins, qkv rounded to x.dtype in between
    q_ref = rope_kv_write_ref(skinny_linear_ref(x, w), pos, inv_freq, kr, vr, slots, hq, hkv)
    _close_to_two_kernels((q, kc, vc), (q_ref, kr, vr), dtype, k, "reference")

    for cache, what in ((kc, "k_cache"), (vc, "v_cache")):
        _check_untouched(cache, slots, what)
    assert_bitwise(x, x_before, reason="an input the kernel must not write", what="x")
    assert_bitwise(w, w_before, reason="an input the kernel must not write", what="w")


def test_max_rows_strided_x_and_pdl_switch():
    """T = MAX_M = 64 (BLOCK_M 64), x a column slice of a wider tensor, PDL on (a no-op off CUDA)."""
    t, k, hq, hkv, d = 64, 64, 4, 2, 16
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float16, seed=4, strided_x=True)
    kc, vc, k2, v2 = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    with pdl(True):
        q = qkv_rope_kv_write(x, w, pos, _inv_freq(d), kc, vc, slots, hq, hkv)
    q2 = rope_kv_write(skinny_linear(x, w), pos, _inv_freq(d), k2, v2, slots, hq, hkv)
    _close_to_two_kernels((q, kc, vc), (q2, k2, v2), torch.float16, k)
    _check_untouched(kc, slots, "k_cache")
    _check_untouched(vc, slots, "v_cache")


@pytest.mark.parametrize("out_dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
def test_q_out(out_dtype):
    """fp16 activations; q_out of the same dtype or float32 (q rounded once, to q_out's dtype), and a q_out whose
    rows are strided (a [T, Hq, D] slice of a wider buffer)."""
    t, k, hq, hkv, d = 5, 64, 4, 2, 32
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float16, seed=8)
    out = poisoned((t, hq + 1, d), out_dtype)[:, 1:]  # NaN everywhere: unwritten elements fail the comparison
    res = qkv_rope_kv_write(x, w, pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots, hq, hkv, q_out=out)
    assert res is out
    want = poisoned((t, hq, d), out_dtype)
    rope_kv_write(skinny_linear(x, w), pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots, hq, hkv,
                  q_out=want)
    assert_close(out, want, out_dtype, reduction=k + 2, what="q_out vs two kernels")
    q_ref = rope_kv_write_ref(skinny_linear_ref(x, w), pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots,
                              hq, hkv, q_out=torch.empty(t, hq, d, dtype=out_dtype))
    assert_close(out, q_ref, out_dtype, reduction=k + 2, what="q_out vs reference")


def test_cache_dtype_differs():
    """fp32 activations into fp16 caches: the stores cast, q stays fp32."""
    t, k, hq, hkv, d = 5, 64, 4, 2, 16
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float32, seed=3, cache_dtype=torch.float16)
    kc, vc, k2, v2 = k_cache.clone(), v_cache.clone(), k_cache.clone(), v_cache.clone()
    q = qkv_rope_kv_write(x, w, pos, _inv_freq(d), kc, vc, slots, hq, hkv)
    q2 = rope_kv_write(skinny_linear(x, w), pos, _inv_freq(d), k2, v2, slots, hq, hkv)
    assert q.dtype == torch.float32
    assert_close(q, q2, torch.float32, reduction=k + 2, what="q")
    assert_close(kc, k2, torch.float16, reduction=k + 2, what="k_cache")
    assert_close(vc, v2, torch.float16, reduction=k, what="v_cache")
    _check_untouched(kc, slots, "k_cache")


def test_empty_batch():
    x, w, _, _, k_cache, v_cache = _inputs(1, 64, 2, 1, 16, torch.float32, seed=1)
    empty = torch.zeros(0, dtype=torch.int64)
    q = qkv_rope_kv_write(x[:0], w, empty, _inv_freq(16), k_cache, v_cache, empty, 2, 1)
    assert q.shape == (0, 2, 16)
    assert bool((k_cache == SENTINEL).all()) and bool((v_cache == SENTINEL).all())


BAD = ["x", "x_rows", "w_qkv", "w_qkv_dtype", "positions", "write_slots", "inv_freq", "k_cache", "v_cache", "q_out",
       "block_k"]


def _bad(case):
    t, k, hq, hkv, d = 3, 64, 4, 2, 16
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float32, seed=2)
    args = dict(x=x, w_qkv=w, positions=pos, inv_freq=_inv_freq(d), k_cache=k_cache, v_cache=v_cache,
                write_slots=slots, num_heads=hq, num_kv_heads=hkv)
    if case == "x":  # not 2-d
        args["x"] = x[None]
    elif case == "x_rows":  # more than MAX_M rows
        args.update(x=torch.randn(65, k), positions=torch.zeros(65, dtype=torch.int64),
                    write_slots=torch.arange(65))
    elif case == "w_qkv":  # one head too few rows
        args["w_qkv"] = w[:-d]
    elif case == "w_qkv_dtype":
        args["w_qkv"] = w.half()
    elif case == "positions":  # float positions
        args["positions"] = pos.float()
    elif case == "write_slots":  # wrong length
        args["write_slots"] = slots[:2]
    elif case == "inv_freq":  # not [D/2]
        args["inv_freq"] = _inv_freq(2 * d)
    elif case == "k_cache":  # wrong Hkv
        args["k_cache"] = torch.zeros(k_cache.shape[0], hkv + 1, d)
    elif case == "v_cache":  # wrong D
        args["v_cache"] = torch.zeros(v_cache.shape[0], hkv, d + 2)
    elif case == "q_out":  # wrong shape
        args["q_out"] = torch.empty(t, hq, d + 2)
    elif case == "block_k":  # not a power of two
        args["block_k"] = 48
    return args


@pytest.mark.parametrize("case", BAD)
def test_bad_inputs_raise(case):
    field = {"x_rows": "x has T=65", "w_qkv_dtype": "w_qkv dtype", "v_cache": "v_cache head dim"}.get(case, case)
    with pytest.raises(ValueError, match=field):
        qkv_rope_kv_write(**_bad(case))


@pytest.mark.parametrize("t", [33, 64])
def test_llama_head_dim_and_wide_row_blocks(t):
    """D = 128 (Llama heads: tiles wider than skinny_linear's) and 33 / 64 rows (row blocks of
    64): the two-kernel path and the references to float32 rounding; caches written only at the slots."""
    k, hq, hkv, d = 64, 2, 1, 128
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float32, seed=t)
    inv_freq = _inv_freq(d)
    kc, vc = k_cache.clone(), v_cache.clone()
    q = qkv_rope_kv_write(x, w, pos, inv_freq, kc, vc, slots, hq, hkv)
    k2, v2 = k_cache.clone(), v_cache.clone()
    q2 = rope_kv_write(skinny_linear(x, w), pos, inv_freq, k2, v2, slots, hq, hkv)
    _close_to_two_kernels((q, kc, vc), (q2, k2, v2), torch.float32, k)
    kr, vr = k_cache.clone(), v_cache.clone()
    q_ref = rope_kv_write_ref(skinny_linear_ref(x, w), pos, inv_freq, kr, vr, slots, hq, hkv)
    _close_to_two_kernels((q, kc, vc), (q_ref, kr, vr), torch.float32, k, "reference")
    for cache, what in ((kc, "k_cache"), (vc, "v_cache")):
        _check_untouched(cache, slots, what)


@pytest.mark.parametrize("split", [2, 4])
def test_pair_split_gives_the_one_program_per_head_bits(split):
    """`pair_split` (default kernels.qkv_rope.PAIR_SPLIT): each head's rotation pairs over `split` programs (masked
    to the 16-wide tile where a chunk is narrower): q and both caches those of one program per head (to rounding: the
    GEMM tiles differ); a bad value or role is named."""
    t, k, hq, hkv, d = 3, 64, 4, 2, 64  # 32 pairs per head: chunks of 16 at split 2, 8 (masked to 16) at split 4
    x, w, pos, slots, k_cache, v_cache = _inputs(t, k, hq, hkv, d, torch.float16, seed=12)
    outs = []
    for s in (1, split):
        kc, vc = k_cache.clone(), v_cache.clone()
        outs.append((qkv_rope_kv_write(x, w, pos, _inv_freq(d), kc, vc, slots, hq, hkv, pdl_role="pre_attention",
                                       pair_split=s), kc, vc))
    (q1, k1, v1), (q2, k2, v2) = outs
    _close_to_two_kernels((q2, k2, v2), (q1, k1, v1), torch.float16, k, "one program per head")
    _check_untouched(k2, slots, "k_cache")
    with pytest.raises(ValueError, match="qkv_rope_kv_write: pair_split must be 1, 2 or 4, got 3"):
        qkv_rope_kv_write(x, w, pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots, hq, hkv, pair_split=3)
    with pytest.raises(ValueError, match="qkv_rope_kv_write: pdl_role must be one of"):
        qkv_rope_kv_write(x, w, pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots, hq, hkv, pdl_role="x")
