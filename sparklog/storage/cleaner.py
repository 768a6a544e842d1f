"""The log cleaner's work on one log: find the cleanable range, deduplicate it, recopy and swap (design
notes 4.8; Kafka's `Cleaner.clean`). Which log, when, in which thread and how fast is cleaner_manager.py.

A log is, from its start: the clean section (cleaned before, below `cleaner-offset-checkpoint`), the dirty
section (up to the first uncleanable offset), and the rest, never touched.

Rule: clean-range (the range): the first uncleanable offset is the least of the active segment's base, the last
stable offset (the high watermark, or the first offset of a transaction not yet stable: Kafka's
firstUnstableOffset, so no open transaction's records are ever in the map), the recovery point (only fsynced,
closed segments are cleaned) and the base of the first segment holding a record younger than
min.compaction.lag.ms. Only whole segments below it are cleaned. The dirty ratio is dirty bytes / (clean +
dirty bytes).
Rule: dirty-keys-mapped (the map): the dirty section's keys are put, in offset order, into the OffsetMap (key -> its
last offset). When the map fills, the range ends at the base of the batch that did not fit; the rest is
cleaned next time. Records of aborted transactions are not put (Kafka's buildOffsetMap): an aborted value
must never supersede a committed one; the dirty section's aborted transactions (the log's aborted-transaction
index) are applied batch by batch by the consumer's rule (records/aborted.py), on the pure-Python path.
Rule: keep-latest-per-key (what is kept): in every segment from the log start to the end of the range, a record below
the range's end is dropped when the map holds a later offset for its key, when it is a tombstone (null value)
past its batch's delete horizon (Rule: tombstone-delete-horizon), or when it has no key (a topic made compact after
null-key records were written: Kafka drops them too). Control batches are kept whole: no transaction marker is
ever removed (Kafka removes a marker once its transaction's data is gone and delete.retention.ms has passed;
sparklog keeps them all), so a read_committed reader still skips every aborted record the clean kept. Records at or past the
range's end are kept. Offsets never change (records/retain.py): batches keep their headers, even empty
ones, and consecutive empty ones of one producer become one header spanning their offsets.
Rule: tombstone-delete-horizon (the delete horizon, KIP-534): a tombstone is kept by the first clean that sees it,
which writes into its batch the delete horizon now + delete.retention.ms (records/retain.py Rule 5: attribute bit
0x40, the horizon as baseTimestamp, record timestamps unchanged); a later clean whose time is past that
horizon removes it. So a consumer that reads to the log end within delete.retention.ms of the clean that
first saw a tombstone sees it, however old the tombstone's own timestamp is. (Kafka before KIP-534 aged
whole segments by their modification time.) A tombstone is removed only at a clean.
Rule: clean-for-delete-horizon (cleaning for a delete horizon, KIP-534): each clean reports the earliest delete horizon
of the tombstones it left below its range's end (`CleanResult.earliest_delete_horizon`); once that has passed,
the log is cleanable even with nothing dirty or a dirty ratio below min.cleanable.dirty.ratio
(cleaner_manager.py Rule: compaction-candidate), and that clean recopies the clean section without the expired
tombstones. The horizon is known from the log's last clean in this process: after a restart, a log waits for its first
clean by ratio or lag (as Kafka's in-memory latestDeleteHorizon).
Rule: sweep-in-windows (how): a read buffer (IO_BUFFER_BYTES) of batches at a time goes to records/sweep.py, one
compiled call per pass with the GIL released: it checks each batch (CRC-32C), scans its records, probes or fills
the map and, in the recopy, copies the kept records and coalesces emptied headers, for every batch but
compressed ones and those whose tombstones first get a delete horizon (Rule: tombstone-delete-horizon). Those (and
every batch, without the compiled codec) take the pure-Python path: a window
of ~WINDOW_RECORDS records decided at once (numpy) from one scan of each batch (records/scan.py: key
digests, offsets, timestamps, flags), the kept records copied from that same scan, decompressed once. Both
paths give the same bytes (tests/unit/storage/test_cleaner_sweep.py).
Rule: recopy-in-groups (the recopy): consecutive segments are recopied into one cleaned segment while what it holds plus
the next source segment's size stays within segment.bytes (so fully superseded segments merge into their
neighbours) and its offsets span less than 2^31; each is written to `<base>.log.cleaned` (with its indexes),
fsynced, renamed to `.swap` (the commit point; the directory is fsynced), then swapped in by
`PartitionLog.replace_segments`, which holds the append lock only for the renames (log.py Rule: cleaned-swap). A group
in which nothing was dropped is discarded unswapped. Reads and writes pass through the I/O throttle.
Rule: clean-crash-safe (crash safety): a crash before the `.swap` rename leaves the old segments (the `.cleaned` files
are deleted on open); after it, the open completes the swap. Either way every latest value is there once.
The cleaner checkpoint moves to the range's end after the last swap; a crash before that repeats a clean,
which is idempotent.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from bisect import bisect_right
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from sparklog.records import BytesLike, sweep
from sparklog.records.aborted import AbortedTransactions
from sparklog.records.batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, DELETE_HORIZON_MASK,
                                    HEADER_SIZE, BatchHeader, RecordBatch, iter_batches, parse_header, peek_size)
from sparklog.records.retain import can_extend, extend_empty, retain_scanned
from sparklog.records.scan import NULL_VALUE, RecordScan, scan
from sparklog.storage.config import INT32_MAX
from sparklog.storage.errors import LogClosedError
from sparklog.storage.files import Files
from sparklog.storage.log import PartitionLog
from sparklog.storage.offset_map import OffsetMap
from sparklog.storage.segment import CLEANED_SUFFIX, SWAP_SUFFIX, BatchEntry, LogSegment, segment_file_name

logger = logging.getLogger(__name__)

IO_BUFFER_BYTES = 1024 * 1024  # log.cleaner.io.buffer.size: Kafka's 512 KiB, for reading and writing each
WINDOW_RECORDS = 4096  # records decoded before the offset map is asked about all their keys at once

NO_HORIZON = -1  # Kafka's RecordBatch.NO_TIMESTAMP: no tombstone waits for its delete horizon
Throttle = Callable[[int], None]
_Window = list[tuple[RecordBatch, RecordScan | None]]  # batches and their scans, asked of the map at once
_BASE_OFFSET, _ATTRIBUTES, _COUNT = struct.Struct(">q"), struct.Struct(">h"), struct.Struct(">i")  # batch.HEADER's


class DedupeBufferTooSmall(Exception):
    """Not even one batch of the dirty section fits the offset map (log.cleaner.dedupe.buffer.size)."""


@dataclass(frozen=True)
class CleanableRange:
    """Kafka's LogToClean: where a log's clean and dirty sections are, and how dirty it is (Rule: clean-range)."""

    first_dirty: int
    end: int  # the first uncleanable offset, on a segment boundary
    clean_bytes: int
    dirty_bytes: int
    first_dirty_timestamp: int  # the first dirty batch's max timestamp (-1: none), for max.compaction.lag.ms

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True)
class CleanResult:
    """One clean of one log: what `sparklog topics describe` shows as the cleaner's last run."""

    started_ms: int
    duration_s: float
    first_dirty: int
    end: int  # the new cleaner checkpoint
    dirty_ratio: float  # before the clean
    bytes_read: int
    bytes_written: int
    records_read: int
    records_removed: int
    tombstones_removed: int
    segments_swapped: int
    # Rule: clean-for-delete-horizon: the earliest delete horizon of the tombstones left below `end` (NO_HORIZON:
    # none), after which a clean removes one even with nothing new to clean (KIP-534).
    earliest_delete_horizon: int = -1


def cleanable_range(log: PartitionLog, now_ms: int) -> CleanableRange | None:
    """Rule: clean-range for `log`, or None when it has no closed segment to clean."""
    segments, config = log.segments, log.config
    limit = min(segments[-1].base_offset, log.last_stable_offset, log.recovery_point)
    lag = config.min_compaction_lag_ms
    end = segments[0].base_offset
    for segment in segments[:-1]:
        if segment.next_offset > limit or (lag > 0 and segment.largest_timestamp > now_ms - lag):
            break
        end = segment.next_offset
    first_dirty = min(max(log.cleaner_checkpoint(), segments[0].base_offset), end)
    if end <= segments[0].base_offset:
        return None
    clean = dirty = 0
    first_ts = -1
    for segment in segments:
        if segment.base_offset >= end:
            break
        if segment.next_offset <= first_dirty:
            clean += segment.size
        else:
            if not dirty and segment.size:
                first_ts = _first_max_timestamp(segment)
            dirty += segment.size
    return CleanableRange(first_dirty, end, clean, dirty, first_ts)


def _first_max_timestamp(segment: LogSegment) -> int:
    """The first batch's max timestamp, read pinned: callers on other threads (the cleaner reporter's
    dirty_ratio) may meet a segment the cleaner thread is replacing; -1 (none) if it was closed already."""
    try:
        return segment.read_header_pinned(0).max_timestamp
    except LogClosedError:
        return -1


def segment_chunks(segment: LogSegment, files: Files, throttle: Throttle | None = None) -> Iterator[memoryview]:
    """The bytes of a closed segment, IO_BUFFER_BYTES at a time through `throttle`, each piece ending where a
    batch ends (a batch larger than the buffer is read whole)."""
    with segment.pinned() as fd:
        end, position, want = segment.size, 0, IO_BUFFER_BYTES
        while position < end:
            chunk = files.pread(fd, min(want, end - position), position)
            if throttle is not None:
                throttle(len(chunk))
            whole = _whole_batches(chunk)
            if whole:
                yield memoryview(chunk)[:whole]
                position, want = position + whole, IO_BUFFER_BYTES
            elif len(chunk) >= HEADER_SIZE and peek_size(chunk) > len(chunk):
                want = peek_size(chunk)  # one batch larger than the buffer
            else:
                raise ValueError(f"{segment.path}: no whole batch at byte {position}")


def segment_batches(segment: LogSegment, files: Files, throttle: Throttle | None = None) -> Iterator[RecordBatch]:
    """Every batch of a closed segment, CRC-checked (segment_chunks)."""
    for chunk in segment_chunks(segment, files, throttle):
        yield from iter_batches(chunk)


def _whole_batches(chunk: bytes) -> int:
    """How many bytes of `chunk` are whole batches by their lengths; all of it at a length too small to be a
    batch (iter_batches then says what is wrong)."""
    compiled = sweep.whole_prefix(chunk)
    if compiled is not None:
        return compiled
    position, end = 0, len(chunk)
    while end - position >= HEADER_SIZE:
        size = peek_size(chunk, position)
        if size < HEADER_SIZE:
            return end
        if size > end - position:
            break
        position += size
    return position


def _compressed_data(chunk: memoryview, position: int) -> bool:
    """Is the batch at `position` one that sweep.py leaves to Python (a compressed batch with records)?"""
    attributes, count = _ATTRIBUTES.unpack_from(chunk, position + ATTRIBUTES_OFFSET)[0], _COUNT.unpack_from(
        chunk, position + HEADER_SIZE - _COUNT.size)[0]
    return bool(attributes & COMPRESSION_MASK) and count > 0 and not attributes & CONTROL_MASK


class _MapFull(Exception):
    """The offset map filled at the batch based at `base_offset` (Rule: dirty-keys-mapped)."""

    def __init__(self, base_offset: int):
        super().__init__(base_offset)
        self.base_offset = base_offset


class Cleaner:
    """Cleans one log at a time with its own OffsetMap (one per cleaner thread)."""

    def __init__(self, offset_map: OffsetMap | Callable[[], OffsetMap], files: Files, throttle: Throttle | None = None,
                 clock: Callable[[], int] | None = None):
        """`offset_map` may be a factory, called at the first clean (the map's memory is allocated then)."""
        self._map = offset_map if isinstance(offset_map, OffsetMap) else None
        self._new_map = offset_map if not isinstance(offset_map, OffsetMap) else None
        self._files = files
        self._throttle = throttle
        self._clock = clock or (lambda: time.time_ns() // 1_000_000)
        self._buffers = sweep.Buffers()

    @property
    def map(self) -> OffsetMap:
        if self._map is None:
            assert self._new_map is not None  # a map given whole is never None
            self._map = self._new_map()
        return self._map

    @property
    def map_bytes(self) -> int:
        return 0 if self._map is None else self._map.memory_bytes

    def clean(self, log: PartitionLog, span: CleanableRange | None = None, *, horizon_passed: bool = False) -> CleanResult | None:
        """Clean `log` (Rule: dirty-keys-mapped, Rule: keep-latest-per-key, Rule: recopy-in-groups and Rule:
        clean-crash-safe); None when there is nothing dirty to clean, unless `horizon_passed` (a tombstone's delete
        horizon is past, Rule: clean-for-delete-horizon): then the clean section is recopied without it."""
        started, now = time.monotonic(), self._clock()
        span = span or cleanable_range(log, now)
        if span is None or (span.first_dirty >= span.end and not horizon_passed):
            return None
        stats = _Stats()
        end = self._build_map(log, span, stats)
        swapped = 0
        for group in self._recopy_groups(log, [s for s in log.segments[:-1] if s.base_offset < end], end,
                                         _Horizon(now, now + log.config.delete_retention_ms), stats):
            swapped += self._swap(log, group)
        log.write_cleaner_checkpoint(end)
        return CleanResult(now, time.monotonic() - started, span.first_dirty, end, span.dirty_ratio,
                           stats.read, stats.written, stats.records, stats.removed, stats.tombstones, swapped,
                           stats.horizon)

    def _build_map(self, log: PartitionLog, span: CleanableRange, stats: "_Stats") -> int:
        """Rule: dirty-keys-mapped: returns the end of the range that the map covers."""
        offset_map = self.map
        offset_map.clear()
        aborted = log.aborted_transactions(span.first_dirty, span.end)
        rule = AbortedTransactions(aborted) if aborted else None  # Rule: dirty-keys-mapped: aborted records are not put
        compiled = None if rule is not None else self._compiled_put(offset_map, span.first_dirty)
        try:
            for segment in log.segments[:-1]:
                if segment.next_offset <= span.first_dirty:
                    continue
                if segment.base_offset >= span.end:
                    break
                for window in self._windows(segment, compiled):
                    if rule is not None:
                        window = [(batch, None if rule.skips(batch) else scanned) for batch, scanned in window]
                    self._put_window(offset_map, window, span.first_dirty)
        except _MapFull as full:
            if full.base_offset <= span.first_dirty:
                raise DedupeBufferTooSmall(
                    f"{log.name}: the offset map of {offset_map.max_entries} entries cannot hold the keys "
                    f"of the batch at offset {full.base_offset}; raise log.cleaner.dedupe.buffer.size") from None
            return full.base_offset
        return span.end

    @staticmethod
    def _put_window(offset_map: OffsetMap, window: _Window, first_dirty: int) -> None:
        """Rule: dirty-keys-mapped for a window of batches on the pure-Python path; raises _MapFull."""
        dirty = [(b, c) for b, c in window if c is not None and b.next_offset > first_dirty]
        if not dirty:
            return
        scans = [c for _, c in dirty]
        digests = _concat(scans, "digests")
        taken = offset_map.put_digests(digests, _concat(scans, "offsets"))
        if taken < len(digests):
            starts = list(accumulate(len(c.digests) for _, c in dirty))
            raise _MapFull(dirty[bisect_right(starts, taken)][0].base_offset)

    @staticmethod
    def _compiled_put(offset_map: OffsetMap, first_dirty: int) -> Callable[[memoryview, int], int] | None:
        """Rule: dirty-keys-mapped for the batches sweep.put_batches takes (None without the compiled codec); raises
        _MapFull."""
        if sweep.compiled() is None:
            return None
        digests, stored = offset_map.tables

        def put(chunk: memoryview, position: int) -> int:
            put = sweep.put_batches(chunk, position, digests, stored, offset_map.size, offset_map.max_entries,
                                    first_dirty)
            assert put is not None  # compiled: it takes every chunk
            position, offset_map.size, full = put
            if full:
                raise _MapFull(_BASE_OFFSET.unpack_from(chunk, position)[0])
            return position

        return put

    def _windows(self, segment: LogSegment,
                 compiled: Callable[[memoryview, int], int] | None = None) -> Iterator[_Window]:
        """The batches of `segment` with their scans (None for control and empty batches), about
        WINDOW_RECORDS records at a time: the offset map is asked once per window, not once per batch.

        With `compiled` (a sweep.py pass: (chunk, position) -> the position of the first batch it did not
        take), only the batches it leaves are windowed, each window yielded before it takes later ones."""
        window: _Window = []
        records = 0
        for chunk in segment_chunks(segment, self._files, self._throttle):
            position = 0
            while position < len(chunk):
                if compiled is not None and not (window and _compressed_data(chunk, position)):
                    if window:
                        yield window
                        window, records = [], 0
                    taken = compiled(chunk, position)
                    if taken > position:
                        position = taken
                        continue
                batch = next(iter_batches(chunk[position:]))
                window.append((batch, scan(batch) if batch.record_count and not batch.is_control else None))
                records += batch.record_count
                position += batch.size
                if records >= WINDOW_RECORDS:
                    yield window
                    window, records = [], 0
        if window:
            yield window

    def _recopy_groups(self, log: PartitionLog, segments: list[LogSegment], end: int, horizon: "_Horizon",
                       stats: "_Stats") -> Iterator["_Group"]:
        """Rule: recopy-in-groups: recopy `segments` into cleaned segments, each closed (and yielded, to be swapped in)
        when the next source segment might not fit beside what it holds already."""
        group = None
        try:
            for segment in segments:
                if group is not None and not group.fits(segment, log.config.segment_bytes):
                    finished, group = group.close(), None  # _swap owns it from here
                    yield finished
                if group is None:
                    self._remove_leftovers(log.directory, segment.base_offset)
                    group = _Group(LogSegment(log.directory, segment.base_offset, log.config, self._files,
                                              self._clock(), suffix=CLEANED_SUFFIX), self._write, stats)
                for window in self._windows(segment, self._compiled_filter(group, end, horizon, stats)):
                    decided = iter(self._decide(window, end, horizon, stats))
                    for batch, scanned in window:
                        stats.read += batch.size
                        out = None
                        if scanned is not None and batch.base_offset < end:
                            keep, mark = next(decided)
                            out = None if keep is None else retain_scanned(batch, scanned, keep,
                                                                           horizon.new if mark else None)
                        group.add(batch, out)
                group.sources.append(segment)
            if group is not None:
                finished, group = group.close(), None
                yield finished
        except BaseException:
            if group is not None and group.cleaned not in log.segments:
                group.cleaned.delete_files()
            raise

    def _compiled_filter(self, group: "_Group", end: int, horizon: "_Horizon",
                         stats: "_Stats") -> Callable[[memoryview, int], int] | None:
        """Rule: keep-latest-per-key and Rule: recopy-in-groups for the batches sweep.filter_batches takes (None
        without the compiled codec)."""
        if sweep.compiled() is None:
            return None
        digests, stored = self.map.tables

        def recopy(chunk: memoryview, position: int) -> int:
            done = sweep.filter_batches(chunk, position, digests, stored, end, horizon.now, group.take_run(),
                                        self._buffers)
            assert done is not None  # compiled: it takes every chunk
            group.add_filtered(done)
            stats.add(done.counts)
            return done.position

        return recopy

    def _swap(self, log: PartitionLog, group: "_Group") -> int:
        """Rule: recopy-in-groups's end for one group: commit and swap in; returns 1 if it was swapped in, else 0."""
        cleaned, sources = group.cleaned, group.sources
        try:
            if not group.changed or log.closed:
                cleaned.delete_files()
                return 0
            cleaned.flush()
            cleaned.rename_files(SWAP_SUFFIX)  # the commit point (Rule: clean-crash-safe)
            self._files.fsync_dir(log.directory)
            if cleaned.next_offset != sources[-1].next_offset or not log.replace_segments(tuple(sources), cleaned):
                cleaned.delete_files()  # retention or truncation changed the group meanwhile
                return 0
            return 1
        except BaseException:
            if cleaned not in log.segments:  # once swapped in, the files are the log's
                cleaned.delete_files()
            raise

    def _write(self, cleaned: LogSegment, data: bytearray, entries: list[BatchEntry], stats: "_Stats") -> None:
        if self._throttle is not None:
            self._throttle(len(data))
        cleaned.append(data, entries)
        stats.written += len(data)

    def _decide(self, window: _Window, end: int, horizon: "_Horizon", stats: "_Stats") -> list[tuple[Any, ...]]:
        """Rule: keep-latest-per-key and Rule: tombstone-delete-horizon for the data batches of a window below `end`,
        all records at once: for each, (a keep byte per record, or None when it keeps them all and is unchanged; whether its delete horizon is to be
        set)."""
        data = [(b, c) for b, c in window if c is not None and b.base_offset < end]
        if not data:
            return []
        scans = [c for _, c in data]
        digests, offsets = _concat(scans, "digests"), _concat(scans, "offsets")
        tombstone = _concat(scans, "flags", np.uint8) & NULL_VALUE != 0
        counts = [len(c.digests) for c in scans]
        n = len(digests)
        marked = np.array([b.attributes & DELETE_HORIZON_MASK != 0 for b, _ in data])
        expired = np.repeat(marked & (horizon.now > np.array([b.base_timestamp for b, _ in data])), counts)
        past = offsets >= end
        latest = past | ((digests != 0) & (self.map.get_digests(digests) <= offsets))
        keep = latest & (~tombstone | ~expired | past)
        kept = int(keep.sum())
        stats.records += n
        stats.removed += n - kept
        stats.tombstones += int(latest.sum()) - kept  # the latest records dropped: expired tombstones
        starts = np.cumsum([0] + counts[:-1])
        kept_per_batch = np.add.reduceat(keep, starts).tolist()
        keeps_tombstone = np.add.reduceat(keep & tombstone & ~past, starts) > 0
        mark = keeps_tombstone & ~marked  # Rule: tombstone-delete-horizon: first seen
        if keeps_tombstone.any():  # Rule: clean-for-delete-horizon: the earliest horizon of a tombstone kept
            horizons = np.where(marked, [b.base_timestamp for b, _ in data], horizon.new)
            stats.keep_horizon(int(horizons[keeps_tombstone].min()))
        keep_bytes = keep.view(np.uint8)
        return [(None if k == n and not m else keep_bytes[a:a + n].tobytes(), m)
                for a, n, k, m in zip(starts.tolist(), counts, kept_per_batch, mark.tolist())]

    def _remove_leftovers(self, directory: str, base: int) -> None:
        """Files of an earlier clean of this group that failed (never swapped): start from nothing."""
        stem = segment_file_name(base, "")
        for name in self._files.listdir(directory):
            if name.startswith(stem + ".") and name.endswith(CLEANED_SUFFIX):
                self._files.unlink(os.path.join(directory, name))


def _concat(scans: list[RecordScan], column: str, dtype: type = np.int64) -> np.ndarray:
    """One column of every scan, end to end."""
    return np.frombuffer(b"".join(getattr(s, column) for s in scans), dtype=dtype)


class _Horizon(NamedTuple):
    """Rule: tombstone-delete-horizon for one clean: its time, and the delete horizon it writes into batches of new
    tombstones."""

    now: int
    new: int


class _Stats:
    __slots__ = ("read", "written", "records", "removed", "tombstones", "horizon")

    def __init__(self) -> None:
        self.read = self.written = self.records = self.removed = self.tombstones = 0
        self.horizon = NO_HORIZON  # the earliest delete horizon of a kept tombstone (Rule: sweep-in-windows)

    def add(self, counts: dict[str, int]) -> None:
        """sweep.Filtered.counts of one call."""
        self.read += counts["read"]
        self.records += counts["records"]
        self.removed += counts["removed"]
        self.tombstones += counts["tombstones"]
        if counts["horizon"]:
            self.keep_horizon(counts["horizon"])

    def keep_horizon(self, horizon: int) -> None:
        if self.horizon == NO_HORIZON or horizon < self.horizon:
            self.horizon = horizon


class _Group:
    """One cleaned segment being written from consecutive source segments (Rule: recopy-in-groups), with runs of emptied
    batches coalesced (records/retain.py Rule 3)."""

    def __init__(self, cleaned: LogSegment, write: Callable[[LogSegment, bytearray, list[BatchEntry], _Stats], None],
                 stats: _Stats):
        self.cleaned = cleaned
        self.sources: list[LogSegment] = []
        self.changed = False
        self._write = write
        self._stats = stats
        self._pending = bytearray()
        self._entries: list[BatchEntry] = []
        self._run: tuple[BatchHeader, bytes] | None = None  # an emptied batch that the next may extend
        self._run_length = 0

    def fits(self, segment: LogSegment, max_bytes: int) -> bool:
        """May `segment` follow in this cleaned segment? Its bytes (at most what it adds) must fit segment.bytes,
        it must follow without a fenced gap, and the offsets must fit one segment's int32 index."""
        size = self.cleaned.size + len(self._pending) + (len(self._run[1]) if self._run else 0)
        return (size + segment.size <= max_bytes and segment.base_offset == self.sources[-1].next_offset
                and segment.next_offset - self.sources[0].base_offset <= INT32_MAX)

    def add(self, batch: RecordBatch, out: bytes | None) -> None:
        """Add one batch, `out` being its cleaned bytes (None: unchanged)."""
        self.changed = self.changed or out is not None
        raw = batch.raw if out is None else out
        header = batch if out is None else parse_header(out)
        if header.record_count == 0 and not header.is_control:
            if self._run is not None and can_extend(self._run[0], header):
                self._run = extend_empty(self._run[1], header)
                self.changed = True
                return
            self._flush_run()
            self._run = (header, bytes(raw))
            return
        self._flush_run()
        self._append(header, raw)

    def take_run(self) -> bytes | None:
        """The pending empty header, handed to sweep.filter_batches (which returns it, maybe extended, to
        add_filtered); one it cannot take (bytes after the header) is written out first."""
        if self._run is not None and len(self._run[1]) != HEADER_SIZE:
            self._flush_run()
        run, self._run = self._run, None
        return None if run is None else run[1]

    def add_filtered(self, done: sweep.Filtered) -> None:
        """Add what sweep.filter_batches wrote (after take_run)."""
        self.changed = self.changed or bool(done.counts["changed"])
        start = len(self._pending)
        self._pending += done.data
        self._entries += [BatchEntry(start + position, base, end, timestamp, size)
                          for position, base, end, timestamp, size in done.entries]
        self._run = None if done.run is None else (parse_header(done.run), done.run)
        if len(self._pending) >= IO_BUFFER_BYTES:
            self._write_pending()

    def close(self) -> "_Group":
        self._flush_run()
        if self._entries:
            self._write_pending()
        return self

    def _write_pending(self) -> None:
        self._write(self.cleaned, self._pending, self._entries, self._stats)
        self._pending, self._entries = bytearray(), []

    def _flush_run(self) -> None:
        if self._run is not None:
            header, raw = self._run
            self._run = None
            self._append(header, raw)

    def _append(self, header: BatchHeader, raw: BytesLike) -> None:
        self._entries.append(BatchEntry(len(self._pending), header.base_offset, header.next_offset,
                                        header.max_timestamp, len(raw)))
        self._pending += raw
        if len(self._pending) >= IO_BUFFER_BYTES:
            self._write_pending()
