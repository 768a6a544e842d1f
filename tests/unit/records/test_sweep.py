"""sweep.py, the cleaner's compiled passes over a buffer of batches: what they take and where they stop
(records/sweep.py Rule 1), against the pure-Python scan and offset map. That a whole clean comes out the same
byte for byte either way is tests/unit/storage/test_cleaner_sweep.py."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.records import sweep
from sparklog.records.batch import build_batch, iter_batches
from sparklog.records.retain import retain_scanned
from sparklog.records.scan import scan
from sparklog.storage.offset_map import OffsetMap
from support.codecs import switched

record = st.tuples(st.none() | st.sampled_from([b"a", b"b", b"c", b"d"]), st.none() | st.binary(max_size=30),
                   st.none(), st.integers(0, 2**40))


@pytest.fixture(autouse=True)
def compiled():
    with switched("cython"):
        yield


def put_scanned(offset_map, batch) -> bool:
    """The pure path's put of one batch's keys; False when the map filled in it."""
    scanned = scan(batch)
    digests, offsets = (np.frombuffer(getattr(scanned, c), dtype="q") for c in ("digests", "offsets"))
    return offset_map.put_digests(digests, offsets) == len(digests)


def log_bytes(batches):
    """Batches with contiguous offsets, as a segment holds them."""
    out, offset = bytearray(), 0
    for records, compression in batches:
        out += build_batch(records, compression=compression, base_offset=offset)
        offset += len(records)
    return bytes(out)


@settings(max_examples=40, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(record, min_size=1, max_size=8), st.sampled_from(["none", "gzip"])),
                        min_size=1, max_size=10),
       map_bytes=st.sampled_from([64, 4096]), first_dirty=st.integers(0, 40))
def test_put_batches_puts_what_the_pure_path_puts_and_stops_at_each_compressed_batch(batches, map_bytes, first_dirty):
    data = log_bytes(batches)
    compiled, pure = OffsetMap(map_bytes), OffsetMap(map_bytes)
    filled_at = None
    for batch in iter_batches(data):  # the pure path, batch by batch
        if batch.next_offset > first_dirty and filled_at is None and not put_scanned(pure, batch):
            filled_at = batch.base_offset
    position, full_at = 0, None
    digests, stored = compiled.tables
    while position < len(data) and full_at is None:
        position, compiled.size, full = sweep.put_batches(memoryview(data), position, digests, stored,
                                                          compiled.size, compiled.max_entries, first_dirty)
        batch = next(iter_batches(data[position:])) if position < len(data) else None
        if full:
            full_at = batch.base_offset
        elif batch is not None:  # it stops only at a compressed batch, which the pure path takes
            assert batch.compression and batch.next_offset > first_dirty
            if not put_scanned(compiled, batch):
                full_at = batch.base_offset
            position += batch.size
    assert full_at == filled_at and len(compiled) == len(pure)
    keys = [b"a", b"b", b"c", b"d"]
    assert compiled.get_all(keys) == pure.get_all(keys)


def test_a_batch_with_a_bad_crc_or_a_torn_tail_is_not_taken():
    good = build_batch([(b"k", b"v" * 20_000, None, 1)] * 3)  # > 3 x 4 KiB: the CRC's three-stream path
    small = build_batch([(b"k", b"w", None, 1)], base_offset=3)
    data = bytearray(good + small)
    offset_map = OffsetMap(4096)
    digests, stored = offset_map.tables
    assert sweep.put_batches(data, 0, digests, stored, 0, offset_map.max_entries, 0) == (len(data), 1, False)
    data[len(good) + 64] ^= 1  # a bit flipped in the second batch's records
    assert sweep.put_batches(data, 0, digests, stored, 1, offset_map.max_entries, 0)[0] == len(good)
    assert sweep.put_batches(memoryview(good)[:-1], 0, digests, stored, 1, offset_map.max_entries, 0)[0] == 0


def test_filter_batches_keeps_the_latest_coalesces_emptied_batches_and_leaves_new_tombstones_to_python():
    data = log_bytes([([(b"a", b"1", None, 1), (b"b", b"1", None, 1)], "none"), ([(b"a", b"2", None, 2)], "none"),
                      ([(b"a", b"3", None, 3)], "none"), ([(b"b", None, None, 4)], "none")])
    offset_map = OffsetMap(4096)
    offset_map.put_all([b"a", b"b", b"a", b"a", b"b"], [0, 1, 2, 3, 4])
    digests, stored = offset_map.tables
    done = sweep.filter_batches(memoryview(data), 0, digests, stored, 5, 0, None, sweep.Buffers())
    out = list(iter_batches(bytes(done.data)))
    tombstone = list(iter_batches(data))[-1]
    # b's tombstone has no delete horizon yet: writing one is the pure-Python path's (sweep.py Rule 1)
    assert done.position == len(data) - tombstone.size
    assert done.counts == dict(read=done.position, records=4, removed=3, tombstones=0, changed=1, horizon=0)
    # [0, 2) and [2, 3) emptied: one header spans both; the batch at 3 is copied as it was
    assert [(b.base_offset, b.next_offset, b.record_count) for b in out] == [(0, 3, 0), (3, 4, 1)]
    assert [e[1:3] for e in done.entries] == [(0, 3), (3, 4)] and done.run is None
    assert bytes(done.data)[61:] == bytes(list(iter_batches(data))[2].raw)


@pytest.mark.parametrize("now, removed", [(100, 0), (101, 1)])
def test_filter_batches_removes_a_tombstone_once_past_its_batch_delete_horizon(now, removed):
    """A kept tombstone reports its batch's horizon (cleaner.py Rule: clean-for-delete-horizon); a removed one does
    not."""
    (batch,) = iter_batches(build_batch([(b"b", None, None, 4)], base_offset=4))
    marked = retain_scanned(batch, scan(batch), b"\x01", delete_horizon=100)
    offset_map = OffsetMap(4096)
    offset_map.put_all([b"b"], [4])
    digests, stored = offset_map.tables
    done = sweep.filter_batches(memoryview(marked), 0, digests, stored, 5, now, None, sweep.Buffers())
    assert done.position == len(marked) and done.counts["tombstones"] == removed
    assert done.counts["horizon"] == (0 if removed else 100)
    assert (done.run is not None) == bool(removed)  # emptied: a pending empty header


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 3), min_size=1, max_size=6), cut=st.integers(0, 400),
       garbage=st.booleans())
def test_whole_prefix_ends_where_the_last_whole_batch_ends(sizes, cut, garbage):
    data = log_bytes([([(b"k", b"v" * 30 * n, None, 1)], "none") for n in sizes])
    if garbage:  # a header whose length (0) is too small for a batch: handed on, for iter_batches to refuse
        assert sweep.whole_prefix(data + bytes(61)) == len(data) + 61
        return
    chunk = data[:max(0, len(data) - cut)]
    ends = [0]
    for batch in iter_batches(data):
        ends.append(ends[-1] + batch.size)
    assert sweep.whole_prefix(chunk) == max(e for e in ends if e <= len(chunk))
