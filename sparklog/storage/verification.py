"""SegmentVerifier: a loaded segment verified whole before its first use, and the scrubber's passes.

Rule: verify-before-first-use: a segment that was only loaded (its index trusted) is verified whole
(CRC-32C and structure) before its first use (a read, a time lookup, retention, truncation), by whichever
comes first of a reader (in its own thread) and the background scrubber (scrubber.py), which the LogManager
nudges when it opens such a log and which also re-verifies flushed segments periodically. A reader on an
event loop asks `needs_verification(offset)` (a read) or `has_unverified_segments()` (a time lookup) first
and runs `verify_at(offset)` or `verify_for_time_lookup()` on a thread, so the loop never replays a segment.
Damage found is fenced by the loader's repair (log_loader.py, Rule: bit-rot-fenced).
"""

from __future__ import annotations

import logging
from typing import Callable

from sparklog.storage.errors import LogClosedError
from sparklog.storage.log_loader import LogLoader
from sparklog.storage.log_owner import VerifierOwner
from sparklog.storage.recovery import INT64_MAX, ReadAt, ValidPrefix
from sparklog.storage.segment import LogSegment

logger = logging.getLogger(__name__)


class SegmentVerifier:
    """The verification of one log's segments; the log's state is read through it (no state of its own)."""

    def __init__(self, log: VerifierOwner, loader: LogLoader):
        self._log = log
        self._loader = loader  # its repair fences what a replay found damaged (Rule: bit-rot-fenced)

    def needs_verification(self, offset: int) -> bool:
        """Whether a read at `offset` would first replay a loaded segment (cheap: no I/O, no lock)."""
        log = self._log
        segment = log._segment_set.holding(offset)
        return segment is not None and not segment.verified

    def verify_at(self, offset: int) -> int:
        """Verify the segment a read at `offset` starts in, if it is not yet (blocking: call it off an event
        loop); returns the bytes replayed."""
        log = self._log
        segment = log._segment_set.holding(offset)
        return self.verify(segment) if segment is not None and not segment.verified else 0

    def has_unverified_segments(self) -> bool:
        """Whether a time lookup may first replay loaded segments (cheap: no I/O, no lock);
        `verify_for_time_lookup()` verifies them."""
        log = self._log
        return log._segment_set.time_bounds_of(log._segments) is None

    def verify_for_time_lookup(self) -> int:
        """Verify every segment `offset_for_timestamp` would replay first (blocking: call it off an event
        loop); returns the bytes replayed. Not `scrub(None, True)`: that skips the active segment and the
        closed ones not yet flushed, which the lookup then replayed on the caller's loop."""
        log = self._log
        replayed = 0
        for segment in log._segments:
            if log._closed or segment.base_offset >= log._visibility.hw.offset:
                break
            if not segment.verified:
                replayed += self.verify(segment)
        return replayed

    def scrub(self, throttle: Callable[[int], None] | None = None, unverified_only: bool = False) -> int:
        """Verify every flushed closed segment whole (or only those not yet verified since the log opened),
        unverified ones first; return the bytes replayed.

        What the scrubber runs; `throttle(n)` is called after each read of n bytes and may sleep.
        """
        log = self._log
        segments = log._segments
        todo = sorted((s for s in segments[:-1] if s.next_offset <= log._recovery_point
                       and not (unverified_only and s.verified)), key=lambda s: s.verified)
        replayed = 0
        for segment in todo:
            if log._closed:
                break
            replayed += self.verify(segment, throttle)
        return replayed

    def verify(self, segment: LogSegment, throttle: Callable[[int], None] | None = None) -> int:
        """Replay `segment` whole; rebuild indexes that disagree with it (before its first use only: later
        the in-memory ones are the truth) and fence damage (Rule: bit-rot-fenced). Returns the bytes replayed.

        The replay takes no lock, so a reader never waits for the scrubber's throttled pass (both may
        replay the same segment); repairs are serialized by the flush lock and re-checked under it.
        """
        log = self._log
        if log._closed or segment not in log._segments:
            return 0
        first_use = not segment.verified
        try:
            with segment.pinned():
                prefix, agrees = segment.scan(_throttled(segment._read_at, throttle), check_indexes=first_use)
        except LogClosedError:
            return 0  # deleted meanwhile (retention, truncation): a reader looks again
        log._verified_bytes += prefix.truncate_at
        if prefix.clean and agrees:
            segment.verified = True
            return prefix.truncate_at
        with log._flush_lock:
            if not log._closed and segment in log._segments:
                self._repair(segment, prefix, first_use and not segment.verified)
        return prefix.truncate_at

    def _repair(self, segment: LogSegment, prefix: ValidPrefix, first_use: bool) -> None:
        """Under the flush lock: another replay may have repaired `segment` since this one looked."""
        log = self._log
        if not first_use and prefix.truncate_at >= segment.size:
            return  # already cut there
        if first_use:  # no reader has used it yet: rebuild its indexes from the file
            logger.warning("%s: the index files of segment %d disagree with its batches; rebuilt them",
                           log.name, segment.base_offset)
            prefix = segment.recover(INT64_MAX)
            segment.flush()
        if not prefix.clean:
            segments = log._segments
            i = segments.index(segment)
            bound = segments[i + 1].base_offset if i + 1 < len(segments) else None
            self._loader.fence_damage(segment, prefix, log._recovery_point, bound,
                                       lambda added: self._insert_after(segment, added))

    def _insert_after(self, segment: LogSegment, added: list[LogSegment]) -> None:
        log = self._log
        with log._lock:
            log._segment_set.insert_after(segment, added)


def _throttled(read_at: ReadAt, throttle: Callable[[int], None] | None) -> ReadAt:
    if throttle is None:
        return read_at

    def read(position: int, length: int) -> bytes:
        data = read_at(position, length)
        throttle(len(data))  # what was read: replay asks for 1 MiB windows, most segments end sooner
        return data

    return read
