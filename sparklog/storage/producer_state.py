"""Producer state: per partition, what the idempotent producer's checks know of each producer id (Kafka's
ProducerStateManager, design notes 4.6).

For each producer id: its epoch and its last five batches' (base sequence, last sequence, base offset, last
offset), the max timestamp of its last batch (for expiry), and the first offset of its ongoing transaction
(-1: none; Kafka's currentTxnFirstOffset).

Rule: producer-check (the check, on a client's append, before any byte is written; `check`):
  - no producer id (-1): not checked;
  - epoch below the entry's: InvalidProducerEpoch (a fenced, older instance of the producer);
  - (epoch, base sequence, last sequence) of one of the entry's last five batches: a duplicate, answered
    with that batch's original base offset and not appended (the producer retried a batch that landed);
  - a newer epoch: the sequence must restart at 0, else OutOfOrderSequence;
  - the same epoch: base sequence must be the entry's last sequence + 1 (wrapping past 2**31-1 to 0), else
    OutOfOrderSequence (a gap: a batch in between was lost);
  - no entry: accepted at any sequence. Kafka >= 2.5 does the same (KIP-360): the state may be gone because
    retention or DeleteRecords removed every batch of the producer, and the clients treat
    UNKNOWN_PRODUCER_ID as fatal or reset their sequences, which would be worse than accepting.
  A record set of several batches (`check_record_set`; Kafka's clients send one batch per partition) is
  checked batch by batch against the state the earlier ones leave; a duplicate among them is
  DuplicateSequence, since one base offset cannot answer for a record set that is partly new.
Rule: producer-update (the update, `update`): every appended batch with a producer id updates its entry, on the leader
and on followers alike (a follower appends the leader's batches unchecked, so it can take over with the same
state). A newer epoch replaces the entry; the entry keeps the last MAX_BATCHES_PER_PRODUCER batches.
Rule: producer-transactions (`begin_transaction` / `end_transaction`): a transactional data batch opens the
producer's transaction at its base offset unless one is open; an end-transaction marker closes it and
hands back its first offset (None: no transaction was open, the marker changes nothing). A newer epoch
keeps the open transaction (the coordinator ends it with a marker of the newer epoch). `ongoing` maps each
producer with an open transaction to its first offset: what the last stable offset is computed from
(storage/transactions.py). A producer with an open transaction never expires (Rule: producer-trimming).
The marker also drops the producer's KIP-890 verification entry (`verifications`, txn_verification.py Rule:
cached-until-marker); `needs_verification` reads both.
Rule: producer-snapshots (snapshots, `write_snapshot`): `<offset>.snapshot` beside the segments holds the state of
every batch below `offset`; written at segment roll (offset: the new segment's base) and at clean shutdown (the log end),
tmp -> fsync -> rename (Files.write_atomically), with a CRC-32C over its body. File format, big-endian:

    version       int16   SNAPSHOT_VERSION (2); version 1 files still load (no transaction field: none open)
    crc           uint32  CRC-32C of everything after this field
    count         int32   producers
    [producerId int64, epoch int16, lastTimestamp int64, currentTxnFirstOffset int64 (version 2 only; -1: none),
     batchCount int8,
     [baseSequence int32, lastSequence int32, baseOffset int64, lastOffset int64] * batchCount] * count

Rule: producer-recovery (recovery, `ProducerStateManager.load`): snapshots above the log end are deleted (a crash or a
truncation removed their batches); the newest remaining snapshot is read (an unreadable one is deleted and
the next older one tried) and the batches from its offset to the log end are replayed through `update`.
The result equals the state built incrementally (tested by property).
Rule: producer-trimming (trimming, `truncate_head`): when segments are deleted below the log start, entries whose last
batch is below it are dropped and snapshots below the first segment's base are deleted. Entries whose last batch is
older than producer.id.expiration.ms are dropped at segment roll, so memory stays bounded, unless a
transaction of theirs is open (Kafka's rule: its marker is still to come).

Not thread-safe: the log calls it under its append lock (the check and the append are atomic per partition).
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from typing import Iterable, Mapping, NamedTuple

from crc32c import crc32c

from sparklog.records.batch import BatchHeader
from sparklog.storage.errors import (DuplicateSequence, InvalidProducerEpoch, OutOfOrderSequence, StorageError,
                                     TransactionRefusedError)
from sparklog.storage.files import Files
from sparklog.storage.segment import parse_offset_file_name, segment_file_name
from sparklog.storage.txn_verification import TransactionVerifications

logger = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 2
SNAPSHOT_VERSIONS = (1, 2)  # what load() reads: version 1 has no currentTxnFirstOffset
NO_TXN = -1  # currentTxnFirstOffset of a producer with no open transaction
MAX_BATCHES_PER_PRODUCER = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN (= max.in.flight of an idempotent producer)
PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms: Kafka's default, one day
NO_PRODUCER_ID = -1  # RecordBatch.NO_PRODUCER_ID
INT32_MAX = 2**31 - 1
SEQUENCE_SPACE = 2**31  # sequences wrap from 2**31-1 to 0

_FILE_HEADER = struct.Struct(
    ">"
    "h"  # version
    "I"  # crc of the rest
    "i"  # producer count
)
_ENTRY = struct.Struct(
    ">"
    "q"  # producerId
    "h"  # epoch
    "q"  # lastTimestamp
    "q"  # currentTxnFirstOffset
    "b"  # batchCount
)
_ENTRY_V1 = struct.Struct(
    ">"
    "q"  # producerId
    "h"  # epoch
    "q"  # lastTimestamp
    "b"  # batchCount
)
_BATCH = struct.Struct(
    ">"
    "i"  # baseSequence
    "i"  # lastSequence
    "q"  # baseOffset
    "q"  # lastOffset
)
_CRC_START = struct.calcsize(">hI")  # the CRC covers the file from the count on


class BatchMetadata(NamedTuple):
    """What deduplication remembers of one appended batch. The hot path stores plain tuples of these four
    fields (a named tuple costs a microsecond more per append); they compare equal to BatchMetadata."""

    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


class ProducerEntry:
    """One producer id's epoch and last batches, oldest first (a deque that drops the oldest)."""

    __slots__ = ("epoch", "batches", "last_timestamp", "txn_first_offset")

    def __init__(self, epoch: int, batches: Iterable[tuple[int, int, int, int]] = (), last_timestamp: int = -1, txn_first_offset: int = NO_TXN):
        self.epoch = epoch
        self.batches: deque[tuple[int, int, int, int]] = deque(batches, MAX_BATCHES_PER_PRODUCER)
        self.last_timestamp = last_timestamp
        self.txn_first_offset = txn_first_offset

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerEntry) and (
            self.epoch, self.batches, self.last_timestamp, self.txn_first_offset) == (
            other.epoch, other.batches, other.last_timestamp, other.txn_first_offset)

    def __repr__(self) -> str:
        return (f"ProducerEntry(epoch={self.epoch}, batches={list(self.batches)}, "
                f"last_timestamp={self.last_timestamp}, txn_first_offset={self.txn_first_offset})")


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record: sequences wrap from 2**31-1 to 0 (Kafka's incrementSequence)."""
    if base_sequence > INT32_MAX - last_offset_delta:
        return last_offset_delta - (INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _follows(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (last_seq == INT32_MAX and next_seq == 0)


def snapshot_file_name(offset: int) -> str:
    return segment_file_name(offset, SNAPSHOT_SUFFIX)


def parse_snapshot_file_name(name: str) -> int | None:
    return parse_offset_file_name(name, SNAPSHOT_SUFFIX)


class CorruptSnapshot(StorageError):
    """A snapshot file that fails its CRC or does not parse: deleted, and an older one used (Rule:
    producer-recovery)."""


class ProducerStateManager:
    """The producer state of one partition log (module docstring); called under the log's append lock."""

    def __init__(self, directory: str, files: Files, expiration_ms: int = PRODUCER_ID_EXPIRATION_MS):
        self.directory = directory
        self._files = files
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # Rule: producer-transactions: producer id -> first offset of its open transaction
        self.verifications = TransactionVerifications()  # KIP-890's cache (txn_verification.py)

    # -- Rule: producer-check: the check -----------------------------------------------------------------------

    def check(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int) -> int | None:
        """Check one batch of a client's append (Rule: producer-check): the original base offset of a duplicate, None
        for a batch to append; raises InvalidProducerEpoch or OutOfOrderSequence. The batch that follows the
        last one (the common case) costs one lookup and two comparisons."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return None
        if epoch == entry.epoch:
            last = entry.batches[-1][1]
            if base_sequence == last + 1 or (last == INT32_MAX and base_sequence == 0):
                return None
            for batch in entry.batches:
                if batch[0] == base_sequence and batch[1] == last_sequence(base_sequence, last_offset_delta):
                    return batch[2]
            raise OutOfOrderSequence(f"producer {producer_id}: out of order sequence {base_sequence} "
                                     f"(expected {_next(last)})")
        return self._check_epoch(producer_id, epoch, entry.epoch, base_sequence)

    @staticmethod
    def _check_epoch(producer_id: int, epoch: int, current: int, base_sequence: int) -> None:
        if epoch < current:
            raise InvalidProducerEpoch(f"producer {producer_id}: epoch {epoch} is below the last seen epoch {current}")
        if base_sequence != 0:
            raise OutOfOrderSequence(f"producer {producer_id}: invalid sequence {base_sequence} for the new epoch "
                                     f"{epoch} (current epoch {current}); a new epoch starts at 0")
        return None

    def check_record_set(self, batches: Iterable[tuple[int, int, int, int]]) -> None:
        """Rule: producer-check for a record set of several batches (producer id, epoch, base sequence, last offset
        delta), each against the state the earlier ones will leave; a duplicate among them raises DuplicateSequence
        (one offset cannot answer for a record set that is partly new)."""
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last sequence) of earlier batches
        for producer_id, epoch, base_sequence, delta in batches:
            if producer_id in pending:
                current_epoch, current_last = pending[producer_id]
                if epoch == current_epoch and not _follows(current_last, base_sequence):
                    raise OutOfOrderSequence(f"producer {producer_id}: sequence {base_sequence} does not follow "
                                             f"{current_last} in the same request")
                if epoch != current_epoch:
                    self._check_epoch(producer_id, epoch, current_epoch, base_sequence)
            elif self.check(producer_id, epoch, base_sequence, delta) is not None:
                raise DuplicateSequence(f"producer {producer_id}: duplicate sequence {base_sequence} in a record "
                                        "set of several batches")
            pending[producer_id] = (epoch, last_sequence(base_sequence, delta))

    # -- Rule: producer-update: the update ----------------------------------------------------------------------

    def update(self, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int, base_offset: int,
               max_timestamp: int) -> None:
        """Record an appended batch (leader or follower). Followers never reject: an older epoch is kept as
        the leader wrote it (Kafka only warns on replication)."""
        entry = self.producers.get(producer_id)
        if entry is None or epoch != entry.epoch:
            txn = NO_TXN if entry is None else entry.txn_first_offset  # Rule: producer-transactions: a new epoch keeps it
            entry = self.producers[producer_id] = ProducerEntry(epoch, txn_first_offset=txn)
        last = base_sequence + last_offset_delta
        if last > INT32_MAX:
            last -= SEQUENCE_SPACE
        entry.batches.append((base_sequence, last, base_offset, base_offset + last_offset_delta))
        entry.last_timestamp = max_timestamp

    def entry_copy(self, producer_id: int) -> ProducerEntry | None:
        """A copy of `producer_id`'s entry (None: it has none), taken before an update whose batch may yet
        fail to reach the disk; `restore` puts it back (Rule: producer-update: only appended batches count)."""
        entry = self.producers.get(producer_id)
        return None if entry is None else ProducerEntry(entry.epoch, entry.batches, entry.last_timestamp,
                                                        entry.txn_first_offset)

    def restore(self, saved: Mapping[int, ProducerEntry | None]) -> None:
        """Put back the entries `entry_copy` took: the batches recorded since were not written."""
        for producer_id, entry in saved.items():
            if entry is None:
                self.producers.pop(producer_id, None)
            else:
                self.producers[producer_id] = entry
        self._index_ongoing()

    def update_from_headers(self, headers: Iterable[BatchHeader]) -> None:
        """`update` for each BatchHeader with a producer id (recovery and follower appends)."""
        for header in headers:
            if header.producer_id >= 0 and not header.is_control:
                self.update(header.producer_id, header.producer_epoch, header.base_sequence,
                            header.last_offset_delta, header.base_offset, header.max_timestamp)

    # -- Rule: producer-transactions: transactions -------------------------------------------------------------

    def begin_transaction(self, producer_id: int, first_offset: int) -> None:
        """A transactional data batch of `producer_id` was appended at `first_offset` (after `update`)."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset == NO_TXN:
            entry.txn_first_offset = self.ongoing[producer_id] = first_offset

    def end_transaction(self, producer_id: int) -> int | None:
        """An end-transaction marker of `producer_id` was appended: the first offset of the transaction it
        closes, or None when none was open (the marker then changes nothing but the verification cache:
        txn_verification.py Rule: cached-until-marker)."""
        self.verifications.clear(producer_id)
        entry = self.producers.get(producer_id)
        if entry is None or entry.txn_first_offset == NO_TXN:
            return None
        first, entry.txn_first_offset = entry.txn_first_offset, NO_TXN
        del self.ongoing[producer_id]
        return first

    def needs_verification(self, producer_id: int, epoch: int) -> bool:
        """txn_verification.py Rule: verify-before-first-append: neither a transaction of `epoch` open here
        nor a verified entry of that epoch."""
        entry = self.producers.get(producer_id)
        if entry is not None and entry.txn_first_offset != NO_TXN and entry.epoch == epoch:
            return False
        return not self.verifications.verified(producer_id, epoch)

    def refuse_unverified(self, producer_id: int, epoch: int) -> None:
        """The log's transaction_verifier (storage/transactions.py): TransactionRefusedError, nothing
        written, for a transactional batch the coordinator has not confirmed."""
        if self.needs_verification(producer_id, epoch):
            raise TransactionRefusedError(f"producer {producer_id} epoch {epoch}: Partition was not added to the "
                                          "transaction (or its transaction ended)")

    def _index_ongoing(self) -> None:
        self.ongoing = {pid: e.txn_first_offset for pid, e in self.producers.items() if e.txn_first_offset != NO_TXN}

    # -- Rule: producer-trimming: trimming ------------------------------------------------------------------------

    def truncate_head(self, log_start: int, first_segment_base: int) -> None:
        """Drop producers whose every batch is below `log_start`, and snapshots below `first_segment_base`."""
        gone = [pid for pid, entry in self.producers.items() if entry.batches[-1][3] < log_start]
        for pid in gone:
            del self.producers[pid]
            self.ongoing.pop(pid, None)
        for offset in self.snapshot_offsets():
            if offset < first_segment_base:
                self._delete_snapshot(offset)

    def expire(self, now_ms: int) -> int:
        """Drop producers whose last batch is older than producer.id.expiration.ms; return how many."""
        limit = now_ms - self.expiration_ms
        gone = [pid for pid, entry in self.producers.items()
                if entry.last_timestamp < limit and entry.txn_first_offset == NO_TXN]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    # -- Rule: producer-snapshots: snapshots -----------------------------------------------------------------------

    def encode(self) -> bytes:
        parts = [struct.pack(">i", len(self.producers))]
        for pid, entry in self.producers.items():
            parts.append(_ENTRY.pack(pid, entry.epoch, entry.last_timestamp, entry.txn_first_offset,
                                     len(entry.batches)))
            parts.extend(_BATCH.pack(*batch) for batch in entry.batches)
        body = b"".join(parts)
        return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body

    @staticmethod
    def decode(data: bytes) -> dict[int, ProducerEntry]:
        """The producers of a snapshot file's bytes; CorruptSnapshot (one line, why) if they are not one."""
        if len(data) < _FILE_HEADER.size:
            raise CorruptSnapshot(f"{len(data)} bytes are too short for a snapshot header")
        version, crc, count = _FILE_HEADER.unpack_from(data)
        if version not in SNAPSHOT_VERSIONS:
            raise CorruptSnapshot(f"unknown snapshot version {version}")
        if crc32c(memoryview(data)[_CRC_START:]) != crc:
            raise CorruptSnapshot("CRC-32C mismatch")
        producers, position = {}, _FILE_HEADER.size
        try:
            for _ in range(count):
                if version == 1:
                    (pid, epoch, timestamp, batch_count), txn = _ENTRY_V1.unpack_from(data, position), NO_TXN
                    position += _ENTRY_V1.size
                else:
                    pid, epoch, timestamp, txn, batch_count = _ENTRY.unpack_from(data, position)
                    position += _ENTRY.size
                batches = [_BATCH.unpack_from(data, position + i * _BATCH.size) for i in range(batch_count)]
                position += batch_count * _BATCH.size
                producers[pid] = ProducerEntry(epoch, batches, timestamp, txn)
        except struct.error as exc:
            raise CorruptSnapshot(f"truncated snapshot: {exc}") from None
        if position != len(data) or any(not entry.batches for entry in producers.values()):
            raise CorruptSnapshot("trailing bytes or an empty producer entry")
        return producers

    def write_snapshot(self, offset: int) -> None:
        """Write `<offset>.snapshot`: the state of every batch below `offset` (Rule: producer-snapshots)."""
        self._files.write_atomically(self._path(offset), self.encode())

    def snapshot_offsets(self) -> list[int]:
        offsets = (parse_snapshot_file_name(name) for name in self._files.listdir(self.directory))
        return sorted(offset for offset in offsets if offset is not None)

    def _path(self, offset: int) -> str:
        return os.path.join(self.directory, snapshot_file_name(offset))

    def _delete_snapshot(self, offset: int) -> None:
        try:
            self._files.unlink(self._path(offset))
        except FileNotFoundError:
            pass

    # -- Rule: producer-recovery: recovery ------------------------------------------------------------------------

    def load(self, log_end: int, at_most: int | None = None) -> int:
        """Delete snapshots above `log_end`, load the newest readable one (at or below `at_most` too, when
        given: a caller that must replay from there); return the offset replay starts at (0 when there is
        none: replay the whole log)."""
        self.producers, self.ongoing = {}, {}
        self.verifications.reset()
        for offset in reversed(self.snapshot_offsets()):
            if offset > log_end:
                self._delete_snapshot(offset)
                continue
            if at_most is not None and offset > at_most:
                continue
            data = self._files.read_file(self._path(offset))
            try:
                self.producers = self.decode(data or b"")
                self._index_ongoing()
                return offset
            except CorruptSnapshot as exc:
                logger.warning("%s: %s is unreadable (%s); deleting it and using an older one", self.directory,
                               snapshot_file_name(offset), exc)
                self._delete_snapshot(offset)
        return 0


def _next(sequence: int) -> int:
    return 0 if sequence == INT32_MAX else sequence + 1
