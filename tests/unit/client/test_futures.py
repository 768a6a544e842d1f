"""Record futures: one batch future shared by lightweight per-record handles."""

from __future__ import annotations

import threading

import pytest

from sparklog.client.futures import BatchFuture, RecordFuture, RecordMetadata


def test_get_returns_each_records_offset_and_timestamp():
    batch = BatchFuture("t", 2)
    batch.records = [(None, b"a", None, 10), (None, b"b", None, 11)]
    handles = [RecordFuture(batch, 0), RecordFuture(batch, 1)]
    assert not handles[0].done()
    batch.complete(100)
    assert handles[0].get(0) == RecordMetadata("t", 2, 100, 10)
    assert handles[1].get(0) == RecordMetadata("t", 2, 101, 11)
    assert handles[1].succeeded() and not handles[1].failed()


def test_get_raises_the_batch_error_and_times_out_while_pending():
    batch = BatchFuture("t", 0)
    handle = RecordFuture(batch, 0)
    with pytest.raises(TimeoutError):
        handle.get(0.01)
    batch.fail(ValueError("boom"))
    with pytest.raises(ValueError, match="boom"):
        handle.get(0)
    assert isinstance(handle.exception(0), ValueError) and handle.failed()


def test_callbacks_run_once_whether_added_before_or_after_completion():
    batch = BatchFuture("t", 0)
    seen = []
    RecordFuture(batch, 1).add_callback(lambda m: seen.append(("before", m.offset)))
    batch.complete(5)
    RecordFuture(batch, 0).add_callback(lambda m: seen.append(("after", m.offset)))
    RecordFuture(batch, 0).add_errback(lambda e: seen.append(("never", e)))
    assert seen == [("before", 6), ("after", 5)]


def test_errbacks_and_done_callbacks_see_failures_and_a_raising_callback_is_contained():
    batch = BatchFuture("t", 0)
    seen = []
    handle = RecordFuture(batch, 0)
    handle.add_callback(lambda m: 1 / 0)
    handle.add_errback(lambda e: seen.append(str(e)))
    handle.add_done_callback(lambda f: seen.append(f is handle))
    batch.fail(RuntimeError("lost"))
    assert seen == ["lost", True]


def test_acks_0_metadata_has_offset_minus_one():
    batch = BatchFuture("t", 0)
    batch.complete(-1)
    assert RecordFuture(batch, 3).get(0).offset == -1


def test_concurrent_add_callback_and_completion_never_loses_or_doubles_a_callback():
    for _ in range(200):
        batch = BatchFuture("t", 0)
        calls = []
        thread = threading.Thread(target=lambda: batch.complete(1))
        thread.start()
        RecordFuture(batch, 0).add_callback(lambda m: calls.append(m))
        thread.join()
        assert len(calls) == 1


def test_complete_all_gives_each_batch_its_offsets_runs_callbacks_and_wakes_waiters():
    from sparklog.client.futures import complete_all

    batches = [BatchFuture("t", 1) for _ in range(3)]
    for batch, size in zip(batches, (2, 1, 3)):
        batch.records = [(None, b"v", None, 7)] * size
    seen = []
    RecordFuture(batches[2], 2).add_callback(lambda m: seen.append(m.offset))
    waiter = threading.Thread(target=lambda: seen.append(RecordFuture(batches[1], 0).get(5).offset))
    waiter.start()
    complete_all(batches, 40, -1)
    waiter.join(5)
    assert [b.base_offset for b in batches] == [40, 42, 43]
    assert sorted(seen) == [42, 45] and all(b.done() and b.error is None for b in batches)
    assert RecordFuture(batches[0], 1).get(0) == RecordMetadata("t", 1, 41, 7)


def test_a_producer_batch_starts_as_a_batch_future_does():
    """ProducerBatch sets BatchFuture's fields itself (a call less per batch): the same fields, the same values."""
    from sparklog.client.accumulator import ProducerBatch

    mine, plain = ProducerBatch("t", 3, 1.0), BatchFuture("t", 3)
    assert {name: getattr(mine, name) for name in BatchFuture.__slots__ if name != "records"} == {
        name: getattr(plain, name) for name in BatchFuture.__slots__ if name != "records"}
    assert mine.records == [] and mine.future is mine and len({mine, ProducerBatch("t", 3, 1.0)}) == 2
