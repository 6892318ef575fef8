"""GPU tests (marker `gpu`): sampling at temperature > 0 on the CUDA-graph path keeps the target's distribution.

Every mode runs with `kernels=graphs` (Triton kernels, CUDA graphs) at temperature 0.25 on n requests of one prompt
(request ids differ, so their generators differ), with two drafts: the target itself (self-speculation: drafted tokens
are mostly accepted, so the accept branch of the lossless rejection-sampling rule decides the law) and a small random
draft (tiny-llama-draft, seed 2: drafted tokens are mostly rejected, so the residual resampling decides it). The
first two emitted tokens must follow the target's laws, computed exactly from the seeded weights on the GPU (float32):
E[TV] <= 0.5 * sum_k sqrt(p_k (1 - p_k) / n) and TV moves by <= 1/n per sample, so
P(TV > E + 0.1) <= exp(-2 n 0.1^2) = 3.4e-4 at n = 400 (McDiarmid), per token and mode.
async_tree runs on a 1 + 1 split (both groups on the one GPU through `parallel.share_gpus` where only one exists).
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

from conf import build_config
from conf.presets import MODEL_PRESETS
from runtime.attention import AttnMeta, ReferenceAttention
from runtime.engine import run_rank
from runtime.kv_cache import KVCache
from runtime.launch import launch
from runtime.loader import build_model
from tests.gpu.test_graphs import cfg_for, split_of

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

N, TEMPERATURE, PROMPT = 400, 0.25, [5, 6, 7, 8]


@functools.cache
def target_laws() -> tuple[torch.Tensor, torch.Tensor]:
    """The target's law of the first emitted token and the marginal law of the second (float32, on the GPU,
    the engine's seeded weights)."""
    model = build_model(MODEL_PRESETS["tiny-llama"], torch.float32, "cuda", seed=1)
    layers, heads, head_dim = model.cache_spec()

    def next_probs(tokens: list[int]) -> torch.Tensor:
        cache = KVCache(layers, 16, heads, head_dim, torch.float32, "cuda")
        logits = model(torch.tensor(tokens, device="cuda"), AttnMeta.causal(0, len(tokens), "cuda"), cache,
                       ReferenceAttention())
        return torch.softmax(logits[-1].double() / TEMPERATURE, -1).cpu()

    with torch.no_grad():
        p1 = next_probs(PROMPT)
        p2 = sum(p1[x] * next_probs(PROMPT + [x]) for x in range(p1.numel()) if p1[x] > 1e-6)
    return p1, p2


@pytest.mark.parametrize("draft", ["tiny-llama", "tiny-llama-draft"], ids=["self", "small"])
@pytest.mark.parametrize("mode", ["autoregressive", "chain", "serial_tree", "async_tree"])
def test_sampling_on_graphs_follows_the_target_law(mode, draft):
    if mode == "autoregressive" and draft != "tiny-llama":
        pytest.skip("no draft in autoregressive mode")
    cfg = cfg_for(mode, "tiny-llama", draft, "float32",
                  temperature=TEMPERATURE, **split_of(mode))
    cfg = build_config(dataclasses.replace(cfg, workload=dataclasses.replace(cfg.workload, max_new_tokens=2)))
    out = launch(functools.partial(run_rank, prompts=[PROMPT] * N, eos_token_id=None), cfg)
    assert all(len(o) == 2 for o in out["outputs"]), "every request emits its 2 tokens"
    for k, p in enumerate(target_laws()):
        counts = torch.bincount(torch.tensor([o[k] for o in out["outputs"]]), minlength=p.numel()).double()
        tv = 0.5 * float((counts / N - p).abs().sum())
        bound = 0.5 * float((p * (1 - p) / N).sqrt().sum()) + 0.1
        assert tv < bound, f"{mode} token {k + 1}: TV {tv:.3f} >= {bound:.3f}"
    if mode != "autoregressive" and draft == "tiny-llama":
        assert sum(r["accepted"] for r in out["iterations"]) > N // 4, "self-speculation accepts drafted tokens"
