"""Build one rank's model: meta-device skeleton -> TP shard -> weights from a checkpoint or a seeded hash.

`build_model(shape, dtype, device, seed, group, checkpoint)` is what the engine calls on every rank:

1. `Transformer(shape)` is built on the `meta` device (no memory);
2. `runtime.tp.shard_model` cuts it to this rank's shard of `group` (nothing for TP = 1) and returns the
   ShardSpec of every sharded parameter;
3. each parameter is materialised on `device` from exactly its slice: read from the checkpoint
   (runtime/checkpoint.py: safetensors folder or GGUF), or generated.

Random weights are a counter-based hash of (seed, parameter name, global row, global column), not a stateful
RNG stream, so any slice can be generated on its own, on its own device, and TP = k ranks together hold
bit-for-bit the TP = 1 weights without any rank materialising the full model. Values are uniform with
standard deviation 1/sqrt(fan_in) for matrices (embedding and LM head: 1/sqrt(hidden)), 0.1 for biases and
exactly 1 for norm weights: activations and logits stay O(1), so greedy argmax margins are far above fp32
rounding noise (TP-vs-TP=1 and tree-vs-chain comparisons do not flip on near-ties).
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from conf.presets import ModelShape
from runtime.checkpoint import Checkpoint, open_checkpoint
from runtime.model import Transformer
from runtime.tp import ShardSpec, shard_model

_M32 = 0xFFFFFFFF
# Rows generated per chunk are bounded so int64 temporaries stay small (~2^24 elements, 128 MiB each).
_CHUNK_ELEMS = 1 << 24
_BIAS_STD = 0.1


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """(x * c) mod 2^32 for x in [0, 2^32) without int64 overflow (split c into 16-bit halves)."""
    lo, hi = c & 0xFFFF, c >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (lowbias32, C. Wellons) on int64 tensors holding values in [0, 2^32)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def hashed_uniform(key: int, rows: torch.Tensor, cols: torch.Tensor, std: float) -> torch.Tensor:
    """fp32 [len(rows), len(cols)] uniform values of std `std`, a pure function of (key, row, col).

    Args:
        key: 32-bit key of the tensor (seed and name).
        rows: LongTensor of global row indices (>= 0), on the output device.
        cols: LongTensor of global column indices (>= 0), same device.
        std: standard deviation of the uniform distribution.
    """
    h_rows = hash32((rows + key) & _M32)  # [R]
    h = hash32((h_rows[:, None] + cols[None, :]) & _M32)  # [R, C] in [0, 2^32)
    u = (h.double() + 0.5) * 2.0**-32  # (0, 1)
    return ((2.0 * u - 1.0) * (math.sqrt(3.0) * std)).float()


def random_param(name: str, global_shape: tuple[int, ...], spec: ShardSpec | None, seed: int,
                 device: torch.device) -> torch.Tensor:
    """fp32 slice `spec` (None = all) of parameter `name` of the seeded random model, built on `device`."""
    if name.endswith("norm.weight"):
        n = global_shape[0] if spec is None else spec.index.numel()
        return torch.ones(n, device=device)
    key = zlib.crc32(f"{seed}:{name}".encode())
    shape2 = (global_shape[0], global_shape[1] if len(global_shape) == 2 else 1)
    std = _BIAS_STD if name.endswith(".bias") else 1.0 / math.sqrt(shape2[1])
    index = [torch.arange(shape2[0], device=device), torch.arange(shape2[1], device=device)]
    if spec is not None:
        index[spec.dim] = spec.index.to(device)
    rows, cols = index
    out = torch.empty(rows.numel(), cols.numel(), device=device)
    step = max(1, _CHUNK_ELEMS // max(1, cols.numel()))
    for a in range(0, rows.numel(), step):
        out[a : a + step] = hashed_uniform(key, rows[a : a + step].clamp(min=0), cols.clamp(min=0), std)
    out[rows < 0] = 0.0  # zero padding (runtime/tp.py)
    out[:, cols < 0] = 0.0
    return out if len(global_shape) == 2 else out.flatten()


def resolve_dtype(dtype: torch.dtype | str) -> torch.dtype:
    """torch dtype from a config string (float32 | bfloat16 | float16) or a dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"model.dtype: {dtype!r} is not one of float32, bfloat16, float16")
    return getattr(torch, dtype)


def _set_param(model: nn.Module, name: str, value: torch.Tensor) -> None:
    """In place: replace parameter `name` (dotted path) of `model` by `value`."""
    owner, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(owner), leaf, nn.Parameter(value, requires_grad=False))


def build_model(
    shape: ModelShape,
    dtype: torch.dtype | str = torch.float32,
    device: torch.device | str = "cpu",
    seed: int = 0,
    group: dist.ProcessGroup | None = None,
    checkpoint: str | Path | None = None,
) -> Transformer:
    """This rank's shard of the model `shape` on `device`, in eval mode, without gradients.

    Args:
        shape: the model shape preset (checked against the checkpoint's config if one is given).
        dtype: weight and compute dtype.
        device: the rank's device; random weights are generated there directly.
        seed: seed of random weights (ignored with a checkpoint).
        group: the TP process group of this model (None = TP 1); the rank and degree are read from it.
        checkpoint: Hugging Face safetensors folder or .gguf file; None = seeded random weights.
    """
    dtype, device = resolve_dtype(dtype), torch.device(device)
    tp_rank, tp_size = (0, 1) if group is None else (dist.get_rank(group), dist.get_world_size(group))
    ckpt: Checkpoint | None = None
    if checkpoint is not None:
        ckpt = open_checkpoint(checkpoint)
        ckpt.check_shape(shape)
    with torch.device("meta"):
        model = Transformer(shape, dtype)
    global_shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    plan = shard_model(model, group, tp_rank, tp_size)
    for name, _ in list(model.named_parameters()):
        spec = plan.get(name)
        if ckpt is None:
            value = random_param(name, global_shapes[name], spec, seed, device)
        else:
            dim, index = (0, torch.arange(global_shapes[name][0])) if spec is None else (spec.dim, spec.index)
            value = ckpt.read_param(name, global_shapes[name], shape, dim, index)
        _set_param(model, name, value.to(device=device, dtype=dtype))
    model.tie_weights()
    return model.to(device).eval()
