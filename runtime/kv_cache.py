"""Static, preallocated KV cache of one model shard: a prefix region followed by a tree region.

The cache is one monolithic tensor `kv` of shape [num_layers, 2, capacity, num_kv_heads, head_dim]; the keys of
layer l are `kv[l, 0]` and the values `kv[l, 1]`, each a contiguous [capacity, num_kv_heads, head_dim] block, so
an attention kernel reads one layer with plain strides and compaction moves every layer in one indexing op.

Slots are plain indices into the capacity axis. The cache does *not* track lengths or which slots hold what:
the engine owns that bookkeeping (prefix length, tree slots) and passes slots explicitly (`AttnMeta.write_slots`
for writes, `keep` for compaction). `num_kv_heads` is the *local* count of a tensor-parallel shard
(`Transformer.cache_spec()` gives it), so a TP rank only ever allocates its own heads.

Preallocated once (static shapes) so that verify and draft steps can be captured in CUDA graphs.
"""

from __future__ import annotations

import torch


class KVCache:
    """Preallocated keys and values of every layer, indexed by slot."""

    def __init__(
        self,
        num_layers: int,
        capacity: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        """Allocate a zeroed cache of `capacity` slots per layer.

        Args:
            num_layers: decoder layers of the model.
            capacity: slots (tokens) per layer: prefix capacity plus tree capacity.
            num_kv_heads: key/value heads of this shard (local count under TP).
            head_dim: width of one head.
            dtype: element type (the model's compute dtype).
            device: where the cache lives.
        """
        if min(num_layers, capacity, num_kv_heads, head_dim) < 1:
            raise ValueError(
                f"KVCache: every size must be >= 1, got num_layers={num_layers}, capacity={capacity}, "
                f"num_kv_heads={num_kv_heads}, head_dim={head_dim}"
            )
        self.num_layers = num_layers
        self.capacity = capacity
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        # [num_layers, 2 (k, v), capacity, num_kv_heads, head_dim]; allocated once (CUDA-graph friendly).
        self.kv = torch.zeros(num_layers, 2, capacity, num_kv_heads, head_dim, dtype=dtype, device=device)
        if self.kv.is_cuda:  # compile `keep`'s kernel now, outside any timed region (one kernel serves every n)
            self.keep(torch.zeros(1, dtype=torch.long), 0)

    @property
    def dtype(self) -> torch.dtype:
        """Element type of the cache."""
        return self.kv.dtype

    @property
    def device(self) -> torch.device:
        """Device of the cache."""
        return self.kv.device

    def layer(self, l: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views (k, v) of layer `l`, each [capacity, num_kv_heads, head_dim]; writes go to the cache."""
        return self.kv[l, 0], self.kv[l, 1]

    def keep(self, src_slots: torch.Tensor, dst_start: int) -> None:
        """In place: copy slots `src_slots` of every layer to [dst_start, dst_start + n).

        One gather over all layers and one copy. Off CUDA, advanced indexing materialises the gathered entries
        before they are written, so any overlap of sources and destinations is safe. On CUDA, one
        `kernels.kv_compact` launch: any overlap up to `kernels.kv_compact.ROW_BLOCK` (64) rows, beyond that only
        forward compaction (sources ascending, src_slots[i] >= dst_start + i), which is what re-rooting and a
        target's keep produce (`runtime.tree_cache.keep_slots` checks it).

        Args:
            src_slots: LongTensor [n] of slots to keep, in their new order.
            dst_start: first destination slot.
        """
        n = src_slots.numel()
        if dst_start < 0 or dst_start + n > self.capacity:
            raise ValueError(f"KVCache.keep: destination [{dst_start}, {dst_start + n}) outside capacity "
                             f"{self.capacity}")
        if n == 0:
            return
        src_slots = src_slots.to(device=self.kv.device, dtype=torch.long)
        if self.kv.is_cuda:
            # One Triton launch (gather-then-scatter per program, every layer at once). The advanced-indexing
            # path below costs ~0.2 ms of host time per call, on the draft's critical path; re-rooting's forward
            # compaction is within kv_compact's overlap contract for any n.
            from kernels import kv_compact

            kv_compact(self.kv, src_slots, dst_start)
            return
        # [num_layers, 2, n, H, D] gathered copy, then written into the destination range.
        self.kv[:, :, dst_start : dst_start + n] = self.kv[:, :, src_slots]

    def zero_(self) -> None:
        """In place: clear every slot (between requests, for tests that compare whole caches)."""
        self.kv.zero_()
