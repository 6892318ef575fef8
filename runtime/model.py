"""Llama-family decoder (Llama 2/3/3.1/3.2, Qwen2, SmolLM2) as a plain nn.Module over one request.

Architecture: token embedding, `num_layers` pre-norm blocks (RMSNorm -> GQA self-attention with RoPE ->
residual, RMSNorm -> SwiGLU MLP -> residual), final RMSNorm, LM head (tied to the embedding for SmolLM2 and
Llama 3.2). Qwen2 adds biases to the q/k/v projections. Llama 3.1+ rescales RoPE frequencies ("llama3" rope
type). Numerics follow Hugging Face `LlamaForCausalLM` / `Qwen2ForCausalLM` (RMSNorm and RoPE tables in fp32).

Weights of 8 bits (`model.<role>.weight_bits=8`, `Transformer.use_fused_kernels(weight_bits=8)`): the decode steps
(<= 64 rows, `kernels.skinny`) stream float8 e4m3 copies of the QKV (without a bias), o, gate / up and down weights,
one float32 scale per output row (`kernels.skinny_linear.quantize_rows_fp8`, weight-only: activations are not
quantized). The embedding, the LM head, prefills (cuBLAS) and a TP shard's row-parallel o / down projections keep the
`dtype` weights, which stay loaded beside the copies. In a bf16 model the norms before the QKV and SwiGLU GEMMs then
write fp16, the attention writes its output in fp16 and the SwiGLU's output is fp16 (fp16 inputs: the fp8 GEMMs' dots
run in fp16, and converting a bf16 input inside them costs more than the bytes saved); the residual stream, the QKV
output, the attention's maths and the LM head stay bf16.

`forward(input_ids [T], meta, cache, attn) -> logits [T, vocab]` processes one request without a batch
dimension: `meta` (runtime.attention.AttnMeta) gives positions, cache slots and the tree/causal mask, `cache`
(runtime.kv_cache.KVCache) receives the new keys/values at `meta.write_slots`, `attn` is the attention backend.

What it does *not* know: tensor parallelism and speculation. Projections are fused (q|k|v in `wqkv`,
gate|up in `w13`) and attention reads its head counts from `num_heads` / `num_kv_heads` attributes; the TP
transform (runtime/tp.py) shrinks those and the weights to one rank's shard, swaps the embedding and LM head
for vocab-parallel ones and adds all-reduces. Weights are filled by runtime/loader.py (built on the meta
device, materialised per shard).
"""

from __future__ import annotations

import math
from typing import NamedTuple

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


SKINNY_MAX_ROWS = 64
"""The skinny path (`kernels.skinny`) serves decode-sized steps (kernels.skinny_linear MAX_M); prefill: cuBLAS."""

WEIGHT_BITS = (16, 8)
"""`weight_bits` the runtime runs: 16 (the `dtype` weights) or 8 (fp8 copies for decode steps); 4: simulator only."""


class Fp8Weight(NamedTuple):
    """A projection's weight as float8 e4m3 `q` [N, K] with one float32 `scale` per row: weight ~ q * scale[:, None]."""

    q: torch.Tensor
    scale: torch.Tensor

    @classmethod
    def of(cls, weight: torch.Tensor) -> Fp8Weight:
        """Quantize `weight` per row (`kernels.skinny_linear.quantize_rows_fp8`)."""
        from kernels.skinny_linear import quantize_rows_fp8

        return cls(*quantize_rows_fp8(weight))

    def rows(self, part: int, parts: int) -> Fp8Weight:
        """Row block `part` of `parts` equal ones (gate / up of a fused w13)."""
        return Fp8Weight(self.q.chunk(parts, dim=0)[part], self.scale.chunk(parts)[part])


def role_kernels(shape: ModelShape, *, skinny: bool, rope_attention: bool, target_qkv_rope: bool,
                 target: bool, weight_bits: int = 16) -> dict[str, bool | int]:
    """`Transformer.use_fused_kernels` switches of a target or a draft model (runtime/engine.py, and the step
    profiler's verify and expand steps): the target's QKV GEMM does RoPE + the KV write under
    kernels.target_qkv_rope, unless its QKV has a bias (Qwen2: the fused GEMM has no bias term) or fp8 weights (that
    GEMM has no fp8 path), and then in place of the fused RoPE attention; a draft keeps `rope_attention`."""
    qkv_rope = target and target_qkv_rope and skinny and not shape.qkv_bias and weight_bits == 16
    return {"skinny": skinny, "qkv_rope": qkv_rope, "rope_attention": rope_attention and not qkv_rope,
            "weight_bits": weight_bits}


def _skinny(x: torch.Tensor, weight: torch.Tensor, *, partials: bool = False,
            out: torch.Tensor | None = None, pdl_role: str = "gemm", q8: Fp8Weight | None = None) -> torch.Tensor:
    """x @ weight.T by the Triton skinny GEMM; `partials`: float32 split-K partials [S, T, N] at the tuned split.
    `pdl_role`: the kernels.pdl role of the launch ("pre_attention" right before the fused RoPE attention).
    `q8`: stream these fp8 weights (of `weight`) instead."""
    from kernels import skinny_linear, skinny_linear_partials

    w, scale = (weight, None) if q8 is None else q8
    if partials:
        return skinny_linear_partials(x, w, w_scale=scale)
    if out is None and x.dtype != weight.dtype:  # an fp8 GEMM's fp16 input (module docstring): out in the model's dtype
        out = torch.empty(x.shape[0], w.shape[0], dtype=weight.dtype, device=x.device)
    return skinny_linear(x, w, out=out, pdl_role=pdl_role, w_scale=scale)


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
        self.skinny = False  # Transformer.use_fused_kernels: Triton skinny GEMMs for T <= SKINNY_MAX_ROWS
        self.qkv_rope = False  # ... and the QKV GEMM with RoPE + KV write in its epilogue (kernels.target_qkv_rope)
        self.rope_attention = False  # Transformer.use_fused_kernels: RoPE + KV write inside the attention launch
        self.wqkv_q8: Fp8Weight | None = None  # weight_bits=8: what the skinny QKV GEMM streams (no bias only)
        self.wo_q8: Fp8Weight | None = None  # ... and the o projection's partials

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor] | torch.Tensor,
        meta: AttnMeta,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        attn: AttentionBackend,
        partials: bool = False,
    ) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (a partial sum under TP: the all-reduce is the transform's).

        `rope`: the (cos, sin) tables [T, head_dim] (torch path), or the inv_freq vector [head_dim / 2]
        (fused path: one `kernels.rope_kv_write` launch rotates q and k and writes k/v into the cache; with
        `rope_attention` and a backend with `rope_max_tokens` >= T, the attention launch itself does it).
        `partials` (skinny path, no TP): return the o projection as float32 split-K partials [S, T, hidden]
        for `kernels.add_rmsnorm_partials` instead.
        """
        t, d = x.shape[0], self.head_dim
        skinny = self.skinny and t <= SKINNY_MAX_ROWS
        if skinny and self.qkv_rope and self.wqkv.bias is None and isinstance(rope, torch.Tensor):
            from kernels import qkv_rope_kv_write

            # it writes q and the tree slots' K/V only: the attention may load its prefix beside it (prefix_ready)
            q = qkv_rope_kv_write(x, self.wqkv.weight, meta.positions, rope, k_cache, v_cache, meta.write_slots,
                                  self.num_heads, self.num_kv_heads, pdl_role="pre_attention")
            out = attn(q, k_cache, v_cache, meta, self.scale, prefix_ready=True).reshape(t, self.num_heads * d)
            return self._project(out, partials)
        elif isinstance(rope, torch.Tensor):
            # Before the fused RoPE attention the QKV GEMM takes the "pre_attention" PDL role (kernels/pdl.py): the
            # attention prefetches its prefix K/V beside it (kernels.tree_attention `prefix_ready`).
            role = self._qkv_role(t, attn)
            fuse_rope = role == "pre_attention"
            # an fp8 o projection in a bf16 model takes its input in fp16 (module docstring)
            odt = torch.float16 if partials and self.wo_q8 is not None and self.wo.weight.dtype == torch.bfloat16 \
                else None
            qkv = (self.wqkv(x.to(self.wqkv.weight.dtype)) if not skinny or self.wqkv.bias is not None else
                   _skinny(x, self.wqkv.weight, pdl_role=role, q8=self.wqkv_q8))
            if fuse_rope:
                out = attn.rope_attend(qkv, rope, k_cache, v_cache, meta, self.scale, self.num_heads, out_dtype=odt)
                return self._project(out.reshape(t, self.num_heads * d), partials)
            from kernels import rope_kv_write

            q = rope_kv_write(qkv, meta.positions, rope, k_cache, v_cache, meta.write_slots, self.num_heads,
                              self.num_kv_heads)
            out = attn(q, k_cache, v_cache, meta, self.scale, out_dtype=odt)
            return self._project(out.reshape(t, self.num_heads * d), partials)
        else:
            qkv = self.wqkv(x)
            cos, sin = rope
            q, k, v = qkv.split([self.num_heads * d, self.num_kv_heads * d, self.num_kv_heads * d], dim=-1)
            q = apply_rope(q.view(t, self.num_heads, d), cos, sin)  # [T, Hq, D]
            k = apply_rope(k.view(t, self.num_kv_heads, d), cos, sin)  # [T, Hkv, D]
            k_cache.index_copy_(0, meta.write_slots, k.to(k_cache.dtype))
            v_cache.index_copy_(0, meta.write_slots, v.view(t, self.num_kv_heads, d).to(v_cache.dtype))
        out = attn(q, k_cache, v_cache, meta, self.scale).reshape(t, self.num_heads * d)  # [T, Hq * D]
        return self._project(out, partials)

    def _qkv_role(self, t: int, attn: AttentionBackend) -> str:
        """The kernels.pdl role of a fused-path QKV GEMM of `t` rows: "pre_attention" right before the fused RoPE
        attention, else "gemm"."""
        return "pre_attention" if self.rope_attention and t <= attn.rope_max_tokens else "gemm"

    def _project(self, out: torch.Tensor, partials: bool) -> torch.Tensor:
        """The o projection of the attention output [T, Hq * D] (split-K partials on the skinny path)."""
        if partials:
            return _skinny(out, self.wo.weight, partials=True, q8=self.wo_q8)
        return self.wo(out)


class MLP(nn.Module):
    """SwiGLU: w2(silu(gate(x)) * up(x)), gate and up fused in `w13`."""

    FUSED_MAX_ROWS = 64
    """The fused SwiGLU GEMM (a weight-streaming kernel) serves decode-sized inputs; prefill uses cuBLAS."""

    def __init__(self, shape: ModelShape, dtype: torch.dtype) -> None:
        """Full-size projections; runtime/tp.py shards the intermediate dimension."""
        super().__init__()
        # Rows [gate | up], each `intermediate` wide (local width under TP).
        self.w13 = nn.Linear(shape.hidden_size, 2 * shape.intermediate_size, bias=False, dtype=dtype)
        self.w2 = nn.Linear(shape.intermediate_size, shape.hidden_size, bias=False, dtype=dtype)
        self.fused = False  # Transformer.use_fused_kernels: one Triton GEMM + SiLU * up for small T
        self.w13_q8: Fp8Weight | None = None  # weight_bits=8: what the fused SwiGLU GEMM streams
        self.w2_q8: Fp8Weight | None = None  # ... and the down projection's partials

    def forward(self, x: torch.Tensor, partials: bool = False) -> torch.Tensor:
        """x [T, hidden] -> [T, hidden] (a partial sum under TP).

        `partials` (skinny path, no TP): the down projection as float32 split-K partials [S, T, hidden].
        """
        if self.fused and x.shape[0] <= self.FUSED_MAX_ROWS:
            from kernels import swiglu

            if self.w13_q8 is not None:
                (w_gate, s_gate), (w_up, s_up) = self.w13_q8.rows(0, 2), self.w13_q8.rows(1, 2)
                return self._down(swiglu(x, w_gate, w_up, scale_gate=s_gate, scale_up=s_up), partials)
            w_gate, w_up = self.w13.weight.chunk(2, dim=0)
            return self._down(swiglu(x, w_gate, w_up), partials)
        if partials:
            raise ValueError(f"MLP: partials need the fused path and T <= {self.FUSED_MAX_ROWS}, got T={x.shape[0]}")
        gate, up = self.w13(x).chunk(2, dim=-1)
        return self.w2(F.silu(gate) * up)

    def _down(self, mid: torch.Tensor, partials: bool) -> torch.Tensor:
        """The down projection of the SwiGLU output [T, intermediate] (split-K partials on the skinny path)."""
        return _skinny(mid, self.w2.weight, partials=True, q8=self.w2_q8) if partials else self.w2(mid)

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
        """x [T, hidden] -> [T, hidden] (the torch path; the fused path is `Transformer._forward_fused`)."""
        x = x + self.attn(self.attn_norm(x), (cos, sin), meta, k_cache, v_cache, attn)
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
        self.fused_kernels = False
        self.skinny = False
        self.weight_bits = 16  # use_fused_kernels: 8 streams fp8 copies of the layers' projections in decode steps
        self.tie_weights()

    def use_fused_kernels(self, enabled: bool = True, skinny: bool = False, qkv_rope: bool = False,
                          rope_attention: bool = False, weight_bits: int = 16) -> Transformer:
        """Run decode steps through the fused Triton kernels (GPU runtime with `kernels.backend=triton`).

        Per layer: add + RMSNorm in one kernel (twice), RoPE + K/V cache write in one kernel, the SwiGLU
        GEMM with its activation for T <= MLP.FUSED_MAX_ROWS; about 10 launches per layer instead of ~40.
        `skinny` (`kernels.skinny`, needs `enabled`): steps of T <= SKINNY_MAX_ROWS also run the QKV and LM-head
        projections through `kernels.skinny_linear` (the LM head straight into float32 logits), and, without
        TP, the o and down projections as split-K partials summed inside the next add + RMSNorm
        (`kernels.add_rmsnorm_partials`): 8 launches per layer, all Triton (so all can use `kernels.pdl`).
        Under TP the o and down projections stay cuBLAS (their outputs are all-reduced by the TP hooks).
        `qkv_rope` (needs `skinny`; the runtime's target under `kernels.target_qkv_rope`): the QKV GEMM does RoPE
        and the K/V cache write in its epilogue (`kernels.qkv_rope_kv_write`) and the attention loads its prefix
        beside it (`prefix_ready`), one launch fewer per layer; it replaces `rope_attention` (one or the other).
        `rope_attention` (`kernels.rope_attention`, needs `enabled`): steps of T <= the backend's rope_max_tokens
        (kernels.tree_attention.ROPE_FASTER_MAX_TOKENS: single-token steps, where it measured faster) rotate q and
        write the new K/V inside the attention launch (`kernels.rope_tree_attention`, the backend's `rope_attend`;
        a backend with `rope_max_tokens` 0, as the reference one, keeps the separate kernel): one launch fewer per
        layer.
        Numerics: the fused kernels compute in fp32 and round once, so bf16 logits differ slightly from
        the torch path (not bit-identical). Every decode step (<= 64 rows) of a run takes the same path; with
        `skinny` its logits are the LM head's float32 accumulators, a longer prefill's are bf16-rounded cuBLAS
        ones (the runtime's prefills only fill the cache: their logits are not read).
        `weight_bits` (16 or 8; 8 needs `skinny`): 8 quantizes this shard's layer projections to fp8 copies (one scale
        per output row) that the decode steps' skinny QKV / o / down GEMMs and fused SwiGLU stream instead (module
        docstring); 16 drops such copies.
        """
        if skinny and not enabled:
            raise ValueError("kernels.skinny: needs the fused Triton path (kernels.backend=triton)")
        if qkv_rope and not skinny:
            raise ValueError("use_fused_kernels: qkv_rope needs skinny (it replaces the skinny QKV GEMM + RoPE)")
        if rope_attention and not enabled:
            raise ValueError("kernels.rope_attention: needs the fused Triton path (kernels.backend=triton)")
        if rope_attention and qkv_rope:
            raise ValueError("use_fused_kernels: qkv_rope and rope_attention both do the RoPE + KV write; pick one")
        if weight_bits not in WEIGHT_BITS:
            raise ValueError(f"use_fused_kernels: weight_bits must be one of {WEIGHT_BITS} (4: simulator only), "
                             f"got {weight_bits!r}")
        if weight_bits == 8 and not skinny:
            raise ValueError("use_fused_kernels: weight_bits=8 needs skinny (the fp8 weights stream through the "
                             "skinny decode GEMMs and the fused SwiGLU)")
        if weight_bits == 8 and qkv_rope:
            raise ValueError("use_fused_kernels: weight_bits=8 and qkv_rope: the fused QKV + RoPE GEMM has no fp8 "
                             "path (runtime.model.role_kernels turns it off)")
        self.fused_kernels = enabled
        self.skinny = skinny
        fp8 = weight_bits == 8
        if not fp8 or any(layer.attn.wo_q8 is None for layer in self.layers):  # quantized once, dropped at 16
            for layer in self.layers:
                attn, mlp = layer.attn, layer.mlp
                attn.wqkv_q8 = Fp8Weight.of(attn.wqkv.weight) if fp8 and attn.wqkv.bias is None else None
                attn.wo_q8 = Fp8Weight.of(attn.wo.weight) if fp8 else None
                mlp.w13_q8 = Fp8Weight.of(mlp.w13.weight) if fp8 else None
                mlp.w2_q8 = Fp8Weight.of(mlp.w2.weight) if fp8 else None
        self.weight_bits = weight_bits
        for layer in self.layers:
            layer.mlp.fused = enabled
            layer.attn.skinny = skinny
            layer.attn.qkv_rope = qkv_rope
            layer.attn.rope_attention = rope_attention
        return self

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

    def forward(self, input_ids: torch.Tensor, meta: AttnMeta, cache: KVCache,
                attn: AttentionBackend, logits: bool = True) -> torch.Tensor | None:
        """input_ids [T] -> fp32 logits [T, vocab_size]; writes the T tokens' K/V at meta.write_slots.
        `logits=False` (a prefill: only the K/V matter): stop after the last layer's attention (its MLP, the final norm
        and the LM head feed only the logits); returns None."""
        x = self.embed(input_ids)  # [T, hidden]
        if self.fused_kernels:
            return self._forward_fused(x, meta, cache, attn, logits)
        cos, sin = rope_cos_sin(self.inv_freq, meta.positions, x.dtype)  # [T, head_dim] each
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            k_cache, v_cache = cache.layer(i)
            if not logits and i == last:  # a prefill: the last layer's K/V, not its MLP (it feeds only the head)
                layer.attn(layer.attn_norm(x), (cos, sin), meta, k_cache, v_cache, attn)
                return None
            x = layer(x, cos, sin, meta, k_cache, v_cache, attn)
        return self.lm_head(self.norm(x)).float()

    def _forward_fused(self, x: torch.Tensor, meta: AttnMeta, cache: KVCache, attn: AttentionBackend,
                       logits: bool = True) -> torch.Tensor | None:
        """The forward with fused kernels: the residual stream rides along `kernels.add_rmsnorm`.

        h_0, r_0 = norm(x), x;  per layer: a = attn(h); h, r = norm(r + a); m = mlp(h); h, r = norm'(r + m)
        where norm' is the next layer's attention norm (the final norm after the last layer).
        Module calls go through `__call__`, so the TP transform's all-reduce hooks still apply.
        """
        from kernels import add_rmsnorm, add_rmsnorm_partials

        eps, n = self.shape.rms_eps, len(self.layers)
        skinny = self.skinny and x.shape[0] <= SKINNY_MAX_ROWS
        # Partials skip the module outputs, so only where no TP all-reduce hook needs them.
        plains = [skinny and not (layer.attn._forward_hooks or layer.mlp._forward_hooks) for layer in self.layers]
        fp16_in = self.weight_bits == 8 and x.dtype == torch.bfloat16 and all(plains)

        def normed_out(last: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
            """fp8 weights in a bf16 model: the norms before the fp8 QKV and SwiGLU GEMMs write fp16 (the residual
            stays bf16); the final norm, before the bf16 LM head, does not."""
            if not fp16_in or last:
                return None
            return torch.empty_like(x, dtype=torch.float16), torch.empty_like(x)

        h, res = add_rmsnorm(x, None, self.layers[0].attn_norm.weight, eps, out=normed_out())
        for i, layer in enumerate(self.layers):
            k_cache, v_cache = cache.layer(i)
            nxt = self.layers[i + 1].attn_norm.weight if i + 1 < n else self.norm.weight
            if plains[i]:
                a = layer.attn(h, self.inv_freq, meta, k_cache, v_cache, attn, partials=True)
                if not logits and i == n - 1:  # a prefill: the last K/V are written, the last MLP feeds nothing
                    return None
                h, res = add_rmsnorm_partials(a, res, layer.mlp_norm.weight, eps, out=normed_out())
                h, res = add_rmsnorm_partials(layer.mlp(h, partials=True), res, nxt, eps,
                                              out=normed_out(last=i + 1 == n))
                continue
            a = layer.attn(h, self.inv_freq, meta, k_cache, v_cache, attn)
            if not logits and i == n - 1:
                return None
            h, res = add_rmsnorm(a, res, layer.mlp_norm.weight, eps)
            h, res = add_rmsnorm(layer.mlp(h), res, nxt, eps)
        if skinny and type(self.lm_head) is nn.Linear:
            return _skinny(h, self.lm_head.weight, out=torch.empty(h.shape[0], self.shape.vocab_size,
                                                                    dtype=torch.float32, device=h.device))
        return self.lm_head(h).float()
