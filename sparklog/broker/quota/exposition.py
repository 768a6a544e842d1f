"""The quotas' series for the Prometheus endpoint (broker/metrics.py reads them at scrape time, its Rule 1).

Per client quota group (manager.py Rule: quota-groups; Kafka's per (user, client-id) `byte-rate`,
`throttle-time`): the bound, the rate measured over the windows and the throttle (ms) the group owes now, each
labelled with the kind (produce, fetch, request) and the user and client-id the group is for ("" where the
quota is shared by every user or client-id). Per side of the replication throttles (replication.py): the
bound, the measured rate and the bytes of throttled partitions, ever.
"""

from __future__ import annotations

from typing import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

PREFIX = "sparklog_"
_UNBOUNDED = 2 ** 63 - 1  # Long.MAX_VALUE: no replication throttle


def client_quota_families(throttles: dict) -> Iterator[Metric]:
    """`throttles`: QuotaManager.throttles()."""
    labels = ["kind", "user", "client_id"]
    bound = GaugeMetricFamily(PREFIX + "client_quota_bound", "the quota of the group (bytes/s, or percent of the "
                              "request thread for kind=request)", labels=labels)
    rate = GaugeMetricFamily(PREFIX + "client_quota_rate", "the group's rate measured over the quota windows",
                             labels=labels)
    throttle = GaugeMetricFamily(PREFIX + "client_quota_throttle_ms", "the throttle the group's next response "
                                 "carries now (0 within its quota)", labels=labels)
    for key, (value, measured, owed) in sorted(throttles.items()):
        bound.add_metric(list(key), value)
        rate.add_metric(list(key), measured)
        throttle.add_metric(list(key), owed)
    yield from (bound, rate, throttle)


def replication_throttle_families(statistics: dict) -> Iterator[Metric]:
    """`statistics`: ReplicationThrottles.statistics()."""
    bound = GaugeMetricFamily(PREFIX + "replication_throttle_bound_bytes", "bytes/s a side may copy for "
                              "throttled replicas (absent: unthrottled)", labels=["side"])
    rate = GaugeMetricFamily(PREFIX + "replication_throttle_rate_bytes", "bytes/s of throttled replicas "
                             "measured over the replication quota windows", labels=["side"])
    total = CounterMetricFamily(PREFIX + "replication_throttled_bytes", "bytes of throttled replicas served "
                                "(leader) or appended (follower)", labels=["side"])
    for side in ("leader", "follower"):
        if statistics[f"{side}_bound"] < _UNBOUNDED:
            bound.add_metric([side], statistics[f"{side}_bound"])
        rate.add_metric([side], statistics[f"{side}_rate"])
        total.add_metric([side], statistics[f"{side}_bytes"])
    yield from (bound, rate, total)
