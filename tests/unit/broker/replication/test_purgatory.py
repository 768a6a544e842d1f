"""The purgatory: a parked condition is re-checked when its log is notified (from any thread), answered at
its deadline otherwise, and a notification between check and wait is never lost."""

from __future__ import annotations

import asyncio
import threading

from sparklog.broker.replication.purgatory import Purgatory

HOUR_S = 3600.0  # a deadline no test reaches: only a notify ends such a wait
SAFETY_S = 60.0  # what a test waits for a wake-up before it fails (a hang, not a slow machine)


class FakeLog:
    """Only what the purgatory uses of a PartitionLog: listener registration."""

    def __init__(self):
        self.listeners = []

    def add_high_watermark_listener(self, fn):
        self.listeners.append(fn)


def test_wakes_on_notify_from_another_thread():
    """The deadline is an hour away: only the notify can end the wait (SAFETY_S fails a test that hangs)."""
    async def run():
        purgatory, plog, done = Purgatory(), FakeLog(), []
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(purgatory.wait_until([plog], lambda: bool(done), loop.time() + HOUR_S))
        await asyncio.sleep(0.01)
        done.append(1)
        threading.Thread(target=purgatory.notify, args=(plog,)).start()
        assert await asyncio.wait_for(waiter, SAFETY_S) is True
        assert purgatory.waiting() == 0 and purgatory.statistics().completed == 1

    asyncio.run(run())


def test_high_watermark_listener_wakes_it():
    async def run():
        purgatory, plog, done = Purgatory(), FakeLog(), []
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(purgatory.wait_until([plog], lambda: bool(done), loop.time() + HOUR_S))
        await asyncio.sleep(0.01)
        done.append(1)
        for listener in plog.listeners:
            listener(plog, 10)
        assert await asyncio.wait_for(waiter, SAFETY_S) is True

    asyncio.run(run())


def test_expires_at_the_deadline_with_the_last_answer():
    async def run():
        purgatory, plog, checks = Purgatory(), FakeLog(), []
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await purgatory.wait_until([plog], lambda: checks.append(1) or False, started + 0.2) is False
        assert 0.19 <= loop.time() - started
        assert len(checks) == 2  # parked once, answered at the deadline: no polling in between
        assert purgatory.statistics().expired == 1 and purgatory.waiting() == 0

    asyncio.run(run())


def test_notify_without_waiters_costs_nothing_and_does_not_fail():
    """Rule 1: a notify of a log nobody waits on hands nothing to the loop (not one call_soon_threadsafe),
    registers nothing and wakes nothing, from the loop thread or another, before any wait and after one."""
    async def run():
        purgatory, waited_on, idle = Purgatory(), FakeLog(), FakeLog()
        purgatory.notify(idle)
        purgatory.notify_all()  # before any loop is known
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(purgatory.wait_until([waited_on], lambda: False, loop.time() + HOUR_S))
        await asyncio.sleep(0.01)
        handed = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: handed.append(a) or real(*a)
        try:
            before = purgatory.statistics()
            purgatory.notify(idle)
            thread = threading.Thread(target=purgatory.notify, args=(idle,))
            thread.start()
            thread.join()
            assert handed == [] and idle.listeners == []
            assert purgatory.statistics() == before and not waiter.done()
        finally:
            del loop.call_soon_threadsafe
            waiter.cancel()
        assert purgatory.statistics().watched_logs == 1

    asyncio.run(run())


def test_a_cancelled_wait_ends_even_when_woken_in_the_same_turn():
    """The connection closed (its parked request is cancelled) just as the log was notified: the wait must
    end, not go round again until its deadline (asyncio.wait_for in 3.11 swallows such a cancellation)."""
    async def run():
        purgatory, plog = Purgatory(), FakeLog()
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(purgatory.wait_until([plog], lambda: False, loop.time() + 30))
        await asyncio.sleep(0.01)
        purgatory._wake(plog)  # what a notify does on the loop
        waiter.cancel()
        await asyncio.sleep(0.05)
        assert waiter.cancelled()
        assert purgatory.waiting() == 0

    asyncio.run(run())


def test_notify_on_the_loop_wakes_at_once_and_in_parking_order():
    """On the loop thread (a follower's fetch moving the HW) notify wakes the waiters itself, oldest first:
    no trip through call_soon_threadsafe's self-pipe, behind whatever the loop has queued meanwhile, and
    a parked acks=all write is re-checked before the requests that parked after it."""
    async def run():
        purgatory, plog, done, order = Purgatory(), FakeLog(), [], []
        loop = asyncio.get_running_loop()

        def check(n):
            return lambda: (order.append(n) if done else None) or bool(done)

        waiters = [asyncio.ensure_future(purgatory.wait_until([plog], check(n), loop.time() + HOUR_S))
                   for n in range(40)]
        await asyncio.sleep(0.01)
        threadsafe = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *a: threadsafe.append(a) or real(*a)
        try:
            done.append(1)
            purgatory.notify(plog)
            assert await asyncio.wait_for(asyncio.gather(*waiters), SAFETY_S) == [True] * 40
        finally:
            del loop.call_soon_threadsafe
        assert threadsafe == []
        assert order == list(range(40))

    asyncio.run(run())


def test_a_wait_on_a_key_is_woken_by_wake_from_another_thread_and_observers_hear_every_notify():
    """Rule 2's keys and Rule 4: a fetch session parks on its session object, woken by `wake` (not by its logs);
    every notify(log) reaches the observers first, whether anyone waits or not."""
    async def run():
        purgatory, plog, key, done, heard = Purgatory(), FakeLog(), object(), [], []
        purgatory.observe(heard.append)
        loop = asyncio.get_running_loop()
        waiter = asyncio.ensure_future(purgatory.wait_until([], lambda: bool(done), loop.time() + HOUR_S,
                                                            keys=(key,)))
        await asyncio.sleep(0.01)
        purgatory.notify(plog)  # a log the wait does not name: heard, wakes nothing
        await asyncio.sleep(0.01)
        assert heard == [plog] and not waiter.done()
        done.append(1)
        threading.Thread(target=purgatory.wake, args=(key,)).start()
        assert await asyncio.wait_for(waiter, SAFETY_S) is True
        assert purgatory.waiting() == 0

    asyncio.run(run())
