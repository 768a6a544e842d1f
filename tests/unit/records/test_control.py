"""Control batches (end-transaction markers): build and parse, whole and with trailing bytes; bad records;
kafka-python reads ours as Kafka's.

Every test runs against both codecs (the `codec` fixture of this folder)."""

import struct

import pytest
from hypothesis import given, strategies as st
from kafka.record.default_records import DefaultRecordBatch

from sparklog.records.batch import (CONTROL_MASK, TRANSACTIONAL_MASK, build_batch, iter_batches, iter_records,
                                    validate_batch)
from sparklog.records.control import (InvalidControlRecord, Marker, build_marker_batch, parse_marker,
                                      parse_marker_record)

producer_ids = st.integers(0, 2**63 - 1)
epochs = st.integers(0, 2**15 - 1)
coordinator_epochs = st.integers(-(2**31), 2**31 - 1)


@given(producer_ids, epochs, st.booleans(), coordinator_epochs, st.integers(0, 2**40))
def test_a_marker_batch_parses_back_to_its_marker(codec, producer_id, epoch, commit, coordinator_epoch, offset):
    raw = build_marker_batch(producer_id, epoch, commit, coordinator_epoch, base_offset=offset)
    header = validate_batch(raw)
    assert header.attributes & (CONTROL_MASK | TRANSACTIONAL_MASK) == CONTROL_MASK | TRANSACTIONAL_MASK
    assert (header.base_sequence, header.record_count, header.base_offset) == (-1, 1, offset)
    assert parse_marker(raw) == Marker(producer_id, epoch, commit, coordinator_epoch)
    assert parse_marker(raw + b"\0" * 7) == Marker(producer_id, epoch, commit, coordinator_epoch)  # trailing bytes


@given(producer_ids, epochs, st.booleans(), coordinator_epochs)
def test_kafka_python_reads_our_marker_as_kafkas(codec, producer_id, epoch, commit, coordinator_epoch):
    batch = DefaultRecordBatch(build_marker_batch(producer_id, epoch, commit, coordinator_epoch))
    assert batch.is_control_batch and batch.is_transactional and batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch) == (producer_id, epoch)
    (record,) = list(batch)
    assert (record.version, record.commit, record.abort) == (0, commit, not commit)
    assert struct.unpack(">hi", record.value) == (0, coordinator_epoch)


def test_markers_are_never_records_to_a_consumer(codec):
    data = build_batch([(b"k", b"v", None, 1)], base_offset=0) + build_marker_batch(7, 0, True, 3, base_offset=1)
    assert [r.value for r in iter_records(data)] == [b"v"]
    assert [b.is_control for b in iter_batches(data)] == [False, True]


def test_a_torn_marker_batch_is_not_a_marker(codec):
    raw = build_marker_batch(7, 0, True, 3)
    for cut in range(len(raw)):
        with pytest.raises(InvalidControlRecord, match="no whole batch"):
            parse_marker(raw[:cut])


def test_a_data_batch_is_not_a_marker(codec):
    with pytest.raises(InvalidControlRecord, match="not a control batch"):
        parse_marker(build_batch([(b"k", b"v", None, 1)]))


@pytest.mark.parametrize("key, value, message", [
    (None, b"\0\0\0\0\0\0", "key of 0 bytes"),
    (b"\0\0\0", b"\0\0\0\0\0\0", "key of 3 bytes"),
    (struct.pack(">hh", 0, 2), b"\0\0\0\0\0\0", "type 2 is neither"),
    (struct.pack(">hh", 0, -1), b"\0\0\0\0\0\0", "type -1 is neither"),
    (struct.pack(">hh", 0, 1), b"\0\0\0", "value of 3 bytes"),
    (struct.pack(">hh", 0, 1), None, "value of 0 bytes"),
])
def test_a_control_record_that_is_no_marker_is_refused_with_its_reason(key, value, message):
    with pytest.raises(InvalidControlRecord, match=message):
        parse_marker_record(1, 0, key, value)


def test_a_control_batch_of_an_unknown_type_is_not_guessed(codec):
    raw = build_batch([(struct.pack(">hh", 0, 5), b"\0\0\0\0\0\0", None, 1)], producer_id=1, producer_epoch=0,
                      is_transactional=True, is_control=True)
    with pytest.raises(InvalidControlRecord, match="type 5"):
        parse_marker(raw)
