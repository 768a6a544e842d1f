import threading
import time

from sparklog.storage import Flusher


class FakeLog:
    flush_ms = 10

    def __init__(self, fail=False):
        self.due = True
        self.flushed = threading.Event()
        self.fail = fail

    def flush_due(self, now):
        return self.due

    def flush(self):
        self.due = False
        self.flushed.set()
        if self.fail:
            raise OSError("disk on fire")


def test_one_thread_flushes_many_logs_and_survives_a_failing_one():
    flusher = Flusher()
    logs = [FakeLog(fail=(i == 0)) for i in range(50)]
    for log in logs:
        flusher.register(log)
    assert all(log.flushed.wait(2) for log in logs)
    stats = flusher.statistics()
    assert stats.logs == 50 and stats.flush_errors == 1 and stats.flushes == 49
    assert sum(t.name == "sparklog-flusher" for t in threading.enumerate()) == 1
    flusher.close()


def test_delayed_tasks_run_in_time_or_at_close():
    flusher = Flusher()
    ran = threading.Event()
    flusher.call_later(0.01, ran.set)
    assert ran.wait(2)
    late = []
    flusher.call_later(3600, lambda: late.append(1))
    flusher.close()
    assert late == [1]


class CountedLog(FakeLog):
    """A FakeLog that counts the flusher's looks at it (flush_due calls)."""

    def __init__(self, due=False):
        super().__init__()
        self.due = due
        self.looks = 0

    def flush_due(self, now):
        self.looks += 1
        return self.due


def test_an_idle_log_is_looked_at_once_not_at_every_tick():
    """flusher.py Rule: idle-logs-cost-nothing: a registered log is looked at on registration, then only at the
    times it schedules; a thousand idle logs cost the flusher's ticks nothing."""
    flusher = Flusher()
    idle = [CountedLog() for _ in range(1000)]
    ticker = CountedLog(due=True)  # flush_ms 10: the old flusher ticked every 5 ms
    try:
        for log in idle + [ticker]:
            flusher.register(log)
        assert ticker.flushed.wait(5)
        time.sleep(0.5)
        assert max(log.looks for log in idle) == 1
    finally:
        flusher.close()


def test_a_log_is_looked_at_when_its_scheduled_time_comes_and_the_last_time_scheduled_wins():
    flusher = Flusher()
    log = CountedLog()
    try:
        flusher.register(log)
        deadline = time.monotonic() + 5
        while log.looks == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        log.due = True
        flusher.schedule(log, time.monotonic() + 3600)
        flusher.schedule(log, time.monotonic() + 0.1)  # the later call replaces the hour
        asked = time.monotonic()
        assert log.flushed.wait(5) and time.monotonic() - asked >= 0.1
        assert log.looks == 2 and flusher.statistics().flushes == 1
        log.due = True
        flusher.schedule(log, time.monotonic() + 0.05)
        flusher.schedule(log, time.monotonic() + 3600)  # the last time scheduled wins: not looked at in 0.05 s
        time.sleep(0.5)
        assert log.looks == 2
    finally:
        flusher.close()


def test_an_unregistered_log_is_not_looked_at_whatever_it_scheduled():
    flusher = Flusher()
    log = CountedLog(due=True)
    try:
        flusher.register(log)
        assert log.flushed.wait(5)
        log.flushed.clear()
        log.due = True
        flusher.schedule(log, time.monotonic() + 0.05)
        flusher.unregister(log)
        flusher.schedule(log, time.monotonic())  # a closed log's last flush schedules: ignored
        assert not log.flushed.wait(0.3) and flusher.statistics().logs == 0
    finally:
        flusher.close()
