"""`send()`'s common case (sendpath.py) and its compiled twin (_csend.pyx): the same batches, records and
futures as each other and as the slow path, for any sequence of sends; and the compiled SendLock."""

from __future__ import annotations

import functools
import gc
import random
import threading
import time
import types
import weakref

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.memory_records import MemoryRecords

from sparklog.client import _csend, sendpath
from sparklog.client.accumulator import ProducerBatch, RecordAccumulator
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
    producer = types.SimpleNamespace(_closed=False, _transactions=None, _metadata=types.SimpleNamespace(partition_counts=counts),
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


def spy_on_slow_path(acc) -> list:
    """The arguments of each send the accumulator hands to its slow path (which still runs)."""
    slow = []
    real_slow = acc.slow_send
    acc.slow_send = lambda *args: slow.append(args) or real_slow(*args)
    return slow


@pytest.mark.parametrize("name", sorted(TWINS))
def test_the_fast_path_stamps_now_and_takes_only_what_it_can_finish(name):
    acc = accumulator_on(TWINS[name], 10_000, 100, {"t": 1}, 0)
    slow = spy_on_slow_path(acc)
    before = time.time_ns() // 1_000_000
    first = acc.send("t", b"v")  # no open batch: the fast path opens one
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


# Rule 5 of sendpath.py / _csend.pyx: with the compiled twin, batches are out of the cyclic collector's view
# until they take a callback or an error; the pure-Python twin cannot untrack and leaves them tracked.
UNTRACKS = sendpath.IMPLEMENTATION == sendpath.CYTHON


@pytest.mark.parametrize("max_records", [1, 3])
@pytest.mark.parametrize("name", sorted(TWINS))
def test_batches_and_their_record_lists_are_untracked_until_a_callback_or_an_error(name, max_records):
    acc = accumulator_on(TWINS[name], 10_000, max_records, {"t": 1}, 0)
    futures = [acc.send("t", b"v") for _ in range(4)]  # fast path: new batches, and records into open ones
    futures.append(acc.send("t", "text"))  # slow path: the accumulator's append (opening a batch at max 1)
    acc.close_expired(0.0, force=True)
    batches = list(dict.fromkeys(f._batch for f in futures))
    assert len(batches) == (5 if max_records == 1 else 2)
    for batch in batches:
        assert gc.is_tracked(batch) is not UNTRACKS and gc.is_tracked(batch.records) is not UNTRACKS
    futures[0].add_callback(lambda metadata: None)
    futures[-1]._batch.fail(RuntimeError("boom"))
    assert gc.is_tracked(futures[0]._batch) and gc.is_tracked(futures[-1]._batch)
    assert [gc.is_tracked(b) for b in batches[1:-1]] == [not UNTRACKS] * (len(batches) - 2)


class Boom(RuntimeError):
    """(A built-in exception takes no weak reference; a subclass does.)"""


def _fail_from_a_frame_holding(batch) -> weakref.ref:
    """Fail `batch` with an exception whose traceback's frame holds the batch: a cycle through it."""
    try:
        raise Boom("boom")
    except Boom as exc:
        batch.fail(exc)
        return weakref.ref(exc)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_cycle_through_a_failed_batch_or_a_callback_is_collected(name):
    """The batches are untracked while they hold only atoms; the cycles a callback or an error make through
    them must still be collected (they would leak if `fail`/`add_callback` did not track the batch again)."""
    acc = accumulator_on(TWINS[name], 10_000, 100, {"t": 1}, 0)
    failed, called = acc.send("t", b"v"), acc.send("t", b"w", partition=0)
    acc.close_expired(0.0, force=True)
    error = _fail_from_a_frame_holding(failed._batch)
    # a new open batch whose callback holds it: batch -> callback -> batch (a future on the way would not do:
    # futures are untracked too, _csend.pyx Rule 3, and that cycle ends when the batch completes)
    other = acc.send("t", b"x")
    callback = (lambda batch: lambda metadata: batch)(other._batch)
    other.add_callback(callback)
    gone = weakref.ref(callback)
    del failed, called, other, callback
    acc.ready.clear()
    acc._open.clear()
    acc._incomplete.clear()
    gc.collect()
    assert error() is None and gone() is None


@pytest.mark.parametrize("max_records", [1, 2, 3])
def test_both_twins_wake_the_sender_and_move_the_sticky_partition_alike(max_records):
    """A batch that opens (its linger deadline) or closes wakes the sender; a closed batch moves the sticky
    partition. A missed wake-up leaves records waiting until the sender's next pass."""
    calls = {}
    for name, base in TWINS.items():
        acc = accumulator_on(base, 300, max_records, {"a": 3, "b": 1}, 7)
        seen = calls[name] = []
        acc._on_ready = lambda: seen.append("ready")
        listener = acc.closed_listener
        acc.closed_listener = lambda topic, partition: seen.append(("closed", topic, partition)) or listener(
            topic, partition)
        for i in range(12):
            acc.send("a" if i % 3 else "b", b"x" * (0, 40, 80, 300)[i % 4])  # 300: closes as it opens
            seen.append(i)
    assert calls["python"] == calls["cython"]
    assert calls["python"].count("ready") >= 12 // max_records


@pytest.mark.parametrize("opened", [False, True])
@pytest.mark.parametrize("name", sorted(TWINS))
def test_send_waits_while_another_thread_holds_the_accumulators_lock(name, opened):
    """_csend.pyx Rule 6: send keeps the lock with the GIL alone only when no thread holds it."""
    acc = accumulator_on(TWINS[name], 10_000, 100, {"t": 1}, 0)
    if opened:
        acc.send("t", b"first")  # the next record goes into this open batch; else it opens one
    done = []
    acc._lock.acquire()
    try:
        sender = threading.Thread(target=lambda: done.append(acc.send("t", b"v")))
        sender.start()
        time.sleep(0.1)
        assert not done and sum(len(b.records) for b in acc._open.values()) == int(opened)
    finally:
        acc._lock.release()
    sender.join(5)
    assert done and done[0]._batch.records[done[0]._index][1] == b"v"


class Topic(str):
    """A str subclass: its hash and equality could run Python code, so it takes the slow path."""

    def __hash__(self):
        return str.__hash__(self)


@pytest.mark.parametrize("name", sorted(TWINS))
def test_a_topic_that_is_not_exactly_str_takes_the_slow_path_and_lands_alike(name):
    acc = accumulator_on(TWINS[name], 10_000, 100, {"t": 1}, 0)
    slow = spy_on_slow_path(acc)
    first, second = acc.send("t", b"v"), acc.send(Topic("t"), b"w")
    assert len(slow) == 1 and second._batch is first._batch and second._index == 1
    assert [type(key[0]) for key in acc._open] == [str]  # the slow path keys its batches by a plain str
    third = acc.send(Topic("u"), b"x", partition=0)  # a new batch, opened by the slow path
    acc.metadata.partition_counts["u"] = 1
    assert [type(key[0]) for key in acc._open] == [str, str] and acc.send("u", b"y")._batch is third._batch


def test_a_batch_type_that_hashes_in_python_is_refused():
    class Hashing(ProducerBatch):
        __slots__ = ()

        def __hash__(self):
            return 0

    acc = accumulator_on(sendpath.SendPath, 10_000, 100, {"t": 1}, 0)
    if sendpath.IMPLEMENTATION == sendpath.CYTHON:
        with pytest.raises(TypeError, match="hash and equality"):
            acc.batch_type = Hashing
    else:  # the pure-Python twin runs under threading.Lock: any batch type does
        acc.batch_type = Hashing
