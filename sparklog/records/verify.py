"""Whether the records inside a client's batch parse: what the broker checks of a Produce batch beyond its
header and CRC-32C (Kafka's LogValidator, which iterates every record of a client's batch before the append).

A batch whose CRC is right can still hold records no consumer can read: garbage varints, a record count
that does not match its records or its lastOffsetDelta, a compressed section that does not decompress.
Stored, it breaks every consumer of the partition; refused, only its producer hears of it.

Rule 1: `records_error(batch)` is None when the records of one whole v2 batch parse: recordCount >= 1 and
        lastOffsetDelta == recordCount - 1 (Kafka: "Inconsistent batch offset range"), the section
        decompresses (within compression.output_limit), holds exactly recordCount records that fill it and
        each fill its length, no header key is null, and the offset deltas are 0..recordCount-1 (as every
        producer writes them; the log serves a record at baseOffset + offsetDelta). Otherwise it is the one
        reason, as text.
Rule 2: a batch whose framing or CRC-32C is wrong is not this function's to judge: it returns None, and the
        caller's batch check (`batch.validate_batch`) refuses it as corrupt. The CRC is computed only for a
        batch whose records fail, so a good batch pays nothing for this rule.
Rule 3: the work is per batch: with the compiled codec one C call walks an uncompressed batch (a compressed
        one: decompression, then one C call); the pure-Python twin, selected by SPARKLOG_NO_EXTENSIONS=1, is
        the authority: the compiled one only ever says "parses", and hands every other batch to it, so both
        give the same answer and the same reason.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import Callable

from crc32c import crc32c

from sparklog.records import batch as _batch
from sparklog.records import compression as _compression
from sparklog.records import implementation as _implementation
from sparklog.records import BytesLike
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    MAX_CODEC,
    CorruptRecordError,
    parse_header,
)

_KERNEL = _implementation.RecordKernel("sparklog.records._cverify", "batch check", ("plain_records_ok", "section_records_ok"))

_LENGTH = struct.Struct(">i")
# (the codec that was active, its kernel or None, the kernel's plain_records_ok or None): see _select
_Active = tuple[_implementation.Codec | None, ModuleType | None, Callable[[BytesLike], bool] | None]


def records_error(batch: BytesLike) -> str | None:
    """Rule 1 for one whole batch (bytes, bytearray or memoryview of exactly its bytes)."""
    codec, compiled, plain_ok = _ACTIVE
    if codec is not _batch.CODEC:  # the codec was switched (batch.use): look again
        codec, compiled, plain_ok = _select()
    if plain_ok is not None and plain_ok(batch):
        return None
    view = memoryview(batch)
    if not _framed(view):
        return None  # Rule 2
    reason = _records_error(view, compiled)
    if reason is not None and crc32c(view[ATTRIBUTES_OFFSET:]) != _batch.parse_header(view).crc:
        return None  # Rule 2: corrupt, not malformed
    return reason


def _framed(view: memoryview) -> bool:
    """The header checks of validate_batch that this function relies on (the CRC aside)."""
    return (len(view) >= HEADER_SIZE and view[MAGIC_OFFSET] == MAGIC
            and _LENGTH.unpack_from(view, 8)[0] + LOG_OVERHEAD == len(view)
            and view[ATTRIBUTES_OFFSET + 1] & COMPRESSION_MASK <= MAX_CODEC)


def _records_error(view: memoryview, compiled: ModuleType | None) -> str | None:
    header = parse_header(view)
    count = header.record_count
    if count <= 0:
        return f"invalid record count {count}: a batch holds at least one record"
    if header.last_offset_delta != count - 1:
        return (f"inconsistent lastOffsetDelta {header.last_offset_delta} and record count {count} "
                f"(lastOffsetDelta must be count - 1)")
    codec = header.compression
    if codec:
        try:
            section = _compression.decompress(codec, view[HEADER_SIZE:])
        except (_compression.CompressionError, ValueError) as exc:
            return f"the records section does not decompress: {exc}"
        if compiled is not None and compiled.section_records_ok(section, count):
            return None
    else:
        section = view[HEADER_SIZE:].tobytes()
    try:
        offsets = _batch.PYTHON_CODEC.decode_columns(section, header).offsets
    except CorruptRecordError as exc:
        return f"the records do not parse: {exc}"
    base = header.base_offset
    if offsets != list(range(base, base + count)):  # one comparison in C; the loop only names the culprit
        for index, offset in enumerate(offsets):
            if offset != base + index:
                return (f"record {index} has offsetDelta {offset - base} (a batch's records have offset deltas "
                        f"0..{count - 1})")
    return None


def _select() -> _Active:
    """(the active codec, the compiled module or None, its plain_records_ok or None), remembered in _ACTIVE
    until the codec changes: one identity test per batch on the produce path (Rule 3)."""
    global _ACTIVE
    codec = _batch.CODEC
    compiled = None
    if codec.name == _implementation.CYTHON:
        compiled = _KERNEL.active
    _ACTIVE = (codec, compiled, None if compiled is None else compiled.plain_records_ok)
    return _ACTIVE


_ACTIVE: _Active = (None, None, None)
