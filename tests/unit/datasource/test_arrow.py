"""Record -> Arrow conversion: schema equal to Spark's own, values equal to a row-by-row reference."""

from datetime import datetime, timezone

import pytest
from hypothesis import given, strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from sparklog.datasource.arrow import ColumnBuilder, arrow_schema, headers_array, spark_schema
from support.codecs import NAMES, switched


@pytest.mark.parametrize("headers", [False, True])
def test_schema_is_what_spark_expects(headers):
    assert arrow_schema(headers).equals(to_arrow_schema(spark_schema(headers), timezone="UTC"))
    assert spark_schema(headers).simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int" + (",headers:array<struct<key:string,value:binary>>>" if headers else ">"))


def reference_rows(topic, partition, batches, include_headers):
    rows = []
    for offsets, timestamps, keys, values, headers, ts_type in batches:
        for i, offset in enumerate(offsets):
            row = {"key": keys[i], "value": values[i], "topic": topic, "partition": partition, "offset": offset,
                   "timestamp": datetime.fromtimestamp(timestamps[i] / 1000, tz=timezone.utc),
                   "timestampType": ts_type}
            if include_headers:
                row["headers"] = [{"key": k, "value": v} for k, v in headers[i]]
            rows.append(row)
    return rows


blobs = st.one_of(st.none(), st.binary(max_size=20))
record = st.tuples(st.integers(0, 2**41), blobs, blobs, st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3))


@given(st.lists(st.tuples(st.lists(record, min_size=1, max_size=5), st.integers(0, 1)), max_size=4), st.booleans())
def test_columns_equal_reference(batches, include_headers):
    builder = ColumnBuilder("topic-1", 7, include_headers)
    flat, offset = [], 100
    for records, ts_type in batches:
        offsets = list(range(offset, offset + len(records)))
        offset += len(records)
        columns = (offsets, [r[0] for r in records], [r[1] for r in records], [r[2] for r in records],
                   [r[3] for r in records], ts_type)
        builder.append(*columns)
        flat.append(columns)
    batch = builder.build()
    assert batch.schema.equals(arrow_schema(include_headers))
    got = batch.to_pylist()
    want = reference_rows("topic-1", 7, flat, include_headers)
    for row in got:
        row["timestamp"] = row["timestamp"].astimezone(timezone.utc)
    assert got == want
    assert len(builder) == 0  # build() empties the builder


def test_header_keys_given_as_bytes_are_decoded():
    arr = headers_array([[(b"k\xff", b"v")], [], [("x", None)]])
    assert arr.to_pylist() == [[{"key": "k\ufffd", "value": b"v"}], [], [{"key": "x", "value": None}]]
    assert arr.type == arrow_schema(True).field("headers").type


def test_empty_build():
    batch = ColumnBuilder("t", 0).build()
    assert batch.num_rows == 0 and batch.schema.equals(arrow_schema(False))
    with_headers = ColumnBuilder("t", 0, include_headers=True).build()
    assert with_headers.num_rows == 0 and with_headers.schema.equals(arrow_schema(True))


def test_batches_without_headers_give_empty_lists_beside_batches_with_some():
    from sparklog.records.buffers import decode_buffers

    plain = record_batch_bytes(0, [(0, None, b"a", []), (1, None, b"b", [])], 0)
    with_headers = record_batch_bytes(2, [(2, None, b"c", [("h", b"1")])], 0)
    builder = ColumnBuilder("t", 0, include_headers=True)
    builder.append_buffers(decode_buffers(plain), 0, 2, 0)  # has_headers False: no per-record lists given
    assert builder.build().column("headers").to_pylist() == [[], []]
    builder.append_buffers(decode_buffers(plain), 1, 2, 0)
    builder.append_buffers(decode_buffers(with_headers), 0, 1, 0, with_headers.columns().headers)
    assert builder.build().column("headers").to_pylist() == [[], [{"key": "h", "value": b"1"}]]


def record_batch_bytes(base, records, ts_type):
    from sparklog.records.batch import build_batch, iter_batches

    (batch,) = iter_batches(build_batch([(r[1], r[2], r[3], r[0]) for r in records], base_offset=base,
                                        timestamp_type=ts_type))
    return batch


@pytest.mark.parametrize("codec_name", NAMES)
@given(st.lists(st.tuples(st.lists(record, min_size=1, max_size=5), st.integers(0, 1)), min_size=1, max_size=4),
       st.booleans(), st.integers(0, 4), st.integers(0, 4))
def test_buffers_build_the_batch_lists_build(codec_name, batches, include_headers, cut_first, cut_last):
    """append_buffers (records/buffers.py, with either codec) gives the very RecordBatch that append gives
    from columns(), cut or not."""
    with switched(codec_name):
        check_buffers_build_the_batch_lists_build(batches, include_headers, cut_first, cut_last)


def check_buffers_build_the_batch_lists_build(batches, include_headers, cut_first, cut_last):
    from sparklog.records.buffers import decode_buffers

    from_lists = ColumnBuilder("t", 2, include_headers)
    from_buffers = ColumnBuilder("t", 2, include_headers)
    base = 0
    for records, ts_type in batches:
        batch = record_batch_bytes(base, records, ts_type)
        base += len(records)
        columns = batch.columns()
        first, last = min(cut_first, len(records) - 1), max(len(records) - cut_last, min(cut_first, len(records) - 1) + 1)
        from_lists.append(*(c[first:last] for c in columns), batch.timestamp_type)
        buffers = decode_buffers(batch)
        from_buffers.append_buffers(buffers, first, last, batch.timestamp_type,
                                    columns.headers if buffers.has_headers else None)
    assert from_buffers.build().equals(from_lists.build())


@pytest.mark.parametrize("columns", [("offset",), ("value", "offset"), ("timestampType", "key", "headers", "topic")])
def test_selected_columns_only_in_their_order(columns):
    full, some = ColumnBuilder("t", 1, True), ColumnBuilder("t", 1, True, columns)
    for builder in (full, some):
        builder.append([5, 6], [10, 11], [b"k", None], [b"a", b"b"], [[("h", b"x")], ()], 1)
    got = some.build()
    assert got.schema.names == list(columns)
    assert got.equals(full.build().select(list(columns)))


cuts = st.tuples(st.integers(0, 30), st.integers(0, 30))


@pytest.mark.parametrize("codec_name", NAMES)
@given(st.lists(st.tuples(st.lists(record, min_size=1, max_size=6), st.integers(0, 1), st.sampled_from(["none", "lz4"]),
                          st.booleans()), min_size=1, max_size=5),
       st.booleans(), cuts, st.sampled_from([None, (6, 4096), (40, 10**6)]))
def test_append_batch_builds_the_batch_decode_buffers_builds(codec_name, batches, include_headers, cut, sink_size):
    """append_batch (Rule 5: records decoded into the sink, or a refused batch decoded alone; a sink too small
    for the rows taken first) gives the very RecordBatch that decode_buffers + append_buffers give, for the
    offsets [start, end) of a run of batches, with either codec, compressed batches and offset gaps too."""
    from functools import partial

    from sparklog.records.batch import batches_overlapping
    from sparklog.records.buffers import ColumnSink, buffers_in_range

    with switched(codec_name):
        raw, base = b"", 0
        for records, ts_type, compression, gap in batches:
            raw += record_batch_raw(base, records, ts_type, compression)
            base += len(records) + (3 if gap else 0)
        start, end = cut[0], max(cut[0], base - cut[1])
        want = ColumnBuilder("t", 2, include_headers)
        for batch, buffers, first, last in buffers_in_range(raw, start, end):
            if buffers is not None and last > first:
                want.append_buffers(buffers, first, last, batch.timestamp_type,
                                    batch.columns().headers if buffers.has_headers else None)
        new_sink = ColumnSink if sink_size is None else partial(ColumnSink, *sink_size)
        got = ColumnBuilder("t", 2, include_headers, new_sink=new_sink)
        for batch, data in batches_overlapping(raw, start, end):
            if data:
                got.append_batch(batch, start, end)
        assert len(got) == len(want)
        assert got.build().equals(want.build())


def record_batch_raw(base, records, ts_type, compression="none"):
    from sparklog.records.batch import build_batch

    return build_batch([(r[1], r[2], r[3], r[0]) for r in records], compression=compression, base_offset=base,
                       timestamp_type=ts_type)
