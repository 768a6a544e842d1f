"""The legacy message format (magic 0 and 1, Kafka before 0.11) that Produce v0-v2 carries, and its
up-conversion to one RecordBatch v2, as Kafka's LogValidator does on append (message.format.version 3.0).

A message set is a sequence of entries; all integers big-endian:

    offset        int64   the producer's (ignored: the log assigns offsets); in a magic 1 wrapper's inner
                          set the relative offsets 0..n-1
    message_size  int32   bytes of the message that follows
    crc           uint32  CRC-32 (IEEE, zlib's) of everything from magic to the end of the message
    magic         int8    0 or 1
    attributes    int8    bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4), bit 3 (magic 1)
                          timestampType (0 CreateTime, 1 LogAppendTime)
    timestamp     int64   magic 1 only
    key           int32 length (-1: null) + bytes
    value         int32 length (-1: null) + bytes; a compressed message's value is the compressed
                          message set of its inner messages (the wrapper)

Rule 1 (sans-IO, bounded): `decode(buffer)` reads only the bytes given and never allocates by a size field:
every size and length is checked against the bytes that remain before anything is sliced, and a wrapper's
value decompresses through compression.decompress, bounded by `output_limit` of its compressed size.
Rule 2 (refused, one line): a truncated entry, a size or length outside the bytes that remain, a message
whose fields do not end exactly at its size, a CRC mismatch, a magic other than 0 or 1, an inner magic other
than the wrapper's, a codec other than none/gzip/snappy/lz4, a compressed message inside a compressed one,
an empty wrapper or set: `CorruptMessageSet` naming the entry and what is wrong. Nothing is half-decoded.
Rule 3 (timestamps): a magic 0 message has none (-1, Kafka's NO_TIMESTAMP); a magic 1 message its own, or,
inside a wrapper whose timestampType is LogAppendTime, the wrapper's.
Rule 4 (up-conversion): `up_convert(buffer)` is one RecordBatch v2 of every message in order (offset deltas
0..n-1, no producer id, no headers), compressed with the first wrapper's codec (none if there is none),
timestampType CreateTime (the log stamps LogAppendTime when the topic says so).
`encode(messages, magic, codec)` writes a set (one wrapper when compressed), for tests and tools.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterable, NamedTuple

from sparklog.records import BytesLike
from sparklog.records import compression
from sparklog.records.batch import CREATE_TIME, NO_TIMESTAMP, build_batch

__all__ = ["LegacyMessage", "CorruptMessageSet", "decode", "encode", "up_convert", "is_legacy", "MAGIC_OFFSET"]

MAGIC_V0, MAGIC_V1 = 0, 1
MAGIC_OFFSET = 16  # offset(8) + size(4) + crc(4): where a v2 batch keeps its magic too
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
LEGACY_CODECS = (compression.NONE, compression.GZIP, compression.SNAPPY, compression.LZ4)
_ENTRY = struct.Struct(">qi")  # offset, message_size
_HEAD = struct.Struct(">IbB")  # crc, magic, attributes
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_MIN_MESSAGE = {MAGIC_V0: _HEAD.size + 8, MAGIC_V1: _HEAD.size + 8 + 8}  # empty key and value (length fields)


class CorruptMessageSet(ValueError):
    """A legacy message set that cannot be read (Rule 2)."""


class LegacyMessage(NamedTuple):
    """One message as read (inner messages of a wrapper, flattened), its timestamp per Rule 3."""

    offset: int
    magic: int
    timestamp: int
    key: bytes | None
    value: bytes | None


class _Raw(NamedTuple):
    offset: int
    magic: int
    attributes: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def is_legacy(buffer: BytesLike | None) -> bool:
    """True when the first entry's magic byte says 0 or 1 (a v2 batch keeps its magic at the same place)."""
    return buffer is not None and len(buffer) > MAGIC_OFFSET and buffer[MAGIC_OFFSET] in (MAGIC_V0, MAGIC_V1)


def decode(buffer: BytesLike) -> list[LegacyMessage]:
    """Every message of the set, inner messages of wrappers in their place (Rules 1-3)."""
    messages: list[LegacyMessage] = []
    for raw in _entries(memoryview(buffer), "entry"):
        codec = raw.attributes & COMPRESSION_MASK
        if codec == compression.NONE:
            messages.append(LegacyMessage(raw.offset, raw.magic, raw.timestamp, raw.key, raw.value))
        else:
            messages.extend(_inner(raw, codec))
    return messages


def _entries(view: memoryview, where: str) -> list[_Raw]:
    if not len(view):
        raise CorruptMessageSet(f"{where}: the message set is empty")
    found: list[_Raw] = []
    position = 0
    while position < len(view):
        label = f"{where} {len(found)} (byte {position})"
        if len(view) - position < _ENTRY.size:
            raise CorruptMessageSet(f"{label}: truncated ({len(view) - position} bytes, an entry header is "
                                    f"{_ENTRY.size})")
        offset, size = _ENTRY.unpack_from(view, position)
        start = position + _ENTRY.size
        if size < _MIN_MESSAGE[MAGIC_V0] or size > len(view) - start:
            raise CorruptMessageSet(f"{label}: message size {size} is outside [{_MIN_MESSAGE[MAGIC_V0]}, "
                                    f"{len(view) - start}] (the bytes that remain)")
        found.append(_message(view[start:start + size], offset, label))
        position = start + size
    return found


def _message(view: memoryview, offset: int, label: str) -> _Raw:
    crc, magic, attributes = _HEAD.unpack_from(view, 0)
    if magic not in (MAGIC_V0, MAGIC_V1):
        raise CorruptMessageSet(f"{label}: magic {magic} is not a legacy message (0 or 1)")
    if len(view) < _MIN_MESSAGE[magic]:
        raise CorruptMessageSet(f"{label}: {len(view)} bytes is shorter than a magic {magic} message")
    if zlib.crc32(view[4:]) != crc:
        raise CorruptMessageSet(f"{label}: CRC mismatch (stored {crc:#010x}, computed {zlib.crc32(view[4:]):#010x})")
    position = _HEAD.size
    timestamp = NO_TIMESTAMP
    if magic == MAGIC_V1:
        (timestamp,) = _I64.unpack_from(view, position)
        position += 8
    key, position = _bytes(view, position, label, "key")
    value, position = _bytes(view, position, label, "value")
    if position != len(view):
        raise CorruptMessageSet(f"{label}: {len(view) - position} bytes after the value, inside the message size")
    return _Raw(offset, magic, attributes, timestamp, key, value)


def _bytes(view: memoryview, position: int, label: str, field: str) -> tuple[bytes | None, int]:
    if len(view) - position < 4:
        raise CorruptMessageSet(f"{label}: the {field} length runs past the message")
    (length,) = _I32.unpack_from(view, position)
    position += 4
    if length == -1:
        return None, position
    if length < 0 or length > len(view) - position:
        raise CorruptMessageSet(f"{label}: {field} length {length} is outside [-1, {len(view) - position}]")
    return bytes(view[position:position + length]), position + length


def _inner(wrapper: _Raw, codec: int) -> list[LegacyMessage]:
    label = f"wrapper at offset {wrapper.offset}"
    if codec not in LEGACY_CODECS:
        raise CorruptMessageSet(f"{label}: compression {codec} is not one of the legacy codecs (none, gzip, "
                                f"snappy, lz4)")
    if wrapper.value is None:
        raise CorruptMessageSet(f"{label}: a compressed message with a null value")
    try:
        inner = compression.decompress(codec, wrapper.value)
    except compression.CompressionError as exc:
        raise CorruptMessageSet(f"{label}: {exc}") from None
    appended = wrapper.magic == MAGIC_V1 and wrapper.attributes & TIMESTAMP_TYPE_MASK
    messages = []
    for raw in _entries(memoryview(inner), f"{label}, inner entry"):
        if raw.attributes & COMPRESSION_MASK:
            raise CorruptMessageSet(f"{label}: a compressed message inside a compressed one")
        if raw.magic != wrapper.magic:
            raise CorruptMessageSet(f"{label}: inner magic {raw.magic} differs from the wrapper's {wrapper.magic}")
        messages.append(LegacyMessage(raw.offset, raw.magic, wrapper.timestamp if appended else raw.timestamp,
                                      raw.key, raw.value))
    return messages


def up_convert(buffer: BytesLike) -> bytes:
    """Rule 4: the set as one RecordBatch v2 (CorruptMessageSet per Rule 2)."""
    messages = decode(buffer)
    return build_batch([(m.key, m.value, None, m.timestamp) for m in messages], _first_codec(buffer),
                       timestamp_type=CREATE_TIME)


def _first_codec(buffer: BytesLike) -> int:
    view, position = memoryview(buffer), 0
    while position + MAGIC_OFFSET + 2 <= len(view):
        _, size = _ENTRY.unpack_from(view, position)
        codec = view[position + MAGIC_OFFSET + 1] & COMPRESSION_MASK
        if codec:
            return codec
        position += _ENTRY.size + size
    return compression.NONE


def encode(messages: Iterable[tuple[bytes | None, bytes | None, int]], magic: int, codec: int = compression.NONE,
           timestamp_type: int = CREATE_TIME) -> bytes:
    """A message set of `(key, value, timestamp)`: one message each, or, compressed, one wrapper of them all
    (magic 1 inner offsets relative, 0..n-1; the wrapper's the last one's, its timestamp the largest)."""
    items = list(messages)
    plain = b"".join(_entry(i, magic, 0, ts, key, value) for i, (key, value, ts) in enumerate(items))
    if codec == compression.NONE:
        return plain
    attributes = codec | (TIMESTAMP_TYPE_MASK if timestamp_type and magic == MAGIC_V1 else 0)
    latest = max((ts for _, _, ts in items), default=NO_TIMESTAMP)
    return _entry(len(items) - 1, magic, attributes, latest, None, compression.compress(codec, plain))


def _entry(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    body = struct.pack(">bB", magic, attributes)
    if magic == MAGIC_V1:
        body += _I64.pack(timestamp)
    for part in (key, value):
        body += _I32.pack(-1) if part is None else _I32.pack(len(part)) + part
    message = struct.pack(">I", zlib.crc32(body)) + body
    return _ENTRY.pack(offset, len(message)) + message
