"""`send()`'s common case (sendpath.py) and its compiled twin (_csend.pyx): the same batches, records and
futures as each other and as the slow path, for any sequence of sends; and the compiled SendLock."""

from __future__ import annotations

import functools
import random
import threading
import time
import types

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.memory_records import MemoryRecords

from sparklog.client import _csend, sendpath
from sparklog.client.accumulator import RecordAccumulator
from sparklog.client.partitioner import DefaultPartitioner
from sparklog.client.producer import Producer
from sparklog.records import batch as codec
from sparklog.records import implementation

# The compiled twin serves only futures and batches on its compiled slots: with SPARKLOG_NO_EXTENSIONS set
# (the whole module then runs on the pure-Python classes) the pure-Python twin is compared with itself, and
# still with the slow path and kafka-python.
TWINS = {"python": sendpath.PySendPath, "cython": sendpath.SendPath}


def test_the_twin_selected_is_the_one_the_environment_asks_for():
    if implementation.extensions_disabled():
        assert sendpath.IMPLEMENTATION == sendpath.PYTHON and sendpath.SendPath is sendpath.PySendPath
    else:
        assert sendpath.IMPLEMENTATION == sendpath.CYTHON and sendpath.SendPath is _csend.SendPath, (
            sendpath.COMPILED_UNAVAILABLE)


def accumulator_on(base: type, batch_size: int, max_records: int, counts: dict, seed: int) -> RecordAccumulator:
    """A RecordAccumulator whose send path is `base`, wired to `Producer._send` as its slow path, with a
    partitioner seeded by `seed` (the twins must pick the same sticky partitions)."""
    members = {k: v for k, v in vars(RecordAccumulator).items() if k not in ("__dict__", "__weakref__")}
    acc = type(f"AccumulatorOn{base.__name__}", (base,), members)(batch_size, max_records, 60_000, 1 << 30, 100)
    producer = types.SimpleNamespace(_closed=False, _metadata=types.SimpleNamespace(partition_counts=counts),
                                     _partitioner=DefaultPartitioner(random.Random(seed)), _accumulator=acc,
                                     _count_after_refresh=lambda topic: counts.get(topic, 0))  # no broker to ask
    acc.closed_listener = producer._partitioner.batch_closed
    acc.metadata, acc.partitioner = producer._metadata, producer._partitioner
    acc.slow_send = producer.send = functools.partial(Producer._send, producer)
    return acc


payloads = st.one_of(st.none(), st.binary(max_size=40), st.text(max_size=5))
sends = st.lists(st.fixed_dictionaries({
    "topic": st.sampled_from(["a", "b"]),
    "value": payloads,
    "key": st.one_of(st.none(), st.binary(max_size=8)),
    "headers": st.one_of(st.none(), st.just([]), st.lists(st.tuples(st.sampled_from(["h", "i"]), st.binary(max_size=4)),
                                                          min_size=1, max_size=2)),
    "partition": st.one_of(st.none(), st.integers(0, 2)),
    "timestamp": st.integers(0, 1 << 42),
}), max_size=60)


@settings(max_examples=60, deadline=None)
@given(sends=sends, batch_size=st.integers(61, 400), max_records=st.integers(1, 6), seed=st.integers(0, 100))
def test_both_twins_make_the_same_batches_and_futures_and_kafka_python_reads_them(sends, batch_size, max_records, seed):
    outcomes = {}
    for name, base in TWINS.items():
        acc = accumulator_on(base, batch_size, max_records, {"a": 3, "b": 1}, seed)
        results = []
        for s in sends:
            try:
                results.append(acc.send(**s))
            except ValueError as exc:  # a partition the topic lacks: refused, nothing queued
                results.append(str(exc))
        futures = [f for f in results if not isinstance(f, str)]
        kept = [s for f, s in zip(results, sends) if not isinstance(f, str)]
        acc.close_expired(0.0, force=True)
        batches = list(acc.ready)
        assert sum(len(b.records) for b in batches) == len(futures)
        assert [f._batch.records[f._index][1] for f in futures] == [
            s["value"].encode() if isinstance(s["value"], str) else s["value"] for s in kept]
        outcomes[name] = ([(b.topic, b.partition, b.size, b.records) for b in batches],
                          [f if isinstance(f, str) else (batches.index(f._batch), f._index) for f in results])
    assert outcomes["python"] == outcomes["cython"]
    for topic, partition, _, records in outcomes["cython"][0]:
        built = {c.name: codec.build_batch(records) for c in (codec.PYTHON_CODEC, codec.CODEC)}
        compiled = implementation.compiled(codec.PYTHON_CODEC, codec.RecordColumns).build_batch(records)
        assert built[codec.PYTHON_CODEC.name] == compiled
        theirs = MemoryRecords(compiled).next_batch()
        assert theirs.validate_crc()
        assert [(r.key, r.value, r.timestamp, list(r.headers)) for r in theirs] == [
            (k, v, t, list(h or ())) for k, v, h, t in records]


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_fast_path_stamps_now_and_takes_only_what_it_can_finish(name):
    acc = accumulator_on(TWINS[name], 10_000, 100, {"t": 1}, 0)
    slow = []
    real_slow = acc.slow_send
    acc.slow_send = lambda *args: slow.append(args) or real_slow(*args)
    before = time.time_ns() // 1_000_000
    first = acc.send("t", b"v")  # no open batch: append opens one
    second = acc.send("t", b"w", key=b"k")
    after = time.time_ns() // 1_000_000
    assert not slow and second._batch is first._batch and second._index == 1
    assert before <= first._batch.records[1][3] <= after
    acc.send("t", "text")
    acc.send("t", b"v", headers=[("h", b"1")])
    acc.send("t", b"v", partition=False)  # an int, but not exactly: Python decides
    acc.send("t", b"v", timestamp=1.5)
    with pytest.raises(ValueError, match="no partition -1"):
        acc.send("t", b"v", partition=-1)
    assert len(slow) == 5 and len(first._batch.records) == 6
    with pytest.raises(TypeError, match="value must be bytes"):
        acc.send("t", 3)
    assert [r[1] for r in first._batch.records] == [b"v", b"w", b"text", b"v", b"v", b"v"]


def test_a_closed_producer_refuses_through_the_slow_path():
    acc = accumulator_on(sendpath.SendPath, 10_000, 100, {"t": 1}, 0)
    acc.send("t", b"v")
    acc.closed = True
    acc.slow_send.args[0]._closed = True
    with pytest.raises(Exception, match="closed"):
        acc.send("t", b"v")


def test_send_lock_is_a_lock():
    lock = _csend.SendLock()
    assert lock.acquire() and lock.locked()
    assert not lock.acquire(False) and not lock.acquire(True, 0.01)
    with pytest.raises(ValueError):
        lock.acquire(False, 1)
    lock.release()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
    with lock:
        assert lock.locked()
    assert not lock.locked()


def test_send_lock_serves_a_condition_and_blocks_across_threads():
    lock = _csend.SendLock()
    condition = threading.Condition(lock)
    state = []

    def waiter():
        with condition:
            state.append(condition.wait_for(lambda: "go" in state, timeout=5))

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.05)
    with condition:
        state.append("go")
        condition.notify_all()
    thread.join(5)
    assert state == ["go", True]
    lock.acquire()
    got = []
    other = threading.Thread(target=lambda: got.append(lock.acquire(True, 2)))
    other.start()
    time.sleep(0.05)
    assert not got
    lock.release()
    other.join(5)
    assert got == [True] and lock.locked()


@pytest.mark.parametrize("name", sorted(TWINS))
def test_threads_sending_while_the_sender_drains_lose_and_reorder_nothing(name):
    """Four application threads and a draining 'sender' thread on one accumulator: every record lands once,
    each thread's records in its order, and the memory accounting returns to zero."""
    acc = accumulator_on(TWINS[name], 2_000, 7, {"t": 1}, 0)
    drained, done = [], threading.Event()

    def sender():
        while not done.is_set() or acc.ready or acc.has_open():
            acc.close_expired(time.monotonic(), force=done.is_set())
            while acc.ready:
                drained.append(acc.ready.popleft())

    def producer(thread: int):
        for i in range(2_000):
            acc.send("t", b"%d:%d" % (thread, i), timestamp=i)

    drainer = threading.Thread(target=sender)
    drainer.start()
    threads = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    done.set()
    drainer.join(30)
    values = [record[1] for batch in drained for record in batch.records]
    assert sorted(values) == sorted(b"%d:%d" % (t, i) for t in range(4) for i in range(2_000))
    for t in range(4):
        mine = [int(v.split(b":")[1]) for v in values if v.startswith(b"%d:" % t)]
        assert mine == list(range(2_000))
    acc.release_all(drained)
    assert acc.used_bytes == 0
