import os
import socket
import struct
import threading
import time

import pytest

from support.storage_batches import BASE_TS, batch_offsets, make_batch, read_all
from sparklog.storage import (
    CorruptRecordError,
    Files,
    InvalidRecordError,
    InvalidTopicName,
    LogClosedError,
    LogManager,
    OffsetOutOfRange,
    PartitionLog,
    RecordBatchTooLarge,
    TimestampOffset,
    TransactionRefusedError,
)
from sparklog.storage.errors import InvalidTimestampError
from sparklog.storage.producer_state import snapshot_file_name
from sparklog.storage.log import RECOVERY_POINT_FILE
from sparklog.records.batch import HEADER_SIZE, LOG_APPEND_TIME, build_batch, compute_crc, iter_batches, iter_records

NEVER = 10**12  # flush.ms that the background flusher never reaches in a test


class Clock:
    def __init__(self, now=BASE_TS):
        self.now = now

    def __call__(self):
        return self.now


def open_log(tmp_path, flusher, name="topic-0", **settings):
    settings.setdefault("flush.ms", NEVER)
    return PartitionLog.open(str(tmp_path / name), settings, flusher=flusher, clock=settings.pop("clock", None))


def test_append_assigns_consecutive_offsets_and_read_returns_them(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    assert log.append(make_batch(3)) == 0
    assert log.append(make_batch(2) + make_batch(4)) == 3
    log.flush()
    assert batch_offsets(read_all(log)) == [(0, 3), (3, 5), (5, 9)]
    assert [r.offset for r in iter_records(read_all(log))] == list(range(9))
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 9, 9)


def test_append_accepts_memoryview_and_bytearray(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    assert log.append(memoryview(make_batch(2))) == 0
    assert log.append(bytearray(make_batch(2))) == 2
    assert log.append(memoryview(make_batch(2) * 2).cast("H")) == 4  # any format: its bytes
    log.flush()
    assert batch_offsets(read_all(log)) == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_append_patches_a_bytearray_in_place_and_copies_other_buffers(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))
    frozen, mutable = make_batch(2), bytearray(make_batch(2))
    view = memoryview(bytearray(make_batch(2)))
    assert log.append(frozen) == 3 and log.append(mutable) == 5 and log.append(view) == 7
    assert next(iter_batches(frozen)).base_offset == 0 and next(iter_batches(view)).base_offset == 0
    assert next(iter_batches(mutable)).base_offset == 5  # the offset assigned, as Kafka does in the request
    log.flush()
    assert read_all(log)[-2 * len(frozen):-len(frozen)] == mutable


def test_a_refused_bytearray_is_left_untouched(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))
    good, bad = make_batch(2), bytearray(make_batch(2))
    bad[-1] ^= 1
    record_set = bytearray(good) + bad
    for payload in (bad, record_set):
        before = bytes(payload)
        with pytest.raises(CorruptRecordError):
            log.append(payload)
        assert payload == before and log.log_end_offset == 3


def test_reads_across_segment_rolls(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 600, "index.interval.bytes": 100})
    for tag in range(40):
        log.append(make_batch(2, 60, tag=tag))
    log.flush()
    assert len(log.segments) > 5
    assert [s.base_offset for s in log.segments] == sorted({s.base_offset for s in log.segments})
    for offset in range(0, 80):
        piece = log.read(offset, 10_000)
        first = next(iter_batches(piece.read_bytes()))
        assert first.base_offset <= offset < first.next_offset
    records = list(iter_records(read_all(log)))
    assert [r.offset for r in records] == list(range(80))
    assert records[79].value.startswith(b"39:1:")


def test_a_group_append_that_rolls_names_each_segment_for_its_first_offset_and_reopens_whole(tmp_path, flusher):
    """A broker's pipelined Produce requests appended as one group roll segments mid-group: each new segment
    starts at the group's offset so far, not at the log end before the group (which named a segment for
    offsets it did not hold, and a reopened log then read from the wrong segment)."""
    settings = {"segment.bytes": 600, "index.interval.bytes": 100}
    log = open_log(tmp_path, flusher, **settings)
    log.append(make_batch(2, 60, tag=0))
    outcomes = log.append_group_as_leader([make_batch(2, 60, tag=tag) for tag in range(1, 40)], leader_epoch=0)
    assert [o[0] for o in outcomes] == list(range(2, 80, 2))
    log.flush()
    assert len(log.segments) > 5
    for segment in log.segments:
        assert segment.read_header(0).base_offset == segment.base_offset
    before = read_all(log)
    log.close()
    reopened = open_log(tmp_path, flusher, **settings)
    try:
        assert read_all(reopened) == before
        for offset in range(80):
            first = next(iter_batches(reopened.read(offset, 10_000).read_bytes()))
            assert first.base_offset <= offset < first.next_offset
    finally:
        reopened.close()


def test_a_group_of_more_batches_than_one_pwritev_takes_is_written_whole_and_its_buffers_are_left_as_they_were(
        tmp_path, flusher):
    """A group is written from the views it arrived in (its heads apart): more than IOV_MAX batches take
    several pwritev calls, and the caller's buffers, writable ones too, are not written to."""
    log = open_log(tmp_path, flusher, **{"segment.bytes": 10_000_000})
    sets = [bytearray(make_batch(1, 20, tag=tag)) for tag in range(os.sysconf("SC_IOV_MAX") + 7)]
    sent = [bytes(s) for s in sets]
    outcomes = log.append_group_as_leader([memoryview(s) for s in sets], leader_epoch=5)
    assert [o[0] for o in outcomes] == list(range(len(sets)))
    assert [bytes(s) for s in sets] == sent
    log.flush()
    records = list(iter_records(read_all(log)))
    assert [r.offset for r in records] == list(range(len(sets)))
    assert [r.value for r in records] == [next(iter_records(s)).value for s in sent]
    assert {b.partition_leader_epoch for b in iter_batches(read_all(log))} == {5}
    log.close()


def _idempotent_batch(sequence: int, tag: int) -> bytes:
    """Two records of producer 7, epoch 0, from `sequence` on (make_batch's values, tagged `tag`)."""
    records = [(f"k{i}".encode(), f"{tag}:{i}:".encode().ljust(60, b"x"), None, BASE_TS + i) for i in range(2)]
    return build_batch(records, producer_id=7, producer_epoch=0, base_sequence=sequence)


@pytest.mark.parametrize("failing", [".log", ".snapshot.tmp"], ids=["segment-write", "roll-snapshot"])
def test_a_group_append_that_fails_mid_group_keeps_no_sequence_of_what_it_did_not_write(tmp_path, flusher, failing):
    """A disk error mid-group (the write after a roll, or the producer snapshot the roll writes) fails that
    set and the later ones, and the producer state keeps only what reached the log, as lone appends would:
    the producer's retry of the failed sets is appended (it got OUT_OF_ORDER_SEQUENCE_NUMBER), the sets
    written before the error are answered as duplicates, and the log reads and reopens whole."""
    from support.crashfs import CrashFiles

    settings = {"flush.ms": NEVER, "segment.bytes": "600", "index.interval.bytes": "100"}
    files = CrashFiles()
    directory = str(tmp_path / "topic-0")
    log = PartitionLog.open(directory, settings, flusher=flusher, files=files, clock=Clock())  # no expiry at roll
    assert log.append(_idempotent_batch(0, tag=0)) == 0
    sets = [_idempotent_batch(2 * tag, tag) for tag in range(1, 12)]
    files.arm("pwrite", lambda path: path.endswith(failing), mode="fail", skip=1 if failing == ".log" else 0)
    outcomes = log.append_group_as_leader(sets, leader_epoch=0)
    written = [o for o in outcomes if type(o) is tuple]
    assert 0 < len(written) < len(sets) and outcomes[:len(written)] == written  # a prefix was written
    assert all(isinstance(o, OSError) for o in outcomes[len(written):])
    assert log.log_end_offset == 2 + 2 * len(written)
    end = log.log_end_offset
    retried = log.append_group_as_leader(sets, leader_epoch=0)  # the producer resends what was not acknowledged
    assert retried[:len(written)] == [(base, end) for base, _ in written]  # duplicates: their first offsets
    assert [o[0] for o in retried[len(written):]] == list(range(end, 24, 2))
    assert log.log_end_offset == 24
    log.flush()
    values = [r.value[:5] for r in iter_records(read_all(log))]
    assert values == [f"{tag}:{i}:".encode().ljust(5, b"x") for tag in range(12) for i in range(2)]
    before = read_all(log)
    log.close()
    reopened = PartitionLog.open(directory, settings, flusher=flusher, clock=Clock())
    assert read_all(reopened) == before
    assert reopened.append(_idempotent_batch(22, tag=11)) == 22  # still known as a duplicate after the reopen
    assert reopened.append(_idempotent_batch(24, tag=12)) == 24


@pytest.mark.parametrize("group", [False, True], ids=["append", "group-append"])
def test_a_write_that_fails_half_done_leaves_no_bytes_after_the_log_end(tmp_path, flusher, caplog, group):
    """A disk that fills up mid-write leaves part of the batch in the file; the append fails, and the bytes
    must go with it: left past the segment's end, a roll (the next append larger than the room left) sealed
    them into a closed segment, and the reopened log reported DATA LOSS and fenced offsets over bytes that
    never held an acknowledged record."""
    from support.crashfs import CrashFiles

    settings = {"flush.ms": NEVER, "segment.bytes": "2000"}
    files = CrashFiles()
    directory = str(tmp_path / "topic-0")
    log = PartitionLog.open(directory, settings, flusher=flusher, files=files)
    log.append(make_batch(2, 60, tag=0))
    files.arm("pwrite", lambda path: path.endswith(".log"), mode="fail-half")
    big = make_batch(9, 140, tag=1)
    if group:
        (outcome,) = log.append_group_as_leader([big], leader_epoch=0)
        assert isinstance(outcome, OSError)
    else:
        with pytest.raises(OSError):
            log.append(big)
    first = log.segments[0]
    assert os.path.getsize(first.path) == first.size  # the half-written bytes are gone
    log.append(make_batch(1, 10, tag=2))  # shorter than what failed
    for tag in range(3, 6):
        log.append(make_batch(12, 140, tag=tag))  # rolls, sealing the first segment
    log.flush()
    before = read_all(log)
    log.close()
    with caplog.at_level("WARNING"):
        reopened = PartitionLog.open(directory, settings, flusher=flusher)
        assert read_all(reopened) == before and reopened.fenced_ranges() == ()
    assert "DATA LOSS" not in caplog.text


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_a_batch_with_an_unknown_compression_codec_is_refused_whole(tmp_path, flusher, codec):
    """Attributes bits 0-2 name the codec, 0-4 (none .. zstd); a batch with 5-7 and a valid CRC (the
    producer computes it) was appended, and every consumer of the partition then failed on it."""
    from crc32c import crc32c

    log = open_log(tmp_path, flusher)
    log.append(make_batch(2))
    bad = bytearray(make_batch(3))
    bad[22] = (bad[22] & ~0x07) | codec  # attributes (int16 at byte 21): the low byte's codec bits
    bad[17:21] = crc32c(bytes(bad[21:])).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec {codec}"):
        log.append(bad)
    with pytest.raises(CorruptRecordError, match=f"unknown compression codec {codec}"):
        log.append(bytes(make_batch(1)) + bytes(bad))  # a record set of several batches: refused whole
    (outcome,) = log.append_group_as_leader([bytes(bad)], leader_epoch=0)
    assert isinstance(outcome, CorruptRecordError)
    log.flush()
    assert batch_offsets(read_all(log)) == [(0, 2)]


def test_a_control_batch_appended_as_leader_is_refused_as_kafka_refuses_it_from_clients(tmp_path, flusher):
    """Control batches are the transaction coordinator's markers (sparklog has none); a client that writes
    one (found with a raw Produce) makes consumers skip its records as markers. Kafka's LogValidator:
    'Clients are not allowed to write control records' (INVALID_RECORD). Replicated batches are not checked."""
    log = open_log(tmp_path, flusher)
    marker = build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None, BASE_TS)], is_control=True)
    with pytest.raises(InvalidRecordError, match="not allowed to write control records"):
        log.append_as_leader(marker, 0)
    with pytest.raises(InvalidRecordError, match="not allowed to write control records"):
        log.append_as_leader(bytes(make_batch(1)) + marker, 0)  # one of several: the record set whole
    (outcome,) = log.append_group_as_leader([marker], leader_epoch=0)
    assert isinstance(outcome, InvalidRecordError)
    assert log.log_end_offset == 0
    assert log.append_as_leader(make_batch(2), 0) == 0


def test_a_transactional_batch_appended_as_leader_is_refused_when_the_verifier_refuses_it(tmp_path, flusher):
    """KIP-890 part 1's hook: the verifier the broker installs refuses a transactional batch of a transaction
    this partition was not added to (INVALID_TXN_STATE), and nothing of its set is written, through every
    leader path. Replicated batches are not checked."""
    log = open_log(tmp_path, flusher)
    seen = []

    def verifier(producer_id, epoch):
        seen.append((producer_id, epoch))
        raise TransactionRefusedError("partition t-0 is not in an ongoing transaction of producer 7")

    log.transaction_verifier = verifier
    txn = build_batch([(None, b"v", None, BASE_TS)], producer_id=7, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    with pytest.raises(TransactionRefusedError, match="not in an ongoing transaction"):
        log.append_as_leader(txn, 0)
    with pytest.raises(TransactionRefusedError):
        log.append_as_leader(bytes(make_batch(1)) + txn, 0)
    (outcome,) = log.append_group_as_leader([txn], leader_epoch=0)
    assert isinstance(outcome, TransactionRefusedError)
    assert log.log_end_offset == 0 and seen == [(7, 0)] * 3
    log.append_replicated(txn)  # a follower copies the leader's log as it is
    assert log.log_end_offset == 1


def test_a_transactional_batch_appended_as_leader_opens_a_transaction(tmp_path, flusher):
    """Without a verifier every leader path takes a transactional batch; it opens its producer's transaction
    and the last stable offset stays at its first offset. One without a producer id is refused."""
    log = open_log(tmp_path, flusher)
    log.append_as_leader(make_batch(1), 0)
    txn = build_batch([(None, b"v", None, BASE_TS)], producer_id=7, producer_epoch=0, base_sequence=0,
                      is_transactional=True)
    assert log.append_as_leader(txn, 0) == 1
    (outcome,) = log.append_group_as_leader([build_batch([(None, b"w", None, BASE_TS)], producer_id=8,
                                                         producer_epoch=0, base_sequence=0, is_transactional=True)],
                                            leader_epoch=0)
    assert outcome == (2, 3)
    log.flush()
    assert (log.high_watermark, log.last_stable_offset) == (3, 1)
    assert log.producer_state.ongoing == {7: 1, 8: 2}
    with pytest.raises(InvalidRecordError, match="no producer id"):
        log.append_as_leader(build_batch([(None, b"x", None, BASE_TS)], is_transactional=True), 0)


def test_an_idempotent_batch_without_a_sequence_appended_as_leader_is_refused(tmp_path, flusher):
    """Kafka's LogValidator: a client's batch with a producer id must have a baseSequence >= 0 (INVALID_RECORD,
    "Invalid sequence number"); nothing of the set is stored. A batch without a producer id needs none."""
    log = open_log(tmp_path, flusher)
    unsequenced = build_batch([(None, b"v", None, BASE_TS)], producer_id=7, producer_epoch=0, base_sequence=-1)
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1 in record batch with producerId 7"):
        log.append_as_leader(unsequenced, 0)
    (outcome,) = log.append_group_as_leader([unsequenced], leader_epoch=0)
    assert isinstance(outcome, InvalidRecordError)
    assert log.log_end_offset == 0
    plain = build_batch([(None, b"v", None, BASE_TS)], base_sequence=-1)
    assert log.append_as_leader(plain, 0) == 0
    sequenced = build_batch([(None, b"v", None, BASE_TS)], producer_id=7, producer_epoch=0, base_sequence=0)
    assert [o[0] for o in log.append_group_as_leader([sequenced], leader_epoch=0)] == [1]


def test_a_client_batch_saying_log_append_time_is_refused_or_stored_as_create_time_as_kafka_does(tmp_path, flusher):
    """LogAppendTime is the broker's to set. Kafka's LogValidator answers INVALID_TIMESTAMP ("Producer should not
    set timestamp type to LogAppendTime") when the topic stamps the append time itself or the batch has no
    timestamp (maxTimestamp -1, which its records take); otherwise it stores the batch as CreateTime (the
    topic's type), maxTimestamp kept. Nothing of a refused set is stored."""
    log = open_log(tmp_path, flusher)
    said = build_batch([(None, b"a", None, BASE_TS), (None, b"b", None, BASE_TS + 7)], timestamp_type=LOG_APPEND_TIME)
    untimed = build_batch([(None, b"c", None, -1)], timestamp_type=LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError, match="should not set timestamp type to LogAppendTime"):
        log.append_as_leader(untimed, 0)
    (outcome,) = log.append_group_as_leader([untimed], leader_epoch=0)
    assert isinstance(outcome, InvalidTimestampError)
    assert log.log_end_offset == 0
    assert log.append_as_leader(said, 0) == 0
    assert [o[0] for o in log.append_group_as_leader([said], leader_epoch=0)] == [2]
    log.flush()
    batches = list(iter_batches(read_all(log)))
    assert [(b.timestamp_type, b.max_timestamp) for b in batches] == [(0, BASE_TS + 7)] * 2
    assert [r.timestamp for r in iter_records(read_all(log))] == [BASE_TS, BASE_TS + 7] * 2
    stamping = open_log(tmp_path, flusher, "stamping-0", **{"message.timestamp.type": "LogAppendTime"})
    with pytest.raises(InvalidTimestampError, match="should not set timestamp type to LogAppendTime"):
        stamping.append_as_leader(said, 0)
    (outcome,) = stamping.append_group_as_leader([said], leader_epoch=0)
    assert isinstance(outcome, InvalidTimestampError) and stamping.log_end_offset == 0
    assert stamping.append_as_leader(build_batch([(None, b"d", None, BASE_TS)]), 0) == 0


def _resigned(batch: bytes, section: bytes, count: int) -> bytes:
    """`batch`'s header around another records section saying `count` records, with a right CRC-32C."""
    whole = bytearray(batch[:HEADER_SIZE]) + section
    struct.pack_into(">i", whole, 8, len(whole) - 12)
    struct.pack_into(">i", whole, 23, count - 1)  # lastOffsetDelta
    struct.pack_into(">i", whole, HEADER_SIZE - 4, count)
    struct.pack_into(">I", whole, 17, compute_crc(whole))
    return bytes(whole)


def test_a_client_batch_whose_crc_is_right_but_whose_records_do_not_parse_is_refused(tmp_path, flusher):
    """Kafka's LogValidator iterates a client's records before the append: such a batch stored would break
    every consumer of the partition. INVALID_RECORD with the reason; nothing of the set is stored."""
    log = open_log(tmp_path, flusher)
    good = bytes(make_batch(2))
    garbage = _resigned(good, b"\xff" * 40, 2)
    count_lies = _resigned(good, good[HEADER_SIZE:], 3)
    bad_gzip = _resigned(build_batch([(None, b"v", (), BASE_TS)], compression="gzip"), b"\x1f\x8b" + b"\x00" * 30, 1)
    for bad in (garbage, count_lies, bad_gzip):
        with pytest.raises(InvalidRecordError, match="records"):
            log.append_as_leader(bad, 0)
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(good + bad, 0)  # one of several: the record set whole
        (outcome,) = log.append_group_as_leader([bad], leader_epoch=0)
        assert isinstance(outcome, InvalidRecordError), outcome
    broken_crc = bytearray(garbage)
    broken_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC"):  # corrupt in transit: CORRUPT_MESSAGE, as before
        log.append_as_leader(bytes(broken_crc), 0)
    (outcome,) = log.append_group_as_leader([bytes(broken_crc)], leader_epoch=0)
    assert isinstance(outcome, CorruptRecordError) and not isinstance(outcome, InvalidRecordError)
    assert log.log_end_offset == 0
    outcomes = log.append_group_as_leader([good, garbage, good], leader_epoch=0)
    assert [o if isinstance(o, tuple) else type(o) for o in outcomes] == [(0, 2), InvalidRecordError, (2, 4)]
    log.flush()
    assert [r.offset for r in iter_records(read_all(log))] == [0, 1, 2, 3]


def test_read_stops_on_batch_boundary_and_returns_one_batch_beyond_max_bytes(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    batch = make_batch(5, 100)
    for _ in range(10):
        log.append(batch)
    log.flush()
    piece = log.read(0, len(batch) * 3 + 10)
    assert piece.length == len(batch) * 3
    tiny = log.read(12, 1)  # KIP-74: one whole batch although larger than max_bytes
    assert tiny.length == len(batch)
    assert batch_offsets(tiny.read_bytes()) == [(10, 15)]


def test_offsets_outside_the_log_raise_and_the_hw_reads_empty(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))
    with pytest.raises(OffsetOutOfRange, match=r"\[0, 3\]"):
        log.read(4, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    assert log.read(0, 100).length == 0  # appended, not flushed: invisible
    assert log.read(3, 100).length == 0  # at the LEO
    log.flush()
    assert log.read(3, 100).length == 0
    assert log.read(0, 100).length > 0


def test_max_offset_caps_the_read_at_batch_granularity(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    for _ in range(4):
        log.append(make_batch(3))
    log.flush()
    assert batch_offsets(log.read(0, 10**6, max_offset=6).read_bytes()) == [(0, 3), (3, 6)]
    assert batch_offsets(log.read(0, 10**6, max_offset=7).read_bytes()) == [(0, 3), (3, 6)]
    assert log.read(6, 10**6, max_offset=7).length == 0


def test_appended_visibility_exposes_at_once_and_flushed_waits(tmp_path, flusher):
    eager = open_log(tmp_path, flusher, "eager-0", **{"flush.visibility": "appended"})
    eager.append(make_batch(2))
    assert eager.high_watermark == 2 and eager.read(0, 100).length > 0
    lazy = open_log(tmp_path, flusher, "lazy-0")
    lazy.append(make_batch(2))
    assert lazy.high_watermark == 0


def test_background_flusher_moves_hw_within_100ms_and_calls_listeners(tmp_path, flusher):
    """flush.ms=20: the flusher flushes at its first look after the append is 20 ms old, by its own clock
    reads (what bounds the delay to about a tick past flush.ms; the test's wall clock, on a loaded machine,
    says nothing about it), and not before: every look before said "not due" for a younger append."""
    log = open_log(tmp_path, flusher, **{"flush.ms": 20})
    seen, looks = [], []
    moved = threading.Event()
    log.add_high_watermark_listener(lambda lg, hw: (seen.append(hw), moved.set()))
    flush_due = log.flush_due
    log.flush_due = lambda now: looks.append((now, flush_due(now))) or looks[-1][1]
    appended = time.monotonic()
    log.append(make_batch(4))
    assert moved.wait(60)
    assert seen == [4] and log.high_watermark == 4 and log.recovery_point == 4
    answers = [answer for _now, answer in list(looks)]
    first_due = answers.index(True)  # the look that flushed; the looks after it find nothing to flush
    assert answers.count(True) == 1 and looks[first_due][0] - appended >= 0.020
    assert flusher.statistics().flushes == 1


def test_an_idle_log_is_not_looked_at_until_its_checkpoint_is_due(tmp_path, flusher):
    """flusher.py Rule: idle-logs-cost-nothing: after its flush, a log whose checkpoint is not due yet is not
    looked at; the one look at the checkpoint's time writes it; then nothing is pending and nothing looks."""
    log = PartitionLog.open(str(tmp_path / "topic-0"), {"flush.ms": 20}, flusher=flusher,
                            checkpoint_interval_ms=5000)
    looks = []
    flush_due = log.flush_due
    log.flush_due = lambda now: looks.append(now) or flush_due(now)
    log.append(make_batch(4))
    deadline = time.monotonic() + 60
    while log.high_watermark < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert log.high_watermark == 4 and log.statistics().checkpoints == 0  # due 5 s after the open
    flushed_looks = len(looks)
    time.sleep(0.5)
    assert len(looks) == flushed_looks  # idle, the checkpoint due in ~5 s: no look (the old flusher: every 10 ms)
    while log.statistics().checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.statistics().checkpoints == 1 and read_checkpoint(log) == 4 and len(looks) == flushed_looks + 1
    time.sleep(0.3)
    assert len(looks) == flushed_looks + 1


def test_flush_messages_flushes_synchronously_in_append(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"flush.messages": 5})
    log.append(make_batch(3))
    assert log.high_watermark == 0
    log.append(make_batch(3))
    assert log.high_watermark == 6


def test_removed_listener_is_not_called(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    calls = []

    def listener(lg, hw):
        calls.append(hw)

    log.add_high_watermark_listener(listener)
    log.append(make_batch(1))
    log.flush()
    log.remove_high_watermark_listener(listener)
    log.append(make_batch(1))
    log.flush()
    assert calls == [1]


def test_oversize_batch_is_refused_with_nothing_appended(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"max.message.bytes": 500})
    small, big = make_batch(1, 10), make_batch(10, 100)
    with pytest.raises(RecordBatchTooLarge, match="max.message.bytes=500"):
        log.append(small + big)
    assert (log.log_end_offset, log.size_bytes) == (0, 0)


@pytest.mark.parametrize("where", ["first", "last"])
def test_bad_crc_is_refused_with_nothing_appended(tmp_path, flusher, where):
    log = open_log(tmp_path, flusher)
    good = make_batch(2)
    bad = bytearray(make_batch(2))
    bad[-1] ^= 0xFF
    payload = bytes(bad) + good if where == "first" else good + bytes(bad)
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append(payload)
    assert (log.log_end_offset, log.size_bytes) == (0, 0)


@pytest.mark.parametrize("payload", [b"", b"\x00" * 30, "truncated", "bad-magic"])
def test_malformed_record_sets_are_refused(tmp_path, flusher, payload):
    log = open_log(tmp_path, flusher)
    if payload == "truncated":
        payload = make_batch(2)[:-1]
    elif payload == "bad-magic":
        data = bytearray(make_batch(2))
        data[16] = 1
        payload = bytes(data)
    with pytest.raises(CorruptRecordError):
        log.append(payload)
    assert log.log_end_offset == 0


def test_offset_for_timestamp_finds_first_record_at_or_after(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 400, "index.interval.bytes": 0})
    for i in range(20):  # batch i: offsets 2i, 2i+1 with timestamps +100i, +100i+1
        log.append(make_batch(2, 30, timestamp=BASE_TS + 100 * i))
    log.flush()
    assert log.offset_for_timestamp(BASE_TS) == TimestampOffset(BASE_TS, 0)
    assert log.offset_for_timestamp(BASE_TS + 1) == TimestampOffset(BASE_TS + 1, 1)
    assert log.offset_for_timestamp(BASE_TS + 550) == TimestampOffset(BASE_TS + 600, 12)
    assert log.offset_for_timestamp(BASE_TS + 1900) == TimestampOffset(BASE_TS + 1900, 38)
    assert log.offset_for_timestamp(BASE_TS + 1901) == TimestampOffset(BASE_TS + 1901, 39)
    assert log.offset_for_timestamp(BASE_TS + 1902) is None
    log.append(make_batch(1, timestamp=BASE_TS + 10_000))  # not flushed: not visible
    assert log.offset_for_timestamp(BASE_TS + 5000) is None


def test_offset_for_timestamp_with_non_monotonic_timestamps(tmp_path, flusher):
    """Kafka's ListOffsets: the earliest offset whose record timestamp is >= the target, and that timestamp,
    with timestamps out of order inside batches and across them (and across segments)."""
    log = open_log(tmp_path, flusher, **{"segment.bytes": 250, "index.interval.bytes": 0})
    timestamps = [[50, 10, 30], [20, 5], [40, 60, 45], [15], [70, 65, 80]]
    for batch in timestamps:
        log.append(build_batch([(None, b"v", None, BASE_TS + t) for t in batch]))
    log.flush()
    assert len(log.segments) > 1
    flat = [t for batch in timestamps for t in batch]
    for target in range(0, 90):
        expected = next(((BASE_TS + t, o) for o, t in enumerate(flat) if t >= target), None)
        found = log.offset_for_timestamp(BASE_TS + target)
        assert (found and tuple(found)) == expected, target
    assert log.offset_for_timestamp(BASE_TS + 55) == TimestampOffset(BASE_TS + 60, 6)


def test_offset_of_max_timestamp_is_the_first_visible_record_holding_the_largest_timestamp(tmp_path, flusher):
    """ListOffsets MAX_TIMESTAMP (-3, KIP-734): the first record, in offset order, whose timestamp is the
    largest visible one, across segments and inside a batch; unflushed records are not visible."""
    log = open_log(tmp_path, flusher, **{"segment.bytes": 250, "index.interval.bytes": 0})
    assert log.offset_of_max_timestamp() is None
    for batch in [[50, 10, 30], [20, 5], [40, 80, 45], [15], [70, 80, 65]]:
        log.append(build_batch([(None, b"v", None, BASE_TS + t) for t in batch]))
    log.flush()
    assert len(log.segments) > 1
    assert log.offset_of_max_timestamp() == TimestampOffset(BASE_TS + 80, 6)
    log.append(build_batch([(None, b"v", None, BASE_TS + 999)]))  # not flushed: not visible
    assert log.offset_of_max_timestamp() == TimestampOffset(BASE_TS + 80, 6)
    log.flush()
    assert log.offset_of_max_timestamp() == TimestampOffset(BASE_TS + 999, 12)
    one = open_log(tmp_path, flusher, name="one-0")  # one segment, the high watermark inside it
    one.append(build_batch([(None, b"v", None, BASE_TS + t) for t in (5, 9, 7)]))
    one.flush()
    one.append(build_batch([(None, b"v", None, BASE_TS + 50)]))
    assert len(one.segments) == 1 and one.offset_of_max_timestamp() == TimestampOffset(BASE_TS + 9, 1)


def test_offset_for_timestamp_in_compressed_and_log_append_time_batches(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(build_batch([(None, b"a" * 50, None, BASE_TS + t) for t in (30, 10, 40, 20)], compression="gzip"))
    log.append(build_batch([(None, b"b", None, BASE_TS + 5)] * 2, timestamp_type=LOG_APPEND_TIME))
    log.flush()
    assert log.offset_for_timestamp(BASE_TS + 15) == TimestampOffset(BASE_TS + 30, 0)
    assert log.offset_for_timestamp(BASE_TS + 31) == TimestampOffset(BASE_TS + 40, 2)
    assert log.offset_for_timestamp(BASE_TS + 41) is None  # LOG_APPEND_TIME: each record has maxTimestamp
    assert log.offset_for_timestamp(BASE_TS + 5) == TimestampOffset(BASE_TS + 30, 0)


def test_segment_ms_rolls_by_injected_clock(tmp_path, flusher):
    clock = Clock()
    log = open_log(tmp_path, flusher, clock=clock, **{"segment.ms": 1000})
    log.append(make_batch(1))
    clock.now += 999
    log.append(make_batch(1))
    assert len(log.segments) == 1
    clock.now += 1
    log.append(make_batch(1))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_time_retention_deletes_old_segments_then_the_active_one_rolled_first(tmp_path, flusher):
    clock = Clock()
    log = open_log(tmp_path, flusher, clock=clock,
                   **{"segment.bytes": 300, "retention.ms": 1000, "file.delete.delay.ms": 0})
    for i in range(10):
        log.append(make_batch(2, 50, timestamp=BASE_TS + 100 * i))
    log.flush()
    segments = len(log.segments)
    assert log.enforce_retention(now_ms=BASE_TS + 500) == 0
    deleted = log.enforce_retention(now_ms=BASE_TS + 1000 + 450)  # batches with max ts <= BASE_TS+449 expire
    assert deleted >= 1 and len(log.segments) == segments - deleted
    assert log.log_start_offset == log.segments[0].base_offset > 0
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert log.enforce_retention(now_ms=BASE_TS + 10**9) == segments - deleted  # the active one too
    assert [(s.base_offset, s.size) for s in log.segments] == [(20, 0)]
    assert log.log_start_offset == log.log_end_offset == 20
    log.close()  # writes the recovery-point checkpoint (flushes alone write it only every 60 s)
    assert sorted(os.listdir(log.directory)) == sorted(
        [os.path.basename(log.segments[0].path), os.path.basename(log.segments[0].index.path),
         os.path.basename(log.segments[0].time_index.path), "recovery-point-offset-checkpoint",
         # the producer-state snapshot at the roll that started the segment, rewritten at close (producer_state.py)
         snapshot_file_name(20)])


def test_an_expired_active_segment_is_rolled_and_deleted_so_a_quiet_log_empties(tmp_path, flusher):
    """Kafka's retention takes the active segment too (LocalLog.deletableSegments, rolled first by
    UnifiedLog.deleteSegments) once all of it is committed: a quiet topic with retention.ms=1000 kept its
    last segment's records until an append came after segment.ms (7 days by default)."""
    clock = Clock()
    log = open_log(tmp_path, flusher, clock=clock, **{"retention.ms": 1000, "file.delete.delay.ms": 0})
    log.append(make_batch(2, 50, timestamp=BASE_TS))
    log.append(make_batch(2, 50, timestamp=BASE_TS))
    assert log.enforce_retention(now_ms=BASE_TS + 5000) == 0  # not flushed: above the HW, kept
    log.flush()
    assert log.enforce_retention(now_ms=BASE_TS + 1001) == 0  # not yet expired (its largest timestamp: +1)
    assert log.enforce_retention(now_ms=BASE_TS + 1002) == 1
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    assert [(s.base_offset, s.size) for s in log.segments] == [(4, 0)]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    assert log.enforce_retention(now_ms=BASE_TS + 10**9) == 0  # an empty active segment stays
    clock.now = BASE_TS + 2000
    assert log.append(make_batch(1, 50, timestamp=BASE_TS + 2000)) == 4
    log.close()
    reopened = open_log(tmp_path, flusher)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (4, 5)
    reopened.close()


class MtimeFiles(Files):
    """Files whose last-modified time is injected, for retention of segments without timestamps."""

    def __init__(self, mtime_ms):
        self.mtime_ms = mtime_ms

    def modified_ms(self, fd):
        return self.mtime_ms


def test_time_retention_of_segments_without_timestamps_uses_the_file_mtime(tmp_path, flusher):
    files = MtimeFiles(BASE_TS)
    log = PartitionLog.open(str(tmp_path / "topic-0"), {"segment.bytes": 300, "retention.ms": 1000,
                                                         "file.delete.delay.ms": 0, "flush.ms": NEVER},
                            flusher=flusher, files=files)
    for _ in range(6):
        log.append(build_batch([(None, b"x" * 60, None, -1)] * 2))  # timestamp -1: none
    log.flush()
    segments = len(log.segments)
    assert segments > 2 and all(s.max_timestamp == -1 for s in log.segments)
    assert log.enforce_retention(now_ms=BASE_TS + 1000) == 0  # as old as their mtime: not expired (not -1)
    files.mtime_ms = BASE_TS - 1  # last written 1001 ms before now
    assert log.enforce_retention(now_ms=BASE_TS + 1000) == segments  # the active one too, rolled first
    assert len(log.segments) == 1
    log.close()


def test_time_retention_prefers_timestamps_over_the_file_mtime(tmp_path, flusher):
    files = MtimeFiles(0)  # files that look ancient
    log = PartitionLog.open(str(tmp_path / "topic-0"), {"segment.bytes": 300, "retention.ms": 1000,
                                                         "flush.ms": NEVER}, flusher=flusher, files=files)
    for i in range(6):
        log.append(make_batch(2, 50, timestamp=BASE_TS + i))
    log.flush()
    assert len(log.segments) > 2 and log.enforce_retention(now_ms=BASE_TS + 1000) == 0
    log.close()


def test_retention_disabled_with_minus_one_and_never_past_the_hw(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 300, "retention.ms": -1})
    for i in range(10):
        log.append(make_batch(2, 50))
    assert log.enforce_retention(now_ms=BASE_TS + 10**12) == 0
    unflushed = open_log(tmp_path, flusher, "other-0", **{"segment.bytes": 300, "retention.ms": 1})
    for i in range(10):
        unflushed.append(make_batch(2, 50))
    assert unflushed.enforce_retention(now_ms=BASE_TS + 10**12) == 0  # HW is 0: nothing deletable


def test_size_retention_keeps_the_log_within_retention_bytes(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 300, "retention.bytes": 700,
                                         "retention.ms": -1, "file.delete.delay.ms": 0})
    for i in range(12):
        log.append(make_batch(2, 50))
    log.flush()
    before = log.size_bytes
    deleted = log.enforce_retention()
    assert deleted > 0
    # Kafka's rule: delete the oldest segment only while the rest still holds retention.bytes
    assert log.size_bytes - log.segments[0].size < 700 <= log.size_bytes < before


def test_deleted_segment_stays_readable_for_handed_out_slices(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 300, "retention.ms": 1, "file.delete.delay.ms": 200})
    for i in range(6):
        log.append(make_batch(2, 50, tag=i))
    log.flush()
    piece = log.read(0, 10_000)
    expected = piece.read_bytes()
    assert log.enforce_retention(now_ms=BASE_TS + 10**9) > 0
    assert piece.path.endswith(".log")
    assert os.path.exists(log.directory + "/00000000000000000000.log.deleted")
    assert piece.read_bytes() == expected  # still readable: renamed, not closed
    assert os.pread(piece.fileno(), 10, piece.position) == expected[:10]  # a real descriptor, for sendfile
    deadline = time.monotonic() + 5
    while os.path.exists(log.directory + "/00000000000000000000.log.deleted") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(log.directory + "/00000000000000000000.log.deleted")
    with pytest.raises(LogClosedError):
        piece.fileno()


def test_truncate_to_removes_the_tail_and_later_appends_continue(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 300, "file.delete.delay.ms": 0})
    for i in range(10):
        log.append(make_batch(2, 50, tag=i))
    log.flush()
    log.truncate_to(9)  # batch [8, 10) straddles 9: it goes whole
    assert (log.log_end_offset, log.high_watermark) == (8, 8)
    assert log.append(make_batch(2, 50, tag=99)) == 8
    log.flush()
    assert [r.offset for r in iter_records(read_all(log))] == list(range(10))
    log.close()
    reopened = PartitionLog.open(log.directory, {"segment.bytes": 300}, flusher=flusher)
    assert reopened.log_end_offset == 10
    assert list(iter_records(read_all(reopened)))[-1].value.startswith(b"99:1")


def test_truncate_below_the_log_start_restarts_the_log_there(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"file.delete.delay.ms": 0})
    log.append(make_batch(4))
    log.flush()
    log.truncate_to(0)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.append(make_batch(1)) == 0


def test_close_then_reopen_keeps_everything_and_skips_replay(tmp_path, flusher, monkeypatch):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 500})
    for i in range(10):
        log.append(make_batch(3, 40, tag=i))
    log.close()
    with pytest.raises(LogClosedError):
        log.append(make_batch(1))
    from sparklog.storage import segment as segment_module

    recovered = []
    original = segment_module.LogSegment.recover
    monkeypatch.setattr(segment_module.LogSegment, "recover",
                        lambda self, *args: recovered.append(self.base_offset) or original(self, *args))
    reopened = open_log(tmp_path, flusher, **{"segment.bytes": 500})
    assert recovered == [reopened.segments[-1].base_offset]  # only the active one: it is verified before appends
    assert (reopened.log_end_offset, reopened.high_watermark) == (30, 30)
    assert [r.offset for r in iter_records(read_all(reopened))] == list(range(30))


@pytest.mark.parametrize("damage", ["missing", "empty", "odd-size", "garbage", "past-end"])
@pytest.mark.parametrize("which", [".index", ".timeindex"])
def test_missing_or_corrupt_index_is_rebuilt(tmp_path, flusher, damage, which):
    settings = {"segment.bytes": 2000, "index.interval.bytes": 50}
    log = open_log(tmp_path, flusher, **settings)
    for i in range(30):
        log.append(make_batch(2, 40, tag=i, timestamp=BASE_TS + i))
    log.close()
    path = os.path.join(log.directory, "00000000000000000000" + which)
    good = open(path, "rb").read()
    assert len(good) > 24
    if damage == "missing":
        os.unlink(path)
    else:
        bad = {"empty": b"", "odd-size": good[:-3], "garbage": os.urandom(len(good)),
               "past-end": good[:-16] + b"\x00\x00\x00\x7f\x7f\xff\xff\xff" * 2}[damage]
        open(path, "wb").write(bad)
    reopened = open_log(tmp_path, flusher, **settings)
    assert [r.offset for r in iter_records(read_all(reopened))] == list(range(60))
    for offset in range(0, 60, 7):
        assert next(iter_batches(reopened.read(offset, 1).read_bytes())).last_offset >= offset
    assert reopened.offset_for_timestamp(BASE_TS + 20) == TimestampOffset(BASE_TS + 20, 39)  # batch 19's 2nd
    reopened.close()
    assert open(path, "rb").read() == good


@pytest.mark.parametrize("name", ["topic", "topic-x", "-1", "topic-01", "bad/name-0".replace("/", "$"), "..-0",
                                  "a" * 250 + "-0", "topic-1-", "topic-+1"])
def test_illegal_directory_names_are_refused(tmp_path, flusher, name):
    with pytest.raises(InvalidTopicName):
        PartitionLog.open(str(tmp_path / name), flusher=flusher)


def test_topic_names_with_dashes_and_dots_are_fine(tmp_path, flusher):
    log = PartitionLog.open(str(tmp_path / "my-topic.v2-12"), flusher=flusher)
    assert (log.topic, log.partition) == ("my-topic.v2", 12)


def test_statistics_count_appends_flushes_and_rolls(tmp_path, flusher):
    log = open_log(tmp_path, flusher, **{"segment.bytes": 300})
    for i in range(5):
        log.append(make_batch(2, 50))
    log.flush()
    stats = log.statistics()
    assert (stats.appends, stats.log_end_offset, stats.high_watermark) == (5, 10, 10)
    assert stats.rolls == stats.segments - 1 > 0 and stats.size_bytes == log.size_bytes
    assert stats.flushes >= 1 and stats.unflushed_messages == 0


def test_delete_removes_the_directory(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(2))
    log.delete()
    assert not os.path.exists(log.directory)
    with pytest.raises(LogClosedError):
        log.read(0, 10)


# -- the recovery-point checkpoint ------------------------------------------------------------------


def read_checkpoint(log):
    with open(os.path.join(log.directory, RECOVERY_POINT_FILE)) as f:
        return int(f.read().split()[-1])


def test_flushes_do_not_rewrite_the_checkpoint_until_the_interval_passes(tmp_path, flusher):
    log = PartitionLog.open(str(tmp_path / "topic-0"), {"flush.ms": NEVER}, flusher=flusher,
                            checkpoint_interval_ms=300)
    started = time.monotonic()
    for i in range(5):
        log.append(make_batch(2, tag=i))
        log.flush()
    if time.monotonic() - started < 0.3:  # (a very slow machine may legitimately have checkpointed once)
        assert log.statistics().checkpoints == 0 and not os.path.exists(
            os.path.join(log.directory, RECOVERY_POINT_FILE))
    assert log.recovery_point == log.high_watermark == 10  # the point moves at every flush, the file lags
    assert log.flush_due(time.monotonic() + 0.3)  # the Flusher picks a due checkpoint up...
    deadline = time.monotonic() + 5
    while log.statistics().checkpoints == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.statistics().checkpoints == 1 and read_checkpoint(log) == 10  # ...within a tick of the interval
    assert not log.flush_due(time.monotonic() + 10**6)  # nothing to flush, checkpoint current
    log.close()
    assert log.statistics().checkpoints == 1  # already current: close does not rewrite it


def test_close_writes_the_checkpoint_and_the_next_open_skips_the_replay(tmp_path, flusher):
    log = open_log(tmp_path, flusher)  # default interval: 60 s
    for i in range(5):
        log.append(make_batch(2, tag=i))
        log.flush()
    assert log.statistics().checkpoints == 0
    log.close()
    assert log.statistics().checkpoints == 1 and read_checkpoint(log) == 10
    reopened = open_log(tmp_path, flusher)
    assert reopened.recovery_point == 10 and reopened.statistics().checkpoints == 0
    reopened.close()


def test_checkpoint_interval_zero_checkpoints_at_every_flush_that_moves_the_point(tmp_path, flusher):
    log = PartitionLog.open(str(tmp_path / "topic-0"), {"flush.ms": NEVER}, flusher=flusher,
                            checkpoint_interval_ms=0)
    for i in range(3):
        log.append(make_batch(2, tag=i))
        log.flush()
        log.flush()  # moves nothing
        assert read_checkpoint(log) == 2 * (i + 1)
    assert log.statistics().checkpoints == 1 + 3  # the new log's first (offset 0), at open, then one per move
    log.close()


def test_truncation_rewrites_a_checkpoint_that_names_removed_offsets_at_once(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    for i in range(5):
        log.append(make_batch(2, tag=i))
    log.close()
    log = open_log(tmp_path, flusher)
    assert read_checkpoint(log) == 10
    log.truncate_to(4)
    assert read_checkpoint(log) == 4  # not 60 s later: a replay from 10 would trust unchecked bytes
    log.append(make_batch(3))
    log.flush()
    assert read_checkpoint(log) == 4 and log.recovery_point == 7
    log.close()


# -- FileSlice descriptors --------------------------------------------------------------------------


def test_a_pinned_slice_keeps_its_descriptor_through_close(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    log.append(make_batch(3))
    log.flush()
    piece = log.read(0, 10_000)
    expected = piece.read_bytes()
    with piece.pinned() as fd:
        log.close()  # from another thread in real life: the descriptor must survive the block
        other = os.open(os.path.join(str(tmp_path), "unrelated"), os.O_RDWR | os.O_CREAT)
        try:
            assert other != fd  # the number was not released, so it cannot be reused
            assert os.pread(fd, piece.length, piece.position) == expected
        finally:
            os.close(other)
    with pytest.raises(OSError):
        os.fstat(fd)  # the last unpin closed it
    with pytest.raises(LogClosedError):
        piece.read_bytes()
    with pytest.raises(LogClosedError):
        with piece.pinned():
            pass


def test_send_to_sends_the_slices_bytes_and_nothing_once_the_log_is_closed(tmp_path, flusher):
    log = open_log(tmp_path, flusher)
    for tag in range(3):
        log.append(make_batch(3, tag=tag))
    log.flush()
    piece = log.read(3, 10_000)  # from the second batch: the slice starts inside the file
    expected = piece.read_bytes()
    out, peer = socket.socketpair()
    try:
        assert piece.send_to(out.fileno(), 0, 10) + piece.send_to(out.fileno(), 10, piece.length - 10) == piece.length
        assert peer.recv(piece.length, socket.MSG_WAITALL) == expected
        log.close()
        with pytest.raises(LogClosedError):
            piece.send_to(out.fileno(), 0, piece.length)
        peer.setblocking(False)
        with pytest.raises(BlockingIOError):
            peer.recv(1)  # nothing went out
    finally:
        out.close()
        peer.close()


def test_slices_read_concurrently_with_close_never_see_another_file(tmp_path, flusher):
    for trial in range(20):
        log = open_log(tmp_path, flusher, name=f"topic-{trial}")
        log.append(make_batch(3, tag=trial))
        log.flush()
        piece = log.read(0, 10_000)
        expected = piece.read_bytes()
        seen, stop = [], threading.Event()

        def reader():
            while not stop.is_set():
                try:
                    seen.append(piece.read_bytes())
                except LogClosedError:
                    return

        def opener():  # competes for descriptor numbers with files of other content
            while not stop.is_set():
                fd = os.open(os.path.join(str(tmp_path), "decoy"), os.O_RDWR | os.O_CREAT)
                os.pwrite(fd, b"\xee" * len(expected), 0)
                os.close(fd)

        threads = [threading.Thread(target=reader), threading.Thread(target=opener)]
        for t in threads:
            t.start()
        time.sleep(0.005)
        log.close()
        time.sleep(0.005)
        stop.set()
        for t in threads:
            t.join()
        assert seen and all(data == expected for data in seen)


def test_verify_for_time_lookup_covers_every_segment_a_time_lookup_would_replay(tmp_path, monkeypatch):
    """The broker runs it off its event loop before a time lookup (handlers.py): afterwards the lookup replays
    nothing, also for a closed segment not yet flushed and for the active one, which `scrub(None, True)` skips."""
    never = 10**12
    settings = {"flush.messages": never, "flush.ms": never, "flush.visibility": "appended"}
    with LogManager(str(tmp_path), settings) as manager:
        log = manager.get_or_create("t", 0)
        log.append(make_batch(2, 50, tag=0))
        log.roll()
        log.append(make_batch(2, 50, tag=1))
        for segment in log.segments:
            segment.verified = False  # as a reopened log leaves its loaded segments (Rule: verify-before-first-use)
        assert log.scrub(None, True) == 0 and log.has_unverified_segments()  # unflushed: the scrubber's rule
        assert log.verify_for_time_lookup() > 0
        assert not log.has_unverified_segments()
        monkeypatch.setattr(log, "_verify", lambda *a: pytest.fail("the time lookup replayed a segment"))
        assert log.offset_for_timestamp(BASE_TS).offset == 0
