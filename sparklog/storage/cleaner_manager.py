"""CleanerManager: the log cleaner threads of one process (Kafka's LogCleaner and LogCleanerManager): which
log to clean next, with which offset map, how fast, and what each clean did.

Rule: compaction-candidate: a log is a candidate when its cleanup.policy includes `compact` and its cleanable range
(cleaner.py Rule: clean-range) has a dirty ratio of at least min.cleanable.dirty.ratio, or its first dirty record is
older than max.compaction.lag.ms, or (KIP-534, cleaner.py Rule: clean-for-delete-horizon) the earliest delete horizon
of the tombstones its last clean left has passed, whatever its dirty ratio; each pick takes the candidate with
the highest dirty ratio (a log past its max lag first, then one past a delete horizon) that no other
thread is cleaning. Before that, an active segment past its roll deadline
is rolled (`PartitionLog.roll_if_due`, log.py Rule: compaction-lag-roll): Kafka rolls only at an append, so there a
partition that went idle keeps its last records uncleanable however old they get.
Rule: cleaner-threads: `log.cleaner.threads` threads (Kafka's default 1), each with its own OffsetMap of
log.cleaner.dedupe.buffer.size / threads bytes, allocated once, at the first clean (a broker without a
compacted topic never pays for it). A thread with nothing to clean sleeps
log.cleaner.backoff.ms (Kafka's 15 s), or until `wake()` (a config change, a test).
Rule: cleaner-io-throttled: every thread reads and writes through one Throttle of log.cleaner.io.max.bytes.per.second
(Kafka's default: unthrottled). Appends and fetches never wait for a clean: it runs in these threads and
takes a log's lock only for the swap's renames (log.py Rule: cleaned-swap), and the interpreter lock only between
compiled calls of a read buffer each (cleaner.py Rule: sweep-in-windows). What is left is the CPU: each cleaner thread
lowers its own scheduling priority by CLEANER_NICE_INCREMENT (on Linux, where nice is per thread), so that
on busy cores the request threads run first, and on idle ones the clean runs at full speed (not a
bytes-per-second cap, which slows it on idle cores too). Measured by benchmarks/compaction.py part 3.
Rule: failed-clean-backs-off: a clean that fails (corrupt batch, I/O error, map too small) is logged and counted; that
log is skipped until its next backoff; the others go on. close() stops the threads within one throttle sleep and
abandons a clean in progress (its `.cleaned` files are deleted, or on the next open).
Rule: cleaner-last-run: `last_run(log)` is the last CleanResult of a log and `dirty_ratio(log)` its present ratio, for
`sparklog topics describe`; `statistics()` sums every run.

Settings (broker properties, Kafka's names): log.cleaner.enable, log.cleaner.threads,
log.cleaner.dedupe.buffer.size, log.cleaner.io.buffer.load.factor, log.cleaner.io.max.bytes.per.second,
log.cleaner.backoff.ms. The per-topic ones (cleanup.policy, min.cleanable.dirty.ratio, *.compaction.lag.ms,
delete.retention.ms) are in storage/config.py.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

from sparklog.settings import BOOLEAN, DOUBLE, INT, LONG, Definitions, Setting
from sparklog.storage.cleaner import NO_HORIZON, CleanableRange, Cleaner, CleanResult, cleanable_range
from sparklog.storage.config import CLEANUP_COMPACT
from sparklog.storage.errors import InvalidConfigError, LogClosedError
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.log import PartitionLog
from sparklog.storage.offset_map import DEFAULT_DEDUPE_BUFFER_SIZE, DEFAULT_LOAD_FACTOR, OffsetMap
from sparklog.storage.throttle import Stopped, Throttle

logger = logging.getLogger(__name__)

DEFAULT_CLEANER_ENABLE = True  # log.cleaner.enable: Kafka's true
DEFAULT_CLEANER_THREADS = 1  # log.cleaner.threads: Kafka's 1
DEFAULT_IO_MAX_BYTES_PER_SECOND = sys.float_info.max  # log.cleaner.io.max.bytes.per.second: Kafka's Double.MAX_VALUE
DEFAULT_BACKOFF_MS = 15_000  # log.cleaner.backoff.ms: Kafka's 15 s
# Ours (Kafka's cleaner threads run at the JVM's normal priority): nice 19, the lowest, weighs the thread at
# 15/1024 of a normal one when the cores are contended (it still progresses there), and on idle cores the
# clean runs at full speed (Rule: cleaner-io-throttled). Measured by `benchmarks/compaction.py --size-mb 1024
# [--cleaner-nice N]` on 2 shared cores at load 16-21 (median of 8 pairs of produce while cleaning / alone; the cleaner's read
# rate meanwhile): nice 0: 0.49 at 92 MB/s; nice 10: 0.81, 0.90, 0.85 in three runs at 17-25 MB/s; nice 19:
# 1.09, 0.86, 1.02 at 6-8 MB/s. Single pairs range over 0.57-2.08 whatever the nice: the cores' noise.
CLEANER_NICE_INCREMENT = 19
MAX_NICE = 19  # Linux's lowest priority


def _a_load_factor(value: float) -> str | None:
    return None if 0 < value <= 1 else "must be in (0, 1]"


def _a_positive_rate(value: float) -> str | None:
    return None if value > 0 else "must be > 0"
CLEANER_SETTINGS = Definitions("log cleaner", (
    Setting("log.cleaner.enable", BOOLEAN, DEFAULT_CLEANER_ENABLE, "run the log cleaner (compacted topics)"),
    Setting("log.cleaner.threads", INT, DEFAULT_CLEANER_THREADS, "cleaner threads", low=1),
    Setting("log.cleaner.dedupe.buffer.size", LONG, DEFAULT_DEDUPE_BUFFER_SIZE,
            "memory of the offset maps over all cleaner threads (at least 1024 bytes a thread)", low=1024),
    Setting("log.cleaner.io.buffer.load.factor", DOUBLE, DEFAULT_LOAD_FACTOR,
            "how full an offset map may get before a clean stops there", rule=_a_load_factor),
    Setting("log.cleaner.io.max.bytes.per.second", DOUBLE, DEFAULT_IO_MAX_BYTES_PER_SECOND,
            "the cleaner's read plus write rate (the default: unthrottled)", rule=_a_positive_rate),
    Setting("log.cleaner.backoff.ms", LONG, DEFAULT_BACKOFF_MS, "sleep between cleans when no log is cleanable",
            low=0),
), error=InvalidConfigError)


def _lower_priority() -> None:
    """Rule: cleaner-io-throttled for the calling thread; elsewhere than Linux (where nice is per process) nothing."""
    if not sys.platform.startswith("linux"):
        return
    thread = threading.get_native_id()
    try:
        nice = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(MAX_NICE, nice + CLEANER_NICE_INCREMENT))
    except OSError:  # a sandbox may forbid it: the clean runs at the process's priority
        logger.debug("could not lower the cleaner thread's priority", exc_info=True)


@dataclass(frozen=True)
class CleanerConfig:
    enable: bool = DEFAULT_CLEANER_ENABLE
    threads: int = DEFAULT_CLEANER_THREADS
    dedupe_buffer_size: int = DEFAULT_DEDUPE_BUFFER_SIZE
    load_factor: float = DEFAULT_LOAD_FACTOR
    io_max_bytes_per_second: float = DEFAULT_IO_MAX_BYTES_PER_SECOND
    backoff_ms: int = DEFAULT_BACKOFF_MS

    def __post_init__(self) -> None:
        CLEANER_SETTINGS.check_all((self.enable, self.threads, self.dedupe_buffer_size, self.load_factor,
                                    self.io_max_bytes_per_second, self.backoff_ms))
        if self.dedupe_buffer_size // self.threads < 1024:
            raise InvalidConfigError("log.cleaner.dedupe.buffer.size must be at least 1024 bytes per cleaner "
                                     f"thread, not {self.dedupe_buffer_size} for {self.threads} threads")

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "CleanerConfig":
        """From broker properties; missing keys take the defaults, bad values raise InvalidConfigError."""
        return cls(*CLEANER_SETTINGS.values_of(props))


@dataclass(frozen=True)
class CleanerStatistics:
    runs: int  # cleans completed
    errors: int  # cleans that failed
    bytes_read: int
    bytes_written: int
    records_removed: int
    offset_map_bytes: int  # memory of every thread's offset map


class CleanerManager:
    """Runs the cleaner threads over `logs()` (a callable, so logs created later are included)."""

    def __init__(self, logs: Callable[[], Iterable[PartitionLog]], config: CleanerConfig | None = None, *,
                 files: Files | None = None, clock: Callable[[], int] | None = None):
        self._logs = logs
        self.config = config = config or CleanerConfig()
        self._files = files or OS_FILES
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._in_progress: set[str] = set()
        self._failed: dict[str, float] = {}  # log name -> when it may be tried again (Rule: failed-clean-backs-off)
        self._last: dict[str, CleanResult] = {}
        self._totals = dict(runs=0, errors=0, bytes_read=0, bytes_written=0, records_removed=0)
        self._throttle = Throttle(config.io_max_bytes_per_second, self._stop)
        self._throttle_lock = threading.Lock()
        per_thread = config.dedupe_buffer_size // config.threads
        self._cleaners = [Cleaner(lambda: OffsetMap(per_thread, config.load_factor), self._files, self._consume,
                                  self._clock) for _ in range(config.threads)] if config.enable else []
        self._threads = [threading.Thread(target=self._loop, args=(c,), name=f"sparklog-cleaner-{i}", daemon=True)
                         for i, c in enumerate(self._cleaners)]

    def start(self) -> "CleanerManager":
        for thread in self._threads:
            thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join()

    def _consume(self, n: int) -> None:
        with self._throttle_lock:
            self._throttle.consume(n)

    # -- choosing (Rule: compaction-candidate) -------------------------------------------------------------------------

    def _candidates(self) -> list[tuple[bool, bool, float, PartitionLog, CleanableRange]]:
        now, mono = self._clock(), time.monotonic()
        found = []
        for log in list(self._logs()):
            config = log.config
            if CLEANUP_COMPACT not in config.cleanup_policies or log.closed or self._failed.get(log.name, 0) > mono:
                continue
            try:
                log.roll_if_due()  # an idle partition's records past max.compaction.lag.ms become cleanable
                span = cleanable_range(log, now)
            except (LogClosedError, OSError):
                continue
            if span is None:
                continue
            horizon_passed = self._horizon_passed(log, now)
            if span.first_dirty >= span.end and not horizon_passed:
                continue
            overdue = 0 <= span.first_dirty_timestamp < now - config.max_compaction_lag_ms
            if overdue or horizon_passed or (span.first_dirty < span.end
                                             and span.dirty_ratio >= config.min_cleanable_dirty_ratio):
                found.append((overdue, horizon_passed, span.dirty_ratio, log, span))
        return sorted(found, key=lambda c: c[:3], reverse=True)

    def _horizon_passed(self, log: PartitionLog, now: int) -> bool:
        """Rule: compaction-candidate's KIP-534 case: a tombstone left by the log's last clean is past its delete
        horizon (the cleaner removes one when its time is after the horizon)."""
        last = self._last.get(log.name)
        return last is not None and last.earliest_delete_horizon != NO_HORIZON and now > last.earliest_delete_horizon

    def _grab(self) -> tuple[PartitionLog, CleanableRange, bool] | None:
        with self._lock:
            for _, horizon_passed, _, log, span in self._candidates():
                if log.name not in self._in_progress:
                    self._in_progress.add(log.name)
                    return log, span, horizon_passed
        return None

    # -- cleaning ----------------------------------------------------------------------------------

    def clean_once(self, cleaner: Cleaner | None = None) -> CleanResult | None:
        """Pick the dirtiest log and clean it in this thread (what each cleaner thread runs); None when no log
        is due. Raises what the clean raised, after recording it (Rule: failed-clean-backs-off)."""
        picked = self._grab() if self._cleaners else None
        if picked is None:
            return None
        log, span, horizon_passed = picked
        cleaner = cleaner or self._cleaners[0]
        try:
            result = cleaner.clean(log, span, horizon_passed=horizon_passed)
        except (Stopped, LogClosedError):
            raise
        except Exception:
            with self._lock:
                self._totals["errors"] += 1
                self._failed[log.name] = time.monotonic() + self.config.backoff_ms / 1000
            raise
        finally:
            with self._lock:
                self._in_progress.discard(log.name)
        if result is not None:
            self._record(log, result)
        return result

    def _record(self, log: PartitionLog, result: CleanResult) -> None:
        with self._lock:
            self._last[log.name] = result
            totals = self._totals
            totals["runs"] += 1
            totals["bytes_read"] += result.bytes_read
            totals["bytes_written"] += result.bytes_written
            totals["records_removed"] += result.records_removed
        logger.info("%s: cleaned offsets [%d, %d): %d of %d records removed, %d -> %d bytes in %.2f s",
                    log.name, result.first_dirty, result.end, result.records_removed, result.records_read,
                    result.bytes_read, result.bytes_written, result.duration_s)

    def _loop(self, cleaner: Cleaner) -> None:
        _lower_priority()
        backoff_s = self.config.backoff_ms / 1000
        while not self._stop.is_set():
            try:
                result = self.clean_once(cleaner)
            except (Stopped, LogClosedError):
                result = None
            except Exception:
                logger.exception("the log cleaner failed; that log is skipped for log.cleaner.backoff.ms")
                result = None
            if result is None:
                self._wake.wait(backoff_s)
                self._wake.clear()

    # -- reporting (Rule: cleaner-last-run) ------------------------------------------------------------------------

    def last_run(self, log: PartitionLog) -> CleanResult | None:
        return self._last.get(log.name)

    def dirty_ratio(self, log: PartitionLog) -> float | None:
        """The present dirty ratio of a compacted log (None for a log that is not compacted)."""
        if CLEANUP_COMPACT not in log.config.cleanup_policies:
            return None
        span = cleanable_range(log, self._clock())
        return 0.0 if span is None else span.dirty_ratio

    def statistics(self) -> CleanerStatistics:
        with self._lock:
            t = dict(self._totals)
        return CleanerStatistics(t["runs"], t["errors"], t["bytes_read"], t["bytes_written"], t["records_removed"],
                                 sum(c.map_bytes for c in self._cleaners))
