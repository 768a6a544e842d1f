"""Kafka RecordBatch v2: the one byte format shared by producers, the log on disk and consumers.

RecordBatch v2 (design notes, section 5.3.1); all integers big-endian:

    baseOffset            int64   offset of the first record; the log writes it at append
    batchLength           int32   bytes after this field, to the end of the batch
    partitionLeaderEpoch  int32   assigned by the leader at append
    magic                 int8    2
    crc                   uint32  CRC-32C of everything from attributes to the end of the batch
    attributes            int16   bits 0-2 compression, 3 timestampType, 4 transactional, 5 control
    lastOffsetDelta       int32
    baseTimestamp         int64
    maxTimestamp          int64
    producerId            int64
    producerEpoch         int16
    baseSequence          int32
    recordCount           int32
    records               [Record], compressed as one block when compression != 0

The CRC starts after the crc field, so baseOffset and partitionLeaderEpoch are outside it: the broker
assigns both at append time without recomputing the checksum over the (possibly compressed) records.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from crc32c import crc32c

# One struct for the whole fixed-size header, field by field as above.
HEADER = struct.Struct(
    ">"
    "q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = struct.calcsize(">qi")  # baseOffset + batchLength: 12 bytes before the length counts
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = MAGIC_OFFSET + 1  # 17
ATTRIBUTES_OFFSET = CRC_OFFSET + 4  # 21: the CRC covers [21, end)
PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD  # 12
MAGIC = 2

_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LEADER_EPOCH = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1


class CorruptRecordError(ValueError):
    """The bytes are not a valid v2 batch: bad magic, bad length or a CRC-32C mismatch."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)


def parse_header(buffer, position: int = 0) -> BatchHeader:
    """Parse the fixed header at `position`; checks nothing but that 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buffer, position))


def peek_size(buffer, position: int = 0) -> int:
    """Total size of the batch starting at `position`, from its length field alone."""
    return _LENGTH.unpack_from(buffer, position + 8)[0] + LOG_OVERHEAD


def compute_crc(batch) -> int:
    """CRC-32C of one whole batch's covered range (attributes to end)."""
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def validate_batch(batch, max_size: int | None = None) -> BatchHeader:
    """Check one whole batch (exactly its bytes): size, magic, record count and CRC-32C."""
    view = memoryview(batch)
    if len(view) < HEADER_SIZE:
        raise CorruptRecordError(f"batch of {len(view)} bytes is shorter than the {HEADER_SIZE}-byte header")
    header = parse_header(view)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {header.magic} (only RecordBatch v2 is accepted)")
    if header.size != len(view) or header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batchLength {header.batch_length} does not match {len(view)} bytes")
    if max_size is not None and header.size > max_size:
        raise CorruptRecordError(f"batch of {header.size} bytes exceeds the limit of {max_size}")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptRecordError("negative lastOffsetDelta or record count")
    actual = crc32c(view[ATTRIBUTES_OFFSET:])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def set_base_offset(buffer: bytearray | memoryview, offset: int, position: int = 0) -> None:
    """Assign the batch's base offset in place; the CRC does not cover it."""
    _BASE_OFFSET.pack_into(buffer, position, offset)


def set_partition_leader_epoch(buffer: bytearray | memoryview, epoch: int, position: int = 0) -> None:
    """Stamp the leader epoch in place; the CRC does not cover it."""
    _LEADER_EPOCH.pack_into(buffer, position + PARTITION_LEADER_EPOCH_OFFSET, epoch)
