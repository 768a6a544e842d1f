"""The purgatory: requests parked until something happens to a partition log (Kafka's DelayedOperation).

Two kinds wait here: long-polling fetches (until enough bytes are readable) and acks=all produces (until
the high watermark passes their batches, Kafka's DelayedProduce). Both are a condition over some logs,
re-checked whenever one of those logs is poked, and answered at their deadline whatever it says.

Rule 1: `notify(log)` may be called from any thread (the storage calls it from the flusher when the HW
moves; the replica manager when an ISR or a leadership changes); from another thread it hands the wake-up
to the event loop, on the loop thread (a follower's fetch moving the HW) it wakes the waiters itself, so
they are not queued behind the loop's next round of I/O; it costs one dict lookup when nobody waits on
that log.
Rule 3: waiters on a log are woken in the order they parked (a parked acks=all write before the
follower fetches that parked again after it).
Rule 2: `wait_until(logs, check, deadline, keys)` registers before it checks, so a change between the check and
the wait is never missed; it returns check()'s last answer, True only if the condition held. `keys` are other
things the request waits on (a fetch session), woken by `wake(key)` (any thread, as Rule 1).
Rule 4: `notify(log)` is the one announcement that a log's visible state moved: before waking its waiters it
calls every observer (`observe(fn)`: `fn(log)`, on the notifying thread; the fetch session cache marks its
sessions' partitions so, fetch_sessions.py Rule 5).
"""

from __future__ import annotations

import asyncio
import weakref
from asyncio import _get_running_loop  # the C accessor behind get_running_loop(): None off the loop thread
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class PurgatoryStatistics:
    waiting: int
    watched_logs: int
    completed: int
    expired: int


class Purgatory:
    """Futures of parked requests, by the log they wait on (module docstring)."""

    def __init__(self) -> None:
        # log -> futures of requests waiting on it, in parking order (Rule 3): a dict used as an ordered set
        self._waiting: dict[Any, dict[asyncio.Future, None]] = {}
        self._watched: "weakref.WeakSet" = weakref.WeakSet()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._completed = 0
        self._expired = 0
        self._observers: tuple[Callable[[Any], None], ...] = ()

    def observe(self, observer: Callable[[Any], None]) -> None:
        """Rule 4: `observer(log)` on every notify(log)."""
        self._observers = self._observers + (observer,)

    def watch(self, plog) -> None:
        """Be notified by `plog` when its high watermark moves (once per log)."""
        if plog not in self._watched:
            self._watched.add(plog)
            plog.add_high_watermark_listener(self._on_high_watermark)

    def add(self, plogs, future: asyncio.Future, keys=()) -> None:
        self._loop = asyncio.get_running_loop()
        for plog in plogs:
            self.watch(plog)
            self._waiting.setdefault(plog, {})[future] = None
        for key in keys:
            self._waiting.setdefault(key, {})[future] = None

    def remove(self, plogs, future: asyncio.Future, keys=()) -> None:
        for plog in (*plogs, *keys):
            waiting = self._waiting.get(plog)
            if waiting is not None:
                waiting.pop(future, None)
                if not waiting:
                    del self._waiting[plog]

    def waiting(self) -> int:
        return sum(len(s) for s in self._waiting.values())

    def notify(self, plog) -> None:
        """Tell the observers (Rule 4), and re-check whatever waits on `plog` (any thread)."""
        for observer in self._observers:
            observer(plog)
        self.wake(plog)

    def wake(self, key) -> None:
        """Re-check whatever waits on `key`, a log or another key (any thread, Rule 1)."""
        if key in self._waiting and self._loop is not None:
            if _get_running_loop() is self._loop:
                self._wake(key)
                return
            try:
                self._loop.call_soon_threadsafe(self._wake, key)
            except RuntimeError:  # the loop is closed: shutting down
                pass

    def notify_all(self) -> None:
        for key in list(self._waiting):
            self.wake(key)

    def _on_high_watermark(self, plog, high_watermark: int) -> None:
        self.notify(plog)

    def _wake(self, plog) -> None:
        for future in self._waiting.get(plog, ()):
            if not future.done():
                future.set_result(None)

    async def wait_until(self, plogs, check: Callable[[], bool], deadline: float, keys=()) -> bool:
        """Wait until `check()` holds or the loop's clock passes `deadline`; return check()'s last answer."""
        loop = asyncio.get_running_loop()
        while True:
            future = loop.create_future()
            self.add(plogs, future, keys)
            try:
                if check():
                    self._completed += 1
                    return True
                remaining = deadline - loop.time()
                if remaining <= 0:
                    self._expired += 1
                    return False
                # asyncio.wait, not wait_for: wait_for (3.11) swallows a cancellation that arrives in the
                # turn the future is woken, and the request would wait on to its deadline after its
                # connection is gone
                await asyncio.wait((future,), timeout=remaining)
            finally:
                self.remove(plogs, future, keys)

    def statistics(self) -> PurgatoryStatistics:
        return PurgatoryStatistics(self.waiting(), len(self._watched), self._completed, self._expired)
