"""The producer's per-partition batches (design notes 4.4): records wait here until a batch is full or old.

Rule 1: `append` is the whole of `send()`'s work: one tuple appended to the partition's open batch under one
short lock, and a two-slot future handle. No encoding happens here; the sender builds each batch once. Its
common case (a record into a batch already open) runs in one call, `SendPath.send` (sendpath.py: compiled,
with its pure-Python twin), which hands the rest to `append`.
Rule 2: a batch closes when it reaches `batch.size` bytes (an uncompressed estimate) or `batch.num.messages`
records; the sender closes it when it is `linger.ms` old or on `flush()`. Closed batches leave in the order
they closed.
Rule 3: memory is bounded: the estimated bytes of every unfinished batch count against `buffer.memory`, and
`append` blocks (up to `max.block.ms`) until the sender's completed batches release enough.
Rule 4: `fill` is the bulk twin of `append` (`Producer.send_many`): it adds a run of records to one partition's
open batch under one lock round per batch, closing it exactly where a run of `append` calls would have (same
sizes, same limits), so the bulk path makes the same batches, in the same order, as per-record sends.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, bisect_right
from collections import deque

from sparklog.client.futures import BatchFuture, RecordFuture
from sparklog.client.sendpath import RECORD_OVERHEAD as _SENDPATH_OVERHEAD
from sparklog.client.sendpath import Lock, SendPath, untrack_batch

# Bytes a record adds besides its key, value and headers: length, attributes, deltas and lengths as
# varints (Kafka's DefaultRecord.MAX_RECORD_OVERHEAD is 21; small records use fewer).
RECORD_OVERHEAD = 12
assert RECORD_OVERHEAD == _SENDPATH_OVERHEAD  # send()'s fast path (sendpath.py, _csend.pyx) counts the same
# The batch header (61 bytes) counted once per batch.
BATCH_OVERHEAD = 61
_monotonic = time.monotonic


class BufferExhausted(TimeoutError):
    """`send()` waited `max.block.ms` for `buffer.memory` and none was freed (Kafka's BufferExhaustedException)."""


class ProducerBatch(BatchFuture):
    """Records of one partition that will travel as one RecordBatch; it is its own future (one object per
    batch instead of two: at `batch.num.messages=1` that is one object per record)."""

    __slots__ = ()  # its fields are sendpath.BatchSlots's, which send() also fills (sendpath.py Rule 4)

    def __init__(self, topic: str, partition: int, now: float) -> None:
        # BatchFuture's fields set here, not by calling its __init__: at batch.num.messages=1 this runs per record.
        self.topic = topic
        self.partition = partition
        self.base_offset = None
        self.log_append_time = -1
        self.error = None
        self._done = False
        self._callbacks = None
        self.records = []
        self.size = BATCH_OVERHEAD
        self.created = now
        self.attempts = 0
        self.retry_at = 0.0
        self.payload: bytes | None = None  # built once by the sender, reused on retries
        self.producer_id = -1  # the idempotent producer's id and sequence the payload was built with
        self.base_sequence = -1
        untrack_batch(self)  # until it takes a callback or an error (sendpath.py Rule 5)

    @property
    def future(self) -> "ProducerBatch":
        return self


class RecordAccumulator(SendPath):
    """Open and closed batches; thread-safe (application threads append, the sender thread drains).

    Its base, `SendPath`, holds the state `send()` touches and the common case of `send()` itself (Rule 1;
    sendpath.py): `_open`, `ready`, `_used` and the limits live there, under the same lock."""

    def __init__(self, batch_size: int, max_records: int, linger_ms: float, buffer_memory: int,
                 max_block_ms: float, on_ready=None) -> None:
        lock = Lock()
        self.init_send_path(batch_size, max(1, max_records), buffer_memory, lock, deque())
        self.linger = linger_ms / 1000.0
        self.max_block = max_block_ms / 1000.0
        self._space = threading.Condition(lock)
        self._space_waiters = 0
        self._on_ready = on_ready  # called when a batch opens or closes: wakes an idle sender
        self.closed_listener = None  # fn(topic, partition) when a batch fills: the sticky partitioner
        self.future_type = RecordFuture
        self.batch_type = ProducerBatch

    def append(self, topic: str, partition: int, record: tuple, size: int) -> RecordFuture:
        """Add `record` = (key, value, headers, timestamp) of estimated `size` bytes; returns its future.

        The hot path of `send()`: explicit acquire/release (a `with` block costs twice as much here), and
        only the batch's list append and size sum under the lock; the future is made after it.
        """
        size += RECORD_OVERHEAD
        lock = self._lock
        lock.acquire()
        batch = self._open.get((topic, partition))
        if batch is None and self.max_records == 1 and self._used + size + BATCH_OVERHEAD <= self.buffer_memory:
            return self._append_alone(topic, partition, record, size)  # releases the lock
        if batch is None or self._used + size > self.buffer_memory:
            try:
                batch = self._open_batch((topic, partition), size)
            except BaseException:
                lock.release()
                raise
        else:
            self._used += size
        records = batch.records
        records.append(record)
        count = len(records)
        batch.size += size
        if batch.size < self.batch_size and count < self.max_records:
            lock.release()
            if count == 1 and self._on_ready is not None:
                self._on_ready()  # the sender must learn this new batch's linger deadline
            return RecordFuture(batch, count - 1)
        del self._open[(topic, partition)]
        self.ready.append(batch)
        lock.release()
        if self.closed_listener is not None:
            self.closed_listener(topic, partition)
        if self._on_ready is not None:
            self._on_ready()
        return RecordFuture(batch, count - 1)

    def _append_alone(self, topic: str, partition: int, record: tuple, size: int) -> RecordFuture:
        """(Under the lock, which it releases.) `batch.num.messages=1`: the record's batch closes as it opens,
        so it goes straight to `ready`, never through `_open`."""
        batch = ProducerBatch(topic, partition, _monotonic())
        batch.records.append(record)
        batch.size += size
        self._used += size + BATCH_OVERHEAD
        self._incomplete.add(batch)
        self.ready.append(batch)
        self._lock.release()
        if self.closed_listener is not None:
            self.closed_listener(topic, partition)
        if self._on_ready is not None:
            self._on_ready()
        return RecordFuture(batch, 0)

    def fill(self, topic: str, partition: int, records: list, ends: list, start: int, stop: int) -> tuple[int, ProducerBatch]:
        """Append `records[start:stop]` to the partition's open batch until it closes (Rule 2) or the run
        ends; return (the index of the first record not appended, the batch).

        `ends[i]` is the running total of the estimated sizes of `records[:i + 1]`, RECORD_OVERHEAD each
        included, so finding where the batch fills is one bisect, not a loop over the records.
        """
        tp = (topic, partition)
        before = ends[start - 1] if start else 0
        with self._lock:
            batch = self._open.get(tp)
            room = self.batch_size - (batch.size if batch is not None else BATCH_OVERHEAD)
            count = len(batch.records) if batch is not None else 0
            # the record whose addition reaches batch.size closes the batch, as in append()
            end = min(bisect_left(ends, before + room, start, stop) + 1, stop, start + self.max_records - count)
            # never more at once than buffer.memory could ever hold (append would have waited record by record)
            end = min(end, max(start + 1, bisect_right(ends, before + self.buffer_memory - BATCH_OVERHEAD, start, stop)))
            size = ends[end - 1] - before
            batch = self._open_batch(tp, size)
            batch.records.extend(records[start:end])
            batch.size += size
            closed = batch.size >= self.batch_size or len(batch.records) >= self.max_records
            if closed:
                del self._open[tp]
                self.ready.append(batch)
        if closed and self.closed_listener is not None:
            self.closed_listener(topic, partition)
        if self._on_ready is not None and (closed or count == 0):
            self._on_ready()
        return end, batch

    def _open_batch(self, tp: tuple[str, int], size: int) -> ProducerBatch:
        """(Under the lock.) Account for `size` more bytes, waiting for memory, and return the open batch
        of `tp`, creating it if needed."""
        batch = self._open.get(tp)
        needed = size if batch is not None else size + BATCH_OVERHEAD
        if self._used + needed > self.buffer_memory:
            self._wait_for_space(needed)
            batch = self._open.get(tp)  # the sender may have closed it while we waited
            needed = size if batch is not None else size + BATCH_OVERHEAD
        self._used += needed
        if batch is None:
            batch = self._open[tp] = ProducerBatch(tp[0], tp[1], time.monotonic())
            self._incomplete.add(batch)
        return batch

    def _wait_for_space(self, size: int) -> None:
        if size > self.buffer_memory:
            raise BufferExhausted(f"a record of {size} bytes exceeds buffer.memory={self.buffer_memory}")
        deadline = time.monotonic() + self.max_block
        self._space_waiters += 1
        try:
            while self._used + size > self.buffer_memory:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._space.wait(remaining) and self._used + size > self.buffer_memory:
                    raise BufferExhausted(f"buffer.memory={self.buffer_memory} stayed full for max.block.ms")
        finally:
            self._space_waiters -= 1

    def close_expired(self, now: float, force: bool = False) -> float | None:
        """Close open batches older than linger.ms (all of them if `force`); return the next expiry time."""
        next_expiry = None
        with self._lock:
            if not self._open:
                return None
            for tp, batch in list(self._open.items()):
                expiry = batch.created + self.linger
                if force or expiry <= now:
                    del self._open[tp]
                    self.ready.append(batch)
                elif next_expiry is None or expiry < next_expiry:
                    next_expiry = expiry
        return next_expiry

    def release(self, batch: ProducerBatch) -> None:
        """The sender finished `batch` (acknowledged or failed): give its memory back."""
        self.release_all((batch,))

    def release_all(self, batches) -> None:
        """Give back the memory of finished batches: one lock round for a whole response."""
        with self._lock:
            incomplete = self._incomplete
            freed = 0
            for batch in batches:
                incomplete.discard(batch)
                freed += batch.size
            self._used -= freed
            if self._space_waiters:
                self._space.notify_all()

    def incomplete(self) -> list[ProducerBatch]:
        with self._lock:
            return list(self._incomplete)

    def has_open(self) -> bool:
        return bool(self._open)

    @property
    def used_bytes(self) -> int:
        return self._used
