"""scan() and join_kept(), the cleaner's one pass over a batch, and retain_scanned() built on them: the same
answers as columns(), record_spans() and retain(), with the compiled codec and with the pure-Python one."""

from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records.batch import LOG_APPEND_TIME, CorruptRecordError, build_batch, iter_batches
from sparklog.records.compression import CODECS
from sparklog.records.retain import record_spans, retain, retain_scanned
from sparklog.records.scan import NULL_KEY, NULL_VALUE, join_kept, scan

RECORDS = [(None if i == 4 else b"k%d" % i if i else b"", None if i == 2 else b"value-%d" % i,
            [("h", b"x%d" % i), ("n", None)] if i % 2 else None, 1_700_000_000_000 + 7 * i) for i in range(6)]

record = st.tuples(st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40),
                   st.none() | st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)),
                                        max_size=2),
                   st.integers(0, 2**40))


def one(data):
    (batch,) = list(iter_batches(data))
    return batch


def expected_scan(batch):
    columns = batch.columns()
    digests = [0 if k is None else hash(k) or 1 for k in columns.keys]
    flags = [(k is None) * NULL_KEY | (v is None) * NULL_VALUE for k, v in zip(columns.keys, columns.values)]
    return digests, list(columns.offsets), list(columns.timestamps), flags


@pytest.mark.parametrize("compression", sorted(CODECS))
@settings(max_examples=20, deadline=None)
@given(records=st.lists(record, min_size=1, max_size=12), log_append=st.booleans(),
       keep=st.lists(st.booleans(), min_size=12, max_size=12))
def test_scan_and_retain_scanned_agree_with_columns_and_retain(codec, compression, records, log_append, keep):
    batch = one(build_batch(records, compression=compression, base_offset=1000,
                            timestamp_type=LOG_APPEND_TIME if log_append else 0))
    scanned = scan(batch)
    assert [list(c) for c in scanned[1:5]] == list(expected_scan(batch))
    spans = record_spans(scanned.section, batch.record_count)
    assert list(scanned.ends) == [end for _, end in spans]
    keep = keep[:len(records)]
    assert retain_scanned(batch, scanned, bytes(keep)) == retain(batch, batch.columns(), keep)


def test_join_kept_copies_the_kept_records_in_order(codec):
    batch = one(build_batch(RECORDS))
    scanned = scan(batch)
    spans = record_spans(scanned.section, 6)
    keep = bytes([1, 0, 0, 1, 1, 0])
    assert join_kept(scanned.section, scanned.ends, keep) == b"".join(
        scanned.section[s:e] for (s, e), k in zip(spans, keep) if k)
    assert join_kept(scanned.section, scanned.ends, bytes(6)) == b""


def test_join_kept_refuses_keep_bytes_or_ends_that_are_not_the_sections_records(codec):
    """One keep byte per record, and each end within the section after the one before: anything else is a
    one-line ValueError from both twins, never a read past `keep` or the section (the compiled twin's loop
    has no bounds checks of its own). The keep bytes and the section are views cut from longer buffers, so
    a read past their ends finds bytes there instead of crashing."""
    scanned = scan(one(build_batch(RECORDS)))
    keep = memoryview(bytes([1] * 12))
    with pytest.raises(ValueError, match="^join_kept: 1 keep bytes for 6 records$"):
        join_kept(scanned.section, scanned.ends, keep[:1])
    with pytest.raises(ValueError, match="^join_kept: 7 keep bytes for 6 records$"):
        join_kept(scanned.section, scanned.ends, keep[:7])
    cut = len(scanned.section) - 1
    with pytest.raises(ValueError, match=f"^join_kept: a record ends at {cut + 1}, outside {scanned.ends[4]}..{cut}$"):
        join_kept(memoryview(scanned.section)[:cut], scanned.ends, keep[:6])
    falling = array("q", [*scanned.ends[:2], scanned.ends[0], *scanned.ends[3:]])
    with pytest.raises(ValueError, match=f"^join_kept: a record ends at {scanned.ends[0]}, outside "):
        join_kept(scanned.section, falling, keep[:6])


def test_an_empty_key_and_a_null_key_are_told_apart(codec):
    scanned = scan(one(build_batch(RECORDS)))
    assert scanned.digests[0] == 1 and scanned.digests[4] == 0  # hash(b"") is 0: stored as 1; null is 0
    assert scanned.flags[4] == NULL_KEY and scanned.flags[2] == NULL_VALUE


def test_a_malformed_section_raises_as_columns_does(codec):
    data = bytearray(build_batch(RECORDS))
    data[61] = 0x7E  # the first record's length (63) no longer where its fields end
    batch = one_unchecked(bytes(data))
    with pytest.raises(CorruptRecordError):
        batch.columns()
    with pytest.raises(CorruptRecordError):
        scan(batch)


def one_unchecked(data):
    (batch,) = list(iter_batches(data, check_crc=False))
    return batch
