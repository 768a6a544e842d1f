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
written uncompressed.
Rule 4: a batch whose every record is kept is returned as it was (the caller copies its bytes unchanged).
"""

from __future__ import annotations

import struct
from crc32c import crc32c

from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatch,
    RecordColumns,
    decode_varint,
)
from sparklog.records.compression import compress, decompress

# The header fields a rewrite changes, after the CRC: attributes, and recordCount at the end of the header.
_ATTRIBUTES = struct.Struct(">h")
_RECORD_COUNT = struct.Struct(">i")
_RECORD_COUNT_OFFSET = HEADER_SIZE - _RECORD_COUNT.size
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CRC_OFFSET = ATTRIBUTES_OFFSET - _CRC.size


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
    raw = batch.raw
    codec = batch.attributes & COMPRESSION_MASK
    attributes = batch.attributes
    if kept == 0:
        section = b""
        attributes &= ~COMPRESSION_MASK  # Rule 3: an empty batch is written uncompressed
    else:
        section = _records_section(raw, codec)
        spans = record_spans(section, batch.record_count)
        section = b"".join(section[s:e] for (s, e), k in zip(spans, keep) if k)
        if codec:
            section = compress(codec, section)
    head = bytearray(raw[:HEADER_SIZE])
    _LENGTH.pack_into(head, LOG_OVERHEAD - _LENGTH.size, HEADER_SIZE - LOG_OVERHEAD + len(section))
    _ATTRIBUTES.pack_into(head, ATTRIBUTES_OFFSET, attributes)
    _RECORD_COUNT.pack_into(head, _RECORD_COUNT_OFFSET, kept)
    _CRC.pack_into(head, _CRC_OFFSET, crc32c(section, crc32c(memoryview(head)[ATTRIBUTES_OFFSET:])))
    return bytes(head) + section


def _records_section(raw: memoryview, codec: int) -> bytes:
    section = raw[HEADER_SIZE:]
    return decompress(codec, section) if codec else section.tobytes()
