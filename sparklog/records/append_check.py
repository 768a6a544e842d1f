"""The checks a leader makes of each record set of a pipelined group before appending it, in one call per
group: the header fields the append needs, or why the set is refused.

    check_sets(record_sets, max_message_bytes) -> [fields | None | REFUSED_ATTRIBUTES | REFUSED_SIZE | CORRUPT]

Rule 1: per set, in order: None when it is not exactly one whole batch (None, fewer than HEADER_SIZE bytes, or
        a batchLength that does not span it: the caller's one-set append decides, and raises what it raises);
        else REFUSED_ATTRIBUTES for a control or transactional batch (a client's: the caller says which),
        REFUSED_SIZE above `max_message_bytes`, CORRUPT
        when the magic, lastOffsetDelta, recordCount, codec or CRC-32C is wrong (the caller's validate_batch
        names the reason), checked in that order; else the header's `APPEND_FIELDS`, as `unpack_from` gives them.
Rule 2: two twins of each function, the same output: the compiled one (`_cappend_check.check_sets`, with no Python object per set but
        its result) when the compiled codec is active (records/implementation.py Rule 1), this pure-Python one
        otherwise; this one is the authority (tests/unit/records/test_append_check.py runs both, on damaged
        input too). Sans-IO: it only reads the buffers.
Rule 3: `check_leader_set(records, max_message_bytes)` -> `(entries, offset count, record count, idempotent)` or
        None: a record set (one batch or several, a memoryview of a read) that a leader may append as it is, in
        one walk: each batch whole and within `max_message_bytes`, magic 2, a known codec (or none), neither
        control, transactional nor LogAppendTime, recordCount >= 1 and lastOffsetDelta = recordCount - 1, a
        baseSequence >= 0 if it has a producer id, its CRC-32C right and its records parsing (verify.py Rule 1:
        a compressed batch is decompressed to be checked, as Kafka's LogValidator does, and is then stored as
        it came, its offsets assigned in the header: Kafka's in-place assignment, no re-compression); the
        batches fill the set exactly. An entry per batch: `(position, size, offsets it spans,
        maxTimestamp, producerId, producerEpoch, baseSequence)`; `idempotent` counts the batches with a
        producer id (>= 0), which the caller checks against its producer state (storage/producer_state.py
        Rule 1): that check is the only one left that can refuse the set. None for any other set, good or
        bad: the caller's general append decides, and raises what it raises.
Rule 4: `stamp_leader_set(data, first offset, leader epoch, since, interval, max timestamp, its offset)` ->
        `(next offset, since, max timestamp, its offset, points)`: a set check_leader_set took, in a writable
        buffer, gets consecutive offsets from `first offset` and the leader's epoch (fields outside the
        CRC; KEEP_EPOCH, below any epoch, leaves each batch's own: a plain or a follower's append), and a
        segment's index bookkeeping is run over its batches as LogSegment._track runs it (its `since`
        bytes since the last entry against index.interval.bytes, its max timestamp and the offset of the
        batch that has it): `points` are the index entries due, `(base offset, position in data, max
        timestamp, its offset)`, in order. ValueError for a buffer whose batch lengths do not fill it.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from sparklog.records import implementation as _implementation
from sparklog.records.batch import (ATTRIBUTES_OFFSET, COMPRESSION_MASK, CONTROL_MASK, HEADER_SIZE, LOG_OVERHEAD,
                                    MAGIC, MAX_CODEC, TIMESTAMP_TYPE_MASK, TRANSACTIONAL_MASK)
from sparklog.records import BytesLike
from sparklog.records.verify import records_error

_KERNEL = _implementation.RecordKernel("sparklog.records._cappend_check", "leader check",
                                       ("check_sets", "check_leader_set", "stamp_leader_set"))

__all__ = ["APPEND_FIELDS", "check_leader_set", "check_sets", "py_check_leader_set", "py_check_sets",
           "py_stamp_leader_set", "stamp_leader_set", "KEEP_EPOCH", "REFUSED_ATTRIBUTES", "REFUSED_SIZE", "CORRUPT"]

REFUSED_ATTRIBUTES = 1
REFUSED_SIZE = 2
CORRUPT = 3
KEEP_EPOCH = -(1 << 31)  # Rule 4: stamp_leader_set leaves the batches' partitionLeaderEpoch as it is (int32 min)
# Rule 3: attribute bits of a batch check_leader_set leaves to the general append
NOT_PLAIN = CONTROL_MASK | TRANSACTIONAL_MASK | TIMESTAMP_TYPE_MASK

# The header fields a one-batch append checks, in one unpack; pad bytes skip the rest (batch.HEADER).
APPEND_FIELDS = struct.Struct(
    ">"
    "8x"  # baseOffset: assigned by the append
    "i"  # batchLength
    "4x"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "b"  # attributes' high byte: unused bits, delete horizon, control, transactional
    "b"  # attributes' low byte: the codec in bits 0-2 (above MAX_CODEC: refused) and the timestamp type
    "i"  # lastOffsetDelta
    "8x"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId: -1 for a producer that is not idempotent
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
assert APPEND_FIELDS.size == HEADER_SIZE
# check_sets' answer per set: APPEND_FIELDS' values, None (not one whole batch) or a refusal code (Rule 1)
CheckedSet = tuple[int, ...] | int | None
# check_leader_set's answer (Rule 3): (per batch (position, size, offsets, max timestamp, producer id, epoch,
# sequence), offsets, messages, idempotent batches)
LeaderSet = tuple[list[tuple[int, ...]], int, int, int]
# stamp_leader_set's answer (Rule 4): (next offset, bytes since the last index entry, max timestamp, its
# offset, the index points (offset, position, max timestamp, its offset))
Stamped = tuple[int, int, int, int, list[tuple[int, int, int, int]]]


def py_check_sets(record_sets: list[BytesLike | None], max_message_bytes: int) -> list[CheckedSet]:
    """Rule 1, in Python."""
    out: list[CheckedSet] = []
    unpack = APPEND_FIELDS.unpack_from
    for records in record_sets:
        if records is None or len(records) < HEADER_SIZE:
            out.append(None)
            continue
        size = len(records)
        fields = unpack(records)
        length, magic, crc, _, flags, delta, _, _, _, _, count = fields
        if length + LOG_OVERHEAD != size:
            out.append(None)
        elif flags & (CONTROL_MASK | TRANSACTIONAL_MASK):
            out.append(REFUSED_ATTRIBUTES)
        elif size > max_message_bytes:
            out.append(REFUSED_SIZE)
        elif (magic != MAGIC or delta < 0 or count < 0 or flags & COMPRESSION_MASK > MAX_CODEC
              or crc32c(memoryview(records)[ATTRIBUTES_OFFSET:]) != crc):
            out.append(CORRUPT)
        else:
            out.append(fields)
    return out


def check_sets(record_sets: list[BytesLike | None], max_message_bytes: int) -> list[CheckedSet]:
    """Rule 1, by the active twin (Rule 2)."""
    kernel = _KERNEL.active
    if kernel is not None:
        checked: list[CheckedSet] = kernel.check_sets(record_sets, max_message_bytes)
        return checked
    return py_check_sets(record_sets, max_message_bytes)


def py_check_leader_set(records: BytesLike | None, max_message_bytes: int) -> LeaderSet | None:
    """Rule 3, in Python."""
    if records is None or len(records) < HEADER_SIZE:
        return None
    view = memoryview(records)
    total = len(view)
    entries: list[tuple[int, ...]] = []
    position = offsets = messages = idempotent = 0
    unpack = APPEND_FIELDS.unpack_from
    while position < total:
        if total - position < HEADER_SIZE:
            return None
        length, magic, crc, _, flags, delta, max_timestamp, producer_id, epoch, sequence, count = unpack(view, position)
        size = length + LOG_OVERHEAD
        end = position + size
        if (size < HEADER_SIZE or size > total - position or size > max_message_bytes or magic != MAGIC
                or flags & NOT_PLAIN or flags & COMPRESSION_MASK > MAX_CODEC or (producer_id >= 0 and sequence < 0)
                or count <= 0 or delta != count - 1
                or crc32c(view[position + ATTRIBUTES_OFFSET:end]) != crc or records_error(view[position:end]) is not None):
            return None
        entries.append((position, size, delta + 1, max_timestamp, producer_id, epoch, sequence))
        offsets += delta + 1
        messages += count
        idempotent += producer_id >= 0
        position = end
    return entries, offsets, messages, idempotent


def check_leader_set(records: BytesLike | None, max_message_bytes: int) -> LeaderSet | None:
    """Rule 3, by the active twin (Rule 2)."""
    kernel = _KERNEL.active
    if kernel is not None:
        checked: LeaderSet | None = kernel.check_leader_set(records, max_message_bytes)
        return checked
    return py_check_leader_set(records, max_message_bytes)


_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LENGTH = struct.Struct(">i")


def py_stamp_leader_set(data: bytearray | memoryview, first_offset: int, leader_epoch: int, since: int,
                        interval: int, max_timestamp: int, offset_of_max: int) -> Stamped:
    """Rule 4, in Python."""
    total = len(data)
    position, offset = 0, first_offset
    points: list[tuple[int, int, int, int]] = []
    while position + HEADER_SIZE <= total:
        size = _LENGTH.unpack_from(data, position + 8)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or size > total - position:
            raise ValueError(f"not a checked record set: batch length at byte {position}")
        _BASE_OFFSET.pack_into(data, position, offset)
        if leader_epoch != KEEP_EPOCH:
            _LEADER_EPOCH.pack_into(data, position + 12, leader_epoch)
        _, _, _, _, _, delta, timestamp, _, _, _, _ = APPEND_FIELDS.unpack_from(data, position)
        if timestamp > max_timestamp:
            max_timestamp, offset_of_max = timestamp, offset
        if since > interval:
            points.append((offset, position, max_timestamp, offset_of_max))
            since = 0
        since += size
        offset += delta + 1
        position += size
    if position != total:
        raise ValueError(f"not a checked record set: {total - position} trailing bytes")
    return offset, since, max_timestamp, offset_of_max, points


def stamp_leader_set(data: bytearray | memoryview, first_offset: int, leader_epoch: int, since: int,
                     interval: int, max_timestamp: int, offset_of_max: int) -> Stamped:
    """Rule 4, by the active twin (Rule 2)."""
    kernel = _KERNEL.active
    if kernel is not None:
        stamped: Stamped = kernel.stamp_leader_set(data, first_offset, leader_epoch, since, interval, max_timestamp,
                                                   offset_of_max)
        return stamped
    return py_stamp_leader_set(data, first_offset, leader_epoch, since, interval, max_timestamp, offset_of_max)
