"""rope_kv_write vs its float32 twin, and the twin vs runtime.model's eager RoPE path (Triton interpreter on CPU)."""

from __future__ import annotations

import pytest
import torch

from conf.presets import model_preset
from kernels import rope_kv_write
from kernels.reference import rope_kv_write_ref
from runtime.model import apply_rope, rope_cos_sin, rope_inv_freq
from tests.tolerances import assert_bitwise, assert_close, poisoned

# bf16 is storage only here: the kernel upcasts right after its loads, so the interpreter computes it right.
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# (T, Hq, Hkv, D, strided qkv row view, positions dtype)
SHAPES = [
    (1, 4, 2, 64, False, torch.int64),  # decode, GQA 2
    (7, 6, 2, 16, True, torch.int32),  # Hq not a power of two, GEMM-output row view
    (4, 4, 4, 128, True, torch.int64),  # MHA (Hq == Hkv)
    (3, 32, 8, 128, False, torch.int32),  # Llama-3-8B heads: 48 heads -> two head blocks per token
]
TREE_POSITIONS = [5, 6, 6, 7, 7, 7, 8]  # tree depths after a prefix of 5: repeated, non-contiguous


def _inv_freq(d: int, theta: float = 10000.0) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))


def _inputs(t, hq, hkv, d, dtype, seed, strided=False, cache_dtype=None):
    """qkv [T, (Hq + 2 Hkv) * D] (optionally a column slice of a wider tensor), random caches and slots."""
    g = torch.Generator().manual_seed(seed)
    width = (hq + 2 * hkv) * d
    if strided:
        wide = (torch.randn(t, width + 40, generator=g) * 2).to(dtype)
        qkv = wide[:, 24 : 24 + width]
        assert not qkv.is_contiguous()
    else:
        qkv = (torch.randn(t, width, generator=g) * 2).to(dtype)
    cap = 3 * t + 5
    cache_dtype = cache_dtype or dtype
    k_cache = torch.randn(cap, hkv, d, generator=g).to(cache_dtype)  # sentinel: random, never zeros
    v_cache = torch.randn(cap, hkv, d, generator=g).to(cache_dtype)
    slots = torch.randperm(cap, generator=g)[:t]  # scattered, distinct
    return qkv, k_cache, v_cache, slots


def _positions(t, dtype=torch.int64, offset=0):
    return (torch.tensor(TREE_POSITIONS[:t] + list(range(9, 9 + max(0, t - 7)))) + offset).to(dtype)


def _check_untouched(after, before, slots, what):
    keep = torch.ones(after.shape[0], dtype=torch.bool)
    keep[slots.long()] = False
    assert_bitwise(after[keep], before[keep], reason="slots outside write_slots are not written",
                   what=f"{what}: slots outside write_slots")


def _run_both(qkv, pos, inv_freq, k_cache, v_cache, slots, hq, hkv):
    """Kernel and twin on separate cache copies; returns (q, k_cache, v_cache) of each."""
    kc, vc = k_cache.clone(), v_cache.clone()
    kr, vr = k_cache.clone(), v_cache.clone()
    q = rope_kv_write(qkv, pos, inv_freq, kc, vc, slots, hq, hkv)
    q_ref = rope_kv_write_ref(qkv, pos, inv_freq, kr, vr, slots, hq, hkv)
    return (q, kc, vc), (q_ref, kr, vr)


@pytest.mark.parametrize("dtype", list(DTYPES.values()), ids=list(DTYPES))
@pytest.mark.parametrize("shape", SHAPES, ids=[f"T{s[0]}_Hq{s[1]}_Hkv{s[2]}_D{s[3]}" for s in SHAPES])
def test_matches_reference(shape, dtype):
    t, hq, hkv, d, strided, pos_dtype = shape
    qkv, k_cache, v_cache, slots = _inputs(t, hq, hkv, d, dtype, seed=t * 101 + hq * 7 + d, strided=strided)
    pos = _positions(t, pos_dtype, offset=30 * d)  # large enough that high-frequency angles wrap many times
    qkv_before = qkv.clone()
    (q, kc, vc), (q_ref, kr, vr) = _run_both(qkv, pos, _inv_freq(d), k_cache, v_cache, slots, hq, hkv)
    assert q.shape == (t, hq, d) and q.dtype == dtype and q.is_contiguous()
    assert_close(q, q_ref, dtype, reduction=2, what="q")  # x1 cos - x2 sin: two terms
    assert_close(kc, kr, dtype, reduction=2, what="k_cache")
    assert_bitwise(vc, vr, reason="v is copied into the cache: data movement", what="v_cache")
    for cache, before, what in ((kc, k_cache, "k_cache"), (vc, v_cache, "v_cache")):
        _check_untouched(cache, before, slots, what)
    assert_bitwise(qkv, qkv_before, reason="an input the kernel must not write", what="qkv")
    # Rotation preserves each (i, i + D/2) pair's norm: a cheap convention-free sanity check on q.
    x = qkv_before[:, : hq * d].float().view(t, hq, 2, d // 2)
    y = q.float().view(t, hq, 2, d // 2)
    assert_close(y.pow(2).sum(2).sqrt(), x.pow(2).sum(2).sqrt(), dtype, reduction=2, what="pair norms")


def test_cache_dtype_differs():
    """fp32 activations into an fp16 cache: the stores cast, q stays fp32."""
    t, hq, hkv, d = 5, 4, 2, 32
    qkv, k_cache, v_cache, slots = _inputs(t, hq, hkv, d, torch.float32, seed=3, cache_dtype=torch.float16)
    pos = _positions(t, offset=100)
    (q, kc, vc), (q_ref, kr, vr) = _run_both(qkv, pos, _inv_freq(d), k_cache, v_cache, slots, hq, hkv)
    assert q.dtype == torch.float32
    assert_close(q, q_ref, torch.float32, reduction=2, what="q")
    assert_close(kc, kr, torch.float16, reduction=2, what="k_cache")
    assert_bitwise(vc, vr, reason="v is copied into the cache (cast fp32 -> fp16 on both sides)", what="v_cache")


def _model_path(qkv, pos, inv_freq, k_cache, v_cache, slots, hq, hkv):
    """runtime.model.Attention.forward's eager RoPE + cache write (the convention the kernel must match)."""
    t = qkv.shape[0]
    d = k_cache.shape[-1]
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    cos, sin = rope_cos_sin(inv_freq, pos, qkv.dtype)
    q = apply_rope(q.reshape(t, hq, d), cos, sin)
    k = apply_rope(k.reshape(t, hkv, d), cos, sin)
    k_cache.index_copy_(0, slots, k.to(k_cache.dtype))
    v_cache.index_copy_(0, slots, v.reshape(t, hkv, d).to(v_cache.dtype))
    return q


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-llama31"])
def test_twin_and_kernel_match_model_path(preset):
    """fp32: twin == model path to rounding (anchors rotate-half and cat([f, f])); Llama-3.1 scaling included."""
    shape = model_preset(preset)
    inv_freq = rope_inv_freq(shape)
    if shape.rope_scaling is not None:
        plain = 1.0 / (shape.rope_theta ** (torch.arange(0, shape.head_dim, 2).float() / shape.head_dim))
        assert not torch.allclose(inv_freq, plain), "scaled preset should change the frequencies"
    t, hq, hkv, d = 6, shape.num_heads, shape.num_kv_heads, shape.head_dim
    qkv, k_cache, v_cache, slots = _inputs(t, hq, hkv, d, torch.float32, seed=11, strided=True)
    pos = torch.tensor([0, 63, 64, 65, 1000, 4095])  # around original_max_position=64 and far past it
    km, vm = k_cache.clone(), v_cache.clone()
    q_model = _model_path(qkv, pos, inv_freq, km, vm, slots, hq, hkv)
    (q, kc, vc), (q_ref, kr, vr) = _run_both(qkv, pos, inv_freq, k_cache, v_cache, slots, hq, hkv)
    assert_close(q_ref, q_model, torch.float32, reduction=2, what="twin q vs model path")
    assert_close(kr, km, torch.float32, reduction=2, what="twin k_cache vs model path")
    assert_bitwise(vr, vm, reason="v is copied into the cache: data movement", what="twin v_cache")
    assert_close(q, q_model, torch.float32, reduction=2, what="kernel q vs model path")
    assert_close(kc, km, torch.float32, reduction=2, what="kernel k_cache vs model path")
    assert_bitwise(vc, vm, reason="v is copied into the cache: data movement", what="kernel v_cache")


def test_bf16_rounds_once_unlike_model_path():
    """bf16: the kernel is within one bf16 ulp of exact RoPE; the eager path, which rounds cos/sin and
    every product to bf16, is off by many ulps where x * cos and rotate_half(x) * sin nearly cancel.

    (One ulp, not half: the interpreter truncates float32 -> bf16 casts; GPUs round to nearest.)
    """
    t, hq, hkv, d = 7, 4, 2, 64
    qkv, k_cache, v_cache, slots = _inputs(t, hq, hkv, d, torch.bfloat16, seed=5)
    pos = _positions(t, offset=200)
    inv_freq = _inv_freq(d)
    angle = pos.double()[:, None] * inv_freq.double()[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    x = qkv[:, : hq * d].double().view(t, hq, d)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    truth = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
    ulp = torch.finfo(torch.bfloat16).eps * torch.exp2(torch.floor(torch.log2(truth.abs().clamp_min(1e-30))))
    q = rope_kv_write(qkv, pos, inv_freq, k_cache.clone(), v_cache.clone(), slots, hq, hkv)
    q_eager = _model_path(qkv, pos, inv_freq, k_cache.clone(), v_cache.clone(), slots, hq, hkv)
    err_kernel = (q.double() - truth).abs()
    err_eager = (q_eager.double() - truth).abs()
    assert bool((err_kernel <= 1.25 * ulp + 1e-6).all()), f"kernel off by {(err_kernel / ulp).max():.2f} ulp"
    assert (err_eager / ulp).max() > 4, "expected the eager bf16 path to lose several ulps somewhere"
    assert_close(q, q_eager, torch.bfloat16, reduction=2, what="kernel vs eager bf16")  # still within 2 bf16 eps


@pytest.mark.parametrize("in_place", [False, True], ids=["buffer", "in_place"])
def test_q_out(in_place):
    t, hq, hkv, d = 4, 6, 2, 32
    qkv, k_cache, v_cache, slots = _inputs(t, hq, hkv, d, torch.float16, seed=8, strided=True)
    pos = _positions(t, torch.int32, offset=12)
    q_ref = rope_kv_write_ref(qkv, pos, _inv_freq(d), k_cache.clone(), v_cache.clone(), slots, hq, hkv)
    if in_place:  # q rotated where it lies in qkv
        out = qkv[:, : hq * d].view(t, hq, d)
    else:
        out = poisoned((t, hq, d), torch.float16)
    res = rope_kv_write(qkv, pos, _inv_freq(d), k_cache, v_cache, slots, hq, hkv, q_out=out)
    assert res is out
    assert_close(out, q_ref, torch.float16, reduction=2, what="q_out")


def test_empty_batch():
    qkv, k_cache, v_cache, _ = _inputs(1, 2, 1, 16, torch.float32, seed=1)
    empty = torch.zeros(0, dtype=torch.int64)
    q = rope_kv_write(qkv[:0], empty, _inv_freq(16), k_cache, v_cache, empty, 2, 1)
    assert q.shape == (0, 2, 16)


def _bad(case):
    qkv, k_cache, v_cache, slots = _inputs(3, 4, 2, 16, torch.float32, seed=2)
    args = dict(qkv=qkv, positions=_positions(3), inv_freq=_inv_freq(16), k_cache=k_cache, v_cache=v_cache,
                write_slots=slots, num_heads=4, num_kv_heads=2)
    if case == "qkv":  # width != (Hq + 2 Hkv) * D
        args["qkv"] = qkv[:, :-16]
    elif case == "positions":  # float positions
        args["positions"] = _positions(3).float()
    elif case == "k_cache":  # wrong Hkv
        args["k_cache"] = torch.randn(k_cache.shape[0], 3, 16)
    elif case == "write_slots":  # wrong length
        args["write_slots"] = slots[:2]
    elif case == "inv_freq":  # not [D/2]
        args["inv_freq"] = _inv_freq(32)
    return args


@pytest.mark.parametrize("case", ["qkv", "positions", "k_cache", "write_slots", "inv_freq"])
def test_bad_inputs_raise(case):
    with pytest.raises(ValueError, match=case):
        rope_kv_write(**_bad(case))
