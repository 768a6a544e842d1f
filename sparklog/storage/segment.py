"""LogSegment: one `.log` file of whole batches plus its `.index` and `.timeindex`.

A segment is named by its base offset, zero-padded to 20 digits (`00000000000000000000.log`); every batch in
it has a base offset >= that base offset and a last offset < base offset + 2**31 (the index stores int32
relative offsets). Batches are stored exactly as the producer encoded them, with only baseOffset (and the
partition leader epoch) rewritten, so a fetch can send the file's bytes as they are.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from contextlib import contextmanager
from typing import Any, Iterator, NamedTuple

from sparklog.records.append_check import stamp_leader_set
from sparklog.storage.config import INT32_MAX, LogConfig
from sparklog.storage.errors import CorruptIndexError, CorruptSegmentError, LogClosedError
from sparklog.storage.files import Files
from sparklog.storage.index import OFFSET_ENTRY, TIME_ENTRY, OffsetIndex, TimeIndex
from sparklog.records import BytesLike
from sparklog.records.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    NO_TIMESTAMP,
    BatchHeader,
    CorruptRecordError,
    iter_batches,
    parse_header,
    peek_size,
)
from sparklog.records.seek import FOUND, MORE, seek_timestamp
from sparklog.storage.recovery import MIN_BATCH_LENGTH, ReadAt, ValidPrefix, replay

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # Kafka's: a cleaned segment being written; deleted on open
SWAP_SUFFIX = ".swap"  # Kafka's: a cleaned segment committed to replace the ones it covers; completed on open
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
OFFSET_DIGITS = 20  # Kafka's file-name width: every int64 offset fits
SEEK_READ_BYTES = 64 * 1024  # a lookup by time reads the batch that answers it this much at a time


class TimestampOffset(NamedTuple):
    """The answer to a lookup by time (Kafka's ListOffsets): the first record whose timestamp is >= the target."""

    timestamp: int  # that record's timestamp
    offset: int  # that record's offset


class BatchEntry(NamedTuple):
    """What the log tells a segment about each appended batch (offsets already assigned)."""

    position: int  # within the appended bytes
    base_offset: int
    next_offset: int
    max_timestamp: int
    size: int


def segment_file_name(base_offset: int, suffix: str = LOG_SUFFIX) -> str:
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def _live_path(path: str) -> str:
    """A segment file's path without a `.deleted`, `.cleaned` or `.swap` suffix."""
    for suffix in (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def parse_segment_file_name(name: str) -> tuple[int, str] | None:
    """(base offset, suffix) for a segment file name, or None for any other file."""
    stem, dot, ext = name.partition(".")
    if len(stem) != OFFSET_DIGITS or not stem.isdigit() or "." + ext not in SEGMENT_SUFFIXES:
        return None
    return int(stem), "." + ext


def parse_offset_file_name(name: str, suffix: str) -> int | None:
    """The offset `name` holds when it is `<OFFSET_DIGITS digits><suffix>` (a producer-state snapshot, a
    .txnindex), else None."""
    stem, _, ext = name.partition(".")
    if "." + ext != suffix or len(stem) != OFFSET_DIGITS or not stem.isdigit():
        return None
    return int(stem)


class LogSegment:
    """One segment of a partition log.

    Invariants: `size` is the length of the valid prefix of the .log file (recovery truncates anything
    after it); `next_offset` is the offset after its last batch; index entries point at batch starts below
    `size`. Only the log's writer (holding the log's lock) appends or truncates; readers in any thread call
    `find_batch`, `boundary_at_or_below` and `find_timestamp`, which only pread the file and read the
    in-memory indexes. The indexes are not checksummed: they are rebuilt from the log after a crash.

    Verification: `verified` is False for a segment opened with `load()` (its index files were trusted and
    only its tail replayed) until the log has replayed it whole (`scan()`, CRC-32C and structure); readers
    never use an unverified segment. Readers check structure as they walk headers (each base offset is the
    previous batch's next offset, the first is the segment's base, lengths stay inside the valid bytes) and
    raise CorruptSegmentError rather than serve bytes that break it.
    """

    def __init__(self, directory: str, base_offset: int, config: LogConfig, files: Files, created_ms: int,
                 suffix: str = ""):
        """`suffix` names a segment that is not live yet: the cleaner writes `<base>.log.cleaned` (and its
        indexes) and renames them with `rename_files` (`CLEANED_SUFFIX` -> `SWAP_SUFFIX` -> "")."""
        self.base_offset = base_offset
        self.directory = directory
        self.path = os.path.join(directory, segment_file_name(base_offset) + suffix)
        self._files = files
        self._interval = config.index_interval_bytes
        self.fd = files.open(self.path, create=True)
        self.index = OffsetIndex(
            os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX) + suffix),
            base_offset, files, max(1, config.segment_index_bytes // OFFSET_ENTRY.size),
        )
        self.time_index = TimeIndex(
            os.path.join(directory, segment_file_name(base_offset, TIME_INDEX_SUFFIX) + suffix),
            base_offset, files, max(1, config.segment_index_bytes // TIME_ENTRY.size),
        )
        self.created_ms = created_ms
        self._pins = 0  # FileSlice users of `fd` right now: close() leaves the descriptor open until they end
        self._pin_lock = threading.Lock()
        self.roll_at_ms = created_ms + config.segment_ms  # segment.ms: the first append from then on rolls
        self.offset_limit = base_offset + INT32_MAX + 1  # next offsets above this overflow the int32 index
        self.closed = False
        self.verified = True  # a new segment holds only batches whose CRC append() checked
        self._reset(0)

    def _reset(self, flushed_size: int) -> None:
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._offset_of_max_timestamp = self.base_offset
        self._bytes_since_index = 0
        self.flushed_size = flushed_size
        self._count_index_room()

    # -- writing (under the log's lock) ----------------------------------------------------------

    def append(self, data: Any, batches: list[BatchEntry]) -> None:
        """Write `data` (whole batches, offsets assigned) at the end with one write, then index them (the
        cleaner's write of a cleaned segment; appends write with `append_set`)."""
        start = self.size
        try:
            self._files.pwrite(self.fd, data, start)
        except OSError:
            self._cut_failed_write(start)
            raise
        size = len(data)
        for entry in batches:
            self._track(entry.base_offset, entry.max_timestamp, start + entry.position, entry.size)
        self.size = start + size  # size before next_offset: lock-free readers rely on this order
        self.next_offset = batches[-1].next_offset

    def append_batch(self, data: BytesLike, base_offset: int, next_offset: int, max_timestamp: int) -> None:
        """`append` of exactly one batch, its offset stamped already: a lone plain append's write
        (append.py's `AppendPipeline.append`), without a BatchEntry or a compiled walk."""
        position, size = self.size, len(data)
        try:
            self._files.pwrite(self.fd, data, position)
        except OSError:
            self._cut_failed_write(position)
            raise
        if max_timestamp > self.max_timestamp:  # _track, inlined: this runs once per produce request
            self.max_timestamp = max_timestamp
            self._offset_of_max_timestamp = base_offset
        if self._bytes_since_index > self._interval:
            self._add_index_entry(base_offset, position)
        self._bytes_since_index += size
        self.size = position + size
        self.next_offset = next_offset

    def append_set(self, data: bytearray, first_offset: int, leader_epoch: int) -> int:
        """Write a record set of whole, checked batches at the end with one write: its batches get consecutive
        offsets from `first_offset` and `leader_epoch` (KEEP_EPOCH: each keeps its own), stamped in place,
        and are tracked as `_track` tracks them, the walk in one call (append_check.stamp_leader_set);
        returns the next offset. The appends of append.py (every entry point) write here."""
        start = self.size
        next_offset, since, max_timestamp, offset_of_max, points = stamp_leader_set(
            data, first_offset, leader_epoch, self._bytes_since_index, self._interval, self.max_timestamp,
            self._offset_of_max_timestamp)
        try:
            self._files.pwrite(self.fd, data, start)
        except OSError:
            self._cut_failed_write(start)
            raise
        if points:  # one per index.interval.bytes
            index, time_index = self.index, self.time_index
            for base_offset, position, timestamp, timestamp_offset in points:
                room = index.append(base_offset, start + position)
                time_room = time_index.maybe_append(timestamp, timestamp_offset)
            self.index_room = room if room < time_room else time_room
        self.max_timestamp, self._offset_of_max_timestamp = max_timestamp, offset_of_max
        self._bytes_since_index = since
        self.size = start + len(data)  # size before next_offset: lock-free readers rely on this order
        self.next_offset = next_offset
        return next_offset

    def _cut_failed_write(self, position: int) -> None:
        """Drop what a failed write left after the valid bytes (a disk that filled up mid-write): past `size`
        they are harmless only until a roll seals them into a closed segment, which the next open then takes
        for damage (a DATA LOSS report and a fence over bytes that never held an acknowledged record). If
        the cut fails too, recovery truncates them as a torn tail if the segment is still the last one."""
        try:
            self._files.truncate(self.fd, position)
        except OSError as exc:
            logger.warning("%s: could not cut a failed write back to byte %d: %s", self.path, position, exc)

    def _track(self, base_offset: int, max_timestamp: int, position: int, size: int) -> None:
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self._offset_of_max_timestamp = base_offset
        if self._bytes_since_index > self._interval:  # Kafka's rule: strictly more than the interval
            self._add_index_entry(base_offset, position)
        self._bytes_since_index += size

    def _add_index_entry(self, base_offset: int, position: int) -> None:
        room = self.index.append(base_offset, position)
        time_room = self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
        self._bytes_since_index = 0
        self.index_room = room if room < time_room else time_room  # `_count_index_room`, from what each returned

    def _count_index_room(self) -> None:
        """`index_room`: the entries the fuller of the two indexes has left; 0: the next append rolls (a batch
        adds at most one entry to each)."""
        index, time_index = self.index, self.time_index
        self.index_room = min(index.max_entries - len(index), time_index.max_entries - len(time_index))

    def seal_time_index(self) -> None:
        """Make the time index's last entry carry the segment's max timestamp (at flush, roll and close)."""
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._count_index_room()

    @property
    def largest_timestamp(self) -> int:
        """What time-based retention ages: the max timestamp, or the file's mtime when no batch has one.

        Kafka's LogSegment.largestTimestamp: batches without timestamps (all -1, e.g. from old clients) must
        not make a segment look infinitely old, so the last-modified time of the .log file stands in.
        """
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        return self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        """The .log file's last-modified time (Kafka's LogSegment.lastModified)."""
        return self._files.modified_ms(self.fd)

    @property
    def needs_flush(self) -> bool:
        return self.flushed_size < self.size or len(self.index) > self.index._file_entries or (
            len(self.time_index) > self.time_index._file_entries
        )

    def flush(self) -> None:
        """fsync the log, then write and fsync the indexes, so no index entry on disk points at lost bytes."""
        size = self.size
        self._files.fsync(self.fd)
        self.index.flush()
        self.time_index.flush()
        self.flushed_size = max(self.flushed_size, size)

    def truncate_to_offset(self, offset: int) -> None:
        """Drop every batch whose last offset is >= `offset` (a straddling batch goes whole), then reindex."""
        position = self.find_batch(offset, self.size)
        if position is not None:
            self._files.truncate(self.fd, position)
            self.recover()

    # -- loading and recovery ----------------------------------------------------------------------

    def recover(self, protected_until: int = 0) -> ValidPrefix:
        """Rebuild the indexes from a full replay and truncate the file after its valid prefix.

        A replay that stops below `protected_until` (the recovery point: fsynced bytes) met bit rot, not a
        torn tail: the file is left whole, for the log to fence the damage and keep what follows it.
        """
        self.index.clear()
        self.time_index.clear()
        self._reset(0)
        file_size = self._files.size(self.fd)
        prefix = replay(self._read_at, file_size, self.base_offset, 0, None, self._on_replayed)
        if prefix.truncate_at < file_size and prefix.next_offset >= protected_until:
            self._files.truncate(self.fd, prefix.truncate_at)
        self.size = prefix.truncate_at
        self.next_offset = prefix.next_offset
        self.seal_time_index()
        self.verified = True
        return prefix

    def scan(self, read_at: ReadAt | None = None, check_indexes: bool = False) -> tuple[ValidPrefix, bool]:
        """Replay the valid bytes whole without changing anything: (where the valid prefix ends, whether the
        in-memory indexes agree with the batches). What first-use verification and the scrubber run."""
        check = _IndexCheck(self) if check_indexes else None
        valid = min(self.size, self.file_size())  # a file cut short under us is damage like any other
        prefix = replay(read_at or self._read_at, valid, self.base_offset, 0, None,
                        check.on_batch if check else None)
        return prefix, check is None or check.agrees()

    def cut(self, position: int, next_offset: int) -> None:
        """Drop the bytes from `position` (a batch boundary, `next_offset` the offset there) to the end of the
        file: what follows a fenced range, once the log has moved the valid batches beyond it elsewhere."""
        self.index.truncate_to_offset(next_offset)
        self.time_index.truncate_to_offset(next_offset)
        self.size = min(self.size, position)  # size before next_offset: lock-free readers rely on this order
        self.next_offset = next_offset
        self._files.truncate(self.fd, position)
        self.max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry()

    def file_size(self) -> int:
        return self._files.size(self.fd)

    def load(self, protected_until: int = 0) -> ValidPrefix:
        """Trust the index files and replay only the tail after the last offset index entry; the segment is
        then unverified (see the class docstring).

        A corrupt or missing index, or a tail that does not replay cleanly, falls back to
        `recover(protected_until)`.
        """
        file_size = self._files.size(self.fd)
        try:
            self.index.load()
            self.time_index.load()
            self.index.check_against(max(file_size, 1))
        except CorruptIndexError:
            return self.recover(protected_until)
        if file_size and not len(self.time_index):  # missing, or every timestamp -1: derive it from the log
            return self.recover(protected_until)
        offset, position = self.index.last_entry()  # no entries (a missing index): replay it all
        self._reset(file_size)
        self.max_timestamp, self._offset_of_max_timestamp = self.time_index.last_entry()
        prefix = replay(self._read_at, file_size, self.base_offset, position, offset, self._on_replayed)
        if not prefix.clean or (position > 0 and prefix.batches == 0):
            return self.recover(protected_until)
        self.size, self.next_offset = prefix.truncate_at, prefix.next_offset
        try:
            self.time_index.check_against(self.next_offset)
        except CorruptIndexError:
            return self.recover(protected_until)
        self.seal_time_index()
        self.verified = position == 0  # a replay from byte 0 checked every batch
        return prefix

    def _on_replayed(self, header: BatchHeader, position: int) -> None:
        self._track(header.base_offset, header.max_timestamp, position, header.size)

    def _read_at(self, position: int, length: int) -> bytes:
        return self._files.pread(self.fd, length, position)

    # -- reading (any thread) ------------------------------------------------------------------------

    def read_header(self, position: int) -> BatchHeader:
        return parse_header(os.pread(self.fd, HEADER_SIZE, position))

    def batch_size_at(self, position: int) -> int:
        return peek_size(os.pread(self.fd, LOG_OVERHEAD, position))

    def find_batch(self, offset: int, limit: int) -> int | None:
        """Position of the batch holding `offset` (its last offset >= `offset`) among the bytes below `limit`."""
        expected, position = self.index.lookup(offset)
        while position < limit:
            header = self.checked_header(position, expected, limit)
            if header.last_offset >= offset:
                return position
            position += header.size
            expected = header.next_offset
        return None

    def read_header_pinned(self, position: int) -> BatchHeader:
        """read_header for a thread that may meet the segment being closed (the cleaner reporter's dirty ratio
        while the cleaner replaces it): through `pinned()`, so LogClosedError rather than a released descriptor."""
        with self.pinned() as fd:
            return parse_header(os.pread(fd, HEADER_SIZE, position))

    def checked_header(self, position: int, expected_offset: int, limit: int) -> BatchHeader:
        """The header of the batch at `position`, which must start at `expected_offset` and end by `limit`."""
        data = os.pread(self.fd, HEADER_SIZE, position)
        if len(data) == HEADER_SIZE:
            header = parse_header(data)
            if (header.base_offset == expected_offset and header.magic == MAGIC and header.last_offset_delta >= 0
                    and header.batch_length >= MIN_BATCH_LENGTH and position + header.size <= limit):
                return header
        raise CorruptSegmentError(f"{self.path}: no valid batch for offset {expected_offset} at byte {position}")

    def boundary_at_or_below(self, start: int, limit: int) -> int:
        """The last batch boundary in [start, limit]: an index lookup, then a short scan of length fields."""
        _, position = self.index.lookup_position(limit)
        position = max(position, start)
        while True:
            end = position + self.batch_size_at(position)
            if end > limit:
                return position
            position = end

    def find_timestamp(self, timestamp: int, limit: int) -> TimestampOffset | None:
        """The first record below `limit` whose timestamp is >= `timestamp` (Kafka's findOffsetByTimestamp).

        The time index gives where to start (a bisection of the in-memory entries); batch headers are read
        from there to the first batch whose max timestamp is >= `timestamp`, and only that batch's records
        are walked: every earlier batch has smaller timestamps only, and the first record of this one at or
        after the target (in offset order, whatever the order of its timestamps) is the answer. A batch
        whose header claims a max timestamp that none of its records has (nothing checks this on append)
        is passed over, as Kafka does. CRCs are not checked, as a fetch does not check them: the log
        verified every batch it reads (on append, or on first use after a restart; the scrubber after).
        """
        expected, position = self.index.lookup(self.time_index.lookup(timestamp))
        while position < limit:
            header = self.checked_header(position, expected, limit)
            if header.max_timestamp >= timestamp and header.record_count > 0:
                found = self._first_record_at_or_after(header, position, timestamp)
                if found is not None:
                    return found
            position += header.size
            expected = header.next_offset
        return None

    def _first_record_at_or_after(self, header: BatchHeader, position: int, timestamp: int) -> TimestampOffset | None:
        """Walk the batch's record heads (records.seek) over SEEK_READ_BYTES of its records section at a time,
        so that a lookup reads the batch only up to the record that answers it; a compressed batch is read
        and decompressed whole. Malformed records raise CorruptSegmentError."""
        walk = functools.partial(seek_timestamp, base_offset=header.base_offset, base_timestamp=header.base_timestamp,
                                 log_append_time=header.max_timestamp if header.timestamp_type else None,
                                 target=timestamp)
        remaining, at, end = header.record_count, position + HEADER_SIZE, position + header.size
        try:
            if header.compression:
                found = walk(self._decompressed_section(header, position), 0, remaining=remaining, final=True)
            else:
                while True:
                    length = min(SEEK_READ_BYTES, end - at)
                    if length <= 0:
                        raise CorruptRecordError(f"a record runs past the batch's end at byte {at}")
                    found = walk(self._read_exact(at, length), 0, remaining=remaining, final=at + length >= end)
                    if found.status != MORE:
                        break
                    if found.position <= 0:  # cannot happen (a record's head is shorter than a read): no loop
                        raise CorruptRecordError(f"no record head at byte {at}")
                    remaining -= found.walked
                    at += found.position  # the first record not walked: its head was cut by the read, or lies past it
        except CorruptRecordError as exc:
            raise CorruptSegmentError(f"{self.path}: the batch at byte {position} (offset {header.base_offset}) "
                                      f"has malformed records: {exc}") from None
        return TimestampOffset(found.timestamp, found.offset) if found.status == FOUND else None

    def _read_exact(self, position: int, length: int) -> bytes:
        data = self._files.pread(self.fd, length, position)
        if len(data) != length:
            raise CorruptSegmentError(f"{self.path}: {length} bytes at byte {position} expected, {len(data)} read")
        return data

    def _decompressed_section(self, header: BatchHeader, position: int) -> bytes:
        """The records section of the compressed batch at `position`, decompressed."""
        for batch in iter_batches(self._read_exact(position, header.size), check_crc=False):
            return batch._decompress(header.compression, batch.raw[HEADER_SIZE:])
        raise CorruptSegmentError(f"{self.path}: no batch at byte {position}")

    # -- lifecycle --------------------------------------------------------------------------------

    @contextmanager
    def pinned(self) -> Iterator[int]:
        """The .log descriptor, guaranteed to stay this file's until the block ends (LogClosedError if closed).

        close() only marks a pinned segment closed; the last unpin closes the descriptor. Without this, a
        reader holding the number could hit a descriptor that a concurrent close() released and an
        unrelated open() reused, and read (or sendfile) another file's bytes.
        """
        fd = self.pin()
        try:
            yield fd
        finally:
            self.unpin()

    def pin(self) -> int:
        """pinned() without the context manager, for the Fetch path (one sendfile per response): the caller
        must call `unpin()` exactly once after its last use of the descriptor, in a `finally`."""
        with self._pin_lock:
            if self.closed:
                raise LogClosedError(f"the segment file {self.path} was closed")
            self._pins += 1
        return self.fd

    def unpin(self) -> None:
        with self._pin_lock:
            self._pins -= 1
            release = self.closed and not self._pins
        if release:
            self._files.close(self.fd)

    def close(self) -> None:
        with self._pin_lock:
            if self.closed:
                return
            self.closed = True
            release = not self._pins
        self.index.close()
        self.time_index.close()
        if release:
            self._files.close(self.fd)

    def rename_deleted(self) -> None:
        """Rename the three files to `*.deleted`; open descriptors (and FileSlices) keep working."""
        self.rename_files(DELETED_SUFFIX)

    def rename_files(self, suffix: str) -> None:
        """Rename the three files to their live names plus `suffix`, the indexes first: the `.log` file's
        rename is the one that counts (the cleaner's commit point; an index that lags is rebuilt on open)."""
        for index in (self.time_index, self.index):
            index.rename(_live_path(index.path) + suffix)
        new_path = _live_path(self.path) + suffix
        self._files.rename(self.path, new_path)
        self.path = new_path

    def delete_files(self) -> None:
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            try:
                self._files.unlink(path)
            except FileNotFoundError:
                pass
        self._files.fsync_dir(self.directory)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, next_offset={self.next_offset})"


class _IndexCheck:
    """Walks a segment's in-memory index entries beside a replay: each must name a batch start (offset and
    position) of the replay, and each time index entry a batch with that max timestamp (first-use
    verification of index files that were trusted on load)."""

    def __init__(self, segment: LogSegment):
        base = segment.base_offset
        index, time_index = segment.index, segment.time_index
        self._offsets = [(base + k, v) for k, v in zip(index._keys, index._values)]
        self._times = [(base + v, k) for k, v in zip(time_index._keys, time_index._values)]
        self._i = self._j = 0
        self._ok = True

    def on_batch(self, header: BatchHeader, position: int) -> None:
        offsets, times = self._offsets, self._times
        while self._i < len(offsets) and offsets[self._i][0] <= header.base_offset:
            self._ok = self._ok and offsets[self._i] == (header.base_offset, position)
            self._i += 1
        while self._j < len(times) and times[self._j][0] <= header.base_offset:
            self._ok = self._ok and times[self._j] == (header.base_offset, header.max_timestamp)
            self._j += 1

    def agrees(self) -> bool:
        return self._ok and self._i == len(self._offsets) and self._j == len(self._times)
