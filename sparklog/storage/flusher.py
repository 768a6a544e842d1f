"""Flusher: the one background thread that runs the time-based flushes (flush.ms) of many logs.

It also runs the log's delayed work (deleting `.deleted` segment files after file.delete.delay.ms), so a
process with hundreds of partitions has one such thread, not one per log. Logs register on open and
unregister on close; `close()` stops the thread and runs the delayed work still pending.
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

MIN_TICK_MS = 5  # never poll faster than this, whatever flush.ms says
MAX_TICK_MS = 1000  # wake at least once a second, to pick up new logs and delayed work


class Flushable(Protocol):
    flush_ms: int

    def flush_due(self, now: float) -> bool: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class FlusherStatistics:
    logs: int
    flushes: int
    flush_errors: int
    pending_tasks: int


class Flusher:
    """Calls `log.flush()` for each registered log whose `flush_due(now)` says so; times are monotonic."""

    def __init__(self, name: str = "sparklog-flusher"):
        self._name = name
        self._logs: set[Flushable] = set()
        self._tasks: list[tuple[float, int, Callable[[], None]]] = []
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
            self._start()
            self._wakeup.notify()

    def unregister(self, flushable: Flushable) -> None:
        with self._wakeup:
            self._logs.discard(flushable)

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
                self._wakeup.wait(self._tick_s())
                if self._stopped():  # close() ran while the wait released the lock
                    return
                logs = list(self._logs)
                due = self._pop_due_tasks()
            for fn in due:
                self._run(fn)
            now = time.monotonic()
            for flushable in logs:
                if flushable.flush_due(now):
                    self._flush(flushable)

    def _stopped(self) -> bool:
        return self._closed

    def _tick_s(self) -> float:
        flush_ms = min((f.flush_ms for f in self._logs), default=MAX_TICK_MS)
        tick_ms: float = min(MAX_TICK_MS, max(MIN_TICK_MS, flush_ms // 2))
        if self._tasks:
            tick_ms = min(tick_ms, max(0.0, (self._tasks[0][0] - time.monotonic()) * 1000))
        return tick_ms / 1000

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
