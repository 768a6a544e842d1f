"""AppendPipeline: the one way batches enter a partition log; every append rule is written here, once.

Entry points (PartitionLog's methods of the same names call them); each reads its record sets into `_Set`s
(stage 1) and hands them to the one write sequence, `_commit` (stages 2 and 3): a group, a follower's set,
a marker, a plain set of several batches and a client's set check_leader_set leaves are groups of one. Two
lone sequences stay beside it, for speed alone (a group of one through `_commit` cost about 3 us more CPU
per append: `append`'s own for a plain append of one batch, and `_append_plain`, a client's set
check_leader_set takes); each applies the rules of the stages `_commit` names, in the same order.
    append(batches)                      a plain append: offsets assigned, the batches' epochs kept
    append_as_leader(batches, epoch)     a client's record set: checked as a client's, epoch stamped
    append_group_as_leader(sets, epoch)  pipelined record sets of one partition: per set, what a lone
                                         append_as_leader would give, one write per segment
    append_replicated(batches)           a follower: the leader's batches verbatim, at their own offsets
    append_marker(producer id, ...)      the leader's end-transaction marker (never a client's: no client rules)
(recovery replays the producer state from the batch headers: PartitionLog._rebuild_producer_state).

Each goes through the same stages; the stage named is the one place its rule lives:
 1. read, outside the lock  -- `_append_set` / `append` (one batch: one header unpack, the CRC in C; several: `_validate`)
    (Rule: append-is-whole-batch: size against max.message.bytes, magic, CRC-32C of every batch before any
    byte is written); for a client's set, `_leader_set` (check_leader_set's one walk, or `_client_rules` +
    `_check_records`: Rule: client-batches-checked) and the config's conversion (log_validator, Rule:
    reconfigure-under-append-lock); a follower's set is checked contiguous within itself;
 2. under the append lock, `_commit`, per set: the log open; the producer state's
    check (Rule: producer-state-in-append: a lone batch's duplicate is answered with its original base
    offset, a duplicate among several raises, a stale epoch or a sequence gap raises, nothing written) or a
    follower's first offset against the LEO (Rule: follower-appends-verbatim); the roll (Rule:
    roll-before-overfill and Rule: compaction-lag-roll), writing what is pending first; the producer state
    updated; then one write of the pending sets (LogSegment.append_set: offsets, and a leader's epoch,
    stamped in place in one compiled walk, append_check.stamp_leader_set; one pwrite), the transaction
    tracker after it (transactions.py Rule: transactions-tracked), `_appended` (the LEO, the flush counters)
    and the visibility policy's move (visibility.py);
 3. after the lock: `_after_append` (the HW listeners, flush.messages), `_note_leader_epoch` (Rule:
    leader-stamps-epoch: the epoch cache records where each leader epoch starts).
Rule: append-is-whole-batch: appends take whole encoded batches, validate all of them before writing any,
assign offsets in the headers and write them with one write (per segment); the log end offset (LEO) is the
offset after the last append. A write that fails leaves the LEO and the producer state where they were.
Rule: stamp-in-place: a write stamps its batches' offsets (and a leader's epoch) in place: a bytearray an
entry point is given is used as it is (Kafka assigns offsets in the request's buffer), any other buffer
(a group's views, `bytes`) is copied once, into the one buffer of its write; no buffer a caller passed
otherwise is written to.
Rule: client-batches-checked: a client's control batch is refused (InvalidRecordError, Kafka's
LogValidator: markers are the leader's, `append_marker`); a transactional one needs a producer id and is
taken unless the log's `transaction_verifier` (KIP-890's hook, transactions.py) raises
TransactionRefusedError; refused too are a batch with a producer id and a negative baseSequence, and one
whose records do not parse (records/verify.py).
Rule: producer-state-in-append (idempotence): batches with a producer id are checked against the producer
state (producer_state.py) under the append lock, in the same critical section as the append: a duplicate is
answered with its original base offset and not written, a stale epoch or a sequence gap raises and writes
nothing. Every append (leader, follower, plain) updates the state for what it wrote, control batches aside
(and recovery replays it: log.py Rule: producer-state-follows-log); a set of a group is checked against the
state the sets before it left, and the entries a write's sets touched are put back if that write fails.
Rule: roll-before-overfill: the active segment rolls before an append that would overfill it (bytes past
segment.bytes, offsets past its int32 relative range, more batches than either index has entries left)
or once its roll deadline (segment.ms) has passed; an empty segment always takes the append. A group rolls
between two sets where a lone append would, the pending write counted.
Rule: compaction-lag-roll (max.compaction.lag.ms, KIP-354): on a compacted log the active segment also rolls
at the first append from max(its creation, its first batch's max timestamp) + max.compaction.lag.ms, if that
comes before its segment.ms deadline, so that no record stays uncleanable (in the active segment) much
longer than the lag. A first timestamp from before the segment's creation counts from the creation: a
producer replaying old records rolls a segment per lag, not per batch. Kafka rolls only at an append;
`PartitionLog.roll_if_due` lets the cleaner roll an idle partition's overdue segment too.
Rule: leader-stamps-epoch: a leader stamps its leader epoch into every batch it appends (the field is outside
the CRC), and the epoch cache records where each epoch starts. One appender at a time (the broker's event
loop): the epoch cache is updated beside the append, not under the log's lock.
Rule: follower-appends-verbatim: a follower appends the leader's batches verbatim, at their own offsets,
which must continue the log exactly (OffsetsNotContiguous).
Rule: transactional-write-alone: a set with a transactional or control batch is a write of its own, so that
the transaction tracker follows the producer state's update of exactly what was written.
"""

from __future__ import annotations

import struct
import time
from typing import Any, NoReturn

from crc32c import crc32c

from sparklog.records.append_check import APPEND_FIELDS as _APPEND_FIELDS
from sparklog.records.append_check import (KEEP_EPOCH, REFUSED_ATTRIBUTES, REFUSED_SIZE, LeaderSet, check_leader_set,
                                           check_sets)
from sparklog.records.batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, HEADER_SIZE,
                                    LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAGIC, MAX_CODEC, TIMESTAMP_TYPE_MASK,
                                    TRANSACTIONAL_MASK, BatchHeader, CorruptRecordError, parse_header, peek_size,
                                    validate_batch)
from sparklog.records.control import build_marker_batch
from sparklog.records.verify import records_error
from sparklog.storage.config import CLEANUP_COMPACT, LogConfig
from sparklog.storage.errors import (DuplicateSequence, InvalidProducerEpoch, InvalidRecordError, LogClosedError,
                                     OffsetsNotContiguous, OutOfOrderSequence, RecordBatchTooLarge, StorageError,
                                     TransactionRefusedError)
from sparklog.storage.log_owner import AppendOwner
from sparklog.storage.log_validator import converter_for, take_client_timestamp_type
from sparklog.storage.producer_state import ProducerEntry
from sparklog.storage.segment import LogSegment
from sparklog.storage.transactions import TXN_BITS

_pack_base_offset = struct.Struct(">q").pack_into  # baseOffset is the first field, outside the CRC
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the attributes' low byte: codec, timestamp type, transactional, control
_CONTROL_REFUSED = "Clients are not allowed to write control records"  # Kafka's LogValidator, verbatim
_REFUSED_FROM_CLIENTS = CONTROL_MASK  # attributes a client's batch may not carry: markers are the leader's
# producerId and, past producerEpoch, baseSequence: one unpack at their place in the header (records.HEADER)
_PRODUCER_AND_SEQUENCE = struct.Struct(">q2xi")
_PRODUCER_ID_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iqq")  # 43: after delta and two timestamps
_PRODUCER_AND_EPOCH = struct.Struct(">qh")  # producerId, producerEpoch at _PRODUCER_ID_OFFSET
Outcome = tuple[int, int] | BaseException | None  # a set's (base offset, LEO after it), what it raised, or not yet
# Per batch of a set with a producer id (control batches aside): (producer id, epoch, base sequence, last
# offset delta, its offset from the set's first offset, max timestamp)
_Producers = tuple[tuple[int, int, int, int, int, int], ...]
# A record set read for the write (stage 1): (its bytes, size, offsets it spans, records, its first batch's
# max timestamp, batches, its _Producers, its TXN_BITS, a follower's first offset or -1)
_Set = tuple[Any, int, int, int, int, int, _Producers, int, int]
_NO_PRODUCERS: _Producers = ()
_CHECK_ERRORS = (OutOfOrderSequence, InvalidProducerEpoch, DuplicateSequence, OffsetsNotContiguous)
_CLIENT_ERRORS = (RecordBatchTooLarge, CorruptRecordError, InvalidRecordError, TransactionRefusedError)


def _refuse_attributes(attributes: int) -> None:
    """A client's control batch: only the leader writes markers (`append_marker`), for the transaction
    coordinator; Kafka's LogValidator refuses a client's with these words."""
    raise InvalidRecordError(_CONTROL_REFUSED)


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


def _one_batch_set(data: Any, fields: tuple[int, ...]) -> _Set:
    """The _Set of one whole batch whose header APPEND_FIELDS read as `fields`."""
    length, _, _, _, flags, delta, max_timestamp, producer_id, epoch, sequence, count = fields
    producers = _NO_PRODUCERS
    if producer_id >= 0 and not flags & CONTROL_MASK:
        producers = ((producer_id, epoch, sequence, delta, 0, max_timestamp),)
    return (data, length + LOG_OVERHEAD, delta + 1, count, max_timestamp, 1, producers, flags & TXN_BITS, -1)


def _headers_set(data: bytearray, headers: list[tuple[int, BatchHeader]], offsets: int, base: int) -> _Set:
    """The _Set of a validated record set (`headers`: each batch's position and header)."""
    producers, txn, messages, at = [], 0, 0, 0
    for _, header in headers:
        if header.producer_id >= 0 and not header.is_control:
            producers.append((header.producer_id, header.producer_epoch, header.base_sequence,
                              header.last_offset_delta, at, header.max_timestamp))
        txn |= header.attributes & TXN_BITS
        messages += header.record_count
        at += header.last_offset_delta + 1
    return (data, len(data), offsets, messages, headers[0][1].max_timestamp, len(headers), tuple(producers), txn, base)


def _checked_set(data: bytearray, plain: LeaderSet) -> _Set:
    """The _Set of a record set check_leader_set took (`plain`: its entries, offsets, records, idempotent)."""
    entries, offsets, messages, idempotent = plain
    producers = _NO_PRODUCERS
    if idempotent:
        found, at = [], 0
        for _, _, spans, max_timestamp, producer_id, epoch, sequence in entries:
            if producer_id >= 0:
                found.append((producer_id, epoch, sequence, spans - 1, at, max_timestamp))
            at += spans
        producers = tuple(found)
    return (data, len(data), offsets, messages, entries[0][3], len(entries), producers, 0, -1)


class AppendPipeline:
    """The append stages of one log (see the module docstring). The log's state (LEO, segments, producer
    state, visibility) stays the log's; the pipeline reads and moves it under the log's append lock."""

    def __init__(self, log: AppendOwner, config: LogConfig):
        self.log = log
        self.configure(config)

    def configure(self, config: LogConfig) -> None:
        """The settings appends read, from `config` (Rule: reconfigure-under-append-lock: under the lock)."""
        self.max_message_bytes = config.max_message_bytes
        self.segment_bytes = config.segment_bytes
        self.converter = converter_for(config)
        compacted = CLEANUP_COMPACT in config.cleanup_policies
        self.lag_ms = config.max_compaction_lag_ms if compacted else None  # Rule: compaction-lag-roll

    # -- entry points ------------------------------------------------------------------------------

    def append(self, batches: Any, append_time_ms: int | None = None) -> int:
        """PartitionLog.append: one batch is the lone hot path, written here (one header unpack, the CRC in C,
        one clock read for segment.ms, one write: the lone sequence kept beside `_commit` because a group of
        one through it measured slower, about 3 us more CPU per append, 0.36-0.80x of this path in
        benchmarks/storage.py; every rule it applies is the stage `_commit` names); a set of several batches
        is a group of one (`_commit`)."""
        data = batches if type(batches) is bytearray else bytearray(batches)
        converter = self.converter
        if converter is not None:  # the config asks for LogAppendTime, timestamp bounds or a codec
            now = self.log._clock() if append_time_ms is None else append_time_ms
            data = converter.convert(data, self._validate(memoryview(data))[0], now)
        size = len(data)
        if size >= HEADER_SIZE:
            (length, magic, crc, _, flags, delta, max_timestamp, producer_id, epoch, sequence,
             count) = _APPEND_FIELDS.unpack_from(data)
            if length + LOG_OVERHEAD == size:  # one batch: stage 1 (_validate's rules, for one batch)
                if size > self.max_message_bytes:  # Rule: append-is-whole-batch
                    self._too_large(size)
                if (magic != MAGIC or delta < 0 or count < 0 or flags & COMPRESSION_MASK > MAX_CODEC
                        or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != crc):
                    validate_batch(data)  # raises CorruptRecordError, with the reason
                log = self.log  # stages 2 and 3, for one batch
                producer = producer_id >= 0 and not flags & CONTROL_MASK
                with log._lock:
                    if log._closed:
                        raise LogClosedError(f"{log.name} is closed")
                    if producer:  # Rule: producer-state-in-append
                        duplicate = log._producers.check(producer_id, epoch, sequence, delta)
                        if duplicate is not None:
                            return duplicate
                    first = log._leo
                    next_offset = first + delta + 1
                    segment = self._segment_for(size, next_offset, max_timestamp)
                    _pack_base_offset(data, 0, first)
                    segment.append_batch(data, first, next_offset, max_timestamp)
                    if producer:
                        log._producers.update(producer_id, epoch, sequence, delta, first, max_timestamp)
                    if flags & TXN_BITS:
                        log._txns.apply(parse_header(data), data)  # transactions.py Rule: transactions-tracked
                    moved = self._appended(segment, next_offset, count, size)
                self._after_append(moved, next_offset)
                return first
        headers, offsets = self._validate(memoryview(data))  # several batches, or malformed bytes (raises)
        return self._lone(_headers_set(data, headers, offsets, -1), KEEP_EPOCH)[0]

    def append_as_leader(self, batches: Any, leader_epoch: int, append_time_ms: int | None = None) -> int:
        """PartitionLog.append_as_leader: a set check_leader_set takes (the common one) is the lone sequence
        `_append_plain`; any other is a group of one client's set (`_leader_set`, `_commit`)."""
        if self.converter is None:
            plain = check_leader_set(batches, self.max_message_bytes)
            if plain is not None:
                return self._append_plain(batches, plain, leader_epoch)
        return self._lone(self._leader_set(batches, append_time_ms), leader_epoch)[0]

    def _append_plain(self, batches: Any, plain: LeaderSet, leader_epoch: int) -> int:
        """append_as_leader of a set check_leader_set took: the lone sequence kept beside `_commit` (see
        `append`): offsets and the leader epoch stamped and the indexes kept in one compiled walk
        (LogSegment.append_set), one write."""
        log = self.log
        entries, offset_count, messages, idempotent = plain
        data = batches if type(batches) is bytearray else bytearray(batches)
        self._note_leader_epoch(leader_epoch)
        with log._lock:
            if log._closed:
                raise LogClosedError(f"{log.name} is closed")
            if idempotent:
                producers = _checked_set(data, plain)[6]
                duplicate = self._check_producers(producers, len(entries) == 1)
                if duplicate is not None:
                    return duplicate
            first = log._leo
            segment = self._segment_for(len(data), first + offset_count, entries[0][3], len(entries))
            offset = segment.append_set(data, first, leader_epoch)
            if idempotent:
                update = log._producers.update
                for producer_id, epoch, sequence, delta, at, max_timestamp in producers:
                    update(producer_id, epoch, sequence, delta, first + at, max_timestamp)
            moved = self._appended(segment, offset, messages, len(data))
        self._after_append(moved, offset)
        return first

    def _segment_for(self, size: int, next_offset: int, first_timestamp: int, batches: int = 1) -> LogSegment:
        """The segment a lone append of `size` bytes and `batches` batches ending at `next_offset` goes to: the
        active one, or a new one rolled first (Rule: roll-before-overfill, the limits `_commit` reads),
        whose roll deadline then counts from `first_timestamp`."""
        log = self.log
        segment = log._segment_set.segments[-1]
        if segment.size:
            room = segment.index_room
            if (room < batches or log._clock() >= segment.roll_at_ms or size > self.segment_bytes - segment.size
                    or next_offset > segment.offset_limit):
                segment = log._roll_locked()
        if not segment.size:
            self._set_lag_deadline(segment, first_timestamp)
        return segment

    def append_group_as_leader(self, record_sets: list[Any], leader_epoch: int,
                               append_time_ms: int | None = None) -> list[Outcome]:
        """PartitionLog.append_group_as_leader: each set's outcome is what append_as_leader on it alone, in
        order, would give: `(base offset, log end offset after it)`, or the exception it would raise (nothing
        of that set written; the sets around it are). One-batch sets check_sets takes are read without a copy;
        any other set is read as append_as_leader reads it, after the sets before it are written (its checks
        may read the log's state: the transaction verifier). All go through one `_commit` per such run."""
        outcomes: list[Outcome] = [None] * len(record_sets)
        sets: list[tuple[int, _Set]] = []
        checked = check_sets(record_sets, self.max_message_bytes) if self.converter is None else None
        for i, records in enumerate(record_sets):
            fields = None if checked is None else checked[i]
            if fields is not None and records[_ATTRIBUTES_LOW] & TIMESTAMP_TYPE_MASK:
                fields = None  # LogAppendTime: append_as_leader's (log_validator.py Rule: client-log-append-time)
            if fields == REFUSED_ATTRIBUTES and not records[_ATTRIBUTES_LOW] & CONTROL_MASK:
                fields = None  # a transactional batch: append_as_leader's (Rule: client-batches-checked)
            try:
                if fields is None:
                    self._commit(sets, outcomes, leader_epoch)
                    sets = []
                    sets.append((i, self._leader_set(records, append_time_ms)))
                else:
                    sets.append((i, self._group_set(records, fields)))
            except Exception as exc:  # noqa: BLE001 - handed back: the caller answers it per request
                outcomes[i] = exc
        self._commit(sets, outcomes, leader_epoch)
        return outcomes

    def append_replicated(self, batches: Any) -> int:
        """PartitionLog.append_replicated: each batch validated and starting where the previous one ends, the
        first at the LEO (else OffsetsNotContiguous); nothing written unless all pass; new leader epochs
        found in the headers go to the epoch cache. The HW is not moved (Rule: replicated-hw-from-outside)."""
        data = bytearray(batches)
        headers, offsets = self._validate(memoryview(data))
        first = headers[0][1]
        self._check_contiguous(headers[1:], first.next_offset)
        _, end = self._lone(_headers_set(data, headers, offsets, first.base_offset), KEEP_EPOCH, follower=True)
        for _, header in headers:
            self._note_leader_epoch(header.partition_leader_epoch, header.base_offset)
        return end

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      leader_epoch: int) -> int:
        """PartitionLog.append_control_batch: the marker (records/control.py), stamped with `leader_epoch`,
        after transactions.py's check of its epoch under the append lock; a group of one plain set, never
        converted and never through `_client_rules`."""
        data = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                            partition_leader_epoch=leader_epoch))
        self._note_leader_epoch(leader_epoch)
        with self.log._lock:
            self.log._txns.check_marker(producer_id, producer_epoch)
        headers, offsets = self._validate(memoryview(data))
        return self._lone(_headers_set(data, headers, offsets, -1), KEEP_EPOCH)[0]

    # -- stage 1: reading a set (outside the lock) ---------------------------------------------------

    def _append_set(self, batches: Any, append_time_ms: int | None) -> _Set:
        """A plain append's set: converted if the config asks (LogAppendTime, timestamp bounds, a codec), every
        batch checked (Rule: append-is-whole-batch); one batch (the hot path) from one header unpack."""
        data = batches if type(batches) is bytearray else bytearray(batches)
        converter = self.converter
        if converter is not None:
            now = self.log._clock() if append_time_ms is None else append_time_ms
            data = converter.convert(data, self._validate(memoryview(data))[0], now)
        size = len(data)
        if size >= HEADER_SIZE:
            fields = _APPEND_FIELDS.unpack_from(data)
            length, magic, crc, _, flags, delta, _, _, _, _, count = fields
            if length + LOG_OVERHEAD == size:  # one batch
                if size > self.max_message_bytes:
                    self._too_large(size)
                if (magic != MAGIC or delta < 0 or count < 0 or flags & COMPRESSION_MASK > MAX_CODEC
                        or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != crc):
                    validate_batch(data)  # raises CorruptRecordError, with the reason
                return _one_batch_set(data, fields)
        headers, offsets = self._validate(memoryview(data))  # several batches, or malformed bytes (raises)
        return _headers_set(data, headers, offsets, -1)

    def _leader_set(self, batches: Any, append_time_ms: int | None) -> _Set:
        """A client's set: one check_leader_set takes (the common one) as it is; any other checked batch by
        batch (`_client_rules`, `_check_records`) and read as a plain append's (`_append_set`)."""
        if self.converter is None:
            plain = check_leader_set(batches, self.max_message_bytes)
            if plain is not None:
                return _checked_set(batches if type(batches) is bytearray else bytearray(batches), plain)
        data = batches if type(batches) is bytearray else bytearray(batches)
        position, size = 0, len(data)
        while position + HEADER_SIZE <= size:  # a bad length stops the walk; _append_set then refuses the bytes
            self._client_rules(data, position)
            batch_size = peek_size(data, position)
            if batch_size < HEADER_SIZE:
                break
            _check_records(memoryview(data)[position:position + batch_size])
            position += batch_size
        return self._append_set(data, append_time_ms)

    def _group_set(self, records: Any, fields: Any) -> _Set:
        """A group's one-batch set check_sets read as `fields` (a tuple) or refused (a code): the client rules,
        then the set as its view (copied into its write's buffer: Rule: stamp-in-place)."""
        view = records if records.__class__ is memoryview else memoryview(records)
        self._client_rules(view, 0)
        if not isinstance(fields, tuple):  # refused by check_sets: raise what append_as_leader raises
            self._refuse(fields, view)
        _check_records(view)
        return _one_batch_set(view, fields)

    def _refuse(self, code: int, view: memoryview) -> NoReturn:
        """Raise what append_as_leader raises for a set check_sets refused with `code` (its client rules passed)."""
        if code == REFUSED_SIZE:
            self._too_large(len(view))
        validate_batch(view)  # raises CorruptRecordError, with the reason
        raise AssertionError(f"check_sets refused a batch validate_batch takes ({code})")

    def _too_large(self, size: int) -> NoReturn:
        raise RecordBatchTooLarge(f"batch of {size} bytes exceeds max.message.bytes={self.max_message_bytes}")

    def _validate(self, view: memoryview) -> tuple[list[tuple[int, BatchHeader]], int]:
        """Rule: append-is-whole-batch for a record set: every batch whole, within max.message.bytes, valid."""
        headers, position, offsets, total = [], 0, 0, len(view)
        while position < total:
            if total - position < HEADER_SIZE:
                raise CorruptRecordError(f"{total - position} trailing bytes are not a whole batch")
            size = peek_size(view, position)
            if size > self.max_message_bytes:
                self._too_large(size)
            if size < HEADER_SIZE or size > total - position:
                raise CorruptRecordError(f"batch length {size} at byte {position} does not fit the {total} bytes")
            header = validate_batch(view[position:position + size])
            headers.append((position, header))
            offsets += header.last_offset_delta + 1
            position += size
        if not headers:
            raise CorruptRecordError("empty record set")
        return headers, offsets

    def _check_contiguous(self, headers: list[tuple[int, BatchHeader]], offset: int) -> None:
        """Rule: follower-appends-verbatim: each batch starts where the previous one ends (the first at the
        LEO: `_check_set`, under the lock)."""
        for _, header in headers:
            if header.base_offset != offset:
                self._not_contiguous(header.base_offset, offset)
            offset = header.next_offset

    def _not_contiguous(self, base_offset: int, expected: int) -> NoReturn:
        raise OffsetsNotContiguous(f"{self.log.name}: replicated batch at offset {base_offset}, expected {expected}")

    def _client_rules(self, data: Any, position: int) -> None:
        """Rule: client-batches-checked for the batch at `position` (its records aside: `_check_records`), and
        log_validator.py Rule: client-log-append-time for one saying LogAppendTime (refused, or taken as CreateTime, in
        place)."""
        attributes = data[position + _ATTRIBUTES_LOW]
        if attributes & _REFUSED_FROM_CLIENTS:
            _refuse_attributes(attributes)
        if attributes & TRANSACTIONAL_MASK:
            self._verify_transactional(*_PRODUCER_AND_EPOCH.unpack_from(data, position + _PRODUCER_ID_OFFSET))
        if attributes & TIMESTAMP_TYPE_MASK:
            take_client_timestamp_type(data, position, self.log.stamps_append_time)
        producer_id, sequence = _PRODUCER_AND_SEQUENCE.unpack_from(data, position + _PRODUCER_ID_OFFSET)
        _refuse_sequence(producer_id, sequence, self.log.name)

    def _verify_transactional(self, producer_id: int, epoch: int) -> None:
        """Rule: client-batches-checked for a transactional batch: it has a producer id (else no marker could
        close its transaction), and the log's verifier (KIP-890's hook), when installed, takes it."""
        if producer_id < 0:
            raise InvalidRecordError(f"a transactional batch has no producer id in topic partition {self.log.name}")
        verifier = self.log.transaction_verifier
        if verifier is not None:
            verifier(producer_id, epoch)

    # -- stages 2 and 3: the one write sequence ------------------------------------------------------

    def _lone(self, read: _Set, leader_epoch: int, follower: bool = False) -> tuple[int, int]:
        """A group of one: its (base offset, LEO after it), or what it failed with, raised."""
        outcomes: list[Outcome] = [None]
        self._commit([(0, read)], outcomes, leader_epoch, follower)
        outcome = outcomes[0]
        if outcome.__class__ is tuple:
            return outcome
        assert isinstance(outcome, BaseException)
        raise outcome

    def _commit(self, sets: list[tuple[int, _Set]], outcomes: list[Outcome], leader_epoch: int,
                follower: bool = False) -> None:
        """Stages 2 and 3, the one write sequence, for `sets` (index in `outcomes`, set read): under the append
        lock each set checked (`_check_set`), rolled for, its producer entries updated (`_update`) and added
        to the pending write, written one write per segment (`_write`: the outcomes of its sets stand once
        it succeeds; `_fail_from` if it, or a roll, fails); then, outside the lock, `_after_append`. A
        leader's sets get `leader_epoch` stamped (KEEP_EPOCH: each keeps its own)."""
        if not sets:
            return
        if leader_epoch != KEEP_EPOCH:
            self._note_leader_epoch(leader_epoch)  # Rule: leader-stamps-epoch, for sets read whole
        log = self.log
        moved = False  # the HW moved
        with log._lock:
            if log._closed:
                self._fail_from(LogClosedError(f"{log.name} is closed"), [], None, sets, 0, outcomes)
                return
            segment = log._segment_set.segments[-1]
            first = leo = log._leo  # the pending write's first offset; the offset after it
            pending: list[tuple[int, Any, int]] = []  # its sets: (index in outcomes, bytes, TXN_BITS)
            size = batches = records = 0
            saved: dict[int, ProducerEntry | None] | None = None  # entries before the pending sets' updates
            limits: tuple[int, int, int] | None = None  # the segment's (bytes, next offset, batches) before a roll
            for k, (i, read) in enumerate(sets):
                data, set_size, offsets, set_records, first_timestamp, set_batches, producers, txn, base = read
                if follower or producers:
                    try:
                        duplicate = self._check_set(producers, set_batches, base, leo, follower)
                    except _CHECK_ERRORS as exc:
                        outcomes[i] = exc
                        continue
                    if duplicate is not None:
                        outcomes[i] = (duplicate, leo)
                        continue
                next_offset = leo + offsets
                if segment.size or size:  # an empty segment always takes the append
                    if limits is None:  # Rule: roll-before-overfill (a batch adds at most one entry per index)
                        room = segment.index_room
                        limits = ((0, -1, 0) if room <= 0 or log._clock() >= segment.roll_at_ms
                                  else (self.segment_bytes - segment.size, segment.offset_limit, room))
                    roll = size + set_size > limits[0] or next_offset > limits[1] or batches + set_batches > limits[2]
                    if roll or (pending and (txn or pending[-1][2])):  # Rule: transactional-write-alone
                        try:
                            if pending:
                                moved |= self._write(segment, pending, first, leader_epoch, records, size, follower)
                                first, pending, size, batches, records, saved = leo, [], 0, 0, 0, None
                            if roll:
                                segment = log._roll_locked()
                        except (OSError, StorageError) as exc:  # nothing of this set or later ones is written
                            self._fail_from(exc, pending, saved, sets, k, outcomes)
                            pending = []
                            break
                        limits = None
                if not segment.size and not size:
                    self._set_lag_deadline(segment, first_timestamp)
                if producers:
                    saved = self._update(producers, leo, saved)
                pending.append((i, data, txn))
                size += set_size
                batches += set_batches
                records += set_records
                outcomes[i] = (leo, next_offset)
                leo = next_offset
            if pending:
                try:
                    moved |= self._write(segment, pending, first, leader_epoch, records, size, follower)
                except (OSError, StorageError) as exc:
                    self._fail_from(exc, pending, saved, sets, len(sets), outcomes)
        self._after_append(moved, log._leo)

    def _check_set(self, producers: _Producers, batches: int, base: int, leo: int, follower: bool) -> int | None:
        """Under the lock, before a set is added: a follower's first offset is the LEO (Rule:
        follower-appends-verbatim); another's producer batches pass `_check_producers` (None: append it)."""
        if follower:
            if base != leo:
                self._not_contiguous(base, leo)
            return None
        return self._check_producers(producers, batches == 1)

    def _update(self, producers: _Producers, base: int,
                saved: dict[int, ProducerEntry | None] | None) -> dict[int, ProducerEntry | None]:
        """Rule: producer-state-in-append: the state updated for a pending set written from offset `base`, each
        entry it touches saved first in `saved` (put back if the write fails); returns `saved`."""
        state = self.log._producers
        if saved is None:
            saved = {}
        for producer_id, epoch, sequence, delta, at, max_timestamp in producers:
            if producer_id not in saved:
                saved[producer_id] = state.entry_copy(producer_id)
            state.update(producer_id, epoch, sequence, delta, base + at, max_timestamp)
        return saved

    def _write(self, segment: LogSegment, pending: list[tuple[int, Any, int]], first: int, leader_epoch: int,
               records: int, size: int, follower: bool) -> bool:
        """One write of the pending sets from offset `first` (Rule: stamp-in-place: a lone bytearray as it is,
        else one buffer of them all), the transaction tracker after it (a transactional set is alone: Rule:
        transactional-write-alone), the LEO and the counters; True if the HW moved."""
        data = pending[0][1] if len(pending) == 1 and pending[0][1].__class__ is bytearray else bytearray().join(
            [piece for _, piece, _ in pending])
        end = segment.append_set(data, first, leader_epoch)
        if pending[0][2]:
            self._track_transactions(data)
        return self._appended(segment, end, records, size, len(pending), expose=not follower)

    def _fail_from(self, exc: BaseException, pending: list[tuple[int, Any, int]],
                   saved: dict[int, ProducerEntry | None] | None, sets: list[tuple[int, _Set]], k: int,
                   outcomes: list[Outcome]) -> None:
        """A write or a roll failed with `exc`: the pending sets (their producer entries put back) and sets k
        on fail with it, as each lone append would have (Rule: append-is-whole-batch)."""
        if saved:
            self.log._producers.restore(saved)
        for i, _, _ in pending:
            outcomes[i] = exc
        for i, _ in sets[k:]:
            outcomes[i] = exc

    def _track_transactions(self, data: bytearray) -> None:
        """transactions.py Rule: transactions-tracked for the batches just written (offsets assigned)."""
        view, position, txns = memoryview(data), 0, self.log._txns
        while position < len(view):
            header = parse_header(view, position)
            if header.attributes & TXN_BITS:
                txns.apply(header, view[position:position + header.size])
            position += header.size

    def _check_producers(self, producers: _Producers, lone: bool) -> int | None:
        """Rule: producer-state-in-append, under the append lock, for the batches with a producer id of one
        record set: `lone` (a set of one batch) answers a duplicate with its original base offset; in a set
        of several, each is checked against the state the earlier ones will leave and a duplicate raises.
        None: append."""
        state = self.log._producers
        if lone:
            producer_id, epoch, sequence, delta, _, _ = producers[0]
            return state.check(producer_id, epoch, sequence, delta)
        state.check_record_set([p[:4] for p in producers])
        return None

    def _set_lag_deadline(self, segment: LogSegment, first_timestamp: int) -> None:
        """Rule: compaction-lag-roll for a segment whose first batch has `first_timestamp` (-1: none)."""
        lag = self.lag_ms
        if lag is not None:
            segment.roll_at_ms = min(segment.roll_at_ms, max(segment.created_ms, first_timestamp) + lag)

    def _appended(self, segment: LogSegment, next_offset: int, messages: int, size: int, appends: int = 1,
                  expose: bool = True) -> bool:
        """The LEO and the counters after a write (flush.messages, flush.ms: the flusher's), then the visibility
        policy's move (not for a follower's: Rule: replicated-hw-from-outside); True if the HW moved."""
        log = self.log
        log._leo = next_offset
        log._unflushed_messages += messages
        if log._first_unflushed_at is None:
            log._first_unflushed_at = time.monotonic()  # once per flush interval, not per append
            log._schedule_flush()
        log._appends += appends
        log._appended_bytes += size
        return expose and log._visibility.appended(next_offset, segment.base_offset, segment.size)

    def _after_append(self, moved: bool, next_offset: int) -> None:
        """Outside the lock: wake the readers waiting for the new high watermark (if it moved); Kafka's
        flush.messages, synchronously in the appending thread."""
        log = self.log
        if moved:
            log._visibility.notify(log, next_offset)
        if log._unflushed_messages >= log._flush_messages:
            log.flush()

    def _note_leader_epoch(self, epoch: int, start: int | None = None) -> None:
        """Rule: leader-stamps-epoch: a newer leader epoch starts at `start` (default: the LEO)."""
        cache = self.log.leader_epochs
        if epoch > cache.latest_epoch:
            cache.assign(epoch, self.log._leo if start is None else start)
