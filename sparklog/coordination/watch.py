"""The handle every registry `watch_*` function returns."""

from __future__ import annotations


class Watch:
    """A registry watch; `stop()` ends it. The user callback is not called after `stop()` returns (one call
    already running on kazoo's thread may finish); kazoo drops the underlying watcher on its next event."""

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True
