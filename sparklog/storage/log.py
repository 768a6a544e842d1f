"""PartitionLog: one partition's log, a directory `<topic>-<partition>/` of segments (the paper's 3.1).

A facade over the log's parts, split along Kafka's seams (LogLoader, LocalLog/LogSegments, UnifiedLog) and
Redpanda's one-noun files; each part's docstring states the rules it keeps, by name:
- log_loader.py: open, recover, fence, finish `.swap`/`.cleaned` (Rule: swaps-completed-first, Rule:
  torn-tail-truncated, Rule: bit-rot-fenced);
- checkpoints.py: the checkpoint files (Rule: checkpoint-never-above-fsynced, Rule:
  checkpoint-rewritten-when-behind);
- segment_set.py: the segment tuple and what reads find in it (Rule: segments-copy-on-write, Rule:
  one-read-one-segment, Rule: retention-whole-segments);
- append.py: the one append pipeline (Rule: append-is-whole-batch, Rule: client-batches-checked, Rule:
  producer-state-in-append, Rule: roll-before-overfill, Rule: compaction-lag-roll, Rule:
  leader-stamps-epoch, Rule: follower-appends-verbatim);
- visibility.py: the high watermark and what a reader of each isolation level may read (Rule:
  readers-below-visibility, Rule: replicated-hw-from-outside, Rule: hw-moves-forward, Rule: isolation-limit);
- log_retention.py and log_truncation.py: the head and the tail removed (Rule: log-start-forward, Rule:
  truncation-removes-whole-batches);
- verification.py: Rule: verify-before-first-use;
- transactions.py: transactions, the LSO, `.txnindex` (LogTransactions; Rule: transactions-tracked and on).
This module holds the log's state and locks, and the rules that span the parts:
Rule: log-start-forward: the log start offset is the larger of the first segment's base offset and the
offset DeleteRecords moved it to (`delete_records_before`), checkpointed in `log-start-offset-checkpoint`
before the call returns; it only moves forward (truncation below it aside).
Rule: reconfigure-under-append-lock: `reconfigure(LogConfig)` (Kafka's updateConfig) swaps the settings
under the append lock: the next append, flush check, roll and retention pass use them; the active segment's
roll deadline moves with them; index sizes apply from the next segment on. Batches are converted (timestamp
type and bounds, compression) by `log_validator` only when the config asks for it.
Rule: cleaned-swap (compaction, cleaner.py): the cleaner swaps cleaned segments in with `replace_segments`,
under the append lock for the renames only: the old segments go to `.deleted` (slices already handed out
keep reading them) and the cleaned one, written and fsynced as `<base>.log.cleaned` and committed by its
rename to `.swap`, becomes live (log_loader.py finishes what a crash left). Where the cleaner stopped is
checkpointed in `cleaner-offset-checkpoint`. Time and size retention run only when cleanup.policy includes
`delete`.
Rule: producer-state-follows-log: the producer state is snapshotted at roll and close, rebuilt on open and
after truncation from the newest snapshot at or below the log end plus the batches after it, and trimmed
when segments are deleted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from sparklog.records.batch import NO_TIMESTAMP
from sparklog.storage.append import AppendPipeline
from sparklog.storage.checkpoints import (CLEANER_OFFSET_FILE, DEFAULT_CHECKPOINT_INTERVAL_MS, LOG_START_OFFSET_FILE,
                                          RECOVERY_POINT_FILE, OffsetCheckpoints, RecoveryPointCheckpoint)
from sparklog.storage.config import VISIBILITY_APPENDED, LogConfig
from sparklog.storage.errors import CorruptSegmentError, LogClosedError, OffsetOutOfRange
from sparklog.storage.fences import FencedRanges
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.flusher import Flusher, default_flusher
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.log_loader import LogLoader
from sparklog.storage.log_retention import LogRetention
from sparklog.storage.log_truncation import LogTruncation
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.segment import LogSegment, TimestampOffset
from sparklog.storage.segment_set import FileSlice, LogSegments
from sparklog.storage.time_bounds import TimeBounds
from sparklog.storage.transactions import LogTransactions
from sparklog.storage.topic_names import parse_partition_dir
from sparklog.storage.verification import SegmentVerifier
from sparklog.storage.visibility import READ_UNCOMMITTED, HighWatermarkListener, Visibility, Visible

__all__ = ["CLEANER_OFFSET_FILE", "DEFAULT_CHECKPOINT_INTERVAL_MS", "LOG_START_OFFSET_FILE", "RECOVERY_POINT_FILE",
           "FenceListener", "FileSlice", "HighWatermarkListener", "LogStatistics", "PartitionLog"]

logger = logging.getLogger(__name__)

DEFAULT_READ_BYTES = 1024 * 1024  # iter_slices' chunk: Kafka's default max.partition.fetch.bytes

FenceListener = Callable[[str, int, tuple[tuple[int, int], ...]], None]  # (topic, partition, fenced ranges), at open and on change


@dataclass(frozen=True)
class LogStatistics:
    name: str
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    recovery_point: int
    segments: int
    size_bytes: int
    unflushed_messages: int
    appends: int
    appended_bytes: int
    flushes: int
    rolls: int
    deleted_segments: int
    checkpoints: int = 0  # recovery-point checkpoint files written
    fenced_ranges: int = 0  # offset ranges lost to bit rot (Rule: bit-rot-fenced)
    fenced_offsets: int = 0  # offsets in them
    unverified_segments: int = 0  # loaded segments not yet verified whole (Rule: verify-before-first-use)
    verified_bytes: int = 0  # bytes replayed whole by first-use verification and the scrubber
    flush_seconds: float = 0.0  # time spent in fsyncs of flushes (their count is `flushes`)


class PartitionLog(LogTransactions):
    """The log of one partition. Thread-safe: one writer lock for appends, readers lock-free.

    Locks: `_flush_lock` (taken first) serializes flush, retention, truncation and close; `_lock` guards the
    append path and the small state swaps. fsync runs outside `_lock`, so appends continue during a flush.

    The recovery point (everything below it is fsynced) moves at every flush; the checkpoint file that
    records it is rewritten as checkpoints.py says (Rule: checkpoint-rewritten-when-behind): every
    `checkpoint_interval_ms`, on close, and at once when the point moves backwards (truncation).
    """

    _epoch_cache: LeaderEpochCache | None = None  # loaded on first use

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 files: Files, flusher: Flusher, clock: Callable[[], int], *,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS, on_fence: FenceListener | None = None):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self._visibility = Visibility(config.flush_visibility == VISIBILITY_APPENDED)
        self._pipeline = AppendPipeline(self, config)
        self._use_config(config)
        self._log_start = 0  # DeleteRecords' log start offset (Rule: log-start-forward)
        self._files = files
        self._flusher = flusher
        self._clock = clock
        self._lock = threading.Lock()
        self._flush_lock = threading.RLock()
        self._segment_set = LogSegments(directory, files, flusher, clock)
        self._leo = 0
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._first_unflushed_at: float | None = None
        self._closed = False
        self._checkpoints = OffsetCheckpoints(files, directory, topic, partition)
        self._recovery_checkpoint = RecoveryPointCheckpoint(self._checkpoints, checkpoint_interval_ms)
        self._flush_everything = True  # the first flush after open: load() may have added index entries anywhere
        self._appends = 0  # append-path counters are plain attributes: a dict update costs twice as much
        self._appended_bytes = 0
        self._flushes = 0
        self._flush_seconds = 0.0
        self._on_fence = on_fence
        self._fences = FencedRanges(files, directory)
        self._verified_bytes = 0
        self._producers = ProducerStateManager(directory, files)
        self._init_transactions(directory, files)
        self._loader = LogLoader(self)
        self._verifier = SegmentVerifier(self, self._loader)
        self._retention = LogRetention(self)
        self._truncation = LogTruncation(self)

    def _use_config(self, config: LogConfig) -> None:
        self.config = config
        self.flush_ms = config.flush_ms
        self._flush_messages = config.flush_messages
        self._visibility.expose_on_append = config.flush_visibility == VISIBILITY_APPENDED
        self._pipeline.configure(config)

    def reconfigure(self, config: LogConfig) -> None:
        """Use `config` from now on, without closing the log (Rule: reconfigure-under-append-lock; Kafka's
        UnifiedLog.updateConfig).

        A visibility change from "appended" to "flushed" never moves the high watermark back: what readers
        have seen stays visible; later appends wait for their flush."""
        with self._lock:
            old = self.config
            self._use_config(config)
            self._schedule_flush()  # flush.ms may have changed
            active = self._segments[-1] if self._segments else None
            if active is not None and (old.segment_ms, old.cleanup_policies, old.max_compaction_lag_ms) != (
                    config.segment_ms, config.cleanup_policies, config.max_compaction_lag_ms):
                active.roll_at_ms = active.created_ms + config.segment_ms
                if active.size:
                    self._pipeline._set_lag_deadline(active, active.read_header(0).max_timestamp)

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str, config: LogConfig | Mapping[str, Any] | None = None, *, files: Files | None = None,
             flusher: Flusher | None = None, clock: Callable[[], int] | None = None,
             checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS,
             on_fence: FenceListener | None = None) -> "PartitionLog":
        """Open (or create) the log in `directory`, which must be named `<topic>-<partition>`, and recover it.

        `clock` returns wall-clock milliseconds (for segment.ms and retention.ms); flush and checkpoint
        timing is monotonic. `checkpoint_interval_ms` is Kafka's broker-level
        log.flush.offset.checkpoint.interval.ms (0: checkpoint at every flush that moves the recovery point).
        """
        topic, partition = parse_partition_dir(os.path.basename(os.path.normpath(directory)))
        if not isinstance(config, LogConfig):
            config = LogConfig.from_dict(config)
        if checkpoint_interval_ms < 0:
            raise ValueError(f"checkpoint_interval_ms must be >= 0, not {checkpoint_interval_ms}")
        files = files or OS_FILES
        files.makedirs(directory)
        log = cls(directory, topic, partition, config, files, flusher or default_flusher(),
                  clock or _wall_clock_ms, checkpoint_interval_ms=checkpoint_interval_ms, on_fence=on_fence)
        log._load()
        if on_fence is not None and log._fences.ranges:
            on_fence(topic, partition, log._fences.ranges)  # found now or on an earlier run
        log._flusher.register(log)
        with log._lock:
            log._schedule_flush()  # a checkpoint the opening's flush left due later
        return log

    def _load(self) -> None:
        segments, recovery_point = self._loader.load()
        self._segment_set.set(segments)
        self._leo = segments[-1].next_offset
        self._log_start = min(self._read_log_start(), self._leo)
        self._recovery_point = min(recovery_point, self._leo)
        self.flush()  # makes whatever recovery kept durable; rewrites the checkpoint if it named lost offsets
        self._visibility.reset(self._segment_set.end(self._leo))
        self._rebuild_producer_state()

    # -- producer state (Rule: producer-state-in-append) --------------------------------------------

    def _rebuild_producer_state(self) -> None:
        """The newest snapshot at or below the LEO, plus the batches after it (producer_state.py Rule:
        producer-recovery), the transactions and their index with it (transactions.py Rule: transactions-rebuilt)."""
        self._rebuild_transactions()
        self._producers.truncate_head(self.log_start_offset, self._segment_set.bases[0])

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer state; read it only under the log's append lock or in tests."""
        return self._producers

    # -- the log start offset checkpoint (Rule: log-start-forward) -------------------------------------------------

    def _read_log_start(self) -> int:
        """The offset DeleteRecords moved the log start to, or 0 if it never did (or the file is unreadable)."""
        return self._checkpoints.read(LOG_START_OFFSET_FILE, "the log starts at its first segment") or 0

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to `offset` (Kafka's DeleteRecords, Rule: log-start-forward); return the
        new log start offset."""
        return self._retention.delete_records_before(offset)

    # -- appending: the entry points of the one pipeline (append.py) -----------------------------------

    def append(self, batches: Any, append_time_ms: int | None = None) -> int:
        """Append one or more whole v2 batches (a producer's record set); return the first batch's base offset.

        `append_time_ms` is the broker's clock for LogAppendTime stamping and the timestamp bounds (default:
        the log's clock). Nothing is written unless every batch is valid (Rule: append-is-whole-batch). A
        bytearray is used as it is: its baseOffset fields get the assigned offsets (as Kafka assigns them in
        the request's buffer); any other buffer is copied once."""
        return self._pipeline.append(batches, append_time_ms)

    def append_as_leader(self, batches: Any, leader_epoch: int, append_time_ms: int | None = None) -> int:
        """append() of a client's record set (Rule: client-batches-checked), `leader_epoch` stamped into every
        batch header and recorded in the epoch cache (Rule: leader-stamps-epoch)."""
        return self._pipeline.append_as_leader(batches, leader_epoch, append_time_ms)

    def append_group_as_leader(self, record_sets: list[Any], leader_epoch: int,
                               append_time_ms: int | None = None) -> list[Any]:
        """`append_as_leader` of each record set in order, one write per segment (pipelined Produce requests):
        per set, `(base offset, log end offset after it)` or the exception a lone append_as_leader would raise;
        the HW, its listeners and flush.messages once, after the group."""
        return self._pipeline.append_group_as_leader(record_sets, leader_epoch, append_time_ms)

    def append_replicated(self, batches: Any) -> int:
        """Append a leader's batches as they are (Rule: follower-appends-verbatim); return the new LEO."""
        return self._pipeline.append_replicated(batches)

    @property
    def _converter(self) -> Any:
        return self._pipeline.converter

    def roll(self) -> None:
        """Start a new active segment now (a no-op when the active segment is empty)."""
        with self._lock:
            if self._segments[-1].size:
                self._roll_locked()

    def roll_if_due(self) -> bool:
        """Roll the active segment if it holds records and its roll deadline (segment.ms, Rule: compaction-lag-roll) has passed,
        as the next append would; True if it rolled. The cleaner calls it for idle compacted partitions."""
        with self._lock:
            if self._closed or not self._segments[-1].size or self._clock() < self._segments[-1].roll_at_ms:
                return False
            self._roll_locked()
            return True

    def _roll_locked(self) -> LogSegment:
        self._producers.expire(self._clock())
        self._producers.write_snapshot(self._leo)  # the state of every batch below the new segment
        return self._segment_set.roll(self._leo, self.config)

    @property
    def _segments(self) -> tuple[LogSegment, ...]:
        return self._segment_set.segments

    # -- flushing and the high watermark ---------------------------------------------------------

    def flush_due(self, now: float) -> bool:
        """For the Flusher: is the oldest unflushed append flush.ms old, or a periodic checkpoint due?"""
        at = self.flush_deadline()
        return at is not None and now >= at

    def flush_deadline(self) -> float | None:
        """When `flush_due` turns true (monotonic seconds): the oldest unflushed append flush.ms old, or the
        recovery-point checkpoint due (checkpoints.py), whichever is first; None while neither is pending."""
        first = self._first_unflushed_at
        flush_at = None if first is None else first + self.flush_ms / 1000
        checkpoint_at = self._recovery_checkpoint.due_at(self._recovery_point)
        if flush_at is None or (checkpoint_at is not None and checkpoint_at < flush_at):
            return checkpoint_at
        return flush_at

    def _schedule_flush(self) -> None:
        """Under `_lock`, whenever `flush_deadline` may have changed: the Flusher looks at this log then
        (flusher.py Rule: idle-logs-cost-nothing), and not before."""
        at = self.flush_deadline()
        if at is not None:
            self._flusher.schedule(self, at)

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point and the HW there.

        The checkpoint file follows the recovery point as checkpoints.py says: not at every flush.
        """
        self._flush(force_checkpoint=False)

    def _flush(self, force_checkpoint: bool) -> None:
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                active = self._segments[-1]
                visible = Visible(self._leo, active.base_offset, active.size)
                first = 0 if self._flush_everything else self._segment_set.first_unflushed_index(
                    self._recovery_point)
                dirty = [s for s in self._segments[first:] if s.needs_flush]
                self._flush_everything = False
                for segment in dirty:
                    segment.seal_time_index()
                pending = self._unflushed_messages, self._first_unflushed_at
                self._unflushed_messages = 0
                self._first_unflushed_at = None
                directory_dirty, self._segment_set.directory_dirty = self._segment_set.directory_dirty, False
            started = time.monotonic()
            try:
                for segment in dirty:
                    segment.flush()
                if directory_dirty:  # a new segment's bytes are durable only with its directory entry
                    self._files.fsync_dir(self.directory)
            except BaseException:
                self._restore_pending(*pending, directory_dirty)
                raise
            self._recovery_point = visible.offset
            if self._recovery_checkpoint.due(visible.offset, time.monotonic(), force_checkpoint):
                self._recovery_checkpoint.write(visible.offset)
            with self._lock:
                self._flushes += 1
                self._flush_seconds += time.monotonic() - started
                moved = self._visibility.advance(visible)
                self._schedule_flush()  # a checkpoint due later, or appends made during the fsync
        if moved:
            self._visibility.notify(self, visible.offset)

    def _restore_pending(self, messages: int, first_at: float | None, directory_dirty: bool) -> None:
        """A flush failed: its appends are unflushed again, so the flusher retries without waiting for an append."""
        with self._lock:
            self._segment_set.directory_dirty = self._segment_set.directory_dirty or directory_dirty
            self._unflushed_messages += messages
            if first_at is not None and (self._first_unflushed_at is None or first_at < self._first_unflushed_at):
                self._first_unflushed_at = first_at
            self._flush_everything = True
            self._schedule_flush()

    def add_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        """`listener(log, new_hw)` is called from whichever thread moves the HW; keep it short."""
        with self._lock:
            self._visibility.add_listener(listener)

    def remove_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        with self._lock:
            self._visibility.remove_listener(listener)

    # -- reading ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None,
             isolation: int = READ_UNCOMMITTED) -> FileSlice:
        """The bytes from the batch holding `offset`, up to `max_bytes` (on a batch boundary) and the limit
        of `isolation` (visibility.py: the HW, or the LSO for READ_COMMITTED).

        At least one whole batch is returned when one is visible, even if larger than max_bytes (KIP-74).
        `max_offset` (exclusive) caps further: only batches whose last offset is below it are included.
        `offset` at or past the HW (up to the LEO) gives an empty slice; outside [log start, LEO] raises
        OffsetOutOfRange. One read never spans two segments. An offset in a fenced range reads from the
        next valid batch (Rule: bit-rot-fenced); a segment is verified before its first read (Rule:
        verify-before-first-use). A read that met the segment tuple changing under it (a roll, or a fence
        moving batches) looks again, so it never steps over batches that moved; CorruptSegmentError means
        damage not yet fenced.
        """
        segment_set = self._segment_set
        while True:
            snapshot = segment_set.snapshot
            try:
                piece = self._read_in(snapshot, offset, max_bytes, max_offset, isolation)
            except CorruptSegmentError:
                if segment_set.snapshot is snapshot:
                    raise
                continue
            if piece is not None and segment_set.snapshot is snapshot:
                return piece

    def _read_in(self, snapshot: Any, offset: int, max_bytes: int, max_offset: int | None,
                 isolation: int) -> FileSlice | None:
        """read() over one segment tuple; None when it had to verify a segment first (then look again)."""
        hw = self._visibility.visible(isolation)
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        if offset < snapshot[1][0] or offset < self._log_start or offset > self._leo:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._leo, self.name)
        limit = hw.offset if max_offset is None else min(hw.offset, max_offset)
        return LogSegments.slice_from(snapshot, offset, max_bytes, hw, limit, self._verify)

    def iter_slices(self, offset: int | None = None, max_bytes: int = DEFAULT_READ_BYTES) -> Iterator[FileSlice]:
        """Every visible batch from `offset` (default: the log start) to the HW, as consecutive slices."""
        offset = self.log_start_offset if offset is None else offset
        while offset < self.high_watermark:
            piece = self.read(offset, max_bytes)
            if not piece.length:
                return
            yield piece
            offset = piece.offset_after()

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first visible record whose timestamp is >= `timestamp` (Kafka's ListOffsets), or None.

        Once every segment is verified, the search starts at the segment that time_bounds.py's bisection
        names; before that it starts at the first, verifying each segment it passes (Rule:
        verify-before-first-use).
        """
        return self._segment_set.offset_for_timestamp(timestamp, self._visibility.hw, self.log_start_offset,
                                                      self._verify)

    def offset_of_max_timestamp(self) -> TimestampOffset | None:
        """The first visible record holding the largest visible timestamp (ListOffsets MAX_TIMESTAMP,
        KIP-734), or None when nothing visible has a timestamp: the lookup by that time."""
        largest = self._segment_set.largest_visible_timestamp(self._visibility.hw, self._verify)
        return self.offset_for_timestamp(largest) if largest > NO_TIMESTAMP else None

    @property
    def _time_bounds(self) -> TimeBounds | None:
        return self._segment_set.time_bounds

    # -- verification (Rule: verify-before-first-use, verification.py) -------------------------------

    def needs_verification(self, offset: int) -> bool:
        """Whether a read at `offset` would first replay a loaded segment (cheap: no I/O, no lock)."""
        return self._verifier.needs_verification(offset)

    def verify_at(self, offset: int) -> int:
        """Verify the segment a read at `offset` starts in, if not yet (blocking); the bytes replayed."""
        return self._verifier.verify_at(offset)

    def has_unverified_segments(self) -> bool:
        """Whether a time lookup may first replay loaded segments (cheap: no I/O, no lock)."""
        return self._verifier.has_unverified_segments()

    def verify_for_time_lookup(self) -> int:
        """Verify every segment `offset_for_timestamp` would replay first (blocking); the bytes replayed."""
        return self._verifier.verify_for_time_lookup()

    def scrub(self, throttle: Callable[[int], None] | None = None, unverified_only: bool = False) -> int:
        """Verify every flushed closed segment whole (or only the unverified ones); the bytes replayed."""
        return self._verifier.scrub(throttle, unverified_only)

    def _verify(self, segment: LogSegment) -> int:
        return self._verifier.verify(segment)

    # -- retention, truncation, lifecycle --------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest whole segments past retention (Rule: retention-whole-segments); how many."""
        return self._retention.enforce(now_ms)

    # -- compaction (Rule: cleaned-swap; the cleaner itself is cleaner.py) ---------------------------------------

    def cleaner_checkpoint(self) -> int:
        """The first offset the cleaner has not deduplicated yet (0 if it never ran here)."""
        return self._checkpoints.read(CLEANER_OFFSET_FILE, "cleaning from the log start") or 0

    def write_cleaner_checkpoint(self, offset: int) -> None:
        self._checkpoints.write(CLEANER_OFFSET_FILE, offset)

    def replace_segments(self, old: tuple[LogSegment, ...], cleaned: LogSegment) -> bool:
        """Swap `cleaned` (committed as `.swap`, flushed) in for the consecutive segments `old`; False (nothing
        changed) when `old` is no longer a run of the live segments (retention or truncation ran meanwhile).

        Only renames happen under the append lock; the old segments' files are deleted after
        file.delete.delay.ms, so slices already handed out stay readable."""
        with self._lock:
            i = None if self._closed else self._segment_set.run_of(old)
            if i is None:
                return False
            segments = self._segments
            following, hw = segments[i + len(old)], self._visibility.hw
            if old[0].base_offset <= hw.segment_base and hw.offset == following.base_offset:
                # The HW sits at the end of `old`: name the same offset as the start of the segment after
                # it, true of the old segments and of `cleaned`, whose size differs (KIP-534 can grow it).
                self._visibility.reset(Visible(hw.offset, following.base_offset, 0))
            self._segment_set.replace(i, old, cleaned)
        self._files.fsync_dir(self.directory)
        self._segment_set.schedule_deletes(list(old), self.config.file_delete_delay_ms)
        return True

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= `offset` (for a follower's log divergence; Rule:
        truncation-removes-whole-batches, log_truncation.py): the LEO may end up below `offset`; below the log
        start, the log is emptied and restarts at `offset` (Kafka's truncateFullyAndStartAt)."""
        self._truncation.truncate_to(offset)

    def close(self) -> None:
        """Flush, checkpoint the recovery point (so the next open skips the replay) and close the files."""
        if self._closed:
            return
        self._flusher.unregister(self)
        self._flush(force_checkpoint=True)
        with self._flush_lock, self._lock:
            self._producers.write_snapshot(self._leo)  # the next open replays nothing
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close without flushing and remove the directory with everything in it."""
        self._flusher.unregister(self)
        with self._flush_lock, self._lock:
            self._closed = True
            for segment in self._segments:
                segment.close()
        self._files.rmtree(self.directory)

    # -- replication: what a leader and its followers need of the log (Rule: leader-stamps-epoch, Rule:
    # follower-appends-verbatim, Rule: replicated-hw-from-outside; the module docstring states them)

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """The leader-epoch cache, loaded on first use and cut to the log's offsets (a crash may have left
        entries past a truncated tail)."""
        cache = self._epoch_cache
        if cache is None:
            cache = LeaderEpochCache.load(self.directory, self._files)
            cache.truncate_from_end(self._leo)
            cache.truncate_from_start(self.log_start_offset)
            self._epoch_cache = cache
        return cache

    def assign_leader_epoch(self, epoch: int) -> None:
        """This log's replica became leader of `epoch`: its appends start at the current LEO (KIP-101)."""
        self.leader_epochs.assign(epoch, self._leo)

    def use_replicated_high_watermark(self) -> None:
        """From now on only set_high_watermark moves the HW (Rule: replicated-hw-from-outside; visibility.py
        says why the first call drops it to the log start); flushes keep fsyncing."""
        with self._lock:
            first = self._segments[0].base_offset
            self._visibility.use_replicated(Visible(first, first, 0))

    def use_local_high_watermark(self) -> None:
        """Back to the local policy (Rule: readers-below-visibility) for a log that has become its partition's
        only replica (a restarted broker can see its RF-1 partition offline before it leads it again)."""
        with self._lock:
            moved = self._visibility.use_local(self._leo, self._recovery_point, self._segment_set.visible_at)
            high_watermark = self._visibility.hw.offset
        if moved:
            self._visibility.notify(self, high_watermark)

    def set_high_watermark(self, offset: int) -> int:
        """Move the HW forward to `offset` (capped at the LEO, rounded down to a batch start); return it."""
        with self._lock:
            visibility = self._visibility
            if self._closed or offset <= visibility.hw.offset:
                return visibility.hw.offset
            visible = self._segment_set.visible_at(min(offset, self._leo))
            if not visibility.set_replicated(visible):
                return visibility.hw.offset
        visibility.notify(self, visible.offset)
        return visible.offset

    def truncate_replica_to(self, offset: int) -> None:
        """truncate_to(), then the epoch cache to the new LEO (a follower cutting its divergent tail)."""
        self.truncate_to(offset)
        self.leader_epochs.truncate_from_end(self._leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset`, which may lie past the LEO (Kafka's
        truncateFullyAndStartAt, log_truncation.py): a follower whose whole log is below its leader's log start."""
        self._truncation.truncate_fully_and_start_at(offset)
        self.leader_epochs.clear()

    def read_replica(self, offset: int, max_bytes: int) -> FileSlice:
        """read() up to the LEO instead of the HW: what a leader sends its followers."""
        with self._lock:
            end = self._segment_set.end(self._leo)
            snapshot = self._segment_set.snapshot
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        if offset < snapshot[1][0] or offset > end.offset:
            raise OffsetOutOfRange(offset, snapshot[1][0], end.offset, self.name)
        if offset == end.offset:  # a caught-up follower: nothing to read, and no segment tail to walk for it
            return FileSlice(snapshot[0][-1], 0, 0)
        return LogSegments.slice_from(snapshot, offset, max_bytes, end, end.offset, None)  # type: ignore[return-value]

    # -- properties -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        first = self._segment_set.bases[0]
        return first if self._log_start <= first else self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._visibility.hw.offset

    @property
    def stamps_append_time(self) -> bool:
        """Whether appends get LogAppendTime (message.timestamp.type): Produce then reports the time."""
        converter = self._pipeline.converter
        return converter is not None and converter.log_append_time

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return self._segment_set.size_bytes

    @property
    def flush_totals(self) -> tuple[int, float]:
        """(flushes, seconds spent in their fsyncs) so far: `statistics()`'s two, without its other work."""
        return self._flushes, self._flush_seconds

    def active_producers(self) -> list[tuple[int, int, int, int, int]]:
        """(producer id, epoch, last sequence, last timestamp, first offset of its open transaction) of each
        producer whose state the log keeps, by id (Kafka's DescribeProducers); -1 for a sequence not known (no
        batch remembered) and for no open transaction."""
        with self._lock:
            entries = sorted(self._producers.producers.items())
            return [(pid, e.epoch, e.batches[-1][1] if e.batches else -1, e.last_timestamp, e.txn_first_offset)
                    for pid, e in entries]

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def closed(self) -> bool:
        return self._closed

    def _fences_changed(self, ranges: tuple[tuple[int, int], ...]) -> None:
        if self._on_fence is not None:
            try:
                self._on_fence(self.topic, self.partition, ranges)
            except Exception:
                logger.exception("%s: fence listener failed", self.name)

    def fenced_ranges(self) -> tuple[tuple[int, int], ...]:
        """The offset ranges [start, end) lost to bit rot (Rule: bit-rot-fenced), oldest first: what a damaged follower
        re-fetches from its leader, and a damaged leader's reason to hand leadership to an in-sync replica."""
        return self._fences.ranges

    def statistics(self) -> LogStatistics:
        segments = self._segments
        return LogStatistics(
            self.name, self.log_start_offset, self._leo, self._visibility.hw.offset, self._recovery_point,
            len(segments), sum(s.size for s in segments), self._unflushed_messages,
            appends=self._appends, appended_bytes=self._appended_bytes, flushes=self._flushes,
            rolls=self._segment_set.rolls, deleted_segments=self._segment_set.deleted,
            checkpoints=self._recovery_checkpoint.writes,
            fenced_ranges=len(self._fences.ranges), fenced_offsets=self._fences.offsets,
            unverified_segments=sum(not s.verified for s in segments), verified_bytes=self._verified_bytes,
            flush_seconds=self._flush_seconds,
        )

    def __repr__(self) -> str:
        return f"PartitionLog({self.directory!r}, start={self.log_start_offset}, hw={self.high_watermark}, leo={self._leo})"


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
