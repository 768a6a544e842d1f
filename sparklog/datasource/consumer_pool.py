"""Consumers kept between the tasks of one Spark Python worker process, so that a task reading a partition
reuses an earlier task's connections, metadata and fetcher thread instead of opening its own (Spark's Kafka
source keeps its consumers per executor: `KafkaDataConsumer`, `InternalKafkaConsumerPool`). pyspark reuses
its Python workers between tasks (`spark.python.worker.reuse`, on by default), so a module-level pool lives
as long as the worker.

Rule 1 (key): a consumer is pooled under `(connection options, topic, partition)`: the same brokers and
client settings, one assigned partition. It carries no group or query state, so two queries may share it.
Rule 2 (exclusive): a borrowed consumer belongs to its task until it is returned. A task that asks for a key
whose consumer is out gets a fresh one that is closed when returned, never pooled (Spark's
`CachedKafkaConsumer` did the same; its later pool keeps several per key).
Rule 3 (discard): the borrower returns a consumer `healthy=False` when its read raised, timed out or saw
data loss; it is closed, never pooled. A retried task (`fresh=True`: Spark's task attempt number >= 1)
closes the key's idle consumer and opens a new one, as `KafkaDataConsumer.acquire` invalidates the key.
Rule 4 (idle): the borrower parks a consumer before returning it (its partition paused and its queued
chunks dropped, so its fetcher sends nothing and holds no records while idle) and seeks it where the next
task starts after borrowing it. A consumer idle for `idle_timeout_s` is closed by the evictor thread, which
runs only while consumers are idle and sleeps until the next one expires (Spark's evictor instead wakes
every `spark.kafka.consumer.cache.evictorThreadRunInterval`).
Rule 5 (capacity): at most `capacity` consumers are idle; returning one more closes the one idle longest.
Borrowed consumers are not counted: the limit is soft, as Spark's `spark.kafka.consumer.cache.capacity`.
Rule 6 (off): with `enabled=False` every borrow opens a consumer and every return closes it.
Rule 7 (exit): idle consumers are closed at interpreter exit; a process forked from one that has a pool
starts with an empty pool (the parent's consumers' threads do not exist in the child; their sockets are
left to the parent). A worker killed outright leaves its sockets to the kernel, which closes them.

A key's states: absent -borrow-> out -return healthy-> idle -borrow-> out; out -return unhealthy, pool off
or over capacity-> closed; idle -timeout, capacity, retried task or close_all-> closed.
Consumers are closed outside the pool's lock: a close joins the consumer's I/O thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable

logger = logging.getLogger(__name__)

DEFAULT_CAPACITY = 64  # Spark's spark.kafka.consumer.cache.capacity
DEFAULT_IDLE_TIMEOUT_MS = 5 * 60 * 1000  # Spark's spark.kafka.consumer.cache.timeout, 5m


@dataclass(frozen=True)
class PoolSettings:
    """What one read asks of the pool (the source options `sparklog.consumer.cache.*`)."""

    enabled: bool = True
    capacity: int = DEFAULT_CAPACITY
    idle_timeout_ms: int = DEFAULT_IDLE_TIMEOUT_MS


@dataclass(frozen=True)
class PoolStatistics:
    idle: int  # consumers waiting in the pool
    borrowed: int  # consumers out with a task, pooled or not
    opened: int  # consumers the pool opened, ever
    reused: int  # borrows served by an idle consumer
    closed: int  # consumers the pool closed: discarded, evicted, over capacity or not pooled


class Lease:
    """One borrowed consumer; hand it back with `ConsumerPool.give_back`."""

    __slots__ = ("key", "consumer", "pooled", "reused")

    def __init__(self, key: Hashable, consumer: Any, pooled: bool, reused: bool) -> None:
        self.key, self.consumer, self.pooled, self.reused = key, consumer, pooled, reused


class ConsumerPool:
    """Idle consumers by key, with the rules of the module docstring. Thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Condition()
        self._idle: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()  # key -> (consumer, expires at)
        self._out: set[Hashable] = set()  # keys whose pooled consumer is borrowed (Rule 2)
        self._borrowed = 0
        self._counts = {"opened": 0, "reused": 0, "closed": 0}
        self._capacity = DEFAULT_CAPACITY
        self._evictor: threading.Thread | None = None

    def borrow(self, key: Hashable, open_consumer: Callable[[], Any], settings: PoolSettings = PoolSettings(),
               fresh: bool = False) -> Lease:
        """A consumer for `key`: the idle one, else a new one from `open_consumer()` (Rules 2, 3, 6)."""
        stale = None
        with self._lock:
            pooled = settings.enabled and key not in self._out
            idle = self._idle.pop(key, None) if pooled else None
            if idle is not None and fresh:
                stale, idle = idle[0], None
            if pooled:
                self._out.add(key)
            self._borrowed += 1
            if idle is not None:
                self._counts["reused"] += 1
                return Lease(key, idle[0], True, True)
            self._counts["opened"] += 1
        self._close(stale)
        try:
            consumer = open_consumer()
        except BaseException:
            self._returned(key, pooled)
            raise
        return Lease(key, consumer, pooled, False)

    def give_back(self, lease: Lease, settings: PoolSettings = PoolSettings(), healthy: bool = True) -> None:
        """Pool a healthy, parked consumer; close any other (Rules 3, 5, 6). A lease is given back once."""
        keep = healthy and lease.pooled and settings.enabled
        closing = [] if keep else [lease.consumer]
        with self._lock:
            self._returned(lease.key, lease.pooled, locked=True)
            if keep:
                self._capacity = settings.capacity
                self._idle[lease.key] = (lease.consumer, self._clock() + settings.idle_timeout_ms / 1000)
                closing += self._over_capacity()
                self._start_evictor()
                self._lock.notify_all()
        for consumer in closing:
            self._close(consumer)

    def close_all(self) -> None:
        """Close every idle consumer (borrowed ones are closed when given back, once the pool is off)."""
        with self._lock:
            closing = [consumer for consumer, _ in self._idle.values()]
            self._idle.clear()
            self._lock.notify_all()
        for consumer in closing:
            self._close(consumer)

    def statistics(self) -> PoolStatistics:
        with self._lock:
            return PoolStatistics(len(self._idle), self._borrowed, **self._counts)

    # -- internals -----------------------------------------------------------------------------------------

    def _returned(self, key: Hashable, pooled: bool, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                return self._returned(key, pooled, True)
        self._borrowed -= 1
        if pooled:
            self._out.discard(key)

    def _over_capacity(self) -> list:
        closing = []
        while len(self._idle) > self._capacity:
            _, (consumer, _) = self._idle.popitem(last=False)  # the one idle longest
            closing.append(consumer)
        return closing

    def _expired(self) -> tuple[list, float | None]:
        """Idle consumers past their timeout (removed), and the seconds until the next one expires."""
        now, closing = self._clock(), []
        for key, (consumer, expires) in list(self._idle.items()):
            if expires <= now:
                del self._idle[key]
                closing.append(consumer)
        return closing, min((e - now for _, e in self._idle.values()), default=None)

    def _start_evictor(self) -> None:
        if self._evictor is None or not self._evictor.is_alive():
            self._evictor = threading.Thread(target=self._evict, name="sparklog-consumer-pool-evictor", daemon=True)
            self._evictor.start()

    def _evict(self) -> None:
        """The evictor thread (Rule 4): ends when nothing is idle; a later return starts another."""
        while True:
            with self._lock:
                closing, wait = self._expired()
                if not closing:
                    if wait is None:
                        self._evictor = None
                        return
                    self._lock.wait(wait)
                    continue
            for consumer in closing:
                self._close(consumer)

    def _close(self, consumer) -> None:
        if consumer is None:
            return
        with self._lock:
            self._counts["closed"] += 1
        try:
            consumer.close()
        except Exception:  # a consumer that fails to close is gone all the same
            logger.warning("closing a pooled consumer failed", exc_info=True)

    def _forget(self) -> None:
        """After a fork, in the child (Rule 7): the parent's consumers are not ours to use or close."""
        self._lock = threading.Condition()
        self._idle.clear()
        self._out.clear()
        self._borrowed = 0
        self._evictor = None


POOL = ConsumerPool()  # the worker process's pool
atexit.register(POOL.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL._forget)
