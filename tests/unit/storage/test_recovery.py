from hypothesis import given, settings
from hypothesis import strategies as st

from support.storage_batches import make_batch
from sparklog.records.batch import set_base_offset
from sparklog.storage.recovery import RecoveryStop, ValidPrefix, replay


def segment_bytes(counts, base=100):
    data, ends, offset = bytearray(), [], base
    for i, count in enumerate(counts):
        batch = bytearray(make_batch(count, 30, tag=i))
        set_base_offset(batch, offset)
        data += batch
        offset += count
        ends.append((len(data), offset))
    return bytes(data), ends


def run(data, base=100, **kwargs):
    return replay(lambda pos, n: data[pos:pos + n], len(data), base, **kwargs)


def test_clean_segment_replays_to_the_end():
    data, ends = segment_bytes([1, 2, 3])
    seen = []
    prefix = run(data, on_batch=lambda header, position: seen.append((header.base_offset, position)))
    assert prefix == ValidPrefix(106, len(data), RecoveryStop.END_OF_LOG, 3)
    assert prefix.clean
    assert [offset for offset, _ in seen] == [100, 101, 103]


def test_empty_segment():
    assert run(b"") == ValidPrefix(100, 0, RecoveryStop.END_OF_LOG, 0)


def test_stops_classified():
    data, ends = segment_bytes([2, 2])
    first_end = ends[0][0]
    assert run(data[: first_end + 30]).stop is RecoveryStop.SHORT_HEADER
    assert run(data[:-1]).stop is RecoveryStop.SHORT_BATCH
    assert run(data[:first_end] + bytes(100)).stop is RecoveryStop.BAD_LENGTH
    bad = bytearray(data)
    bad[first_end + 16] = 1
    assert run(bytes(bad)).stop is RecoveryStop.BAD_MAGIC
    bad = bytearray(data)
    bad[-1] ^= 1
    assert run(bytes(bad)) == ValidPrefix(102, first_end, RecoveryStop.BAD_CRC, 1)
    assert run(data, base=99).stop is RecoveryStop.BAD_OFFSET  # first batch must start at the base
    gap = bytearray(data)
    set_base_offset(gap, 103, first_end)
    assert run(bytes(gap)).stop is RecoveryStop.BAD_OFFSET


def test_start_position_and_offset_replay_only_the_tail():
    data, ends = segment_bytes([2, 3, 1])
    prefix = run(data, start_position=ends[0][0], start_offset=102)
    assert prefix == ValidPrefix(106, len(data), RecoveryStop.END_OF_LOG, 2)


@settings(max_examples=150, deadline=None)
@given(counts=st.lists(st.integers(1, 5), min_size=1, max_size=6), cut=st.integers(0, 10_000),
       garbage=st.binary(max_size=80))
def test_any_cut_plus_garbage_yields_the_longest_whole_prefix(counts, cut, garbage):
    data, ends = segment_bytes(counts)
    cut = cut % (len(data) + 1)
    prefix = run(data[:cut] + garbage)
    whole = [(end, offset) for end, offset in ends if end <= cut]
    expected_end, expected_offset = whole[-1] if whole else (0, 100)
    # garbage is at most 80 bytes: never a valid batch after the cut, so recovery stops exactly at the prefix
    assert (prefix.truncate_at, prefix.next_offset) == (expected_end, expected_offset)
    assert prefix.clean == (cut == expected_end and not garbage)
