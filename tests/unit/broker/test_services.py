"""The broker's service group (services.py): one owner that closes everything, keeps every error, names orphans."""

import threading

import pytest

from sparklog.broker import services as services_module
from sparklog.broker.services import ServiceGroup


@pytest.fixture
def group():
    group = ServiceGroup()
    yield group
    group.close()


def stoppable_thread(name: str):
    """A started thread that runs until the returned event is set."""
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name=name, daemon=True)
    thread.start()
    return thread, stop


def test_close_runs_every_closer_last_joined_first_once_whatever_one_raises(group):
    closed = []

    def failing():
        closed.append("b")
        raise OSError("disk gone")

    group.add("a", lambda: closed.append("a"))
    group.add("b", failing)
    group.start("c", lambda: None, lambda: closed.append("c"))
    group.close()
    group.close()
    assert closed == ["c", "b", "a"]
    states = {s.name: (s.state, s.errors) for s in group.statistics().services}
    assert states == {"a": ("closed", ()), "b": ("failed", ("OSError: disk gone",)), "c": ("closed", ())}


def test_the_threads_a_service_starts_are_its_own_and_listed_while_alive(group):
    stops = []

    def start():
        thread, stop = stoppable_thread("worker-1")
        stops.append(stop)
        return thread

    thread = group.start("worker", start, lambda: [s.set() for s in stops])
    group.add("other", lambda: None)
    stats = {s.name: s for s in group.statistics().services}
    assert stats["worker"].threads == ("worker-1",) and stats["worker"].state == "running"
    assert stats["other"].threads == ()
    group.close()
    assert not thread.is_alive()
    assert group.statistics().services[0].threads == () and group.statistics().orphans == ()


def test_adopt_gives_threads_started_later_to_a_service_joined_before(group):
    stop = threading.Event()
    group.start("sync", lambda: None, stop.set)
    group.adopt("sync", lambda: stoppable_thread("sync-thread")[0])
    assert group.statistics().services[0].threads == ("sync-thread",)


def test_an_exception_escaping_a_service_thread_is_recorded_reported_and_passed_on(monkeypatch):
    seen, passed_on = [], []
    monkeypatch.setattr(threading, "excepthook", lambda args: passed_on.append(args.exc_type))
    group = ServiceGroup(on_error=lambda name, exc: seen.append((name, str(exc))))

    go = threading.Event()

    def crash():
        go.wait(5)
        raise ValueError("bad state")

    def start():
        thread = threading.Thread(target=crash, name="crasher-1")
        thread.start()
        return thread

    thread = group.start("crasher", start)
    go.set()
    thread.join(5)
    stray = threading.Thread(target=crash, name="stray")
    stray.start()
    stray.join(5)
    assert seen == [("crasher", "bad state"), (None, "bad state")]
    assert passed_on == [ValueError, ValueError]  # the hook installed before still hears both
    stats = group.statistics()
    assert stats.services[0].state == "failed" and stats.services[0].errors == ("ValueError: bad state",)
    assert stats.unowned_errors == ("ValueError: bad state",)
    group.close()
    assert threading.excepthook is not group._excepthook  # restored at close


def test_a_thread_left_running_after_its_service_closed_is_an_orphan(group, monkeypatch):
    monkeypatch.setattr(services_module, "ORPHAN_GRACE_S", 0.05)
    holder = []
    group.start("leaky", lambda: holder.append(stoppable_thread("leaky-1")), lambda: None)  # closes nothing
    group.close()
    assert group.statistics().orphans == ("leaky-1",)
    holder[0][1].set()
