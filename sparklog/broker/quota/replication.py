"""Replication throttles (Kafka's ReplicationQuotaManager, KIP-73): a bound on the bytes a leader serves to, and
a follower fetches for, the replicas a topic names throttled, so that moving a partition does not flood the
cluster.

Rule: throttled-replica. On this broker a partition is leader-throttled when its topic's
`leader.replication.throttled.replicas` names it with this broker (or is "*"), follower-throttled likewise with
`follower.replication.throttled.replicas` (storage/throttled_replicas.py). Other partitions are never held back.
Rule: in-sync-exempt. A replica in sync is never held back, so a throttle cannot push it out of the ISR: the
leader throttles a follower's fetch of a throttled partition only when that follower is outside the ISR
(Kafka's shouldLeaderThrottle), the follower only while it is behind the leader's high watermark
(Kafka's shouldFollowerThrottle, `isReplicaInSync`). A replica catching up under a throttle is outside
the ISR anyway; it joins once it has caught up, and from then on fetches at full speed.
Rule: replication-rate. Each side has one sampled rate (rate.py) over `replication.quota.window.num` windows of
`replication.quota.window.size.seconds`. Every byte of a throttled partition served (leader) or appended
(follower) is recorded, whoever fetched it; while the rate is above the bound, throttled partitions of
out-of-sync replicas are left out (the leader answers them with no records, the follower does not ask for them),
so over the windows the bytes of throttled partitions stay at the bound. Such a partition takes at most one
window's worth of the bound in one fetch (`fetch_cap`; at least one batch, KIP-74), on both sides: Kafka lets it
take replica.fetch.max.bytes (1 MiB), which overshoots any rate below about 1 MiB per span.
Rule: throttle-rate-precedence. The bound of each side is `/config/brokers/<this broker>`'s
`leader.replication.throttled.rate` / `follower.replication.throttled.rate` if set, else `/config/brokers/<default>`'s,
else the broker's own setting (Kafka's default Long.MAX_VALUE: unthrottled); changes apply at once.
Everything here runs on the event loop (the watch hands its changes to it).
"""

from __future__ import annotations

import time
from typing import Callable, Mapping

from sparklog.broker.quota.manager import QuotaWindows
from sparklog.broker.quota.rate import Rate
from sparklog.settings import LONG_MAX
from sparklog.storage import throttled_replicas

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
RATE_KEYS = (LEADER_RATE, FOLLOWER_RATE)
BROKER_SCOPE, DEFAULT_SCOPE = "broker", "default"  # /config/brokers/<id>, /config/brokers/<default>
DEFAULT_WINDOWS = QuotaWindows()  # replication.quota.window.num, replication.quota.window.size.seconds: Kafka's


class ReplicationQuota:
    """One side's bound and sampled rate (Rule: replication-rate)."""

    __slots__ = ("bound", "sensor", "recorded", "clock")

    def __init__(self, bound: int, windows: QuotaWindows, clock: Callable[[], float] = time.monotonic) -> None:
        self.bound = bound
        self.sensor = Rate(windows.size_s, windows.num)
        self.recorded = 0  # bytes of throttled partitions, ever (statistics)
        self.clock = clock

    @property
    def unbounded(self) -> bool:
        return self.bound >= LONG_MAX

    def exceeded(self) -> bool:
        return not self.unbounded and self.sensor.rate(self.clock()) > self.bound

    def record(self, nbytes: int) -> None:
        if nbytes:
            self.sensor.record(nbytes, self.clock())
            self.recorded += nbytes

    def rate(self) -> float:
        return self.sensor.rate(self.clock())

    def fetch_cap(self) -> int:
        """Most bytes of one throttled partition in one fetch: a window's worth of the bound (Rule: replication-rate)."""
        return max(1, int(min(self.bound, 2 ** 62) * self.sensor.window_s))

    def delay_s(self) -> float:
        """How long until the rate is back at the bound (0 within it)."""
        return 0.0 if self.unbounded else self.sensor.throttle_ms(self.bound, self.clock()) / 1000.0


class ReplicationThrottles:
    """Both sides' quotas on one broker and where their bounds come from (module docstring)."""

    def __init__(self, broker_id: int, leader_rate: int = LONG_MAX, follower_rate: int = LONG_MAX,
                 windows: QuotaWindows = DEFAULT_WINDOWS, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_id = broker_id
        self.static = {LEADER_RATE: leader_rate, FOLLOWER_RATE: follower_rate}
        self.dynamic: dict[str, dict[str, str]] = {BROKER_SCOPE: {}, DEFAULT_SCOPE: {}}
        self.leader = ReplicationQuota(leader_rate, windows, clock)
        self.follower = ReplicationQuota(follower_rate, windows, clock)

    def set_dynamic(self, scope: str, config: Mapping[str, str]) -> None:
        """A `/config/brokers/...` node's config as now stored (Rule: throttle-rate-precedence)."""
        self.dynamic[scope] = {k: v for k, v in config.items() if k in RATE_KEYS}
        self.leader.bound = self._bound(LEADER_RATE)
        self.follower.bound = self._bound(FOLLOWER_RATE)

    def _bound(self, key: str) -> int:
        for scope in (BROKER_SCOPE, DEFAULT_SCOPE):
            value = self.dynamic[scope].get(key)
            if value is not None:
                try:
                    return max(1, int(value))
                except ValueError:
                    continue  # refused where it is written; an old or foreign value is skipped
        return self.static[key]

    def leader_throttled(self, plog, partition: int) -> bool:
        """Rule: throttled-replica, the leader's list."""
        if self.leader.unbounded:
            return False
        return _listed(plog.config.leader_replication_throttled_replicas, partition, self.broker_id)

    def follower_throttled(self, plog, partition: int) -> bool:
        """Rule: throttled-replica, the follower's list."""
        if self.follower.unbounded:
            return False
        return _listed(plog.config.follower_replication_throttled_replicas, partition, self.broker_id)

    def statistics(self) -> dict[str, float]:
        return {"leader_bound": self.leader.bound, "leader_rate": self.leader.rate(),
                "leader_bytes": self.leader.recorded, "follower_bound": self.follower.bound,
                "follower_rate": self.follower.rate(), "follower_bytes": self.follower.recorded}


def _listed(value: str, partition: int, broker_id: int) -> bool:
    try:
        return throttled_replicas.parse(value).covers(partition, broker_id)
    except ValueError:
        return False  # the storage refuses such a value; never set here
