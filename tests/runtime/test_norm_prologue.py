"""runtime.model.NORM_PROLOGUE: the skinny path's norms in the prologues of the SwiGLU and next QKV GEMMs
(kernels.swiglu_normed / skinny_linear_normed) give the logits and the KV cache of the norm kernels' path (Triton's
interpreter on CPU, tiny-llama fp32): a short prefill, then single-token decode steps."""

from __future__ import annotations

import pytest
import torch

from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, make_attention_backend
from runtime.loader import build_model
from tests.runtime import new_cache
from tests.tolerances import assert_close, forward_terms

pytest.importorskip("kernels")


def _run(monkeypatch, prologue: bool, preset: str = "tiny-llama", **fused_kw) -> tuple[list, object, dict]:
    """Logits of a 6-token prefill and 3 decode steps, the cache, and the launch counts of the norm / normed GEMMs."""
    import kernels
    import runtime.model

    monkeypatch.setattr(runtime.model, "NORM_PROLOGUE", prologue)
    calls = {"add_rmsnorm_partials": 0, "skinny_linear_normed": 0, "swiglu_normed": 0}
    for name in calls:
        real = getattr(kernels, name)

        def counted(*args, _name=name, _real=real, **kw):
            calls[_name] += 1
            return _real(*args, **kw)

        monkeypatch.setattr(kernels, name, counted)
    shape = MODEL_PRESETS[preset]
    model = build_model(shape, torch.float32, "cpu", seed=0).use_fused_kernels(True, skinny=True, **fused_kw)
    attn = make_attention_backend("triton")
    ids = torch.randint(0, shape.vocab_size, (9,), generator=torch.Generator().manual_seed(1))
    cache = new_cache(model, 12)
    logits = [model(ids[:6], AttnMeta.causal(0, 6), cache, attn)]
    logits += [model(ids[t:t + 1], AttnMeta.causal(t, 1), cache, attn) for t in range(6, 9)]
    return logits, cache, calls


CHAIN = forward_terms(MODEL_PRESETS["tiny-llama"], 12)  # qwen2's shape is the same


def _assert_same(a, b):
    (want, want_cache, _), (got, got_cache, _) = a, b
    for w, g in zip(want, got):
        assert_close(g, w, torch.float32, reduction=CHAIN, what="logits")
        assert torch.equal(g.argmax(-1), w.argmax(-1))
    assert_close(got_cache.kv[:, :, :9], want_cache.kv[:, :, :9], torch.float32, reduction=CHAIN, what="cache")


@pytest.mark.parametrize("fused_kw", [{}, {"rope_attention": True}], ids=["rope_kernel", "rope_attention"])
def test_norm_prologue_matches_the_norm_kernels(fused_kw, monkeypatch):
    """Per step and layer: one swiglu_normed, a skinny_linear_normed for every QKV after the first, and one
    add_rmsnorm_partials (the final norm) per step instead of two per layer."""
    layers = MODEL_PRESETS["tiny-llama"].num_layers
    base = _run(monkeypatch, False, **fused_kw)
    assert base[2] == {"add_rmsnorm_partials": 4 * 2 * layers, "skinny_linear_normed": 0, "swiglu_normed": 0}
    got = _run(monkeypatch, True, **fused_kw)
    assert got[2] == {"add_rmsnorm_partials": 4, "skinny_linear_normed": 4 * (layers - 1), "swiglu_normed": 4 * layers}
    _assert_same(base, got)


def test_qkv_keeps_the_norm_kernel_where_it_cannot_take_the_prologue(monkeypatch):
    """A QKV whose tuned tile splits K, or with a bias (qwen2), keeps add_rmsnorm_partials + its GEMM; the MLP
    still takes the prologue."""
    from kernels.skinny_linear import CONFIGS

    shape = MODEL_PRESETS["tiny-llama"]
    qkv_n = (shape.num_heads + 2 * shape.num_kv_heads) * shape.head_dim
    monkeypatch.setitem(CONFIGS, (qkv_n, shape.hidden_size, 16),
                        {"block_n": 64, "block_k": 32, "split_k": 2, "num_warps": 4, "num_stages": 2})
    for preset in ("tiny-llama", "tiny-qwen2"):
        layers = MODEL_PRESETS[preset].num_layers
        base = _run(monkeypatch, False, preset)
        got = _run(monkeypatch, True, preset)
        assert got[2] == {"add_rmsnorm_partials": 4 * layers, "skinny_linear_normed": 0, "swiglu_normed": 4 * layers}
        _assert_same(base, got)
