"""The fused Triton decode path: a forward over a plain `runtime.model.Transformer` through the `kernels` package.

The plain model (runtime/model.py) is the reference decoder and sees no kernel variant. A `FusedDecoder` wraps one
model, is built once from a `KernelPlan` (one role's share of the kernels config: `KernelPlan.for_role`) and is told
explicitly whether the model is a TP shard (`tp_group`: the group runtime.tp.shard_model sharded it over, None for a
whole model). It keeps the model's call contract, `decoder(input_ids [T], meta, cache, attn, logits=True) -> fp32
logits [T, vocab]` (None with `logits=False`), and its `shape`, `dtype`, `device` and `cache_spec()`, so workers and
CUDA graphs run either one (`Decoder`; `decode_model` picks it from the kernels config).

Per layer: add + RMSNorm in one kernel (twice: the residual stream rides along `kernels.add_rmsnorm`), RoPE + K/V
cache write in one kernel, the SwiGLU GEMM with its activation for T <= SWIGLU_MAX_ROWS; about 10 launches per layer
instead of the plain forward's ~40. With `KernelPlan.skinny`, steps of T <= SKINNY_MAX_ROWS also run the QKV and
LM-head projections through `kernels.skinny_linear` (the LM head straight into float32 logits), and, on a whole model,
the o and down projections as split-K partials summed inside the next add + RMSNorm (`kernels.add_rmsnorm_partials`):
8 launches per layer, all Triton (so all can use `kernels.pdl`). On a TP shard the o and down projections stay cuBLAS
and their outputs are all-reduced (`runtime.tp.all_reduce_partial`). Numerics: the fused kernels compute in fp32 and
round once, so bf16 logits differ slightly from the plain forward's (not bit-identical). Every decode step (<= 64 rows)
of a run takes the same path; with `skinny` its logits are the LM head's float32 accumulators, a longer prefill's are
bf16-rounded cuBLAS ones (the runtime's prefills only fill the cache: their logits are not read).

Weights of 8 bits (`model.<role>.weight_bits=8`, `KernelPlan.weight_bits`): the decode steps (<= 64 rows, skinny)
stream float8 e4m3 copies of the QKV (without a bias), o, gate / up and down weights, one float32 scale per output
row (`kernels.skinny_linear.quantize_rows_fp8`, weight-only: activations are not quantized). The embedding, the LM
head, prefills (cuBLAS) and a TP shard's row-parallel o / down projections use the `dtype` weights, which stay loaded
beside the copies. In a bf16 model the norms before the fp8 QKV and SwiGLU GEMMs then write fp16, the attention writes
its output in fp16 and the SwiGLU's output is fp16 (fp16 inputs: the fp8 GEMMs' dots run in fp16, and converting a
bf16 input inside them costs more than the bytes saved); the residual stream, the QKV output, the attention's maths
and the LM head stay bf16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import torch

from runtime.attention import AttentionBackend, AttnMeta
from runtime.kv_cache import KVCache
from runtime.model import Block, Transformer
from runtime.tp import VocabParallelEmbedding, all_reduce_partial

if TYPE_CHECKING:
    import torch.distributed as dist

    from conf.kernels_config import KernelFeatures
    from conf.presets import ModelShape

SKINNY_MAX_ROWS = 64
"""The skinny GEMMs (`kernels.skinny`) serve decode-sized steps (kernels.skinny_linear MAX_M); prefill: cuBLAS."""

SWIGLU_MAX_ROWS = 64
"""The fused SwiGLU GEMM (a weight-streaming kernel) serves decode-sized inputs; prefill uses cuBLAS."""

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


class LayerFp8(NamedTuple):
    """One layer's fp8 copies (weight_bits 8): what its skinny QKV / o / down GEMMs and fused SwiGLU stream."""

    wqkv: Fp8Weight | None  # None with a QKV bias: that projection stays on torch at 16 bits
    wo: Fp8Weight
    w13: Fp8Weight
    w2: Fp8Weight

    @classmethod
    def of(cls, block: Block) -> LayerFp8:
        """Quantize the projections of `block` (its 16-bit weights stay)."""
        attn, mlp = block.attn, block.mlp
        return cls(Fp8Weight.of(attn.wqkv.weight) if attn.wqkv.bias is None else None, Fp8Weight.of(attn.wo.weight),
                   Fp8Weight.of(mlp.w13.weight), Fp8Weight.of(mlp.w2.weight))


@dataclass(frozen=True)
class KernelPlan:
    """Which fused kernels one model's decode steps run (its role's share of the kernels config)."""

    skinny: bool = False
    """`kernels.skinny`: steps of T <= SKINNY_MAX_ROWS project through the skinny GEMMs (module docstring)."""
    qkv_rope: bool = False
    """(needs `skinny`; the target under `kernels.target_qkv_rope`): the QKV GEMM does RoPE and the K/V cache write
    in its epilogue (`kernels.qkv_rope_kv_write`) and the attention loads its prefix beside it (`prefix_ready`), one
    launch fewer per layer; it replaces `rope_attention` (one or the other)."""
    rope_attention: bool = False
    """`kernels.rope_attention`: steps of T <= the backend's rope_max_tokens (kernels.tree_attention
    ROPE_FASTER_MAX_TOKENS: single-token steps, where it measured faster) rotate q and write the new K/V inside the
    attention launch (`kernels.rope_tree_attention`, the backend's `rope_attend`; a backend with `rope_max_tokens` 0,
    as the reference one, keeps the separate kernel): one launch fewer per layer."""
    weight_bits: int = 16
    """16 or 8 (needs `skinny`): 8 streams fp8 copies of the layer projections in decode steps (module docstring)."""
    early_norm_rows: tuple[int, int, int, int, int] | None = None
    """The norms' row limits for an early PDL release (`kernels.norm.EarlyRows`); None: the tuned
    `kernels.norm.EARLY_ROWS` (the runtime's). A benchmark or test of another limit passes it here."""

    def __post_init__(self) -> None:
        """Refuse combinations the fused path does not implement, naming them."""
        if self.qkv_rope and not self.skinny:
            raise ValueError("KernelPlan: qkv_rope needs skinny (it replaces the skinny QKV GEMM + RoPE)")
        if self.rope_attention and self.qkv_rope:
            raise ValueError("KernelPlan: qkv_rope and rope_attention both do the RoPE + KV write; pick one")
        if self.weight_bits not in WEIGHT_BITS:
            raise ValueError(f"KernelPlan: weight_bits must be one of {WEIGHT_BITS} (4: simulator only), "
                             f"got {self.weight_bits!r}")
        if self.weight_bits == 8 and not self.skinny:
            raise ValueError("KernelPlan: weight_bits=8 needs skinny (the fp8 weights stream through the skinny "
                             "decode GEMMs and the fused SwiGLU)")
        if self.weight_bits == 8 and self.qkv_rope:
            raise ValueError("KernelPlan: weight_bits=8 and qkv_rope: the fused QKV + RoPE GEMM has no fp8 path "
                             "(KernelPlan.for_role turns it off)")

    @classmethod
    def for_role(cls, shape: ModelShape, *, skinny: bool, rope_attention: bool, target_qkv_rope: bool, target: bool,
                 weight_bits: int = 16) -> KernelPlan:
        """The plan of a target or a draft model (runtime/engine.py, and the step profilers' verify and expand
        steps): the target's QKV GEMM does RoPE + the KV write under kernels.target_qkv_rope, unless its QKV has a
        bias (Qwen2: the fused GEMM has no bias term) or fp8 weights (that GEMM has no fp8 path), and then in place of
        the fused RoPE attention; a draft keeps `rope_attention`."""
        qkv_rope = target and target_qkv_rope and skinny and not shape.qkv_bias and weight_bits == 16
        return cls(skinny=skinny, qkv_rope=qkv_rope, rope_attention=rope_attention and not qkv_rope,
                   weight_bits=weight_bits)


class FusedDecoder:
    """The decode forward of one model (or TP shard) through the fused Triton kernels of a `KernelPlan`."""

    def __init__(self, model: Transformer, plan: KernelPlan = KernelPlan(), *,
                 tp_group: dist.ProcessGroup | None = None) -> None:
        """Wrap `model` (its weights are shared, not copied; fp8 copies are made once here at weight_bits 8).

        `tp_group`: the process group runtime.tp.shard_model sharded `model` over (then the o and down projections
        stay cuBLAS and their outputs are all-reduced on it), None for a whole model (a one-rank group runs the
        sharded path's kernels on a whole model: the tests' way to check it in one process).
        """
        import kernels  # here, not at import: a reference run never imports Triton

        if isinstance(model.embed, VocabParallelEmbedding) and tp_group is None:
            raise ValueError("FusedDecoder: the model is a TP shard (runtime.tp.shard_model); pass the group it was "
                             "sharded over as tp_group")
        self.model, self.plan, self.tp_group = model, plan, tp_group
        self.sharded = tp_group is not None
        self._kernels = kernels  # entry points looked up per call (tests wrap them)
        rows = plan.early_norm_rows
        self._norm_kw = {} if rows is None else {"early_rows": kernels.norm.EarlyRows(*rows)}
        self.fp8 = [LayerFp8.of(layer) for layer in model.layers] if plan.weight_bits == 8 else None

    @property
    def shape(self) -> ModelShape:
        """The model's shape preset."""
        return self.model.shape

    @property
    def dtype(self) -> torch.dtype:
        """Weight and compute dtype."""
        return self.model.dtype

    @property
    def device(self) -> torch.device:
        """The device of the weights."""
        return self.model.device

    def cache_spec(self) -> tuple[int, int, int]:
        """(num_layers, num_kv_heads of this shard, head_dim): what a KVCache for this model needs."""
        return self.model.cache_spec()

    def __call__(self, input_ids: torch.Tensor, meta: AttnMeta, cache: KVCache, attn: AttentionBackend,
                 logits: bool = True) -> torch.Tensor | None:
        """input_ids [T] -> fp32 logits [T, vocab_size]; writes the T tokens' K/V at meta.write_slots (the plain
        forward's contract; `logits=False`: a prefill, stop after the last layer's attention, return None).

        h_0, r_0 = norm(x), x;  per layer: a = attn(h); h, r = norm(r + a); m = mlp(h); h, r = norm'(r + m)
        where norm' is the next layer's attention norm (the final norm after the last layer).
        """
        model, k = self.model, self._kernels
        eps, n = model.shape.rms_eps, len(model.layers)
        x = model.embed(input_ids)  # [T, hidden]
        skinny = self.plan.skinny and x.shape[0] <= SKINNY_MAX_ROWS
        # o / down as split-K partials summed inside the next norm: only with no all-reduce between them
        partials = skinny and not self.sharded
        # fp8 weights in a bf16 model: the norms before the fp8 QKV and SwiGLU GEMMs write fp16 (module docstring)
        fp16_in = partials and self.fp8 is not None and x.dtype == torch.bfloat16

        def normed_out(last: bool = False) -> tuple[torch.Tensor, torch.Tensor] | None:
            """(fp16 normed, residual) outputs where fp16_in; the final norm, before the bf16 LM head, writes none."""
            if not fp16_in or last:
                return None
            return torch.empty_like(x, dtype=torch.float16), torch.empty_like(x)

        kw = self._norm_kw
        h, res = k.add_rmsnorm(x, None, model.layers[0].attn_norm.weight, eps, out=normed_out(), **kw)
        for i, layer in enumerate(model.layers):
            k_cache, v_cache = cache.layer(i)
            nxt = model.layers[i + 1].attn_norm.weight if i + 1 < n else model.norm.weight
            a = self._attention(i, h, meta, k_cache, v_cache, attn, skinny, partials)
            if not logits and i == n - 1:  # a prefill: the last K/V are written, the last MLP feeds nothing
                return None
            if partials:
                h, res = k.add_rmsnorm_partials(a, res, layer.mlp_norm.weight, eps, out=normed_out(), **kw)
                h, res = k.add_rmsnorm_partials(self._mlp(i, h, partials), res, nxt, eps,
                                                out=normed_out(last=i + 1 == n), **kw)
            else:
                h, res = k.add_rmsnorm(a, res, layer.mlp_norm.weight, eps, **kw)
                h, res = k.add_rmsnorm(self._mlp(i, h, partials), res, nxt, eps, **kw)
        if skinny and not self.sharded:  # a shard's LM head is vocab-parallel (runtime.tp.ParallelLMHead)
            return self._skinny(h, model.lm_head.weight, None, out=torch.empty(
                h.shape[0], model.shape.vocab_size, dtype=torch.float32, device=h.device))
        return model.lm_head(h).float()

    def _attention(self, i: int, x: torch.Tensor, meta: AttnMeta, k_cache: torch.Tensor, v_cache: torch.Tensor,
                   attn: AttentionBackend, skinny: bool, partials: bool) -> torch.Tensor:
        """Layer `i`'s attention of the normed x [T, hidden] -> [T, hidden] (all-reduced on a shard), or its o
        projection as float32 split-K partials [S, T, hidden] with `partials`.

        QKV + RoPE + K/V write: the QKV GEMM's epilogue (`qkv_rope`), else the QKV GEMM then, for steps of T <= the
        backend's rope_max_tokens under `rope_attention`, the attention launch (the GEMM takes the "pre_attention"
        PDL role, kernels/pdl.py: the attention prefetches its prefix K/V beside it, kernels.tree_attention
        `prefix_ready`), else `kernels.rope_kv_write`.
        """
        mod, q8 = self.model.layers[i].attn, None if self.fp8 is None else self.fp8[i]
        t, wqkv, inv_freq = x.shape[0], mod.wqkv, self.model.inv_freq
        if skinny and self.plan.qkv_rope and wqkv.bias is None:
            # it writes q and the tree slots' K/V only: the attention may load its prefix beside it (prefix_ready)
            q = self._kernels.qkv_rope_kv_write(x, wqkv.weight, meta.positions, inv_freq, k_cache, v_cache,
                                                meta.write_slots, mod.num_heads, mod.num_kv_heads,
                                                pdl_role="pre_attention")
            out = attn(q, k_cache, v_cache, meta, mod.scale, prefix_ready=True)
        else:
            role = "pre_attention" if self.plan.rope_attention and t <= attn.rope_max_tokens else "gemm"
            # an fp8 o projection in a bf16 model takes its input in fp16 (module docstring)
            odt = torch.float16 if partials and q8 is not None and mod.wo.weight.dtype == torch.bfloat16 else None
            qkv = (wqkv(x.to(wqkv.weight.dtype)) if not skinny or wqkv.bias is not None else
                   self._skinny(x, wqkv.weight, None if q8 is None else q8.wqkv, pdl_role=role))
            if role == "pre_attention":
                out = attn.rope_attend(qkv, inv_freq, k_cache, v_cache, meta, mod.scale, mod.num_heads, out_dtype=odt)
            else:
                q = self._kernels.rope_kv_write(qkv, meta.positions, inv_freq, k_cache, v_cache, meta.write_slots,
                                                mod.num_heads, mod.num_kv_heads)
                out = attn(q, k_cache, v_cache, meta, mod.scale, out_dtype=odt)
        out = out.reshape(t, mod.num_heads * mod.head_dim)  # [T, Hq * D]
        if partials:
            return self._partials(out, mod.wo.weight, None if q8 is None else q8.wo)
        return self._reduced(mod.wo(out))

    def _mlp(self, i: int, x: torch.Tensor, partials: bool) -> torch.Tensor:
        """Layer `i`'s SwiGLU of the normed x [T, hidden] -> [T, hidden] (all-reduced on a shard), or its down
        projection as float32 split-K partials [S, T, hidden] with `partials`."""
        mod, q8 = self.model.layers[i].mlp, None if self.fp8 is None else self.fp8[i]
        if x.shape[0] > SWIGLU_MAX_ROWS:
            if partials:
                raise ValueError(f"FusedDecoder: partials need T <= SWIGLU_MAX_ROWS={SWIGLU_MAX_ROWS}, "
                                 f"got T={x.shape[0]}")
            return self._reduced(mod.forward(x))  # the plain SwiGLU, without the module's TP hook: reduced here
        if q8 is not None:
            (w_gate, s_gate), (w_up, s_up) = q8.w13.rows(0, 2), q8.w13.rows(1, 2)
            mid = self._kernels.swiglu(x, w_gate, w_up, scale_gate=s_gate, scale_up=s_up)
        else:
            w_gate, w_up = mod.w13.weight.chunk(2, dim=0)
            mid = self._kernels.swiglu(x, w_gate, w_up)
        if partials:
            return self._partials(mid, mod.w2.weight, None if q8 is None else q8.w2)
        return self._reduced(mod.w2(mid))

    def _reduced(self, out: torch.Tensor) -> torch.Tensor:
        """A row-parallel projection's output, summed over the TP group on a shard (as the plain model's hooks)."""
        return all_reduce_partial(out, self.tp_group) if self.sharded else out

    def _skinny(self, x: torch.Tensor, weight: torch.Tensor, q8: Fp8Weight | None, *, pdl_role: str = "gemm",
                out: torch.Tensor | None = None) -> torch.Tensor:
        """x @ weight.T by the Triton skinny GEMM (streaming the fp8 copy `q8` of `weight` if given); `pdl_role`: the
        kernels.pdl role of the launch ("pre_attention" right before the fused RoPE attention)."""
        w, scale = (weight, None) if q8 is None else q8
        if out is None and x.dtype != weight.dtype:  # an fp8 GEMM's fp16 input (module docstring): out in the dtype
            out = torch.empty(x.shape[0], w.shape[0], dtype=weight.dtype, device=x.device)
        return self._kernels.skinny_linear(x, w, out=out, pdl_role=pdl_role, w_scale=scale)

    def _partials(self, x: torch.Tensor, weight: torch.Tensor, q8: Fp8Weight | None) -> torch.Tensor:
        """x @ weight.T as float32 split-K partials [S, T, N] at the tuned split (for kernels.add_rmsnorm_partials)."""
        w, scale = (weight, None) if q8 is None else q8
        return self._kernels.skinny_linear_partials(x, w, w_scale=scale)


Decoder = Transformer | FusedDecoder
"""What a worker runs: `decoder(input_ids, meta, cache, attn, logits=True)`, `shape`, `dtype`, `device`,
`cache_spec()`."""


def decode_model(model: Transformer, kernels: KernelFeatures, *, target: bool, weight_bits: int = 16,
                 tp_group: dist.ProcessGroup | None = None) -> Decoder:
    """The decoder a worker runs for `model` (a target's when `target`): the plain model under backend reference
    (kernels=reference), else a FusedDecoder with the role's `KernelPlan.for_role` of `kernels`. `tp_group`: the group
    the model was sharded over (None for a whole model)."""
    if kernels.backend != "triton":
        if weight_bits != 16:
            raise ValueError(f"weight_bits={weight_bits}: the fp8 weights stream through the fused Triton decode "
                             f"path; needs kernels=graphs, got backend {kernels.backend!r}")
        return model
    plan = KernelPlan.for_role(model.shape, skinny=kernels.skinny, rope_attention=kernels.rope_attention,
                               target_qkv_rope=kernels.target_qkv_rope, target=target, weight_bits=weight_bits)
    return FusedDecoder(model, plan, tp_group=tp_group)
