"""PartitionLog under the standard topic configs: live reconfigure, DeleteRecords, LogAppendTime, timestamp
bounds and the topic's compression codec (issue 14 / issue 10's config part)."""

import time

import pytest

from support.storage_batches import BASE_TS, batch_offsets, make_batch, read_all
from sparklog.records.batch import (LOG_APPEND_TIME, build_batch, compute_crc, iter_batches, iter_records,
                                    validate_batch)
from sparklog.records.compression import CODECS
from sparklog.storage import CorruptRecordError, LogConfig, OffsetOutOfRange, PartitionLog, RecordBatchTooLarge
from sparklog.storage.errors import InvalidTimestampError
from sparklog.storage.log import LOG_START_OFFSET_FILE

NEVER = 10**12


class Clock:
    def __init__(self, now=BASE_TS):
        self.now = now

    def __call__(self):
        return self.now


def open_log(tmp_path, flusher, clock=None, **settings):
    settings.setdefault("flush.ms", NEVER)
    settings = {k.replace("_", "."): v for k, v in settings.items()}
    return PartitionLog.open(str(tmp_path / "topic-0"), settings, flusher=flusher, clock=clock or Clock())


# -- reconfigure ---------------------------------------------------------------------------------------------


def test_reconfigure_applies_max_message_bytes_to_the_next_append(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    big = make_batch(5, value_size=200)
    log.append(big)
    log.reconfigure(log.config.with_overrides({"max.message.bytes": len(big) - 1}))
    with pytest.raises(RecordBatchTooLarge):
        log.append(big)
    log.reconfigure(log.config.with_overrides({"max.message.bytes": len(big)}))
    assert log.append(big) == 5


def test_reconfigure_applies_segment_bytes_and_retention_without_reopening(tmp_path, flusher):
    clock = Clock()
    log = open_log(tmp_path, flusher, clock)
    for i in range(4):
        log.append(make_batch(2, tag=i))
    assert len(log.segments) == 1
    log.reconfigure(log.config.with_overrides({"segment.bytes": 1}))
    log.append(make_batch(2, tag=9))
    log.append(make_batch(2, tag=10))
    assert len(log.segments) == 3  # each append now rolls
    log.flush()
    log.reconfigure(log.config.with_overrides({"retention.bytes": 0}))
    assert log.enforce_retention(clock.now) == 3 and log.log_start_offset == 12  # the active one too, as Kafka


def test_reconfigure_of_flush_ms_reschedules_the_background_flush(tmp_path, flusher):
    """flusher.py Rule: idle-logs-cost-nothing: a log looked at only when it asks must ask again when
    flush.ms changes under an unflushed append."""
    log = open_log(tmp_path, flusher)  # flush.ms NEVER
    log.append(make_batch(3))
    time.sleep(0.1)
    assert log.high_watermark == 0
    log.reconfigure(log.config.with_overrides({"flush.ms": 20}))
    deadline = time.monotonic() + 10
    while log.high_watermark < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.high_watermark == 3


def test_reconfigure_moves_the_active_segments_roll_deadline(tmp_path, flusher):
    clock = Clock()
    log = open_log(tmp_path, flusher, clock)
    log.append(make_batch(1))
    clock.now += 1000
    log.append(make_batch(1))
    assert len(log.segments) == 1
    log.reconfigure(log.config.with_overrides({"segment.ms": 500}))
    log.append(make_batch(1))
    assert len(log.segments) == 2


def test_reconfigure_to_appended_visibility_exposes_the_next_append_without_a_flush(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(2))
    assert log.high_watermark == 0
    log.reconfigure(log.config.with_overrides({"flush.visibility": "appended"}))
    log.append(make_batch(2))
    assert log.high_watermark == 4


def test_reconfigure_to_log_append_time_stamps_later_batches_only(tmp_path, flusher):
    clock = Clock(BASE_TS + 5000)
    log = open_log(tmp_path, flusher, clock, flush_visibility="appended")
    log.append(make_batch(1))
    log.reconfigure(log.config.with_overrides({"message.timestamp.type": "LogAppendTime"}))
    log.append(make_batch(1))
    first, second = iter_batches(read_all(log))
    assert first.timestamp_type == 0 and first.max_timestamp == BASE_TS
    assert second.timestamp_type == LOG_APPEND_TIME and second.max_timestamp == BASE_TS + 5000


# -- DeleteRecords ---------------------------------------------------------------------------------------------


def test_delete_records_moves_the_log_start_inside_a_segment_and_refuses_reads_below(tmp_path, flusher):
    log = open_log(tmp_path, flusher, flush_visibility="appended")
    log.append(make_batch(3))
    log.append(make_batch(3))
    assert log.delete_records_before(4) == 4
    assert log.log_start_offset == 4
    with pytest.raises(OffsetOutOfRange):
        log.read(3, 1000)
    assert batch_offsets(log.read(4, 1000).read_bytes()) == [(3, 6)]  # the batch holding offset 4
    assert log.delete_records_before(2) == 4  # never backwards
    assert log.statistics().log_start_offset == 4


def test_delete_records_beyond_the_high_watermark_is_out_of_range(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))  # not flushed: the high watermark is still 0
    with pytest.raises(OffsetOutOfRange):
        log.delete_records_before(1)
    log.flush()
    assert log.delete_records_before(3) == 3 and log.read(3, 100).length == 0


def test_delete_records_deletes_whole_segments_below_and_survives_a_reopen(tmp_path, flusher):
    log = open_log(tmp_path, flusher, segment_bytes=1, flush_visibility="appended", file_delete_delay_ms=0)
    for i in range(4):
        log.append(make_batch(2, tag=i))
    assert len(log.segments) == 4
    log.delete_records_before(5)
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert (tmp_path / "topic-0" / LOG_START_OFFSET_FILE).exists()
    log.close()
    reopened = open_log(tmp_path, flusher, segment_bytes=1)
    assert reopened.log_start_offset == 5 and reopened.log_end_offset == 8
    assert [r.offset for r in iter_records(read_all(reopened))][-3:] == [5, 6, 7]


def test_offset_for_timestamp_never_answers_below_the_log_start(tmp_path, flusher):
    log = open_log(tmp_path, flusher, flush_visibility="appended")
    log.append(make_batch(4))
    log.delete_records_before(2)
    assert log.offset_for_timestamp(0).offset == 2


def test_truncating_below_the_log_start_restarts_the_log_there(tmp_path, flusher):
    log = open_log(tmp_path, flusher, flush_visibility="appended")
    log.append(make_batch(4))
    log.delete_records_before(3)
    log.truncate_to(2)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)


# -- message.timestamp.type=LogAppendTime ----------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_log_append_time_stamps_every_batch_with_a_valid_crc(tmp_path, flusher, codec):
    clock = Clock(BASE_TS + 99_000)
    log = open_log(tmp_path, flusher, clock, message_timestamp_type="LogAppendTime", flush_visibility="appended")
    records = [(b"k", b"v%d" % i, None, BASE_TS + i) for i in range(3)]
    log.append(build_batch(records, compression=codec) + build_batch(records[:1], compression=codec))
    batches = list(iter_batches(read_all(log)))  # iter_batches checks each CRC
    assert [b.timestamp_type for b in batches] == [LOG_APPEND_TIME, LOG_APPEND_TIME]
    assert all(b.max_timestamp == clock.now and compute_crc(b.raw) == b.crc for b in batches)
    assert [r.timestamp for r in iter_records(read_all(log))] == [clock.now] * 4
    assert [r.value for r in iter_records(read_all(log))] == [b"v0", b"v1", b"v2", b"v0"]
    assert log.offset_for_timestamp(clock.now).offset == 0


def test_log_append_time_never_re_signs_a_corrupt_batch(tmp_path, flusher):
    log = open_log(tmp_path, flusher, message_timestamp_type="LogAppendTime", flush_visibility="appended")
    bad = bytearray(build_batch([(b"k", b"value", None, BASE_TS)]))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append(bad)
    assert log.log_end_offset == 0


# -- message.timestamp.before/after.max.ms ---------------------------------------------------------------------


def test_timestamps_outside_the_bounds_fail_the_whole_append(tmp_path, flusher):
    clock = Clock(BASE_TS)
    log = open_log(tmp_path, flusher, clock, message_timestamp_before_max_ms=1000,
                   message_timestamp_after_max_ms=100, flush_visibility="appended")
    ok = build_batch([(None, b"a", None, BASE_TS - 1000), (None, b"b", None, BASE_TS + 100)])
    assert log.append(ok) == 0
    too_old = build_batch([(None, b"a", None, BASE_TS), (None, b"b", None, BASE_TS - 1001)])
    with pytest.raises(InvalidTimestampError, match="before.max.ms=1000"):
        log.append(ok + too_old)
    with pytest.raises(InvalidTimestampError):
        log.append(build_batch([(None, b"c", None, BASE_TS + 101)], compression="gzip"))
    assert log.log_end_offset == 2


def test_timestamps_outside_the_bounds_are_named_record_by_record(tmp_path, flusher):
    """KIP-467: the error names each record outside, by its index in the append (across its batches)."""
    log = open_log(tmp_path, flusher, Clock(BASE_TS), message_timestamp_before_max_ms=1000,
                   message_timestamp_after_max_ms=100, flush_visibility="appended")
    first = build_batch([(None, b"a", None, BASE_TS), (None, b"b", None, BASE_TS - 1001)])
    second = build_batch([(None, b"c", None, BASE_TS + 101), (None, b"d", None, BASE_TS)], compression="gzip")
    with pytest.raises(InvalidTimestampError) as refused:
        log.append(first + second)
    assert [i for i, _ in refused.value.record_errors] == [1, 2]
    assert refused.value.record_errors[0][1] == (f"Timestamp {BASE_TS - 1001} of message with offset 1 is out of "
                                                 f"range. The timestamp should be within [{BASE_TS - 1000}, "
                                                 f"{BASE_TS + 100}]")
    assert str(refused.value).startswith("One or more records have been rejected due to 2 record errors in total")
    assert log.log_end_offset == 0


def test_log_append_time_topics_ignore_the_timestamp_bounds(tmp_path, flusher):
    log = open_log(tmp_path, flusher, message_timestamp_type="LogAppendTime", message_timestamp_after_max_ms=0)
    assert log.append(build_batch([(None, b"a", None, BASE_TS + 10**9)])) == 0


# -- compression.type ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("topic_codec, stored", [("uncompressed", 0), ("gzip", 1), ("snappy", 2), ("lz4", 3),
                                                 ("zstd", 4), ("producer", CODECS["lz4"])])
def test_the_broker_recompresses_to_the_topic_codec(tmp_path, flusher, topic_codec, stored):
    log = open_log(tmp_path, flusher, compression_type=topic_codec, flush_visibility="appended")
    records = [(b"key%d" % i, b"value-%d" % i * 10, [("h", b"x")], BASE_TS + i) for i in range(5)]
    sent = build_batch(records, compression="lz4", producer_id=7, producer_epoch=1, base_sequence=3)
    log.append(sent)
    (batch,) = iter_batches(read_all(log))
    validate_batch(batch.raw)
    assert batch.compression == stored
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 3)
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in batch.records()]
    assert got == [(i, k, v, (("h", b"x"),), t) for i, (k, v, _, t) in enumerate(records)]


def test_recompressed_batches_are_checked_against_max_message_bytes(tmp_path, flusher):
    records = [(None, b"x" * 5000, None, BASE_TS)]
    compressed = build_batch(records, compression="gzip")
    log = open_log(tmp_path, flusher, compression_type="uncompressed", max_message_bytes=len(compressed) + 100)
    with pytest.raises(RecordBatchTooLarge):
        log.append(compressed)
    assert log.log_end_offset == 0


def test_default_config_has_no_converter(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    assert log._converter is None
    log.reconfigure(LogConfig.from_dict({"compression.type": "gzip"}))
    assert log._converter is not None


# -- property: whatever the topic's codec and timestamp type, the records survive the conversion ---------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

RECORDS = st.lists(st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=200),
                             st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                                      max_size=2),
                             st.integers(BASE_TS - 10**6, BASE_TS + 10**6)), min_size=1, max_size=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(RECORDS, st.sampled_from(sorted(CODECS))), min_size=1, max_size=3),
       topic_codec=st.sampled_from(["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"]),
       log_append_time=st.booleans())
def test_conversion_keeps_every_record_and_signs_every_batch(tmp_path_factory, flusher, batches, topic_codec,
                                                             log_append_time):
    clock = Clock(BASE_TS + 7)
    tmp = tmp_path_factory.mktemp("convert")
    log = open_log(tmp, flusher, clock, compression_type=topic_codec, flush_visibility="appended",
                   message_timestamp_type="LogAppendTime" if log_append_time else "CreateTime")
    try:
        log.append(b"".join(build_batch(records, compression=codec) for records, codec in batches))
        stored = list(iter_batches(read_all(log)))  # checks every CRC
        expected_codec = None if topic_codec == "producer" else CODECS.get(topic_codec, 0)
        for batch, (_, codec) in zip(stored, batches):
            assert batch.compression == (CODECS[codec] if expected_codec is None else expected_codec)
            assert batch.timestamp_type == (LOG_APPEND_TIME if log_append_time else 0)
        got = [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for b in stored for r in b.records()]
        sent = [r for records, _ in batches for r in records]
        assert got == [(i, k, v, tuple((hk, hv) for hk, hv in h), clock.now if log_append_time else t)
                       for i, (k, v, h, t) in enumerate(sent)]
    finally:
        log.close()


@settings(max_examples=60, deadline=None)
@given(records=RECORDS, codec=st.sampled_from(sorted(CODECS)))
def test_timestamp_range_agrees_with_the_full_decoder(records, codec):
    from sparklog.storage.log_validator import timestamp_range

    (batch,) = iter_batches(build_batch(records, compression=codec))
    timestamps = batch.columns().timestamps
    assert timestamp_range(batch.raw, batch) == (min(timestamps), max(timestamps))


def test_timestamp_range_refuses_records_that_overrun_the_batch():
    from sparklog.storage.log_validator import timestamp_range

    (batch,) = iter_batches(build_batch([(None, b"value", None, BASE_TS)]))
    raw = bytearray(batch.raw)
    raw[61] = 0x7E  # the first record's length varint: 63 bytes, past the end
    with pytest.raises(CorruptRecordError, match="overruns"):
        timestamp_range(memoryview(raw), batch)


@pytest.mark.parametrize("settings", [{"compression_type": "gzip"}, {"message_timestamp_before_max_ms": 10**12}],
                         ids=["recompression", "timestamp-bounds"])
def test_a_decompression_bomb_is_refused_as_corrupt_and_nothing_is_stored(tmp_path, flusher, settings):
    from support.bombs import bomb_batch

    log = open_log(tmp_path, flusher, **settings)
    with pytest.raises(CorruptRecordError, match="expands beyond"):
        log.append(bomb_batch(4 << 30, timestamp=BASE_TS))
    assert log.log_end_offset == 0
