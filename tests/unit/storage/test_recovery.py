from hypothesis import given, settings
from hypothesis import strategies as st

from support.storage_batches import make_batch
from sparklog.records.batch import set_base_offset
from sparklog.storage.recovery import RecoveryStop, ValidPrefix, find_next_batch, replay


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
    damaged = data[:cut] + garbage
    prefix = run(damaged)
    # garbage of at most 80 bytes is never a new valid batch, but it may by chance be the very bytes the cut
    # removed (a cut last byte 0x00, garbage b"\x00"), which makes that batch whole again
    whole = [(end, offset) for end, offset in ends if end <= len(damaged) and damaged[:end] == data[:end]]
    expected_end, expected_offset = whole[-1] if whole else (0, 100)
    assert (prefix.truncate_at, prefix.next_offset) == (expected_end, expected_offset)
    assert prefix.clean == (expected_end == len(damaged))


@settings(max_examples=300, deadline=None)
@given(counts=st.lists(st.integers(1, 4), min_size=2, max_size=12), where=st.floats(0, 1),
       length=st.integers(1, 600), kind=st.sampled_from(["zeros", "random", "flip"]), seed=st.integers(0, 2**32))
def test_resync_finds_the_first_batch_the_damage_did_not_touch(counts, where, length, kind, seed):
    """Whatever one damaged span hits (even only a baseOffset, outside the CRC), the replay stops at the
    first damaged batch and the resync finds the first undamaged one after it, never a damaged one."""
    import random

    from sparklog.records.batch import PARTITION_LEADER_EPOCH_OFFSET as EPOCH

    data, ends = segment_bytes(counts)
    start = int(where * (len(data) - 1))
    end = min(len(data), start + (1 if kind == "flip" else length))
    rng = random.Random(seed)
    damaged = bytearray(data)
    damaged[start:end] = bytes(end - start) if kind == "zeros" else (
        rng.randbytes(end - start) if kind == "random" else bytes([data[start] ^ 0x40]))
    read_at = lambda pos, n: bytes(damaged[pos:pos + n])  # noqa: E731
    spans = [(p, e, o) for (p, _), (e, o) in zip([(0, 0)] + ends[:-1], ends)]  # (start, end, next offset)

    def hurt(p, e):  # the leader epoch is outside every check: damage there alone changes nothing
        return (data[p:p + EPOCH] + data[p + EPOCH + 4:e]) != (damaged[p:p + EPOCH] + damaged[p + EPOCH + 4:e])

    bad = [i for i, (p, e, _) in enumerate(spans) if hurt(p, e)]
    prefix = replay(read_at, len(damaged), 100)
    if not bad:
        assert prefix.clean
        return
    assert prefix.truncate_at == spans[bad[0]][0]
    last = ends[-1][1]
    found = find_next_batch(read_at, len(damaged), prefix.truncate_at, prefix.next_offset + 1,
                            may_end_at=lambda next_offset: next_offset == last)
    good = [i for i in range(bad[0] + 1, len(spans)) if i not in bad]
    if good:
        p, _, _ = spans[good[0]]
        assert found is not None and (found.position, found.header.base_offset) == (p, spans[good[0] - 1][2])
    else:
        assert found is None
