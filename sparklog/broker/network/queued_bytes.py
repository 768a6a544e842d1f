"""`queued.max.request.bytes`: the bytes of partly received requests that all connections together may hold.

The server asks after every read: `hold(conn, n)` says `conn` now holds `n` bytes of frames it has not
finished receiving. Sans-IO: the budget only counts and decides; the server pauses and resumes reading.

Rule 1: `total` is the sum of what every holder holds (a holder holding 0 is not tracked).
Rule 2: `hold` returns False when the holder holds bytes, the total is over the limit, and it is not the
oldest holder (Rule 4): it must stop reading, and it is queued (once) to be woken. A holder holding 0 bytes
always may read, so complete requests are never held back by others' partial ones. `hold` returning True
takes the holder off the queue.
Rule 3: whenever some holder's bytes fall (its frame completed, or it closed: `hold(conn, 0)`), waiters are
woken in FIFO order with `holder.queue_ready()` while the total is not over the limit; a woken holder reads
again and, if that takes the total over the limit once more, waits again at the back of the queue.
Rule 4 (oldest-frame-reads-on): the holder whose partial bytes were held longest (its age restarts when its
bytes fall) always may read, over the limit too, and is woken if it was waiting when it becomes the oldest.
Only a read can complete a frame and only a completed frame (or a close) lowers the total, so were every
holder to wait, none would ever be woken: two connections each holding most of a large frame, the rest of
the first arriving in two reads, had both waiting for good (a fresh-clone test run hung on it). Kafka's
broker reserves a request's whole size from the queued-bytes pool once its size prefix is read and then
reads it through; this is the same promise, kept for one frame at a time.
So no holder waits while the total is within the limit, one partial frame is always being read, and memory
held is at most the limit plus one read per holder plus the rest of the oldest frame (itself bounded by
`socket.request.max.bytes`).
State of a holder: reading -> (over the limit, not the oldest) waiting -> (woken, or became the oldest)
reading; `hold(h, 0)` from any state forgets it.
"""

from __future__ import annotations

from typing import Protocol

UNLIMITED = None


class Holder(Protocol):
    def queue_ready(self) -> None: ...


class QueuedBytes:
    """The budget of one server; see the module docstring. `limit` None means no limit (Kafka's -1)."""

    def __init__(self, limit: int | None = UNLIMITED) -> None:
        self.limit = limit
        self.total = 0
        self._held: dict[Holder, int] = {}
        self._waiting: dict[Holder, None] = {}  # insertion-ordered: the FIFO queue, with O(1) removal

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def held_by(self, holder: Holder) -> int:
        return self._held.get(holder, 0)

    def hold(self, holder: Holder, held: int) -> bool:
        """`holder` now holds `held` bytes; False if it must stop reading until `queue_ready()`."""
        before = self._held.get(holder, 0)
        if held < before:  # a frame completed, or it closed: its age restarts (Rule 4)
            del self._held[holder]
        if held:
            self._held[holder] = held  # a new holder goes to the back; one that grew keeps its place
        else:  # done or gone: never woken
            self._waiting.pop(holder, None)
        self.total += held - before
        if held < before:
            self._wake()
        if held == 0 or self._under() or self._oldest() is holder:
            self._waiting.pop(holder, None)
            return True
        self._waiting[holder] = None
        return False

    def _under(self) -> bool:
        return self.limit is None or self.total <= self.limit

    def _oldest(self) -> Holder | None:
        """Rule 4: the holder whose partial bytes were held longest (`_held` keeps that order)."""
        return next(iter(self._held), None)

    def _wake(self) -> None:
        while self._waiting and self._under():
            holder = next(iter(self._waiting))
            del self._waiting[holder]
            holder.queue_ready()
        oldest = self._oldest()
        if oldest is not None and oldest in self._waiting:  # Rule 4: it reads on, over the limit or not
            del self._waiting[oldest]
            oldest.queue_ready()
