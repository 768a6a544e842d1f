import threading

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
