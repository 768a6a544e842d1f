"""Primitive types of the Kafka wire protocol, as named in Kafka's JSON message specs.

Fixed-width integers are big-endian. The ``compact`` variants (flexible versions) prefix lengths with an
unsigned varint of ``length + 1`` (0 means null); the others with int16 (strings) or int32 (bytes,
records, arrays) where -1 means null. ``unsigned varint`` is plain base-128. (The zig-zag
varints of record batches live with the batch codec, `sparklog.records.batch`: no message body uses them.)

``TYPES`` maps a spec type name to a ``Primitive``; the schema compiler (schema.py) reads ``fmt`` to
merge runs of fixed-width fields into one ``struct.Struct``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sparklog.records import BytesLike

__all__ = [
    "Primitive", "TYPES", "INT8", "INT16", "INT32", "INT64", "UINT16", "UINT32", "FLOAT64", "BOOL",
    "read_uvarint", "write_uvarint",
]

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")


@dataclass(frozen=True)
class Primitive:
    """A spec type. ``fmt`` is its struct code when fixed-width, else None (``size`` then 0)."""

    name: str
    fmt: str | None
    size: int
    zero: object  # the value a field of this type has when the spec gives no default


TYPES: dict[str, Primitive] = {p.name: p for p in [
    Primitive("int8", "b", 1, 0),
    Primitive("int16", "h", 2, 0),
    Primitive("uint16", "H", 2, 0),
    Primitive("int32", "i", 4, 0),
    Primitive("uint32", "I", 4, 0),
    Primitive("int64", "q", 8, 0),
    Primitive("float64", "d", 8, 0.0),
    Primitive("bool", "?", 1, False),
    Primitive("uuid", None, 16, None),  # uuid.UUID; the zero value is UUID(int=0), set by schema.py
    Primitive("string", None, 0, ""),
    Primitive("bytes", None, 0, b""),
    Primitive("records", None, 0, None),
]}


def read_uvarint(buf: BytesLike, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos``: (value, position after it). At most 5 bytes (32 bits), as Kafka's
    ``ByteUtils.readUnsignedVarint``; raises ``ValueError`` beyond that and ``IndexError`` if truncated."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7
        if shift > 28:
            raise ValueError("unsigned varint longer than 5 bytes")


_SMALL_UVARINTS = [bytes([i]) for i in range(128)]


def write_uvarint(value: int) -> bytes:
    """Unsigned varint of ``0 <= value < 2**32``."""
    if 0 <= value < 128:
        return _SMALL_UVARINTS[value]
    if value < 0 or value >= 1 << 32:
        raise OverflowError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
