"""Futures for produced records: one `BatchFuture` per batch, one tiny `RecordFuture` handle per record.

Rule 1: a batch completes once, with its base offset or an exception; callbacks run on the thread that
completes it (the producer's I/O thread), so they must be quick, as in Kafka's Java client.
Rule 2: `send()` allocates only the two-slot handle per record (sendpath.py makes it without an `__init__`
call); the event and callback lists belong to the batch, so batching 50 records costs one Event, not 50.
Rule 3: a batch may be out of the cyclic collector's view (sendpath.py Rule 5) until `fail` or
`add_callback`, which show it again before it holds what could close a cycle.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, NamedTuple

from sparklog.client.sendpath import BatchSlots, FutureSlots, track_batch

logger = logging.getLogger(__name__)

# One lock for every batch's callback list: taken once per completed batch and per added callback only.
_CALLBACK_LOCK = threading.Lock()
# One condition for everyone waiting on any batch, and how many wait (so completion skips notify when none).
_DONE = threading.Condition(threading.Lock())
_WAITERS = [0]


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 when acks=0: the broker answers nothing
    timestamp: int | None  # the producer's timestamp (or the broker's with LogAppendTime); None if unknown


class BatchFuture(BatchSlots):
    """The outcome of one produce batch: a base offset, or an exception.

    Its fields are `sendpath.BatchSlots`'s: C fields when the send path is compiled.

    No Event per batch (creating one costs more than encoding a small batch): completion sets `_done`, and
    waiters, which are rare (`get()`, `flush()`), share one Condition and are woken only when there are any.
    """

    __slots__ = ()

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset: int | None = None
        self.records: list | None = None  # the batch's (key, value, headers, timestamp) tuples
        self.size = 0
        self.log_append_time = -1
        self.error: BaseException | None = None
        self._done = False
        self._callbacks: list | None = None

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> bool:
        if self._done:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        with _DONE:
            _WAITERS[0] += 1
            try:
                while not self._done:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    _DONE.wait(remaining)
            finally:
                _WAITERS[0] -= 1
        return True

    def complete(self, base_offset: int, log_append_time: int = -1) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self._finish()

    def fail(self, error: BaseException) -> None:
        track_batch(self)  # the error's traceback may lead back here: the collector must see this batch
        self.error = error
        self._finish()

    def _finish(self) -> None:
        with _CALLBACK_LOCK:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        if _WAITERS[0]:
            with _DONE:
                _DONE.notify_all()
        if callbacks:
            for index, on_success, on_error in callbacks:
                _run_callback(self, index, on_success, on_error)

    def add_callback(self, index: int, on_success: Callable | None, on_error: Callable | None) -> None:
        track_batch(self)  # a callback may hold this batch: a cycle the collector must see
        with _CALLBACK_LOCK:  # against _finish taking the list between our check and our append
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((index, on_success, on_error))
                return
        _run_callback(self, index, on_success, on_error)

    def metadata(self, index: int) -> RecordMetadata:
        offset = -1 if self.base_offset is None or self.base_offset < 0 else self.base_offset + index
        if self.log_append_time >= 0:
            timestamp = self.log_append_time
        else:
            timestamp = self.records[index][3] if self.records else None
        return RecordMetadata(self.topic, self.partition, offset, timestamp)


def complete_all(batches, base_offset: int, log_append_time: int = -1) -> None:
    """Complete consecutive batches of one partition that one response acknowledged from `base_offset`:
    `BatchFuture.complete` for each, with one lock round and at most one notify for all of them."""
    finished = []
    with _CALLBACK_LOCK:
        for batch in batches:
            batch.base_offset = base_offset
            batch.log_append_time = log_append_time
            batch._done = True
            base_offset += len(batch.records)
            if batch._callbacks:
                finished.append((batch, batch._callbacks))
            batch._callbacks = None
    if _WAITERS[0]:
        with _DONE:
            _DONE.notify_all()
    for batch, callbacks in finished:
        for index, on_success, on_error in callbacks:
            _run_callback(batch, index, on_success, on_error)


def _run_callback(batch: BatchFuture, index: int, on_success: Callable, on_error: Callable | None) -> None:
    try:
        if batch.error is None:
            if on_success is not None:
                on_success(batch.metadata(index))
        elif on_error is not None:
            on_error(batch.error)
    except Exception:  # a user callback must not kill the I/O thread
        logger.exception("producer callback raised")


class RecordFuture(FutureSlots):
    """What `Producer.send` returns: `get(timeout)` -> `RecordMetadata`, or raises the send's error.

    Its two slots, the batch and the record's index in it, come from `sendpath.FutureSlots` (compiled when
    the extension is built), so `send()` makes one without an `__init__` call: `RecordFuture(batch, index)`."""

    __slots__ = ()

    def done(self) -> bool:
        return self._batch._done

    def succeeded(self) -> bool:
        return self._batch._done and self._batch.error is None

    def failed(self) -> bool:
        return self._batch._done and self._batch.error is not None

    def get(self, timeout: float | None = None) -> RecordMetadata:
        if not self._batch.wait(timeout):
            raise TimeoutError(f"no acknowledgement within {timeout}s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch.metadata(self._index)

    result = get  # concurrent.futures spelling

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self._batch.wait(timeout):
            raise TimeoutError(f"no acknowledgement within {timeout}s")
        return self._batch.error

    def add_callback(self, fn: Callable[[RecordMetadata], Any]) -> "RecordFuture":
        self._batch.add_callback(self._index, fn, None)
        return self

    def add_errback(self, fn: Callable[[BaseException], Any]) -> "RecordFuture":
        self._batch.add_callback(self._index, None, fn)
        return self

    def add_done_callback(self, fn: Callable[["RecordFuture"], Any]) -> "RecordFuture":
        """concurrent.futures style: `fn(future)` on success and on failure."""
        self._batch.add_callback(self._index, lambda _m: fn(self), lambda _e: fn(self))
        return self
