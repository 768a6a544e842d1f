"""Rewriting one batch with only some of its records: what the log cleaner does to each batch it recopies
(Kafka's `MemoryRecords.filterTo`).

Rule 1: offsets never change. The batch keeps its baseOffset, lastOffsetDelta, baseTimestamp, maxTimestamp,
partitionLeaderEpoch, producer id, epoch and base sequence and its attributes; each kept record keeps its
bytes exactly (its offsetDelta and timestampDelta are relative to the unchanged base), so a reader sees the
same offset, timestamp, key, value and headers as before, with gaps where records were removed.
Rule 2: a compressed batch is decompressed once and its kept records recompressed with the same codec.
Rule 3: a batch whose every record is removed keeps its header (recordCount 0, no records), so the batch
offset chain stays contiguous: the next batch still starts where this one ends, and a gap inside a batch is
never mistaken for a fenced range (an offset gap between batches). Like Kafka's empty headers it is
written uncompressed. Consecutive emptied batches of one producer (the same producer id, epoch,
transactional flag and partition leader epoch, with sequences that follow on) are coalesced into one header
spanning their offsets (`extend_empty`): a fetch of nothing but empty batches is what librdkafka takes for
a message too large to fetch, and it gives up after a few in a row.
Rule 4: a batch whose every record is kept is returned as it was (the caller copies its bytes unchanged),
unless a delete horizon is to be set.
Rule 5 (KIP-534): `retain_scanned(..., delete_horizon=ms)` also writes the batch's delete horizon: the
DELETE_HORIZON_MASK attribute bit, and `ms` as its baseTimestamp. The kept records of a CreateTime batch
then have their timestampDelta re-encoded against the new base (so their timestamps do not change, and
only that varint of their bytes does); a LogAppendTime batch's records take its maxTimestamp and are copied
as they are.
"""

from __future__ import annotations

import struct
from crc32c import crc32c

from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    HEADER_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    NO_PRODUCER_ID,
    BatchHeader,
    parse_header,
    RecordBatch,
    RecordColumns,
    decode_varint,
    encode_varint,
)
from sparklog.records.compression import compress, decompress
from sparklog.records.scan import RecordScan, join_kept

# The header fields a rewrite changes, after the CRC: attributes, and recordCount at the end of the header.
_ATTRIBUTES = struct.Struct(">h")
_RECORD_COUNT = struct.Struct(">i")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_TIMESTAMP = struct.Struct(">q")  # baseTimestamp, maxTimestamp
_BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">i")  # after lastOffsetDelta
_MAX_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iq")  # after lastOffsetDelta, baseTimestamp
_RECORD_COUNT_OFFSET = HEADER_SIZE - _RECORD_COUNT.size
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CRC_OFFSET = ATTRIBUTES_OFFSET - _CRC.size
_INT32_MAX = 2**31 - 1  # lastOffsetDelta is an int32


def record_spans(section: bytes, count: int) -> list[tuple[int, int]]:
    """(start, end) of each of the `count` records of an uncompressed records section (length prefix included)."""
    spans, position, varint = [], 0, decode_varint
    for _ in range(count):
        length, body = varint(section, position)
        end = body + length
        spans.append((position, end))
        position = end
    return spans


def retain(batch: RecordBatch, columns: RecordColumns, keep: list[bool]) -> bytes | None:
    """The batch with only the records whose `keep` flag is set (Rules 1-3), or None if every one is kept
    (Rule 4). `columns` is `batch.columns()` (the caller decoded it to decide), `keep` parallel to it."""
    kept = sum(keep)
    if kept == len(keep):
        return None
    codec = batch.attributes & COMPRESSION_MASK
    section = b""
    if kept:
        section = _records_section(batch.raw, codec)
        spans = record_spans(section, batch.record_count)
        section = b"".join(section[s:e] for (s, e), k in zip(spans, keep) if k)
    return _rebuild(batch, kept, section)


def retain_scanned(batch: RecordBatch, scanned: RecordScan, keep: bytes, delete_horizon: int | None = None
                   ) -> bytes | None:
    """`retain` from a scan of the batch (records/scan.py): its section is not decompressed again, and the
    kept records are copied out in one pass. `keep` has one byte per record, not 0 to keep it. With
    `delete_horizon`, the batch is rewritten with it (Rule 5) even if every record is kept."""
    kept = len(keep) - keep.count(0)
    if kept == len(keep) and delete_horizon is None:
        return None
    section = join_kept(scanned.section, scanned.ends, keep) if kept else b""
    if delete_horizon is None:
        return _rebuild(batch, kept, section)
    if not batch.attributes & TIMESTAMP_TYPE_MASK:
        section = _rebase_timestamps(section, batch.base_timestamp - delete_horizon)
    return _rebuild(batch, kept, section, delete_horizon)


def _rebase_timestamps(section: bytes, shift: int) -> bytes:
    """The records of an uncompressed section with `shift` added to each timestampDelta (Rule 5)."""
    out, position = bytearray(), 0
    while position < len(section):
        length, body = decode_varint(section, position)
        delta, rest = decode_varint(section, body + 1)  # after the attributes byte
        record = section[body:body + 1] + encode_varint(delta + shift) + section[rest:body + length]
        out += encode_varint(len(record))
        out += record
        position = body + length
    return bytes(out)


def _rebuild(batch: RecordBatch, kept: int, section: bytes, delete_horizon: int | None = None) -> bytes:
    """The batch's header around the `kept` records of uncompressed `section`, compressed with its codec,
    with `delete_horizon` written (Rule 5) when given."""
    codec = batch.attributes & COMPRESSION_MASK
    attributes = batch.attributes
    if kept == 0:
        attributes &= ~COMPRESSION_MASK  # Rule 3: an empty batch is written uncompressed
    elif codec:
        section = compress(codec, section)
    head = bytearray(batch.raw[:HEADER_SIZE])
    if delete_horizon is not None:
        attributes |= DELETE_HORIZON_MASK
        _TIMESTAMP.pack_into(head, _BASE_TIMESTAMP_OFFSET, delete_horizon)
    _LENGTH.pack_into(head, LOG_OVERHEAD - _LENGTH.size, HEADER_SIZE - LOG_OVERHEAD + len(section))
    _ATTRIBUTES.pack_into(head, ATTRIBUTES_OFFSET, attributes)
    _RECORD_COUNT.pack_into(head, _RECORD_COUNT_OFFSET, kept)
    _CRC.pack_into(head, _CRC_OFFSET, crc32c(section, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])))
    return bytes(head) + section


def _records_section(raw: memoryview, codec: int) -> bytes:
    section = raw[HEADER_SIZE:]
    return decompress(codec, section) if codec else section.tobytes()


def can_extend(run: BatchHeader, empty: BatchHeader) -> bool:
    """May the empty batch `empty` be coalesced into the empty batch (or run) `run` before it (Rule 3)?"""
    if empty.base_offset != run.next_offset or run.is_control or empty.is_control:
        return False
    same = (run.producer_id, run.producer_epoch, run.is_transactional, run.partition_leader_epoch) == (
        empty.producer_id, empty.producer_epoch, empty.is_transactional, empty.partition_leader_epoch)
    follows = run.producer_id == NO_PRODUCER_ID or empty.base_sequence == run.base_sequence + run.last_offset_delta + 1
    return same and follows and empty.next_offset - run.base_offset <= _INT32_MAX


def extend_empty(run: bytes, empty: BatchHeader) -> tuple[BatchHeader, bytes]:
    """The empty header `run` made to span `empty`'s offsets too: lastOffsetDelta to its last offset,
    maxTimestamp the larger of both, a new CRC."""
    head = bytearray(run[:HEADER_SIZE])
    first = parse_header(head)
    _LAST_OFFSET_DELTA.pack_into(head, LAST_OFFSET_DELTA_OFFSET, empty.last_offset - first.base_offset)
    _TIMESTAMP.pack_into(head, _MAX_TIMESTAMP_OFFSET, max(first.max_timestamp, empty.max_timestamp))
    _CRC.pack_into(head, _CRC_OFFSET, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:]))
    return parse_header(head), bytes(head)
