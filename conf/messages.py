"""Messages between the draft and target group leaders, and their wire format.

Both the runtime (over NCCL / gloo point-to-point) and the simulator (SimPy stores) carry exactly these.
Only token ids and tree structure cross groups, never hidden states or KV.

Wire format: a flat list of int64, `[kind, request_id, iteration, n, *payload]`, padded by the transport to
a fixed capacity so the receiver can post one fixed-size receive. `encode`/`decode` are the only
(de)serialisers; the runtime's comm module wraps the list in a tensor.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass

KIND_PROPOSAL = 1
KIND_VERIFIED = 2
KIND_STOP = 3
HEADER_LEN = 4


@dataclass(frozen=True)
class DraftProposal:
    """Draft -> target: the selected subtree to verify. Node 0 is the root (the last verified token)."""

    request_id: int
    iteration: int
    # [num_nodes] token ids, root first
    token_ids: tuple[int, ...]
    # [num_nodes] index of each node's parent in this proposal; -1 for the root; parents precede children
    parent_indices: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.parent_indices) or not self.token_ids:
            raise ValueError("DraftProposal: token_ids and parent_indices must be non-empty and equally long")
        parents = self.parent_indices
        if parents[0] != -1:
            raise ValueError("DraftProposal: node 0 must be the root (parent -1)")
        # 0 <= parents[i] < i for every i >= 1, checked at C speed (every received proposal is checked here)
        rest = parents[1:]
        if rest and not (min(rest) >= 0 and all(map(operator.lt, rest, range(1, len(parents))))):
            i, p = next((i, p) for i, p in enumerate(parents[1:], start=1) if not 0 <= p < i)
            raise ValueError(f"DraftProposal: parent_indices[{i}] = {p} must point to an earlier node")

    @property
    def num_nodes(self) -> int:
        """Nodes in the subtree, root included."""
        return len(self.token_ids)

    @staticmethod
    def make_dummy(num_nodes: int = 4) -> DraftProposal:
        """A chain of `num_nodes` tokens, for tests and warm-up."""
        return DraftProposal(0, 0, tuple(range(1, num_nodes + 1)), tuple(range(-1, num_nodes - 1)))


@dataclass(frozen=True)
class VerifiedPath:
    """Target -> draft: the verified path (root, accepted draft tokens, bonus token) and whether to stop."""

    request_id: int
    iteration: int
    # [num_accepted + 2] root token, accepted draft tokens, then the target's bonus token
    token_ids: tuple[int, ...]
    # [num_accepted + 1] proposal node index of the root and of each accepted token
    node_indices: tuple[int, ...]
    stop: bool = False

    def __post_init__(self) -> None:
        if len(self.token_ids) != len(self.node_indices) + 1 or len(self.node_indices) < 1:
            raise ValueError("VerifiedPath: token_ids must be node_indices plus the bonus token")

    @property
    def num_accepted(self) -> int:
        """Draft tokens accepted (excluding root and bonus)."""
        return len(self.node_indices) - 1

    @property
    def bonus_token(self) -> int:
        """The target's own token after the accepted path."""
        return self.token_ids[-1]

    @staticmethod
    def make_dummy(num_accepted: int = 2) -> VerifiedPath:
        """Root + `num_accepted` accepted + bonus, along a chain."""
        return VerifiedPath(0, 0, tuple(range(1, num_accepted + 3)), tuple(range(num_accepted + 1)))


@dataclass(frozen=True)
class Stop:
    """Either side -> the other: end of the request (or of the run, request_id = -1)."""

    request_id: int
    iteration: int


Message = DraftProposal | VerifiedPath | Stop


def wire_capacity(max_nodes: int) -> int:
    """Int64 slots a message of at most `max_nodes` tree nodes needs on the wire."""
    return HEADER_LEN + 2 * max_nodes + 2


def encode(msg: Message) -> list[int]:
    """Flatten a message into its wire list (unpadded)."""
    if isinstance(msg, DraftProposal):
        return [KIND_PROPOSAL, msg.request_id, msg.iteration, msg.num_nodes, *msg.token_ids, *msg.parent_indices]
    if isinstance(msg, VerifiedPath):
        n = len(msg.node_indices)
        return [KIND_VERIFIED, msg.request_id, msg.iteration, n, int(msg.stop), *msg.token_ids, *msg.node_indices]
    if isinstance(msg, Stop):
        return [KIND_STOP, msg.request_id, msg.iteration, 0]
    raise TypeError(f"cannot encode {type(msg).__name__}")


def decode(wire: Sequence[int]) -> Message:
    """Inverse of `encode` (a sequence of Python ints: a list from `tolist()`); trailing padding is ignored."""
    if len(wire) < HEADER_LEN:
        raise ValueError(f"wire message too short: {len(wire)} < {HEADER_LEN}")
    kind, rid, it, n = wire[:HEADER_LEN]
    h = HEADER_LEN
    if kind == KIND_PROPOSAL:
        return DraftProposal(rid, it, tuple(wire[h : h + n]), tuple(wire[h + n : h + 2 * n]))
    if kind == KIND_VERIFIED:
        return VerifiedPath(rid, it, tuple(wire[h + 1 : h + n + 2]), tuple(wire[h + n + 2 : h + 2 * n + 2]),
                            bool(wire[h]))
    if kind == KIND_STOP:
        return Stop(rid, it)
    raise ValueError(f"unknown message kind {kind} in wire header")
