"""OffsetMap: a key's last offset, bounded memory, the load limit; memory in RAM only where keys were put,
given back by `clear` (offset_map.py Rule: map-pages-touched), and a cleared map that answers as a new one, on the
compiled sweep's path and the pure-Python one."""

import mmap
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.records import sweep
from sparklog.records.batch import build_batch
from sparklog.storage import PartitionLog
from sparklog.storage import offset_map as offset_map_module
from sparklog.storage.cleaner import Cleaner
from sparklog.storage.files import OS_FILES
from sparklog.storage.offset_map import DEFAULT_DEDUPE_BUFFER_SIZE, SLOT_BYTES, OffsetMap
from support.codecs import switched


@settings(max_examples=50, deadline=None)
@given(pairs=st.lists(st.tuples(st.binary(max_size=6), st.integers(0, 2**40)), max_size=200))
def test_the_map_answers_as_a_dict_of_last_offsets(pairs):
    offset_map, model = OffsetMap(64 * 1024), {}
    for key, offset in pairs:
        assert offset_map.put(key, offset)
        model[key] = offset
    assert len(offset_map) == len(model)
    assert all(offset_map.get(key) == offset for key, offset in model.items())
    assert offset_map.get(b"never put, longer than six") == -1


def test_a_new_key_is_refused_at_the_load_limit_and_an_old_one_still_updates():
    offset_map = OffsetMap(10 * SLOT_BYTES, load_factor=0.5)  # 8 slots (a power of two), 4 entries
    assert offset_map.slots == 8 and offset_map.memory_bytes == 8 * SLOT_BYTES
    assert offset_map.put_all([b"a", b"b", None, b"c", b"d", b"e", b"f"], list(range(7))) == 5
    assert offset_map.full and len(offset_map) == 4 and offset_map.get(b"e") == -1
    assert offset_map.put(b"a", 99) and offset_map.get(b"a") == 99
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.get(b"a") == -1


def test_memory_per_entry_is_under_kafkas_24_bytes():
    offset_map = OffsetMap(1536 * 1024)
    assert offset_map.memory_bytes == 1024 * 1024  # the largest power of two of slots that fits
    assert offset_map.memory_bytes / offset_map.max_entries < 18  # 16-byte slots at a 0.9 load factor


@settings(max_examples=30, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 2**40)), min_size=256, max_size=900),
       split=st.integers(0, 900))
def test_the_vectorized_probing_answers_as_the_loop(pairs, split):
    """Calls of 256 keys or more probe with numpy; repeated keys keep their last offset, in a small table."""
    keys = [b"k%d" % k for k, _ in pairs]
    offsets = [o for _, o in pairs]
    vector, loop, model = OffsetMap(1024 * SLOT_BYTES), OffsetMap(1024 * SLOT_BYTES), {}
    assert vector.put_all(keys[:split], offsets[:split]) == len(keys[:split])
    assert vector.put_all(keys[split:], offsets[split:]) == len(keys[split:])
    for key, offset in zip(keys, offsets):
        assert loop.put(key, offset)
        model[key] = offset
    probe = keys + [b"absent-%d" % i for i in range(300)] + [None]
    assert vector.get_all(probe) == loop.get_all(probe) == [model.get(k, -1) for k in probe[:-1]] + [-1]
    assert len(vector) == len(loop) == len(model)


def resident_pages(buffer) -> int:
    """Pages of `buffer` that hold memory (in RAM, the shared zero page included, or swapped out), from
    /proc/self/pagemap: one 64-bit entry per virtual page, bit 63 present, bit 62 swapped. Exact, unlike
    VmRSS, whatever else the process allocates, and independent of load and timing."""
    view = np.frombuffer(buffer, dtype=np.uint8)
    first, end = view.ctypes.data // mmap.PAGESIZE, (view.ctypes.data + view.nbytes - 1) // mmap.PAGESIZE + 1
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(first * 8)
        entries = np.frombuffer(pagemap.read((end - first) * 8), dtype=np.uint64)
    return int(np.count_nonzero(entries >> np.uint64(62)))


def map_pages(offset_map) -> int:
    return sum(resident_pages(table) for table in offset_map.tables)


@pytest.fixture(params=[True, False], ids=["madvise", "remap"])
def drop_pages(request):
    """`clear` both ways (Rule: map-pages-touched): the kernel drops the pages (Linux), or new tables are mapped."""
    with mock.patch.object(offset_map_module, "DROP_PAGES", request.param):
        yield request.param


def test_the_default_map_holds_memory_only_where_keys_were_put_and_clear_gives_it_back(drop_pages):
    """A 4 KiB segment of 49 keys once cost 128 MiB of zeroing at every clean: now its pages, then none."""
    offset_map = OffsetMap()
    assert offset_map.memory_bytes == DEFAULT_DEDUPE_BUFFER_SIZE and map_pages(offset_map) == 0
    keys = [b"key-%03d" % k for k in range(49)]
    assert offset_map.put_all(keys, list(range(49))) == 49
    assert 0 < map_pages(offset_map) <= 4 * 49  # a digest page and an offset page a key, and probes read
    offset_map.clear()
    assert map_pages(offset_map) == 0 and len(offset_map) == 0
    assert offset_map.get_all(keys) == [-1] * 49
    assert offset_map.put_all(keys[::-1], list(range(49))) == 49 and offset_map.get(keys[0]) == 48


def test_cleaning_small_logs_with_the_default_map_touches_pages_for_their_keys_only(tmp_path, flusher, codec):
    """Both the compiled sweep and the pure-Python path, through Cleaner.clean, log after log."""
    cleaner = Cleaner(OffsetMap(), OS_FILES)
    for n in range(3):
        log = PartitionLog.open(str(tmp_path / f"t-{n}"), {"cleanup.policy": "compact", "segment.bytes": 4096,
                                                           "min.cleanable.dirty.ratio": 0.0}, flusher=flusher)
        for version in range(3):
            log.append(build_batch([(b"k%d" % k, b"v%d" % version, None, 1) for k in range(40)]))
        log.roll()
        log.flush()  # only flushed, closed segments are cleaned (cleaner.py Rule: clean-range)
        result = cleaner.clean(log)
        assert result.records_read == 120 and result.records_removed == 80
        assert 0 < map_pages(cleaner.map) <= 4 * 40
        log.close()


keyed = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 2**40)), max_size=300)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(keyed, min_size=1, max_size=4), slots=st.sampled_from([64, 1024]))
def test_a_cleared_map_answers_and_holds_what_a_new_one_does(drop_pages, rounds, slots):
    """Round after round, with a map that fills (64 slots) and one that does not (calls of 256 keys or more
    probe with numpy): the same puts taken, the same answers, the same tables byte for byte."""
    reused = OffsetMap(slots * SLOT_BYTES)
    probe = [b"k%d" % k for k in range(401)] + [None]
    for pairs in rounds:
        reused.clear()
        fresh = OffsetMap(slots * SLOT_BYTES)
        keys, offsets = [b"k%d" % k for k, _ in pairs], [o for _, o in pairs]
        assert reused.put_all(keys, offsets) == fresh.put_all(keys, offsets)
        assert len(reused) == len(fresh) and reused.get_all(probe) == fresh.get_all(probe)
        assert [bytes(t) for t in reused.tables] == [bytes(t) for t in fresh.tables]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rounds=st.lists(st.lists(st.lists(st.tuples(st.integers(0, 30), st.booleans()), min_size=1, max_size=9),
                                min_size=1, max_size=6), min_size=1, max_size=4),
       slots=st.sampled_from([16, 1024]))
def test_the_compiled_sweep_puts_and_filters_in_a_cleared_map_as_in_a_new_one(drop_pages, rounds, slots):
    """records/sweep.py probes the tables itself (`tables`, taken after `clear` as the cleaner does)."""
    reused = OffsetMap(slots * SLOT_BYTES)
    with switched("cython"):
        for batches in rounds:
            data, offset = bytearray(), 0
            for records in batches:  # tombstones too: a batch that keeps one is left to Python
                data += build_batch([(b"k%d" % k, None if dead else b"v", None, 1) for k, dead in records],
                                    base_offset=offset)
                offset += len(records)
            reused.clear()
            fresh = OffsetMap(slots * SLOT_BYTES)
            answers = []
            for offset_map in (reused, fresh):
                digests, stored = offset_map.tables
                position, offset_map.size, full = sweep.put_batches(memoryview(data), 0, digests, stored, 0,
                                                                    offset_map.max_entries, 0)
                done = sweep.filter_batches(memoryview(data), 0, digests, stored, offset, 0, None, sweep.Buffers())
                answers.append((position, offset_map.size, full, done.position, bytes(done.data), done.entries,
                                done.run, done.counts, [bytes(t) for t in offset_map.tables]))
            assert answers[0] == answers[1]
