"""Plain greedy (or sampled) decoding of one model: the oracle of the losslessness tests.

Deliberately the simplest loop over `runtime/model.py`: prefill the prompt causally, then one token per
forward. Stop rule (the engine applies the same one): stop after the EOS token (kept in the output), after
`max_new_tokens`, or when prompt + output reaches `capacity` tokens. No speculation, no trees, no TP.
"""

from __future__ import annotations

import torch

from runtime.attention import AttentionBackend, AttnMeta, ReferenceAttention
from runtime.kv_cache import KVCache
from runtime.model import Transformer
from runtime.sampling import sample_token


@torch.no_grad()
def reference_decode(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    capacity: int,
    eos_token_id: int | None = None,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    attn: AttentionBackend | None = None,
    margins: list[float] | None = None,
) -> list[int]:
    """Generated tokens (prompt excluded) of plain decoding.

    Args:
        model: the target model (one rank, no TP).
        prompt: prompt token ids (non-empty, shorter than `capacity`).
        max_new_tokens: upper bound on generated tokens.
        capacity: prompt + generated tokens never exceed this (workload.max_seq_len_tokens).
        eos_token_id: stop after emitting it (None: never).
        temperature: 0 = greedy; > 0 = sample with `generator`.
        generator: the request's generator (temperature > 0).
        attn: attention backend; default the fp32 reference.
        margins: if given, receives the top-1 minus top-2 logit before every generated token (where a
            correct implementation in another precision may pick differently: the GPU tests' tie rule).
    """
    if not prompt or len(prompt) >= capacity:
        raise ValueError(f"prompt of {len(prompt)} tokens must be non-empty and shorter than {capacity}")
    attn = attn or ReferenceAttention()
    device = model.norm.weight.device
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, capacity, heads, head_dim, model.dtype, device)
    tokens = torch.tensor(prompt, device=device)
    logits = model(tokens, AttnMeta.causal(0, len(prompt), device), cache, attn)[-1]
    out: list[int] = []
    while True:
        if margins is not None:
            top = logits.float().topk(2).values
            margins.append(float(top[0] - top[1]))
        token = sample_token(logits, temperature, generator)
        out.append(token)
        length = len(prompt) + len(out)
        if token == eos_token_id or len(out) >= max_new_tokens or length >= capacity:
            return out
        step = torch.tensor([token], device=device)
        logits = model(step, AttnMeta.causal(length - 1, 1, device), cache, attn)[-1]
