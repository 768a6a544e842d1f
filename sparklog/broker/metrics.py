"""The Prometheus endpoint: `metrics.listener=http://HOST:PORT` serves `/metrics` in the text exposition format.

Rule 1 (read at scrape time): the collector reads what the broker keeps anyway (the `statistics()` of the
server, dispatcher, replica manager, controller, logs, cleaner and scrubber; broker/meters.py's counters;
the offset store's committed offsets) when Prometheus asks, on the endpoint's own threads
(prometheus_client's HTTP server). The request paths do nothing for it beyond broker/meters.py's counters.
Rule 2 (never a hang): a scrape reads memory only (no ZooKeeper call, no lock held by a request path's
waits), so it answers during startup, a controller failover or a ZooKeeper outage. Each section is
collected on its own: one that raises (a dict changed under it, a component not built yet) is counted in
`sparklog_metrics_collect_errors_total` and leaves its series out of that scrape; the others are served.
Rule 3 (staleness is a gauge): `sparklog_metrics_stale` is 1 while the values may be stale or partial: the
broker not serving yet (or stopping), its ZooKeeper session not connected, or a section that failed in this
scrape; 0 otherwise. Dashboards and alerts read it beside the values.
Rule 4 (lifecycle): the endpoint is bound before anything else starts (a scrape during startup answers with
`sparklog_metrics_stale` 1); an address that cannot be bound stops the broker with one line
(`MetricsListenerUnavailable`); it closes last, with the broker.
Rule 5 (no per-scrape rebuild of label sets): the label dicts of the per-partition and per-group series
(thousands at scale) are made once and kept across scrapes (`LabelSets`); a scrape appends one sample per
series with them, and drops the dicts of series it no longer exports. Scrapes of one collector take turns
(one lock) so that they share the label sets safely.
Names are prefixed `sparklog_`, label names are lower-case, units are in the names (`_bytes`, `_seconds`,
`_total`). docs/metrics.md documents every series; docs/grafana/sparklog.json is built on them.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Sample

from sparklog.broker.meters import (BYTES_IN, BYTES_OUT, FAILED_FETCH, FAILED_PRODUCE, LATENCY_BUCKETS, MESSAGES_IN,
                                    RequestMeters, TopicMeters)
from sparklog.broker.network.dispatch import api_name
from sparklog.broker.quota.exposition import client_quota_families, replication_throttle_families
from sparklog.protocol.errors import for_code

log = logging.getLogger(__name__)

PREFIX = "sparklog_"
ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")


class MetricsListenerUnavailable(RuntimeError):
    """metrics.listener cannot be bound (a port in use, an address not on this host)."""


def error_name(code: int) -> str:
    """Kafka's constant for an error code (6 -> "NOT_LEADER_OR_FOLLOWER"); the number if unknown."""
    try:
        return for_code(code).message
    except (KeyError, ValueError):
        return str(code)


class LabelSets:
    """Rule 5: the label dicts of the per-partition and per-group series, kept from one scrape to the next.
    A scrape reads them through `labels(key)`, which makes a missing one; `prune()` at the scrape's end
    drops those it did not read (a partition gone, a group deleted), so the cache holds what is exported."""

    __slots__ = ("names", "_sets", "_read")

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names
        self._sets: dict[tuple, dict[str, str]] = {}
        self._read: dict[tuple, dict[str, str]] = {}

    def labels(self, key: tuple) -> dict[str, str]:
        found = self._read.get(key)
        if found is None:
            found = self._sets.get(key) or dict(zip(self.names, map(str, key)))
            self._read[key] = found
        return found

    def prune(self) -> None:
        self._sets, self._read = self._read, {}


def _append(family: Metric, labels: dict[str, str], value: float) -> None:
    """add_metric without its per-sample dict(zip(...)): the label dict is LabelSets' (Rule 5)."""
    family.samples.append(Sample(family.name, labels, value))


# -- sections: each a function of what it reads, yielding metric families ---------------------------------

def topic_families(meters: TopicMeters) -> Iterator[Metric]:
    rows = meters.rows()
    columns = ((BYTES_IN, "broker_topic_bytes_in_total", "bytes appended by producers to partitions led here"),
               (BYTES_OUT, "broker_topic_bytes_out_total", "record bytes sent to consumers (followers excluded)"),
               (MESSAGES_IN, "broker_topic_messages_in_total", "records appended by producers"),
               (FAILED_PRODUCE, "broker_topic_failed_produce_requests_total", "partitions of Produce requests "
                "answered with an error"),
               (FAILED_FETCH, "broker_topic_failed_fetch_requests_total", "partitions of Fetch requests answered "
                "with an error"))
    for column, name, doc in columns:
        family = CounterMetricFamily(PREFIX + name.removesuffix("_total"), doc, labels=["topic"])
        for topic, row in sorted(rows.items()):
            family.add_metric([topic], row[column])
        yield family


def request_families(meters: RequestMeters, requests_by_api: dict[str, int]) -> Iterator[Metric]:
    latency = HistogramMetricFamily(PREFIX + "request_latency_seconds", "time from a request's handling to its "
                                    "reply being ready (purgatory waits included)", labels=["api"])
    bounds = [str(b) for b in LATENCY_BUCKETS] + ["+Inf"]
    for api, row in sorted(meters.latency().items()):
        cumulative, buckets = 0, []
        for bound, count in zip(bounds, row[:-1]):
            cumulative += count
            buckets.append((bound, cumulative))
        latency.add_metric([api_name(api)], buckets, row[-1])
    yield latency
    served = CounterMetricFamily(PREFIX + "requests", "requests answered, by api", labels=["api"])
    for name, count in sorted(requests_by_api.items()):
        served.add_metric([name], count)
    yield served
    errors = CounterMetricFamily(PREFIX + "request_errors", "error codes answered (top-level, and per partition "
                                 "for Produce and Fetch), by api and error", labels=["api", "error"])
    for (api, code), count in sorted(meters.errors().items()):
        errors.add_metric([api_name(api), error_name(code)], count)
    yield errors
    yield GaugeMetricFamily(PREFIX + "event_loop_lag_seconds", "how late the broker's event loop last woke for a "
                            "timer", value=meters.loop_lag_s)


def server_families(stats) -> Iterator[Metric]:
    yield GaugeMetricFamily(PREFIX + "connections_open", "client connections open", value=stats.connections_open)
    yield CounterMetricFamily(PREFIX + "connections_accepted", "connections accepted",
                              value=stats.connections_accepted)
    yield CounterMetricFamily(PREFIX + "connections_refused", "connections refused (max.connections and "
                              "max.connections.per.ip)", value=stats.connections_refused)
    yield CounterMetricFamily(PREFIX + "network_received_bytes", "bytes read from clients", value=stats.bytes_received)
    yield CounterMetricFamily(PREFIX + "handler_errors", "requests whose handler raised (connection closed)",
                              value=stats.handler_errors)
    yield GaugeMetricFamily(PREFIX + "requests_in_flight", "requests read and not yet answered",
                            value=stats.in_flight_requests)
    yield GaugeMetricFamily(PREFIX + "request_queue_bytes", "bytes of partly received requests",
                            value=stats.queued_request_bytes)


def replication_families(leaders: Iterable, stats) -> Iterator[Metric]:
    """`leaders`: the replica manager's LedPartitions; `stats`: its ReplicaManagerStatistics."""
    under = below_min = 0
    for led in leaders:
        state = led.state
        under += len(state.isr) < len(state.replicas)
        below_min += led.below_min_insync
    yield GaugeMetricFamily(PREFIX + "under_replicated_partitions", "partitions led here whose ISR is smaller "
                            "than their replica set", value=under)
    yield GaugeMetricFamily(PREFIX + "under_min_isr_partitions", "partitions led here with fewer in-sync replicas "
                            "than min.insync.replicas", value=below_min)
    yield GaugeMetricFamily(PREFIX + "leader_partitions", "partitions led here", value=stats.leading)
    yield CounterMetricFamily(PREFIX + "isr_shrinks", "ISR changes written that dropped a follower",
                              value=stats.isr_shrinks)
    yield CounterMetricFamily(PREFIX + "isr_expands", "ISR changes written that added a follower",
                              value=stats.isr_expands)


def controller_families(stats) -> Iterator[Metric]:
    """`stats`: the Controller's ControllerStatistics."""
    yield GaugeMetricFamily(PREFIX + "active_controller", "1 on the broker that is the controller",
                            value=int(stats.is_controller))
    yield GaugeMetricFamily(PREFIX + "controller_epoch", "this broker's controller epoch while (or when last) "
                            "controller, -1 if never", value=stats.epoch)
    yield GaugeMetricFamily(PREFIX + "offline_partitions", "partitions without a live leader (on the "
                            "controller, as of its last reconcile)", value=stats.offline_partitions if
                            stats.is_controller else 0)
    yield CounterMetricFamily(PREFIX + "controller_leader_elections", "leader changes written by this broker as "
                              "controller", value=stats.elections)
    yield CounterMetricFamily(PREFIX + "controller_unclean_leader_elections", "of those, unclean ones",
                              value=stats.unclean_elections)


def zookeeper_families(state: str | None) -> Iterator[Metric]:
    family = GaugeMetricFamily(PREFIX + "zookeeper_session_state", "1 for the ZooKeeper session's state "
                               "(connected, suspended, lost)", labels=["state"])
    for name in ZOOKEEPER_STATES:
        family.add_metric([name.lower()], int(state == name))
    yield family


def log_families(logs: Iterable, label_sets: LabelSets | None = None) -> Iterator[Metric]:
    """Per partition hosted here (led or followed): size and segments, and producer ids where it keeps any
    (a partition without producer state has no such series: at thousands of partitions every series costs
    the scrape); flushes summed over the logs. `label_sets`: the scrapes' (topic, partition) label dicts."""
    sets = label_sets or LabelSets(("topic", "partition"))
    size = GaugeMetricFamily(PREFIX + "log_size_bytes", "bytes of a partition's segments", labels=["topic", "partition"])
    segments = GaugeMetricFamily(PREFIX + "log_segments", "a partition's segments", labels=["topic", "partition"])
    pids = GaugeMetricFamily(PREFIX + "log_producer_ids", "producer ids a partition keeps state for (partitions "
                             "with none have no series)", labels=["topic", "partition"])
    flushes = flush_seconds = 0.0
    for plog in logs:
        labels = sets.labels((plog.topic, plog.partition))
        _append(size, labels, plog.size_bytes)
        _append(segments, labels, len(plog.segments))
        producers = len(plog.producer_state.producers)
        if producers:
            _append(pids, labels, producers)
        count, seconds = plog.flush_totals
        flushes += count
        flush_seconds += seconds
    yield from (size, segments, pids)
    yield CounterMetricFamily(PREFIX + "log_flushes", "flushes (fsyncs) of the logs open now", value=flushes)
    yield CounterMetricFamily(PREFIX + "log_flush_seconds", "time the logs open now spent in flushes; with "
                              "sparklog_log_flushes_total, the mean flush latency", value=flush_seconds)


def storage_families(cleaner, scrubber) -> Iterator[Metric]:
    """The LogManager's CleanerStatistics and ScrubberStatistics."""
    for name, value, doc in (("log_cleaner_runs", cleaner.runs, "cleans completed"),
                             ("log_cleaner_errors", cleaner.errors, "cleans that failed"),
                             ("log_cleaner_read_bytes", cleaner.bytes_read, "bytes the cleaner read"),
                             ("log_cleaner_written_bytes", cleaner.bytes_written, "bytes the cleaner wrote"),
                             ("log_cleaner_removed_records", cleaner.records_removed, "records the cleaner removed"),
                             ("log_scrubber_passes", scrubber.passes, "scrubber passes completed"),
                             ("log_scrubber_verified_bytes", scrubber.verified_bytes, "bytes the scrubber verified"),
                             ("log_scrubber_errors", scrubber.errors, "logs whose scrub failed")):
        yield CounterMetricFamily(PREFIX + name, doc, value=value)


def lag_families(committed: Iterable[tuple[str, tuple[str, int], int]],
                 end_of: Callable[[str, int], int | None], label_sets: LabelSets | None = None) -> Iterator[Metric]:
    """`committed`: (group, (topic, partition), offset) of the groups coordinated here; `end_of(topic,
    partition)`: the partition's high watermark if a replica is hosted here, else None (no series: the lag is
    reported by a broker that hosts both, or not at all). `label_sets`: the scrapes' label dicts."""
    sets = label_sets or LabelSets(("group", "topic", "partition"))
    lag = GaugeMetricFamily(PREFIX + "consumer_group_lag", "high watermark minus the group's committed offset",
                            labels=["group", "topic", "partition"])
    for group, (topic, partition), offset in committed:
        end = end_of(topic, partition)
        if end is not None:
            _append(lag, sets.labels((group, topic, partition)), max(0, end - offset))
    yield lag


# -- the collector over one broker -------------------------------------------------------------------------

class BrokerCollector:
    """The custom collector (Rule 1) over a running `app.Broker`; every part it reads may still be None."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._errors = 0
        self._lock = threading.Lock()  # scrapes run on threads of their own: Rule 5, one at a time
        self._log_labels = LabelSets(("topic", "partition"))
        self._lag_labels = LabelSets(("group", "topic", "partition"))

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            families = list(self._collect())
            self._log_labels.prune()
            self._lag_labels.prune()
        return iter(families)

    def _collect(self) -> Iterator[Metric]:
        failed = 0
        for section in (self._topics, self._requests, self._server, self._replication, self._controller,
                        self._zookeeper, self._logs, self._storage, self._lag, self._quotas):
            try:
                families = list(section())
            except Exception as exc:  # noqa: BLE001 - Rule 2: one section's failure leaves out only its series
                log.debug("metrics section %s failed: %s: %s", section.__name__, type(exc).__name__, exc)
                failed += 1
                continue
            yield from families
        self._errors += failed
        errors = self._errors
        yield CounterMetricFamily(PREFIX + "metrics_collect_errors", "scrape sections that failed (their "
                                  "series left out of that scrape)", value=errors)
        yield GaugeMetricFamily(PREFIX + "metrics_stale", "1 while values may be stale or partial (not serving, "
                                "ZooKeeper not connected, a section failed)", value=int(self._stale() or failed > 0))

    def _stale(self) -> bool:
        b = self.broker
        return b.dispatcher is None or b.stopping or b.zk is None or str(b.zk.state) != "CONNECTED"

    def _topics(self) -> Iterator[Metric]:
        return topic_families(self.broker.dispatcher.state.topic_meters)

    def _requests(self) -> Iterator[Metric]:
        dispatcher = self.broker.dispatcher
        return request_families(dispatcher.meters, dispatcher.requests_by_api())

    def _server(self) -> Iterator[Metric]:
        return server_families(self.broker.server.statistics())

    def _replication(self) -> Iterator[Metric]:
        replicas = self.broker.replicas
        return replication_families(list(replicas.leaders.values()), replicas.statistics())

    def _controller(self) -> Iterator[Metric]:
        return controller_families(self.broker.controller.statistics())

    def _zookeeper(self) -> Iterator[Metric]:
        zk = self.broker.zk
        return zookeeper_families(None if zk is None else str(zk.state))

    def _logs(self) -> Iterator[Metric]:
        return log_families(self.broker.logs.logs(), self._log_labels)

    def _storage(self) -> Iterator[Metric]:
        logs = self.broker.logs  # not logs.statistics(): that walks every log
        return storage_families(logs.cleaner.statistics(), logs.scrubber_statistics())

    def _lag(self) -> Iterator[Metric]:
        logs = self.broker.logs

        def end_of(topic: str, partition: int) -> int | None:
            plog = logs.get(topic, partition)
            return None if plog is None else plog.high_watermark
        return lag_families(self.broker.dispatcher.state.offsets.committed_offsets(), end_of, self._lag_labels)


    def _quotas(self) -> Iterator[Metric]:
        yield from client_quota_families(self.broker.dispatcher.state.quotas.throttles())
        yield from replication_throttle_families(self.broker.replicas.throttles.statistics())


class MetricsEndpoint:
    """prometheus_client's HTTP server on its own thread, serving one registry holding `collector`."""

    def __init__(self, host: str, port: int, collector) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host, self.port = host or "0.0.0.0", port
        self._httpd = None
        self._thread: threading.Thread | None = None

    def start(self) -> "MetricsEndpoint":
        try:
            self._httpd, self._thread = start_http_server(self.port, self.host, self.registry)
        except OSError as exc:
            raise MetricsListenerUnavailable(f"cannot serve metrics on {self.host}:{self.port}: "
                                             f"{exc.strerror or exc}") from None
        self._thread.name = "metrics-endpoint"
        self.port = self._httpd.server_address[1]
        return self

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join()
