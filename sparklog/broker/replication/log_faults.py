"""LogFaultReporter: publishes the broker's fenced log ranges to ZooKeeper (coordination/log_faults.py).

The storage calls `on_fence(topic, partition, ranges)` from whichever thread fenced (a reader, the
scrubber, a log opening); the reporter records the map and publishes the whole of it on the broker's
ZooKeeper executor. Rule: publishes are serialized and each writes the latest map, so an older map never
lands after a newer one. Nothing is published before `start()`, which publishes once (clearing what a
previous run of this broker left) and then after every change.
"""

from __future__ import annotations

import logging
import threading

from sparklog.coordination import log_faults

log = logging.getLogger(__name__)


class LogFaultReporter:
    def __init__(self, zk, broker_id: int):
        self._zk = zk
        self._broker_id = broker_id
        self._faults: dict[tuple[str, int], tuple] = {}
        self._lock = threading.Lock()  # guards _faults
        self._publish_lock = threading.Lock()  # one publish at a time (the Rule)
        self._executor = None

    def on_fence(self, topic: str, partition: int, ranges: tuple) -> None:
        with self._lock:
            self._faults[(topic, partition)] = ranges
            executor = self._executor
        if executor is not None:
            executor.submit(self._publish)

    def start(self, executor) -> None:
        with self._lock:
            self._executor = executor
        executor.submit(self._publish)

    def _publish(self) -> None:
        with self._publish_lock:
            with self._lock:
                faults = {key: ranges for key, ranges in self._faults.items() if ranges}
            try:
                log_faults.publish(self._zk, self._broker_id, faults)
            except Exception:  # the next change publishes again; describe shows the last report
                log.exception("publishing the fenced log ranges failed")
