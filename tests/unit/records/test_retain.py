"""retain(): a batch rewritten with some of its records, for every codec, with headers and null values."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records.batch import LOG_APPEND_TIME, build_batch, iter_batches, validate_batch
from sparklog.records.compression import CODECS
from sparklog.records.retain import record_spans, retain, retain_scanned
from sparklog.records.scan import scan

RECORDS = [(b"k%d" % i, None if i == 2 else b"value-%d" % i, [("h", b"x%d" % i), ("n", None)] if i % 2 else None,
            1_700_000_000_000 + 7 * i) for i in range(6)]


def one(data):
    (batch,) = list(iter_batches(data))
    return batch


@pytest.mark.parametrize("codec", sorted(CODECS))
@settings(max_examples=25, deadline=None)
@given(keep=st.lists(st.booleans(), min_size=6, max_size=6))
def test_kept_records_keep_offset_timestamp_key_value_and_headers(codec, keep):
    original = one(build_batch(RECORDS, compression=codec, base_offset=100, producer_id=9, producer_epoch=2,
                               base_sequence=40, partition_leader_epoch=5))
    out = retain(original, original.columns(), keep)
    if all(keep):
        assert out is None  # Rule 4: unchanged
        return
    rewritten = one(out)
    validate_batch(out)  # a fresh, correct CRC
    expected = [r for r, k in zip(original.records(), keep) if k]
    assert list(rewritten.records()) == expected
    same = ("base_offset", "last_offset_delta", "base_timestamp", "max_timestamp", "producer_id", "producer_epoch",
            "base_sequence", "partition_leader_epoch")
    assert all(getattr(rewritten, f) == getattr(original, f) for f in same)  # Rule 1: offsets never change
    assert rewritten.record_count == len(expected)
    assert rewritten.compression == (original.compression if expected else 0)  # Rules 2 and 3


def test_an_emptied_batch_keeps_its_header_and_its_offsets():
    original = one(build_batch(RECORDS, compression="zstd", base_offset=10, timestamp_type=LOG_APPEND_TIME))
    empty = one(retain(original, original.columns(), [False] * 6))
    assert (empty.base_offset, empty.next_offset, empty.record_count) == (10, 16, 0)
    assert empty.timestamp_type == original.timestamp_type and list(empty.records()) == []
    assert empty.size == 61


def test_record_spans_cover_the_section_exactly():
    data = build_batch(RECORDS)
    section = data[61:]
    spans = record_spans(section, 6)
    assert spans[0][0] == 0 and spans[-1][1] == len(section)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


def test_consecutive_empty_batches_of_one_producer_coalesce_into_one_header():
    from sparklog.records.retain import can_extend, extend_empty

    def emptied(base, count, **fields):
        b = one(build_batch(RECORDS[:count], base_offset=base, **fields))
        out = retain(b, b.columns(), [False] * count)
        return one(out), out

    (a, a_raw), (b, _), (c, _) = emptied(0, 3), emptied(3, 2), emptied(5, 4)
    header, raw = extend_empty(a_raw, b)
    assert can_extend(a, b) and can_extend(header, c)
    header, raw = extend_empty(raw, c)
    merged = one(raw)
    validate_batch(raw)
    assert (merged.base_offset, merged.next_offset, merged.record_count) == (0, 9, 0) == (
        header.base_offset, header.next_offset, header.record_count)
    assert merged.max_timestamp == max(a.max_timestamp, b.max_timestamp, c.max_timestamp)
    assert not can_extend(a, emptied(4, 2)[0])  # not adjacent
    assert not can_extend(a, emptied(3, 2, producer_id=7, producer_epoch=0, base_sequence=0)[0])  # another producer
    p, _ = emptied(0, 3, producer_id=7, producer_epoch=0, base_sequence=10)
    assert can_extend(p, emptied(3, 2, producer_id=7, producer_epoch=0, base_sequence=13)[0])
    assert not can_extend(p, emptied(3, 2, producer_id=7, producer_epoch=0, base_sequence=20)[0])  # a sequence gap


@pytest.mark.parametrize("codec", ["none", "zstd"])
@settings(max_examples=25, deadline=None)
@given(keep=st.lists(st.booleans(), min_size=6, max_size=6).filter(any), horizon=st.integers(0, 2**62),
       log_append=st.booleans())
def test_a_delete_horizon_is_written_and_every_kept_record_keeps_its_timestamp(codec, keep, horizon, log_append):
    """Rule 5 (KIP-534): the horizon is the baseTimestamp, marked by its attribute bit; the records' deltas
    follow it, so their timestamps, like everything else about them, do not change."""
    original = one(build_batch(RECORDS, compression=codec, base_offset=100,
                               timestamp_type=LOG_APPEND_TIME if log_append else 0))
    rewritten = one(retain_scanned(original, scan(original), bytes(keep), delete_horizon=horizon))
    validate_batch(rewritten.raw)
    assert rewritten.delete_horizon_ms == horizon and original.delete_horizon_ms is None
    assert rewritten.max_timestamp == original.max_timestamp and rewritten.compression == original.compression
    assert [tuple(r) for r in rewritten.records()] == [tuple(r) for r, k in zip(original.records(), keep) if k]
