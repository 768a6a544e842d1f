"""Records to Arrow: the column builder behind `read()`, and the schema Spark's Kafka source declares.

Rule 1: the Arrow schema equals what Spark derives from the Spark schema (`to_arrow_schema(schema,
timezone="UTC")`) field for field — binary key/value, string topic, int32 partition, int64 offset,
timestamp[us, UTC], int32 timestampType, optional list<struct<key: string, value: binary>> headers — or
Spark refuses the batch.
Rule 2: records are appended a record batch at a time, as Arrow arrays made from the decoded batch's
buffers (no Python object per record), and concatenated once per emitted RecordBatch; no per-row tuples.
Rule 3: a read whose user-supplied schema selects some of these columns (source.py `selected_columns`) gets
exactly those, in the schema's order, and the others are never built: pyspark gives Python sources no
column pruning, so this is how a `count()` avoids building and shipping keys and values.
Rule 4: per emitted RecordBatch, not per record: the milliseconds of the timestamps become microseconds in one
numpy multiply over all of them, the constant columns (topic, partition, a batch's timestamp type) are
repeated by Arrow, and batches without headers add empty lists to `headers` with no Python loop. No `pyarrow.compute`: a read worker does not import it (a quarter second, once per worker).
Rule 5: a whole record batch read by the Spark source (`append_batch`) is decoded straight into the builder's
`ColumnSink` (records/buffers.py Rule 4), so the rows of many batches are already one Arrow array each and
`build()` concatenates nothing; a batch the sink refuses is decoded alone and joins the chunks, in order.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from sparklog.records.buffers import ColumnSink, decode_buffers

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
ARROW_FIELDS = [
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
]
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))  # Spark names the list item "element"
HEADERS_FIELD = pa.field("headers", HEADERS_TYPE)

SPARK_HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def spark_schema(include_headers: bool = False) -> StructType:
    """Spark's Kafka source schema (KafkaRecordToRowConverter), with `headers` when asked for."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", SPARK_HEADERS_TYPE))
    return StructType(fields)


def arrow_schema(include_headers: bool = False) -> pa.Schema:
    return pa.schema(ARROW_FIELDS + ([HEADERS_FIELD] if include_headers else []))


class ColumnBuilder:
    """Accumulates the records of one topic-partition, then emits `pyarrow.RecordBatch`es.

    Each appended record batch becomes Arrow arrays at once (a chunk); `build()` concatenates the chunks.
    `append_buffers` takes a batch decoded straight into Arrow's layout (records/buffers.py) and makes its
    arrays with `pa.Array.from_buffers`, no Python object per record; `append` takes parallel lists (the
    record decoder's `columns()`) and gives the same arrays. The timestamp type is per batch in Kafka's
    format, so it is one int for all its records.
    """

    def __init__(self, topic: str, partition: int, include_headers: bool = False,
                 columns: Sequence[str] | None = None, new_sink: Callable[[], ColumnSink] = ColumnSink) -> None:
        self.topic = topic
        self._new_sink = new_sink
        self.partition = partition
        self.include_headers = include_headers
        self.columns = tuple(columns) if columns is not None else None  # Rule 3
        self._wanted = tuple(self.columns is None or name in self.columns for name in _CHUNK_FIELDS)
        self._reset()

    def _reset(self) -> None:
        self._sink: ColumnSink | None = None  # rows decoded in place (Rule 5), after every chunk's
        self.chunks: list[tuple] = []  # per appended batch: key, value, offset, timestamp (None: not wanted)
        self.timestamp_types: list[tuple[int, int]] = []  # (count, type) runs
        self.headers: list = []  # per appended batch: its records' header lists, or its row count if it has none
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    @property
    def wants_headers(self) -> bool:
        return self.include_headers and (self.columns is None or "headers" in self.columns)

    def append(
        self,
        offsets: Sequence[int],
        timestamps: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Sequence[tuple[str | bytes, bytes | None]]] | None,
        timestamp_type: int,
    ) -> None:
        arrays = (pa.array(keys, pa.binary()), pa.array(values, pa.binary()), pa.array(offsets, pa.int64()),
                  np.array(timestamps, np.int64))
        self._add(arrays, len(offsets), timestamp_type, headers)

    def append_buffers(self, buffers, first: int, last: int, timestamp_type: int, headers=None) -> None:
        """Records `[first, last)` of one batch's `ColumnBuffers`; `headers` are the batch's per-record
        headers (all of them, as `columns()` gives them) when it has any and they are wanted."""
        arrays = _chunk_arrays(buffers, *self._wanted)  # only the columns asked for (Rule 3)
        if first or last < buffers.count:
            arrays = tuple(None if array is None else array[first:last] for array in arrays)
            headers = None if headers is None else headers[first:last]
        self._add(arrays, last - first, timestamp_type, headers)

    def append_batch(self, batch, start: int, end: int | None) -> None:
        """The records of offsets `[start, end)` of one data batch (Rule 5): into the sink when it takes the
        batch, else decoded alone (`decode_buffers`) and appended as a chunk after the sink's rows."""
        if ColumnSink.accepts(batch):
            if self._sink is None:
                self._sink = self._new_sink()
            if not self._sink.fits(batch) and self._sink.room_for(batch):
                self._flush_sink()  # a full sink becomes a chunk; the next rows start new buffers
            taken = self._sink.append(batch, start, end) if self._sink.fits(batch) else None
            if taken is not None:
                first, count, has_headers = taken
                headers = batch.columns().headers[first:first + count] if has_headers and self.wants_headers \
                    else None
                self._count(count, batch.timestamp_type, headers)
                return
        buffers = decode_buffers(batch)
        offsets, n = buffers.offsets, buffers.count
        first = bisect_left(offsets, start) if n and offsets[0] < start else 0
        last = bisect_left(offsets, end) if end is not None and n and offsets[-1] >= end else n
        if last > first:
            headers = batch.columns().headers if self.wants_headers and buffers.has_headers else None
            self.append_buffers(buffers, first, last, batch.timestamp_type, headers)

    def _flush_sink(self) -> None:
        """The sink's rows become a chunk (Rule 5), so that chunks appended after them follow them."""
        if self._sink is not None and len(self._sink):
            taken, (key, value, offset, timestamp) = self._sink.take(), self._wanted
            self.chunks.append(_chunk_arrays(taken, key, value, offset, timestamp))

    def _add(self, arrays: tuple, count: int, timestamp_type: int, headers) -> None:
        self._flush_sink()
        self.chunks.append(arrays)
        self._count(count, timestamp_type, headers)

    def _count(self, count: int, timestamp_type: int, headers) -> None:
        self._rows += count
        self.timestamp_types.append((count, timestamp_type))
        if self.wants_headers:
            self.headers.append(headers if headers is not None else count)

    def build(self) -> pa.RecordBatch:
        """The records appended so far as one RecordBatch; the builder is then empty again."""
        self._flush_sink()
        schema = arrow_schema(self.include_headers)
        names = self.columns if self.columns is not None else schema.names
        columns = [self._column(name) for name in names]
        batch = pa.RecordBatch.from_arrays(columns, schema=pa.schema([schema.field(name) for name in names]))
        self._reset()
        return batch

    def _column(self, name: str) -> pa.Array:
        """One output column of the records appended so far, built only when it is asked for (Rule 3)."""
        n = self._rows
        if name == "timestamp":
            return _micros([chunk[3] for chunk in self.chunks], n)
        if name in _CHUNK_COLUMNS:
            index, kind = _CHUNK_COLUMNS[name]
            return _concat([chunk[index] for chunk in self.chunks], kind)
        if name == "topic":
            return pa.repeat(pa.scalar(self.topic, pa.string()), n)
        if name == "partition":
            return pa.repeat(pa.scalar(self.partition, pa.int32()), n)
        if name == "timestampType":
            return _runs_array(self.timestamp_types, n)
        return _headers_column(self.headers, n)


_CHUNK_FIELDS = ("key", "value", "offset", "timestamp")  # what a chunk holds, in this order
_CHUNK_COLUMNS = {"key": (0, pa.binary()), "value": (1, pa.binary()),
                  "offset": (2, pa.int64())}  # where each chunk holds them, and their Arrow type
MICROS_PER_MILLI = 1000


def _chunk_arrays(buffers, key: bool, value: bool, offset: bool, timestamp: bool) -> tuple:
    """A chunk (key, value, offset, timestamp) over ColumnBuffers or SinkColumns, None where not wanted."""
    n = buffers.count
    return (
        _binary(n, buffers.key_ends, buffers.key_data, buffers.key_validity, buffers.key_nulls) if key else None,
        _binary(n, buffers.value_ends, buffers.value_data, buffers.value_validity, buffers.value_nulls)
        if value else None,
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(buffers.offsets)]) if offset else None,
        np.frombuffer(buffers.timestamps, np.int64) if timestamp else None,
    )


def _binary(count: int, ends, data, validity, nulls: int) -> pa.Array:
    """A binary array over Arrow-layout buffers (records/buffers.py Rule 1), without copying them."""
    bitmap = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(pa.binary(), count, [bitmap, pa.py_buffer(ends), pa.py_buffer(data)], nulls)


def _micros(millis: list[np.ndarray], n: int) -> pa.Array:
    """Kafka's millisecond timestamps as Spark's microseconds in one multiply (Rule 4); a value past int64's
    range wraps (as `pyarrow.compute.multiply` did here before) instead of failing the read."""
    micros = np.concatenate(millis) if len(millis) > 1 else np.array(millis[0] if millis else (), np.int64)
    micros *= MICROS_PER_MILLI
    return pa.Array.from_buffers(TIMESTAMP_TYPE, n, [None, pa.py_buffer(micros)])


def _concat(arrays: list, kind: pa.DataType) -> pa.Array:
    if not arrays:
        return pa.array([], kind)
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _runs_array(runs: Sequence[tuple[int, int]], n: int) -> pa.Array:
    """int32 (count, value) runs as one array; a single value (the usual case) without a Python list."""
    if len({value for _, value in runs}) <= 1:
        return pa.repeat(pa.scalar(runs[0][1] if runs else 0, pa.int32()), n)
    result: list[int] = []
    for count, value in runs:
        result.extend([value] * count)
    return pa.array(result, pa.int32())


def _headers_column(chunks: list, n: int) -> pa.Array:
    """The headers column (Rule 4): when no appended batch has headers (the usual case), `n` empty lists
    from one buffer of zero offsets, with no Python loop over the records."""
    if all(isinstance(chunk, int) for chunk in chunks):
        empty = pa.StructArray.from_arrays([pa.array([], pa.string()), pa.array([], pa.binary())],
                                           fields=list(HEADER_TYPE))
        return pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)), empty, type=HEADERS_TYPE)
    return headers_array([record for chunk in chunks
                          for record in ([()] * chunk if isinstance(chunk, int) else chunk)])


def headers_array(headers: Sequence[Sequence[tuple[str | bytes, bytes | None]]]) -> pa.Array:
    """Per-record header lists -> list<struct<key: string, value: binary>>, built from flat columns."""
    offsets, keys, values = [0], [], []
    for record_headers in headers:
        for key, value in record_headers:
            keys.append(key.decode("utf-8", "replace") if isinstance(key, (bytes, bytearray, memoryview)) else key)
            values.append(None if value is None else bytes(value))
        offsets.append(len(keys))
    structs = pa.StructArray.from_arrays(
        [pa.array(keys, pa.string()), pa.array(values, pa.binary())], fields=list(HEADER_TYPE)
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), structs, type=HEADERS_TYPE)
