"""seek_timestamp(), a lookup by time's walk over one batch's record heads, a chunk at a time: the first record at
or after the target, as a scan of every decoded record finds it, for any records and any chunking, with the
compiled codec and with the pure-Python one; malformed records raise."""

from itertools import cycle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records.batch import HEADER_SIZE, LOG_APPEND_TIME, CorruptRecordError, build_batch, encode_varint, iter_batches
from sparklog.records.seek import END, FOUND, MORE, seek_timestamp

BASE_OFFSET = 1000


def one(data):
    (batch,) = list(iter_batches(data))
    return batch


def expected(batch, target):
    columns = batch.columns()
    return next(((t, o) for t, o in zip(columns.timestamps, columns.offsets) if t >= target), None)


def walk(batch, target, chunk_sizes):
    """What LogSegment does: read a chunk of the records section, walk it, read on from where the walk stopped."""
    section = batch.raw[HEADER_SIZE:].tobytes()
    log_append = batch.max_timestamp if batch.timestamp_type else None
    at, remaining, sizes = 0, batch.record_count, cycle(chunk_sizes)
    while True:
        length = min(next(sizes), len(section) - at)
        assert length > 0
        found = seek_timestamp(section[at:at + length], 0, batch.base_offset, batch.base_timestamp, log_append,
                               target, remaining, at + length >= len(section))
        if found.status != MORE:
            return (found.timestamp, found.offset) if found.status == FOUND else None
        assert 0 < found.position and found.walked >= 0
        remaining -= found.walked
        at += found.position


record = st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=90),
                   st.none() | st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=4)), max_size=2),
                   st.integers(0, 2**62))


@settings(max_examples=150)
@given(records=st.lists(record, min_size=1, max_size=25), log_append=st.booleans(),
       chunk_sizes=st.lists(st.integers(31, 300), min_size=1, max_size=4), data=st.data())
def test_the_walk_finds_what_a_scan_of_every_record_finds(codec, records, log_append, chunk_sizes, data):
    """Timestamps in any order (a 10-byte timestampDelta included: the compiled walk hands it to Python);
    targets at, between and beyond them; chunks of any size a record head fits in."""
    batch = one(build_batch(records, base_offset=BASE_OFFSET, timestamp_type=LOG_APPEND_TIME if log_append else 0))
    stamps = sorted({r[3] for r in records})
    targets = data.draw(st.lists(st.sampled_from(stamps) | st.integers(-1, 2**62 + 1), min_size=1, max_size=6))
    for target in targets + [stamps[0], stamps[-1], stamps[-1] + 1]:
        assert walk(batch, target, chunk_sizes) == expected(batch, target), target


def test_a_walk_stops_at_a_head_cut_by_the_chunk_and_skips_bodies_past_it(codec):
    batch = one(build_batch([(None, b"v" * 100, None, 10 + i) for i in range(5)], base_offset=BASE_OFFSET))
    section = batch.raw[HEADER_SIZE:].tobytes()
    record_size = len(section) // 5
    found = seek_timestamp(section[:record_size + 3], 0, BASE_OFFSET, batch.base_timestamp, None, 12, 5, False)
    assert found == (MORE, record_size, 1, -1, -1)  # the second head is cut: read again from its start
    found = seek_timestamp(section[:record_size + 40], 0, BASE_OFFSET, batch.base_timestamp, None, 12, 5, False)
    assert found == (MORE, 2 * record_size, 2, -1, -1)  # past the chunk: its body was not needed
    found = seek_timestamp(section[2 * record_size:], 0, BASE_OFFSET, batch.base_timestamp, None, 12, 3, True)
    assert found == (FOUND, 0, 0, BASE_OFFSET + 2, 12)
    found = seek_timestamp(section, 0, BASE_OFFSET, batch.base_timestamp, None, 15, 5, True)
    assert found == (END, len(section), 5, -1, -1)


def malformed_sections():
    good = one(build_batch([(None, b"value", None, 10), (None, b"value", None, 20)])).raw[HEADER_SIZE:].tobytes()
    return {
        "cut short": good[:-3],
        "a length past the end": encode_varint(1000) + good[1:],
        "a negative length": encode_varint(-5) + good[1:],
        "a head longer than its record": encode_varint(2) + good[1:],
        "an 11-byte varint": b"\xff" * 11 + good,
    }


@pytest.mark.parametrize("name", sorted(malformed_sections()))
def test_malformed_records_raise(codec, name):
    section = malformed_sections()[name]
    with pytest.raises(CorruptRecordError):
        seek_timestamp(section, 0, 0, 10, None, 20, 2, True)


def test_more_records_claimed_than_the_section_holds_raise(codec):
    section = one(build_batch([(None, b"value", None, 10)])).raw[HEADER_SIZE:].tobytes()
    with pytest.raises(CorruptRecordError, match="past the batch's end"):
        seek_timestamp(section, 0, 0, 10, None, 20, 2, True)


def test_the_compiled_walk_takes_ordinary_batches_itself():
    """Rule 3: it defers only what it does not take, so it must answer an ordinary batch on its own."""
    from sparklog.records import _cseek
    from sparklog.records.seek import _seek_python

    batch = one(build_batch([(b"k", b"v" * 50, None, 10 + i % 7) for i in range(40)], base_offset=BASE_OFFSET))
    section = batch.raw[HEADER_SIZE:].tobytes()
    for target, chunk, final in ((13, section, True), (99, section, True), (16, section[:500], False)):
        args = (chunk, 0, BASE_OFFSET, batch.base_timestamp, None, target, 40, final)
        assert _cseek.seek_timestamp(*args) == tuple(_seek_python(*args))
