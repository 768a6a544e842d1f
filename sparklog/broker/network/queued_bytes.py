"""`queued.max.request.bytes`: the bytes of partly received requests that all connections together may hold.

The server asks after every read: `hold(conn, n)` says `conn` now holds `n` bytes of frames it has not
finished receiving. Sans-IO: the budget only counts and decides; the server pauses and resumes reading.

Rule 1: `total` is the sum of what every holder holds (a holder holding 0 is not tracked).
Rule 2: `hold` returns False when the holder holds bytes and the total is over the limit: it must stop
reading, and it is queued (once) to be woken. A holder holding 0 bytes always may read, so complete
requests are never held back by others' partial ones. `hold` returning True takes the holder off the queue.
Rule 3: whenever some holder's bytes fall (its frame completed, or it closed: `hold(conn, 0)`), waiters are
woken in FIFO order with `holder.queue_ready()` while the total is not over the limit; a woken holder reads
again and, if that takes the total over the limit once more, waits again at the back of the queue.
So no holder waits while the total is within the limit, and memory held is at most the limit plus the
one read that took it over, per holder.
State of a holder: reading -> (over the limit) waiting -> (woken) reading; `hold(h, 0)` from any state
forgets it.
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
        before = self._held.pop(holder, 0)
        if held:
            self._held[holder] = held
        else:  # done or gone: never woken
            self._waiting.pop(holder, None)
        self.total += held - before
        if held < before:
            self._wake()
        if held == 0 or self._under():
            self._waiting.pop(holder, None)
            return True
        self._waiting[holder] = None
        return False

    def _under(self) -> bool:
        return self.limit is None or self.total <= self.limit

    def _wake(self) -> None:
        while self._waiting and self._under():
            holder = next(iter(self._waiting))
            del self._waiting[holder]
            holder.queue_ready()
