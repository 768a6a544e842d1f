"""The broker's background work under one owner: `ServiceGroup` (trio's nursery is the model).

The broker runs about ten threads beside its event loop: the log manager's flusher, retention, scrubber and
cleaner threads, the log-fault and cleaner reporters, the ZooKeeper registration, the partition sync, the
controller and its election, and the executor that runs blocking calls (ZooKeeper) for the handlers. Each is
started through the group and so has a parent that outlives it.

Rule 1 (no orphan): every service is started with `start(name, start, close)` (a resource opened already is
joined with `add(name, close)`; a service joined before it starts its threads starts them with `adopt`), and `close()` closes them all, in reverse order of joining,
each once, whatever the others raise. The threads a service started while starting are its own; after
`close()`, one still alive past `ORPHAN_GRACE_S` is an orphan: logged and named in `statistics().orphans`.
Rule 2 (errors are never lost): an exception escaping a thread of the process while the group is open
(`threading.excepthook`) is recorded against the service that owns the thread (or as unowned), handed to
`on_error`, and then to the hook that was installed before (Python's default prints the traceback, as
before). A closer that raises is logged and recorded; the closing goes on.
Rule 3: `statistics()` lists every service in start order: its state (RUNNING, CLOSED, FAILED), its threads
alive now, and its errors.

Resource handling: the group owns what it is given to close; it starts nothing itself. Thread-safe: services
join from the startup thread, errors arrive on any thread, `close()` runs once on the closing thread.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
ORPHAN_GRACE_S = 1.0  # how long close() waits, in all, for the threads of closed services to end


class ServiceState(enum.Enum):
    RUNNING = "running"
    CLOSED = "closed"
    FAILED = "failed"  # a thread of it raised, or its closer did


@dataclass(frozen=True)
class ServiceStatistics:
    name: str
    state: str
    threads: tuple[str, ...]  # names of its threads alive now
    errors: tuple[str, ...]


@dataclass(frozen=True)
class ServiceGroupStatistics:
    services: tuple[ServiceStatistics, ...]  # in start order
    orphans: tuple[str, ...]  # threads a closed service left alive (Rule 1)
    unowned_errors: tuple[str, ...]  # exceptions of threads no service owns (Rule 2)
    closed: bool


@dataclass(eq=False)
class _Service:
    name: str
    close: Callable[[], object] | None
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    state: ServiceState = ServiceState.RUNNING


class ServiceGroup:
    """One owner for the broker's services (module docstring). `on_error(name, exc)` hears Rule 2's errors."""

    def __init__(self, on_error: Callable[[str | None, BaseException], None] | None = None) -> None:
        self._on_error = on_error
        self._services: list[_Service] = []
        self._lock = threading.Lock()
        self._orphans: tuple[str, ...] = ()
        self._unowned: list[str] = []
        self._closed = False
        self._previous_hook = threading.excepthook
        threading.excepthook = self._excepthook

    def start(self, name: str, start: Callable[[], T], close: Callable[[], object] | None = None) -> T:
        """Run `start()` (it may start threads: they become this service's) and join its `close` to the
        group; returns what `start()` returned. If `start()` raises, nothing joins and the error propagates."""
        before = set(threading.enumerate())
        result = start()
        started = [t for t in threading.enumerate() if t not in before]
        with self._lock:
            self._services.append(_Service(name, close, started))
        return result

    def adopt(self, name: str, start: Callable[[], T]) -> T:
        """Run `start()` for the service `name`, joined already: the threads it starts are that service's."""
        before = set(threading.enumerate())
        result = start()
        started = [t for t in threading.enumerate() if t not in before]
        with self._lock:
            service = next(s for s in self._services if s.name == name)
            service.threads.extend(started)
        return result

    def add(self, name: str, close: Callable[[], object]) -> None:
        """Join a service or resource opened already (no threads are attributed to it)."""
        with self._lock:
            self._services.append(_Service(name, close))

    def close(self) -> None:
        """Rule 1: close every service, last joined first, each once; then name the orphans."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            services = list(reversed(self._services))
        for service in services:
            self._close_one(service)
        self._orphans = self._wait_for_threads(services)
        for name in self._orphans:
            log.warning("thread %s is still running after its service closed", name)
        if threading.excepthook == self._excepthook:
            threading.excepthook = self._previous_hook

    def statistics(self) -> ServiceGroupStatistics:
        with self._lock:
            services = tuple(ServiceStatistics(s.name, s.state.value, tuple(t.name for t in s.threads if t.is_alive()),
                                               tuple(s.errors)) for s in self._services)
            return ServiceGroupStatistics(services, self._orphans, tuple(self._unowned), self._closed)

    def _close_one(self, service: _Service) -> None:
        try:
            if service.close is not None:
                service.close()
        except Exception as exc:  # noqa: BLE001 - Rule 1: the rest close whatever one does
            log.exception("error closing %s", service.name)
            self._record(service, exc)
            return
        with self._lock:
            if service.state is ServiceState.RUNNING:
                service.state = ServiceState.CLOSED

    @staticmethod
    def _wait_for_threads(services: list[_Service]) -> tuple[str, ...]:
        deadline = time.monotonic() + ORPHAN_GRACE_S
        for service in services:
            for thread in service.threads:
                if thread is not threading.current_thread():
                    thread.join(max(0.0, deadline - time.monotonic()))
        return tuple(t.name for s in reversed(services) for t in s.threads if t.is_alive()
                     and t is not threading.current_thread())

    def _excepthook(self, args) -> None:
        """Rule 2: record against the owner, tell on_error, then the hook installed before."""
        owner = self._owner_of(args.thread)
        if args.exc_value is not None:
            if owner is not None:
                self._record(owner, args.exc_value)
            else:
                with self._lock:
                    self._unowned.append(_describe(args.exc_value))
            if self._on_error is not None:
                try:
                    self._on_error(owner.name if owner is not None else None, args.exc_value)
                except Exception:  # noqa: BLE001 - a failing reporter must not hide the error itself
                    log.exception("reporting the error of thread %s failed", getattr(args.thread, "name", "?"))
        self._previous_hook(args)

    def _owner_of(self, thread) -> _Service | None:
        with self._lock:
            for service in self._services:
                if thread in service.threads:
                    return service
        return None

    def _record(self, service: _Service, exc: BaseException) -> None:
        with self._lock:
            service.errors.append(_describe(exc))
            service.state = ServiceState.FAILED


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
