"""The launch order the attention's `prefix_ready` relies on (kernels/pdl.py, kernels/tree_attention.py): in the
model's step every attention launched with prefix_ready comes right after a QKV GEMM launched with the
"pre_attention" PDL role (which writes q and the new k / v only), and no other launch takes that role. Recorded on
CPU (Triton's interpreter) by wrapping the kernels package's entry points; the GPU tests run the same code under
PDL and CUDA graphs."""

from __future__ import annotations

import pytest
import torch

from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, make_attention_backend
from runtime.fused_decode import FusedDecoder, KernelPlan
from runtime.loader import build_model
from tests.runtime import new_cache

pytest.importorskip("kernels")

ENTRY_POINTS = ("add_rmsnorm", "add_rmsnorm_partials", "skinny_linear", "skinny_linear_partials", "swiglu",
                "rope_kv_write", "tree_attention", "rope_tree_attention", "qkv_rope_kv_write")


def _record(monkeypatch) -> list[tuple[str, str | None, bool]]:
    """Wrap ENTRY_POINTS: each call appends (name, pdl_role keyword, prefix_ready keyword)."""
    import kernels

    log: list[tuple[str, str | None, bool]] = []
    for name in ENTRY_POINTS:
        real = getattr(kernels, name)

        def wrapped(*args, _name=name, _real=real, **kw):
            log.append((_name, kw.get("pdl_role"), bool(kw.get("prefix_ready", False))))
            return _real(*args, **kw)

        monkeypatch.setattr(kernels, name, wrapped)
    return log


@pytest.mark.parametrize("mode", ["default", "qkv_rope"])
def test_prefix_ready_attention_follows_its_pre_attention_qkv(monkeypatch, mode):
    """default: single-token steps (the fused RoPE attention) only; qkv_rope (kernels.target_qkv_rope): every step,
    the prefill's too, after the fused QKV + RoPE GEMM."""
    log = _record(monkeypatch)
    shape = MODEL_PRESETS["tiny-llama"]
    model = FusedDecoder(build_model(shape, torch.float32, "cpu", seed=0), KernelPlan(
        skinny=True, rope_attention=mode != "qkv_rope", qkv_rope=mode == "qkv_rope"))
    attn = make_attention_backend("triton")  # created after the wrapping: it binds the wrapped entry points
    cache = new_cache(model, 16)
    ids = torch.randint(0, shape.vocab_size, (8,), generator=torch.Generator().manual_seed(0))
    model(ids[:5], AttnMeta.causal(0, 5), cache, attn)  # prefill: 5 tokens
    prefill = len(log)
    for t in range(5, 8):  # single-token steps
        model(ids[t:t + 1], AttnMeta.causal(t, 1), cache, attn)
    ready = [i for i, (name, _, pr) in enumerate(log) if pr]
    steps = 4 if mode == "qkv_rope" else 3
    assert len(ready) == steps * shape.num_layers
    want = {"qkv_rope": ("tree_attention", ("qkv_rope_kv_write",))}.get(
        mode, ("rope_tree_attention", ("skinny_linear",)))
    for i in ready:
        assert log[i][0] == want[0]
        name, role, _ = log[i - 1]
        assert name in want[1] and role == "pre_attention", log[i - 1]
    pre = [i for i, (_, role, _) in enumerate(log) if role == "pre_attention"]
    assert [i + 1 for i in pre] == ready  # the role is taken only right before a prefix_ready attention
    if mode != "qkv_rope":
        assert ready[0] >= prefill  # the prefill's multi-token attention is not prefix_ready
