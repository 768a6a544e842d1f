"""The worker's consumer pool: borrow, give back, discard, capacity, idle timeout, retried tasks, threads."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from sparklog.datasource.consumer_pool import ConsumerPool, PoolSettings

EVICTOR = "sparklog-consumer-pool-evictor"


class FakeConsumer:
    """Counts closes and catches two tasks using it at once."""

    opened = 0

    def __init__(self, key=None) -> None:
        FakeConsumer.opened += 1
        self.key, self.closes, self.users = key, 0, 0

    def close(self) -> None:
        self.closes += 1


def opener(key=None):
    return lambda: FakeConsumer(key)


def wait_for(predicate, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_a_consumer_given_back_healthy_serves_the_next_borrow_of_its_key():
    pool = ConsumerPool()
    first = pool.borrow("a", opener())
    assert not first.reused
    pool.give_back(first)
    second = pool.borrow("a", opener())
    assert second.reused and second.consumer is first.consumer
    other = pool.borrow("b", opener())
    assert other.consumer is not first.consumer
    pool.give_back(second)
    pool.give_back(other)
    assert pool.statistics() == pool.statistics().__class__(idle=2, borrowed=0, opened=2, reused=1, closed=0)
    pool.close_all()
    assert first.consumer.closes == 1 and other.consumer.closes == 1


def test_a_consumer_given_back_unhealthy_is_closed_and_the_next_borrow_opens_a_new_one():
    pool = ConsumerPool()
    lease = pool.borrow("a", opener())
    pool.give_back(lease, healthy=False)
    assert lease.consumer.closes == 1
    again = pool.borrow("a", opener())
    assert not again.reused and again.consumer is not lease.consumer
    pool.give_back(again)
    pool.close_all()


def test_a_key_already_out_gets_a_fresh_consumer_that_is_closed_not_pooled():
    pool = ConsumerPool()
    first = pool.borrow("a", opener())
    second = pool.borrow("a", opener())
    assert second.consumer is not first.consumer and not second.pooled
    pool.give_back(second)
    assert second.consumer.closes == 1
    pool.give_back(first)
    assert first.consumer.closes == 0
    assert pool.borrow("a", opener()).consumer is first.consumer
    pool.close_all()


def test_a_retried_task_closes_the_idle_consumer_and_opens_a_new_one():
    pool = ConsumerPool()
    lease = pool.borrow("a", opener())
    pool.give_back(lease)
    retry = pool.borrow("a", opener(), fresh=True)
    assert lease.consumer.closes == 1
    assert retry.consumer is not lease.consumer and retry.pooled and not retry.reused
    pool.give_back(retry)
    assert pool.statistics().idle == 1
    pool.close_all()


def test_with_the_pool_off_every_borrow_opens_and_every_give_back_closes():
    pool, off = ConsumerPool(), PoolSettings(enabled=False)
    leases = [pool.borrow("a", opener(), off) for _ in range(2)]
    for lease in leases:
        pool.give_back(lease, off)
    assert [lease.consumer.closes for lease in leases] == [1, 1]
    assert pool.statistics().idle == 0 and pool.statistics().opened == 2


def test_past_the_capacity_the_consumer_idle_longest_is_closed():
    pool, two = ConsumerPool(), PoolSettings(capacity=2)
    leases = [pool.borrow(key, opener(), two) for key in "abc"]
    for lease in leases:
        pool.give_back(lease, two)
    assert [lease.consumer.closes for lease in leases] == [1, 0, 0]
    assert pool.statistics().idle == 2
    assert not pool.borrow("a", opener(), two).reused
    pool.close_all()


def test_capacity_zero_pools_nothing():
    pool, none = ConsumerPool(), PoolSettings(capacity=0)
    lease = pool.borrow("a", opener(), none)
    pool.give_back(lease, none)
    assert lease.consumer.closes == 1 and pool.statistics().idle == 0


def test_an_idle_consumer_is_closed_after_the_timeout_and_the_evictor_then_ends():
    pool, quick = ConsumerPool(), PoolSettings(idle_timeout_ms=50)
    lease = pool.borrow("a", opener(), quick)
    pool.give_back(lease, quick)
    assert lease.consumer.closes == 0
    wait_for(lambda: lease.consumer.closes == 1, "the idle consumer is closed")
    assert pool.statistics().idle == 0
    wait_for(lambda: not pool._evictor, "the evictor thread ends with nothing idle")


def test_a_consumer_borrowed_again_before_its_timeout_is_not_closed():
    """The pool's clock, not the test's pace, says what "before its timeout" is: the evictor wakes once the
    idle time is over and finds nothing to close."""
    now = [0.0]
    pool, quick = ConsumerPool(clock=lambda: now[0]), PoolSettings(idle_timeout_ms=300)
    lease = pool.borrow("a", opener(), quick)
    pool.give_back(lease, quick)
    again = pool.borrow("a", opener(), quick)
    now[0] = 10.0  # long past the idle timeout it was given back with
    wait_for(lambda: not pool._evictor, "the evictor thread ends with nothing idle")
    assert again.reused and lease.consumer.closes == 0
    pool.give_back(again, quick)
    pool.close_all()


def test_an_open_that_fails_leaves_the_key_free():
    pool = ConsumerPool()

    def broken():
        raise ConnectionError("no broker")

    with pytest.raises(ConnectionError):
        pool.borrow("a", broken)
    assert pool.statistics().borrowed == 0
    lease = pool.borrow("a", opener())
    assert lease.pooled
    pool.give_back(lease)
    pool.close_all()


def test_threads_sharing_a_pool_never_hold_one_consumer_at_once():
    pool, errors = ConsumerPool(), []
    all_consumers: set = set()

    def task(n: int) -> None:
        for i in range(200):
            lease = pool.borrow(f"k{(n + i) % 3}", opener(), PoolSettings(capacity=2))
            consumer = lease.consumer
            all_consumers.add(consumer)
            consumer.users += 1
            if consumer.users != 1 or consumer.closes:
                errors.append((consumer, consumer.users, consumer.closes))
            consumer.users -= 1
            pool.give_back(lease, PoolSettings(capacity=2), healthy=i % 17 != 0)

    threads = [threading.Thread(target=task, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors
    stats = pool.statistics()
    assert stats.borrowed == 0 and stats.idle <= 2
    assert sum(c.closes for c in all_consumers) == len(all_consumers) - stats.idle
    pool.close_all()
    assert all(c.closes == 1 for c in all_consumers)


class PoolMachine(RuleBasedStateMachine):
    """The pool against a model: who holds what, and that nothing is used after it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = ConsumerPool()
        self.settings = PoolSettings(capacity=2)
        self.out: list = []
        self.idle: dict = {}  # the model: key -> consumer

    @rule(key=st.sampled_from("abc"), fresh=st.booleans())
    def borrow(self, key, fresh) -> None:
        lease = self.pool.borrow(key, opener(key), self.settings, fresh=fresh)
        assert lease.consumer.closes == 0
        pooled_out = any(o.key == key and o.pooled for o in self.out)
        expected = self.idle.pop(key, None) if not pooled_out else None
        if expected is not None and fresh:
            assert expected.closes == 1
            expected = None
        assert lease.reused == (expected is not None)
        if expected is not None:
            assert lease.consumer is expected
        assert lease.pooled == (not pooled_out)
        self.out.append(lease)

    @precondition(lambda self: self.out)
    @rule(index=st.integers(0, 10), healthy=st.booleans())
    def give_back(self, index, healthy) -> None:
        lease = self.out.pop(index % len(self.out))
        self.pool.give_back(lease, self.settings, healthy)
        if healthy and lease.pooled:
            self.idle[lease.key] = lease.consumer
            while len(self.idle) > self.settings.capacity:
                oldest = next(iter(self.idle))
                assert self.idle.pop(oldest).closes == 1
        else:
            assert lease.consumer.closes == 1

    @invariant()
    def idle_ones_are_open_and_counted(self) -> None:
        assert self.pool.statistics().idle == len(self.idle)
        assert self.pool.statistics().borrowed == len(self.out)
        assert all(c.closes == 0 for c in self.idle.values())

    def teardown(self) -> None:
        self.pool.close_all()
        assert all(c.closes == 1 for c in self.idle.values())


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_idle_consumers_are_closed_when_the_interpreter_exits():
    import subprocess
    import sys

    script = (
        "from sparklog.datasource.consumer_pool import POOL\n"
        "class C:\n"
        "    def close(self):\n"
        "        print('closed', flush=True)\n"
        "POOL.give_back(POOL.borrow('k', C))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["closed"]


def test_a_forked_child_starts_with_an_empty_pool_and_leaves_the_parents_consumers_alone():
    pool = ConsumerPool()
    lease = pool.borrow("a", opener())
    pool.give_back(lease)
    parents_lock = pool._lock
    pool._forget()  # what os.register_at_fork runs in the child
    assert pool.statistics().idle == 0 and pool.statistics().borrowed == 0
    assert lease.consumer.closes == 0
    assert not pool.borrow("a", opener()).reused
    with parents_lock:  # (in a real child the parent's evictor thread does not exist: end this one)
        parents_lock.notify_all()
    wait_for(lambda: not any(t.name == EVICTOR for t in threading.enumerate()), "the evictor thread ends")
