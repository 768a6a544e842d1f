"""Flusher: the one background thread that runs the time-based flushes (flush.ms) of many logs.

It also runs the log's delayed work (deleting `.deleted` segment files after file.delete.delay.ms), so a
process with hundreds of partitions has one such thread, not one per log. Logs register on open and
unregister on close; `close()` stops the thread and runs the delayed work still pending.

Rule: idle-logs-cost-nothing: the flusher looks at a log (calls its `flush_due(now)`, and `flush()` if so) only
when the log asked for it: once when it registers, then at each time it passes to `schedule(log, at)` (the
moment its `flush_due` turns true). One time per log is live, the last one scheduled: a log schedules under
its own lock whenever that moment changes (an append after a flush, a flush that leaves its checkpoint due
later, a failed flush, a new flush.ms), so the live time is always its own. A look that finds the log not due
(another thread flushed it first) drops it until it schedules again; an unregistered log is never looked at.
So a pass of the flusher costs the logs due in it, never the logs registered: a broker's thousands of idle
partitions cost it nothing.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Protocol

log = logging.getLogger(__name__)

MIN_TICK_MS = 5  # never look at logs more often than this (a log whose flush keeps failing is due at once)
MAX_TICK_MS = 1000  # wake at least once a second
_STALE_SLACK = 64  # superseded heap entries tolerated beyond one per scheduled log before the heap is rebuilt


class Flushable(Protocol):
    def flush_due(self, now: float) -> bool: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class FlusherStatistics:
    logs: int
    flushes: int
    flush_errors: int
    pending_tasks: int


class Flusher:
    """Calls `log.flush()` for each registered log whose `flush_due(now)` says so when it is looked at (Rule:
    idle-logs-cost-nothing); times are monotonic seconds."""

    def __init__(self, name: str = "sparklog-flusher"):
        self._name = name
        self._logs: set[Flushable] = set()
        self._tasks: list[tuple[float, int, Callable[[], None]]] = []
        self._looks: list[tuple[float, int, Flushable]] = []  # a heap; an entry is live if `_due_at` names its time
        self._due_at: dict[Flushable, float] = {}  # each scheduled log's live time
        self._sequence = itertools.count()
        self._wakeup = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._flushes = 0
        self._errors = 0

    def register(self, flushable: Flushable) -> None:
        with self._wakeup:
            if self._closed:
                raise RuntimeError("the flusher is closed")
            self._logs.add(flushable)
            self._push(flushable, time.monotonic())  # the first look: whatever the log's opening left pending
            self._start()
            self._wakeup.notify()

    def unregister(self, flushable: Flushable) -> None:
        with self._wakeup:
            self._logs.discard(flushable)
            self._due_at.pop(flushable, None)

    def schedule(self, flushable: Flushable, at: float) -> None:
        """Look at `flushable` at monotonic time `at`, instead of the time it scheduled before (Rule:
        idle-logs-cost-nothing); ignored for a log not registered (not yet, or no longer)."""
        with self._wakeup:
            if flushable not in self._logs or self._due_at.get(flushable) == at:
                return
            self._push(flushable, at)
            if self._looks[0][2] is flushable:  # sooner than the loop's wait: wake it
                self._wakeup.notify()

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> None:
        """Run `fn` in the flusher's thread after `delay_s` seconds (or at close(), whichever is first)."""
        with self._wakeup:
            if self._closed:
                fn()
                return
            heapq.heappush(self._tasks, (time.monotonic() + delay_s, next(self._sequence), fn))
            self._start()
            self._wakeup.notify()

    def close(self) -> None:
        with self._wakeup:
            self._closed = True
            self._wakeup.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._looks.clear()
        self._due_at.clear()
        for _, _, fn in sorted(self._tasks):
            self._run(fn)
        self._tasks.clear()

    def statistics(self) -> FlusherStatistics:
        with self._wakeup:
            return FlusherStatistics(len(self._logs), self._flushes, self._errors, len(self._tasks))

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while True:
            with self._wakeup:
                if self._closed:
                    return
                self._wakeup.wait(self._wait_s())
                if self._stopped():  # close() ran while the wait released the lock
                    return
                now = time.monotonic()
                looks = self._pop_due_looks(now)
                due = self._pop_due_tasks()
            for fn in due:
                self._run(fn)
            for flushable in looks:
                if flushable.flush_due(now):
                    self._flush(flushable)

    def _stopped(self) -> bool:
        return self._closed

    def _wait_s(self) -> float:
        """Until the next scheduled look (at least MIN_TICK_MS) or delayed task, at most MAX_TICK_MS."""
        now = time.monotonic()
        wait_s = MAX_TICK_MS / 1000
        if self._looks:
            wait_s = min(wait_s, max(MIN_TICK_MS / 1000, self._looks[0][0] - now))
        if self._tasks:
            wait_s = min(wait_s, max(0.0, self._tasks[0][0] - now))
        return wait_s

    def _push(self, flushable: Flushable, at: float) -> None:
        self._due_at[flushable] = at
        heapq.heappush(self._looks, (at, next(self._sequence), flushable))
        if len(self._looks) > 2 * len(self._due_at) + _STALE_SLACK:  # superseded entries: drop them
            self._looks = [(at, next(self._sequence), f) for f, at in self._due_at.items()]
            heapq.heapify(self._looks)

    def _pop_due_looks(self, now: float) -> list[Flushable]:
        """The logs whose live time has come (each then unscheduled); superseded entries are dropped."""
        looks = []
        while self._looks and self._looks[0][0] <= now:
            at, _, flushable = heapq.heappop(self._looks)
            if self._due_at.get(flushable) == at:
                del self._due_at[flushable]
                looks.append(flushable)
        return looks

    def _pop_due_tasks(self) -> list[Callable[[], None]]:
        now = time.monotonic()
        due = []
        while self._tasks and self._tasks[0][0] <= now:
            due.append(heapq.heappop(self._tasks)[2])
        return due

    def _flush(self, flushable: Flushable) -> None:
        try:
            flushable.flush()
            self._flushes += 1
        except Exception:  # one broken log must not stop the flushes of the others
            self._errors += 1
            log.exception("background flush of %r failed", flushable)

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            log.exception("delayed task %r failed", fn)


_default: Flusher | None = None
_default_lock = threading.Lock()


def default_flusher() -> Flusher:
    """The process-wide Flusher used by logs opened without one (its thread is a daemon)."""
    global _default
    with _default_lock:
        if _default is None or _default._closed:
            _default = Flusher()
        return _default
