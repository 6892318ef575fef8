"""GPU tests (marker `gpu`) of runtime.model.NORM_EPILOGUE / kernels.norm_epilogue: the split-K counters under real
concurrency, CUDA-graph capture and replay, PDL.

    TRITON_INTERPRET=0 pytest -m gpu tests/gpu/test_norm_epilogue_gpu.py -p no:cacheprovider

The producer's new residual must be bitwise add_rmsnorm_partials's (the same K loop at the same tile and split, then
the same per-element rounding) and leave its counters zero, launch after launch. A Llama-like bf16 model (hidden
2048, the 1B's o / down tiles: split-K 2 and 4 at up to 16 rows, so the counters are used) captured as a step graph
with the switch on gives the logits of the graph without it up to rounding (the consumers' sum of squares runs per
tile, then over tiles): close, the same greedy token except at a numerical tie (bench/peers.py TIE_EPSILON), and its
replays bitwise identical to each other (no atomics touch data).
"""

from __future__ import annotations

import importlib

import pytest
import torch

from bench.peers import TIE_EPSILON
from conf.presets import ModelShape
from kernels.pdl import pdl
from runtime.attention import AttnMeta, make_attention_backend
from runtime.graphs import StepGraph
from runtime.kv_cache import KVCache
from runtime.loader import build_model
from runtime.tree import ancestor_mask

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

# Llama-3.2-1B's widths (its o / down skinny tiles split K in 2 / 4 at <= 16 rows), three layers, a small vocabulary
SHAPE = ModelShape("gpu-llama-2k", "llama", 8192, 2048, 8192, 3, 32, 8, 64, 500000.0, 4096)
PARENTS = {1: [-1], 8: [-1, 0, 0, 1, 1, 2, 3, 3]}
DEPTHS = {1: [0], 8: [0, 1, 1, 2, 2, 2, 3, 3]}
REPLAYS = 4


@pytest.mark.parametrize("m", [1, 8])
def test_producer_is_bitwise_the_norm_kernel_and_leaves_its_counters_zero(m):
    """The 8B down projection's shape (K 14336, split 4) and o's (K 4096, split 2), bf16, ten launches on new data
    each with the same counters: new residual bitwise, sums of squares close, counters zero after each launch."""
    from kernels import add_rmsnorm_partials, skinny_linear_partials, skinny_linear_residual
    from kernels.norm_epilogue import new_counters

    skinny = importlib.import_module("kernels.skinny_linear")
    g = torch.Generator(device="cuda").manual_seed(m)
    for n, k in ((4096, 14336), (4096, 4096)):
        assert skinny.pick_config(m, n, k)["split_k"] > 1  # the counters' path
        counters = new_counters(n, "cuda")
        w = (torch.randn(n, k, device="cuda", generator=g) / k**0.5).bfloat16()
        ones = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        for _ in range(10):
            x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            residual = torch.randn(m, n, device="cuda", generator=g).bfloat16()
            new_res, sumsq = skinny_linear_residual(x, w, residual, counters=counters)
            _, want = add_rmsnorm_partials(skinny_linear_partials(x, w), residual, ones, 1e-5)
            torch.cuda.synchronize()
            assert torch.equal(new_res, want), f"[{n}, {k}] m={m}: new residual differs from add_rmsnorm_partials's"
            rows = (want.float() ** 2).sum(1)
            assert torch.allclose(sumsq.sum(0), rows, rtol=1e-5, atol=1e-3)
            assert not counters.any(), f"counters left {counters.nonzero().flatten().tolist()}"


@torch.no_grad()
@pytest.mark.parametrize("dtype,tol", [("bfloat16", 0.15), ("float32", 2e-4)])
@pytest.mark.parametrize("use_pdl", [True, False], ids=["pdl", "no_pdl"])
@pytest.mark.parametrize("role", ["draft", "target"])
@pytest.mark.parametrize("rows", [1, 8])
def test_step_graph_with_the_norm_epilogue_matches_the_norm_kernels(rows, role, use_pdl, dtype, tol, monkeypatch):
    """Two graphs of one model and cache, captured with NORM_EPILOGUE off and on (the draft: the skinny QKV, the fused
    RoPE attention on one-row steps; the target: the QKV + RoPE GEMM), replayed on the same step after a 150-token
    prefill: logits within `tol` of the largest (test_graphs' tolerances), the same argmax except at a tie, the
    epilogue graph's replays bitwise alike, its counters (allocated in the eager warm-up) zero after them."""
    import runtime.model

    kw = {"rope_attention": True} if role == "draft" else {"qkv_rope": True}
    model = build_model(SHAPE, dtype, "cuda", seed=5).use_fused_kernels(skinny=True, **kw)
    attn = make_attention_backend("triton")
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, 400, heads, head_dim, model.dtype, "cuda")
    graphs = {}
    with pdl(use_pdl):  # captured before the prefill: the capture's writes land in slots [0, rows)
        for on in (False, True):
            monkeypatch.setattr(runtime.model, "NORM_EPILOGUE", on)
            graphs[on] = StepGraph(model, cache, attn, rows, rows)
    monkeypatch.setattr(runtime.model, "NORM_EPILOGUE", False)
    assert {(i, site) for i, site, _ in model._norm_counters} == {(i, s) for i in range(layers) for s in ("o", "down")}
    g = torch.Generator().manual_seed(rows)
    prefix = 150
    model(torch.randint(0, SHAPE.vocab_size, (prefix,), generator=g).cuda(), AttnMeta.causal(0, prefix, "cuda"),
          cache, attn)
    ids = torch.randint(0, SHAPE.vocab_size, (rows,), generator=g)
    pos = torch.tensor([prefix + d for d in DEPTHS[rows]])
    slots, mask = torch.arange(rows), ancestor_mask(PARENTS[rows], rows)
    want = graphs[False].replay(ids, pos, slots, prefix, mask).clone()
    got = [graphs[True].replay(ids, pos, slots, prefix, mask).clone() for _ in range(REPLAYS)]
    torch.cuda.synchronize()
    for i, again in enumerate(got[1:], 1):
        assert torch.equal(again, got[0]), f"replay {i} differs from replay 0: not deterministic"
    for key, counters in model._norm_counters.items():
        assert not counters.any(), f"{key}: counters left {counters.nonzero().flatten().tolist()}"
    err = (got[0] - want).abs().max().item() / want.abs().max().item()
    assert err <= tol, f"relative error {err:.2e} > {tol}"
    top2 = want.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    differ = got[0].argmax(-1) != want.argmax(-1)
    assert bool((margin[differ] <= TIE_EPSILON[dtype]).all()), (
        f"argmax differs at rows {differ.nonzero().flatten().tolist()} with margins {margin[differ].tolist()}")
