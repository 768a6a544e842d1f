"""Which quota a connection gets, what it has used, and how long it must wait (design notes 4.9, KIP-219).

The manager holds the quota configs of every entity (told by coordination.client_quotas.QuotaConfigWatch, on
the loop) and one sampled rate (rate.py) per quota group and kind. Everything here runs on the event loop.

Rule: quota-groups. A connection of principal "User:U" with client-id C gets, for each kind, the entity the
quota-precedence rule (client_quotas.resolve) picks. Its group is that entity with each component it names
filled with the connection's own name: users/U/clients/<default> gives each client-id of U a quota of its
own, users/U one shared by all of U's connections, clients/<default> one per client-id (Kafka's default
callback). Connections of one group share one sensor per kind.
Rule: kinds. `produce` meters the bytes of Produce requests (the frame's size) against producer_byte_rate;
`fetch` the bytes of Fetch responses against consumer_byte_rate; `request` the time spent handling a request
against request_percentage.
Rule: request-capacity. sparklog handles every request on one thread, the broker's event loop (blocking work
it hands to executor threads is not request handling: those threads wait on ZooKeeper or disks). So the
capacity is one thread, 100%: request_percentage=n lets a group use n% of the loop's time, measured as the
seconds a group's requests spend in the dispatcher's handling call on the loop (decoding, the handler's
synchronous part, encoding), per second of wall time. A value over 100 cannot be reached (the loop is one
thread) and so never throttles.
Rule: idle-expiry. A sensor with nothing recorded for a whole span (`quota.window.num` x
`quota.window.size.seconds`) measures 0 and is dropped at the next sweep (once per window), with the cached
lookups; so thousands of client-ids cost memory only while they are active.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from sparklog.broker.quota.rate import Rate
from sparklog.coordination.client_quotas import (CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE, Entity,
                                                 resolve)

DEFAULT_WINDOW_NUM = 11  # quota.window.num (Kafka's default)
DEFAULT_WINDOW_SIZE_SECONDS = 1  # quota.window.size.seconds
MAX_CACHED_CLIENTS = 10_000  # (principal, client-id) lookups kept between config changes and sweeps
USER_PREFIX = "User:"


@dataclass(frozen=True)
class QuotaWindows:
    """quota.window.num samples of quota.window.size.seconds."""

    num: int = DEFAULT_WINDOW_NUM
    size_s: float = DEFAULT_WINDOW_SIZE_SECONDS


class Metered:
    """One kind's quota for one connection: its group's sensor and bound."""

    __slots__ = ("sensor", "bound", "group")

    def __init__(self, sensor: Rate, bound: float, group: tuple) -> None:
        self.sensor = sensor
        self.bound = bound
        self.group = group


class ClientQuota:
    """The quotas that apply to one (principal, client-id): each a Metered or None (Rule: kinds)."""

    __slots__ = ("produce", "fetch", "request", "generation")

    def __init__(self, produce: Metered | None, fetch: Metered | None, request: Metered | None,
                 generation: int) -> None:
        self.produce = produce
        self.fetch = fetch
        self.request = request
        self.generation = generation

    def record_produce(self, nbytes: int, now: float) -> int:
        """Record a Produce request's bytes; the throttle (ms) the group now owes (0 within its bound)."""
        metered = self.produce
        if metered is None:
            return 0
        metered.sensor.record(nbytes, now)
        return metered.sensor.throttle_ms(metered.bound, now)

    def fetch_throttle(self, now: float) -> int:
        metered = self.fetch
        return 0 if metered is None else metered.sensor.throttle_ms(metered.bound, now)

    def record_fetch(self, nbytes: int, now: float) -> None:
        if self.fetch is not None:
            self.fetch.sensor.record(nbytes, now)

    def fetch_cap(self, window_s: float) -> int | None:
        """Most bytes one Fetch may take: one window's worth of the bound, so that a response never owes more
        than a window of silence and a throttled consumer still gets records (Kafka's getMaxValueInQuotaWindow)."""
        return None if self.fetch is None else max(1, int(self.fetch.bound * window_s))

    def request_throttle(self, now: float) -> int:
        metered = self.request
        return 0 if metered is None else metered.sensor.throttle_ms(metered.bound, now)

    def record_request_time(self, seconds: float, now: float) -> None:
        if self.request is not None:
            self.request.sensor.record(seconds * 100.0, now)  # percent-seconds: rate is in % of the thread


_KINDS = ((PRODUCER_BYTE_RATE, "produce"), (CONSUMER_BYTE_RATE, "fetch"), (REQUEST_PERCENTAGE, "request"))


class QuotaManager:
    """Configs, sensors and lookups of every quota on this broker (module docstring)."""

    def __init__(self, windows: QuotaWindows = QuotaWindows(), clock: Callable[[], float] = time.monotonic) -> None:
        self.windows = windows
        self.clock = clock
        self.configs: dict[Entity, dict[str, float]] = {}
        self.sensors: dict[tuple, Rate] = {}  # (kind, user, client) -> Rate
        self._clients: dict[tuple[str, str], ClientQuota | None] = {}
        self.generation = 0  # bumped when a lookup may have changed (a config change, an expiry sweep)
        self._next_sweep = 0.0
        self.on_active: Callable[[bool], None] | None = None  # told when quotas start or stop applying at all
        self.active = False

    def update(self, entity: Entity, quotas: dict[str, float]) -> None:
        """An entity's quotas as now stored ({} when it has none)."""
        if quotas:
            self.configs[entity] = dict(quotas)
        else:
            self.configs.pop(entity, None)
        self._invalidate()
        active = bool(self.configs)
        if active != self.active:
            self.active = active
            if self.on_active is not None:
                self.on_active(active)

    def _invalidate(self) -> None:
        self._clients.clear()
        self.generation += 1

    def client_quota(self, principal: str, client_id: str) -> ClientQuota | None:
        """The quotas of (principal, client-id), None if none applies (Rule: quota-groups)."""
        key = (principal, client_id)
        try:
            return self._clients[key]
        except KeyError:
            pass
        if len(self._clients) >= MAX_CACHED_CLIENTS:
            self._clients.clear()
        found = self._clients[key] = self._resolve(principal, client_id)
        return found

    def _resolve(self, principal: str, client_id: str) -> ClientQuota | None:
        user = principal[len(USER_PREFIX):] if principal.startswith(USER_PREFIX) else principal
        metered = {}
        for key, kind in _KINDS:
            found = resolve(self.configs, user, client_id, key)
            metered[kind] = None if found is None else self._metered(kind, found[0], found[1], user, client_id)
        if not any(metered.values()):
            return None
        return ClientQuota(metered["produce"], metered["fetch"], metered["request"], self.generation)

    def _metered(self, kind: str, entity: Entity, bound: float, user: str, client_id: str) -> Metered:
        group = (kind, user if entity.user is not None else "", client_id if entity.client is not None else "")
        sensor = self.sensors.get(group)
        if sensor is None:
            sensor = self.sensors[group] = Rate(self.windows.size_s, self.windows.num)
        return Metered(sensor, bound, group)

    def sweep(self, now: float) -> None:
        """Drop idle sensors once a window (Rule: idle-expiry)."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.windows.size_s
        idle = [group for group, sensor in self.sensors.items() if sensor.idle(now)]
        if idle:
            for group in idle:
                del self.sensors[group]
            self._invalidate()

    def throttles(self, now: float | None = None) -> dict[tuple[str, str, str], tuple[float, float, int]]:
        """{(kind, user, client-id): (bound, measured rate, throttle ms it owes now)} of every group a cached
        lookup meters (Rule: quota-groups; "" for a component the quota does not name): the throttle per client
        for the metrics endpoint. Reads a copy, so a scrape on another thread sees a consistent snapshot."""
        now = self.clock() if now is None else now
        found = {}
        for quota in list(self._clients.values()):
            for metered in (() if quota is None else (quota.produce, quota.fetch, quota.request)):
                if metered is not None and metered.group not in found:
                    sensor = metered.sensor
                    found[metered.group] = (metered.bound, sensor.rate(now), sensor.throttle_ms(metered.bound, now))
        return found

    def throttle_of(self, group: tuple) -> float:
        """The measured rate of one group's sensor (0 when it has none): for statistics and tests."""
        sensor = self.sensors.get(group)
        return 0.0 if sensor is None else sensor.rate(self.clock())
