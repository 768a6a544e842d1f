"""AppendPipeline: the one way batches enter a partition log; every append rule is written here, once.

Entry points (PartitionLog's methods of the same names call them):
    append(batches)                      a plain append: offsets assigned, the batches' epochs kept
    append_as_leader(batches, epoch)     a client's record set: checked as a client's, epoch stamped
    append_group_as_leader(sets, epoch)  pipelined record sets of one partition: per set, what a lone
                                         append_as_leader would give, one write per segment
    append_replicated(batches)           a follower: the leader's batches verbatim, at their own offsets
    append_marker(producer id, ...)      the leader's end-transaction marker (never a client's: no client rules)
(recovery replays the producer state from the batch headers: PartitionLog._rebuild_producer_state).

Each goes through the same stages; the stage named is the one place its rule lives:
 1. validate, outside the lock  -- `_validate` (and its one-batch form in `append`) (Rule: append-is-whole-batch: size against
    max.message.bytes, magic, CRC-32C of every batch before any byte is written) and, for a client's set,
    `_client_rules` + `_check_records` (Rule: client-batches-checked) and the config's conversion
    (log_validator, Rule: reconfigure-under-append-lock);
 2. under the append lock: `_check_open`; `_check_producers` (Rule: producer-state-in-append: a lone batch's
    duplicate is answered with its original base offset, a duplicate among several raises, a stale epoch or a
    sequence gap raises, nothing written); `_segment_for` (Rule: roll-before-overfill and Rule:
    compaction-lag-roll); offsets assigned (leader, plain) or checked contiguous (Rule:
    follower-appends-verbatim); one write per segment (the write kernels of segment.py: `append_batch`,
    `append_leader_set`, `append`); the producer state updated for what was written, and the transaction
    tracker after it (transactions.py Rule: transactions-tracked); `_appended` (the LEO,
    the flush counters) and `_expose` (the visibility policy: visibility.py);
 3. after the lock: `_after_append` (the HW listeners, flush.messages), `_note_leader_epoch` (Rule:
    leader-stamps-epoch: the epoch cache records where each leader epoch starts).
Rule: append-is-whole-batch: appends take whole encoded batches, validate all of them before writing any,
assign offsets in the headers and write them with one write (per segment); the log end offset (LEO) is the
offset after the last append. A write that fails leaves the LEO and the producer state where they were.
Rule: client-batches-checked: a client's control batch is refused (InvalidRecordError, Kafka's
LogValidator: markers are the leader's, `append_marker`); a transactional one needs a producer id and is
taken unless the log's `transaction_verifier` (KIP-890's hook, transactions.py) raises
TransactionRefusedError; refused too are a batch with a producer id and a negative baseSequence, and one
whose records do not parse (records/verify.py).
Rule: producer-state-in-append (idempotence): batches with a producer id are checked against the producer
state (producer_state.py) under the append lock, in the same critical section as the append: a duplicate is
answered with its original base offset and not written, a stale epoch or a sequence gap raises and writes
nothing. Every append (leader, follower, plain) updates the state for what it wrote (and recovery replays
it: log.py Rule: producer-state-follows-log).
Rule: roll-before-overfill: the active segment rolls before an append that would overfill it (bytes past
segment.bytes, offsets past its int32 relative range, an index full) or once its roll deadline (segment.ms)
has passed; an empty segment always takes the append. A group rolls between two sets where a lone append
would.
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
"""

from __future__ import annotations

import functools
import struct
import time
from typing import Any, Iterable, NoReturn

from crc32c import crc32c

from sparklog.records import BytesLike
from sparklog.records.append_check import APPEND_FIELDS as _APPEND_FIELDS
from sparklog.records.append_check import REFUSED_ATTRIBUTES, REFUSED_SIZE, LeaderSet, check_leader_set, check_sets
from sparklog.records.batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, HEADER_SIZE,
                                    LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD, MAGIC, MAX_CODEC, TIMESTAMP_TYPE_MASK,
                                    TRANSACTIONAL_MASK, BatchHeader, CorruptRecordError, parse_header, peek_size,
                                    set_base_offset, set_partition_leader_epoch, validate_batch)
from sparklog.records.control import build_marker_batch
from sparklog.records.verify import records_error
from sparklog.storage.config import CLEANUP_COMPACT, LogConfig
from sparklog.storage.errors import (DuplicateSequence, InvalidProducerEpoch, InvalidRecordError, LogClosedError,
                                     OffsetsNotContiguous, OutOfOrderSequence, RecordBatchTooLarge, StorageError,
                                     TransactionRefusedError)
from sparklog.storage.log_owner import AppendOwner
from sparklog.storage.log_validator import converter_for, take_client_timestamp_type
from sparklog.storage.producer_state import ProducerEntry
from sparklog.storage.segment import BatchEntry, LogSegment
from sparklog.storage.transactions import TXN_BITS

_pack_base_offset = struct.Struct(">q").pack_into  # baseOffset is the first field, outside the CRC
# baseOffset, batchLength (as it is) and partitionLeaderEpoch: the 16 bytes a leader writes in front of the rest
_LEADER_HEAD = struct.Struct(">qii")
_pack_leader_head = _LEADER_HEAD.pack
_LEADER_HEAD_SIZE = _LEADER_HEAD.size
_new_entry = functools.partial(tuple.__new__, BatchEntry)  # BatchEntry(*fields) without its Python __new__
_ATTRIBUTES_LOW = ATTRIBUTES_OFFSET + 1  # the attributes' low byte: codec, timestamp type, transactional, control
_CONTROL_REFUSED = "Clients are not allowed to write control records"  # Kafka's LogValidator, verbatim
_REFUSED_FROM_CLIENTS = CONTROL_MASK  # attributes a client's batch may not carry: markers are the leader's
# producerId and, past producerEpoch, baseSequence: one unpack at their place in the header (records.HEADER)
_PRODUCER_AND_SEQUENCE = struct.Struct(">q2xi")
_PRODUCER_ID_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iqq")  # 43: after delta and two timestamps
_PRODUCER_AND_EPOCH = struct.Struct(">qh")  # producerId, producerEpoch at _PRODUCER_ID_OFFSET
Outcome = tuple[int, int] | BaseException | None  # a set's (base offset, LEO after it), what it raised, or not yet
_RunSet = tuple[int, memoryview, tuple[int, ...]]  # (index in the group, view, check_sets' header fields)
_PRODUCER_ERRORS = (OutOfOrderSequence, InvalidProducerEpoch, DuplicateSequence)
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
        """PartitionLog.append: the one-batch case is the hot path (one header unpack, the CRC in C, one clock
        read for segment.ms, one write); a set of several batches is `_append_set`."""
        log = self.log
        data = batches if type(batches) is bytearray else bytearray(batches)
        converter = self.converter
        if converter is not None:  # the config asks for LogAppendTime, timestamp bounds or a codec
            now = log._clock() if append_time_ms is None else append_time_ms
            data = converter.convert(data, self._validate(memoryview(data))[0], now)
        size = len(data)
        if size < HEADER_SIZE:
            return self._append_set(data)  # raises, with the reason
        (length, magic, crc, _, flags, delta, max_timestamp, producer_id, epoch, sequence,
         count) = _APPEND_FIELDS.unpack_from(data)
        if length + LOG_OVERHEAD != size:
            return self._append_set(data)  # several batches, or a bad length
        if size > self.max_message_bytes:  # Rule: append-is-whole-batch, for one batch (_validate's)
            self._too_large(size)
        if (magic != MAGIC or delta < 0 or count < 0 or flags & COMPRESSION_MASK > MAX_CODEC
                or crc32c(memoryview(data)[ATTRIBUTES_OFFSET:]) != crc):
            validate_batch(data)  # raises CorruptRecordError, with the reason
        with log._lock:
            if log._closed:
                self._refuse_closed()
            if producer_id >= 0:
                duplicate = self._check_producers(((producer_id, epoch, sequence, delta),), lone=True)
                if duplicate is not None:
                    return duplicate
            first = log._leo
            next_offset = first + delta + 1
            segment = self._segment_for(size, next_offset, max_timestamp)
            _pack_base_offset(data, 0, first)
            segment.append_batch(data, first, next_offset, max_timestamp)
            if producer_id >= 0:
                log._producers.update(producer_id, epoch, sequence, delta, first, max_timestamp)
                if flags & TXN_BITS:
                    log._txns.apply(parse_header(data), data)  # transactions.py Rule: transactions-tracked
            moved = self._appended(segment, next_offset, count, size)
        self._after_append(moved, next_offset)
        return first

    def _append_set(self, data: bytearray) -> int:
        """append() of a record set of several batches (or of malformed bytes, which raise here)."""
        headers, offset_count = self._validate(memoryview(data))
        first, offset, moved = self._write_set(data, headers, offset_count, follower=False)
        self._after_append(moved, offset)
        return first

    def _write_set(self, data: bytearray, headers: list[tuple[int, BatchHeader]], offset_count: int,
                   follower: bool) -> tuple[int, int, bool]:
        """Under the append lock, a validated record set of one or more batches, written with one write: a
        client's gets its offsets assigned (in `data`) after the producer state's check (Rule:
        producer-state-in-append, a set of several batches); a follower's keeps them, and they must continue
        the log (Rule: follower-appends-verbatim). Returns (first offset, next offset, whether the HW moved)."""
        log = self.log
        with log._lock:
            self._check_open()
            first = log._leo
            if follower:
                self._check_contiguous(headers, first)
            else:
                self._check_producers([(h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta)
                                       for _, h in headers if h.producer_id >= 0 and not h.is_control], lone=False)
            segment = self._segment_for(len(data), first + offset_count, headers[0][1].max_timestamp)
            offset, entries, messages, appended = first, [], 0, []
            for position, header in headers:
                if not follower:
                    set_base_offset(data, offset, position)
                    header = header._replace(base_offset=offset)
                appended.append(header)
                entries.append(BatchEntry(position, offset, header.next_offset, header.max_timestamp, header.size))
                messages += header.record_count
                offset = header.next_offset
            segment.append(data, entries)
            log._producers.update_from_headers(appended)
            log._txns.apply_record_set(data, zip((position for position, _ in headers), appended))
            moved = self._appended(segment, offset, messages, len(data), expose=not follower)
        return first, offset, moved

    def _check_contiguous(self, headers: list[tuple[int, BatchHeader]], offset: int) -> None:
        """Rule: follower-appends-verbatim: each batch starts where the previous one ends, the first at the LEO."""
        for _, header in headers:
            if header.base_offset != offset:
                raise OffsetsNotContiguous(
                    f"{self.log.name}: replicated batch at offset {header.base_offset}, expected {offset}")
            offset = header.next_offset

    def append_as_leader(self, batches: Any, leader_epoch: int, append_time_ms: int | None = None) -> int:
        """PartitionLog.append_as_leader: a set check_leader_set takes (the common one) is `_append_plain`;
        any other is checked batch by batch (`_client_rules`, `_check_records`), stamped, and appended by
        append() (log.append, the facade's, so that tests can watch which way a set went)."""
        if self.converter is None:
            plain = check_leader_set(batches, self.max_message_bytes)
            if plain is not None:
                return self._append_plain(batches, plain, leader_epoch)
        data = batches if type(batches) is bytearray else bytearray(batches)
        position, size = 0, len(data)
        while position + HEADER_SIZE <= size:  # a bad length stops the walk; append() then refuses the bytes
            self._client_rules(data, position)
            set_partition_leader_epoch(data, leader_epoch, position)
            batch_size = peek_size(data, position)
            if batch_size < HEADER_SIZE:
                break
            _check_records(memoryview(data)[position:position + batch_size])
            position += batch_size
        self._note_leader_epoch(leader_epoch)
        return self.log.append(data, append_time_ms)

    def _append_plain(self, batches: Any, plain: LeaderSet, leader_epoch: int) -> int:
        """append_as_leader of a set check_leader_set took (`plain`: its entries, offsets, records and idempotent
        batches): every check that set could fail is passed already but the producer state's; one write with
        offsets and the leader epoch stamped and the indexes kept in one compiled walk
        (LogSegment.append_leader_set)."""
        log = self.log
        entries, offset_count, messages, idempotent = plain
        data = batches if type(batches) is bytearray else bytearray(batches)
        self._note_leader_epoch(leader_epoch)
        with log._lock:
            self._check_open()
            if idempotent:
                duplicate = self._check_producers([(e[4], e[5], e[6], e[2] - 1) for e in entries if e[4] >= 0],
                                                  lone=len(entries) == 1)
                if duplicate is not None:
                    return duplicate
            first = log._leo
            segment = self._segment_for(len(data), first + offset_count, entries[0][3])
            offset = segment.append_leader_set(data, first, leader_epoch)
            if idempotent:
                self._update_plain_producers(entries, first)
            moved = self._appended(segment, offset, messages, len(data))
        self._after_append(moved, offset)
        return first

    def _update_plain_producers(self, entries: list[tuple[int, ...]], first: int) -> None:
        """The producer state's update for the batches of a set _append_plain wrote from offset `first`."""
        update = self.log._producers.update
        offset = first
        for _, _, offsets, max_timestamp, producer_id, epoch, sequence in entries:
            if producer_id >= 0:
                update(producer_id, epoch, sequence, offsets - 1, offset, max_timestamp)
            offset += offsets

    def append_group_as_leader(self, record_sets: list[Any], leader_epoch: int,
                               append_time_ms: int | None = None) -> list[Outcome]:
        """PartitionLog.append_group_as_leader: each set's outcome is what append_as_leader on it alone, in
        order, would give: `(base offset, log end offset after it)`, or the exception it would raise (nothing
        of that set written; the sets around it are). One-batch sets are `_append_run`s; sets this path does
        not take (several batches, a converting config, LogAppendTime) go through append_as_leader in turn."""
        log = self.log
        outcomes: list[Outcome] = [None] * len(record_sets)
        run: list[_RunSet] = []  # (index in record_sets, view, header fields) of one-batch sets, appended together
        checked = check_sets(record_sets, self.max_message_bytes) if self.converter is None else None
        for i, records in enumerate(record_sets):
            fields = None if checked is None else checked[i]
            if fields is not None and records[_ATTRIBUTES_LOW] & TIMESTAMP_TYPE_MASK:
                fields = None  # LogAppendTime: append_as_leader's (log_validator.py Rule: client-log-append-time)
            if fields == REFUSED_ATTRIBUTES and not records[_ATTRIBUTES_LOW] & CONTROL_MASK:
                fields = None  # a transactional batch: append_as_leader's (Rule: client-batches-checked)
            if fields is None:
                if run:
                    self._append_run(run, outcomes, leader_epoch)
                    run = []
                try:
                    outcomes[i] = (log.append_as_leader(records, leader_epoch, append_time_ms), log._leo)
                except Exception as exc:  # noqa: BLE001 - handed back: the caller answers it per request
                    outcomes[i] = exc
                continue
            view = records if records.__class__ is memoryview else memoryview(records)
            try:
                self._client_rules(view, 0)
                if not isinstance(fields, tuple):  # refused by check_sets: raise what append_as_leader raises
                    self._refuse(fields, view)
                _check_records(view)
            except _CLIENT_ERRORS as exc:
                outcomes[i] = exc
                continue
            run.append((i, view, fields))
        if run:
            self._append_run(run, outcomes, leader_epoch)
        return outcomes

    def _refuse(self, code: int, view: memoryview) -> NoReturn:
        """Raise what append_as_leader raises for a set check_sets refused with `code` (its client rules passed)."""
        if code == REFUSED_SIZE:
            self._too_large(len(view))
        validate_batch(view)  # raises CorruptRecordError, with the reason
        raise AssertionError(f"check_sets refused a batch validate_batch takes ({code})")

    def _append_run(self, run: list[_RunSet], outcomes: list[Outcome], leader_epoch: int) -> None:
        """append_group_as_leader's one-batch sets, checked already: one lock, one write per segment.

        A write that fails (OSError, a closed file), or a roll that fails (its producer snapshot, its new
        files), fails the sets of that write and every later one of the run, as each lone append would have
        failed. The producer state changes only for what reached the log: the entries the sets of a write
        touch are copied before their first update and put back if the write fails, so that the producer's
        retry of those sets is appended (not OutOfOrderSequence). Each batch is written from the view it
        arrived in, behind a new 16-byte head (its offset, length and the leader's epoch): one pwritev."""
        log = self.log
        self._note_leader_epoch(leader_epoch)
        with log._lock:
            if log._closed:
                closed = LogClosedError(f"{log.name} is closed")
                for i, _, _ in run:
                    outcomes[i] = closed
                return
            run_state = _Run(self, log._segment_set.segments[-1], log._leo)
            for i, view, fields in run:
                run_state.add(i, view, fields, leader_epoch, outcomes)
            moved = run_state.finish(outcomes)
        self._after_append(moved, log._leo)

    def append_replicated(self, batches: Any) -> int:
        """PartitionLog.append_replicated: each batch validated and starting where the previous one ends, the
        first at the LEO (else OffsetsNotContiguous); nothing written unless all pass; new leader epochs
        found in the headers go to the epoch cache. The HW is not moved (Rule: replicated-hw-from-outside)."""
        data = bytearray(batches)
        headers, offset_count = self._validate(memoryview(data))
        _, offset, _ = self._write_set(data, headers, offset_count, follower=True)
        for _, header in headers:
            self._note_leader_epoch(header.partition_leader_epoch, header.base_offset)
        self._after_append(False, offset)
        return offset

    def append_marker(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                      leader_epoch: int) -> int:
        """PartitionLog.append_control_batch: the marker (records/control.py), stamped with `leader_epoch`,
        after transactions.py's check of its epoch under the append lock; appended as a plain record set
        (`_write_set`, whose producer check leaves control batches alone), never through `_client_rules`."""
        data = bytearray(build_marker_batch(producer_id, producer_epoch, commit, coordinator_epoch,
                                            partition_leader_epoch=leader_epoch))
        self._note_leader_epoch(leader_epoch)
        with self.log._lock:
            self.log._txns.check_marker(producer_id, producer_epoch)
        return self._append_set(data)

    # -- the stages (each rule once) ---------------------------------------------------------------

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

    def _check_open(self) -> None:
        if self.log._closed:
            self._refuse_closed()

    def _refuse_closed(self) -> None:
        raise LogClosedError(f"{self.log.name} is closed")

    def _check_producers(self, batches: Iterable[tuple[int, int, int, int]], lone: bool) -> int | None:
        """Rule: producer-state-in-append, under the append lock, for the idempotent batches (producer id,
        epoch, base sequence, last offset delta) of one record set: `lone` (a set of one batch) answers a
        duplicate with its original base offset; in a set of several, each is checked against the state the
        earlier ones will leave and a duplicate raises. None: append."""
        producers = self.log._producers
        if lone:
            for producer_id, epoch, sequence, delta in batches:
                return producers.check(producer_id, epoch, sequence, delta)
            return None
        producers.check_record_set(batches)
        return None

    def _roll_limits(self, segment: LogSegment, now: int) -> tuple[int, int]:
        """Rule: roll-before-overfill: what the non-empty `segment` takes before an append rolls it: (bytes,
        next offset) as of now (int32 relative offsets); both zero when it is due already (segment.ms or
        Rule: compaction-lag-roll's deadline, or an index full). An empty segment always takes the append.
        A group also keeps a batch of index room per pending batch (`_Run._room_for`)."""
        if segment.indexes_full or now >= segment.roll_at_ms:
            return (0, -1)
        return (self.segment_bytes - segment.size, segment.offset_limit)

    def _segment_for(self, size: int, next_offset: int, first_timestamp: int) -> LogSegment:
        """The segment an append of `size` bytes ending at `next_offset` goes to: the active one, or a new one
        rolled first (Rule: roll-before-overfill), whose roll deadline then counts from `first_timestamp`."""
        log = self.log
        segment = log._segment_set.segments[-1]
        if segment.size:
            room, offset_limit = self._roll_limits(segment, log._clock())
            if size > room or next_offset > offset_limit:
                segment = log._roll_locked()
        if not segment.size:
            self._set_lag_deadline(segment, first_timestamp)
        return segment

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


class _Run:
    """One _append_run in progress: its pending write (pieces, entries) and the producer entries to restore
    if that write fails. Under the log's append lock."""

    def __init__(self, pipeline: AppendPipeline, segment: LogSegment, leo: int):
        self.pipeline, self.log = pipeline, pipeline.log
        self.producers = self.log._producers
        self.segment = segment
        self.now = self.log._clock()
        self.pieces: list[BytesLike] = []  # per batch: its new head and the view of the rest, written with one pwritev
        self.pending = 0  # their bytes
        self.entries: list[BatchEntry] = []
        self.written: list[int] = []  # indexes of the sets in pieces
        self.leo = self.committed = leo
        self.messages = self.appended = self.done_messages = self.done_appended = 0  # done_: written
        self.saved: dict[int, ProducerEntry | None] = {}  # producer id -> its entry before the sets in pieces (None: it had none)
        self.failed: Exception | None = None
        self.limits: tuple[int, int, int] | None = None  # (bytes, next offset, batches) before the segment rolls

    def add(self, i: int, view: memoryview, fields: tuple[int, ...], leader_epoch: int, outcomes: list[Outcome]) -> None:
        if self.failed is not None:
            outcomes[i] = self.failed
            return
        length, _, _, _, _, delta, max_timestamp, producer_id, epoch, sequence, count = fields
        if producer_id >= 0:  # against the state the earlier sets of the group left
            try:
                duplicate = self.pipeline._check_producers(((producer_id, epoch, sequence, delta),), lone=True)
            except _PRODUCER_ERRORS as exc:
                outcomes[i] = exc
                return
            if duplicate is not None:
                outcomes[i] = (duplicate, self.leo)
                return
        size = length + LOG_OVERHEAD  # len(view): check_sets took only sets it spans
        next_offset = self.leo + delta + 1
        if not self._room_for(i, size, next_offset, outcomes):
            return
        if not self.segment.size and not self.pending:
            self.pipeline._set_lag_deadline(self.segment, max_timestamp)
        self.pieces.append(_pack_leader_head(self.leo, length, leader_epoch))
        self.pieces.append(view[_LEADER_HEAD_SIZE:])
        self.entries.append(_new_entry((self.pending, self.leo, next_offset, max_timestamp, size)))
        self.pending += size
        self.written.append(i)
        if producer_id >= 0:
            if producer_id not in self.saved:
                self.saved[producer_id] = self.producers.entry_copy(producer_id)
            self.producers.update(producer_id, epoch, sequence, delta, self.leo, max_timestamp)
        outcomes[i] = (self.leo, next_offset)
        self.leo = next_offset
        self.messages += count
        self.appended += 1

    def _room_for(self, i: int, size: int, next_offset: int, outcomes: list[Outcome]) -> bool:
        """Roll where a lone append would (Rule: roll-before-overfill, the pending write counted); False when
        the set failed (a write or the roll)."""
        if self.limits is None:  # read once per segment: nothing below changes it
            self.limits = self._limits()
        limits, pending = self.limits, self.pending
        if not (self.segment.size + pending and (pending + size > limits[0] or next_offset > limits[1]
                                                 or len(self.entries) >= limits[2])):
            return True
        if self.entries and not self._write(i, outcomes):
            return False
        self.log._leo = self.leo  # written: the new segment (and its producer snapshot) starts here
        try:
            self.segment = self.log._roll_locked()
        except (OSError, StorageError) as exc:  # nothing of this set or later ones is written
            self.failed = outcomes[i] = exc
            return False
        self.limits = None
        return True

    def _limits(self) -> tuple[int, int, int]:
        """The lone append's limits (Rule: roll-before-overfill) and the index room: every pending batch may
        add an index entry when written, so the run keeps one free per batch (all zero: roll now)."""
        segment = self.segment
        room, offset_limit = self.pipeline._roll_limits(segment, self.now)
        if offset_limit < 0:
            return (0, -1, 0)
        entries = min(segment.index.max_entries - len(segment.index),
                      segment.time_index.max_entries - len(segment.time_index))
        return (room, offset_limit, entries - 1)

    def _write(self, i: int | None, outcomes: list[Outcome]) -> bool:
        """One write of the pending batches; on failure their outcomes (and set i's) are the exception."""
        try:
            self.segment.append(self.pieces, self.entries, self.pending)
        except (OSError, StorageError) as exc:
            for j in self.written:
                outcomes[j] = exc
            self.producers.restore(self.saved)
            self.failed = exc
            if i is not None:
                outcomes[i] = exc
            self.leo = self.committed
            return False
        self.log._appended_bytes += self.pending
        self.committed, self.done_messages, self.done_appended = self.leo, self.messages, self.appended
        self.pieces, self.pending, self.entries, self.written, self.saved = [], 0, [], [], {}
        return True

    def finish(self, outcomes: list[Outcome]) -> bool:
        """The last write, then the LEO and the HW; True if the HW moved."""
        if self.entries and self.failed is None:
            self._write(None, outcomes)
        if not self.done_appended:
            return False
        return self.pipeline._appended(self.segment, self.leo, self.done_messages, 0, self.done_appended)
