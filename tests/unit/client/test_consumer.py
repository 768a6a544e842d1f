"""The consumer's decoding of fetched chunks: start offsets, truncated tails, CRC checks, control batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sparklog.client.consumer import Consumer, _PartitionState
from sparklog.records.batch import next_fetch_offset
from sparklog.records.batch import CorruptRecordError, build_batch, set_base_offset


def batch(base: int, values: list[bytes], **kw) -> bytes:
    raw = bytearray(build_batch([(None, v, None, 1000 + i) for i, v in enumerate(values)], **kw))
    set_base_offset(raw, base)
    return bytes(raw)


@pytest.fixture(scope="module")
def consumer():
    c = Consumer("127.0.0.1:1")  # never contacted: only the decoding path is used
    yield c
    c.close()


def chunk(view: bytes, start: int, state=None, aborted=None):
    state = state or _PartitionState(("t", 0), start)
    return (state, state.epoch, memoryview(view), start, aborted)


def test_next_fetch_offset_walks_whole_batches_only():
    data = batch(0, [b"a", b"b"]) + batch(2, [b"c"])
    assert next_fetch_offset(data, 0) == 3
    assert next_fetch_offset(data + batch(3, [b"d"])[:-1], 0) == 3  # a truncated tail waits for the next fetch
    assert next_fetch_offset(b"", 7) == 7
    assert next_fetch_offset(batch(5, [b"x"])[:30], 5) == 5


def test_records_before_the_fetch_position_are_skipped(consumer):
    data = batch(10, [b"a", b"b", b"c"]) + batch(13, [b"d"])
    records = list(consumer._chunk_records(chunk(data, 11)))
    assert [(r.topic, r.partition, r.offset, r.value) for r in records] == [
        ("t", 0, 11, b"b"), ("t", 0, 12, b"c"), ("t", 0, 13, b"d")]


def test_a_truncated_last_batch_is_skipped(consumer):
    data = batch(0, [b"a"]) + batch(1, [b"b", b"c"])[:-5]
    state = _PartitionState(("t", 0), 0)
    assert [r.offset for r in consumer._chunk_records(chunk(data, 0, state))] == [0]
    assert state.position == 1


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4"])
def test_a_corrupt_batch_raises_and_is_never_yielded(consumer, codec):
    good = batch(0, [b"a"], compression=codec)
    bad = bytearray(batch(1, [b"payload-b"], compression=codec))
    bad[-2] ^= 0xFF
    records = consumer._chunk_records(chunk(good + bytes(bad), 0))
    assert next(records).value == b"a"
    with pytest.raises(CorruptRecordError):
        next(records)


def test_a_seek_stops_a_chunk_being_iterated(consumer):
    state = _PartitionState(("t", 0), 0)
    records = consumer._chunk_records(chunk(batch(0, [b"a", b"b", b"c"]), 0, state))
    assert next(records).offset == 0
    state.epoch += 1
    assert list(records) == []


def test_control_batches_are_skipped_but_move_the_position(consumer):
    from sparklog.records.batch import build_batch

    control = bytearray(build_batch([(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", None, 1)], is_control=True,
                                    is_transactional=True))
    set_base_offset(control, 1)
    state = _PartitionState(("t", 0), 0)
    data = batch(0, [b"a"]) + bytes(control) + batch(2, [b"c"])
    assert [r.offset for r in consumer._chunk_records(chunk(data, 0, state))] == [0, 2]
    assert state.position == 3


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(1, 20), min_size=1, max_size=8), start_in=st.integers(0, 200),
       cut=st.integers(0, 400))
def test_every_record_from_the_start_offset_once_in_order_whatever_the_cut(consumer, sizes, start_in, cut):
    data, base = b"", 0
    for n in sizes:
        data += batch(base, [b"%d" % (base + i) for i in range(n)])
        base += n
    start = start_in % base
    view = data[:len(data) - cut] if cut < len(data) else b""
    offsets = [r.offset for r in consumer._chunk_records(chunk(view, start))]
    assert offsets == list(range(start, len(offsets) + start))
    assert next_fetch_offset(view, start) == max(start, start + len(offsets)) or not offsets


# -- the I/O thread changes partition state only under the lock `seek` holds ------------------------------------

def _answer(**part):
    """A decoded response as the I/O thread's callbacks get it: `future.value.<topics>[].partitions[]`."""
    from types import SimpleNamespace as NS

    part = NS(partition_index=0, error_code=0, preferred_read_replica=-1, **part)  # -1: as Fetch v11 decodes it
    return NS(error=None, value=NS(topics=[NS(name="t", partitions=[part])], error_code=0, session_id=0,
                                   responses=[NS(topic="t", partitions=[part])]))


def _runs_only_after_the_lock_is_released(consumer, callback) -> None:
    """Run `callback` on another thread while this one holds the consumer's lock (as `seek` does): it must
    change nothing until the lock is released."""
    import threading

    state = consumer._states[("t", 0)]
    before = (state.epoch, state.position, state.fetch_offset, len(consumer._chunks))
    with consumer._lock:
        thread = threading.Thread(target=callback)
        thread.start()
        thread.join(0.3)
        assert (state.epoch, state.position, state.fetch_offset, len(consumer._chunks)) == before
    thread.join(5)
    assert not thread.is_alive()


@pytest.fixture
def assigned():
    c = Consumer("127.0.0.1:1", **{"auto.offset.reset": "earliest"})
    c._thread.stop()  # the test plays the I/O thread
    c._assign({("t", 0): None})
    yield c
    c.close()


def test_a_reset_answer_waits_for_the_seek_lock(assigned):
    state = assigned._states[("t", 0)]
    answer, epochs = _answer(offset=7, timestamp=-1), {("t", 0): (state, state.epoch)}
    _runs_only_after_the_lock_is_released(assigned, lambda: assigned._fetcher._on_reset(answer, epochs))
    assert state.position == state.fetch_offset == 7


def test_a_fetch_answer_waits_for_the_seek_lock(assigned):
    assigned.seek(("t", 0), 0)
    state = assigned._states[("t", 0)]
    fetched = _answer(high_watermark=3, records=memoryview(batch(0, [b"a", b"b", b"c"])))
    sent = [(state, state.epoch, 0)]
    _runs_only_after_the_lock_is_released(assigned, lambda: assigned._fetcher._on_fetch(fetched, 1, sent))
    assert state.fetch_offset == 3 and len(assigned._chunks) == 1


def test_an_out_of_range_answer_waits_for_the_seek_lock_and_never_undoes_a_seek(assigned):
    assigned.seek(("t", 0), 5)
    state = assigned._states[("t", 0)]
    epoch = state.epoch
    out_of_range = _answer(high_watermark=3, records=None)
    out_of_range.value.responses[0].partitions[0].error_code = 1
    _runs_only_after_the_lock_is_released(
        assigned, lambda: assigned._fetcher._on_fetch(out_of_range, 1, [(state, epoch, 5)]))
    assert state.position is None  # reset: the answer was for the current position
    assigned.seek(("t", 0), 2)
    assigned._fetcher._on_fetch(out_of_range, 1, [(state, epoch, 5)])  # an answer to the old position
    assert state.position == state.fetch_offset == 2


def test_partitions_are_named_as_kafka_s_tools_name_them_in_errors():
    """Issue 26: `error: no metadata or leader for [('events', 2), ('events', 5)]` showed a tuple's repr."""
    from sparklog.client.consumer import Consumer

    with Consumer("127.0.0.1:1", request_timeout_ms=500) as consumer:
        with pytest.raises(ValueError, match=r"^events-2 is not assigned$"):
            consumer.position(("events", 2))


def test_read_committed_chunks_skip_the_aborted_transactions_and_markers(consumer):
    """Rule 4: the aborted list of a read_committed answer drops its producers' data batches up to their abort
    marker; committed transactional and plain data stay, markers are never records; positions move past all."""
    from sparklog.records.aborted import AbortedTransactions
    from sparklog.records.control import build_marker_batch

    def txn(offset, pid, value):
        return build_batch([(None, value, None, 1)], base_offset=offset, producer_id=pid, producer_epoch=0,
                           base_sequence=offset, is_transactional=True)

    data = (txn(0, 7, b"aborted") + txn(1, 8, b"committed") + build_batch([(None, b"plain", None, 1)], base_offset=2)
            + build_marker_batch(7, 0, False, 1, base_offset=3) + txn(4, 7, b"later") + build_marker_batch(
                8, 0, True, 1, base_offset=5) + build_marker_batch(7, 0, True, 1, base_offset=6))
    state = _PartitionState(("t", 0), 0)
    got = consumer._chunk_records(chunk(data, 0, state, AbortedTransactions([(7, 0)])))
    assert [(r.offset, r.value) for r in got] == [(1, b"committed"), (2, b"plain"), (4, b"later")]
    assert state.position == 7
