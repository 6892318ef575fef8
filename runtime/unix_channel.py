"""The leader channel over a Unix-domain socket: both group leaders on one host (`parallel.leader_channel=unix`).

`LeaderChannel` (runtime/comm.py) sends each message as an int64 tensor through torch.distributed: on GPUs a pinned host
-> device copy, an NCCL send, and on the receiver an NCCL receive, a poll and a device -> host copy: a few hundred
microseconds per message on the critical path of every verify. A message is a few hundred bytes of token ids that live
on the host at both ends, so this channel keeps them there: one SOCK_SEQPACKET socket between the two leaders (message
boundaries kept, reliable, in order), in the Linux abstract namespace (no file to clean up). Inside a group the leader
still broadcasts on the group's TP group, exactly as `LeaderChannel` does.

Contract: the one of `LeaderChannel` (same methods, same spans, same error texts), plus
- both leaders must be on one host: the set-up compares host names and raises naming the field otherwise;
- a send returns once the kernel holds the message (no in-flight bookkeeping; `flush` has nothing to wait for;
  a full socket buffer, which the alternating loops never reach, is waited for up to `timeout_s`);
- a receive spins for `spin_s` (`recv_spin_s`; a reply usually arrives within microseconds), then
  sleeps in `poll` until the deadline (`timeout_s`, TimeoutError naming the peer); a peer that exits closes the
  socket, which the receiver reports at once (RuntimeError) instead of waiting for the deadline;
- each leader's `comm.recv` span also records, in its extra fields, when the bytes came out of the socket
  (`arrive_s`, from the span's start), when they were decoded (`decoded_s`) and whether the receive slept in
  poll (`slept`): calibration/message_latency.py splits a message's delivery into the hop and the receiver's own work.
Set-up: the target leader binds and listens, hands the address and its host name to the draft leader over
the leader group (`broadcast_object_list`), and accepts (bounded by `timeout_s`); the draft leader connects.
"""

from __future__ import annotations

import os
import select
import socket
import time
import uuid
from array import array
from typing import Any

import torch
import torch.distributed as dist

from conf.messages import Message, decode
from runtime.comm import _BYTES_PER_SLOT, LeaderChannel
from runtime.metrics import Timeline
from runtime.parallel import ParallelContext


class UnixLeaderChannel(LeaderChannel):
    """`LeaderChannel` whose leader-to-leader hop is a Unix-domain socket (same host)."""

    kind = "unix"

    def __init__(self, ctx: ParallelContext, max_nodes: int, timeout_s: float | None = None, *,
                 timeline: Timeline | None = None, max_in_flight: int = 1, spin_s: float = 1e-3) -> None:
        """Allocate the group-broadcast buffers (as LeaderChannel), then connect the two leaders."""
        super().__init__(ctx, max_nodes, timeout_s, timeline=timeline, max_in_flight=max_in_flight)
        if spin_s < 0:
            raise ValueError(f"unix leader channel: spin_s: expected >= 0 seconds, got {spin_s:g}")
        self.spin_s = spin_s
        self._sock: socket.socket | None = None
        if ctx.is_leader and ctx.peer_leader_rank is not None:
            self._sock = self._connect()

    # -- public API (leader side; the in-group broadcast is LeaderChannel's) ---------------------------------

    def send(self, msg: Message) -> None:
        """Leader only: hand `msg` to the peer leader's socket (returns once the kernel holds it)."""
        peer = self._require_peer("send")
        wire = self._wire(msg)
        start = self._now()
        self._send_bytes(array("q", wire).tobytes(), f"sending to rank {peer} ({self._peer_role()} leader)")
        self._record("comm.send", start, msg, len(wire), peer)

    def recv(self) -> Message:
        """Every rank of the group: the next message from the peer group (leader receives, then broadcasts)."""
        msg = None
        if self.ctx.is_leader:
            msg, wire = self._recv_peer()
            if self.ctx.group_size > 1:
                self._stage(wire)
        if self.ctx.group_size > 1:
            msg = self._broadcast(self._recv_dev, self._recv_host, "a received message")
        assert msg is not None
        return msg

    def flush(self) -> None:
        """Nothing to wait for: a send returned once the kernel held the message."""

    def close(self) -> None:
        """Close the socket (leaders; no-op elsewhere)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __del__(self) -> None:
        sock = getattr(self, "_sock", None)
        if sock is not None:
            sock.close()

    # -- internals ----------------------------------------------------------------------------------------

    def _recv_peer(self) -> tuple[Message, list[int]]:
        """Leader: one message from the peer leader and its wire, recorded as a comm.recv span."""
        start = self._now()
        peer = self._require_peer("recv")
        wire, arrived, slept = self._receive(f"waiting for a message from rank {peer} ({self._peer_role()} leader)")
        msg = decode(wire)
        decoded = self._now()
        self._record("comm.recv", start, msg, len(wire), peer,
                     detail={"arrive_s": round(arrived - start, 9), "decoded_s": round(decoded - start, 9),
                             "slept": slept})
        return msg, wire

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise RuntimeError(f"{self.ctx.label}: the leader channel is closed")
        return self._sock

    def _connect(self) -> socket.socket:
        """Target leader: bind, publish the address, accept; draft leader: connect. Same host required."""
        target_leader = self.ctx.leader_rank if self.ctx.role == "target" else self.ctx.peer_leader_rank
        host = socket.gethostname()
        listener = None
        if self.ctx.role == "target":
            address = f"\0swiftspec-{os.getpid()}-{uuid.uuid4().hex}"
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            listener.bind(address)
            listener.listen(1)
            box: list[Any] = [(address, host)]
        else:
            box = [None]
        # over gloo (the leader group is cpu:gloo,cuda:nccl): bounded by the group's timeout, no NCCL communicator
        dist.broadcast_object_list(box, src=target_leader, group=self.ctx.leader_group, device=torch.device("cpu"))
        address, target_host = box[0]
        if self.ctx.role == "target":
            assert listener is not None
            listener.settimeout(self.timeout_s)
            try:
                sock, _ = listener.accept()
            except TimeoutError as e:
                raise TimeoutError(f"{self.ctx.label}: parallel.leader_channel=unix: the draft leader did not "
                                   f"connect in {self.timeout_s:g} s (is it on another host?)") from e
            finally:
                listener.close()
        else:
            if target_host != host:
                raise RuntimeError(f"{self.ctx.label}: parallel.leader_channel=unix needs both leaders on one host; "
                                   f"the target leader runs on {target_host!r}, this rank on {host!r} "
                                   f"(use parallel.leader_channel=dist)")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect(address)
            except OSError as e:
                sock.close()
                raise RuntimeError(f"{self.ctx.label}: parallel.leader_channel=unix: connecting to rank "
                                   f"{self.ctx.peer_leader_rank} (target leader) at {address[1:]!r} failed: {e}") from e
        sock.setblocking(False)  # sends and receives wait in poll, each with its own deadline
        return sock

    def _send_bytes(self, data: bytes, what: str) -> None:
        """One record into the non-blocking socket; waits (bounded) only while the socket buffer is full."""
        sock, start = self._socket(), time.perf_counter()
        while True:
            try:
                sent = sock.send(data)
                if sent != len(data):  # a SOCK_SEQPACKET record goes whole or not at all
                    raise RuntimeError(f"{self.ctx.label}: {what}: sent {sent} of {len(data)} bytes")
                return
            except BlockingIOError:
                left = self.timeout_s - (time.perf_counter() - start)
                poller = select.poll()
                poller.register(sock, select.POLLOUT)
                if left <= 0 or not poller.poll(max(1, int(left * 1000))):
                    raise TimeoutError(f"{self.ctx.label}: {what}: the socket stayed full for "
                                       f"{self.timeout_s:g} s") from None
            except OSError as e:
                raise RuntimeError(f"{self.ctx.label}: {what} failed: {e} (the peer closed the channel)") from e

    def _receive(self, what: str) -> tuple[list[int], float, bool]:
        """One message's wire slots, when they came out of the socket (timeline seconds) and whether the wait
        slept in poll; TimeoutError after `timeout_s`, RuntimeError if the peer closed."""
        sock = self._socket()
        size = self.capacity * _BYTES_PER_SLOT + _BYTES_PER_SLOT  # one slot more: an oversized record shows
        start, poller, slept = time.perf_counter(), None, False
        while True:  # spin first (a reply usually arrives within microseconds), then sleep in poll
            try:
                data = sock.recv(size)
                break
            except BlockingIOError:
                pass
            except OSError as e:
                raise RuntimeError(f"{self.ctx.label}: {what}: the channel failed: {e}") from e
            elapsed = time.perf_counter() - start
            if elapsed < self.spin_s:
                continue
            if elapsed >= self.timeout_s:
                raise TimeoutError(f"{self.ctx.label}: {what}: nothing arrived in {elapsed:.1f} s "
                                   f"(limit {self.timeout_s:g} s)")
            if poller is None:
                poller = select.poll()
                poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
            slept = True
            poller.poll(max(1, int((self.timeout_s - elapsed) * 1000)))
        arrived = self._now()
        if not data:
            raise RuntimeError(f"{self.ctx.label}: {what}: the peer closed the channel (it exited or failed)")
        if len(data) > self.capacity * _BYTES_PER_SLOT:
            raise RuntimeError(f"{self.ctx.label}: {what}: a message of more than {self.capacity} wire slots arrived "
                               f"(max_nodes = {self.max_nodes}): both leaders must use the same spec")
        if len(data) % _BYTES_PER_SLOT:
            raise RuntimeError(f"{self.ctx.label}: {what}: a message of {len(data)} bytes is not whole int64 slots")
        return array("q", data).tolist(), arrived, slept

    def _stage(self, wire: list[int]) -> None:
        """Leader of a group > 1: put the received wire into the broadcast buffers."""
        self._recv_host.zero_()
        self._recv_host[: len(wire)] = torch.tensor(wire, dtype=self._recv_host.dtype)
        if self._on_device:
            self._recv_dev.copy_(self._recv_host)

    def _recv_leader_only(self) -> Message:
        peer = self._require_peer("recv")
        return decode(self._receive(f"waiting for a ping from rank {peer} ({self._peer_role()} leader)")[0])


GPU_RECV_SPIN_S = 50e-3
"""How long a GPU rank's leader spins on a receive before it sleeps in poll: it has a host core to itself, and its long
waits (serial trees, refills after a miss, the peer's prefill) would otherwise pay the poll wake-up, several times the
hop itself (docs/LOG.md has the numbers)."""
CPU_RECV_SPIN_S = 1e-3
"""The same on a CPU rank, whose ranks share the host's cores: a short spin, then sleep."""


def recv_spin_s(device: torch.device) -> float:
    """How long a receive on `device`'s rank spins before it sleeps: GPU_RECV_SPIN_S or CPU_RECV_SPIN_S."""
    return GPU_RECV_SPIN_S if device.type == "cuda" else CPU_RECV_SPIN_S


def make_channel(ctx: ParallelContext, kind: str, max_nodes: int, timeline: Timeline | None = None, *,
                 spin_s: float = 1e-3) -> LeaderChannel:
    """The leader channel `parallel.leader_channel` names: dist (torch.distributed), unix (same host), or auto:
    unix when both leaders run on one host, dist otherwise (the leaders compare host names over the leader
    group; other ranks only ever broadcast inside their group, which both channels do alike)."""
    if kind == "auto":
        kind = "dist"
        if ctx.is_leader and ctx.peer_leader_rank is not None:
            hosts: list[Any] = [None, None]
            dist.all_gather_object(hosts, socket.gethostname(), group=ctx.leader_group)
            kind = "unix" if hosts[0] == hosts[1] else "dist"
            if ctx.shared_gpu and kind == "dist":
                raise ValueError(f"parallel.share_gpus: the two leaders run on different hosts ({hosts[0]}, "
                                 f"{hosts[1]}); shared GPUs need both on one host (the unix leader channel)")
    if kind == "unix":
        return UnixLeaderChannel(ctx, max_nodes, timeline=timeline, spin_s=spin_s)
    if kind == "dist":
        return LeaderChannel(ctx, max_nodes, timeline=timeline)
    raise ValueError(f"parallel.leader_channel: {kind!r} is not one of auto, dist, unix")
