"""The payload framing of the Kafka ecosystem's schema registries: magic byte 0, a 4-byte big-endian schema
id, then the Avro binary encoding of one datum (no container file, no per-message schema).

    0x00 | schema id (uint32, big-endian) | Avro binary (fastavro schemaless_writer)

Rule 1: `split(payload)` checks the magic byte and length before anything is decoded and raises
`FramingError` naming what it found; an unknown magic byte is never guessed at.
"""

from __future__ import annotations

import io
import struct
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

MAGIC = 0
HEADER = struct.Struct(">bI")  # magic byte, schema id
MAX_SCHEMA_ID = 2**32 - 1


class FramingError(ValueError):
    """A payload is not `0 | schema id | Avro binary`."""


def header(schema_id: int) -> bytes:
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} does not fit the 4-byte framing")
    return HEADER.pack(MAGIC, schema_id)


def split(payload: bytes | memoryview) -> tuple[int, memoryview]:
    """`payload` -> (schema id, the Avro body) without copying the body."""
    view = memoryview(payload)
    if len(view) < HEADER.size:
        raise FramingError(f"payload of {len(view)} bytes is shorter than the {HEADER.size}-byte framing header")
    magic, schema_id = HEADER.unpack_from(view)
    if magic != MAGIC:
        raise FramingError(f"unknown magic byte {magic} (expected {MAGIC}): not a schema-registry Avro payload")
    return schema_id, view[HEADER.size:]


def encode(schema_id: int, parsed_schema: Any, datum: Any) -> bytes:
    """One datum, framed; `parsed_schema` is the schema of `schema_id` as `fastavro.parse_schema` returns it."""
    out = io.BytesIO()
    out.write(header(schema_id))
    schemaless_writer(out, parsed_schema, datum)
    return out.getvalue()


def decode_body(body: bytes | memoryview, writer_schema: Any, reader_schema: Any = None) -> Any:
    """The Avro body of one framed payload, resolved to `reader_schema` when one is given."""
    return schemaless_reader(io.BytesIO(body), writer_schema, reader_schema)
