"""PartitionLog: one partition's log, a directory `<topic>-<partition>/` of segments (the paper's 3.1).

Rule 1: appends take whole encoded batches, validate all of them before writing any, assign offsets in the
headers and write them with one write; the log end offset (LEO) is the offset after the last append.
Rule 2: readers see offsets below the high watermark (HW) only: the flushed offset by default, or the LEO
with flush.visibility=appended, or, on a replicated log, what replication sets (Rules R1-R3 below). Readers never take the writer's lock: they use an immutable snapshot of
the segment tuple, swapped (copy-on-write) on roll, retention and truncation.
Rule 3: on open, the segments from the recovery point on (and always the last one) are replayed; damage at
or past the recovery point is a torn tail: truncated, and the later segments deleted (Kafka's LogLoader).
Rule 4: damage below the recovery point is bit rot in fsynced bytes: the damaged offsets are fenced
(fences.py), the valid batches after them move to a segment of their own (`<resumed base>.log`, written
tmp, fsync, rename, fsync dir) and the damaged segment is cut after its valid prefix; every valid batch is
kept and offsets are never reused. A fenced range is a gap between two segments, which reads step over.
Rule 5: a segment that was only loaded (its index trusted) is verified whole (CRC-32C and structure)
before its first use (a read, a time lookup, retention, truncation), by whichever comes first of a
reader (in its own thread) and the background scrubber (scrubber.py), which the LogManager nudges when it
opens such a log and which also re-verifies flushed segments periodically. A reader on an event loop asks
`needs_verification(offset)` (a read) or `has_unverified_segments()` (a time lookup) first and runs
`verify_at(offset)` or `verify_for_time_lookup()` on a thread, so the loop never replays a segment.
Rule 6: the log start offset is the larger of the first segment's base offset (retention deletes whole
segments, the active one too once all of it is below the HW, a new one rolled first, as Kafka's) and the
offset DeleteRecords moved it to (`delete_records_before`), which is checkpointed in
`log-start-offset-checkpoint` before the call returns; it only moves forward (truncation below it aside).
Rule 7: `reconfigure(LogConfig)` (Kafka's updateConfig) swaps the settings under the append lock: the next
append, flush check, roll and retention pass use them; the active segment's roll deadline moves with
them; index sizes apply from the next segment on. Batches are converted (timestamp type and bounds,
compression) by `log_validator` only when the config asks for it.
Rule 8 (compaction, cleaner.py): the cleaner swaps cleaned segments in with `replace_segments`, under the
append lock for the renames only: the old segments go to `.deleted` (slices already handed out keep
reading them) and the cleaned one, written and fsynced as `<base>.log.cleaned` and committed by its rename
to `.swap`, becomes live. On open a `.cleaned` file is deleted (the clean never committed) and a `.swap`
file completes its swap: the live segments whose offsets it covers are deleted and it is renamed live.
Where the cleaner stopped is checkpointed in `cleaner-offset-checkpoint`. Time and size retention run only
when cleanup.policy includes `delete`.
Rule 8a (max.compaction.lag.ms, KIP-354): on a compacted log the active segment also rolls at the first
append from max(its creation, its first batch's max timestamp) + max.compaction.lag.ms, if that comes
before its segment.ms deadline, so that no record stays uncleanable (in the active segment) much longer than
the lag. A first timestamp from before the segment's creation counts from the creation: a producer
replaying old records rolls a segment per lag, not per batch. Kafka rolls only at an append; `roll_if_due`
lets the cleaner roll an idle partition's overdue segment too.
Rule 9 (idempotence): batches with a producer id are checked against the producer state (producer_state.py)
under the append lock, in the same critical section as the append: a duplicate is answered with its original
base offset and not written, a stale epoch or a sequence gap raises and writes nothing. Every append (leader,
follower, recovery replay) updates the state; it is snapshotted at roll and close, rebuilt on open and after
truncation from the newest snapshot at or below the log end, and trimmed when segments are deleted.
Rule 10 (transactions, transactions.py): every appended transactional or control batch (leader, follower,
replay) goes to the transaction tracker after the producer state: a transactional batch opens its producer's
transaction, a marker closes it, an abort marker adds an entry to the aborted-transaction index
(txn_index.py), whose files follow the segments (`_set_segments`) and are rebuilt with the producer state.
A leader takes a client's transactional batches (through `transaction_verifier`, KIP-890's hook) but never
its control batches; markers are written by `append_control_batch` for the transaction coordinator.
`last_stable_offset` and `aborted_transactions` are what read_committed readers are served.
"""

from __future__ import annotations

import logging
import os
import functools
import struct
import threading
import time
from bisect import bisect_right
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping, NamedTuple

from sparklog.storage.config import CLEANUP_COMPACT, CLEANUP_DELETE, VISIBILITY_APPENDED, LogConfig
from sparklog.storage.errors import (CorruptSegmentError, DuplicateSequence, InvalidProducerEpoch, InvalidRecordError,
                                     LogClosedError,
                                     OffsetOutOfRange, OffsetsNotContiguous, OutOfOrderSequence, RecordBatchTooLarge,
                                     StorageError, TransactionRefusedError)
from sparklog.storage.fences import FencedRanges
from sparklog.storage.files import OS_FILES, Files
from sparklog.storage.flusher import Flusher, default_flusher
from sparklog.storage.leader_epochs import LeaderEpochCache
from sparklog.storage.log_validator import converter_for, take_client_timestamp_type
from sparklog.storage.producer_state import ProducerStateManager
from sparklog.storage.transactions import TXN_BITS, TransactionTracker
from crc32c import crc32c

from sparklog.records.append_check import APPEND_FIELDS as _APPEND_FIELDS
from sparklog.records.append_check import REFUSED_ATTRIBUTES, REFUSED_SIZE, check_leader_set, check_sets
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    MAGIC,
    MAX_CODEC,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptRecordError,
    parse_header,
    peek_size,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)
from sparklog.records.control import build_marker_batch
from sparklog.records.verify import records_error
from sparklog.storage.recovery import (
    INT64_MAX,
    READ_CHUNK_BYTES,
    ReadAt,
    RecoveryStop,
    Resync,
    ValidPrefix,
    find_next_batch,
)
from sparklog.storage.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SWAP_SUFFIX,
    BatchEntry,
    LogSegment,
    TimestampOffset,
    parse_segment_file_name,
    segment_file_name,
)
from sparklog.storage.time_bounds import TimeBounds
from sparklog.storage.topic_names import parse_partition_dir

logger = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"  # Kafka's name; here one per partition directory
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"  # Kafka's name; here one per partition directory
CLEANER_OFFSET_FILE = "cleaner-offset-checkpoint"  # Kafka's name (one per log dir there): the first dirty offset
CHECKPOINT_VERSION = 0  # Kafka's OffsetCheckpointFile version
TMP_SUFFIX = ".tmp"
DEFAULT_READ_BYTES = 1024 * 1024  # iter_slices' chunk: Kafka's default max.partition.fetch.bytes
DEFAULT_CHECKPOINT_INTERVAL_MS = 60_000  # log.flush.offset.checkpoint.interval.ms: Kafka's 60 s

_pack_base_offset = struct.Struct(">q").pack_into  # baseOffset is the first field, outside the CRC
# baseOffset, batchLength (as it is) and partitionLeaderEpoch in one call: the fields the CRC does not cover
# baseOffset, batchLength, partitionLeaderEpoch: the 16 bytes a leader writes in front of the rest of a batch
_LEADER_HEAD = struct.Struct(">qii")
_pack_leader_head = _LEADER_HEAD.pack
_LEADER_HEAD_SIZE = _LEADER_HEAD.size
_new_entry = functools.partial(tuple.__new__, BatchEntry)  # BatchEntry(*fields) without its Python __new__
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the attributes' low byte: codec, timestamp type, transactional, control
_CONTROL_REFUSED = "Clients are not allowed to write control records"  # Kafka's LogValidator, verbatim
_REFUSED_FROM_CLIENTS = CONTROL_MASK  # attributes a client's batch may not carry: markers are the leader's

# KIP-890 part 1's hook: called with (producer id, epoch) for each transactional batch a leader takes from a
# client, before anything is written; it raises TransactionRefusedError (INVALID_TXN_STATE) for a batch of a
# transaction the coordinator did not add this partition to. None: every transactional batch is taken.
TransactionVerifier = Callable[[int, int], None]


def _refuse_attributes(attributes: int) -> None:
    """A client's control batch: only the leader writes markers (append_control_batch), for the transaction
    coordinator; Kafka's LogValidator refuses a client's with these words."""
    raise InvalidRecordError(_CONTROL_REFUSED)


# producerId and, past producerEpoch, baseSequence: one unpack at their place in the header (records.HEADER)
_PRODUCER_AND_SEQUENCE = struct.Struct(">q2xi")
_PRODUCER_ID_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iqq")  # 43: after delta and two timestamps
_PRODUCER_AND_EPOCH = struct.Struct(">qh")  # producerId, producerEpoch at _PRODUCER_ID_OFFSET


def _refuse_sequence(producer_id: int, sequence: int, name: str) -> None:
    """Kafka's LogValidator for a client's batch: one with a producer id has a sequence (>= 0), or the
    producer state could neither deduplicate nor order it."""
    if producer_id >= 0 and sequence < 0:
        raise InvalidRecordError(f"Invalid sequence number {sequence} in record batch with producerId "
                                 f"{producer_id} in topic partition {name}")


def _check_records(batch: memoryview) -> None:
    """A client's batch whose records do not parse is refused whole (records/verify.py; Kafka's LogValidator
    iterates a client's records): stored, it would break every consumer of the partition."""
    reason = records_error(batch)
    if reason is not None:
        raise InvalidRecordError(f"the batch's records are malformed: {reason}")


HighWatermarkListener = Callable[["PartitionLog", int], None]
FenceListener = Callable[[str, int, tuple], None]  # (topic, partition, fenced ranges), at open and on change


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

    def pinned(self):
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

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return f"FileSlice({self.path!r}, position={self.position}, length={self.length})"


class _Visible(NamedTuple):
    """The high watermark and where it is in the files (always a batch boundary)."""

    offset: int
    segment_base: int
    position: int


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
    fenced_ranges: int = 0  # offset ranges lost to bit rot (Rule 4)
    fenced_offsets: int = 0  # offsets in them
    unverified_segments: int = 0  # loaded segments not yet verified whole (Rule 5)
    verified_bytes: int = 0  # bytes replayed whole by first-use verification and the scrubber


class PartitionLog:
    """The log of one partition. Thread-safe: one writer lock for appends, readers lock-free.

    Locks: `_flush_lock` (taken first) serializes flush, retention, truncation and close; `_lock` guards the
    append path and the small state swaps. fsync runs outside `_lock`, so appends continue during a flush.

    The recovery point (everything below it is fsynced) moves at every flush; the checkpoint file that
    records it is rewritten only every `checkpoint_interval_ms` (Kafka's
    log.flush.offset.checkpoint.interval.ms), on close, and at once when the point moves backwards
    (truncation). A stale checkpoint only costs replay time on open: recovery scans everything from it,
    and the file never names an offset above what is fsynced.
    """

    # Replication state, as class defaults so a log that never replicates pays nothing (see "replication").
    _replicated_hw = False  # True: set_high_watermark alone moves the HW
    _epoch_cache: LeaderEpochCache | None = None  # loaded on first use

    def __init__(self, directory: str, topic: str, partition: int, config: LogConfig,
                 files: Files, flusher: Flusher, clock: Callable[[], int], *,
                 checkpoint_interval_ms: int = DEFAULT_CHECKPOINT_INTERVAL_MS, on_fence: FenceListener | None = None):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self._use_config(config)
        self._log_start = 0  # DeleteRecords' log start offset (Rule 6); the first segment's base may be above it
        self._checkpoint_interval_s = checkpoint_interval_ms / 1000
        self._files = files
        self._flusher = flusher
        self._clock = clock
        self._lock = threading.Lock()
        self._flush_lock = threading.RLock()
        self._segments: tuple[LogSegment, ...] = ()
        self._bases: tuple[int, ...] = ()
        self._snapshot: tuple[tuple[LogSegment, ...], tuple[int, ...]] = ((), ())  # both, swapped at once
        self._leo = 0
        self._hw = _Visible(0, 0, 0)
        self._recovery_point = 0
        self._unflushed_messages = 0
        self._first_unflushed_at: float | None = None
        self._listeners: tuple[HighWatermarkListener, ...] = ()
        self._closed = False
        self._checkpointed: int | None = None  # what the checkpoint file says (None: missing or unreadable)
        self._checkpointed_at = time.monotonic()
        self._flush_everything = True  # the first flush after open: load() may have added index entries anywhere
        self._directory_dirty = True  # segment files created or renamed since the last fsync of the directory
        self._appends = 0  # append-path counters are plain attributes: a dict update costs twice as much
        self._appended_bytes = 0
        self._counters = dict(flushes=0, rolls=0, deleted_segments=0, checkpoints=0)
        self._on_fence = on_fence
        self._fences = FencedRanges(files, directory)
        self._verified_bytes = 0
        self._producers = ProducerStateManager(directory, files)
        self._txns = TransactionTracker(directory, files, self._producers)  # Rule 10
        self.transaction_verifier: TransactionVerifier | None = None  # KIP-890 part 1 (see TransactionVerifier)
        self._time_bounds: TimeBounds | None = None  # for the latest segments tuple whose segments were all verified

    def _use_config(self, config: LogConfig) -> None:
        self.config = config
        self.flush_ms = config.flush_ms
        self._flush_messages = config.flush_messages
        self._max_message_bytes = config.max_message_bytes
        self._segment_bytes = config.segment_bytes
        self._expose_on_append = config.flush_visibility == VISIBILITY_APPENDED
        self._converter = converter_for(config)
        compacted = CLEANUP_COMPACT in config.cleanup_policies
        self._compaction_lag_ms = config.max_compaction_lag_ms if compacted else None  # Rule 8a

    def reconfigure(self, config: LogConfig) -> None:
        """Use `config` from now on, without closing the log (Rule 7; Kafka's UnifiedLog.updateConfig).

        A visibility change from "appended" to "flushed" never moves the high watermark back: what readers
        have seen stays visible; later appends wait for their flush."""
        with self._lock:
            old = self.config
            self._use_config(config)
            active = self._segments[-1] if self._segments else None
            if active is not None and (old.segment_ms, old.cleanup_policies, old.max_compaction_lag_ms) != (
                    config.segment_ms, config.cleanup_policies, config.max_compaction_lag_ms):
                active.roll_at_ms = active.created_ms + config.segment_ms
                if active.size:
                    self._set_lag_deadline(active, active.read_header(0).max_timestamp)

    # -- opening ----------------------------------------------------------------------------------

    @classmethod
    def open(cls, directory: str, config: LogConfig | Mapping | None = None, *, files: Files | None = None,
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
        return log

    def _load(self) -> None:
        bases = self._scan_directory()
        recovery_point = self._read_recovery_point()
        self._fences = FencedRanges.load(self._files, self.directory, self._fences_changed)
        segments: list[LogSegment] = []
        now = self._clock()
        for i, base in enumerate(bases):
            if segments and not self._follows(segments[-1].next_offset, base, recovery_point):
                logger.warning("%s: segment %d does not follow offset %d; deleting it and %d later segment(s)",
                               self.name, base, segments[-1].next_offset, len(bases) - i - 1)
                self._delete_segment_files(bases[i:])
                break
            bound = bases[i + 1] if i + 1 < len(bases) else None
            segment = LogSegment(self.directory, base, self.config, self._files, now)
            prefix = self._load_segment(segment, recovery_point, last=bound is None)
            segments.append(segment)
            if not prefix.clean and prefix.next_offset < recovery_point:  # Rule 4
                added, prefix = self._fence_damage(segment, prefix, recovery_point, bound, segments.extend)
            if not prefix.clean:
                logger.warning("%s: segment %d truncated at offset %d (%s); deleting %d later segment(s)",
                               self.name, segments[-1].base_offset, prefix.next_offset, prefix.stop.value,
                               len(bases) - i - 1)
                self._delete_segment_files(bases[i + 1:])
                break
        if not segments:
            segments.append(LogSegment(self.directory, recovery_point, self.config, self._files, now))
        self._fences.clip(segments[0].base_offset, segments[-1].next_offset)
        self._set_segments(tuple(segments))
        active = segments[-1]
        self._leo = active.next_offset
        self._log_start = min(self._read_log_start(), self._leo)
        self._recovery_point = min(recovery_point, self._leo)
        self.flush()  # makes whatever recovery kept durable; rewrites the checkpoint if it named lost offsets
        self._hw = _Visible(self._leo, active.base_offset, active.size)
        self._rebuild_producer_state()

    # -- producer state (Rule 9) ------------------------------------------------------------------

    def _rebuild_producer_state(self) -> None:
        """The newest snapshot at or below the LEO, plus the batches after it (producer_state.py Rule 4), and
        the transactions and their index with it (transactions.py Rule 3)."""
        self._txns.rebuild(self._leo, self._bases, self._headers_from, self._read_batch)
        self._producers.truncate_head(self.log_start_offset, self._bases[0])

    def _read_batch(self, header: BatchHeader) -> bytes:
        """The bytes of the batch `header` describes (a marker the replay reads)."""
        segment = self._segments[max(0, bisect_right(self._bases, header.base_offset) - 1)]
        return segment._read_exact(segment.find_batch(header.base_offset, segment.size), header.size)

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """The headers of the batches from `offset` (a batch boundary) to the LEO, across segments.

        Each header is checked against the offset chain (a segment not yet verified whole, Rule 5, may hold
        bit rot): the walk leaves a segment at the first header that does not fit, which the verification
        then fences; the producers of those batches are as unknown as the batches."""
        for segment in self._segments:
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
                logger.warning("%s: producer state replay stopped in segment %d: %s", self.name,
                               segment.base_offset, exc)

    @property
    def producer_state(self) -> ProducerStateManager:
        """The producer state; read it only under the log's append lock or in tests."""
        return self._producers

    def _load_segment(self, segment: LogSegment, recovery_point: int, last: bool) -> ValidPrefix:
        """Kafka's LogLoader rule: replay fully every segment that may hold offsets at or past the recovery
        point, and the last one (appends go there: it is verified before they start, Rule 5)."""
        if last or segment.base_offset > recovery_point:
            return segment.recover(recovery_point)
        prefix = segment.load(recovery_point)  # cheap: trusts the index and replays only the tail
        if segment.next_offset > recovery_point:  # holds bytes that were never fsynced: replay it all
            prefix = segment.recover(recovery_point)
        return prefix

    def _follows(self, previous_end: int, base: int, recovery_point: int) -> bool:
        """May a segment starting at `base` follow one ending at `previous_end`? A gap is a fenced range
        (Rule 4), or one below the recovery point (the fence file was lost): fence it again."""
        if base == previous_end or self._fences.covers(previous_end, base):
            return True
        if previous_end < base and previous_end < recovery_point:
            logger.error("%s: offsets [%d, %d) are missing below the recovery point %d; fencing them",
                         self.name, previous_end, base, recovery_point)
            self._fences.add(previous_end, base)
            return True
        return False

    # -- bit rot: fencing damaged ranges (Rule 4) ----------------------------------------------------

    def _fence_damage(self, segment: LogSegment, prefix: ValidPrefix, protected_until: int, bound: int | None,
                      publish: Callable[[list[LogSegment]], None]) -> tuple[list[LogSegment], ValidPrefix]:
        """`segment` replays cleanly only to `prefix`, below `protected_until`: fence the damaged offsets,
        move each run of valid batches after them into a segment of its own, and cut the damaged ones.

        `bound` is the next segment's base (None for the last segment, whose fence then runs to the
        recovery point, kept as the base of a new empty segment so offsets are never reused). `publish`
        gets the new segments before any cut, so a reader never finds the batches in neither place.
        Returns the new segments and the replay of the last one (not clean: a torn tail, Rule 3).
        """
        added, cuts, source, last = [], [], segment, prefix
        while True:
            resync = find_next_batch(source._read_at, source.file_size(), prefix.truncate_at, prefix.next_offset + 1,
                                     INT64_MAX if bound is None else bound, self._may_end_at(protected_until, bound))
            end = resync.header.base_offset if resync else protected_until if bound is None else bound
            self._fence(source, prefix, end)
            cuts.append((source, prefix))
            if resync is None:  # the damage runs to the end of the file: the fence to the next segment
                if bound is None:
                    added.append(LogSegment(self.directory, end, self.config, self._files, self._clock()))
                last = ValidPrefix(end, 0, RecoveryStop.END_OF_LOG, 0)
                break
            source = self._move_tail(source, resync)
            added.append(source)
            prefix = last = source.recover(protected_until)
            if prefix.clean or prefix.next_offset >= protected_until:
                break
        publish(added)
        for damaged, valid in cuts:
            damaged.cut(valid.truncate_at, valid.next_offset)
            damaged.flush()
        self._files.fsync_dir(self.directory)
        return added, last

    def _may_end_at(self, protected_until: int, bound: int | None) -> Callable[[int], bool]:
        """Where a segment's last batch may end: at the next segment's base (or a fenced gap before it); the
        last segment at the recovery point or past it (unflushed batches follow)."""
        if bound is None:
            return lambda next_offset: next_offset >= protected_until
        return lambda next_offset: next_offset == bound or self._fences.covers(next_offset, bound)

    def _fence(self, segment: LogSegment, prefix: ValidPrefix, end: int) -> None:
        logger.error("%s: DATA LOSS: segment %s is damaged at byte %d (%s); fencing offsets [%d, %d) and keeping "
                     "every valid batch after them", self.name, segment.path, prefix.truncate_at, prefix.stop.value,
                     prefix.next_offset, end)
        self._fences.add(prefix.next_offset, end)  # before the files change (fences.py Rule 1)

    def _move_tail(self, source: LogSegment, resync: Resync) -> LogSegment:
        """Copy `source`'s bytes from `resync` on into a new segment named by the batch there (Rule 4)."""
        base = resync.header.base_offset
        path = os.path.join(self.directory, segment_file_name(base))
        tmp = path + TMP_SUFFIX
        out = self._files.open(tmp, create=True)
        try:
            self._files.truncate(out, 0)
            end, position = source.file_size(), resync.position
            while position < end:
                chunk = self._files.pread(source.fd, min(READ_CHUNK_BYTES, end - position), position)
                self._files.pwrite(out, chunk, position - resync.position)
                position += len(chunk)
            self._files.fsync(out)
        finally:
            self._files.close(out)
        self._files.rename(tmp, path)
        self._files.fsync_dir(self.directory)
        return LogSegment(self.directory, base, self.config, self._files, self._clock())

    def _scan_directory(self) -> list[int]:
        names = self._files.listdir(self.directory)
        for name in names:
            if name.endswith(DELETED_SUFFIX) or name.endswith(TMP_SUFFIX) or name.endswith(CLEANED_SUFFIX):
                self._files.unlink(os.path.join(self.directory, name))  # leftovers of a previous run (Rule 8)
        swaps = [name for name in names if name.endswith(SWAP_SUFFIX)]
        if swaps:
            self._complete_swaps(swaps)
            names = self._files.listdir(self.directory)
        logs = set()
        for name in names:
            parsed = parse_segment_file_name(name)
            if parsed and parsed[1] == ".log":
                logs.add(parsed[0])
        for name in names:  # an index without its log is an orphan
            parsed = parse_segment_file_name(name)
            if parsed and parsed[0] not in logs:
                self._files.unlink(os.path.join(self.directory, name))
        return sorted(logs)

    def _complete_swaps(self, swaps: list[str]) -> None:
        """Rule 8: each `<base>.log.swap` was fsynced whole before that name was given to it: it replaces
        the live segments whose base offsets lie in [base, its next offset); its index files are rebuilt."""
        bases = []
        for name in swaps:
            parsed = parse_segment_file_name(name[: -len(SWAP_SUFFIX)])
            if parsed and parsed[1] == ".log":
                bases.append(parsed[0])
            else:
                self._files.unlink(os.path.join(self.directory, name))  # an index: rebuilt from the .log
        for base in bases:
            swap = LogSegment(self.directory, base, self.config, self._files, 0, suffix=SWAP_SUFFIX)
            end = swap.recover(INT64_MAX).next_offset
            swap.close()
            for index_path in (swap.index.path, swap.time_index.path):
                self._files.unlink(index_path)
            covered = [b for b in self._live_bases() if base <= b < end]
            logger.info("%s: completing the swap of cleaned segment %d over offsets [%d, %d) (%d segment(s))",
                        self.name, base, base, end, len(covered))
            self._delete_segment_files(covered)
            self._files.rename(swap.path, os.path.join(self.directory, segment_file_name(base)))
        self._files.fsync_dir(self.directory)

    def _live_bases(self) -> list[int]:
        return sorted(p[0] for p in map(parse_segment_file_name, self._files.listdir(self.directory))
                      if p and p[1] == ".log")

    def _delete_segment_files(self, bases) -> None:
        for base in bases:
            segment = LogSegment(self.directory, base, self.config, self._files, 0)
            segment.delete_files()

    # -- the recovery point checkpoint (Kafka's OffsetCheckpointFile format) --------------------------

    def _read_recovery_point(self) -> int:
        """The checkpointed offset, or 0 (replay everything) if the file is missing or unreadable."""
        self._checkpointed = self._read_checkpoint(RECOVERY_POINT_FILE, "replaying every segment")
        return 0 if self._checkpointed is None else self._checkpointed

    def _read_checkpoint(self, file_name: str, fallback: str) -> int | None:
        """The offset of one of our checkpoint files (Kafka's OffsetCheckpointFile format, one entry);
        None when missing, or unreadable (logged, with what happens instead: `fallback`)."""
        data = self._files.read_file(os.path.join(self.directory, file_name))
        if data is None:
            return None
        try:
            version, count, entry = data.decode("ascii").splitlines()
            topic, partition, offset = entry.split(" ")
            if int(version) != CHECKPOINT_VERSION or int(count) != 1 or (topic, int(partition)) != (
                self.topic, self.partition
            ):
                raise ValueError(entry)
            return max(0, int(offset))
        except (ValueError, UnicodeDecodeError):
            logger.warning("%s: unreadable %s; %s", self.name, file_name, fallback)
            return None

    def _write_checkpoint(self, file_name: str, offset: int) -> None:
        text = f"{CHECKPOINT_VERSION}\n1\n{self.topic} {self.partition} {offset}\n"
        self._files.write_atomically(os.path.join(self.directory, file_name), text.encode("ascii"))

    def _write_recovery_point(self, offset: int) -> None:
        self._write_checkpoint(RECOVERY_POINT_FILE, offset)
        self._checkpointed = offset
        self._checkpointed_at = time.monotonic()
        self._counters["checkpoints"] += 1

    def _checkpoint_due(self, now: float, force: bool = False) -> bool:
        """Must the checkpoint file be rewritten now? (Called with the fsynced `_recovery_point`.)

        Always when it names offsets the log no longer has (truncation, recovery): a replay from there
        would trust bytes it never checked. Otherwise only when stale, on close (`force`), or once
        `checkpoint_interval_ms` has passed since the last write.
        """
        checkpointed, point = self._checkpointed, self._recovery_point
        if checkpointed == point:
            return False
        if checkpointed is not None and point < checkpointed:
            return True
        return force or now - self._checkpointed_at >= self._checkpoint_interval_s

    # -- the log start offset checkpoint (Rule 6) -------------------------------------------------

    def _read_log_start(self) -> int:
        """The offset DeleteRecords moved the log start to, or 0 if it never did (or the file is unreadable)."""
        return self._read_checkpoint(LOG_START_OFFSET_FILE, "the log starts at its first segment") or 0

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to `offset` (Kafka's DeleteRecords); return the new log start offset.

        `offset` may be at most the high watermark; records below it are no longer served (a fetch there is
        OFFSET_OUT_OF_RANGE), and whole segments below it are deleted at once. Moving it backwards is a no-op.
        The new start is checkpointed durably before this returns, so a restart keeps it (Rule 6).
        """
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    raise LogClosedError(f"{self.name} is closed")
                if offset < 0 or offset > self._hw.offset:
                    raise OffsetOutOfRange(offset, self.log_start_offset, self._hw.offset, self.name)
                if offset <= self.log_start_offset:
                    return self.log_start_offset
                self._log_start = offset
                self._write_checkpoint(LOG_START_OFFSET_FILE, offset)
                doomed = [s for s in self._segments[:-1] if s.next_offset <= offset]
                if doomed:
                    self._set_segments(self._segments[len(doomed):])
                    self._retire_locked(doomed)
                self._producers.truncate_head(offset, self._bases[0])
            self._schedule_deletes(doomed)
            return offset

    # -- appending --------------------------------------------------------------------------------

    def append(self, batches, append_time_ms: int | None = None) -> int:
        """Append one or more whole v2 batches (a producer's record set); return the first batch's base offset.

        `append_time_ms` is the broker's clock for LogAppendTime stamping and the timestamp bounds (default:
        the log's clock); the broker passes it so that it can answer Produce with the time it stamped.

        All batches are validated (size against max.message.bytes, magic, CRC-32C) before any byte is
        written: on RecordBatchTooLarge or CorruptRecordError nothing is appended. A bytearray is used as
        it is: its baseOffset fields are overwritten with the assigned offsets (as Kafka assigns them in
        the request's buffer); any other buffer (bytes, memoryview) is copied once.

        The one-batch case is the hot path: one header unpack, the CRC (in C), one clock read for
        segment.ms, one write; index bookkeeping only every index.interval.bytes.
        """
        data = batches if type(batches) is bytearray else bytearray(batches)
        converter = self._converter
        if converter is not None:  # the config asks for LogAppendTime, timestamp bounds or a codec
            now = self._clock() if append_time_ms is None else append_time_ms
            data = converter.convert(data, self._validate(memoryview(data))[0], now)
        size = len(data)
        if size < HEADER_SIZE:
            return self._append_many(data)  # raises, with the reason
        (length, magic, crc, _, flags, delta, max_timestamp, producer_id, epoch, sequence,
         count) = _APPEND_FIELDS.unpack_from(data)
        if length + LOG_OVERHEAD != size:
            return self._append_many(data)  # several batches, or a bad length
        if size > self._max_message_bytes:
            raise RecordBatchTooLarge(f"batch of {size} bytes exceeds max.message.bytes={self._max_message_bytes}")
        if (magic != MAGIC or delta < 0 or count < 0 or flags & COMPRESSION_MASK > MAX_CODEC
                or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != crc):
            validate_batch(data)  # raises CorruptRecordError, with the reason
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.name} is closed")
            if producer_id >= 0:  # Rule 9: an idempotent producer's batch
                duplicate = self._producers.check(producer_id, epoch, sequence, delta)
                if duplicate is not None:
                    return duplicate
            first = self._leo
            next_offset = first + delta + 1
            segment = self._segments[-1]
            if segment.size and (
                segment.size + size > self._segment_bytes or next_offset > segment.offset_limit
                or segment.indexes_full or self._clock() >= segment.roll_at_ms
            ):
                segment = self._roll_locked()
            if not segment.size and self._compaction_lag_ms is not None:
                self._set_lag_deadline(segment, max_timestamp)
            _pack_base_offset(data, 0, first)
            segment.append_batch(data, first, next_offset, max_timestamp)
            if producer_id >= 0:
                self._producers.update(producer_id, epoch, sequence, delta, first, max_timestamp)
                if flags & TXN_BITS:  # Rule 10
                    self._txns.apply(parse_header(data), data)
            self._leo = next_offset  # _appended_locked, inlined
            self._unflushed_messages += count
            if self._first_unflushed_at is None:
                self._first_unflushed_at = time.monotonic()  # once per flush interval, not per append
            self._appends += 1
            self._appended_bytes += size
            moved = self._expose_on_append and self._advance_hw(_Visible(next_offset, segment.base_offset, segment.size))
        self._after_append(moved, next_offset)
        return first

    def _appended_locked(self, segment: LogSegment, next_offset: int, messages: int, size: int) -> None:
        self._leo = next_offset
        self._unflushed_messages += messages
        if self._first_unflushed_at is None:
            self._first_unflushed_at = time.monotonic()  # once per flush interval, not per append
        self._appends += 1
        self._appended_bytes += size

    def _after_append(self, moved: bool, next_offset: int) -> None:
        """Outside the lock, after a leader's append: wake the readers waiting for the new high watermark
        (if it moved); Kafka's flush.messages, synchronously in the appending thread."""
        if moved:
            self._notify(next_offset)
        if self._unflushed_messages >= self._flush_messages:
            self.flush()

    def _append_many(self, data: bytearray) -> int:
        """append() of a record set of several batches (or of malformed bytes, which raise here)."""
        headers, offset_count = self._validate(memoryview(data))
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.name} is closed")
            self._check_producers(headers)
            segment = self._maybe_roll(len(data), offset_count)
            if not segment.size and self._compaction_lag_ms is not None:
                self._set_lag_deadline(segment, headers[0][1].max_timestamp)
            first = offset = self._leo
            entries, messages, appended = [], 0, []
            for position, header in headers:
                set_base_offset(data, offset, position)
                appended.append(header._replace(base_offset=offset))
                next_offset = offset + header.last_offset_delta + 1
                entries.append(BatchEntry(position, offset, next_offset, header.max_timestamp, header.size))
                messages += header.record_count
                offset = next_offset
            segment.append(data, entries)
            self._producers.update_from_headers(appended)
            self._txns.apply_record_set(data, zip((position for position, _ in headers), appended))  # Rule 10
            self._appended_locked(segment, offset, messages, len(data))
            moved = self._expose_on_append and self._advance_hw(_Visible(offset, segment.base_offset, segment.size))
        self._after_append(moved, offset)
        return first

    def _check_producers(self, headers: list[tuple[int, BatchHeader]]) -> None:
        """Rule 9 for a record set of several batches, each against the state the earlier ones will leave."""
        self._producers.check_record_set((h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
                                         for _, h in headers if h.producer_id >= 0 and not h.is_control)

    def _validate(self, view: memoryview) -> tuple[list[tuple[int, BatchHeader]], int]:
        headers, position, offsets, total = [], 0, 0, len(view)
        limit = self._max_message_bytes
        while position < total:
            if total - position < HEADER_SIZE:
                raise CorruptRecordError(f"{total - position} trailing bytes are not a whole batch")
            size = peek_size(view, position)
            if size > limit:
                raise RecordBatchTooLarge(f"batch of {size} bytes exceeds max.message.bytes={limit}")
            if size < HEADER_SIZE or size > total - position:
                raise CorruptRecordError(f"batch length {size} at byte {position} does not fit the {total} bytes")
            header = validate_batch(view[position:position + size])
            headers.append((position, header))
            offsets += header.last_offset_delta + 1
            position += size
        if not headers:
            raise CorruptRecordError("empty record set")
        return headers, offsets

    def _maybe_roll(self, size: int, offset_count: int) -> LogSegment:
        """Roll first if this append would overfill the active segment (bytes, index, int32 offsets) or
        segment.ms has passed since it was created; an empty segment always takes the append."""
        segment = self._segments[-1]
        if segment.size and (
            segment.size + size > self._segment_bytes
            or self._leo + offset_count > segment.offset_limit
            or segment.indexes_full
            or self._clock() >= segment.roll_at_ms
        ):
            segment = self._roll_locked()
        return segment

    def roll(self) -> None:
        """Start a new active segment now (a no-op when the active segment is empty)."""
        with self._lock:
            if self._segments[-1].size:
                self._roll_locked()

    def roll_if_due(self) -> bool:
        """Roll the active segment if it holds records and its roll deadline (segment.ms, Rule 8a) has passed,
        as the next append would; True if it rolled. The cleaner calls it for idle compacted partitions."""
        with self._lock:
            if self._closed or not self._segments[-1].size or self._clock() < self._segments[-1].roll_at_ms:
                return False
            self._roll_locked()
            return True

    def _set_lag_deadline(self, segment: LogSegment, first_timestamp: int) -> None:
        """Rule 8a for a segment whose first batch has `first_timestamp` (-1: none)."""
        lag = self._compaction_lag_ms
        if lag is not None:
            segment.roll_at_ms = min(segment.roll_at_ms, max(segment.created_ms, first_timestamp) + lag)

    def _roll_locked(self) -> LogSegment:
        old = self._segments[-1]
        old.seal_time_index()
        self._producers.expire(self._clock())
        self._producers.write_snapshot(self._leo)  # Rule 9: the state of every batch below the new segment
        segment = LogSegment(self.directory, self._leo, self.config, self._files, self._clock())
        self._set_segments(self._segments + (segment,))
        self._directory_dirty = True
        self._counters["rolls"] += 1
        return segment

    def _set_segments(self, segments: tuple[LogSegment, ...]) -> None:
        self._segments = segments
        self._bases = tuple(s.base_offset for s in segments)
        self._snapshot = (segments, self._bases)
        self._txns.set_segments(self._bases)  # Rule 10: the aborted-transaction index follows its segments

    # -- flushing and the high watermark ---------------------------------------------------------

    def flush_due(self, now: float) -> bool:
        """For the Flusher: is the oldest unflushed append flush.ms old, or a periodic checkpoint due?"""
        first = self._first_unflushed_at
        if first is not None and (now - first) * 1000 >= self.flush_ms:
            return True
        return self._checkpointed != self._recovery_point and self._checkpoint_due(now)

    def flush(self) -> None:
        """fsync everything appended so far and move the recovery point and the HW there.

        The checkpoint file follows the recovery point as `_checkpoint_due` says: not at every flush.
        """
        self._flush(force_checkpoint=False)

    def _flush(self, force_checkpoint: bool) -> None:
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    return
                active = self._segments[-1]
                visible = _Visible(self._leo, active.base_offset, active.size)
                first = 0 if self._flush_everything else self._first_unflushed_index()
                dirty = [s for s in self._segments[first:] if s.needs_flush]
                self._flush_everything = False
                for segment in dirty:
                    segment.seal_time_index()
                pending = self._unflushed_messages, self._first_unflushed_at
                self._unflushed_messages = 0
                self._first_unflushed_at = None
                directory_dirty, self._directory_dirty = self._directory_dirty, False
            try:
                for segment in dirty:
                    segment.flush()
                if directory_dirty:  # a new segment's bytes are durable only with its directory entry
                    self._files.fsync_dir(self.directory)
            except BaseException:
                self._restore_pending(*pending, directory_dirty)
                raise
            self._recovery_point = visible.offset
            if self._checkpoint_due(time.monotonic(), force_checkpoint):
                self._write_recovery_point(visible.offset)
            with self._lock:
                self._counters["flushes"] += 1
                moved = self._advance_hw(visible)
        if moved:
            self._notify(visible.offset)

    def _restore_pending(self, messages: int, first_at: float | None, directory_dirty: bool) -> None:
        """A flush failed: its appends are unflushed again, so the flusher retries without waiting for an append."""
        with self._lock:
            self._directory_dirty = self._directory_dirty or directory_dirty
            self._unflushed_messages += messages
            if first_at is not None and (self._first_unflushed_at is None or first_at < self._first_unflushed_at):
                self._first_unflushed_at = first_at
            self._flush_everything = True

    def _first_unflushed_index(self) -> int:
        """Segments before this one are fsynced whole, their sealed time index included: a flush skips them.

        The segment holding the recovery point and the one before it (whose time index a roll just
        sealed) are the earliest that may have unflushed bytes or index entries.
        """
        return max(0, bisect_right(self._bases, self._recovery_point) - 2)

    def _advance_hw(self, visible: _Visible) -> bool:
        if self._replicated_hw:
            return False  # replication sets the HW (set_high_watermark); flushes only fsync
        if visible.offset > self._hw.offset:
            self._hw = visible
            return True
        return False

    def add_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        """`listener(log, new_hw)` is called from whichever thread moves the HW; keep it short."""
        with self._lock:
            self._listeners = self._listeners + (listener,)

    def remove_high_watermark_listener(self, listener: HighWatermarkListener) -> None:
        with self._lock:
            self._listeners = tuple(fn for fn in self._listeners if fn is not listener)

    def _notify(self, high_watermark: int) -> None:
        for listener in self._listeners:
            try:
                listener(self, high_watermark)
            except Exception:
                logger.exception("%s: high watermark listener failed", self.name)

    # -- reading ----------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> FileSlice:
        """The bytes from the batch holding `offset`, up to `max_bytes` (on a batch boundary) and the HW.

        At least one whole batch is returned when one is visible, even if larger than max_bytes (KIP-74).
        `max_offset` (exclusive) caps further: only batches whose last offset is below it are included.
        `offset` at or past the HW (up to the LEO) gives an empty slice; outside [log start, LEO] raises
        OffsetOutOfRange. One read never spans two segments. An offset in a fenced range reads from the
        next valid batch (Rule 4); a segment is verified before its first read (Rule 5). A read that met
        the segment tuple changing under it (a roll, or a fence moving batches) looks again, so it never
        steps over batches that moved; CorruptSegmentError means damage not yet fenced.
        """
        while True:
            snapshot = self._snapshot
            try:
                piece = self._read_in(snapshot, offset, max_bytes, max_offset)
            except CorruptSegmentError:
                if self._snapshot is snapshot:
                    raise
                continue
            if piece is not None and self._snapshot is snapshot:
                return piece

    def _read_in(self, snapshot, offset: int, max_bytes: int, max_offset: int | None) -> FileSlice | None:
        """read() over one segment tuple; None when it had to verify a segment first (then look again)."""
        (segments, bases), hw = snapshot, self._hw
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        if offset < bases[0] or offset < self._log_start or offset > self._leo:
            raise OffsetOutOfRange(offset, self.log_start_offset, self._leo, self.name)
        limit = hw.offset if max_offset is None else min(hw.offset, max_offset)
        for segment in segments[max(0, bisect_right(bases, offset) - 1):]:
            if offset >= limit or segment.base_offset >= limit:
                break
            if not segment.verified:
                self._verify(segment)
                return None
            end = self._visible_end(segment, hw, limit)
            position = segment.find_batch(offset, end)
            if position is not None:
                return FileSlice(segment, position, self._slice_end(segment, position, end, max_bytes) - position)
        return FileSlice(segments[-1], 0, 0)

    @staticmethod
    def _visible_end(segment: LogSegment, hw: _Visible, limit: int) -> int:
        if segment.base_offset > hw.segment_base:
            return 0
        end = hw.position if segment.base_offset == hw.segment_base else segment.size
        if limit < hw.offset and limit < segment.next_offset:
            capped = segment.find_batch(limit, end)  # the batch holding `limit` is excluded
            end = end if capped is None else capped
        return end

    @staticmethod
    def _slice_end(segment: LogSegment, position: int, end: int, max_bytes: int) -> int:
        if position + max_bytes >= end:
            return end
        boundary = segment.boundary_at_or_below(position, position + max_bytes)
        if boundary == position:  # KIP-74: one whole batch even when it is larger than max_bytes
            boundary = position + segment.batch_size_at(position)
        return boundary

    def iter_slices(self, offset: int | None = None, max_bytes: int = DEFAULT_READ_BYTES) -> Iterator[FileSlice]:
        """Every visible batch from `offset` (default: the log start) to the HW, as consecutive slices."""
        offset = self.log_start_offset if offset is None else offset
        while offset < self.high_watermark:
            piece = self.read(offset, max_bytes)
            if not piece.length:
                return
            yield piece
            offset = self._offset_after(piece)

    @staticmethod
    def _offset_after(piece: FileSlice) -> int:
        segment, end = piece._segment, piece.position + piece.length
        next_offset = segment.next_offset  # read before size: append sets size first, then next_offset
        if end < segment.size:
            return segment.read_header(end).base_offset
        return next_offset

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first visible record whose timestamp is >= `timestamp` (Kafka's ListOffsets), or None.

        Once every segment is verified, the search starts at the segment that time_bounds.py's bisection
        names; before that it starts at the first, verifying each segment it passes (Rule 5).
        """
        segments, hw = self._segments, self._hw
        bounds = self._time_bounds_of(segments)
        first = 0 if bounds is None else bounds.first_candidate(timestamp)
        for i in range(first, len(segments)):
            segment = segments[i]
            if segment.base_offset >= hw.offset:
                break
            if not segment.verified:
                self._verify(segment)
                return self.offset_for_timestamp(timestamp)
            if segment.max_timestamp >= timestamp:
                found = segment.find_timestamp(timestamp, self._visible_end(segment, hw, hw.offset))
                if found is not None:
                    start = self.log_start_offset  # the batch may straddle a DeleteRecords start
                    return found if found.offset >= start else TimestampOffset(found.timestamp, start)
        return None

    def _time_bounds_of(self, segments: tuple[LogSegment, ...]) -> TimeBounds | None:
        """The TimeBounds of `segments` (the log's tuple), or None while one of them is unverified (its Rule
        1); built once per tuple, so a lookup costs nothing that grows with the number of segments."""
        bounds = self._time_bounds
        if bounds is not None and bounds.segments is segments:
            return bounds
        if not all(segment.verified for segment in segments):
            return None
        self._time_bounds = bounds = TimeBounds(segments)
        return bounds

    def offset_of_max_timestamp(self) -> TimestampOffset | None:
        """The first visible record holding the largest visible timestamp (ListOffsets MAX_TIMESTAMP,
        KIP-734), or None when nothing visible has a timestamp.

        Each segment knows its largest timestamp, so only the segment the high watermark cuts may need
        its visible batch headers read: when its largest timestamp lies above the mark. The lookup by that
        time then finds the first record holding it."""
        segments, hw = self._segments, self._hw
        largest, cut = NO_TIMESTAMP, None
        for segment in segments:
            if segment.base_offset >= hw.offset:
                break
            if not segment.verified:
                self._verify(segment)
                return self.offset_of_max_timestamp()
            if segment.next_offset > hw.offset:
                cut = segment
            else:
                largest = max(largest, segment.max_timestamp)
        if cut is not None:
            largest = max(largest, self._visible_max_timestamp(cut, hw))
        return self.offset_for_timestamp(largest) if largest > NO_TIMESTAMP else None

    def _visible_max_timestamp(self, segment: LogSegment, hw: _Visible) -> int:
        """The largest timestamp of `segment`'s batches below the high watermark `hw`."""
        end = self._visible_end(segment, hw, hw.offset)
        if end >= segment.size:
            return segment.max_timestamp
        largest, position = NO_TIMESTAMP, 0
        while position < end:
            header = segment.read_header(position)
            largest = max(largest, header.max_timestamp)
            position += header.size
        return largest

    # -- verification (Rule 5) ----------------------------------------------------------------------

    def needs_verification(self, offset: int) -> bool:
        """Whether a read at `offset` would first replay a loaded segment (cheap: no I/O, no lock)."""
        segment = self._segment_holding(offset)
        return segment is not None and not segment.verified

    def verify_at(self, offset: int) -> int:
        """Verify the segment a read at `offset` starts in, if it is not yet (blocking: call it off an event
        loop); returns the bytes replayed."""
        segment = self._segment_holding(offset)
        return self._verify(segment) if segment is not None and not segment.verified else 0

    def has_unverified_segments(self) -> bool:
        """Whether a time lookup may first replay loaded segments (cheap: no I/O, no lock);
        `verify_for_time_lookup()` verifies them."""
        return self._time_bounds_of(self._segments) is None

    def verify_for_time_lookup(self) -> int:
        """Verify every segment `offset_for_timestamp` would replay first (blocking: call it off an event
        loop); returns the bytes replayed. Not `scrub(None, True)`: that skips the active segment and the
        closed ones not yet flushed, which the lookup then replayed on the caller's loop."""
        replayed = 0
        for segment in self._segments:
            if self._closed or segment.base_offset >= self._hw.offset:
                break
            if not segment.verified:
                replayed += self._verify(segment)
        return replayed

    def _segment_holding(self, offset: int) -> LogSegment | None:
        segments, bases = self._snapshot
        index = bisect_right(bases, offset) - 1
        return segments[index] if index >= 0 else None

    def scrub(self, throttle: Callable[[int], None] | None = None, unverified_only: bool = False) -> int:
        """Verify every flushed closed segment whole (or only those not yet verified since the log opened),
        unverified ones first; return the bytes replayed.

        What the scrubber runs; `throttle(n)` is called after each read of n bytes and may sleep.
        """
        segments = self._segments
        todo = sorted((s for s in segments[:-1] if s.next_offset <= self._recovery_point
                       and not (unverified_only and s.verified)), key=lambda s: s.verified)
        replayed = 0
        for segment in todo:
            if self._closed:
                break
            replayed += self._verify(segment, throttle)
        return replayed

    def _verify(self, segment: LogSegment, throttle: Callable[[int], None] | None = None) -> int:
        """Replay `segment` whole; rebuild indexes that disagree with it (before its first use only: later
        the in-memory ones are the truth) and fence damage (Rule 4). Returns the bytes replayed.

        The replay takes no lock, so a reader never waits for the scrubber's throttled pass (both may
        replay the same segment); repairs are serialized by the flush lock and re-checked under it.
        """
        if self._closed or segment not in self._segments:
            return 0
        first_use = not segment.verified
        try:
            with segment.pinned():
                prefix, agrees = segment.scan(_throttled(segment._read_at, throttle), check_indexes=first_use)
        except LogClosedError:
            return 0  # deleted meanwhile (retention, truncation): a reader looks again
        self._verified_bytes += prefix.truncate_at
        if prefix.clean and agrees:
            segment.verified = True
            return prefix.truncate_at
        with self._flush_lock:
            if not self._closed and segment in self._segments:
                self._repair(segment, prefix, first_use and not segment.verified)
        return prefix.truncate_at

    def _repair(self, segment: LogSegment, prefix: ValidPrefix, first_use: bool) -> None:
        """Under the flush lock: another replay may have repaired `segment` since this one looked."""
        if not first_use and prefix.truncate_at >= segment.size:
            return  # already cut there
        if first_use:  # no reader has used it yet: rebuild its indexes from the file
            logger.warning("%s: the index files of segment %d disagree with its batches; rebuilt them",
                           self.name, segment.base_offset)
            prefix = segment.recover(INT64_MAX)
            segment.flush()
        if not prefix.clean:
            segments = self._segments
            i = segments.index(segment)
            bound = segments[i + 1].base_offset if i + 1 < len(segments) else None
            self._fence_damage(segment, prefix, self._recovery_point, bound,
                               lambda added: self._insert_after(segment, added))

    def _insert_after(self, segment: LogSegment, added: list[LogSegment]) -> None:
        with self._lock:
            segments = self._segments
            i = segments.index(segment) + 1
            self._set_segments(segments[:i] + tuple(added) + segments[i:])
            self._directory_dirty = True

    # -- retention, truncation, lifecycle --------------------------------------------------------

    def enforce_retention(self, now_ms: int | None = None) -> int:
        """Delete the oldest whole segments past retention.ms or beyond retention.bytes; return how many.

        Never one holding offsets at or above the HW. The active segment too, once non-empty and wholly
        below the HW: a new empty one is rolled at the LEO first, so a quiet log empties and its log start
        reaches its end (Kafka's LocalLog.deletableSegments and UnifiedLog.deleteSegments). A segment's age
        is that of its largest timestamp (the design notes' rule), or of its file's last modification when
        none of its batches carries a timestamp (Kafka's LogSegment.largestTimestamp).
        """
        now = self._clock() if now_ms is None else now_ms
        for segment in self._retention_victims(now):  # a hint, unlocked: their timestamps must be verified
            if not segment.verified:
                self._verify(segment)
        with self._flush_lock, self._lock:
            doomed = self._retention_victims(now)
            if doomed:
                if doomed[-1] is self._segments[-1]:
                    self._roll_locked()  # a log always has an active segment: the next append's
                self._set_segments(self._segments[len(doomed):])
                self._retire_locked(doomed)
                self._fences.clip(self._bases[0], INT64_MAX)
                self._producers.truncate_head(self.log_start_offset, self._bases[0])
        if doomed:
            self._files.fsync_dir(self.directory)  # the renames: a crash must not bring the segments back
        self._schedule_deletes(doomed)
        return len(doomed)

    def _retention_victims(self, now: int) -> list[LogSegment]:
        if CLEANUP_DELETE not in self.config.cleanup_policies:
            return []  # Rule 8: a compact-only topic keeps every key's last value, however old
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        excess = sum(s.size for s in self._segments) - retention_bytes
        victims, active = [], self._segments[-1]
        for segment in self._segments:
            if segment.next_offset > self._hw.offset or (segment is active and not segment.size):
                break
            by_time = retention_ms >= 0 and now - segment.largest_timestamp > retention_ms
            by_size = retention_bytes >= 0 and excess - segment.size >= 0
            if not (by_time or by_size):
                break
            victims.append(segment)
            excess -= segment.size
        return victims

    # -- compaction (Rule 8; the cleaner itself is cleaner.py) ---------------------------------------

    def cleaner_checkpoint(self) -> int:
        """The first offset the cleaner has not deduplicated yet (0 if it never ran here)."""
        return self._read_checkpoint(CLEANER_OFFSET_FILE, "cleaning from the log start") or 0

    def write_cleaner_checkpoint(self, offset: int) -> None:
        self._write_checkpoint(CLEANER_OFFSET_FILE, offset)

    def replace_segments(self, old: tuple[LogSegment, ...], cleaned: LogSegment) -> bool:
        """Swap `cleaned` (committed as `.swap`, flushed) in for the consecutive segments `old`; False (nothing
        changed) when `old` is no longer a run of the live segments (retention or truncation ran meanwhile).

        Only renames happen under the append lock; the old segments' files are deleted after
        file.delete.delay.ms, so slices already handed out stay readable."""
        with self._lock:
            segments = self._segments
            if self._closed or not old or old[0] not in segments:
                return False
            i = segments.index(old[0])
            if segments[i:i + len(old)] != old or i + len(old) == len(segments):
                return False
            following, hw = segments[i + len(old)], self._hw
            if old[0].base_offset <= hw.segment_base and hw.offset == following.base_offset:
                # The HW sits at the end of `old`: name the same offset as the start of the segment after
                # it, true of the old segments and of `cleaned`, whose size differs (KIP-534 can grow it).
                self._hw = _Visible(hw.offset, following.base_offset, 0)
            self._retire_locked(list(old))
            cleaned.rename_files("")
            self._set_segments(segments[:i] + (cleaned,) + segments[i + len(old):])
            self._directory_dirty = True
        self._files.fsync_dir(self.directory)
        self._schedule_deletes(list(old))
        return True

    def _retire_locked(self, segments: list[LogSegment]) -> None:
        """Rename to `.deleted` at once (a new segment may reuse the name); see _schedule_deletes."""
        for segment in segments:
            segment.rename_deleted()
        self._directory_dirty = self._directory_dirty or bool(segments)
        self._counters["deleted_segments"] += len(segments)

    def _schedule_deletes(self, segments: list[LogSegment]) -> None:
        """Remove the files after file.delete.delay.ms, so that slices already handed out stay readable."""
        delay_ms = self.config.file_delete_delay_ms
        for segment in segments:
            if delay_ms == 0:
                segment.delete_files()
            else:
                self._flusher.call_later(delay_ms / 1000, segment.delete_files)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= `offset` (for a follower's log divergence).

        A batch straddling `offset` is removed whole, so the LEO may end up below `offset`. Below the log
        start, the log is emptied and restarts at `offset` (Kafka's truncateFullyAndStartAt).
        """
        segments, bases = self._snapshot
        holder = segments[max(0, bisect_right(bases, offset) - 1)]
        if not holder.verified:
            self._verify(holder)
        with self._flush_lock:
            with self._lock:
                if offset >= self._leo:
                    return
                doomed = self._truncate_locked(offset)
                self._fences.clip(self._bases[0], self._leo)
                self._rebuild_producer_state()
                cut = self._segments[-1]
            self._schedule_deletes(doomed)
            self.flush()  # fsyncs the directory (the renames) and rewrites the checkpoint if it named removed offsets
            self._files.fsync(cut.fd)  # the cut itself: flush() skips a segment the cut left empty

    def _truncate_locked(self, offset: int) -> list[LogSegment]:
        segments = self._segments
        if offset <= segments[0].base_offset or offset < self._log_start:  # Kafka's truncateFullyAndStartAt
            doomed = list(segments)
            self._retire_locked(doomed)  # first: the fresh segment may reuse a doomed one's name
            keep = (LogSegment(self.directory, offset, self.config, self._files, self._clock()),)
            self._directory_dirty = True
            self._log_start = offset
        else:
            keep = tuple(s for s in segments if s.base_offset < offset)
            doomed = [s for s in segments if s.base_offset >= offset]
            self._retire_locked(doomed)
            keep[-1].truncate_to_offset(offset)
        self._set_segments(keep)
        active = keep[-1]
        self._leo = active.next_offset
        if self._hw.offset > self._leo:
            self._hw = _Visible(self._leo, active.base_offset, active.size)
        self._recovery_point = min(self._recovery_point, self._leo)
        return doomed

    def close(self) -> None:
        """Flush, checkpoint the recovery point (so the next open skips the replay) and close the files."""
        if self._closed:
            return
        self._flusher.unregister(self)
        self._flush(force_checkpoint=True)
        with self._flush_lock, self._lock:
            self._producers.write_snapshot(self._leo)  # Rule 8: the next open replays nothing
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

    # -- replication: what a leader and its followers need of the log -------------------------------
    #
    # Rule R1: a leader stamps its leader epoch into every batch it appends (the field is outside the CRC),
    # and the epoch cache records where each epoch starts. Rule R2: a follower appends the leader's batches
    # verbatim, at their own offsets, which must continue the log exactly. Rule R3: with replication the
    # HW is set from outside (min LEO over the ISR on a leader, the leader's HW on a follower), never by a
    # flush; it only moves forward, except when truncation cuts it. One appender at a time (the broker's
    # event loop): the epoch cache is updated beside the append, not under the log's lock.

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

    def append_as_leader(self, batches, leader_epoch: int, append_time_ms: int | None = None) -> int:
        """append() with `leader_epoch` stamped into every batch header and recorded in the epoch cache.

        The batches are a client's (a Produce request's, or the group coordinator's): a control batch among
        them refuses the record set (InvalidRecordError), as Kafka's LogValidator does for a client's; the
        markers are the leader's (append_control_batch); a transactional batch is taken unless
        `transaction_verifier` raises (TransactionRefusedError, Rule 10). So does a batch whose
        records do not parse (records/verify.py), which no consumer could read, and one with a producer id but
        a negative baseSequence (InvalidRecordError, Kafka's "Invalid sequence number"); a batch saying
        LogAppendTime is refused or taken as CreateTime (log_validator Rule 7). A plain set (the common one,
        an idempotent producer's too: check_leader_set says which) is appended by _append_plain, with the same
        outcome."""
        if self._converter is None:
            plain = check_leader_set(batches, self._max_message_bytes)
            if plain is not None:
                return self._append_plain(batches, plain, leader_epoch)
        data = batches if type(batches) is bytearray else bytearray(batches)
        position, size = 0, len(data)
        while position + HEADER_SIZE <= size:  # a bad length stops the walk; append() then refuses the bytes
            if data[position + _ATTRIBUTES_LOW] & _REFUSED_FROM_CLIENTS:
                _refuse_attributes(data[position + _ATTRIBUTES_LOW])
            if data[position + _ATTRIBUTES_LOW] & TRANSACTIONAL_MASK:
                self._verify_transactional(*_PRODUCER_AND_EPOCH.unpack_from(data, position + _PRODUCER_ID_OFFSET))
            if data[position + _ATTRIBUTES_LOW] & TIMESTAMP_TYPE_MASK:  # LogAppendTime: log_validator Rule 7
                take_client_timestamp_type(data, position, self.stamps_append_time)
            _refuse_sequence(*_PRODUCER_AND_SEQUENCE.unpack_from(data, position + _PRODUCER_ID_OFFSET), self.name)
            set_partition_leader_epoch(data, leader_epoch, position)
            batch_size = peek_size(data, position)
            if batch_size < HEADER_SIZE:
                break
            _check_records(memoryview(data)[position:position + batch_size])
            position += batch_size
        cache = self.leader_epochs
        if leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, self._leo)
        return self.append(data, append_time_ms)

    def _verify_transactional(self, producer_id: int, epoch: int) -> None:
        """A client's transactional batch: it has a producer id (else no marker could close its transaction),
        and the verifier (KIP-890's hook, Rule 10), when installed, takes it."""
        if producer_id < 0:
            raise InvalidRecordError(f"a transactional batch has no producer id in topic partition {self.name}")
        if self.transaction_verifier is not None:
            self.transaction_verifier(producer_id, epoch)

    def _append_plain(self, batches, plain: tuple, leader_epoch: int) -> int:
        """append_as_leader of a record set check_leader_set took (`plain`: its entries, offsets, records and
        idempotent batches): every check that set could fail is passed already but the producer state's
        (Rule 9), which runs under the lock before the roll as append()'s and _append_many's do: a lone
        batch's duplicate is answered with its original base offset, and a duplicate among several batches,
        a stale epoch or a sequence gap raise, all with nothing written. What is left is append()'s: the
        roll (once, for the whole set, as _append_many's), one write with offsets and the leader epoch
        stamped and the indexes kept in one compiled walk (LogSegment.append_leader_set), the producer state
        updated for what was written, the high watermark and flush.messages once. A failed write leaves the
        LEO and the producer state where they were."""
        entries, offset_count, messages, idempotent = plain
        data = batches if type(batches) is bytearray else bytearray(batches)
        cache = self.leader_epochs
        if leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, self._leo)
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.name} is closed")
            if idempotent:
                duplicate = self._check_plain_producers(entries)
                if duplicate is not None:
                    return duplicate
            segment = self._maybe_roll(len(data), offset_count)
            if not segment.size and self._compaction_lag_ms is not None:
                self._set_lag_deadline(segment, entries[0][3])
            first = self._leo
            offset = segment.append_leader_set(data, first, leader_epoch)
            if idempotent:
                self._update_plain_producers(entries, first)
            self._appended_locked(segment, offset, messages, len(data))
            moved = self._expose_on_append and self._advance_hw(_Visible(offset, segment.base_offset, segment.size))
        self._after_append(moved, offset)
        return first

    def _check_plain_producers(self, entries: list) -> int | None:
        """Rule 9 for a set _append_plain takes: one batch as append() checks it (a duplicate's original base
        offset, or None), several as _append_many does (check_record_set: a duplicate among them raises)."""
        if len(entries) == 1:
            _, _, offsets, _, producer_id, epoch, sequence = entries[0]
            return self._producers.check(producer_id, epoch, sequence, offsets - 1)
        self._producers.check_record_set((e[4], e[5], e[6], e[2] - 1) for e in entries if e[4] >= 0)
        return None

    def _update_plain_producers(self, entries: list, first: int) -> None:
        """Rule 9's update for the batches of a set _append_plain wrote from offset `first`."""
        update = self._producers.update
        offset = first
        for _, _, offsets, max_timestamp, producer_id, epoch, sequence in entries:
            if producer_id >= 0:
                update(producer_id, epoch, sequence, offsets - 1, offset, max_timestamp)
            offset += offsets

    def append_group_as_leader(self, record_sets: list, leader_epoch: int, append_time_ms: int | None = None) -> list:
        """`append_as_leader` of each record set in order, with one write per segment: a broker's pipelined
        one-partition Produce requests, taken from one socket read.

        The outcome of each set is what calling `append_as_leader` on it alone, in order, would give:
        `(base offset, log end offset after it)`, or the exception it would raise (nothing of that set is
        written; the sets around it are). Each batch is checked on its own (size, magic, CRC-32C, the
        idempotent producer's epoch and sequence against the state the earlier sets leave), gets its own
        base offset, and the segment rolls between two sets where a lone append would roll (bytes, offsets,
        index room, segment.ms read once per group). The high watermark (records visible at append) moves
        and its listeners run once, after the group; flush.messages is checked once, after the group, so
        every set is on disk as required before any of them is answered. Sets this path does not take
        (several batches, a log whose config converts batches) go through `append_as_leader` in their turn.
        """
        outcomes: list = [None] * len(record_sets)
        run: list = []  # (index in record_sets, view, header fields) of one-batch sets, appended together
        checked = check_sets(record_sets, self._max_message_bytes) if self._converter is None else None
        for i, records in enumerate(record_sets):
            fields = None if checked is None else checked[i]
            if fields is not None and records[_ATTRIBUTES_LOW] & TIMESTAMP_TYPE_MASK:
                fields = None  # a batch saying LogAppendTime: append_as_leader's (log_validator Rule 7)
            if fields == REFUSED_ATTRIBUTES and not records[_ATTRIBUTES_LOW] & CONTROL_MASK:
                fields = None  # a transactional batch: append_as_leader's (Rule 10)
            if fields is None:
                if run:
                    self._append_run(run, outcomes, leader_epoch)
                    run = []
                try:
                    outcomes[i] = (self.append_as_leader(records, leader_epoch, append_time_ms), self._leo)
                except Exception as exc:  # noqa: BLE001 - handed back: the caller answers it per request
                    outcomes[i] = exc
                continue
            view = records if records.__class__ is memoryview else memoryview(records)
            try:
                if fields.__class__ is not tuple:  # refused, as append_as_leader would refuse it
                    self._refuse(fields, view)
                _refuse_sequence(fields[7], fields[9], self.name)
                _check_records(view)
            except (RecordBatchTooLarge, CorruptRecordError, InvalidRecordError, TransactionRefusedError) as exc:
                outcomes[i] = exc
                continue
            run.append((i, view, fields))
        if run:
            self._append_run(run, outcomes, leader_epoch)
        return outcomes

    def _refuse(self, code: int, view: memoryview) -> None:
        """Raise what append_as_leader raises for a set check_sets refused with `code`."""
        if code == REFUSED_ATTRIBUTES:  # a client's control or transactional batch, as in append_as_leader
            _refuse_attributes(view[_ATTRIBUTES_LOW])
        _refuse_sequence(*_PRODUCER_AND_SEQUENCE.unpack_from(view, _PRODUCER_ID_OFFSET), self.name)  # its order
        if code == REFUSED_SIZE:
            raise RecordBatchTooLarge(f"batch of {len(view)} bytes exceeds max.message.bytes={self._max_message_bytes}")
        validate_batch(view)  # raises CorruptRecordError, with the reason
        raise AssertionError(f"check_sets refused a batch validate_batch takes ({code})")

    def _append_run(self, run: list, outcomes: list, leader_epoch: int) -> None:
        """append_group_as_leader's one-batch sets, checked already: one lock, one write per segment.

        A write that fails (OSError, a closed file), or a roll that fails (its producer snapshot, its new
        files), fails the sets of that write and every later one of the run, as each lone append would have
        failed. The producer state changes only for what reached the log, as a lone append's does: the
        entries the sets of a write touch are copied before their first update and put back if the write
        fails, so that the producer's retry of those sets is appended (not OutOfOrderSequence). Each batch is
        written from the view it arrived in, behind a new 16-byte head (its offset, length and the leader's
        epoch): a write is one pwritev of those pieces, and the record set is never copied."""
        cache = self.leader_epochs
        if leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, self._leo)
        with self._lock:
            if self._closed:
                closed = LogClosedError(f"{self.name} is closed")
                for i, _, _ in run:
                    outcomes[i] = closed
                return
            producers = self._producers
            segment = self._segments[-1]
            now = self._clock()
            pieces: list = []  # per batch: its new head and the view of the rest, written with one pwritev
            pending = 0  # their bytes
            entries: list = []
            written: list = []  # indexes of the sets in pieces
            leo = committed = self._leo
            messages = appended = done_messages = done_appended = 0  # done_: written by a successful write
            saved: dict = {}  # producer id -> its entry before the sets in pieces (None: it had none)
            failed = None
            limits = None  # (bytes, next offset, batches) the segment takes before a lone append would roll it
            lag = self._compaction_lag_ms is not None
            for i, view, fields in run:
                if failed is not None:
                    outcomes[i] = failed
                    continue
                length, _, _, _, _, delta, max_timestamp, producer_id, epoch, sequence, count = fields
                if producer_id >= 0:  # Rule 9, against the state the earlier sets of the group left
                    try:
                        duplicate = producers.check(producer_id, epoch, sequence, delta)
                    except (OutOfOrderSequence, InvalidProducerEpoch, DuplicateSequence) as exc:
                        outcomes[i] = exc
                        continue
                    if duplicate is not None:
                        outcomes[i] = (duplicate, leo)
                        continue
                size = length + LOG_OVERHEAD  # len(view): check_sets took only sets it spans
                next_offset = leo + delta + 1
                if limits is None:  # a lone append's roll rule, read once per segment: nothing below changes
                    limits = self._roll_limits(segment, now)  # the segment until the run writes to it
                if segment.size + pending and (pending + size > limits[0] or next_offset > limits[1]
                                               or len(entries) >= limits[2]):
                    if entries:
                        failed = self._write_run(segment, pieces, pending, entries, written, outcomes)
                        if failed is not None:
                            producers.restore(saved)
                            outcomes[i] = failed
                            leo = committed
                            continue
                        committed, done_messages, done_appended = leo, messages, appended
                        pieces, pending, entries, written, saved = [], 0, [], [], {}
                    self._leo = leo  # written: the new segment (and its producer snapshot) starts here
                    try:
                        segment = self._roll_locked()
                    except (OSError, StorageError) as exc:  # nothing of this set or later ones is written
                        failed = outcomes[i] = exc
                        continue
                    limits = None
                if lag and not segment.size and not pending:
                    self._set_lag_deadline(segment, max_timestamp)
                pieces.append(_pack_leader_head(leo, length, leader_epoch))
                pieces.append(view[_LEADER_HEAD_SIZE:])
                entries.append(_new_entry((pending, leo, next_offset, max_timestamp, size)))
                pending += size
                written.append(i)
                if producer_id >= 0:
                    if producer_id not in saved:
                        saved[producer_id] = producers.entry_copy(producer_id)
                    producers.update(producer_id, epoch, sequence, delta, leo, max_timestamp)
                outcomes[i] = (leo, next_offset)
                leo = next_offset
                messages += count
                appended += 1
            if entries and failed is None:
                failed = self._write_run(segment, pieces, pending, entries, written, outcomes)
                if failed is None:
                    done_messages, done_appended = messages, appended
                else:
                    producers.restore(saved)
                    leo = committed
            moved = False
            if done_appended:
                self._appended_locked(segment, leo, done_messages, 0)
                self._appends += done_appended - 1
                moved = self._expose_on_append and self._advance_hw(_Visible(leo, segment.base_offset, segment.size))
        self._after_append(moved, leo)

    def _roll_limits(self, segment: LogSegment, now: int) -> tuple[int, int, int]:
        """What `segment` takes before a lone append rolls it: (bytes, next offset, batches) as of now; all
        zero when it is due already (segment.ms, or an index full: the first batch rolls it). A batch that
        is the segment's first is never rolled for them (the caller checks that)."""
        if segment.indexes_full or now >= segment.roll_at_ms:
            return (0, -1, 0)
        room = min(segment.index.max_entries - len(segment.index),
                   segment.time_index.max_entries - len(segment.time_index))
        return (self._segment_bytes - segment.size, segment.offset_limit, room - 1)

    def _write_run(self, segment: LogSegment, pieces: list, size: int, entries: list, written: list,
                   outcomes: list) -> Exception | None:
        """One write of a run's batches (`pieces`, `size` bytes); the exception (set as their outcome) if it failed."""
        try:
            segment.append(pieces, entries, size)
        except (OSError, StorageError) as exc:
            for i in written:
                outcomes[i] = exc
            return exc
        self._appended_bytes += size
        return None

    def append_replicated(self, batches) -> int:
        """Append a leader's batches as they are (offsets, epochs, bytes); return the new LEO.

        Each batch is validated (size, magic, CRC) and must start where the previous one ends, the first at
        the LEO (else OffsetsNotContiguous); nothing is written unless all pass. New leader epochs found in
        the headers are added to the epoch cache.
        """
        data = bytearray(batches)
        headers, _ = self._validate(memoryview(data))
        with self._lock:
            if self._closed:
                raise LogClosedError(f"{self.name} is closed")
            entries, messages, offset = [], 0, self._leo
            for position, header in headers:
                if header.base_offset != offset:
                    raise OffsetsNotContiguous(
                        f"{self.name}: replicated batch at offset {header.base_offset}, expected {offset}")
                entries.append(BatchEntry(position, offset, header.next_offset, header.max_timestamp, header.size))
                messages += header.record_count
                offset = header.next_offset
            segment = self._maybe_roll(len(data), offset - self._leo)
            segment.append(data, entries)
            self._producers.update_from_headers(header for _, header in headers)
            self._txns.apply_record_set(data, headers)  # Rule 10
            self._appended_locked(segment, offset, messages, len(data))
        cache = self.leader_epochs
        for _, header in headers:
            if header.partition_leader_epoch > cache.latest_epoch:
                cache.assign(header.partition_leader_epoch, header.base_offset)
        if self._unflushed_messages >= self._flush_messages:
            self.flush()
        return offset

    def use_replicated_high_watermark(self) -> None:
        """From now on only set_high_watermark moves the HW (Rule R3); flushes keep fsyncing.

        The first call drops the HW to the log start: what an opened log holds may include a tail no other
        replica has, and nothing may be shown as committed until replication says so (a leader learns it
        within one fetch of each ISR follower, a follower from its leader's next answer)."""
        with self._lock:
            if self._replicated_hw:
                return
            self._replicated_hw = True
            first = self._segments[0]
            self._hw = _Visible(first.base_offset, first.base_offset, 0)

    def use_local_high_watermark(self) -> None:
        """Back to Rule 2 for a log that has become its partition's only replica (a restarted broker can see
        its RF-1 partition offline, i.e. following nobody, before it leads it again): the HW follows this
        copy alone once more (fsyncs, or appends with flush.visibility=appended), and never moves back."""
        with self._lock:
            if not self._replicated_hw:
                return
            self._replicated_hw = False
            target = self._leo if self._expose_on_append else self._recovery_point
            moved = target > self._hw.offset and self._advance_hw(self._visible_at(target))
            high_watermark = self._hw.offset
        if moved:
            self._notify(high_watermark)

    def set_high_watermark(self, offset: int) -> int:
        """Move the HW forward to `offset` (capped at the LEO, rounded down to a batch start); return it."""
        with self._lock:
            if self._closed or offset <= self._hw.offset:
                return self._hw.offset
            visible = self._visible_at(min(offset, self._leo))
            if visible.offset <= self._hw.offset:
                return self._hw.offset
            self._hw = visible
        self._notify(visible.offset)
        return visible.offset

    def _visible_at(self, offset: int) -> _Visible:
        """Where `offset` is in the files, as a batch boundary at or below it."""
        segment = self._segments[max(0, bisect_right(self._bases, offset) - 1)]
        if offset >= segment.next_offset:
            return _Visible(segment.next_offset, segment.base_offset, segment.size)
        position = segment.find_batch(offset, segment.size)
        return _Visible(segment.read_header(position).base_offset, segment.base_offset, position)

    def truncate_replica_to(self, offset: int) -> None:
        """truncate_to(), then the epoch cache to the new LEO (a follower cutting its divergent tail)."""
        self.truncate_to(offset)
        self.leader_epochs.truncate_from_end(self._leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty the log and restart it at `offset`, which may lie past the LEO (Kafka's
        truncateFullyAndStartAt): a follower whose whole log is below its leader's log start."""
        with self._flush_lock:
            with self._lock:
                if self._closed:
                    raise LogClosedError(f"{self.name} is closed")
                doomed = list(self._segments)
                self._retire_locked(doomed)  # first: the fresh segment may reuse a doomed one's name
                fresh = LogSegment(self.directory, offset, self.config, self._files, self._clock())
                self._set_segments((fresh,))
                self._leo = offset
                self._hw = _Visible(offset, offset, 0)
                self._recovery_point = min(self._recovery_point, offset)
                self._fences.clip(offset, offset)  # no damaged range is left
                self._rebuild_producer_state()  # every snapshot and producer is below `offset`: none is left
            self._schedule_deletes(doomed)
            self.flush()
        self.leader_epochs.clear()

    def read_replica(self, offset: int, max_bytes: int) -> FileSlice:
        """read() up to the LEO instead of the HW: what a leader sends its followers."""
        with self._lock:
            active = self._segments[-1]
            end = _Visible(self._leo, active.base_offset, active.size)
            segments, bases = self._segments, self._bases
        if self._closed:
            raise LogClosedError(f"{self.name} is closed")
        if offset < bases[0] or offset > end.offset:
            raise OffsetOutOfRange(offset, bases[0], end.offset, self.name)
        if offset == end.offset:  # a caught-up follower: nothing to read, and no segment tail to walk for it
            return FileSlice(segments[-1], 0, 0)
        for segment in segments[max(0, bisect_right(bases, offset) - 1):]:
            limit = self._visible_end(segment, end, end.offset)
            position = segment.find_batch(offset, limit)
            if position is not None:
                return FileSlice(segment, position, self._slice_end(segment, position, limit, max_bytes) - position)
        return FileSlice(segments[-1], 0, 0)

    # -- transactions (Rule 10; the rules themselves are transactions.py's) -------------------------

    def append_control_batch(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                             leader_epoch: int) -> int:
        """Append, as the leader of `leader_epoch`, the end-transaction marker of `producer_id`'s transaction
        (records/control.py); return its offset. Replicated as any batch; every replica's producer state
        applies it. InvalidProducerEpoch, with nothing written, for an epoch below the producer's."""
        data = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                            partition_leader_epoch=leader_epoch))
        cache = self.leader_epochs
        if leader_epoch > cache.latest_epoch:
            cache.assign(leader_epoch, self._leo)
        with self._lock:
            self._txns.check_marker(producer_id, producer_epoch)
        return self._append_many(data)

    @property
    def last_stable_offset(self) -> int:
        """The LSO: the high watermark, or the first offset of a transaction not yet stable below it."""
        with self._lock:
            return self._txns.last_stable_offset(self._hw.offset, self.log_start_offset)

    def aborted_transactions(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions with data in [start, end): Fetch's
        aborted_transactions for a read_committed range."""
        with self._lock:
            return self._txns.aborted_between(start, end)

    @property
    def transactions(self) -> TransactionTracker:
        """The transaction tracker; read it only under the log's append lock or in tests."""
        return self._txns

    # -- properties -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        first = self._bases[0]
        return first if self._log_start <= first else self._log_start

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw.offset

    @property
    def stamps_append_time(self) -> bool:
        """Whether appends get LogAppendTime (message.timestamp.type): Produce then reports the time."""
        converter = self._converter
        return converter is not None and converter.log_append_time

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

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

    def _fences_changed(self, ranges: tuple) -> None:
        if self._on_fence is not None:
            try:
                self._on_fence(self.topic, self.partition, ranges)
            except Exception:
                logger.exception("%s: fence listener failed", self.name)

    def fenced_ranges(self) -> tuple[tuple[int, int], ...]:
        """The offset ranges [start, end) lost to bit rot (Rule 4), oldest first: what a damaged follower
        re-fetches from its leader, and a damaged leader's reason to hand leadership to an in-sync replica."""
        return self._fences.ranges

    def statistics(self) -> LogStatistics:
        segments = self._segments
        return LogStatistics(
            self.name, self.log_start_offset, self._leo, self._hw.offset, self._recovery_point,
            len(segments), sum(s.size for s in segments), self._unflushed_messages,
            appends=self._appends, appended_bytes=self._appended_bytes, **self._counters,
            fenced_ranges=len(self._fences.ranges), fenced_offsets=self._fences.offsets,
            unverified_segments=sum(not s.verified for s in segments), verified_bytes=self._verified_bytes,
        )

    def __repr__(self) -> str:
        return f"PartitionLog({self.directory!r}, start={self.log_start_offset}, hw={self.high_watermark}, leo={self._leo})"


def _throttled(read_at: ReadAt, throttle: Callable[[int], None] | None) -> ReadAt:
    if throttle is None:
        return read_at

    def read(position: int, length: int) -> bytes:
        data = read_at(position, length)
        throttle(len(data))  # what was read: replay asks for 1 MiB windows, most segments end sooner
        return data

    return read


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
