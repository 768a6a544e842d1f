"""append_check.check_sets: the compiled twin equals the pure-Python one on whole, damaged, cut and foreign
record sets, and the pure one's verdicts are validate_batch's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sparklog.records import _cappend_check, append_check, batch, implementation, verify
from sparklog.records.append_check import CORRUPT, REFUSED_ATTRIBUTES, REFUSED_SIZE, check_sets, py_check_sets
from sparklog.records.batch import CorruptRecordError, build_batch, validate_batch

TWINS = {implementation.CYTHON: _cappend_check.check_sets, implementation.PYTHON: py_check_sets}


@st.composite
def record_sets(draw):
    """A batch as a client sends it, then perhaps damaged: a byte changed, cut, grown, or not a batch."""
    records = [(draw(st.none() | st.binary(max_size=8)), draw(st.binary(max_size=60)), None, None)
               for _ in range(draw(st.integers(1, 4)))]
    data = bytearray(build_batch(records, producer_id=draw(st.sampled_from([-1, 7])), producer_epoch=0,
                                 base_sequence=0))
    damage = draw(st.sampled_from(["none", "byte", "cut", "grow", "control", "transactional", "foreign", "none-set"]))
    if damage == "byte":
        data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
    elif damage == "cut":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "grow":
        data += draw(st.binary(min_size=1, max_size=70))
    elif damage == "control":
        data[22] |= 0x20
    elif damage == "transactional":
        data[22] |= 0x10
    elif damage == "foreign":
        data = bytearray(draw(st.binary(max_size=120)))
    elif damage == "none-set":
        return None
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(data)


@settings(max_examples=400, deadline=None)
@given(sets=st.lists(record_sets(), max_size=6), max_bytes=st.sampled_from([0, 100, 1 << 20]))
def test_the_twins_agree_and_the_verdicts_are_validate_batchs(sets, max_bytes):
    expected = py_check_sets(sets, max_bytes)
    assert TWINS[implementation.CYTHON](sets, max_bytes) == expected
    for records, verdict in zip(sets, expected):
        if verdict is None:
            assert records is None or len(records) < batch.HEADER_SIZE or batch.peek_size(records, 0) != len(records)
        elif verdict == CORRUPT:
            with pytest.raises(CorruptRecordError):
                validate_batch(records)
        elif verdict == REFUSED_SIZE:
            assert len(records) > max_bytes
        elif verdict != REFUSED_ATTRIBUTES:
            validate_batch(records)
            assert verdict == append_check.APPEND_FIELDS.unpack_from(records) and len(records) <= max_bytes


def test_check_sets_runs_the_compiled_twin_unless_extensions_are_disabled(monkeypatch):
    monkeypatch.setattr(_cappend_check, "check_sets", lambda sets, max_bytes: ["compiled"])
    sets = [build_batch([(None, b"v", None, None)])]
    compiled = not implementation.extensions_disabled()
    assert batch.CODEC.name == (implementation.CYTHON if compiled else implementation.PYTHON)
    assert check_sets(sets, 1000) == (["compiled"] if compiled else py_check_sets(sets, 1000))


@st.composite
def leader_sets(draw):
    """A record set of one to four batches as a client sends it, then perhaps damaged or made one the plain
    path does not take (check_leader_set Rule 3)."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        records = [(draw(st.none() | st.binary(max_size=8)), draw(st.binary(max_size=60)), None, None)
                   for _ in range(draw(st.integers(1, 3)))]
        kind = draw(st.sampled_from(["plain"] * 5 + ["idempotent"] * 3 + ["gzip", "lz4", "transactional", "control",
                                                                         "append-time", "records", "byte",
                                                                         "codec-7", "lz4-records"]))
        idempotent = kind == "idempotent"
        codec = {"gzip": "gzip", "lz4": "lz4", "lz4-records": "lz4"}.get(kind, "none")
        data = bytearray(build_batch(records, compression=codec,
                                     producer_id=draw(st.sampled_from([0, 7, (1 << 63) - 1])) if idempotent else -1,
                                     producer_epoch=draw(st.sampled_from([0, 3, 32767])) if idempotent else -1,
                                     base_sequence=draw(st.sampled_from([-5, -1, 0, 9, (1 << 31) - 1]))
                                     if idempotent else -1,
                                     is_transactional=kind == "transactional", is_control=kind == "control"))
        if kind == "append-time":
            data[22] |= 0x08
        elif kind == "codec-7":  # no codec at all, behind a right CRC
            data[22] |= 0x07
            data[17:21] = batch.compute_crc(data).to_bytes(4, "big")
        elif kind == "lz4-records":  # a compressed section that does not decompress, behind a right CRC
            data[61 + draw(st.integers(0, len(data) - 62))] ^= draw(st.integers(1, 255))
            data[17:21] = batch.compute_crc(data).to_bytes(4, "big")
        elif kind == "records":  # records that do not parse behind a right CRC
            data[61 + draw(st.integers(0, len(data) - 62))] ^= draw(st.integers(1, 255))
            data[17:21] = batch.compute_crc(data).to_bytes(4, "big")
        elif kind == "byte":
            data[draw(st.integers(0, len(data) - 1))] ^= draw(st.integers(1, 255))
        parts.append(bytes(data))
    data = b"".join(parts)
    damage = draw(st.sampled_from(["none"] * 4 + ["cut", "grow", "foreign", "none-set"]))
    if damage == "cut":
        data = data[:draw(st.integers(0, len(data) - 1))]
    elif damage == "grow":
        data += draw(st.binary(min_size=1, max_size=70))
    elif damage == "foreign":
        data = draw(st.binary(max_size=200))
    elif damage == "none-set":
        return None
    return draw(st.sampled_from([bytes, bytearray, memoryview]))(data)


@settings(max_examples=500, deadline=None)
@given(records=leader_sets(), max_bytes=st.sampled_from([0, 100, 1 << 20]))
def test_check_leader_set_twins_agree_and_take_only_good_plain_sets(records, max_bytes):
    expected = append_check.py_check_leader_set(records, max_bytes)
    assert _cappend_check.check_leader_set(records, max_bytes) == expected
    if expected is None:
        return
    entries, offsets, messages, idempotent = expected
    found = list(batch.iter_batches(bytes(records)))
    assert entries == [(sum(b.size for b in found[:i]), b.size, b.last_offset_delta + 1, b.max_timestamp,
                        b.producer_id, b.producer_epoch, b.base_sequence) for i, b in enumerate(found)]
    assert sum(b.size for b in found) == len(records)
    assert offsets == sum(b.record_count for b in found) == messages
    assert idempotent == sum(b.producer_id >= 0 for b in found)
    for b, (position, size, *_) in zip(found, entries):
        piece = memoryview(records)[position:position + size]
        validate_batch(piece)
        assert verify.records_error(piece) is None and size <= max_bytes
        assert not b.attributes & append_check.NOT_PLAIN
        assert b.producer_id == -1 or b.base_sequence >= 0  # a negative one: the general path refuses it


def test_check_leader_set_takes_compressed_batches_whose_records_parse():
    """A compressed batch is decompressed to be checked (verify.py); one whose section does not hold its
    recordCount records is the general path's, which refuses it with the reason."""
    good = build_batch([(None, b"v" * 50, None, None)] * 3, compression="lz4", producer_id=1, producer_epoch=0,
                       base_sequence=0)
    short = bytearray(build_batch([(None, b"v" * 50, None, None)] * 3, compression="gzip"))
    short[57:61] = (4).to_bytes(4, "big")  # recordCount 4 of 3 records, lastOffsetDelta 2
    short[23:27] = (3).to_bytes(4, "big")
    short[17:21] = batch.compute_crc(short).to_bytes(4, "big")
    for twin in (_cappend_check.check_leader_set, append_check.py_check_leader_set):
        assert twin(good, 1 << 20) == ([(0, len(good), 3, batch.parse_header(good).max_timestamp,
                                         1, 0, 0)], 3, 3, 1)
        assert twin(good + bytes(short), 1 << 20) is None


def test_check_leader_set_takes_an_idempotent_producers_set_and_leaves_a_negative_sequence():
    """An idempotent producer's set is plain (its producer fields for the caller's check); one with a
    negative baseSequence is the general path's, which refuses it with Kafka's message."""
    good = build_batch([(None, b"v", None, None)] * 2, producer_id=9, producer_epoch=2, base_sequence=40)
    plain = build_batch([(None, b"w", None, None)])
    for twin in (_cappend_check.check_leader_set, append_check.py_check_leader_set):
        entries, offsets, messages, idempotent = twin(good + plain, 1 << 20)
        assert [e[4:] for e in entries] == [(9, 2, 40), (-1, -1, -1)] and (offsets, messages, idempotent) == (3, 3, 1)
        bad = build_batch([(None, b"v", None, None)], producer_id=9, producer_epoch=2, base_sequence=-1)
        assert twin(plain + bad, 1 << 20) is None


def test_check_leader_set_runs_the_compiled_twin_unless_extensions_are_disabled(monkeypatch):
    monkeypatch.setattr(_cappend_check, "check_leader_set", lambda records, max_bytes: "compiled")
    records = build_batch([(None, b"v", None, None)]) * 2
    compiled = not implementation.extensions_disabled()
    assert append_check.check_leader_set(records, 1000) == (
        "compiled" if compiled else append_check.py_check_leader_set(records, 1000))


def _stamped(twin, data: bytearray, args: tuple):
    try:
        return twin(data, *args), bytes(data)
    except ValueError as exc:
        return str(exc), None


@settings(max_examples=300, deadline=None)
@given(records=leader_sets(), first=st.integers(0, 1 << 40), epoch=st.integers(0, (1 << 31) - 1),
       since=st.integers(0, 5000), interval=st.sampled_from([0, 100, 4096]), max_ts=st.integers(-1, 1 << 42))
def test_stamp_leader_set_twins_agree_and_stamp_as_the_headers_say(records, first, epoch, since, interval, max_ts):
    data = bytearray(b"" if records is None else records)
    args = (first, epoch, since, interval, max_ts, first - 1)
    expected = _stamped(append_check.py_stamp_leader_set, bytearray(data), args)
    assert _stamped(_cappend_check.stamp_leader_set, bytearray(data), args) == expected
    if expected[1] is not None and append_check.py_check_leader_set(records, 1 << 20) is not None:
        found = list(batch.iter_batches(expected[1]))
        assert [b.base_offset for b in found] == [first + sum(b.record_count for b in found[:i]) for i in range(len(found))]
        assert {b.partition_leader_epoch for b in found} <= {epoch} and expected[0][0] == found[-1].next_offset


@settings(max_examples=200, deadline=None)
@given(records=leader_sets(), first=st.integers(0, 1 << 40), since=st.integers(0, 5000))
def test_stamp_leader_set_with_keep_epoch_stamps_offsets_and_leaves_each_batchs_epoch(records, first, since):
    """KEEP_EPOCH (a plain or a follower's append): both twins stamp the offsets alike and leave every
    batch's partitionLeaderEpoch as it came."""
    data = bytearray(b"" if records is None else records)
    args = (first, append_check.KEEP_EPOCH, since, 4096, -1, first - 1)
    expected = _stamped(append_check.py_stamp_leader_set, bytearray(data), args)
    assert _stamped(_cappend_check.stamp_leader_set, bytearray(data), args) == expected
    if expected[1] is not None and append_check.py_check_leader_set(records, 1 << 20) is not None:
        found, sent = list(batch.iter_batches(expected[1])), list(batch.iter_batches(bytes(data)))
        assert [b.partition_leader_epoch for b in found] == [b.partition_leader_epoch for b in sent]
        assert [b.base_offset for b in found] == [first + sum(b.record_count for b in found[:i]) for i in range(len(found))]
