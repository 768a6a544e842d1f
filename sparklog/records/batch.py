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

Record (design notes, section 5.3.2); varint/varlong are zig-zag encoded as in protobuf:

    length                varint  bytes after this field
    attributes            int8    unused, 0
    timestampDelta        varlong against baseTimestamp
    offsetDelta           varint  against baseOffset
    keyLength             varint  -1 for a null key
    key                   byte[]
    valueLength           varint  -1 for a null value
    value                 byte[]
    headersCount          varint
    headers               [headerKeyLength varint, headerKey utf-8, headerValueLength varint, value]
"""

from __future__ import annotations

import struct
import time
from bisect import bisect_left
from itertools import starmap as _starmap
from operator import itemgetter
from typing import Any, Iterable, Iterator, NamedTuple, Sequence

from crc32c import crc32c

from sparklog.records import compression as _compression
from sparklog.records import implementation as _implementation
from sparklog.records import BytesLike
from sparklog.records.compression import CompressionError, codec_id

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
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + struct.calcsize(">h")  # 23: follows the int16 attributes
MAGIC = 2

_BASE_OFFSET = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_LEADER_EPOCH = struct.Struct(">i")
_LAST_OFFSET_DELTA = struct.Struct(">i")

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534: baseTimestamp holds the batch's delete horizon (set by the log cleaner)
MAX_CODEC = 4  # zstd: the highest compression codec id (Kafka's CompressionType); 5-7 are no codec at all

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

    @property
    def delete_horizon_ms(self) -> int | None:
        """When the log cleaner may remove this batch's tombstones (KIP-534), or None: not set yet."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None


def parse_header(buffer: BytesLike, position: int = 0) -> BatchHeader:
    """Parse the fixed header at `position`; checks nothing but that 61 bytes are there."""
    return BatchHeader._make(HEADER.unpack_from(buffer, position))


def peek_size(buffer: BytesLike, position: int = 0) -> int:
    """Total size of the batch starting at `position`, from its length field alone."""
    length: int = _LENGTH.unpack_from(buffer, position + 8)[0]
    return length + LOG_OVERHEAD


def compute_crc(batch: BytesLike) -> int:
    """CRC-32C of one whole batch's covered range (attributes to end)."""
    return crc32c(memoryview(batch)[ATTRIBUTES_OFFSET:])


def validate_batch(batch: BytesLike, max_size: int | None = None) -> BatchHeader:
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
    if header.attributes & COMPRESSION_MASK > MAX_CODEC:
        raise CorruptRecordError(f"unknown compression codec {header.attributes & COMPRESSION_MASK} "
                                 f"(0-{MAX_CODEC}: none, gzip, snappy, lz4, zstd)")
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


# ---------------------------------------------------------------------------------------------------------
# Records: building a batch (the producer's hot path) and reading one back.

CREATE_TIME = 0  # timestampType 0: the producer's timestamps
LOG_APPEND_TIME = 1  # timestampType 1: the broker's append time, stored as maxTimestamp

# The header from attributes on, i.e. the part after the CRC that the CRC covers.
_BEFORE_CRC = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount
assert _BEFORE_CRC.size == ATTRIBUTES_OFFSET and _BEFORE_CRC.size + _AFTER_CRC.size == HEADER_SIZE
_BATCH_OVERHEAD = HEADER_SIZE - LOG_OVERHEAD  # batchLength of a batch with an empty records section

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_MAX_VARINT_BYTES = 10  # a zig-zag varlong of 64 bits needs at most 10 groups of 7 bits

# Signed values in [-8192, 8192) zig-zag to at most 2 bytes: a table covers every delta, small length
# and record size of a typical batch, so the hot loop only indexes.
_TABLE_LIMIT = 1 << 13

_NULL = b"\x01"  # zig-zag varint -1: a null key or value
_NO_HEADERS = b"\x00"  # zig-zag varint 0: headersCount of a record without headers
_RECORD_ATTRIBUTES = b"\x00"  # record attributes are unused


Headers = tuple[tuple[str, bytes | None], ...]  # a record's headers: (key, value or None) pairs


class Record(NamedTuple):
    """One record as a consumer sees it: absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class RecordColumns(NamedTuple):
    """The records of one batch as parallel lists (`RecordBatch.columns()`): absolute offsets and
    timestamps, keys and values (None when null), and each record's headers (() when it has none)."""

    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[tuple[tuple[str, bytes | None], ...]]


def encode_varint(value: int) -> bytes:
    """Zig-zag varint/varlong of any int64 (Kafka's ByteUtils.writeVarlong)."""
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"{value} does not fit a varlong (int64)")
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while zigzag >= 0x80:
        out.append((zigzag & 0x7F) | 0x80)
        zigzag >>= 7
    out.append(zigzag)
    return bytes(out)


_VARINTS = tuple(encode_varint(value) for value in range(-_TABLE_LIMIT, _TABLE_LIMIT))


def decode_varint(buffer: BytesLike, position: int) -> tuple[int, int]:
    """Zig-zag varint/varlong at `position`: (value, position after it); over-long input raises."""
    byte = buffer[position]
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), position + 1
    result = byte & 0x7F
    shift = 7
    for position in range(position + 1, position + _MAX_VARINT_BYTES):
        byte = buffer[position]
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), position + 1
        shift += 7
    raise CorruptRecordError(f"varint longer than {_MAX_VARINT_BYTES} bytes")


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    """headersCount and the headers; keys are str (utf-8), values bytes or None."""
    parts = [encode_varint(len(headers))]
    for key, value in headers:
        if not isinstance(key, str):
            raise TypeError(f"header keys are str, not {type(key).__name__}")
        encoded = key.encode("utf-8")
        parts.append(encode_varint(len(encoded)))
        parts.append(encoded)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(encode_varint(len(value)))
            parts.append(value)
    return b"".join(parts)


def _encode_records(records: Iterable[Any], now_ms: int) -> tuple[list[bytes], int, int | None, int | None]:
    """Encode the records section as a list of parts: (parts, count, base timestamp, max timestamp).

    Written for speed: locals for globals, table lookups for 1-2 byte varints, one join by the caller.
    """
    table, limit, varint = _VARINTS, _TABLE_LIMIT, encode_varint
    parts: list[bytes] = []
    append = parts.append
    base_ts = max_ts = None
    count = 0
    for count, record in enumerate(records, 1):
        if record.__class__ is tuple:
            key, value, headers, timestamp = record
        else:
            key, value, headers, timestamp = record.key, record.value, record.headers, record.timestamp
        if timestamp is None:
            timestamp = now_ms
        if base_ts is None:
            base_ts = max_ts = timestamp
        elif timestamp > max_ts:
            max_ts = timestamp
        delta = timestamp - base_ts
        head = _RECORD_ATTRIBUTES + (table[delta + limit] if -limit <= delta < limit else varint(delta))
        delta = count - 1  # offsetDelta
        head += table[delta + limit] if delta < limit else varint(delta)
        if key is None:
            head += _NULL
        else:
            size = len(key)
            head += (table[size + limit] if size < limit else varint(size)) + key
        if value is None:
            head += _NULL
            size = 0
            value = b""
        else:
            size = len(value)
            head += table[size + limit] if size < limit else varint(size)
        tail = _encode_headers(headers) if headers else _NO_HEADERS
        size += len(head) + len(tail)
        append((table[size + limit] if size < limit else varint(size)) + head)
        append(value)
        append(tail)
    return parts, count, base_ts, max_ts


def build_batch(
    records: Iterable[Any],  # (key, value, headers, timestamp) tuples, or objects with those attributes
    compression: str | int = "none",
    base_offset: int = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """One v2 batch holding `records`, with offset deltas 0..n-1 in the order given.

    A record is a `(key, value, headers, timestamp)` tuple or any object with those attributes (such
    as `Record`, whose offset is ignored). headers is None or a sequence of (str, bytes | None); a
    timestamp of None means now. baseTimestamp is the first record's, as in Kafka's builder.
    """
    codec = codec_id(compression)
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestampType is 0 or 1, not {timestamp_type!r}")
    parts, count, base_ts, max_ts = _encode_records(records, time.time_ns() // 1_000_000)
    if count == 0:
        raise ValueError("a batch holds at least one record")
    section = b"".join(parts)
    if codec:
        section = _compression.compress(codec, section)
    attributes = codec | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
    attributes |= (TRANSACTIONAL_MASK if is_transactional else 0) | (CONTROL_MASK if is_control else 0)
    try:
        tail = _AFTER_CRC.pack(
            attributes, count - 1, base_ts, max_ts, producer_id, producer_epoch, base_sequence, count
        )
        crc = crc32c(section, crc32c(tail))
        head = _BEFORE_CRC.pack(base_offset, _BATCH_OVERHEAD + len(section), partition_leader_epoch, MAGIC, crc)
    except struct.error as exc:  # a field outside its int16/int32/int64 range
        raise ValueError(f"batch header field out of range: {exc}") from None
    return b"".join((head, tail, section))


class RecordBatch(BatchHeader):
    """One whole, checked batch inside a buffer: every `BatchHeader` field and property, plus `raw`.

    `raw` is a memoryview of exactly the batch's bytes in the caller's buffer (no copy); `records()`
    decodes them. A tuple subclass cannot declare slots, so `raw` lives in the instance dict.
    """

    raw: memoryview

    def records(self) -> Iterator[Record]:
        """The records with absolute offsets and timestamps; control batches' records too.

        Built on `columns()`: one decoding loop to keep right, and a malformed batch raises before any of
        its records is yielded.
        """
        return _starmap(Record, zip(*self.columns()))

    def columns(self) -> RecordColumns:
        """All the records at once as parallel lists: what `records()` yields, transposed.

        The bulk path for readers that want columns (the Spark data source): no tuple per record, and 40%
        fewer instructions than `records()` then a transposition. Malformed bytes raise
        `CorruptRecordError` before anything is returned.
        """
        codec = self.attributes & COMPRESSION_MASK
        if codec:
            section = self._decompress(codec, self.raw[HEADER_SIZE:])
        else:  # one copy of the section: indexing and slicing bytes is faster than a memoryview's
            section = self.raw[HEADER_SIZE:].tobytes()
        return _decode_columns(section, self)

    def tuples(self, prefix: tuple[Any, ...], cls: type) -> list[Any]:
        """The records as `cls` tuples `prefix + (offset, timestamp, key, value, headers)`: what the consumer
        hands out (`prefix` = (topic, partition), `cls` its ConsumerRecord), built in one pass with no
        per-record Python work in the compiled codec. Errors are `columns()`'."""
        codec = self.attributes & COMPRESSION_MASK
        if codec:
            section = self._decompress(codec, self.raw[HEADER_SIZE:])
        else:
            section = self.raw[HEADER_SIZE:].tobytes()
        return _decode_records(section, self, prefix, cls)

    def _decompress(self, codec: int, section: BytesLike) -> bytes:
        try:
            return _compression.decompress(codec, section)
        except (CompressionError, ValueError) as exc:
            raise CorruptRecordError(f"batch at offset {self.base_offset}: {exc}") from exc


_new_tuple = tuple.__new__


def _decode_columns(buffer: bytes, batch: BatchHeader) -> RecordColumns:
    """Decode `batch.record_count` records filling `buffer` exactly into five lists; malformed bytes raise.

    The consumer's hot path, hence one long loop: 1- and 2-byte varints are decoded inline (a call costs as
    much as the decoding), and the key and value are the only copies. Keys and
    headers start as all-null lists and only non-null entries are stored, so the common record appends
    three times: offset, timestamp, value.
    """
    base_offset, base_ts = batch.base_offset, batch.base_timestamp
    count = batch.record_count
    varint, read_bytes = decode_varint, _read_bytes
    offsets: list[int] = []
    timestamps: list[int] = []
    values: list[bytes | None] = []
    # recordCount is covered by the CRC but may still lie: a record takes at least one byte, so lists sized
    # past the section could never fill, and a forged count of 2^31 must not cost 32 GiB before it fails.
    size = max(0, min(count, len(buffer)))
    keys: list[bytes | None] = [None] * size
    headers: list[Headers] = [()] * size
    add_offset, add_timestamp, add_value = offsets.append, timestamps.append, values.append
    end = len(buffer)
    position = 0
    try:
        for index in range(count):
            byte = buffer[position]
            if byte < 0x80:
                length, position = (byte >> 1) ^ -(byte & 1), position + 1
            elif buffer[position + 1] < 0x80:
                length = (byte & 0x7F) | (buffer[position + 1] << 7)
                length, position = (length >> 1) ^ -(length & 1), position + 2
            else:
                length, position = varint(buffer, position)
            record_end = position + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(f"record length {length} overruns the batch")
            byte = buffer[position + 1]  # after the unused attributes byte
            if byte < 0x80:
                add_timestamp(base_ts + ((byte >> 1) ^ -(byte & 1)))
                position += 2
            elif buffer[position + 2] < 0x80:
                delta = (byte & 0x7F) | (buffer[position + 2] << 7)
                add_timestamp(base_ts + ((delta >> 1) ^ -(delta & 1)))
                position += 3
            else:
                delta, position = varint(buffer, position + 1)
                add_timestamp(base_ts + delta)
            byte = buffer[position]
            if byte < 0x80:
                add_offset(base_offset + ((byte >> 1) ^ -(byte & 1)))
                position += 1
            elif buffer[position + 1] < 0x80:
                delta = (byte & 0x7F) | (buffer[position + 1] << 7)
                add_offset(base_offset + ((delta >> 1) ^ -(delta & 1)))
                position += 2
            else:
                delta, position = varint(buffer, position)
                add_offset(base_offset + delta)
            if buffer[position] == 0x01:  # null key
                position += 1
            else:
                keys[index], position = read_bytes(buffer, position)
            byte = buffer[position]
            if byte < 0x80:
                size, position = (byte >> 1) ^ -(byte & 1), position + 1
            elif buffer[position + 1] < 0x80:
                size = (byte & 0x7F) | (buffer[position + 1] << 7)
                size, position = (size >> 1) ^ -(size & 1), position + 2
            else:
                size, position = varint(buffer, position)
            if size < 0:
                add_value(None)
            else:  # a slice past record_end fails the length check below
                add_value(buffer[position : position + size])
                position += size
            if buffer[position] == 0:
                position += 1
            else:
                headers[index], position = _read_headers(buffer, position)
            if position != record_end:
                raise CorruptRecordError(f"record of {length} bytes holds {length + position - record_end}")
    except IndexError:
        raise CorruptRecordError(f"batch at offset {base_offset} ends inside a record") from None
    if position != end:
        raise CorruptRecordError(f"{end - position} bytes after the last of {count} records")
    if batch.attributes & TIMESTAMP_TYPE_MASK:  # LogAppendTime: every record has the batch's maxTimestamp
        timestamps = [batch.max_timestamp] * count
    return RecordColumns(offsets, timestamps, keys, values, headers)


def _read_bytes(buffer: BytesLike, position: int) -> tuple[bytes | None, int]:
    """Length-prefixed nullable bytes (from a memoryview or bytes): a copy, so the caller may drop the buffer."""
    length, position = decode_varint(buffer, position)
    if length < 0:
        return None, position
    end = position + length
    if end > len(buffer):
        raise CorruptRecordError(f"field of {length} bytes overruns the batch")
    return bytes(buffer[position:end]), end


def _read_headers(buffer: BytesLike, position: int) -> tuple[Headers, int]:
    count, position = decode_varint(buffer, position)
    if count < 0:
        raise CorruptRecordError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        key, position = _read_bytes(buffer, position)
        if key is None:
            raise CorruptRecordError("null header key")
        value, position = _read_bytes(buffer, position)
        # Java decodes header keys leniently (invalid UTF-8 becomes U+FFFD); so do we.
        headers.append((key.decode("utf-8", "replace"), value))
    return tuple(headers), position


def _decode_chunk(chunk: BytesLike, position: int, start: int, prefix: tuple[Any, ...], cls: type,
                  check_crc: bool) -> tuple[list[Any], int]:
    """The compiled codec's bulk step of `chunk_tuples` (many plain batches in one call); this twin takes no
    batch, leaving every one to `chunk_tuples`' general path, the authority."""
    return [], position


def _decode_records(buffer: bytes, batch: BatchHeader, prefix: tuple[Any, ...], cls: type) -> list[Any]:
    """`RecordBatch.tuples()` from the pure-Python columns (the compiled twin builds each tuple in C)."""
    new = _new_tuple
    return [new(cls, prefix + row) for row in zip(*PYTHON_CODEC.decode_columns(buffer, batch))]


# ---------------------------------------------------------------------------------------------------------
# The implementation switch (sparklog/records/implementation.py, the one selector): the compiled codec takes over these
# functions unless SPARKLOG_NO_EXTENSIONS is set or it was not built; the pure-Python ones stay in PYTHON_CODEC.

CODEC: _implementation.Codec  # the active one, set by use()


def use(codec: _implementation.Codec) -> None:
    """Run `codec` from now on: at import, and in the tests and benchmarks that compare the two."""
    global CODEC, encode_varint, decode_varint, _encode_records, _decode_columns, build_batch, _decode_records
    global _decode_chunk
    CODEC = codec
    _implementation.follow_codec(codec.name == _implementation.CYTHON)
    (encode_varint, decode_varint, _encode_records, _decode_columns, build_batch, _decode_records,
     _decode_chunk) = codec[1:]


PYTHON_CODEC = _implementation.Codec(
    _implementation.PYTHON, encode_varint, decode_varint, _encode_records, _decode_columns, build_batch,
    _decode_records, _decode_chunk
)
_selected, COMPILED_UNAVAILABLE = _implementation.select(PYTHON_CODEC, RecordColumns)
use(_selected)


def _byte_view(buffer: BytesLike) -> memoryview:
    view = memoryview(buffer)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def iter_batches(buffer: BytesLike, check_crc: bool = True, position: int = 0) -> Iterator[RecordBatch]:
    """Every whole batch in `buffer` (bytes, bytearray or memoryview of concatenated batches) from byte
    `position` on (errors name bytes of the whole buffer).

    A trailing partial batch, as a fetch response or a crashed append leaves, ends the iteration
    silently; a bad magic, length or CRC-32C raises `CorruptRecordError`. Each batch's `raw` views the
    caller's buffer: a bytearray cannot be resized while a batch (or this generator) is alive.
    """
    view = _byte_view(buffer)
    end = len(view)
    while end - position > MAGIC_OFFSET:
        if view[position + MAGIC_OFFSET] != MAGIC:
            raise CorruptRecordError(
                f"unsupported magic {view[position + MAGIC_OFFSET]} at byte {position} (only RecordBatch v2)"
            )
        if end - position < HEADER_SIZE:
            return
        batch = _new_tuple(RecordBatch, HEADER.unpack_from(view, position))
        if batch.batch_length < _BATCH_OVERHEAD or batch.last_offset_delta < 0 or batch.record_count < 0:
            raise CorruptRecordError(f"bad batchLength, lastOffsetDelta or recordCount at byte {position}")
        size = batch.batch_length + LOG_OVERHEAD
        if end - position < size:
            return
        raw = view[position : position + size]
        if check_crc and crc32c(raw[ATTRIBUTES_OFFSET:]) != batch.crc:
            raise CorruptRecordError(f"CRC-32C mismatch in the batch at offset {batch.base_offset}")
        batch.raw = raw
        yield batch
        position += size


def iter_records(buffer: BytesLike, check_crc: bool = True) -> Iterator[Record]:
    """Every record of every whole data batch in `buffer`; control batches (markers) are skipped."""
    for batch in iter_batches(buffer, check_crc):
        if not batch.attributes & CONTROL_MASK:
            yield from batch.records()


def next_fetch_offset(buffer: BytesLike, start: int) -> int:
    """The offset after the last whole batch in `buffer`, or `start` if none is whole.

    Reads only the headers' baseOffset, batchLength, magic and lastOffsetDelta (no CRC, no records): a
    fetcher knows where its next fetch starts without decoding. It stops at the first batch that is partial
    (a fetch response may end with one) or malformed (`iter_batches` reports that to whoever decodes it).
    """
    view = _byte_view(buffer)
    end = len(view)
    position = 0
    next_offset = start
    while end - position >= HEADER_SIZE:
        (base,) = _BASE_OFFSET.unpack_from(view, position)
        (length,) = _LENGTH.unpack_from(view, position + _BASE_OFFSET.size)
        size = length + LOG_OVERHEAD
        if length < _BATCH_OVERHEAD or view[position + MAGIC_OFFSET] != MAGIC or end - position < size:
            break
        (delta,) = _LAST_OFFSET_DELTA.unpack_from(view, position + LAST_OFFSET_DELTA_OFFSET)
        next_offset = max(next_offset, base + delta + 1)
        position += size
    return next_offset


def batches_in_range(buffer: BytesLike, start: int, end: int | None = None,
                     check_crc: bool = True) -> Iterator[tuple[RecordBatch, RecordColumns | None]]:
    """`(batch, columns)` for each whole batch of `buffer` holding offsets in `[start, end)` (`end` None: no end).

    The one trimming rule of every reader of fetched batches (the consumer, the Spark fetcher): batches
    that end before `start` are skipped; a data batch's columns are cut to the records inside `[start, end)`
    (a fetch may begin inside a batch). `columns` None means "nothing to read here, but move your position
    past this batch (up to `end`)": a control batch (a transaction marker), and the first batch at or past
    `end`, which also ends the iteration (the range is complete even if compaction left a gap before it).
    Errors are `iter_batches`': a corrupt batch raises before anything of it is returned.
    """
    for batch, data in batches_overlapping(buffer, start, end, check_crc):
        if not data:
            yield batch, None
            continue
        columns = batch.columns()
        offsets = columns.offsets  # ascending within a batch
        if offsets and (offsets[0] < start or (end is not None and offsets[-1] >= end)):
            first = bisect_left(offsets, start)
            last = len(offsets) if end is None else bisect_left(offsets, end)
            columns = RecordColumns(offsets[first:last], columns.timestamps[first:last], columns.keys[first:last],
                                    columns.values[first:last], columns.headers[first:last])
        yield batch, columns


def tuples_in_range(buffer: BytesLike, start: int, prefix: tuple[Any, ...], cls: type,
                    check_crc: bool = True) -> Iterator[tuple[RecordBatch, list[Any] | None]]:
    """`(batch, records)` for each whole batch of `buffer` holding offsets from `start` on: `batches_in_range`
    with no end, each data batch's records as `RecordBatch.tuples(prefix, cls)` (those before `start` cut),
    None for a control batch. The consumer's path: one list of ready records per batch."""
    at = len(prefix)  # where the offset sits in a record
    for batch, data in batches_overlapping(buffer, start, None, check_crc):
        if not data:
            yield batch, None
            continue
        yield batch, _tuples_from(batch, start, prefix, cls, at)


def _tuples_from(batch: RecordBatch, start: int, prefix: tuple[Any, ...], cls: type, at: int) -> list[Any]:
    """A data batch's records as `RecordBatch.tuples`, those before `start` cut (`at`: the offset's field)."""
    records = batch.tuples(prefix, cls)
    if records and records[0][at] < start:
        records = records[bisect_left(records, start, key=itemgetter(at)):]
    return records


def chunk_tuples(buffer: BytesLike, start: int, prefix: tuple[Any, ...], cls: type,
                 check_crc: bool = True) -> Iterator[tuple[RecordBatch | None, list[Any] | None]]:
    """`tuples_in_range` for a consumer's fetched chunk, with runs of plain batches taken in bulk: yields
    `(None, records)` for a run of whole, uncompressed data batches the compiled codec decoded in one call
    (`_decode_chunk`), and `tuples_in_range`'s `(batch, records)` / `(batch, None)` for any other batch,
    read the general way. The same records, in the same order, raising the same errors at the same point."""
    view = _byte_view(buffer)
    end, position, at = len(view), 0, len(prefix)
    while position < end:
        records, taken = _decode_chunk(view, position, start, prefix, cls, check_crc)
        if records:
            yield None, records
        if taken != position:
            position = taken
            continue
        batch = next(iter_batches(view, check_crc, position), None)
        if batch is None:
            return  # the end, or a partial last batch
        position += len(batch.raw)
        if batch.next_offset <= start:
            continue
        if batch.attributes & CONTROL_MASK:
            yield batch, None
            continue
        yield batch, _tuples_from(batch, start, prefix, cls, at)


def batches_overlapping(buffer: BytesLike, start: int, end: int | None = None,
                        check_crc: bool = True) -> Iterator[tuple[RecordBatch, bool]]:
    """`(batch, is data to read)` for the batches `batches_in_range` decodes (True) or hands back as
    "move past this" (False: a control batch, or the first batch at or past `end`, which ends it)."""
    for batch in iter_batches(buffer, check_crc):
        if batch.next_offset <= start:
            continue
        if end is not None and batch.base_offset >= end:
            yield batch, False
            return
        yield batch, not batch.attributes & CONTROL_MASK
