"""Cross-group messages: the one channel between the target leader and the draft leader.

Only the two group leaders talk across groups (docs/DESIGN.md "Processes and groups"), with the small
messages of `conf/messages.py` (token ids and tree structure, never hidden states or KV). A message travels
as a fixed-capacity int64 tensor (`conf.messages.wire_capacity(max_nodes)` slots, zero padded), so the
receiver always posts one receive of a known size. Inside a group the leader broadcasts what it received
(or decided) on the group's TP group, so every rank of the group sees the same message.

    leader A --isend--> leader B --broadcast(tp_group)--> ranks of B's group

Contract:
- `send(msg)` (leaders only) posts a non-blocking send and returns. The sender's buffer stays alive until
  the peer has received it: up to `max_in_flight` messages may be outstanding; a further send first waits
  (bounded) for the oldest. Gloo completes a send only once the receiver has posted the matching receive.
- `recv()` (every rank of the group): the leader receives from the peer leader, then broadcasts in its
  group; non-leaders take part in the broadcast. Every wait is bounded: the leader's by `timeout_s`, the
  non-leaders' by `2 * timeout_s` (their leader may itself wait `timeout_s` for the peer) and by their
  group's own timeout (`parallel.timeout_s`, set when the groups are made). A missed deadline raises
  TimeoutError naming this rank, the rank it waited for, what it waited for and how long it waited.
- `broadcast_in_group(msg)`: the leader shares its own decision (e.g. the target leader's verified path)
  with its group; non-leaders pass None.
- Timing hooks: with a `Timeline`, every send / recv / broadcast is recorded as a span `comm.send`,
  `comm.recv`, `comm.broadcast` with the wire and payload bytes in `extra`; `ping_pong()` measures the
  leader-to-leader round trip (span `comm.rtt`), the simulator's transfer-cost term.

On GPU the wire tensors live on the device (NCCL) with a pinned host copy for encode/decode; on CPU they
are plain tensors (gloo). Not thread-safe: one channel per rank, used from one thread.

Protocol rule: the two leaders must not both wait for their own sends with no receive posted. On NCCL the
leader group's sends and receives run in order on one stream, and a send can wait for its matching receive;
the decoding loops alternate (one side sends while the other receives), which never deadlocks. Measured on
two H200s (NCCL, polling): leader round trip about 250 us for a 16-node message; gloo on CPU about 110 us.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from conf.messages import Message, Stop, decode, encode, wire_capacity
from runtime.metrics import Timeline
from runtime.parallel import ParallelContext, wait_bounded

log = logging.getLogger(__name__)

WIRE_DTYPE = torch.int64
_BYTES_PER_SLOT = 8  # int64
# Messages a leader may have in flight before `send` waits for the oldest to be received. The async loop
# alternates send and recv, so more than two outstanding means the peer stopped receiving.
DEFAULT_MAX_IN_FLIGHT = 4
# Sends of channels dropped without close(): kept alive so that gloo completes them instead of aborting.
_IN_FLIGHT_OF_DROPPED_CHANNELS: list[tuple[Any, Any]] = []
# request_id of the probe messages exchanged by `ping_pong`.
_PING_REQUEST = -2


class LeaderChannel:
    """Fixed-capacity message channel between the two group leaders, with in-group broadcast."""

    kind = "dist"
    """`parallel.leader_channel` value this class implements (recorded in metrics when `auto` picked it)."""

    def __init__(self, ctx: ParallelContext, max_nodes: int, timeout_s: float | None = None, *,
                 timeline: Timeline | None = None, max_in_flight: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        """Allocate the wire buffers.

        Args:
            ctx: this rank's parallel context.
            max_nodes: largest tree (proposal nodes, or verified path length) any message carries.
            timeout_s: bound on every wait; defaults to `ctx.timeout_s` (parallel.timeout_s).
            timeline: where send/recv/broadcast spans are recorded (optional).
            max_in_flight: sends that may be outstanding before `send` waits for the oldest.
        """
        if max_nodes < 1:
            raise ValueError(f"LeaderChannel: max_nodes must be >= 1, got {max_nodes}")
        if max_in_flight < 1:
            raise ValueError(f"LeaderChannel: max_in_flight must be >= 1, got {max_in_flight}")
        self.ctx = ctx
        self.max_nodes = max_nodes
        self.capacity = wire_capacity(max_nodes)
        self.timeout_s = ctx.timeout_s if timeout_s is None else float(timeout_s)
        self.timeline = timeline
        self._on_device = ctx.device.type == "cuda"
        self._ring = [self._alloc() for _ in range(max_in_flight)]
        self._ring_works: list[Any] = [None] * max_in_flight
        self._next_slot = 0
        self._pending: deque[int] = deque()  # ring slots with an outstanding send, oldest first
        self._recv_host, self._recv_dev = self._alloc()

    # -- public API ---------------------------------------------------------------------------------------

    @property
    def wire_bytes(self) -> int:
        """Bytes one message occupies on the wire (fixed)."""
        return self.capacity * _BYTES_PER_SLOT

    def send(self, msg: Message) -> None:
        """Leader only: post `msg` to the peer leader without waiting for it to arrive."""
        peer = self._require_peer("send")
        wire = self._wire(msg)
        start = self._now()
        slot = self._next_slot
        self._next_slot = (slot + 1) % len(self._ring)
        if self._ring_works[slot] is not None:
            # Reusing this buffer: the peer must have received the message it held.
            while self._pending:
                oldest = self._pending.popleft()
                self._wait_send(oldest, peer)
                if oldest == slot:
                    break
        host, dev = self._ring[slot]
        host.zero_()
        host[: len(wire)] = torch.tensor(wire, dtype=WIRE_DTYPE)
        if self._on_device:
            dev.copy_(host, non_blocking=True)
        self._ring_works[slot] = dist.isend(dev, dst=peer, group=self.ctx.leader_group)
        self._pending.append(slot)
        self._record("comm.send", start, msg, len(wire), peer)

    def recv(self) -> Message:
        """Every rank of the group: the next message from the peer group (leader receives, then broadcasts)."""
        start = self._now()
        if self.ctx.is_leader:
            peer = self._require_peer("recv")
            work = dist.irecv(self._recv_dev, src=peer, group=self.ctx.leader_group)
            wait_bounded(work, self.timeout_s,
                         f"{self.ctx.label}: waiting for a message from rank {peer} ({self._peer_role()} leader)",
                         poll=self._on_device)
            msg = self._decode(self._recv_dev, self._recv_host)
            self._record("comm.recv", start, msg, None, peer)
        if self.ctx.group_size > 1:
            msg = self._broadcast(self._recv_dev, self._recv_host, "a received message")
        return msg

    def broadcast_in_group(self, msg: Message | None) -> Message:
        """Every rank of the group: the leader's `msg` (non-leaders pass None and get the leader's)."""
        if self.ctx.is_leader:
            if msg is None:
                raise ValueError(f"{self.ctx.label}: the leader must pass the message to broadcast")
            if self.ctx.group_size == 1:
                return msg
            wire = self._wire(msg)
            self._recv_host.zero_()
            self._recv_host[: len(wire)] = torch.tensor(wire, dtype=WIRE_DTYPE)
            if self._on_device:
                self._recv_dev.copy_(self._recv_host)
        elif msg is not None:
            raise ValueError(f"{self.ctx.label}: only the group leader passes a message to broadcast_in_group")
        return self._broadcast(self._recv_dev, self._recv_host, "the leader's message")

    def flush(self) -> None:
        """Leader: wait (bounded) until the peer has received every message sent so far."""
        if self._pending:
            peer = self._require_peer("flush")
            while self._pending:
                self._wait_send(self._pending.popleft(), peer)

    def close(self) -> None:
        """Flush outstanding sends; call at the end of a run on the leaders (no-op elsewhere).

        Required: gloo aborts a send whose work object is destroyed, so a channel dropped with messages in
        flight would lose them (`__del__` warns and keeps them alive instead).
        """
        self.flush()

    def __del__(self) -> None:
        pending = [(self._ring_works[s], self._ring[s]) for s in getattr(self, "_pending", ())]
        if pending:
            log.warning("%s: LeaderChannel dropped with %d message(s) in flight; call close() first",
                        self.ctx.label, len(pending))
            _IN_FLIGHT_OF_DROPPED_CHANNELS.extend(pending)

    def ping_pong(self, num_rounds: int = 16) -> list[float]:
        """Both leaders, at the same point: round-trip times (seconds) of `num_rounds` small messages.

        The target leader sends, the draft leader echoes. Non-leaders return [] without communicating.
        Each round trip is recorded as a `comm.rtt` span on the target leader.
        """
        if not self.ctx.is_leader:
            return []
        self._require_peer("ping_pong")
        rtts: list[float] = []
        for i in range(num_rounds):
            if self.ctx.role == "target":
                start = time.perf_counter()
                t0 = self._now()
                self.send(Stop(_PING_REQUEST, i))
                echo = self._recv_leader_only()
                rtts.append(time.perf_counter() - start)
                if echo != Stop(_PING_REQUEST, i):
                    raise RuntimeError(f"{self.ctx.label}: ping {i} came back as {echo}")
                if self.timeline is not None:
                    self.timeline.add("comm.rtt", t0, rtts[-1], iteration=i,
                                      extra={"bytes": 2 * self.wire_bytes, "peer": self.ctx.peer_leader_rank})
            else:
                self.send(self._recv_leader_only())
        self.flush()
        return rtts

    # -- internals ----------------------------------------------------------------------------------------

    def _alloc(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(host buffer, buffer handed to torch.distributed): the same CPU tensor, or pinned host + device."""
        if not self._on_device:
            buf = torch.zeros(self.capacity, dtype=WIRE_DTYPE)
            return buf, buf
        host = torch.zeros(self.capacity, dtype=WIRE_DTYPE).pin_memory()
        return host, torch.zeros(self.capacity, dtype=WIRE_DTYPE, device=self.ctx.device)

    def _wire(self, msg: Message) -> list[int]:
        """`msg` encoded (conf.messages), or ValueError if it does not fit the channel's capacity."""
        wire = encode(msg)
        if len(wire) > self.capacity:
            raise ValueError(f"{type(msg).__name__} needs {len(wire)} wire slots but the channel holds "
                             f"{self.capacity} (max_nodes = {self.max_nodes})")
        return wire

    def _require_peer(self, op: str) -> int:
        if not self.ctx.is_leader:
            raise RuntimeError(f"{self.ctx.label}: only group leaders {op} across groups")
        if self.ctx.peer_leader_rank is None:
            raise RuntimeError(f"{self.ctx.label}: cannot {op}: there is no peer group (parallel.draft_gpus = 0)")
        return self.ctx.peer_leader_rank

    def _peer_role(self) -> str:
        return "draft" if self.ctx.role == "target" else "target"

    def _wait_send(self, slot: int, peer: int) -> None:
        work, self._ring_works[slot] = self._ring_works[slot], None
        if work is not None:
            wait_bounded(work, self.timeout_s,
                         f"{self.ctx.label}: waiting for rank {peer} ({self._peer_role()} leader) to receive "
                         f"an earlier message", poll=self._on_device)

    def _recv_leader_only(self) -> Message:
        peer = self._require_peer("recv")
        work = dist.irecv(self._recv_dev, src=peer, group=self.ctx.leader_group)
        wait_bounded(work, self.timeout_s,
                     f"{self.ctx.label}: waiting for a ping from rank {peer} ({self._peer_role()} leader)",
                     poll=self._on_device)
        return self._decode(self._recv_dev, self._recv_host)

    def _broadcast(self, dev: torch.Tensor, host: torch.Tensor, what: str) -> Message:
        start = self._now()
        leader = self.ctx.leader_rank
        work = dist.broadcast(dev, src=leader, group=self.ctx.tp_group, async_op=True)
        timeout = self.timeout_s if self.ctx.is_leader else 2 * self.timeout_s
        wait_bounded(work, timeout,
                     f"{self.ctx.label}: broadcast of {what} from rank {leader} ({self.ctx.role} leader) "
                     f"in group {list(self.ctx.group_ranks)}", poll=self._on_device)
        msg = self._decode(dev, host)
        self._record("comm.broadcast", start, msg, None, leader)
        return msg

    def _decode(self, dev: torch.Tensor, host: torch.Tensor) -> Message:
        if self._on_device:
            host.copy_(dev)
        return decode(host.tolist())

    def _now(self) -> float:
        return self.timeline.now() if self.timeline is not None else 0.0

    def _record(self, name: str, start: float, msg: Message | None, payload_slots: int | None, peer: int,
                detail: dict[str, Any] | None = None) -> None:
        if self.timeline is None:
            return
        end = self.timeline.now()
        if payload_slots is None and msg is not None:
            payload_slots = len(encode(msg))
        nodes = getattr(msg, "token_ids", ())
        self.timeline.add(
            name, start, end - start, iteration=getattr(msg, "iteration", -1), tokens=len(nodes),
            extra={"bytes": self.wire_bytes, "payload_bytes": (payload_slots or 0) * _BYTES_PER_SLOT,
                   "peer": peer, "kind": type(msg).__name__ if msg is not None else "", **(detail or {})},
        )
