"""runtime.model.NORM_EPILOGUE: the skinny path's norms split across the GEMM boundaries (residual + sums of squares
in the o / down projections' epilogues, the scaling in the consuming SwiGLU / QKV / LM-head GEMMs:
kernels.norm_epilogue) give the logits and the KV cache of the norm kernels' path within tolerance (Triton's
interpreter on CPU, tiny random models in fp32 and fp16): a short prefill (one or eight rows on the skinny path, the
other through cuBLAS), then single-token decode steps; a target with the fused QKV + RoPE GEMM and a draft with the
fused RoPE attention."""

from __future__ import annotations

import pytest
import torch

from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, make_attention_backend
from runtime.loader import build_model
from tests.kernels.tolerances import assert_close
from tests.runtime import count_kernel_calls, new_cache

pytest.importorskip("kernels")

COUNTED = ("add_rmsnorm", "add_rmsnorm_partials", "skinny_linear_residual")


def _run(monkeypatch, epilogue: bool, preset: str = "tiny-llama", dtype: torch.dtype = torch.float32,
         prefill: int = 8, **fused_kw) -> tuple[list, object, dict, object]:
    """Logits of a `prefill`-token prefill and 3 decode steps, the cache, the launch counts of COUNTED, the model."""
    import runtime.model

    monkeypatch.setattr(runtime.model, "NORM_EPILOGUE", epilogue)
    calls = count_kernel_calls(monkeypatch, COUNTED)
    shape = MODEL_PRESETS[preset]
    model = build_model(shape, dtype, "cpu", seed=0).use_fused_kernels(True, skinny=True, **fused_kw)
    attn = make_attention_backend("triton")
    total = prefill + 3
    ids = torch.randint(0, shape.vocab_size, (total,), generator=torch.Generator().manual_seed(1))
    cache = new_cache(model, total + 2)
    logits = [model(ids[:prefill], AttnMeta.causal(0, prefill), cache, attn)]
    logits += [model(ids[t:t + 1], AttnMeta.causal(t, 1), cache, attn) for t in range(prefill, total)]
    return logits, cache, calls, model


def _assert_close_runs(a, b, dtype, total):
    (want, want_cache, _, _), (got, got_cache, _, _) = a, b
    for step, (w, g) in enumerate(zip(want, got)):
        # logits are float32 accumulators of O(1) products; fp16 residuals differ by one rounding at most
        assert_close(g, w, torch.float32 if dtype == torch.float32 else torch.float16, f"logits of step {step}")
    assert_close(got_cache.kv[:, :, :total], want_cache.kv[:, :, :total], dtype, "KV cache")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("fused_kw", [{"rope_attention": True}, {"qkv_rope": True}, {}],
                         ids=["draft_rope_attention", "target_qkv_rope", "rope_kernel"])
def test_norm_epilogue_matches_the_norm_kernels(fused_kw, dtype, monkeypatch):
    """Per skinny step: the embedding's add_rmsnorm, two skinny_linear_residual per layer (o, down) and no other norm
    launch; the norm kernels' path runs 2 * layers add_rmsnorm_partials instead. Eight-row prefill (skinny) and
    three one-row steps."""
    layers = MODEL_PRESETS["tiny-llama"].num_layers
    base = _run(monkeypatch, False, dtype=dtype, **fused_kw)
    assert base[2] == {"add_rmsnorm": 4, "add_rmsnorm_partials": 4 * 2 * layers, "skinny_linear_residual": 0}
    got = _run(monkeypatch, True, dtype=dtype, **fused_kw)
    assert got[2] == {"add_rmsnorm": 4, "add_rmsnorm_partials": 0, "skinny_linear_residual": 4 * 2 * layers}
    _assert_close_runs(base, got, dtype, 11)
    for counters in got[3]._norm_counters.values():  # every launch left its counters zero
        assert counters.dtype == torch.int32 and not counters.any()
    assert {(i, site) for i, site, _ in got[3]._norm_counters} == {(i, s) for i in range(layers) for s in ("o", "down")}


def test_long_prefill_keeps_the_norm_kernels_and_split_k_epilogues_count_to_zero(monkeypatch):
    """A 70-row prefill (more than SKINNY_MAX_ROWS: cuBLAS, the switch does not apply), then one-row steps whose o /
    down projections are forced to split K in two / four (the counters' path) on a multi-layer model."""
    from kernels.skinny_linear import CONFIGS

    shape = MODEL_PRESETS["tiny-llama"]
    hidden, inter, q = shape.hidden_size, shape.intermediate_size, shape.num_heads * shape.head_dim
    monkeypatch.setitem(CONFIGS, (hidden, q, 16), {"block_n": 16, "block_k": 16, "split_k": 2, "num_warps": 4,
                                                   "num_stages": 2})
    monkeypatch.setitem(CONFIGS, (hidden, inter, 16), {"block_n": 32, "block_k": 32, "split_k": 4, "num_warps": 4,
                                                       "num_stages": 2})
    base = _run(monkeypatch, False, prefill=70)
    got = _run(monkeypatch, True, prefill=70)
    layers = shape.num_layers
    assert got[2] == {"add_rmsnorm": 1 + 2 * layers + 3, "add_rmsnorm_partials": 0,
                      "skinny_linear_residual": 3 * 2 * layers}
    _assert_close_runs(base, got, torch.float32, 73)
    assert all(not c.any() for c in got[3]._norm_counters.values())


def test_qkv_with_a_bias_takes_the_norm_kernel(monkeypatch):
    """tiny-qwen2 (a QKV bias: no norm_in on its GEMM): the norm kernel on the new residual, then its QKV; the rest
    of the switch applies."""
    layers = MODEL_PRESETS["tiny-qwen2"].num_layers
    base = _run(monkeypatch, False, "tiny-qwen2", prefill=1, rope_attention=True)
    got = _run(monkeypatch, True, "tiny-qwen2", prefill=1, rope_attention=True)
    assert got[2] == {"add_rmsnorm": 4 * layers, "add_rmsnorm_partials": 0, "skinny_linear_residual": 4 * 2 * layers}
    _assert_close_runs(base, got, torch.float32, 4)


def test_both_norm_switches_are_refused(monkeypatch):
    import runtime.model

    monkeypatch.setattr(runtime.model, "NORM_PROLOGUE", True)
    with pytest.raises(ValueError, match="NORM_PROLOGUE and NORM_EPILOGUE"):
        _run(monkeypatch, True, prefill=1)
