"""Simulator-level configuration checks, on top of the conf layer's validation.

conf/schema.py already rejects: TP degrees a shape cannot
use, unknown hardware / link / model presets, acceptance rows outside [0, 1] or summing above 1. This
module adds what only the simulator's topology and cost model know, with messages that name the field:

- a TP group must sit inside one node (ranks fill nodes in order: target [0, T), draft [T, T + D));
- draft and target leaders on different nodes need an inter-node `interconnect.cross_group` link;
- a draft sharing the target's GPUs (draft_gpus = 0, chain / serial_tree) runs at the target's TP degree,
  which its shape must support;
- weights + KV cache must fit in one GPU's memory at the group's TP degree and weight precision;
- the what-ifs' runtime deltas (`sim.whatif.runtime_delta`) name runtime costs (simulator/profile.py RUNTIME_COSTS);
- a fitted profile must come from the configured GPU (simulation.build_costs).
"""

from __future__ import annotations

from conf.frozen import ConfigError
from conf.presets import GPU_PRESETS, check_tp, model_preset
from conf.schema import ExperimentConfig
from policy.predicates import draft_tp, uses_draft
from simulator.cost_model import kv_bytes_per_token_per_rank, weight_bytes_per_rank
from simulator.interconnect import INTER_NODE_LINKS, groups_layout
from simulator.profile import RUNTIME_COSTS

GIB = 1024**3


def check_topology(config: ExperimentConfig) -> None:
    """Groups inside nodes; leaders on different nodes need an inter-node link."""
    per_node = GPU_PRESETS[config.hardware.gpu].gpus_per_node
    par = config.parallel
    layout = groups_layout(par.target_gpus, par.draft_gpus if uses_draft(config) else 0, per_node)
    starts = {"target": 0, "draft": par.target_gpus}
    sizes = {"target": par.target_gpus, "draft": par.draft_gpus}
    for group, (first, last) in layout.items():
        if first != last:
            lo = starts[group]
            raise ValueError(
                f"parallel.{group}_gpus: the {group} group (ranks {lo}..{lo + sizes[group] - 1}) spans nodes "
                f"{first}..{last} ({per_node} GPUs per {config.hardware.gpu} node); the simulator keeps each TP "
                f"group inside one node"
            )
    if "draft" in layout and layout["draft"][0] != layout["target"][0]:
        link = config.interconnect.links(config.hardware.gpu)[1]
        if link not in INTER_NODE_LINKS:
            raise ValueError(
                f"interconnect.cross_group: the draft and target leaders sit on different nodes "
                f"(nodes {layout['target'][0]} and {layout['draft'][0]}), but {link!r} is an intra-node link; "
                f"use one of {list(INTER_NODE_LINKS)} (e.g. interconnect=cross_node_ib)"
            )


def check_memory(config: ExperimentConfig) -> None:
    """Weights + KV cache of each group fit in one GPU's memory."""
    gpu = GPU_PRESETS[config.hardware.gpu]
    cache_tokens = config.workload.max_seq_len_tokens + config.spec.max_tree_nodes
    target = model_preset(config.model.target.preset)
    tp = config.parallel.target_gpus
    need = {"target": weight_bytes_per_rank(target, tp, config.model.target.weight_bits)
            + cache_tokens * kv_bytes_per_token_per_rank(target, tp)}
    if uses_draft(config) and config.model.draft is not None:
        draft = model_preset(config.model.draft.preset)
        dtp = draft_tp(config)
        dneed = (weight_bytes_per_rank(draft, dtp, config.model.draft.weight_bits)
                 + cache_tokens * kv_bytes_per_token_per_rank(draft, dtp))
        if config.parallel.draft_gpus == 0:
            need["target"] += dneed
        else:
            need["draft"] = dneed
    for group, nbytes in need.items():
        if nbytes > gpu.memory_bytes:
            model = config.model.target if group == "target" else config.model.draft
            assert model is not None
            raise ValueError(
                f"parallel.{group}_gpus: {model.preset} needs {nbytes / GIB:.1f} GiB per GPU at TP "
                f"{tp if group == 'target' else draft_tp(config)} (weight_bits={model.weight_bits}, "
                f"{cache_tokens} cached tokens), more than the {config.hardware.gpu}'s "
                f"{gpu.memory_bytes / GIB:.1f} GiB; use more GPUs or model.{group}.weight_bits=4"
            )


def check_runtime_deltas(config: ExperimentConfig) -> None:
    """Every key of `sim.whatif.runtime_delta` is a runtime cost (RUNTIME_COSTS); ConfigError naming the key."""
    for key in config.sim.whatif.runtime_delta:
        if key not in RUNTIME_COSTS:
            raise ConfigError(f"sim.whatif.runtime_delta.{key}: not a runtime cost; allowed: "
                              f"{', '.join(RUNTIME_COSTS)}")


def check_config(config: ExperimentConfig) -> None:
    """All simulator-level checks; raises ValueError naming the field."""
    if uses_draft(config):
        if config.model.draft is None:
            raise ValueError(f"model.draft: spec.mode={config.spec.mode} needs a draft model")
        if config.parallel.draft_gpus == 0:
            check_tp(model_preset(config.model.draft.preset), config.parallel.target_gpus,
                     "parallel.target_gpus (the draft shares the target's GPUs at draft_gpus=0)")
    check_runtime_deltas(config)
    check_topology(config)
    check_memory(config)
