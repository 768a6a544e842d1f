"""`Producer.send()`'s common case, done in one call: the accumulator's state that `send()` touches.

    SendPath.send(topic, value=None, key=None, headers=None, partition=None, timestamp=None) -> RecordFuture

`RecordAccumulator` is a `SendPath`; the producer's `send` is its accumulator's `send`, which takes the
common case (the same record into a partition's open batch, the batch's future handle) and hands
everything else to `slow_send` (`Producer.send`'s full Python path) or to the accumulator's `append`.

Rule 1: there are two twins, chosen once at import by `records.implementation` (the one selector): the
        compiled one (`_csend.pyx`) unless SPARKLOG_NO_EXTENSIONS is set or it was not built; this module's
        pure-Python classes are the authority. `IMPLEMENTATION` names the active one.
Rule 2: the fast path takes only what it can finish without waiting: an open producer, an exact `str`
        topic, exact `bytes` (or None) key and value, no headers, an int or absent timestamp and partition,
        a topic whose partition count is known, and room in `buffer.memory` (in the partition's open batch,
        or a new one: Rule 4). Everything else goes whole to the slow path, which decides; both paths make
        the same records and batches.
Rule 3: under the accumulator's lock (`Lock`: `threading.Lock`, or the compiled `SendLock`, which the compiled
        `send` keeps with the GIL alone when no thread holds it: _csend.pyx Rule 6) the fast path does only
        the batch's list append, the size sums and, when the batch fills, its move to `ready` (the
        accumulator's Rule 2); the future handle (`FutureSlots`: the batch and the record's index) is made
        without an `__init__` call.
Rule 4: a partition without an open batch gets a new one from the fast path when `buffer.memory` has room
        (only waiting for memory goes to the accumulator's `append`): made whole, with `ProducerBatch.__init__`'s
        fields and the record, it becomes the partition's open batch, or goes straight to `ready` when it
        closes as it opens (at `batch.num.messages=1`, or a record of `batch.size`: accumulator.py's
        `_append_alone` and `append`).
Rule 5: the compiled twin keeps batches out of the cyclic collector's view until they take a callback or an
        error (`untrack_batch`, `track_batch`; _csend.pyx's Rule 5); the pure-Python twin's are no-ops.
"""

from __future__ import annotations

import threading
import time

from sparklog.records import implementation

RECORD_OVERHEAD = 12  # accumulator.RECORD_OVERHEAD, checked equal there at import
BATCH_OVERHEAD = 61  # accumulator.BATCH_OVERHEAD, likewise
_time_ns = time.time_ns
_monotonic = time.monotonic


class PyFutureSlots:
    """The base of `futures.RecordFuture`: its batch and the record's index in it."""

    __slots__ = ("_batch", "_index")

    def __init__(self, batch, index: int) -> None:
        self._batch = batch
        self._index = index


class PyBatchSlots:
    """The base of `futures.BatchFuture` and `accumulator.ProducerBatch`: their fields."""

    __slots__ = ("topic", "partition", "base_offset", "log_append_time", "error", "_done", "_callbacks", "records",
                 "created", "attempts", "retry_at", "payload", "producer_id", "base_sequence", "size")


def _new_alone(batch_type: type, topic: str, partition: int, record: tuple, size: int):
    """A batch of one record, made whole here: `ProducerBatch.__init__`'s fields and one record."""
    batch = batch_type.__new__(batch_type)
    batch.topic, batch.partition, batch.base_offset, batch.log_append_time = topic, partition, None, -1
    batch.error, batch._done, batch._callbacks, batch.records = None, False, None, [record]
    batch.size = BATCH_OVERHEAD + size
    batch.created, batch.attempts, batch.retry_at, batch.payload = _monotonic(), 0, 0.0, None
    batch.producer_id = batch.base_sequence = -1
    untrack_batch(batch)  # Rule 5
    return batch


class PySendPath:
    """The accumulator's state that `send()` touches; see the module docstring."""

    __slots__ = ("_lock", "_open", "ready", "closed_listener", "_on_ready", "_incomplete", "metadata", "partitioner",
                 "slow_send", "future_type", "batch_type", "batch_size", "max_records", "buffer_memory", "_used",
                 "closed")

    def init_send_path(self, batch_size: int, max_records: int, buffer_memory: int, lock, ready) -> None:
        """(An __init__ the subclass calls by name: `RecordAccumulator`'s methods serve either twin.)"""
        self.batch_size = batch_size
        self.max_records = max_records
        self.buffer_memory = buffer_memory
        self._lock = lock
        self._open: dict = {}
        self._incomplete: set = set()
        self.ready = ready
        self._used = 0
        self.closed = False
        self.closed_listener = self._on_ready = self.metadata = self.partitioner = self.slow_send = None
        self.future_type = self.batch_type = None

    def send(self, topic, value=None, key=None, headers=None, partition=None, timestamp=None):
        if headers is not None and not headers:
            headers = None
        if (self.closed or headers is not None or not (value is None or value.__class__ is bytes)
                or not (key is None or key.__class__ is bytes) or topic.__class__ is not str):
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        count = self.metadata.partition_counts.get(topic)
        if partition is None:
            if count is None:
                return self.slow_send(topic, value, key, headers, partition, timestamp)
            partition = 0 if count == 1 else self.partitioner.partition(topic, key, count)
        elif partition.__class__ is not int or partition < 0 or (count is not None and partition >= count):
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        if timestamp is None:
            timestamp = _time_ns() // 1_000_000
        elif timestamp.__class__ is not int:
            return self.slow_send(topic, value, key, headers, partition, timestamp)
        size = RECORD_OVERHEAD + (len(value) if value is not None else 0) + (len(key) if key is not None else 0)
        record = (key, value, None, timestamp)
        tp = (topic, partition)
        opened = False
        lock = self._lock
        lock.acquire()
        try:
            batch = self._open.get(tp)
            if batch is None and self._used + size + BATCH_OVERHEAD <= self.buffer_memory:
                # a new batch (Rule 4): accumulator.append's _open_batch, or its _append_alone
                batch = _new_alone(self.batch_type, topic, partition, record, size)
                self._used += size + BATCH_OVERHEAD
                self._incomplete.add(batch)
                index = 0
                if self.max_records > 1 and batch.size < self.batch_size:
                    self._open[tp] = batch
                    opened = True
                else:
                    self.ready.append(batch)
            elif batch is not None and self._used + size <= self.buffer_memory:
                self._used += size
                records = batch.records
                records.append(record)
                index = len(records) - 1
                batch.size += size
                if batch.size < self.batch_size and index + 1 < self.max_records:
                    future = self.future_type.__new__(self.future_type)
                    future._batch, future._index = batch, index
                    return future
                del self._open[tp]
                self.ready.append(batch)
            else:
                batch = None
        finally:
            lock.release()
        if batch is None:  # memory to wait for: the accumulator's append does it
            return self.append(topic, partition, record, size - RECORD_OVERHEAD)
        if opened:  # the sender must learn this new batch's linger deadline
            if self._on_ready is not None:
                self._on_ready()
            future = self.future_type.__new__(self.future_type)
            future._batch, future._index = batch, index
            return future
        if self.closed_listener is not None and count != 1:  # one partition: no sticky partition to move
            self.closed_listener(topic, partition)
        if self._on_ready is not None:
            self._on_ready()
        future = self.future_type.__new__(self.future_type)
        future._batch, future._index = batch, index
        return future

    def append(self, topic: str, partition: int, record: tuple, size: int):  # the accumulator's
        raise NotImplementedError


def py_untrack_batch(batch) -> None:
    """The compiled `untrack_batch`'s twin: pure Python cannot untrack an object (Rule 5)."""


def py_track_batch(batch) -> None:
    """The compiled `track_batch`'s twin (Rule 5)."""


PYTHON = "python"
CYTHON = "cython"
FutureSlots, BatchSlots, SendPath, Lock = PyFutureSlots, PyBatchSlots, PySendPath, threading.Lock
untrack_batch, track_batch = py_untrack_batch, py_track_batch
IMPLEMENTATION = PYTHON
KERNEL = "sparklog.client._csend"
_csend = implementation.load(KERNEL, "send path", ("FutureSlots", "BatchSlots", "SendPath", "SendLock",
                                                   "untrack_batch", "track_batch"))
COMPILED_UNAVAILABLE: str | None = implementation.report_of(KERNEL)
if _csend is not None:
    FutureSlots, BatchSlots, SendPath, Lock = _csend.FutureSlots, _csend.BatchSlots, _csend.SendPath, _csend.SendLock
    untrack_batch, track_batch = _csend.untrack_batch, _csend.track_batch
    IMPLEMENTATION = CYTHON
