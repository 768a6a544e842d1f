"""LogSegments: a partition log's segments as one copy-on-write tuple, and what reads find in them.

Rule: segments-copy-on-write: the tuple (and its base offsets) is replaced whole, never changed in place, on
roll, retention, truncation, fencing and a cleaner's swap; a reader takes `snapshot` (both at once) and
never takes the writer's lock. A read that met the tuple changing under it looks again (PartitionLog.read).
Rule: one-read-one-segment: one read returns a byte range of one segment, on batch boundaries, ending at
the visibility mark it was given, and at least one whole batch when one is visible (KIP-74).
Rule: retention-whole-segments: retention deletes whole segments below the high watermark past retention.ms
(a segment's age is that of its largest timestamp, or of its file's last modification when none of its
batches has one) or beyond retention.bytes, the active one too once all of it is below the HW (a new one
rolled first, as Kafka's); only when cleanup.policy includes `delete`.
The tuple is changed only under the log's append lock; these methods read whatever tuple they are given or
the current one, and verify a segment before its first use through the `verify` callback
(Rule: verify-before-first-use).
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from typing import Callable, ContextManager, Iterator

from sparklog.records.batch import NO_TIMESTAMP, BatchHeader
from sparklog.storage.config import CLEANUP_DELETE, LogConfig
from sparklog.storage.errors import CorruptSegmentError, LogClosedError
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.flusher import Flusher
from sparklog.storage.segment import LogSegment, TimestampOffset
from sparklog.storage.time_bounds import TimeBounds
from sparklog.storage.visibility import Visible

logger = logging.getLogger(__name__)

Snapshot = tuple[tuple[LogSegment, ...], tuple[int, ...]]
Verify = Callable[[LogSegment], int]


class FileSlice:
    """A byte range of one segment file: what a fetch sends with os.sendfile(sock, fd, position, length).

    It stays usable after the segment is deleted by retention for file.delete.delay.ms (the file is only
    renamed to `.deleted` until then); after that, or after the log is closed, using it raises
    LogClosedError.

    The descriptor rule: use the descriptor only inside `with piece.pinned() as fd:` (read_bytes() and
    send_to() do).
    A pinned segment's descriptor is not closed until the block ends, so it cannot be a number that a
    concurrent close released and another open() reused. `fileno()` returns the bare number for callers
    that cannot pin; it is only safe while the log is known to stay open (not across retention's
    delayed delete or close()). Pinning costs one uncontended lock round trip, not a dup().
    """

    __slots__ = ("path", "position", "length", "_segment")

    def __init__(self, segment: LogSegment, position: int, length: int):
        self.path = segment.path
        self.position = position
        self.length = length
        self._segment = segment

    def fileno(self) -> int:
        if self._segment.closed:
            raise LogClosedError(f"the segment file {self.path} was closed")
        return self._segment.fd

    def pinned(self) -> ContextManager[int]:
        """Context manager giving the segment's descriptor, kept open (and this file's) until the block ends."""
        return self._segment.pinned()

    def send_to(self, out_fd: int, start: int, count: int) -> int:
        """os.sendfile of `count` bytes from `start` (relative to the slice) to `out_fd`, under the pin: what
        the server's Fetch path calls once per response, so it costs one call, not a context manager.
        Raises LogClosedError (the segment was closed) or the sendfile's OSError (BlockingIOError included)."""
        segment = self._segment
        fd = segment.pin()
        try:
            return os.sendfile(out_fd, fd, self.position + start, count)
        finally:
            segment.unpin()

    def read_bytes(self) -> bytes:
        if not self.length:
            return b""
        with self._segment.pinned() as fd:
            return OS_FILES.pread(fd, self.length, self.position)

    def offset_after(self) -> int:
        """The offset of the first batch after this slice (a reader's next position)."""
        segment, end = self._segment, self.position + self.length
        next_offset = segment.next_offset  # read before size: append sets size first, then next_offset
        if end < segment.size:
            return segment.read_header(end).base_offset
        return next_offset

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileSlice({self.path!r}, position={self.position}, length={self.length})"


class LogSegments:
    """The segment tuple of one log (Rule: segments-copy-on-write)."""

    __slots__ = ("segments", "bases", "snapshot", "time_bounds", "directory_dirty", "rolls", "deleted",
                 "on_change", "_directory", "_files", "_flusher", "_clock")

    def __init__(self, directory: str, files: Files, flusher: Flusher, clock: Callable[[], int]) -> None:
        self.segments: tuple[LogSegment, ...] = ()
        self.bases: tuple[int, ...] = ()
        self.snapshot: Snapshot = ((), ())  # both, swapped at once
        self.time_bounds: TimeBounds | None = None  # for the latest tuple whose segments were all verified
        self.directory_dirty = True  # segment files created or renamed since the last fsync of the directory
        self.rolls = self.deleted = 0
        self.on_change: Callable[[tuple[int, ...]], None] | None = None  # the new bases, after every change
        self._directory, self._files, self._flusher, self._clock = directory, files, flusher, clock

    # -- changing the tuple (under the log's append lock) -------------------------------------------

    def set(self, segments: tuple[LogSegment, ...]) -> None:
        self.segments = segments
        self.bases = tuple(s.base_offset for s in segments)
        self.snapshot = (segments, self.bases)
        if self.on_change is not None:  # the aborted-transaction index follows its segments (txn_index.py)
            self.on_change(self.bases)

    def roll(self, leo: int, config: LogConfig) -> LogSegment:
        """A new active segment at `leo`, the old one's time index sealed."""
        self.segments[-1].seal_time_index()
        segment = LogSegment(self._directory, leo, config, self._files, self._clock())
        self.set(self.segments + (segment,))
        self.directory_dirty = True
        self.rolls += 1
        return segment

    def insert_after(self, segment: LogSegment, added: list[LogSegment]) -> None:
        i = self.segments.index(segment) + 1
        self.set(self.segments[:i] + tuple(added) + self.segments[i:])
        self.directory_dirty = True

    def drop_head(self, doomed: list[LogSegment]) -> None:
        """Retire the first segments `doomed` (retention, DeleteRecords)."""
        if doomed:
            self.set(self.segments[len(doomed):])
            self.retire(doomed)

    def restart_at(self, offset: int, config: LogConfig) -> list[LogSegment]:
        """Retire every segment and start again with an empty one at `offset`; the segments retired."""
        doomed = list(self.segments)
        self.retire(doomed)  # first: the fresh segment may reuse a doomed one's name
        self.set((LogSegment(self._directory, offset, config, self._files, self._clock()),))
        self.directory_dirty = True
        return doomed

    def truncate(self, offset: int) -> list[LogSegment]:
        """Cut the segments to the batches below `offset` (above the first segment's base); those retired."""
        keep = tuple(s for s in self.segments if s.base_offset < offset)
        doomed = [s for s in self.segments if s.base_offset >= offset]
        self.retire(doomed)
        keep[-1].truncate_to_offset(offset)
        self.set(keep)
        return doomed

    def replace(self, i: int, old: tuple[LogSegment, ...], cleaned: LogSegment) -> None:
        """`cleaned` (committed as `.swap`) takes the place of the run `old` starting at index i."""
        self.retire(list(old))
        cleaned.rename_files("")
        self.set(self.segments[:i] + (cleaned,) + self.segments[i + len(old):])
        self.directory_dirty = True

    def retire(self, segments: list[LogSegment]) -> None:
        """Rename to `.deleted` at once (a new segment may reuse the name); see schedule_deletes."""
        for segment in segments:
            segment.rename_deleted()
        self.directory_dirty = self.directory_dirty or bool(segments)
        self.deleted += len(segments)

    def schedule_deletes(self, segments: list[LogSegment], delay_ms: int) -> None:
        """Remove the files after file.delete.delay.ms, so that slices already handed out stay readable."""
        for segment in segments:
            if delay_ms == 0:
                segment.delete_files()
            else:
                self._flusher.call_later(delay_ms / 1000, segment.delete_files)

    def run_of(self, old: tuple[LogSegment, ...]) -> int | None:
        """Where the consecutive segments `old` start among the live ones, not counting the active one's
        run; None when they are not such a run (a cleaner's swap came too late)."""
        segments = self.segments
        if not old or old[0] not in segments:
            return None
        i = segments.index(old[0])
        if segments[i:i + len(old)] != old or i + len(old) == len(segments):
            return None
        return i

    # -- finding -----------------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    def holding(self, offset: int) -> LogSegment | None:
        segments, bases = self.snapshot
        index = bisect_right(bases, offset) - 1
        return segments[index] if index >= 0 else None

    def visible_at(self, offset: int) -> Visible:
        """Where `offset` is in the files, as a batch boundary at or below it."""
        segment = self.segments[max(0, bisect_right(self.bases, offset) - 1)]
        if offset >= segment.next_offset:
            return Visible(segment.next_offset, segment.base_offset, segment.size)
        position = segment.find_batch(offset, segment.size)
        assert position is not None  # offset is below the segment's next offset
        return Visible(segment.read_header(position).base_offset, segment.base_offset, position)

    def end(self, leo: int) -> Visible:
        """The log end `leo` as a Visible: the end of the active segment."""
        active = self.segments[-1]
        return Visible(leo, active.base_offset, active.size)

    def first_unflushed_index(self, recovery_point: int) -> int:
        """Segments before this one are fsynced whole, their sealed time index included: a flush skips them.

        The segment holding the recovery point and the one before it (whose time index a roll just
        sealed) are the earliest that may have unflushed bytes or index entries.
        """
        return max(0, bisect_right(self.bases, recovery_point) - 2)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- reading (Rule: one-read-one-segment) -------------------------------------------------------

    @staticmethod
    def slice_from(snapshot: Snapshot, offset: int, max_bytes: int, hw: Visible, limit: int,
                   verify: Verify | None) -> FileSlice | None:
        """The slice a read at `offset` returns from `snapshot`, below `limit` (at most `hw.offset`); None when
        it had to verify a segment first (then look again). `verify` None: the segments are trusted."""
        segments, bases = snapshot
        for segment in segments[max(0, bisect_right(bases, offset) - 1):]:
            if offset >= limit or segment.base_offset >= limit:
                break
            if verify is not None and not segment.verified:
                verify(segment)
                return None
            end = LogSegments.visible_end(segment, hw, limit)
            position = segment.find_batch(offset, end)
            if position is not None:
                return FileSlice(segment, position, LogSegments.slice_end(segment, position, end, max_bytes) - position)
        return FileSlice(segments[-1], 0, 0)

    @staticmethod
    def visible_end(segment: LogSegment, hw: Visible, limit: int) -> int:
        if segment.base_offset > hw.segment_base:
            return 0
        end = hw.position if segment.base_offset == hw.segment_base else segment.size
        if limit < hw.offset and limit < segment.next_offset:
            capped = segment.find_batch(limit, end)  # the batch holding `limit` is excluded
            end = end if capped is None else capped
        return end

    @staticmethod
    def slice_end(segment: LogSegment, position: int, end: int, max_bytes: int) -> int:
        if position + max_bytes >= end:
            return end
        boundary = segment.boundary_at_or_below(position, position + max_bytes)
        if boundary == position:  # KIP-74: one whole batch even when it is larger than max_bytes
            boundary = position + segment.batch_size_at(position)
        return boundary

    def headers_from(self, offset: int, name: str) -> Iterator[BatchHeader]:
        """The headers of the batches from `offset` (a batch boundary) to the LEO, across segments.

        Each header is checked against the offset chain (a segment not yet verified whole may hold bit rot,
        Rule: verify-before-first-use): the walk leaves a segment at the first header that does not fit, which the verification
        then fences; the producers of those batches are as unknown as the batches."""
        for segment in self.segments:
            if segment.next_offset <= offset:
                continue
            end = segment.size
            try:
                position = segment.find_batch(offset, end) if offset > segment.base_offset else 0
                if position is None:
                    continue
                expected = segment.read_header(position).base_offset if position else segment.base_offset
                while position < end:
                    header = segment.checked_header(position, expected, end)
                    yield header
                    position, expected = position + header.size, header.next_offset
            except CorruptSegmentError as exc:
                logger.warning("%s: producer state replay stopped in segment %d: %s", name,
                               segment.base_offset, exc)

    def read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of the batch `header` (one headers_from gave) describes: a marker the replay reads."""
        segment = self.segments[max(0, bisect_right(self.bases, header.base_offset) - 1)]
        position = segment.find_batch(header.base_offset, segment.size)
        assert position is not None  # headers_from read this batch in this segment
        return segment._read_exact(position, header.size)

    # -- time lookups ------------------------------------------------------------------------------

    def offset_for_timestamp(self, timestamp: int, hw: Visible, log_start: int,
                             verify: Verify) -> TimestampOffset | None:
        """The first record below `hw` whose timestamp is >= `timestamp`, or None (see PartitionLog)."""
        while True:
            found = self._find_timestamp(timestamp, hw, log_start, verify)
            if not isinstance(found, LogSegments):  # self: a segment was verified first, look again
                return found

    def _find_timestamp(self, timestamp: int, hw: Visible, log_start: int,
                        verify: Verify) -> TimestampOffset | LogSegments | None:
        segments = self.segments
        bounds = self.time_bounds_of(segments)
        first = 0 if bounds is None else bounds.first_candidate(timestamp)
        for i in range(first, len(segments)):
            segment = segments[i]
            if segment.base_offset >= hw.offset:
                break
            if not segment.verified:
                verify(segment)
                return self
            if segment.max_timestamp >= timestamp:
                found = segment.find_timestamp(timestamp, self.visible_end(segment, hw, hw.offset))
                if found is not None:  # the batch may straddle a DeleteRecords start
                    return found if found.offset >= log_start else TimestampOffset(found.timestamp, log_start)
        return None

    def time_bounds_of(self, segments: tuple[LogSegment, ...]) -> TimeBounds | None:
        """The TimeBounds of `segments` (the log's tuple), or None while one of them is unverified (its Rule
        1); built once per tuple, so a lookup costs nothing that grows with the number of segments."""
        bounds = self.time_bounds
        if bounds is not None and bounds.segments is segments:
            return bounds
        if not all(segment.verified for segment in segments):
            return None
        self.time_bounds = bounds = TimeBounds(segments)
        return bounds

    def largest_visible_timestamp(self, hw: Visible, verify: Verify) -> int:
        """The largest timestamp below `hw` (NO_TIMESTAMP: none); only the segment the mark cuts may need its
        visible batch headers read, when its largest timestamp lies above the mark."""
        largest, cut = NO_TIMESTAMP, None
        for segment in self.segments:
            if segment.base_offset >= hw.offset:
                break
            if not segment.verified:
                verify(segment)
                return self.largest_visible_timestamp(hw, verify)
            if segment.next_offset > hw.offset:
                cut = segment
            else:
                largest = max(largest, segment.max_timestamp)
        return largest if cut is None else max(largest, self._visible_max_timestamp(cut, hw))

    def _visible_max_timestamp(self, segment: LogSegment, hw: Visible) -> int:
        end = self.visible_end(segment, hw, hw.offset)
        if end >= segment.size:
            return segment.max_timestamp
        largest, position = NO_TIMESTAMP, 0
        while position < end:
            header = segment.read_header(position)
            largest = max(largest, header.max_timestamp)
            position += header.size
        return largest

    # -- retention ---------------------------------------------------------------------------------

    def retention_victims(self, config: LogConfig, hw_offset: int, now: int) -> list[LogSegment]:
        """The oldest whole segments below the HW past retention.ms or beyond retention.bytes (Rule:
        retention-whole-segments); none on a compact-only log (Rule: cleaned-swap)."""
        if CLEANUP_DELETE not in config.cleanup_policies:
            return []  # a compact-only topic keeps every key's last value, however old
        retention_ms, retention_bytes = config.retention_ms, config.retention_bytes
        excess = self.size_bytes - retention_bytes
        victims, active = [], self.segments[-1]
        for segment in self.segments:
            if segment.next_offset > hw_offset or (segment is active and not segment.size):
                break
            by_time = retention_ms >= 0 and now - segment.largest_timestamp > retention_ms
            by_size = retention_bytes >= 0 and excess - segment.size >= 0
            if not (by_time or by_size):
                break
            victims.append(segment)
            excess -= segment.size
        return victims

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self.segments)
