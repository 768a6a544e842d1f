"""PartitionLog.offset_for_timestamp (ListOffsets by time): the first visible record whose timestamp is >= the
target, as a scan of every record finds it, for any log of batches with any timestamps (out of order inside
batches and across them and across segments), compressed or not, CreateTime or LogAppendTime, before and after
a reopen (unverified segments); with both record codecs. And what a lookup costs: the segment search is a
bisection (time_bounds.py) and the batch that answers is read only up to the answer."""

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.storage_batches import BASE_TS
from sparklog.records.batch import build_batch, iter_records
from sparklog.storage import PartitionLog, TimestampOffset
from sparklog.storage.segment import SEEK_READ_BYTES, LogSegment
from sparklog.storage.time_bounds import TimeBounds

NEVER = 10**12  # flush.ms that the background flusher never reaches in a test

batch_spec = st.tuples(st.lists(st.integers(-1, 80), min_size=1, max_size=6),  # record timestamps - BASE_TS
                       st.sampled_from(["none", "none", "gzip", "lz4"]),
                       st.integers(1, 150))  # value size: batches of different sizes fill segments unevenly


def open_log(directory, flusher, **settings):
    return PartitionLog.open(os.path.join(directory, "t-0"), {"flush.ms": NEVER, **settings}, flusher=flusher)


def scanned(log):
    """(offset, timestamp) of every visible record, read back."""
    found = []
    for piece in log.iter_slices(log.log_start_offset):
        found.extend((r.offset, r.timestamp) for r in iter_records(piece.read_bytes()))
    return found


def brute_force(records, target):
    return next((TimestampOffset(t, o) for o, t in records if t >= target), None)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch_spec, min_size=1, max_size=12), segment_bytes=st.sampled_from([300, 1200, 10**6]),
       interval=st.sampled_from([0, 150, 4096]), append_time=st.booleans(), reopen=st.booleans())
def test_a_lookup_finds_what_a_scan_of_every_record_finds(codec, tmp_path, flusher, batches, segment_bytes,
                                                          interval, append_time, reopen):
    settings = {"segment.bytes": segment_bytes, "index.interval.bytes": interval}
    if append_time:
        settings["message.timestamp.type"] = "LogAppendTime"
    directory = tempfile.mkdtemp(dir=tmp_path)
    log = open_log(directory, flusher, **settings)
    try:
        for stamps, compression, size in batches:
            records = [(None, b"v" * size, None, BASE_TS + t if t >= 0 else -1) for t in stamps]
            log.append(build_batch(records, compression=compression), append_time_ms=BASE_TS + max(stamps) // 2)
        log.flush()
        if reopen:  # every segment loaded from its index files, unverified until a lookup verifies it
            log.close()
            log = open_log(directory, flusher, **settings)
        records = scanned(log)
        assert len(records) == sum(len(b[0]) for b in batches)
        stamps = sorted({t for _, t in records})
        for target in sorted({0, *stamps, *(t + 1 for t in stamps), BASE_TS - 1}):
            assert log.offset_for_timestamp(target) == brute_force(records, target), target
    finally:
        log.close()


@given(maxima=st.lists(st.integers(-1, 50), min_size=1, max_size=30), target=st.integers(-2, 52))
def test_time_bounds_name_the_first_segment_that_may_answer(maxima, target):
    """time_bounds.py Rule: bounds-skip-active over any largest timestamps (not growing from segment to segment)."""
    segments = tuple(type("Segment", (), {"max_timestamp": m})() for m in maxima)
    first = next((i for i, m in enumerate(maxima[:-1]) if m >= target), len(maxima) - 1)
    assert TimeBounds(segments).first_candidate(target) == first


def test_a_lookup_reads_the_batch_that_answers_only_up_to_the_answer(tmp_path, flusher, monkeypatch):
    """A 1 MB batch answers a lookup for its second record with one read of SEEK_READ_BYTES, not the batch."""
    log = open_log(str(tmp_path), flusher)
    log.append(build_batch([(None, b"v" * 1000, None, BASE_TS + i) for i in range(1000)]))
    log.flush()
    reads = []
    real = LogSegment._read_exact
    monkeypatch.setattr(LogSegment, "_read_exact", lambda self, at, n: reads.append(n) or real(self, at, n))
    assert log.offset_for_timestamp(BASE_TS + 1) == TimestampOffset(BASE_TS + 1, 1)
    assert reads == [SEEK_READ_BYTES]
    reads.clear()
    assert log.offset_for_timestamp(BASE_TS + 999) == TimestampOffset(BASE_TS + 999, 999)
    assert sum(reads) < 1000 * 1010 and len(reads) > 1  # the whole batch, a chunk at a time


def test_a_lookup_searches_from_the_segment_that_may_answer(tmp_path, flusher, monkeypatch):
    """With many segments, a lookup asks only segments from the bisection's on, and the bisection is built
    once per list of segments (a roll makes a new one)."""
    log = open_log(str(tmp_path), flusher, **{"segment.bytes": 200})
    for i in range(40):
        log.append(build_batch([(None, b"v" * 100, None, BASE_TS + 10 * i)]))
    log.flush()
    assert len(log.segments) >= 40
    asked = []
    real = LogSegment.find_timestamp
    monkeypatch.setattr(LogSegment, "find_timestamp", lambda self, *a: asked.append(self.base_offset) or real(self, *a))
    assert log.offset_for_timestamp(BASE_TS + 305) == TimestampOffset(BASE_TS + 310, 31)
    assert asked == [31]
    bounds = log._time_bounds
    assert log.offset_for_timestamp(BASE_TS + 5) == TimestampOffset(BASE_TS + 10, 1)
    assert log._time_bounds is bounds
    log.append(build_batch([(None, b"v" * 100, None, BASE_TS + 1)]))  # out of order, in a new segment
    log.flush()
    assert log.offset_for_timestamp(BASE_TS + 391) is None
    assert log.offset_for_timestamp(BASE_TS + 1) == TimestampOffset(BASE_TS + 10, 1)
    assert log._time_bounds is not bounds
