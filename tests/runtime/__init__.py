"""Helpers shared by the runtime tests: tiny Hugging Face checkpoints made from shape presets, greedy loops."""

from __future__ import annotations

from pathlib import Path

import torch

from conf.presets import ModelShape
from runtime.attention import AttnMeta, ReferenceAttention
from runtime.kv_cache import KVCache
from runtime.model import Transformer


def hf_config(shape: ModelShape):
    """A transformers LlamaConfig / Qwen2Config describing `shape` (the benchmark's peer builder)."""
    from bench.peers import hf_config as peers_hf_config

    return peers_hf_config(shape)


def make_hf_model(shape: ModelShape, seed: int = 0):
    """A transformers model of `shape` with every weight random (norms and biases too), fp32, eval mode."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(shape), dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                p.uniform_(-0.5, 0.5)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return model


def save_hf_checkpoint(shape: ModelShape, path: Path, seed: int = 0, max_shard_size: str | None = None):
    """Save a random `make_hf_model` checkpoint to `path` (sharded if `max_shard_size`); returns the model."""
    model = make_hf_model(shape, seed)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **kwargs)
    return model


def hf_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """fp32 logits [T, vocab] of transformers `model` on one sequence `ids` [T]."""
    with torch.no_grad():
        return model(ids[None]).logits[0].float()


def prefill_and_steps(model: Transformer, ids: torch.Tensor, n_prefill: int) -> torch.Tensor:
    """Logits [T, vocab] of `ids`: the first `n_prefill` tokens in one forward, the rest one token per step."""
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, ids.numel() + 4, heads, head_dim, model.dtype, ids.device)
    attn = ReferenceAttention()
    with torch.inference_mode():
        out = [model(ids[:n_prefill], AttnMeta.causal(0, n_prefill, ids.device), cache, attn)]
        for t in range(n_prefill, ids.numel()):
            out.append(model(ids[t : t + 1], AttnMeta.causal(t, 1, ids.device), cache, attn))
    return torch.cat(out)


def greedy(model: Transformer, prompt: list[int], n_new: int) -> list[int]:
    """Greedy continuation of `prompt` by `n_new` tokens (prefill, then one token per forward)."""
    layers, heads, head_dim = model.cache_spec()
    cache = KVCache(layers, len(prompt) + n_new, heads, head_dim, model.dtype, "cpu")
    attn, out = ReferenceAttention(), []
    with torch.inference_mode():
        logits = model(torch.tensor(prompt), AttnMeta.causal(0, len(prompt)), cache, attn)
        for _ in range(n_new):
            out.append(int(logits[-1].argmax()))
            if len(out) == n_new:
                break
            pos = len(prompt) + len(out) - 1
            logits = model(torch.tensor(out[-1:]), AttnMeta.causal(pos, 1), cache, attn)
    return out


def _permute_for_gguf(w, n_head: int):
    """llama.cpp's convert_hf_to_gguf permutation of llama q/k rows (HF rotate-half -> interleaved pairs)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _llama3_rope_divisors(shape: ModelShape):
    """float32 [head_dim / 2] `rope_freqs` of a Llama 3.1 GGUF, computed as llama.cpp's convert_hf_to_gguf."""
    import math

    import numpy as np

    rs, d = shape.rope_scaling, shape.head_dim
    freqs = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    low_wavelen, high_wavelen = rs.original_max_position / rs.low_freq_factor, rs.original_max_position / \
        rs.high_freq_factor
    divisors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            divisors.append(1.0)
        elif wavelen > low_wavelen:
            divisors.append(rs.factor)
        else:
            smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) / (rs.high_freq_factor -
                                                                                 rs.low_freq_factor)
            divisors.append(1 / ((1 - smooth) / rs.factor + smooth))
    return np.array(divisors, dtype=np.float32)


def write_gguf(hf_model, shape: ModelShape, path: Path, quantize: bool = False, tokenizer=None) -> None:
    """Write `hf_model` as a GGUF file the way llama.cpp's converter does (q/k permuted for llama).

    With `quantize`, matrices whose rows are a multiple of 32 are stored as Q8_0 and `hf_model` is updated in
    place to the dequantised weights, so it stays the reference for the file. `tokenizer` (a
    `tokenizers.Tokenizer`, byte-level BPE) is embedded as tokenizer.ggml.* fields.
    """
    import json

    import gguf
    import numpy as np
    from gguf.quants import dequantize
    from gguf.quants import quantize as gguf_quantize

    arch = shape.arch
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(shape.num_layers)
    w.add_context_length(shape.max_position)
    w.add_embedding_length(shape.hidden_size)
    w.add_feed_forward_length(shape.intermediate_size)
    w.add_head_count(shape.num_heads)
    w.add_head_count_kv(shape.num_kv_heads)
    w.add_rope_freq_base(shape.rope_theta)
    w.add_layer_norm_rms_eps(shape.rms_eps)
    w.add_vocab_size(shape.vocab_size)
    if tokenizer is not None:
        model = json.loads(tokenizer.to_str())["model"]
        vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        specials = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list([t for t, _ in vocab])
        w.add_token_types([3 if t in specials else 1 for t, _ in vocab])
        w.add_token_merges(merges)
        w.add_eos_token_id(0)
    if shape.rope_scaling is not None:  # llama.cpp's converter: a RoPE divisor per frequency
        w.add_tensor("rope_freqs.weight", _llama3_rope_divisors(shape))
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    state = hf_model.state_dict()
    for name, tensor in state.items():
        stem, suffix = name.rsplit(".", 1)
        if stem == "lm_head" and shape.tie_embeddings:
            continue
        if stem.startswith("model.layers."):
            _, _, i, part = stem.split(".", 3)
            gname = f"blk.{i}.{parts[part]}.{suffix}"
        else:
            gname = f"{names[stem]}.{suffix}"
        arr = tensor.detach().float().numpy()
        if arch == "llama" and stem.endswith(("q_proj", "k_proj")):
            arr = _permute_for_gguf(arr, shape.num_heads if "q_proj" in stem else shape.num_kv_heads)
        if quantize and arr.ndim == 2 and arr.shape[1] % 32 == 0:
            q = gguf_quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(gname, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            deq = dequantize(q, gguf.GGMLQuantizationType.Q8_0)
            if arch == "llama" and stem.endswith(("q_proj", "k_proj")):  # undo the permutation for HF
                n = shape.num_heads if "q_proj" in stem else shape.num_kv_heads
                deq = deq.reshape(n, deq.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(deq.shape)
            with torch.no_grad():
                tensor.copy_(torch.from_numpy(np.ascontiguousarray(deq)))
        else:
            w.add_tensor(gname, np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def new_cache(model: Transformer, capacity: int) -> KVCache:
    """An empty KVCache sized for `model` (its local kv heads) with `capacity` slots."""
    layers, heads, head_dim = model.cache_spec()
    return KVCache(layers, capacity, heads, head_dim, model.dtype, "cpu")
