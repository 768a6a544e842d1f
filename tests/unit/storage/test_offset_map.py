"""OffsetMap: a key's last offset, bounded memory, the load limit."""

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.storage.offset_map import SLOT_BYTES, OffsetMap


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
