"""One batch's records in Arrow's columnar layout: what a columnar reader (the Spark source) builds its arrays
from with no Python object per record.

Rule 1: `decode_buffers(batch)` gives the offsets and timestamps as int64 arrays, and the keys and the values
        each as Arrow's variable-size binary layout: one contiguous data buffer, `count + 1` int32 ends, and a
        validity bitmap (bit i set: record i is not null; least significant bit first) or None when no record
        is null. `has_headers` says whether any record has headers; the headers themselves are read, when
        wanted, by `columns()` (they are rare, and their list layout is not worth a second decoder).
Rule 2: the buffers are native-endian `array`s and `bytearray`s; Arrow's layout is little-endian, as is every
        platform pyspark runs on.
Rule 3: the compiled twin (`_cbuffers.decode_buffers`) runs when the compiled codec is active (`batch.CODEC`),
        with its byte loop outside the interpreter lock; it gives the same buffers and defers every input it
        does not take to `_decode_python` here, built on the record decoder, which decides (malformed bytes
        raise CorruptRecordError, as `columns()` does).
Rule 4: a `ColumnSink` takes many batches one after another into the same buffers (compiled codec,
        uncompressed batch: `_cbuffers.decode_into`, each key and value copied once, straight from the fetched
        buffer to its place in the emitted Arrow array), so a reader emitting thousands of rows at a time
        concatenates nothing. A batch the sink cannot take (the pure-Python codec, a compressed batch, bytes
        the compiled loop defers) it refuses, writing nothing, and the caller decodes it with
        `decode_buffers`. Its buffers are allocated uninitialised (numpy.empty: untouched pages cost no
        memory), validity is one byte per row until `take()` packs it into Arrow's bitmap, and `take()`
        hands the buffers over and starts new ones, so arrays built over them are never written again.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from itertools import accumulate
from typing import Iterator, NamedTuple

import numpy as np

from sparklog.records import batch as _batch
from sparklog.records import implementation as _implementation
from sparklog.records.batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, RecordBatch
from sparklog.records import BytesLike

_KERNEL = _implementation.RecordKernel("sparklog.records._cbuffers", "Arrow decoder", ("decode_buffers", "decode_into"))


class ColumnBuffers(NamedTuple):
    """One batch's records as Arrow buffers (Rule 1)."""

    count: int  # type: ignore[assignment]  # shadows tuple.count: the field is Arrow's row count
    offsets: array[int]  # "q"
    timestamps: array[int]  # "q"
    key_ends: array[int]  # "i": count + 1 ends into key_data, starting with 0
    key_data: bytearray
    key_validity: bytearray | None
    key_nulls: int
    value_ends: array[int]  # "i"
    value_data: bytearray
    value_validity: bytearray | None
    value_nulls: int
    has_headers: bool


def decode_buffers(batch: RecordBatch) -> ColumnBuffers:
    """Rule 1 for a data batch (a control batch's records decode too: the caller skips those)."""
    codec = batch.attributes & COMPRESSION_MASK
    section = batch._decompress(codec, batch.raw[HEADER_SIZE:]) if codec else batch.raw[HEADER_SIZE:]
    buffers = None
    kernel = _KERNEL.active
    if kernel is not None:
        log_append_time = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
        # An uncompressed section is read in place, in the fetched buffer: the compiled decoder copies
        # each key and value once, into the Arrow buffers, and keeps no reference to the section.
        view = section if isinstance(section, bytes) else memoryview(section).cast("B")
        buffers = kernel.decode_buffers(view, batch.base_offset, batch.base_timestamp, log_append_time,
                                         batch.record_count)
    return ColumnBuffers(*buffers) if buffers is not None else _decode_python(bytes(section), batch)


def buffers_in_range(buffer: BytesLike, start: int, end: int | None = None,
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


def binary_layout(items: list[bytes | None]) -> tuple[array[int], bytearray, bytearray | None, int]:
    """(ends, data, validity or None, null count) of a list of bytes-or-None."""
    present = [item is not None for item in items]
    data = bytearray(b"".join([item for item in items if item is not None]))
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


SINK_ROWS = 1 << 17  # a ColumnSink's row capacity: the Spark source's 65,536-row Arrow batches plus a chunk
SINK_BYTES = 1 << 26  # its key and its value capacity each (64 MiB, reserved, not touched until written)


class SinkColumns(NamedTuple):
    """What a ColumnSink took (Rule 4), as Arrow buffers: ColumnBuffers' fields, sized to `count`."""

    count: int  # type: ignore[assignment]  # shadows tuple.count: the field is Arrow's row count
    offsets: np.ndarray  # int64
    timestamps: np.ndarray  # int64
    key_ends: np.ndarray  # int32, count + 1
    key_data: np.ndarray  # uint8
    key_validity: np.ndarray | None  # Arrow's bitmap, None when no key is null
    key_nulls: int
    value_ends: np.ndarray
    value_data: np.ndarray
    value_validity: np.ndarray | None
    value_nulls: int


class ColumnSink:
    """Growing Arrow buffers that many batches are decoded into, one after another (Rule 4)."""

    def __init__(self, rows: int = SINK_ROWS, data_bytes: int = SINK_BYTES) -> None:
        self._rows_capacity, self._bytes_capacity = rows, data_bytes
        self._allocate(rows, data_bytes)

    def _allocate(self, rows: int, data_bytes: int) -> None:
        self.rows = 0
        self.offsets, self.timestamps = np.empty(rows, np.int64), np.empty(rows, np.int64)
        self.key_ends, self.value_ends = np.empty(rows + 1, np.int32), np.empty(rows + 1, np.int32)
        self.key_ends[0] = self.value_ends[0] = 0
        self.key_valid, self.value_valid = np.empty(rows, np.uint8), np.empty(rows, np.uint8)
        self.key_data, self.value_data = np.empty(data_bytes, np.uint8), np.empty(data_bytes, np.uint8)

    def __len__(self) -> int:
        return self.rows

    @staticmethod
    def accepts(batch: RecordBatch) -> bool:
        """Whether the sink decodes batches like this one (Rule 4): compiled codec, not compressed."""
        return _KERNEL.active is not None and not batch.attributes & COMPRESSION_MASK

    def fits(self, batch: RecordBatch) -> bool:
        """Room for every record of `batch` (at most its section's bytes of keys, and of values)."""
        size = len(batch.raw) - HEADER_SIZE
        return (self.rows + batch.record_count < len(self.offsets)
                and int(self.key_ends[self.rows]) + size <= len(self.key_data)
                and int(self.value_ends[self.rows]) + size <= len(self.value_data))

    def room_for(self, batch: RecordBatch) -> bool:
        """Whether an empty sink could take `batch`; a sink without room for it is taken (`take()`) first."""
        return batch.record_count < self._rows_capacity and len(batch.raw) - HEADER_SIZE <= self._bytes_capacity

    def append(self, batch: RecordBatch, start: int, end: int | None) -> tuple[int, int, bool] | None:
        """The records of offsets `[start, end)` of `batch` appended: `(index of the first one in the batch,
        how many, whether any has headers)`; None when the sink does not take this batch (Rule 4: the
        caller decodes it), having written nothing. The caller checks `fits(batch)` first."""
        kernel = _KERNEL.active
        if kernel is None or not self.accepts(batch):
            return None
        log_append_time = batch.max_timestamp if batch.attributes & TIMESTAMP_TYPE_MASK else None
        section = memoryview(batch.raw).cast("B")[HEADER_SIZE:]
        taken: tuple[int, int, bool] | None = kernel.decode_into(section, batch.base_offset, batch.base_timestamp, log_append_time,
                                    batch.record_count, start, _NO_END if end is None else end, self.rows,
                                    self.offsets, self.timestamps, self.key_ends, self.key_data, self.key_valid,
                                    self.value_ends, self.value_data, self.value_valid)
        if taken is not None:
            self.rows += taken[1]
        return taken

    def take(self) -> SinkColumns:
        """Everything appended, as Arrow buffers; the sink starts over with new buffers (Rule 4)."""
        n = self.rows
        key_end, value_end = int(self.key_ends[n]), int(self.value_ends[n])
        columns = SinkColumns(n, self.offsets[:n], self.timestamps[:n], self.key_ends[:n + 1],
                              self.key_data[:key_end], *_validity(self.key_valid[:n]),
                              self.value_ends[:n + 1], self.value_data[:value_end], *_validity(self.value_valid[:n]))
        self._allocate(self._rows_capacity, self._bytes_capacity)
        return columns


_NO_END = (1 << 63) - 1


def _validity(valid: np.ndarray) -> tuple[np.ndarray | None, int]:
    """One byte per row (1: present) as Arrow's bitmap and null count; no bitmap when nothing is null."""
    nulls = len(valid) - int(np.count_nonzero(valid))
    return (np.packbits(valid, bitorder="little") if nulls else None), nulls
