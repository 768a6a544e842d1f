"""One batch's records in Arrow's columnar layout: what a columnar reader (the Spark source) builds its arrays
from with no Python object per record.

Rule 1: `decode_buffers(batch)` gives the offsets and timestamps as int64 arrays, and the keys and the values
        each as Arrow's variable-size binary layout: one contiguous data buffer, `count + 1` int32 ends, and a
        validity bitmap (bit i set: record i is not null; least significant bit first) or None when no record
        is null. `has_headers` says whether any record has headers; the headers themselves are read, when
        wanted, by `columns()` (they are rare, and their list layout is not worth a second decoder).
Rule 2: the buffers are native-endian `array`s and `bytearray`s; Arrow's layout is little-endian, as is every
        platform pyspark runs on.
Rule 3: the compiled twin (`_cbatch.decode_buffers`) runs when the compiled codec is active (`batch.CODEC`),
        with its byte loop outside the interpreter lock; it gives the same buffers and defers every input it
        does not take to `_decode_python` here, built on the record decoder, which decides (malformed bytes
        raise CorruptRecordError, as `columns()` does).
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import accumulate, compress
from typing import Iterator, NamedTuple

from sparklog.records import batch as _batch
from sparklog.records import implementation as _implementation
from sparklog.records.batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, RecordBatch


class ColumnBuffers(NamedTuple):
    """One batch's records as Arrow buffers (Rule 1)."""

    count: int
    offsets: array  # "q"
    timestamps: array  # "q"
    key_ends: array  # "i": count + 1 ends into key_data, starting with 0
    key_data: bytearray
    key_validity: bytearray | None
    key_nulls: int
    value_ends: array  # "i"
    value_data: bytearray
    value_validity: bytearray | None
    value_nulls: int
    has_headers: bool


def decode_buffers(batch: RecordBatch) -> ColumnBuffers:
    """Rule 1 for a data batch (a control batch's records decode too: the caller skips those)."""
    codec = batch.attributes & COMPRESSION_MASK
    section = batch._decompress(codec, batch.raw[HEADER_SIZE:]) if codec else batch.raw[HEADER_SIZE:]
    buffers = None
    if _batch.CODEC.name == _implementation.CYTHON:
        from sparklog.records import _cbatch

        log_append_time = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
        # An uncompressed section is read in place, in the fetched buffer: the compiled decoder copies
        # each key and value once, into the Arrow buffers, and keeps no reference to the section.
        view = section if isinstance(section, bytes) else memoryview(section).cast("B")
        buffers = _cbatch.decode_buffers(view, batch.base_offset, batch.base_timestamp, log_append_time,
                                         batch.record_count)
    return ColumnBuffers(*buffers) if buffers is not None else _decode_python(bytes(section), batch)


def buffers_in_range(buffer, start: int, end: int | None = None,
                     check_crc: bool = True) -> Iterator[tuple[RecordBatch, ColumnBuffers | None, int, int]]:
    """`batch.batches_in_range` in Arrow's layout: `(batch, buffers, first, last)`, the records of `[start,
    end)` being rows `[first, last)` of `buffers` (a fetch may begin inside a batch); `buffers` None means
    "move past this batch", as `columns` None there."""
    for batch, data in _batch.batches_overlapping(buffer, start, end, check_crc):
        if not data:
            yield batch, None, 0, 0
            continue
        buffers = decode_buffers(batch)
        offsets = buffers.offsets  # ascending within a batch
        first = bisect_left(offsets, start) if buffers.count and offsets[0] < start else 0
        last = bisect_left(offsets, end) if end is not None and buffers.count and offsets[-1] >= end else buffers.count
        yield batch, buffers, first, last


def _decode_python(section: bytes, batch: RecordBatch) -> ColumnBuffers:
    columns = _batch.PYTHON_CODEC.decode_columns(section, batch)
    return ColumnBuffers(
        len(columns.offsets), array("q", columns.offsets), array("q", columns.timestamps),
        *binary_layout(columns.keys), *binary_layout(columns.values), any(columns.headers),
    )


def binary_layout(items: list) -> tuple[array, bytearray, bytearray | None, int]:
    """(ends, data, validity or None, null count) of a list of bytes-or-None."""
    present = [item is not None for item in items]
    data = bytearray(b"".join(compress(items, present)))
    ends = array("i", accumulate((len(item) if item is not None else 0 for item in items), initial=0))
    nulls = len(items) - sum(present)
    return ends, data, (_bitmap(present) if nulls else None), nulls


def _bitmap(bits: list[bool]) -> bytearray:
    """Arrow's validity bitmap: bit i of byte i // 8, least significant first."""
    out = bytearray((len(bits) + 7) // 8)
    for index, bit in enumerate(bits):
        if bit:
            out[index >> 3] |= 1 << (index & 7)
    return out
