"""GPU tests (marker `gpu`): the tree attention's fused RoPE + KV write on the device, at the
Llama-3-8B head shape and the runtime's launch configuration (prefix length in a device tensor, splits sized from a
2,304-slot cache): the CTA barrier and the per-row-block key writes of `rope_tree_attention` only race on a GPU."""

from __future__ import annotations

import math

import pytest
import torch

from kernels import rope_kv_write, rope_tree_attention, tree_attention
from kernels.reference import rope_kv_write_ref, tree_attention_ref
from runtime.tree import ancestor_mask
from tests.tolerances import assert_bitwise, assert_close

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

HQ, HKV, D, CAP = 32, 8, 128, 2304
TERMS = D + CAP  # one score's dot product, then at most CAP keys (tests/tolerances.py)


def operands(t: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(t, (HQ + 2 * HKV) * D, generator=g).to("cuda", torch.bfloat16)
    k = torch.randn(CAP, HKV, D, generator=g).to("cuda", torch.bfloat16)
    v = torch.randn(CAP, HKV, D, generator=g).to("cuda", torch.bfloat16)
    positions = torch.randint(0, 8000, (t,), generator=g).cuda()
    inv_freq = (1.0 / (500000.0 ** (torch.arange(0, D, 2, dtype=torch.float32) / D))).cuda()
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, t)]
    return qkv, k, v, positions, inv_freq, ancestor_mask(parents, t).cuda()


@pytest.mark.parametrize("t", [1, 8, 20, 64])
@pytest.mark.parametrize("prefix", [0, 300, 1024, CAP - 64])
def test_rope_tree_attention_matches_the_two_kernels_on_gpu(prefix, t):
    """The cache's new values equal rope_kv_write's exactly (a copy), its new keys to the bf16 rounding of the rotation
    (the two kernels may round the float32 rotation differently), and the output equals
    rope_kv_write + tree_attention and the reference; 20 rows = two row blocks per kv head, 64 = the limit."""
    qkv, k, v, positions, inv_freq, mask = operands(t, seed=prefix + t)
    slots = prefix + torch.arange(t, device="cuda").flip(0)  # any order inside the tree region
    scale = 1 / math.sqrt(D)
    k_sep, v_sep = k.clone(), v.clone()
    q = rope_kv_write(qkv, positions, inv_freq, k_sep, v_sep, slots, HQ, HKV)
    k_ref, v_ref = k.clone(), v.clone()
    q_ref = rope_kv_write_ref(qkv, positions, inv_freq, k_ref, v_ref, slots, HQ, HKV)
    want = tree_attention_ref(q_ref, k_ref, v_ref, prefix, mask, scale).float()
    p = torch.tensor([prefix], device="cuda", dtype=torch.int32)
    sep = tree_attention(q, k_sep, v_sep, p, mask, scale)
    k_f, v_f = k.clone(), v.clone()
    got = rope_tree_attention(qkv, positions, inv_freq, k_f, v_f, slots, HQ, p, mask, scale)
    torch.cuda.synchronize()
    assert_bitwise(v_f, v_sep, reason="v is copied from qkv into the cache by both kernels: data movement")
    untouched = torch.ones(CAP, dtype=torch.bool, device="cuda")
    untouched[prefix:prefix + t] = False
    assert_bitwise(k_f[untouched], k_sep[untouched], reason="slots neither kernel writes")
    assert_close(k_f[prefix:prefix + t], k_sep[prefix:prefix + t], torch.bfloat16, reduction=2, what="new keys")
    for name, out in (("fused", got), ("separate", sep)):
        assert_close(out, want, torch.bfloat16, reduction=TERMS, what=f"{name} vs reference")
    assert_close(got, sep, torch.bfloat16, reduction=TERMS, what="fused vs separate")


def test_rope_tree_attention_in_a_cuda_graph_replays_like_eager():
    """Captured once with the prefix length in a device tensor, replayed at three lengths: output and cache writes
    equal to eager calls on the same cache with the same device tensor (an int prefix sizes the splits from it, not
    from the cache: other rounding)."""
    t = 8
    qkv, k, v, positions, inv_freq, mask = operands(t, seed=11)
    slots_buf, p = torch.zeros(t, dtype=torch.int64, device="cuda"), torch.zeros(1, dtype=torch.int32, device="cuda")
    k_g, v_g = k.clone(), v.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        rope_tree_attention(qkv, positions, inv_freq, k_g, v_g, slots_buf, HQ, p, mask, D ** -0.5)  # compile
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rope_tree_attention(qkv, positions, inv_freq, k_g, v_g, slots_buf, HQ, p, mask, D ** -0.5)
    for prefix in (17, 900, 2100):
        p.fill_(prefix)
        slots_buf.copy_(prefix + torch.arange(t, device="cuda"))
        k_e, v_e = k_g.clone(), v_g.clone()  # the cache before this step
        graph.replay()
        want = rope_tree_attention(qkv, positions, inv_freq, k_e, v_e, slots_buf, HQ, p, mask, D ** -0.5)
        torch.cuda.synchronize()
        replay = "a CUDA-graph replay of the eager call's kernel, same inputs and launch configuration"
        assert_bitwise(out, want, reason=replay, what=f"prefix {prefix}: output")
        assert_bitwise(k_g, k_e, reason=replay, what=f"prefix {prefix}: the graph's key writes")
        assert_bitwise(v_g, v_e, reason=replay, what=f"prefix {prefix}: the graph's value writes")
        assert not torch.equal(k_g[prefix:prefix + t], k[prefix:prefix + t]), f"prefix {prefix}: no key written"


@pytest.mark.parametrize("wide_max_rows", [64, 256])
@pytest.mark.parametrize("t,d", [(32, 64), (64, 64), (32, 128)])
@pytest.mark.parametrize("prefix", [0, 300, 1280])
def test_many_row_tree_attention_matches_the_reference_on_gpu(prefix, t, d, wide_max_rows):
    """32 and 64 tokens at GQA 4 (128 / 256 query rows: the 1B draft's 32-row expansion is the first) over a
    256-slot tree region, the prefix length in a device tensor as the runtime's graphs pass it: the generic tile
    (wide_max_rows 64) and the wide one at 32 rows per program (256) both give the reference's output."""
    g = torch.Generator().manual_seed(prefix + t + d)
    tree_len = 256
    q = torch.randn(t, HQ, d, generator=g).to("cuda", torch.bfloat16)
    k = torch.randn(CAP, HKV, d, generator=g).to("cuda", torch.bfloat16)
    v = torch.randn(CAP, HKV, d, generator=g).to("cuda", torch.bfloat16)
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, t)]
    mask = torch.zeros(t, tree_len, dtype=torch.bool)
    mask[:, :t] = ancestor_mask(parents, t)  # the step's rows sit first in the region; the rest is padding
    mask = mask.cuda()
    scale = 1 / math.sqrt(d)
    p = torch.tensor([prefix], device="cuda", dtype=torch.int32)
    got = tree_attention(q, k, v, p, mask, scale, wide_max_rows=wide_max_rows)
    want = tree_attention_ref(q, k, v, prefix, mask, scale).float()
    torch.cuda.synchronize()
    assert_close(got, want, torch.bfloat16, reduction=d + CAP, what="vs reference")


@pytest.mark.parametrize("t,d", [(1, 64), (16, 64), (32, 64), (1, 128), (8, 128)])
@pytest.mark.parametrize("prefix", [0, 77, 1280, CAP - 256])
def test_tma_prefix_gives_the_pointer_loads_result_on_gpu(monkeypatch, prefix, t, d):
    """kernels.tree_attention.use_tma_prefix (CUDA, one-token launches at head dims <= 64; forced on and off here at
    every shape): the prefix through tensor descriptors gives the pointer loads' output on the device (to rounding:
    other loads feed the MMAs), for one-token and tree launches, with stale non-finite rows past the tree region."""
    import importlib

    ta = importlib.import_module("kernels.tree_attention")
    g = torch.Generator().manual_seed(prefix + 7 * t + d)
    tree_len = 256
    q = torch.randn(t, HQ, d, generator=g).to("cuda", torch.bfloat16)
    k = torch.randn(CAP, HKV, d, generator=g).to("cuda", torch.bfloat16)
    v = torch.randn(CAP, HKV, d, generator=g).to("cuda", torch.bfloat16)
    k[prefix + tree_len:], v[prefix + tree_len:] = float("inf"), float("nan")  # rows a box may read past the region
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=g)) for i in range(1, t)]
    mask = torch.zeros(t, tree_len, dtype=torch.bool)
    mask[:, :t] = ancestor_mask(parents, t)
    mask, scale = mask.cuda(), 1 / math.sqrt(d)
    p = torch.tensor([prefix], device="cuda", dtype=torch.int32)
    outs = []
    for tma in (False, True):
        monkeypatch.setattr(ta, "use_tma_prefix", lambda *_, tma=tma: tma)
        outs.append(tree_attention(q, k, v, p, mask, scale, prefix_ready=True))
    torch.cuda.synchronize()
    assert torch.isfinite(outs[0].float()).all()
    assert_close(outs[1], outs[0], torch.bfloat16, reduction=d + CAP, what="TMA vs pointer loads")
    want = tree_attention_ref(q, k, v, prefix, mask, scale).float()
    assert_close(outs[1], want, torch.bfloat16, reduction=d + CAP, what="TMA vs reference")
