"""Tensor parallelism as a transform of a `Transformer` over one given process group.

Megatron-style sharding, applied to a model that knows nothing about it (runtime/model.py):

- q/k/v (fused `wqkv`) and gate/up (fused `w13`) are column-parallel: each rank holds some heads / some
  intermediate columns; `wo` and `w2` are row-parallel: each rank produces a partial sum of the hidden state,
  and a forward hook all-reduces the attention and MLP outputs on `group` (and only on it; the fused decode path,
  runtime/fused_decode.py, is given that group and calls the same `all_reduce_partial` itself);
- the embedding is vocab-parallel (each rank looks up its vocabulary range, zeros elsewhere, all-reduce) and
  the LM head is vocab-parallel too, with an all-gather so every rank returns the full [T, vocab] logits.

Any TP degree 1..num_heads works. Sizes that do not divide are zero-padded to a uniform local size (the
paper's auto-pad), which is exact: a padded query head has zero q weights and zero `wo` columns, a padded kv
head has zero k/v weights, padded intermediate columns have zero gate/up rows and zero `w2` columns, padded
vocabulary rows are never looked up and their logits are cut off after the gather. Every local layout keeps
the standard GQA mapping (local query head h uses local kv head h // (local_q / local_kv)), so attention
kernels need no TP knowledge. Head layouts (`head_layout`), with g = num_heads / num_kv_heads:

- tp <= num_kv_heads: rank r owns a balanced share of whole kv groups, padded to ceil(num_kv_heads / tp)
  groups of g query heads. Example 8 kv heads, tp = 3: groups 3 / 3 / 2, rank 2 gets one zero group.
- tp > num_kv_heads: kv heads are replicated; each rank holds one kv head and a balanced share of that
  group's g query heads, padded to ceil(g / floor(tp / num_kv_heads)). Example tiny-llama (4 q, 2 kv heads),
  tp = 3: ranks 0, 1 share kv head 0 (q heads 0 | 1), rank 2 has kv head 1 (q heads 2, 3); local q = 2.

A `ShardSpec` says, for one parameter, which global index along which dim each local row/column holds
(-1 = zero padding). The loader (runtime/loader.py) uses the specs to read or generate exactly the shard's
slice, so a rank never materialises the full model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from conf.presets import ModelShape
from runtime.model import Transformer


@dataclass(frozen=True)
class ShardSpec:
    """The slice of one parameter that a rank holds: along `dim`, local i holds global `index[i]` (-1 = zero)."""

    dim: int
    # [local_len] global indices along `dim`; -1 marks a zero-padding row/column.
    index: torch.Tensor


def ceil_chunk(n: int, parts: int, i: int) -> list[int]:
    """Part i of [0, n) cut into `parts` contiguous chunks of ceil(n / parts), the tail padded with -1."""
    size = -(-n // parts)
    return [j if j < n else -1 for j in range(i * size, (i + 1) * size)]


def _balanced(n: int, parts: int, i: int) -> range:
    """Part i of [0, n) cut into `parts` contiguous chunks whose sizes differ by at most one."""
    return range(i * n // parts, (i + 1) * n // parts)


def head_layout(num_heads: int, num_kv_heads: int, tp_size: int, tp_rank: int) -> tuple[list[int], list[int]]:
    """(query heads, kv heads) of rank `tp_rank`: the global head of every local slot, -1 = zero padding.

    Local query slot s belongs to local kv slot s // (len(q) / len(kv)) (uniform GQA on every rank).
    """
    if not 1 <= tp_size <= num_heads or not 0 <= tp_rank < tp_size or num_heads % num_kv_heads:
        raise ValueError(f"tp: cannot shard {num_heads} query / {num_kv_heads} kv heads over tp_size={tp_size} "
                         f"(rank {tp_rank}); need 1 <= tp_size <= num_heads")
    g = num_heads // num_kv_heads
    if tp_size <= num_kv_heads:
        local_kv = -(-num_kv_heads // tp_size)
        owned = list(_balanced(num_kv_heads, tp_size, tp_rank))
        kv = owned + [-1] * (local_kv - len(owned))
        q = [k * g + j if k >= 0 else -1 for k in kv for j in range(g)]
        return q, kv
    # More ranks than kv heads: kv head k is replicated on the ranks _balanced(tp, num_kv_heads, k).
    kv_head = next(k for k in range(num_kv_heads) if tp_rank in _balanced(tp_size, num_kv_heads, k))
    ranks = _balanced(tp_size, num_kv_heads, kv_head)
    local_g = -(-g // (tp_size // num_kv_heads))
    mine = [kv_head * g + j for j in _balanced(g, len(ranks), ranks.index(tp_rank))]
    return mine + [-1] * (local_g - len(mine)), [kv_head]


def _expand(heads: list[int], head_dim: int, offset: int) -> list[int]:
    """Row indices of `heads` (each head_dim rows) in a tensor whose first head starts at `offset`."""
    return [offset + h * head_dim + j if h >= 0 else -1 for h in heads for j in range(head_dim)]


def shard_plan(shape: ModelShape, tp_rank: int, tp_size: int) -> dict[str, ShardSpec]:
    """ShardSpecs of rank `tp_rank` for every sharded parameter of `Transformer(shape)` (norms: replicated)."""
    q_heads, kv_heads = head_layout(shape.num_heads, shape.num_kv_heads, tp_size, tp_rank)
    d = shape.head_dim
    qkv_rows = (_expand(q_heads, d, 0) + _expand(kv_heads, d, shape.q_size)
                + _expand(kv_heads, d, shape.q_size + shape.kv_size))
    inter = ceil_chunk(shape.intermediate_size, tp_size, tp_rank)
    w13_rows = inter + [i + shape.intermediate_size if i >= 0 else -1 for i in inter]
    vocab = ceil_chunk(shape.vocab_size, tp_size, tp_rank)

    def spec(dim: int, index: list[int]) -> ShardSpec:
        return ShardSpec(dim, torch.tensor(index, dtype=torch.long))

    plan = {"embed.weight": spec(0, vocab)}
    if not shape.tie_embeddings:
        plan["lm_head.weight"] = spec(0, vocab)
    for i in range(shape.num_layers):
        p = f"layers.{i}."
        plan[p + "attn.wqkv.weight"] = spec(0, qkv_rows)
        if shape.qkv_bias:
            plan[p + "attn.wqkv.bias"] = spec(0, qkv_rows)
        plan[p + "attn.wo.weight"] = spec(1, _expand(q_heads, d, 0))
        plan[p + "mlp.w13.weight"] = spec(0, w13_rows)
        plan[p + "mlp.w2.weight"] = spec(1, inter)
    return plan


def take_shard(full: torch.Tensor, spec: ShardSpec) -> torch.Tensor:
    """The local slice of a full tensor: rows/columns `spec.index` along `spec.dim`, zeros where -1."""
    index = spec.index.to(full.device)
    valid = index >= 0
    shape = list(full.shape)
    shape[spec.dim] = index.numel()
    out = torch.zeros(shape, dtype=full.dtype, device=full.device)
    return out.index_copy_(spec.dim, valid.nonzero().flatten(), full.index_select(spec.dim, index[valid]))


def _reshard(param: nn.Parameter, spec: ShardSpec) -> nn.Parameter:
    """A parameter holding the shard: an empty meta tensor of the local shape if `param` is meta."""
    if param.is_meta:
        shape = list(param.shape)
        shape[spec.dim] = spec.index.numel()
        return nn.Parameter(torch.empty(shape, dtype=param.dtype, device="meta"), requires_grad=False)
    return nn.Parameter(take_shard(param.detach(), spec), requires_grad=False)


def all_reduce_partial(x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
    """In place: sum a row-parallel output's per-rank partial sums over `group` (and only it); returns `x`.

    The one all-reduce of a layer's attention and MLP outputs: the plain model's forward hooks call it, the fused
    decode path (runtime/fused_decode.py, which bypasses the modules' calls) calls it itself."""
    dist.all_reduce(x, op=dist.ReduceOp.SUM, group=group)
    return x


def _all_reduce_hook(group: dist.ProcessGroup):
    """Forward hook that sums a row-parallel module's partial output over `group`, in place."""

    def hook(_module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        return all_reduce_partial(output, group)

    return hook


class VocabParallelEmbedding(nn.Module):
    """Embedding rows [start, start + local) of the vocabulary; other ids give zeros, summed over the group."""

    def __init__(self, weight: nn.Parameter, start: int, group: dist.ProcessGroup) -> None:
        """Wrap the local rows `weight` [local_vocab, hidden] starting at global id `start`."""
        super().__init__()
        self.weight = weight
        self.start = start
        self.group = group

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [T] -> [T, hidden], the full embedding on every rank."""
        local = input_ids - self.start
        inside = (local >= 0) & (local < self.weight.shape[0])
        out = F.embedding(local.clamp(0, self.weight.shape[0] - 1), self.weight)
        out = out.masked_fill(~inside[:, None], 0.0)
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=self.group)
        return out


class ParallelLMHead(nn.Module):
    """LM head over this rank's vocabulary chunk; all-gathers so every rank returns the full logits."""

    def __init__(self, weight: nn.Parameter, vocab_size: int, group: dist.ProcessGroup) -> None:
        """Wrap the local rows `weight` [local_vocab, hidden] of a `vocab_size` head cut in ceil-chunks."""
        super().__init__()
        self.weight = weight
        self.vocab_size = vocab_size
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] -> logits [T, vocab_size] (padding columns of the last chunk cut off)."""
        local = F.linear(x, self.weight).contiguous()  # [T, local_vocab]
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat(parts, dim=-1)[:, : self.vocab_size]


def shard_model(model: Transformer, group: dist.ProcessGroup | None, tp_rank: int,
                tp_size: int) -> dict[str, ShardSpec]:
    """In place: cut `model` down to rank `tp_rank`'s shard and add the collectives on `group`.

    Works on a meta-device model (the loader then fills each parameter's slice; nothing full-size is ever
    allocated) or on a materialised full model (its tensors are sliced). Returns the ShardSpecs by parameter
    name (empty for tp_size 1, where the model is left untouched).
    """
    if tp_size == 1:
        return {}
    if group is None or dist.get_world_size(group) != tp_size or dist.get_rank(group) != tp_rank:
        raise ValueError(f"tp: shard_model needs the process group of the {tp_size} TP ranks with this "
                         f"process at rank {tp_rank}")
    shape = model.shape
    plan = shard_plan(shape, tp_rank, tp_size)
    q_heads, kv_heads = head_layout(shape.num_heads, shape.num_kv_heads, tp_size, tp_rank)
    hook = _all_reduce_hook(group)
    for i, layer in enumerate(model.layers):
        for mod_name, module in (("attn.wqkv", layer.attn.wqkv), ("attn.wo", layer.attn.wo),
                                 ("mlp.w13", layer.mlp.w13), ("mlp.w2", layer.mlp.w2)):
            for pname, param in list(module.named_parameters(recurse=False)):
                setattr(module, pname, _reshard(param, plan[f"layers.{i}.{mod_name}.{pname}"]))
        layer.attn.num_heads, layer.attn.num_kv_heads = len(q_heads), len(kv_heads)
        layer.attn.register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)
    vocab_start = tp_rank * plan["embed.weight"].index.numel()
    model.embed = VocabParallelEmbedding(_reshard(model.embed.weight, plan["embed.weight"]), vocab_start, group)
    head = model.embed.weight if shape.tie_embeddings else _reshard(model.lm_head.weight, plan["lm_head.weight"])
    model.lm_head = ParallelLMHead(head, shape.vocab_size, group)
    return plan
