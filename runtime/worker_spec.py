"""`WorkerSpec`: what a target or draft worker is sized for, one frozen value beside the run's `KernelsConfig`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker's KV cache and steps are sized for, how it samples and what it records. The engine builds it
    from the run's config (`runtime.engine.worker_specs`); tests build it directly. Which kernels run (torch or
    Triton, CUDA graphs, the fused draft head, captured refills and prefills) is the run's `KernelsConfig`, passed
    beside it."""

    rows: int  # tokens per step: the target's verify rows (bs; gamma + 1; 1), the draft's expansion rows (w)
    max_seq_len: int  # prefix slots of the KV cache (workload.max_seq_len_tokens); the step's slots come on top
    temperature: float = 0.0  # spec.temperature: 0 greedy
    topk: int = 1  # draft: children added per expanded node (spec.topk)
    max_tree_nodes: int = 0  # draft: the cache's tree region, slots (spec.max_tree_nodes); the target has none
    oracle: bool = False  # target: verdicts drawn by the acceptance oracle (its graph computes only the argmax)
    group_gpus: int = 1  # GPUs of the worker's TP group (kernels.prefill_graph replays on one-GPU groups only)
    graph_events: bool = False  # trace.graph_events: CUDA events around every replayed step (CUDA graphs only)

    def __post_init__(self) -> None:
        if self.rows < 1 or self.max_seq_len < 1 or self.topk < 1 or self.max_tree_nodes < 0 or self.group_gpus < 1:
            raise ValueError(f"WorkerSpec: need rows, max_seq_len, topk, group_gpus >= 1 and max_tree_nodes >= 0, got "
                             f"{self}")
