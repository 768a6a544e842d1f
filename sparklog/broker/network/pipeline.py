"""The requests of one connection that were read but not yet answered, kept in request order (pipelining).

A client may have several requests in flight on one connection (librdkafka's max.in.flight, Java's
max.in.flight.requests.per.connection = 5). The server handles each as soon as it is read, so a request
parked in the purgatory (an acks=all Produce, a long-polling Fetch) does not stop the ones behind it from
taking effect; this queue makes their replies leave in the order the requests came. Sans-IO: it only
orders and counts; the server reads, writes and pauses.

Rule 1: replies leave in `add` order, whatever order they complete in: `pop_ready()` returns the head slot
only once it is complete, never one behind an incomplete head.
Rule 2: at most `max_requests` slots are held (`full`): the server reads no further request until one
leaves (Kafka's queued.max.requests, here per connection).
Rule 3: `bytes` is the sum of the frame sizes of the slots held (for statistics: a handled request no
longer holds its frame, only its task and reply, so the count, not the bytes, is what bounds a connection).
State of a slot: pending -> (complete) ready -> (pop_ready) gone; a slot added with its reply is ready
at once.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class InFlightStatistics:
    requests: int  # slots held: requests read and not yet written back
    bytes: int  # their frame sizes (Rule 3)
    max_requests: int


class Slot:
    """One request in flight: its frame size and, once complete, its reply (None: nothing to send)."""

    __slots__ = ("size", "reply", "ready")

    def __init__(self, size: int) -> None:
        self.size = size
        self.reply: Any = None
        self.ready = False


class InFlight:
    """The ordered in-flight requests of one connection (module docstring)."""

    __slots__ = ("max_requests", "bytes", "_slots")

    def __init__(self, max_requests: int) -> None:
        if max_requests < 1:
            raise ValueError(f"max_requests must be at least 1, not {max_requests}")
        self.max_requests = max_requests
        self.bytes = 0
        self._slots: deque[Slot] = deque()

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def full(self) -> bool:
        return len(self._slots) >= self.max_requests

    def add(self, size: int) -> Slot:
        """Hold a request of a `size`-byte frame whose reply is still to come (call `complete` with it)."""
        slot = Slot(size)
        self._slots.append(slot)
        self.bytes += slot.size
        return slot

    def add_ready(self, size: int, reply: Any) -> None:
        """Hold a request answered at once that must wait for the ones before it."""
        self.complete(self.add(size), reply)

    @staticmethod
    def complete(slot: Slot, reply: Any) -> None:
        slot.reply = reply
        slot.ready = True

    def pop_ready(self) -> Slot | None:
        """The head slot if it is complete (removed, its bytes no longer counted), else None."""
        if not self._slots or not self._slots[0].ready:
            return None
        slot = self._slots.popleft()
        self.bytes -= slot.size
        return slot

    def clear(self) -> None:
        """Forget every slot (the connection closed: nothing more will be written)."""
        self._slots.clear()
        self.bytes = 0

    def statistics(self) -> InFlightStatistics:
        return InFlightStatistics(len(self._slots), self.bytes, self.max_requests)
