"""The accumulator: batches close by size, count, age and flush; memory is bounded; futures per record."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from sparklog.client.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD, BufferExhausted, RecordAccumulator


def make(batch_size=1000, max_records=100, linger_ms=10_000, buffer_memory=1 << 20, max_block_ms=100, **kw):
    return RecordAccumulator(batch_size, max_records, linger_ms, buffer_memory, max_block_ms, **kw)


def rec(value=b"v", key=None):
    return (key, value, None, 1)


def test_batch_closes_at_max_records_and_keeps_order():
    acc = make(max_records=3)
    futures = [acc.append("t", 0, rec(bytes([i])), 1) for i in range(7)]
    assert len(acc.ready) == 2
    first, second = acc.ready
    assert [r[1] for r in first.records] == [b"\x00", b"\x01", b"\x02"]
    assert [r[1] for r in second.records] == [b"\x03", b"\x04", b"\x05"]
    assert [f._index for f in futures] == [0, 1, 2, 0, 1, 2, 0]
    assert futures[0]._batch is first and futures[6]._batch is not second


def test_batch_closes_at_batch_size_bytes():
    acc = make(batch_size=BATCH_OVERHEAD + 3 * (100 + RECORD_OVERHEAD))
    for _ in range(3):
        acc.append("t", 0, rec(b"x" * 100), 100)
    assert len(acc.ready) == 1 and len(acc.ready[0].records) == 3


def test_partitions_have_separate_batches():
    acc = make(max_records=2)
    acc.append("t", 0, rec(), 1)
    acc.append("t", 1, rec(), 1)
    acc.append("u", 0, rec(), 1)
    assert not acc.ready
    acc.append("t", 1, rec(), 1)
    assert [(b.topic, b.partition) for b in acc.ready] == [("t", 1)]


def test_linger_closes_old_batches_and_reports_next_expiry(monkeypatch):
    """The batch opens at the accumulator's clock (injected: a stall of the test between append and its own
    clock read would close it early on a loaded machine)."""
    from types import SimpleNamespace

    from sparklog.client import accumulator

    now = 100.0
    monkeypatch.setattr(accumulator, "time", SimpleNamespace(monotonic=lambda: now))
    acc = make(linger_ms=50)
    acc.append("t", 0, rec(), 1)
    expiry = acc.close_expired(now)
    assert not acc.ready and expiry is not None and 0 < expiry - now <= 0.05
    assert acc.close_expired(now + 0.051) is None
    assert len(acc.ready) == 1


def test_force_closes_everything():
    acc = make()
    acc.append("t", 0, rec(), 1)
    acc.append("t", 1, rec(), 1)
    acc.close_expired(time.monotonic(), force=True)
    assert len(acc.ready) == 2 and not acc.has_open()


def test_a_full_buffer_blocks_send_until_max_block_then_raises():
    acc = make(buffer_memory=BATCH_OVERHEAD + 2 * (10 + RECORD_OVERHEAD), max_block_ms=100, max_records=1)
    acc.append("t", 0, rec(), 10)
    start = time.monotonic()
    with pytest.raises(BufferExhausted):
        acc.append("t", 0, rec(), 10)
    assert time.monotonic() - start >= 0.09


def test_released_memory_unblocks_a_waiting_send():
    acc = make(buffer_memory=BATCH_OVERHEAD + 10 + RECORD_OVERHEAD, max_block_ms=5000, max_records=1)
    acc.append("t", 0, rec(), 10)
    done = threading.Event()

    def blocked_send():
        acc.append("t", 0, rec(), 10)
        done.set()

    thread = threading.Thread(target=blocked_send)
    thread.start()
    time.sleep(0.1)
    assert not done.is_set()
    acc.release(acc.ready.popleft())
    assert done.wait(5)
    thread.join()


def test_a_record_larger_than_the_buffer_fails_at_once():
    acc = make(buffer_memory=100)
    with pytest.raises(BufferExhausted):
        acc.append("t", 0, rec(), 1000)


def test_closed_listener_and_wakeup_run_when_a_batch_closes():
    closed, woken = [], []
    acc = make(max_records=2, on_ready=lambda: woken.append(1))
    acc.closed_listener = lambda t, p: closed.append((t, p))
    acc.append("t", 3, rec(), 1)
    assert closed == [] and woken == [1]  # a new batch wakes the sender for its linger deadline
    acc.append("t", 3, rec(), 1)
    assert closed == [("t", 3)] and woken == [1, 1]


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 300)), max_size=200),
       max_records=st.integers(1, 20), batch_size=st.integers(80, 2000))
def test_every_record_lands_in_exactly_one_batch_in_order_and_memory_returns_to_zero(ops, max_records, batch_size):
    acc = make(batch_size=batch_size, max_records=max_records)
    futures = []
    for i, (partition, size) in enumerate(ops):
        futures.append((partition, i, acc.append("t", partition, (None, b"x" * size, None, i), size)))
    acc.close_expired(time.monotonic(), force=True)
    batches = list(acc.ready)
    per_partition = {}
    for batch in batches:
        assert 1 <= len(batch.records) <= max_records
        per_partition.setdefault(batch.partition, []).extend(r[3] for r in batch.records)
    for partition, seq in per_partition.items():
        assert seq == [i for p, i, _ in futures if p == partition]
    for partition, i, future in futures:
        assert future._batch.records[future._index][3] == i
    assert sum(len(b.records) for b in batches) == len(ops)
    for batch in batches:
        acc.release(batch)
    assert acc.used_bytes == 0 and acc.incomplete() == []
