"""CleanerReporter: publishes the broker's compacted logs' dirty ratios and the cleaner's last run of each to
ZooKeeper (coordination/log_cleaner.py), for `sparklog topics describe`.

Rule: one thread looks every REPORT_INTERVAL_S and publishes only when the report changed (a broker without
compacted topics writes once, an empty report, clearing what a previous run left); close() stops it within
one wait. A failed publish is logged and retried at the next look.
"""

from __future__ import annotations

import logging
import threading

from sparklog.coordination import log_cleaner

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 5.0  # how stale a dirty ratio in `sparklog topics describe` may be


def cleaner_report(logs) -> dict:
    """{(topic, partition): {"dirty_ratio", "last_run"}} of every compacted log of a LogManager."""
    cleaner, report = logs.cleaner, {}
    for plog in logs.logs():
        try:
            ratio = cleaner.dirty_ratio(plog)
        except Exception:  # closed or deleted meanwhile
            continue
        if ratio is None:
            continue
        run = cleaner.last_run(plog)
        report[(plog.topic, plog.partition)] = {"dirty_ratio": round(ratio, 4), "last_run": None if run is None else {
            "ended_ms": run.started_ms + int(run.duration_s * 1000), "duration_ms": int(run.duration_s * 1000),
            "first_dirty": run.first_dirty, "end": run.end, "records_removed": run.records_removed,
            "bytes_read": run.bytes_read, "bytes_written": run.bytes_written}}
    return report


class CleanerReporter:
    def __init__(self, zk, broker_id: int, logs):
        self._zk = zk
        self._broker_id = broker_id
        self._logs = logs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sparklog-cleaner-reporter", daemon=True)

    def start(self) -> "CleanerReporter":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        published = None
        while True:
            report = cleaner_report(self._logs)
            if report != published:
                try:
                    log_cleaner.publish(self._zk, self._broker_id, report)
                    published = report
                except Exception:
                    log.exception("publishing the log cleaner's report failed")
            if self._stop.wait(REPORT_INTERVAL_S):
                return
