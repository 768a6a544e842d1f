"""Scrubber: the one background thread that re-reads flushed segments and checks every batch in them.

Kafka trusts a segment below its recovery point until a client fails on it; here a throttled pass re-reads
them (CRC-32C and the offset chain, PartitionLog.scrub), so bit rot is fenced before a client meets it.

Rule: scrub-pass: a pass verifies the flushed, closed segments of every log the LogManager holds, those not yet
verified since their log was opened first (log.py Rule: verify-before-first-use); the first pass starts at once, each
next one `interval_ms` after the previous one started (at once if that one ran longer). Between passes, every
UNVERIFIED_CHECK_S, or at once when `nudge()`d (the LogManager does when it opens a log), a short pass
verifies the segments of logs opened since, so that readers rarely pay for a first-use verification.
Rule: scrub-throttled: a pass reads at most `bytes_per_second` (a token bucket, refilled continuously); the fetch path
(sendfile) is untouched, so what the scrub costs is disk bandwidth, shown by benchmarks/storage.py.
Rule: scrub-fences-via-log: damage found is fenced by the log (log.py Rule: bit-rot-fenced), never here; a log that
fails (closed or deleted meanwhile, an I/O error) is counted and logged, and the pass goes on with the next.
Rule: scrub-stops-promptly: close() stops the thread within one throttle sleep; a pass in progress is abandoned.

Settings (broker properties; none has a Kafka equivalent): log.scrubber.enable,
log.scrubber.bytes.per.second, log.scrubber.interval.ms.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from sparklog.settings import BOOLEAN, LONG, Definitions, Setting
from sparklog.storage.errors import InvalidConfigError, LogClosedError
from sparklog.storage.throttle import Stopped as _Stopped
from sparklog.storage.throttle import Throttle as _Throttle

logger = logging.getLogger(__name__)

DEFAULT_SCRUBBER_ENABLE = True
DEFAULT_SCRUBBER_BYTES_PER_SECOND = 16 * 1024 * 1024  # a few percent of one disk's sequential read rate
DEFAULT_SCRUBBER_INTERVAL_MS = 24 * 3600 * 1000  # a pass a day, as Ceph's osd_scrub_min_interval
SCRUBBER_SETTINGS = Definitions("scrubber", (
    Setting("log.scrubber.enable", BOOLEAN, DEFAULT_SCRUBBER_ENABLE, "verify closed segments in the background",
            kafka=""),
    Setting("log.scrubber.bytes.per.second", LONG, DEFAULT_SCRUBBER_BYTES_PER_SECOND, "the scrubber's read rate",
            low=1, kafka=""),
    Setting("log.scrubber.interval.ms", LONG, DEFAULT_SCRUBBER_INTERVAL_MS, "time between scrub passes", low=1,
            kafka=""),
), error=InvalidConfigError)
SCRUBBER_KEYS = tuple(SCRUBBER_SETTINGS)
UNVERIFIED_CHECK_S = 10.0  # how soon the segments of a newly opened log are verified in the background


@dataclass(frozen=True)
class ScrubberConfig:
    enable: bool = DEFAULT_SCRUBBER_ENABLE
    bytes_per_second: int = DEFAULT_SCRUBBER_BYTES_PER_SECOND
    interval_ms: int = DEFAULT_SCRUBBER_INTERVAL_MS

    def __post_init__(self) -> None:
        SCRUBBER_SETTINGS.check_all((self.enable, self.bytes_per_second, self.interval_ms))

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "ScrubberConfig":
        """From broker properties; missing keys take the defaults, bad values raise InvalidConfigError."""
        return cls(*SCRUBBER_SETTINGS.values_of(props))


@dataclass(frozen=True)
class ScrubberStatistics:
    passes: int  # passes completed
    verified_bytes: int  # bytes read and checked by all passes
    errors: int  # logs whose scrub failed (other than being closed meanwhile)


class Scrubber:
    """Runs scrub passes over `logs()` (a callable, so logs created later are included) in one thread."""

    def __init__(self, logs: Callable[[], Iterable[Any]], config: ScrubberConfig, name: str = "sparklog-scrubber"):
        self._logs = logs
        self.config = config
        self._stop = threading.Event()
        self._wake = threading.Event()  # nudge(): verify newly opened logs now
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._passes = 0
        self._verified = 0
        self._errors = 0

    def start(self) -> "Scrubber":
        if self.config.enable:
            self._thread.start()
        return self

    def nudge(self) -> None:
        """Run the short pass over not yet verified segments now (Rule: scrub-pass)."""
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def run_pass(self, unverified_only: bool = False) -> int:
        """One pass over every log (Rule: scrub-pass, Rule: scrub-throttled and Rule: scrub-fences-via-log); returns
        the bytes verified."""
        throttle = _Throttle(self.config.bytes_per_second, self._stop)
        verified = 0
        for log in list(self._logs()):
            try:
                verified += log.scrub(throttle.consume, unverified_only)
            except LogClosedError:
                continue  # deleted or closed meanwhile
            except _Stopped:
                raise
            except Exception:
                self._errors += 1
                logger.exception("scrubbing %s failed", getattr(log, "name", log))
        self._verified += verified
        self._passes += not unverified_only
        return verified

    def statistics(self) -> ScrubberStatistics:
        return ScrubberStatistics(self._passes, self._verified, self._errors)

    def _loop(self) -> None:
        interval_s = self.config.interval_ms / 1000
        next_pass = time.monotonic()
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_pass:
                    next_pass = time.monotonic() + interval_s
                    self.run_pass()
                else:
                    self.run_pass(unverified_only=True)
                self._wake.wait(max(0.0, min(UNVERIFIED_CHECK_S, next_pass - time.monotonic())))
                self._wake.clear()
        except _Stopped:
            return
