"""RecordBatch v2: build and decode, whole, with trailing bytes and byte by byte; CRC; kafka-python interop.

Every test runs against both codecs, the compiled one and the pure-Python one (the `codec` fixture).
"""

import struct
import time
from typing import NamedTuple

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from sparklog.records import batch as batch_module
from sparklog.records.compression import CODECS, SNAPPY
from sparklog.records.batch import (
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    CorruptRecordError,
    Record,
    iter_batches,
    iter_records,
    set_base_offset,
    set_partition_leader_epoch,
    validate_batch,
)

pytestmark = pytest.mark.usefixtures("codec")


def build_batch(*args, **kwargs):
    """The build_batch of the codec under test (`batch.use` rebinds the module's name)."""
    return batch_module.build_batch(*args, **kwargs)


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# Sizes on either side of 1-, 2- and 3-byte varints and of the encoder's 2-byte table.
BOUNDARY_SIZES = [0, 1, 62, 63, 64, 65, 8190, 8191, 8192, 8193, 70_000]

payloads = st.one_of(
    st.none(),
    st.binary(max_size=200),
    st.sampled_from(BOUNDARY_SIZES).map(lambda n: b"\xab" * n),
)
header_lists = st.one_of(
    st.none(),
    st.just([]),
    st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
)
# Any two of these differ by less than 2**63, so every timestampDelta fits a varlong.
timestamps = st.one_of(
    st.integers(min_value=-(1 << 62) + 1, max_value=(1 << 62) - 1),
    st.sampled_from([0, -1, 1, 63, -64, 64, 8191, -8192, 8192, (1 << 62) - 1, -(1 << 62) + 1]),
)
record_tuples = st.tuples(payloads, payloads, header_lists, timestamps)
codecs = st.sampled_from(sorted(CODECS))
small_records = st.tuples(st.none() | st.binary(max_size=20), st.binary(max_size=30), header_lists, timestamps)


def expected(records, base_offset=0):
    """What a consumer must read back from build_batch(records, base_offset=...)."""
    return [
        Record(base_offset + i, ts, key, value, tuple(headers or ()))
        for i, (key, value, headers, ts) in enumerate(records)
    ]


def reframe(batch: bytes, attributes: int, section: bytes) -> bytes:
    """The same batch header over another records section, with attributes and CRC recomputed."""
    head = bytearray(batch[:HEADER_SIZE])
    struct.pack_into(">i", head, 8, len(head) - 12 + len(section))
    struct.pack_into(">h", head, ATTRIBUTES_OFFSET, attributes)
    struct.pack_into(">I", head, CRC_OFFSET, crc32c(section, crc32c(head[ATTRIBUTES_OFFSET:])))
    return bytes(head) + section


# -- varints ----------------------------------------------------------------------------------------------


@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varint_round_trip_over_int64(value):
    encoded = batch_module.encode_varint(value)
    assert batch_module.decode_varint(encoded + b"\x7f", 0) == (value, len(encoded))
    assert len(encoded) <= 10


def test_varint_known_encodings_and_limits():
    encoded = [batch_module.encode_varint(v) for v in (0, -1, 1, -64, 63, 64)]
    assert encoded == [b"\x00", b"\x01", b"\x02", b"\x7f", b"\x7e", b"\x80\x01"]
    assert batch_module.encode_varint(INT64_MIN) == b"\xff" * 9 + b"\x01"
    with pytest.raises(ValueError):
        batch_module.encode_varint(INT64_MAX + 1)
    with pytest.raises(CorruptRecordError):
        batch_module.decode_varint(b"\xff" * 11, 0)


# -- round trips ------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_tuples, min_size=1, max_size=8), compression=codecs, base_offset=st.integers(0, 1 << 62))
def test_round_trip_every_compression(records, compression, base_offset):
    batch = build_batch(records, compression=compression, base_offset=base_offset)
    header = validate_batch(batch)
    assert header.compression == CODECS[compression]
    assert header.record_count == len(records) and header.last_offset_delta == len(records) - 1
    assert header.base_timestamp == records[0][3]
    assert header.max_timestamp == max(r[3] for r in records)
    assert list(iter_records(batch)) == expected(records, base_offset)


@settings(max_examples=30, deadline=None)
@given(
    batches=st.lists(st.lists(record_tuples, min_size=1, max_size=4), min_size=1, max_size=3),
    compression=codecs,
    trailing=st.binary(max_size=80),
)
def test_concatenated_batches_with_trailing_partial_bytes(batches, compression, trailing):
    built, offset = [], 0
    for records in batches:
        built.append(build_batch(records, compression=compression, base_offset=offset))
        offset += len(records)
    partial = (built[0] + trailing)[: HEADER_SIZE - 1]  # too short for a header
    longer = built[0][: len(built[0]) - 1]  # a header whose batchLength runs past the end
    for tail in (b"", partial, longer):
        buffer = bytearray(b"".join(built) + tail)
        decoded = list(iter_batches(buffer))
        assert [bytes(b.raw) for b in decoded] == built
        assert [b.next_offset for b in decoded] == [sum(len(r) for r in batches[: i + 1]) for i in range(len(batches))]
        everything = [r for i, records in enumerate(batches) for r in expected(records, sum(map(len, batches[:i])))]
        assert list(iter_records(memoryview(buffer))) == everything


@settings(max_examples=10, deadline=None)
@given(batches=st.lists(st.lists(small_records, min_size=1, max_size=3), min_size=1, max_size=3), compression=codecs)
def test_every_prefix_decodes_to_the_whole_batches_it_holds(batches, compression):
    built = [build_batch(records, compression=compression) for records in batches]
    buffer = b"".join(built)
    ends = [sum(map(len, built[: i + 1])) for i in range(len(built))]
    for cut in range(len(buffer) + 1):
        whole = sum(1 for end in ends if end <= cut)
        decoded = list(iter_batches(buffer[:cut]))
        assert [bytes(b.raw) for b in decoded] == built[:whole]
        assert len(list(iter_records(buffer[:cut]))) == sum(len(r) for r in batches[:whole])


def test_record_objects_timestamps_now_and_header_fields():
    before = time.time_ns() // 1_000_000
    batch = build_batch(
        [Record(99, None, b"k", b"v", (("a", b"1"), ("b", None))), (None, None, None, None)],
        compression="lz4",
        base_offset=10,
        producer_id=7,
        producer_epoch=3,
        base_sequence=40,
        partition_leader_epoch=5,
        is_transactional=True,
    )
    (decoded,) = iter_batches(batch)
    assert (decoded.producer_id, decoded.producer_epoch, decoded.base_sequence) == (7, 3, 40)
    assert decoded.partition_leader_epoch == 5 and decoded.is_transactional and not decoded.is_control
    assert decoded.timestamp_type == 0 and decoded.size == len(batch) and decoded.next_offset == 12
    first, second = decoded.records()
    assert first[:1] + first[2:] == (10, b"k", b"v", (("a", b"1"), ("b", None)))
    assert before <= first.timestamp == second.timestamp <= time.time_ns() // 1_000_000
    assert second == Record(11, first.timestamp, None, None, ())


def test_log_append_time_reads_max_timestamp_for_every_record():
    records = [(None, b"a", None, 5), (None, b"b", None, 9), (None, b"c", None, 7)]
    batch = build_batch(records, timestamp_type=LOG_APPEND_TIME)
    (decoded,) = iter_batches(batch)
    assert decoded.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in decoded.records()] == [9, 9, 9]


def test_control_batches_are_yielded_as_batches_but_their_records_skipped():
    commit = (struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), None, 5)  # a COMMIT marker's key and value
    producer = {"producer_id": 3, "producer_epoch": 0, "is_transactional": True}
    marker = build_batch([commit], base_offset=1, is_control=True, **producer)
    data = build_batch([(None, b"d", None, 4)], **producer)
    buffer = data + marker
    assert [b.is_control for b in iter_batches(buffer)] == [False, True]
    assert list(iter_records(buffer)) == [Record(0, 4, None, b"d", ())]


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError):
        build_batch([(None, b"v", None, 0)], compression="brotli")
    with pytest.raises(ValueError):
        build_batch([(None, b"v", None, 0)], timestamp_type=2)
    with pytest.raises(ValueError):
        build_batch([(None, b"v", None, INT64_MIN), (None, b"v", None, INT64_MAX)])
    with pytest.raises(TypeError):
        build_batch([(None, b"v", [(b"bytes-key", b"x")], 0)])


# -- CRC and corruption -----------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_every_flipped_byte_in_the_crc_range_raises(compression):
    batch = build_batch([(b"key", b"value" * 3, [("h", b"v")], 1000), (None, b"x", None, 999)], compression=compression)
    for position in range(ATTRIBUTES_OFFSET, len(batch)):
        damaged = bytearray(batch)
        damaged[position] ^= 0x40
        with pytest.raises(CorruptRecordError, match="CRC"):
            list(iter_batches(damaged))
        with pytest.raises(CorruptRecordError):
            validate_batch(damaged)


def test_flipped_crc_or_magic_raises():
    batch = build_batch([(None, b"v", None, 0)])
    for position in range(CRC_OFFSET, ATTRIBUTES_OFFSET):
        damaged = bytearray(batch)
        damaged[position] ^= 0x01
        with pytest.raises(CorruptRecordError, match="CRC"):
            list(iter_batches(damaged))
    damaged = bytearray(batch)
    damaged[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        list(iter_batches(damaged))


def test_base_offset_and_leader_epoch_are_outside_the_crc():
    batch = bytearray(build_batch([(None, b"a", None, 1), (None, b"b", None, 2)]))
    set_base_offset(batch, 1_000_000)
    set_partition_leader_epoch(batch, 42)
    header = validate_batch(batch)
    assert (header.base_offset, header.partition_leader_epoch) == (1_000_000, 42)
    assert [r.offset for r in iter_records(batch)] == [1_000_000, 1_000_001]


def test_legacy_message_sets_raise_a_clear_error():
    builder = MemoryRecordsBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(timestamp=1, key=None, value=b"old")
    builder.close()
    with pytest.raises(CorruptRecordError, match="magic 1"):
        list(iter_batches(builder.buffer()))


def test_check_crc_false_skips_the_checksum():
    damaged = bytearray(build_batch([(None, b"value", None, 0)]))
    damaged[-3] ^= 0x20  # inside the value
    (record,) = iter_records(damaged, check_crc=False)
    assert record.value != b"value" and len(record.value) == 5


@pytest.mark.parametrize(
    "section, match",
    [
        (b"", "ends inside"),  # recordCount 1, no bytes
        (b"\x02\x00", "ends inside"),  # length 1 holds only the attributes
        (b"\x0c\x00\x00\x00\x01\x04ab\x00", "holds"),  # length 6, the fields take 8
        (b"\x10\x00\x00\x00\x01\x02a\x00\x00", "holds"),  # length 8, the fields take 7
        (b"\x0c\x00\x00\x00\x01\x01\x00" + b"\x00" * 5, "bytes after"),  # a record, then 5 stray bytes
        (b"\x7f\x00", "overruns"),  # negative record length
        (b"\x0e\x00\x00\x00\x01\x01\x03\x01\x01", "negative header count"),
        (b"\x0e\x00\x00\x00\x01\x01\x02\x01\x01", "null header key"),
        (b"\x0c\x00" + b"\xff" * 10 + b"\x01", "varint longer"),
    ],
)
def test_malformed_records_raise(section, match):
    good = build_batch([(None, b"", None, 0)])
    with pytest.raises(CorruptRecordError, match=match):
        list(iter_records(reframe(good, 0, section)))


@pytest.mark.parametrize("count", [(1 << 31) - 1, 10_000, -1])
def test_a_record_count_the_section_cannot_hold_raises_before_allocating(count):
    """recordCount is inside the CRC, so a valid CRC proves nothing about it: 2^31-1 records claimed by a
    one-record section must be refused, not answered with two 16 GiB lists."""
    good = bytearray(build_batch([(None, b"v", None, 0)]))
    struct.pack_into(">i", good, HEADER_SIZE - 4, count)
    forged = reframe(bytes(good), 0, bytes(good[HEADER_SIZE:]))
    with pytest.raises(CorruptRecordError):
        list(iter_records(forged))


def test_corrupt_compressed_section_raises():
    good = build_batch([(None, b"v" * 100, None, 0)], compression="zstd")
    with pytest.raises(CorruptRecordError, match="zstd"):
        list(iter_records(reframe(good, 4, bytes(good[HEADER_SIZE:-4]))))


# -- snappy framings and kafka-python interop -------------------------------------------------------------


def test_raw_snappy_batches_as_librdkafka_writes_them():
    records = [(b"k%d" % i, b"librdkafka " * 20, None, 1_700_000_000_000 + i) for i in range(30)]
    plain = build_batch(records)
    raw = reframe(plain, SNAPPY, bytes(cramjam.snappy.compress_raw(plain[HEADER_SIZE:])))
    assert validate_batch(raw).compression == SNAPPY
    assert list(iter_records(raw)) == expected(records)


def kafka_python_batch(records, codec: int, offsets=None) -> bytearray:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, (key, value, headers, ts) in enumerate(records):
        builder.append(offsets[i] if offsets else i, ts, key, value, headers or [])
    return builder.build()


kafka_records = st.lists(
    st.tuples(st.none() | st.binary(max_size=50), payloads, header_lists, st.integers(0, (1 << 62))),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40, deadline=None)
@given(records=kafka_records, compression=codecs)
def test_kafka_python_batches_decode_identically_here(records, compression):
    batch = bytes(kafka_python_batch(records, CODECS[compression]))
    theirs = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in DefaultRecordBatch(batch)]
    assert [tuple(r) for r in iter_records(batch)] == theirs == [tuple(r) for r in expected(records)]


@settings(max_examples=40, deadline=None)
@given(records=kafka_records, compression=codecs, base_offset=st.integers(0, 1 << 40))
def test_our_batches_decode_identically_in_kafka_python(records, compression, base_offset):
    batch = build_batch(records, compression=compression, base_offset=base_offset)
    memory = MemoryRecords(batch)
    theirs = memory.next_batch()
    assert theirs.validate_crc()
    assert theirs.compression_type == CODECS[compression] and memory.next_batch() is None
    decoded = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert decoded == [tuple(r) for r in expected(records, base_offset)]


@pytest.mark.parametrize("compression", sorted(CODECS))
def test_compressed_interop_both_ways_with_compressible_data(compression):
    """kafka-python sends uncompressed when compression does not pay; these values always compress."""
    value = b"compressible value " * 30
    records = [(b"k%d" % i, value, [("trace", b"%d" % i)], 1_700_000_000_000 + i) for i in range(50)]
    theirs = bytes(kafka_python_batch(records, CODECS[compression]))
    assert validate_batch(theirs).compression == CODECS[compression]
    assert list(iter_records(theirs)) == expected(records)
    ours = MemoryRecords(build_batch(records, compression=compression)).next_batch()
    assert ours.validate_crc() and ours.compression_type == CODECS[compression]
    theirs = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in ours]
    assert theirs == [tuple(r) for r in expected(records)]


def test_huge_and_sparse_offset_deltas_and_negative_timestamp_deltas_from_kafka_python():
    """Compacted batches keep gaps; deltas and timestamps near the int32/int64 limits."""
    records = [(None, b"a", None, 1 << 62), (b"k", None, None, 0), (None, b"c", [("h", None)], (1 << 62) - 5)]
    offsets = [0, 70_000, (1 << 31) - 1]
    batch = bytes(kafka_python_batch(records, 0, offsets))
    (decoded,) = iter_batches(batch)
    assert decoded.last_offset_delta == (1 << 31) - 1 and decoded.next_offset == 1 << 31
    assert [(r.offset, r.timestamp) for r in decoded.records()] == list(zip(offsets, [r[3] for r in records]))


def test_header_fields_out_of_range_raise_value_error():
    with pytest.raises(ValueError, match="out of range"):
        build_batch([(None, b"v", None, INT64_MAX + 1)])
    with pytest.raises(ValueError, match="out of range"):
        build_batch([(None, b"v", None, 0)], producer_epoch=1 << 15)


# -- columns(): the bulk decoding the Spark data source uses -----------------------------------------------


def transposed(records):
    """What `RecordBatch.columns()` must return for these decoded records."""
    return tuple(list(column) for column in zip(*records)) if records else ([], [], [], [], [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(record_tuples, min_size=1, max_size=8), compression=codecs, base_offset=st.integers(0, 1 << 62))
def test_columns_equal_the_records_transposed(records, compression, base_offset):
    (batch,) = iter_batches(build_batch(records, compression=compression, base_offset=base_offset))
    assert tuple(batch.columns()) == transposed(expected(records, base_offset))


@pytest.mark.parametrize("count", [1, 63, 64, 65, 200, 8193])
def test_columns_with_two_and_three_byte_offset_and_timestamp_deltas(count):
    # Timestamp deltas step by 37 ms: 1-, 2- and (past 8191 ms) 3-byte varints, forwards and backwards.
    records = [(None if i % 3 else b"k%d" % i, b"v" * (i % 70), None, 1_000 + 37 * i * (-1) ** i) for i in range(count)]
    (batch,) = iter_batches(build_batch(records, base_offset=5))
    columns = batch.columns()
    assert tuple(columns) == transposed(list(batch.records())) == transposed(expected(records, 5))
    assert columns.offsets[-1] == 5 + count - 1


def test_columns_log_append_time_and_kafka_python_sparse_offsets():
    (batch,) = iter_batches(build_batch([(None, b"a", None, 5), (None, b"b", None, 9)], timestamp_type=LOG_APPEND_TIME))
    assert batch.columns().timestamps == [9, 9]
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta in (0, 70, 9_000, 1 << 20):  # compacted: offset deltas with gaps, 1 to 3 bytes
        builder.append(delta, timestamp=10 + delta, key=None, value=b"x", headers=[])
    (batch,) = iter_batches(bytes(builder.build()))
    assert batch.columns().offsets == [0, 70, 9_000, 1 << 20]
    assert tuple(batch.columns()) == transposed(list(batch.records()))


@pytest.mark.parametrize(
    "section, match",
    [
        (b"", "ends inside"),
        (b"\x02\x00", "ends inside"),
        (b"\x0c\x00\x00\x00\x01\x04ab\x00", "holds"),
        (b"\x10\x00\x00\x00\x01\x02a\x00\x00", "holds"),
        (b"\x0c\x00\x00\x00\x01\x01\x00" + b"\x00" * 5, "bytes after"),
        (b"\x7f\x00", "overruns"),
        (b"\x0e\x00\x00\x00\x01\x01\x03\x01\x01", "negative header count"),
        (b"\x0e\x00\x00\x00\x01\x01\x02\x01\x01", "null header key"),
        (b"\x0c\x00" + b"\xff" * 10 + b"\x01", "varint longer"),
    ],
)
@pytest.mark.parametrize("compression", [0, 4])  # uncompressed (a bytes copy) and zstd (decompressed bytes)
def test_malformed_records_raise_the_same_errors_in_columns(section, match, compression):
    from sparklog.records.compression import compress

    good = build_batch([(None, b"", None, 0)])
    (batch,) = iter_batches(reframe(good, compression, compress(compression, section) if compression else section))
    with pytest.raises(CorruptRecordError, match=match):
        batch.columns()


# -- batches_in_range: the one trimming rule of the consumer and the Spark fetcher -------------------------------

@settings(max_examples=80, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=6), gaps=st.lists(st.integers(0, 3), min_size=6,
       max_size=6), start=st.integers(0, 60), length=st.one_of(st.none(), st.integers(0, 60)))
def test_batches_in_range_yields_exactly_the_records_in_the_range(sizes, gaps, start, length):
    from sparklog.records.batch import batches_in_range, iter_records, set_base_offset

    data, base = b"", 0
    for size, gap in zip(sizes, gaps):
        base += gap  # compaction leaves offset gaps between batches
        raw = bytearray(build_batch([(None, b"%d" % (base + i), None, 1) for i in range(size)]))
        set_base_offset(raw, base)
        data += bytes(raw)
        base += size
    end = None if length is None else start + length
    got, position = [], start
    for batch, columns in batches_in_range(data, start, end):
        if columns is not None:
            got += columns.offsets
            assert columns.values == [b"%d" % o for o in columns.offsets]
        position = max(position, batch.next_offset) if end is None else min(max(position, batch.next_offset), end)
    expected = [r.offset for r in iter_records(data) if r.offset >= start and (end is None or r.offset < end)]
    assert got == expected
    last = max(r.offset for r in iter_records(data))
    if end is not None and end <= last:
        assert position == end  # a batch past the range ends it, even across a compaction gap
    elif expected:
        assert position == last + 1


class Consumed(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5), start=st.integers(0, 30), compression=codecs,
       control_after=st.integers(0, 5))
def test_tuples_in_range_gives_the_records_of_batches_in_range_as_tuples(sizes, start, compression, control_after):
    """The consumer's path: the same records as `batches_in_range` with no end, each a finished tuple of
    the class given, a control batch as None."""
    from sparklog.records.batch import batches_in_range, set_base_offset, tuples_in_range

    data, base = b"", 0
    for index, size in enumerate(sizes):
        records = [(b"k" if i % 2 else None, b"%d" % (base + i), [("h", b"x")] if i == 1 else None, 5 + i)
                   for i in range(size)]
        raw = bytearray(build_batch(records, compression, is_control=index == control_after))
        set_base_offset(raw, base)
        data += bytes(raw)
        base += size
    got = list(tuples_in_range(data, start, ("events", 3), Consumed))
    expected = list(batches_in_range(data, start))
    assert [b.base_offset for b, _ in got] == [b.base_offset for b, _ in expected]
    for (_, records), (_, columns) in zip(got, expected):
        if columns is None:
            assert records is None
            continue
        assert records == [Consumed("events", 3, *row) for row in zip(*columns)]
        assert all(type(r) is Consumed for r in records)


def flattened(pairs) -> tuple[list, str | None]:
    """Records and control batches (as their next offset) in order, then the error that ended it, if any."""
    out = []
    try:
        for batch, records in pairs:
            out += [("control", batch.next_offset)] if records is None else records
    except Exception as exc:  # noqa: BLE001 - the error is part of what is compared
        return out, f"{type(exc).__name__}: {exc}"
    return out, None


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sizes=st.lists(st.integers(0, 5), min_size=1, max_size=6), start=st.integers(0, 30),
       compressed=st.lists(st.booleans(), min_size=6, max_size=6), control=st.integers(0, 8),
       damage=st.one_of(st.none(), st.tuples(st.integers(0, 2000), st.integers(0, 255))),
       cut=st.integers(0, 70), check_crc=st.booleans())
def test_chunk_tuples_gives_what_tuples_in_range_gives(sizes, start, compressed, control, damage, cut, check_crc):
    """The consumer's bulk path: the same records, control batches and errors, at the same point, as
    `tuples_in_range`, whatever mix of plain, compressed, control, damaged and truncated batches a chunk holds."""
    from sparklog.records.batch import chunk_tuples, set_base_offset, tuples_in_range

    data, base = b"", 0
    for index, size in enumerate(sizes):
        records = [(b"k" if i % 2 else None, b"%d" % (base + i), [("h", b"x")] if i == 1 else None, 5 + i)
                   for i in range(max(size, 1))]
        raw = bytearray(build_batch(records, "lz4" if compressed[index] else "none", is_control=index == control,
                                    timestamp_type=index % 2))
        if size == 0:  # a batch compaction emptied: its header only
            raw = bytearray(build_batch([records[0]]))[:HEADER_SIZE]
            raw[8:12] = (HEADER_SIZE - 12).to_bytes(4, "big")
            raw[57:61] = (0).to_bytes(4, "big")
            raw[17:21] = crc32c(bytes(raw[21:])).to_bytes(4, "big")
        set_base_offset(raw, base)
        data += bytes(raw)
        base += max(size, 1)
    chunk = bytearray(data[: len(data) - cut] if cut < len(data) else data)
    if damage is not None:
        chunk[damage[0] % len(chunk)] ^= damage[1] or 1
    chunk = bytes(chunk)
    expected = flattened(tuples_in_range(chunk, start, ("events", 3), Consumed, check_crc))
    assert flattened(chunk_tuples(chunk, start, ("events", 3), Consumed, check_crc)) == expected
    assert flattened(chunk_tuples(memoryview(chunk), start, ("events", 3), Consumed, check_crc)) == expected


def test_chunk_tuples_of_a_chunk_longer_than_one_bulk_step_gives_every_record_once():
    from sparklog.records.batch import chunk_tuples, set_base_offset, tuples_in_range

    data = bytearray()
    for base in range(0, 1000, 5):
        raw = bytearray(build_batch([(None, b"%d" % (base + i), None, 1) for i in range(5)]))
        set_base_offset(raw, base)
        data += raw
    got = flattened(chunk_tuples(bytes(data), 7, ("t", 0), Consumed))
    assert got == flattened(tuples_in_range(bytes(data), 7, ("t", 0), Consumed))
    assert [r.offset for r in got[0]] == list(range(7, 1000))


def test_a_batch_whose_section_is_a_decompression_bomb_raises_a_clear_error():
    """What a consumer or the Spark source decodes: a bound, not gigabytes (compression.py Rule 3)."""
    from support.bombs import bomb_batch

    (batch,) = iter_batches(bomb_batch(4 << 30))  # 128 KiB that expand to 4 GiB
    with pytest.raises(CorruptRecordError, match=r"batch at offset 0: zstd records section expands beyond"):
        batch.columns()
