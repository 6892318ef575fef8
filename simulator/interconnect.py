"""Links and collectives of the analytic prior: latency + bytes / bandwidth (the alpha-beta model).

Pure functions over `conf.presets.LinkSpec` (one-way latency `alpha` of a small message and sustained
bandwidth `beta` per GPU and direction):

- point-to-point message:  alpha + n / beta;
- all-reduce of n bytes over p GPUs (`interconnect.allreduce`):
    - oneshot: every rank reads the p - 1 peer buffers through its own link and reduces locally
      (custom peer-memory all-reduce, the small-message choice of SwiftSpec):  alpha + (p - 1) n / beta;
    - ring (NCCL's default for large messages): reduce-scatter + all-gather, 2 (p - 1) hops of n / p bytes:
      2 (p - 1) alpha + 2 (p - 1) / p * n / beta;
    - tree (binary reduce then broadcast, pipelined):  2 ceil(log2 p) alpha + 2 n / beta;
- leader broadcast of a received message to the rest of its group: one-shot read, alpha + n / beta;
- cross-group message (draft <-> target leaders): host overhead + link + broadcast inside the receiving group.

Contention between concurrent flows is not modelled (one message per direction is in flight at a time).
Topology rule (checks.py): a group lives inside one node; leaders on different nodes need an inter-node link.
"""

from __future__ import annotations

import math

from conf.messages import wire_capacity
from conf.presets import LINK_PRESETS, LinkSpec

ALLREDUCE_ALGORITHMS = ("oneshot", "ring", "tree")
INTER_NODE_LINKS = ("ib-ndr", "roce-200g")
"""Link presets that reach another node; every other preset is inside one node."""
WIRE_SLOT_BYTES = 8
"""Messages travel as int64 slots (conf/messages.py wire format)."""


def link_of(name: str, field: str = "interconnect") -> LinkSpec:
    """The link preset called `name`; a ValueError names `field` and the allowed presets otherwise."""
    if name not in LINK_PRESETS:
        raise ValueError(f"{field}: unknown link preset {name!r}; allowed: {sorted(LINK_PRESETS)}")
    return LINK_PRESETS[name]


def transfer_time_s(link: LinkSpec, nbytes: float) -> float:
    """One point-to-point transfer of `nbytes`."""
    return link.latency_s + nbytes / link.bytes_per_s


def allreduce_time_s(link: LinkSpec, algorithm: str, num_gpus: int, nbytes: float) -> float:
    """All-reduce of `nbytes` (the payload each rank holds) over `num_gpus` ranks; 0 for one GPU."""
    p = num_gpus
    if p <= 1:
        return 0.0
    alpha, beta = link.latency_s, link.bytes_per_s
    if algorithm == "oneshot":
        return alpha + (p - 1) * nbytes / beta
    if algorithm == "ring":
        return 2 * (p - 1) * alpha + 2 * (p - 1) / p * nbytes / beta
    if algorithm == "tree":
        return 2 * math.ceil(math.log2(p)) * alpha + 2 * nbytes / beta
    raise ValueError(f"interconnect.allreduce: {algorithm!r} is not one of {', '.join(ALLREDUCE_ALGORITHMS)}")


def broadcast_time_s(link: LinkSpec, num_gpus: int, nbytes: float) -> float:
    """Leader -> rest of its group (peers read the leader's buffer at once); 0 for one GPU."""
    return 0.0 if num_gpus <= 1 else transfer_time_s(link, nbytes)


def message_bytes(max_nodes: int) -> int:
    """Wire bytes of one draft <-> target message: fixed capacity, padded (conf/messages.py)."""
    return wire_capacity(max_nodes) * WIRE_SLOT_BYTES


def message_time_s(cross: LinkSpec, intra: LinkSpec, receiver_gpus: int, nbytes: float,
                   host_overhead_s: float) -> float:
    """Cross-group message: software overhead + leader-to-leader link + broadcast in the receiving group."""
    return host_overhead_s + transfer_time_s(cross, nbytes) + broadcast_time_s(intra, receiver_gpus, nbytes)


def node_of_rank(rank: int, gpus_per_node: int) -> int:
    """Node index of a world rank (ranks fill nodes in order)."""
    return rank // gpus_per_node


def groups_layout(target_gpus: int, draft_gpus: int, gpus_per_node: int) -> dict[str, tuple[int, int]]:
    """(first node, last node) of each group: target ranks [0, T), draft ranks [T, T + D)."""
    out = {"target": (node_of_rank(0, gpus_per_node), node_of_rank(target_gpus - 1, gpus_per_node))}
    if draft_gpus > 0:
        out["draft"] = (node_of_rank(target_gpus, gpus_per_node),
                        node_of_rank(target_gpus + draft_gpus - 1, gpus_per_node))
    return out
