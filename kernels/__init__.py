"""Triton kernels for tree speculative decoding. Tensors and plain scalars in, tensors out.

This package imports nothing from the project. Every kernel has a slow PyTorch twin with the same
signature in ``kernels.reference`` (the test oracle, selectable with ``kernels=reference``).
On CPU the kernels run under ``TRITON_INTERPRET=1`` (fp32/fp16; bf16 is upcast right after loads).
All are capturable in CUDA graphs (static shapes, no host syncs); see each module for its contract.
"""

from kernels.fused_mlp import swiglu
from kernels.gemm_allreduce import gemm_allreduce, prepare_gemm_allreduce
from kernels.kv_compact import kv_compact
from kernels.norm import add_rmsnorm, add_rmsnorm_partials
from kernels.qkv_rope import qkv_rope_kv_write
from kernels.rope import rope_kv_write
from kernels.skinny_linear import skinny_linear, skinny_linear_partials
from kernels.topk_logprobs import topk_logprobs
from kernels.tree_attention import rope_tree_attention, tree_attention
from kernels.verify import greedy_verify

__all__ = [
    "add_rmsnorm",
    "add_rmsnorm_partials",
    "gemm_allreduce",
    "greedy_verify",
    "kv_compact",
    "prepare_gemm_allreduce",
    "qkv_rope_kv_write",
    "rope_kv_write",
    "rope_tree_attention",
    "skinny_linear",
    "skinny_linear_partials",
    "swiglu",
    "topk_logprobs",
    "tree_attention",
]
