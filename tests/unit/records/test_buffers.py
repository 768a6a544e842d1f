"""decode_buffers() and buffers_in_range(): a batch in Arrow's layout, the same records as columns() and
batches_in_range() give, with the compiled codec and with the pure-Python one."""

from array import array
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records import buffers as buffers_module
from sparklog.records.batch import LOG_APPEND_TIME, CorruptRecordError, batches_in_range, build_batch, iter_batches
from sparklog.records.buffers import binary_layout, buffers_in_range, decode_buffers
from sparklog.records.compression import CODECS

record = st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40),
                   st.none() | st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                                        max_size=2),
                   st.integers(0, 2**40))


def one(data, check_crc=True):
    (batch,) = list(iter_batches(data, check_crc))
    return batch


def unlayout(ends, data, validity, count):
    """Arrow's binary layout back to a list of bytes-or-None, read bit by bit (the reference reader)."""
    valid = [validity is None or bool(validity[i >> 3] >> (i & 7) & 1) for i in range(count)]
    return [bytes(data[ends[i]:ends[i + 1]]) if valid[i] else None for i in range(count)]


def assert_same_records(buffers, columns):
    count = len(columns.offsets)
    assert buffers.count == count
    assert list(buffers.offsets) == columns.offsets and list(buffers.timestamps) == columns.timestamps
    assert unlayout(buffers.key_ends, buffers.key_data, buffers.key_validity, count) == columns.keys
    assert unlayout(buffers.value_ends, buffers.value_data, buffers.value_validity, count) == columns.values
    assert buffers.key_nulls == columns.keys.count(None) and buffers.value_nulls == columns.values.count(None)
    assert (buffers.key_validity is None) == (buffers.key_nulls == 0)
    assert buffers.has_headers == any(columns.headers)
    assert buffers.key_ends[-1] == len(buffers.key_data) and buffers.value_ends[-1] == len(buffers.value_data)


@pytest.mark.parametrize("compression", sorted(CODECS))
@settings(max_examples=25, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=12), log_append=st.booleans())
def test_buffers_hold_the_records_columns_decodes(codec, compression, records, log_append):
    batch = one(build_batch(records, compression=compression, base_offset=1000,
                            timestamp_type=LOG_APPEND_TIME if log_append else 0))
    assert_same_records(decode_buffers(batch), batch.columns())


@settings(max_examples=25, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=12))
def test_compiled_and_python_buffers_are_identical(records):
    from sparklog.records import _cbuffers

    batch = one(build_batch(records, base_offset=7))
    section = batch.raw[61:].tobytes()
    compiled = _cbuffers.decode_buffers(section, batch.base_offset, batch.base_timestamp, None, batch.record_count)
    assert buffers_module.ColumnBuffers(*compiled) == buffers_module._decode_python(section, batch)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.none() | st.binary(max_size=9), max_size=20))
def test_binary_layout(items):
    ends, data, validity, nulls = binary_layout(items)
    assert ends == array("i", accumulate((len(i or b"") for i in items), initial=0))
    assert unlayout(ends, data, validity, len(items)) == items and nulls == items.count(None)


def test_a_malformed_section_raises_as_columns_does(codec):
    data = bytearray(build_batch([(b"k", b"v%d" % i, None, 5) for i in range(4)]))
    data[61] = 0x7E  # the first record's length no longer where its fields end
    batch = one(bytes(data), check_crc=False)
    with pytest.raises(CorruptRecordError):
        batch.columns()
    with pytest.raises(CorruptRecordError):
        decode_buffers(batch)


def test_a_sink_refuses_a_malformed_section_and_counts_nothing_of_it(codec):
    """ColumnSink Rule 4: the compiled loop stops at the bad record having written the good ones before it;
    the sink counts none of them, and the caller's decode_buffers then raises as columns() does."""
    from sparklog.records.buffers import ColumnSink

    good = one(build_batch([(b"k", b"v%d" % i, None, 5) for i in range(4)]))
    data = bytearray(build_batch([(b"k", b"w%d" % i, None, 5) for i in range(4)], base_offset=4))
    data[-1] = 0x02  # the last record says it has a header it does not have: the first three decode first
    bad = one(bytes(data), check_crc=False)
    sink = ColumnSink(rows=64, data_bytes=4096)
    assert sink.append(good, 0, None) == ((0, 4, False) if ColumnSink.accepts(good) else None)
    rows = len(sink)
    assert sink.append(bad, 0, None) is None and len(sink) == rows
    if rows:
        assert sink.take().value_data.tobytes() == b"v0v1v2v3"


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4), start=st.integers(0, 30),
       length=st.integers(0, 30), control_at=st.none() | st.integers(0, 3))
def test_buffers_in_range_cut_as_batches_in_range(sizes, start, length, control_at):
    parts, offset = [], 0
    for index, size in enumerate(sizes):
        parts.append(build_batch([(b"k%d" % i, b"v%d" % i, None, i) for i in range(size)], base_offset=offset,
                                 is_control=index == control_at))
        offset += size
    data, end = b"".join(parts), start + length
    got = list(buffers_in_range(data, start, end))
    want = list(batches_in_range(data, start, end))
    assert [b.base_offset for b, *_ in got] == [b.base_offset for b, _ in want]
    for (_, buffers, first, last), (_, columns) in zip(got, want):
        assert (buffers is None) == (columns is None)
        if columns is not None:
            assert list(buffers.offsets[first:last]) == columns.offsets
            values = unlayout(buffers.value_ends, buffers.value_data, buffers.value_validity, buffers.count)
            assert values[first:last] == columns.values
