"""LogManager: the partition logs of one process under one or more log dirs, and their background work.

It owns one Flusher (time-based flushes and delayed file deletes for every log), one retention thread
that runs `enforce_retention` on every log each log.retention.check.interval.ms, one Scrubber that
verifies flushed segments in the background (scrubber.py) and the log cleaner threads that compact the
logs whose cleanup.policy includes `compact` (cleaner_manager.py); `close()` stops all four and flushes and
closes every log. A new partition goes to the log dir holding the fewest partitions (Kafka's
rule); a directory that is not `<topic>-<partition>` is skipped on load with a warning.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from sparklog.storage.cleaner_manager import CleanerConfig, CleanerManager, CleanerStatistics
from sparklog.storage.config import LogConfig
from sparklog.storage.errors import InvalidTopicName, LogClosedError
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.flusher import Flusher
from sparklog.storage.log import DEFAULT_CHECKPOINT_INTERVAL_MS, FenceListener, PartitionLog
from sparklog.storage.scrubber import Scrubber, ScrubberConfig, ScrubberStatistics
from sparklog.storage.topic_names import parse_partition_dir, partition_dir_name

logger = logging.getLogger(__name__)

DEFAULT_RETENTION_CHECK_INTERVAL_MS = 300_000  # log.retention.check.interval.ms: Kafka's 5 minutes


@dataclass(frozen=True)
class LogManagerStatistics:
    log_dirs: int
    logs: int
    segments: int
    size_bytes: int
    retention_runs: int
    deleted_segments: int
    fenced_ranges: int = 0  # offset ranges lost to bit rot, over every log
    scrubber: ScrubberStatistics | None = None
    cleaner: CleanerStatistics | None = None


class LogManager:
    """Creates, finds, deletes and closes PartitionLogs; thread-safe."""

    def __init__(self, log_dirs: str | Iterable[str], default_config: LogConfig | Mapping[str, Any] | None = None,
                 clock: Callable[[], int] | None = None, *, files: Files | None = None,
                 retention_check_interval_ms: int = DEFAULT_RETENTION_CHECK_INTERVAL_MS,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS,
                 scrubber: ScrubberConfig | None = None, on_fence: FenceListener | None = None,
                 cleaner: CleanerConfig | None = None):
        """`checkpoint_interval_ms` is Kafka's log.flush.offset.checkpoint.interval.ms: how often each log's
        recovery-point checkpoint is rewritten (also on close); see PartitionLog. `scrubber`: the
        log.scrubber.* settings (default: enabled, ScrubberConfig's defaults). `on_fence(topic, partition,
        ranges)` hears of each log's fenced ranges (log.py Rule: bit-rot-fenced) when it opens with some and when they
        change. `cleaner`: the log.cleaner.* settings (default: enabled, CleanerConfig's defaults)."""
        self.log_dirs = [log_dirs] if isinstance(log_dirs, str) else list(log_dirs)
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        if not isinstance(default_config, LogConfig):
            default_config = LogConfig.from_dict(default_config)
        self.default_config = default_config
        self._clock = clock
        self._files = files or OS_FILES
        self._interval_s = retention_check_interval_ms / 1000
        self._checkpoint_interval_ms = checkpoint_interval_ms
        self._on_fence = on_fence
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self._lock = threading.RLock()
        self._flusher = Flusher("sparklog-log-manager-flusher")
        self._stop = threading.Event()
        self._retention_runs = 0
        self._deleted_segments = 0
        for log_dir in self.log_dirs:
            self._files.makedirs(log_dir)
        self._retention_thread = threading.Thread(target=self._retention_loop, name="sparklog-retention",
                                                  daemon=True)
        self._retention_thread.start()
        self._scrubber = Scrubber(self.logs, scrubber or ScrubberConfig()).start()
        self.cleaner = CleanerManager(self.logs, cleaner, files=self._files, clock=clock).start()

    def _open(self, directory: str, overrides: Mapping[str, Any] | None) -> PartitionLog:
        config = self.default_config.with_overrides(overrides or {})
        log = PartitionLog.open(directory, config, files=self._files, flusher=self._flusher, clock=self._clock,
                                checkpoint_interval_ms=self._checkpoint_interval_ms, on_fence=self._on_fence)
        if log.statistics().unverified_segments:
            self._scrubber.nudge()  # verify them in the background before a reader needs them
        return log

    def load_existing(self) -> list[PartitionLog]:
        """Open (and recover) every `<topic>-<partition>` directory under the log dirs."""
        opened = []
        with self._lock:
            for log_dir in self.log_dirs:
                for name in self._files.listdir(log_dir):
                    path = os.path.join(log_dir, name)
                    if not os.path.isdir(path):
                        continue
                    try:
                        key = parse_partition_dir(name)
                    except InvalidTopicName:
                        logger.warning("skipping %s: not a <topic>-<partition> directory", path)
                        continue
                    if key not in self._logs:
                        self._logs[key] = self._open(path, None)
                        opened.append(self._logs[key])
        return opened

    def get_or_create(self, topic: str, partition: int, overrides: Mapping[str, Any] | None = None) -> PartitionLog:
        """The log of (topic, partition), created in the emptiest log dir if it does not exist."""
        with self._lock:
            self._check_open()
            log = self._logs.get((topic, partition))
            if log is None:
                name = partition_dir_name(topic, partition)
                log = self._open(os.path.join(self._emptiest_dir(), name), overrides)
                self._logs[(topic, partition)] = log
            return log

    def _emptiest_dir(self) -> str:
        counts = {d: 0 for d in self.log_dirs}
        for log in self._logs.values():
            parent = os.path.dirname(log.directory)
            counts[parent] = counts.get(parent, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def logs(self) -> list[PartitionLog]:
        with self._lock:
            return list(self._logs.values())

    def delete(self, topic: str, partition: int | None = None) -> int:
        """Delete one partition's log, or every partition of `topic` when `partition` is None; return how many."""
        with self._lock:
            keys = [k for k in self._logs if k[0] == topic and (partition is None or k[1] == partition)]
            for key in keys:
                self._logs.pop(key).delete()
            return len(keys)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """One retention pass over every log (what the background thread runs); returns segments deleted."""
        deleted = 0
        for log in self.logs():
            try:
                deleted += log.enforce_retention(now_ms)
            except LogClosedError:
                continue  # deleted meanwhile
            except Exception:
                logger.exception("retention of %s failed", log.name)
        self._retention_runs += 1
        self._deleted_segments += deleted
        return deleted

    def _retention_loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.enforce_retention()

    def flush(self) -> None:
        for log in self.logs():
            log.flush()

    def close(self) -> None:
        """Stop the retention thread and the scrubber, flush and close every log, then stop the flusher."""
        self._stop.set()
        self._scrubber.close()
        self.cleaner.close()
        if self._retention_thread is not threading.current_thread():
            self._retention_thread.join()
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._logs.clear()
        self._flusher.close()

    def _check_open(self) -> None:
        if self._stop.is_set():
            raise LogClosedError("the log manager is closed")

    def scrubber_statistics(self) -> ScrubberStatistics:
        return self._scrubber.statistics()

    def statistics(self) -> LogManagerStatistics:
        logs = self.logs()
        return LogManagerStatistics(
            len(self.log_dirs), len(logs), sum(len(log.segments) for log in logs),
            sum(log.size_bytes for log in logs), self._retention_runs, self._deleted_segments,
            sum(len(log.fenced_ranges()) for log in logs), self._scrubber.statistics(), self.cleaner.statistics(),
        )

    def __enter__(self) -> "LogManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
