"""Llama-family decoder (Llama 2/3/3.1/3.2, Qwen2, SmolLM2) as a plain nn.Module over one request.

Architecture: token embedding, `num_layers` pre-norm blocks (RMSNorm -> GQA self-attention with RoPE ->
residual, RMSNorm -> SwiGLU MLP -> residual), final RMSNorm, LM head (tied to the embedding for SmolLM2 and
Llama 3.2). Qwen2 adds biases to the q/k/v projections. Llama 3.1+ rescales RoPE frequencies ("llama3" rope
type). Numerics follow Hugging Face `LlamaForCausalLM` / `Qwen2ForCausalLM` (RMSNorm and RoPE tables in fp32).

`forward(input_ids [T], meta, cache, attn) -> logits [T, vocab]` processes one request without a batch
dimension: `meta` (runtime.attention.AttnMeta) gives positions, cache slots and the tree/causal mask, `cache`
(runtime.kv_cache.KVCache) receives the new keys/values at `meta.write_slots`, `attn` is the attention backend.

What it does *not* know: kernel variants, tensor parallelism and speculation. The fused Triton decode path
(runtime/fused_decode.py) is a separate forward over these same modules and weights. Projections are fused
(q|k|v in `wqkv`, gate|up in `w13`) and attention reads its head counts from `num_heads` / `num_kv_heads`
attributes; the TP transform (runtime/tp.py) shrinks those and the weights to one rank's shard, swaps the
embedding and LM head for vocab-parallel ones and adds all-reduces. Weights are filled by runtime/loader.py
(built on the meta device, materialised per shard).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from conf.presets import ModelShape
from runtime.attention import AttentionBackend, AttnMeta
from runtime.kv_cache import KVCache


def rope_inv_freq(shape: ModelShape) -> torch.Tensor:
    """[head_dim / 2] fp32 inverse RoPE frequencies, with Llama 3.1 scaling when the shape has it.

    Computed exactly as Hugging Face's `_compute_default_rope_parameters` / `_compute_llama3_parameters`
    (fp32 on CPU), so positions map to bit-identical angles.
    """
    d = shape.head_dim
    inv_freq = 1.0 / (shape.rope_theta ** (torch.arange(0, d, 2, dtype=torch.int64, device="cpu").float() / d))
    rs = shape.rope_scaling
    if rs is None:
        return inv_freq
    low_freq_wavelen = rs.original_max_position / rs.low_freq_factor
    high_freq_wavelen = rs.original_max_position / rs.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths (low frequencies) are slowed down by `factor`, short ones kept, the band between
    # interpolated smoothly (Llama 3.1 paper / reference implementation).
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / rs.factor, inv_freq)
    smooth = (rs.original_max_position / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor)
    smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled
    is_medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cos_sin(inv_freq: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """cos, sin tables [T, head_dim] for `positions` [T] (angles in fp32, then cast to `dtype`)."""
    freqs = positions[:, None].float() * inv_freq.to(positions.device)[None, :]  # [T, D/2]
    emb = torch.cat([freqs, freqs], dim=-1)  # [T, D]: the rotate-half layout of HF Llama
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate x [T, H, D] by cos/sin [T, D] in the rotate-half convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class RMSNorm(nn.Module):
    """Root-mean-square norm, normalised in fp32, scaled in the input dtype."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype) -> None:
        """A norm over the last `dim` features."""
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, dtype=dtype), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, dim] -> [T, dim]."""
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


class Attention(nn.Module):
    """GQA self-attention with RoPE; writes the new keys/values into the cache, then calls the backend."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype) -> None:
        """Full-size projections; runtime/tp.py shrinks them and `num_heads` / `num_kv_heads` to one shard."""
        super().__init__()
        self.head_dim = shape.head_dim
        self.num_heads = shape.num_heads  # query heads held by this module (local under TP)
        self.num_kv_heads = shape.num_kv_heads
        self.scale = shape.head_dim**-0.5
        # Fused q | k | v projection: one GEMM; rows [q_size | kv_size | kv_size].
        self.wqkv = nn.Linear(shape.hidden_size, shape.q_size + 2 * shape.kv_size, bias=shape.qkv_bias, dtype=dtype)
        self.wo = nn.Linear(shape.q_size, shape.hidden_size, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttnMeta, k_cache: torch.Tensor,
                v_cache: torch.Tensor, attn: AttentionBackend) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (a partial sum under TP: the all-reduce is the transform's).

        `cos`, `sin`: the RoPE tables [T, head_dim] of the T positions (`rope_cos_sin`).
        """
        t, d = x.shape[0], self.head_dim
        qkv = self.wqkv(x)
        q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1)
        q = apply_rope(q.view(t, self.num_heads, d), cos, sin)  # [T, Hq, D]
        k = apply_rope(k.view(t, self.num_kv_heads, d), cos, sin)  # [T, Hkv, D]
        k_cache.index_copy_(0, meta.write_slots, k.to(k_cache.dtype))
        v_cache.index_copy_(0, meta.write_slots, v.view(t, self.num_kv_heads, d).to(v_cache.dtype))
        out = attn(q, k_cache, v_cache, meta, self.scale).reshape(t, self.num_heads * d)  # [T, Hq * D]
        return self.wo(out)


class MLP(nn.Module):
    """SwiGLU: w2(silu(gate(x)) * up(x)), gate and up fused in `w13`."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype) -> None:
        """Full-size projections; runtime/tp.py shards the intermediate dimension."""
        super().__init__()
        # Rows [gate | up], each `intermediate` wide (local width under TP).
        self.w13 = nn.Linear(shape.hidden_size, 2 * shape.intermediate_size, bias=False, dtype=dtype)
        self.w2 = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (a partial sum under TP)."""
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)


class Block(nn.Module):
    """One pre-norm decoder layer."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype) -> None:
        """Attention and MLP with their norms."""
        super().__init__()
        self.attn_norm = RMSNorm(shape.hidden_size, shape.rms_eps, dtype)
        self.attn = Attention(shape, dtype)
        self.mlp_norm = RMSNorm(shape.hidden_size, shape.rms_eps, dtype)
        self.mlp = MLP(shape, dtype)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, meta: AttnMeta,
                k_cache: torch.Tensor, v_cache: torch.Tensor, attn: AttentionBackend) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden]."""
        x = x + self.attn(self.attn_norm(x), cos, sin, meta, k_cache, v_cache, attn)
        return x + self.mlp(self.mlp_norm(x))


class Transformer(nn.Module):
    """The decoder of one model (or of one TP shard of it, after runtime/tp.py)."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype = torch.float32) -> None:
        """Build every module at full size on the current default device (the loader uses `meta`).

        Weights are not initialised here: runtime/loader.py `build_model` fills them (seeded or checkpoint).
        """
        super().__init__()
        self.shape = shape
        # An explicit (uninitialised) weight: nn.Embedding's own init would import torch._dynamo (~3 s).
        self.embed = nn.Embedding(shape.vocab_size, shape.hidden_size,
                                  _weight=torch.empty(shape.vocab_size, shape.hidden_size, dtype=dtype))
        self.layers = nn.ModuleList(Block(shape, dtype) for _ in range(shape.num_layers))
        self.norm = RMSNorm(shape.hidden_size, shape.rms_eps, dtype)
        self.lm_head = nn.Linear(shape.hidden_size, shape.vocab_size, bias=False, dtype=dtype)
        # Computed on the CPU even under a meta-device context; moved with the model. [head_dim / 2]
        self.register_buffer("inv_freq", rope_inv_freq(shape), persistent=False)
        self.tie_weights()

    def tie_weights(self) -> None:
        """In place: share the LM head's weight with the embedding when the shape ties them."""
        if self.shape.tie_embeddings:
            self.lm_head.weight = self.embed.weight

    def cache_spec(self) -> tuple[int, int, int]:
        """(num_layers, num_kv_heads of this shard, head_dim): what a KVCache for this model needs."""
        return self.shape.num_layers, self.layers[0].attn.num_kv_heads, self.shape.head_dim

    @property
    def dtype(self) -> torch.dtype:
        """Weight and compute dtype."""
        return self.norm.weight.dtype

    @property
    def device(self) -> torch.device:
        """The device of the weights."""
        return self.norm.weight.device

    def forward(self, input_ids: torch.Tensor, meta: AttnMeta, cache: KVCache,
                attn: AttentionBackend, logits: bool = True) -> torch.Tensor | None:
        """input_ids [T] -> fp32 logits [T, vocab_size]; writes the T tokens' K/V at meta.write_slots.
        `logits=False` (a prefill: only the K/V matter): stop after the last layer's attention (its MLP, the final norm
        and the LM head feed only the logits); returns None."""
        x = self.embed(input_ids)  # [T, hidden]
        cos, sin = rope_cos_sin(self.inv_freq, meta.positions, x.dtype)  # [T, head_dim] each
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            k_cache, v_cache = cache.layer(i)
            if not logits and i == last:  # a prefill: the last layer's K/V, not its MLP (it feeds only the head)
                layer.attn(layer.attn_norm(x), cos, sin, meta, k_cache, v_cache, attn)
                return None
            x = layer(x, cos, sin, meta, k_cache, v_cache, attn)
        return self.lm_head(self.norm(x)).float()
