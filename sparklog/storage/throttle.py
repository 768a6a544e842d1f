"""Throttle: a token bucket of bytes per second for the storage's background readers (the scrubber, the
cleaner), so what they cost is bounded disk bandwidth; `consume(n)` sleeps until n more bytes may move.

Rule: the bucket refills continuously from its creation; a sleep ends early when `stop` is set, and then
`consume` raises `Stopped`, so a background pass ends within one sleep of its owner's close().
"""

from __future__ import annotations

import threading
import time


class Stopped(Exception):
    """The owner was closed during a throttle sleep."""


class Throttle:
    """A token bucket of `rate` bytes per second; `consume(n)` sleeps until n bytes may be read."""

    def __init__(self, rate: float, stop: threading.Event):
        self._rate = rate
        self._stop = stop
        self._start = time.monotonic()
        self._used = 0

    def consume(self, n: int) -> None:
        self._used += n
        wait = self._used / self._rate - (time.monotonic() - self._start)
        if wait > 0 and self._stop.wait(wait):
            raise Stopped()
        if self._stop.is_set():
            raise Stopped()
