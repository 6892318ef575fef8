"""MessageStore: the unbounded FIFO store between the simulator's processes (draft, links, target).

Same contract as an unbounded `simpy.Store` for how the simulator uses it: `put(item)` is instantaneous
and never blocks, `get()` returns an event that fires with the oldest item (now, if one is waiting; else at
the put that delivers it). Items are conf.messages dataclasses (DraftProposal, VerifiedPath).

Why not `simpy.Store`: it allocates a put event per message and runs the generic resource trigger queues
on every put and get; with four store operations per simulated iteration that was about half the
simulator's time. Here a put allocates nothing and a get allocates one plain event. Exactly one process
reads each store (one consumer per direction), which the class checks.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import simpy
from simpy.events import Event


class MessageStore:
    """Unbounded FIFO mailbox with one consumer: `put` never blocks, `get` is a SimPy event."""

    __slots__ = ("env", "items", "_waiter")

    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.items: deque[Any] = deque()
        self._waiter: Event | None = None

    def put(self, item: Any) -> None:
        """Deliver `item` now: to the waiting consumer, else to the queue."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            waiter.succeed(item)
        else:
            self.items.append(item)

    def get(self) -> Event:
        """An event that fires with the oldest item (already triggered if one is queued)."""
        if self._waiter is not None:
            raise RuntimeError("MessageStore.get: a second consumer is waiting; each store has one reader")
        event = Event(self.env)
        if self.items:
            event.succeed(self.items.popleft())
        else:
            self._waiter = event
        return event
