"""The metrics endpoint's collectors (sparklog/broker/metrics.py) and the counters they read (broker/meters.py):
real dispatchers over real partition logs in temp dirs (the fast-path tests' broker), each request's effect
on the series checked through prometheus_client's own exposition and parser."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from sparklog.broker import meters as meters_module
from sparklog.broker.app import Broker
from sparklog.broker.config import BrokerConfig
from sparklog.broker.metrics import (BrokerCollector, LabelSets, MetricsEndpoint, MetricsListenerUnavailable,
                                     lag_families, log_families, request_families, topic_families)
from sparklog.protocol.api_keys import ApiKey
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

from unit.broker.handlers.test_produce_fast_path import broker, identified_session, produce_frame


class Families:
    """A collector of fixed families, so a section's output goes through prometheus_client's exposition."""

    def __init__(self, families) -> None:
        self.families = list(families)

    def collect(self):
        return self.families


def samples(families) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Families(families))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(found: dict, name: str, **labels) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def dispatcher(tmp_path):
    d = broker(str(tmp_path))
    yield d
    d.state.logs.close()


def topic_samples(dispatcher) -> dict:
    return samples(topic_families(dispatcher.state.topic_meters))


def test_a_fast_path_produce_counts_its_bytes_messages_and_latency(dispatcher):
    session = identified_session(dispatcher)
    frame = produce_frame("t", 0, acks=1)
    assert dispatcher.handle_frame(frame, session) is not None
    found = topic_samples(dispatcher)
    assert value(found, "sparklog_broker_topic_messages_in_total", topic="t") == 1
    batch = len(build_batch([(None, b"v", None, None)]))
    assert value(found, "sparklog_broker_topic_bytes_in_total", topic="t") == batch
    latency = samples(request_families(dispatcher.meters, dispatcher.statistics().requests_by_api))
    assert value(latency, "sparklog_request_latency_seconds_count", api="Produce") == 1
    assert value(latency, "sparklog_request_latency_seconds_bucket", api="Produce", le="+Inf") == 1
    assert value(latency, "sparklog_requests_total", api="Produce") == 1


def test_the_general_path_counts_as_the_fast_path_does(dispatcher):
    dispatcher.handle_frame(produce_frame("t", 1, acks=1))  # no session: the general path (dispatch.py Rule 1)
    found = topic_samples(dispatcher)
    assert value(found, "sparklog_broker_topic_messages_in_total", topic="t") == 1
    latency = samples(request_families(dispatcher.meters, {}))
    assert value(latency, "sparklog_request_latency_seconds_count", api="Produce") == 1


def test_a_produce_group_counts_every_request_once(dispatcher):
    session = identified_session(dispatcher)
    replies: list = []
    dispatcher.handle_frames([produce_frame("t", 0, acks=1, correlation_id=i) for i in range(1, 4)], session, replies)
    assert dispatcher.statistics().grouped_produces == 3
    assert value(topic_samples(dispatcher), "sparklog_broker_topic_messages_in_total", topic="t") == 3
    latency = samples(request_families(dispatcher.meters, {}))
    assert value(latency, "sparklog_request_latency_seconds_count", api="Produce") == 3


def test_a_produce_to_a_partition_not_led_here_is_a_failed_produce_with_its_error(dispatcher):
    dispatcher.handle_frame(produce_frame("t", 2, acks=1), identified_session(dispatcher))
    found = topic_samples(dispatcher)
    assert value(found, "sparklog_broker_topic_failed_produce_requests_total", topic="t") == 1
    assert value(found, "sparklog_broker_topic_messages_in_total", topic="t") == 0
    errors = samples(request_families(dispatcher.meters, {}))
    assert value(errors, "sparklog_request_errors_total", api="Produce", error="NOT_LEADER_OR_FOLLOWER") == 1


def test_latency_buckets_are_cumulative_and_the_sum_adds_up():
    meters = meters_module.RequestMeters()
    for seconds in (0.0001, 0.003, 0.003, 2.0, 100.0):
        meters.observe(int(ApiKey.FETCH), seconds)
    meters.observe(int(ApiKey.PRODUCE), 0.02, count=4)
    found = samples(request_families(meters, {}))
    assert value(found, "sparklog_request_latency_seconds_bucket", api="Fetch", le="0.0005") == 1
    assert value(found, "sparklog_request_latency_seconds_bucket", api="Fetch", le="0.005") == 3
    assert value(found, "sparklog_request_latency_seconds_bucket", api="Fetch", le="30.0") == 4
    assert value(found, "sparklog_request_latency_seconds_bucket", api="Fetch", le="+Inf") == 5
    assert value(found, "sparklog_request_latency_seconds_sum", api="Fetch") == pytest.approx(102.0061)
    assert value(found, "sparklog_request_latency_seconds_count", api="Produce") == 4
    assert value(found, "sparklog_request_latency_seconds_sum", api="Produce") == pytest.approx(0.08)


def test_topic_counters_never_fall_and_a_fetch_counts_bytes_out():
    topics = meters_module.TopicMeters()
    topics.produced("a", 100, 3)
    topics.fetched("a", 40)
    topics.failed_fetch("a")
    first = samples(topic_families(topics))
    topics.produced("a", 1, 1)
    second = samples(topic_families(topics))
    assert value(first, "sparklog_broker_topic_bytes_out_total", topic="a") == 40
    assert value(first, "sparklog_broker_topic_failed_fetch_requests_total", topic="a") == 1
    assert value(second, "sparklog_broker_topic_bytes_in_total", topic="a") == 101
    assert value(second, "sparklog_broker_topic_messages_in_total", topic="a") == 4


def test_log_series_per_partition(tmp_path):
    logs = LogManager([str(tmp_path)], {"flush.visibility": "appended", "segment.bytes": "200"})
    try:
        plog = logs.get_or_create("orders", 3)
        for i in range(5):
            plog.append_as_leader(build_batch([(None, b"x" * 50, None, None)]), 0)
        plog.flush()
        found = samples(log_families(logs.logs()))
        assert value(found, "sparklog_log_producer_ids", topic="orders", partition="3") is None  # no producer state
        assert value(found, "sparklog_log_size_bytes", topic="orders", partition="3") == plog.size_bytes > 0
        assert value(found, "sparklog_log_segments", topic="orders", partition="3") == len(plog.segments) > 1
        assert value(found, "sparklog_log_flushes_total") >= 1
        assert value(found, "sparklog_log_flush_seconds_total") > 0
    finally:
        logs.close()


def test_producer_ids_are_counted_where_a_partition_keeps_them(tmp_path):
    logs = LogManager([str(tmp_path)], {"flush.visibility": "appended"})
    try:
        plog = logs.get_or_create("payments", 0)
        for producer_id in (11, 12):
            plog.append_as_leader(build_batch([(None, b"x", None, None)], producer_id=producer_id, producer_epoch=0,
                                              base_sequence=0), 0)
        found = samples(log_families(logs.logs()))
        assert value(found, "sparklog_log_producer_ids", topic="payments", partition="0") == 2
    finally:
        logs.close()


def test_group_lag_is_the_high_watermark_minus_the_commit_and_absent_without_a_local_replica():
    ends = {("t", 0): 120, ("t", 1): 7}
    committed = [("g", ("t", 0), 100), ("g", ("t", 1), 9), ("g", ("elsewhere", 0), 5)]
    found = samples(lag_families(committed, lambda topic, partition: ends.get((topic, partition))))
    assert value(found, "sparklog_consumer_group_lag", group="g", topic="t", partition="0") == 20
    assert value(found, "sparklog_consumer_group_lag", group="g", topic="t", partition="1") == 0
    assert value(found, "sparklog_consumer_group_lag", group="g", topic="elsewhere", partition="0") is None


def test_label_sets_are_kept_across_scrapes_and_dropped_with_their_series():
    """broker/metrics.py Rule 5: a series' label dict is made once, read by later scrapes as the same object,
    and dropped once a scrape no longer exports the series (a group gone); the values stay each scrape's."""
    sets = LabelSets(("group", "topic", "partition"))
    ends = {("t", 0): 120, ("t", 1): 7}

    def scrape(committed):
        (family,) = lag_families(committed, lambda topic, partition: ends.get((topic, partition)), sets)
        sets.prune()
        return {tuple(s.labels.values()): (s.labels, s.value) for s in family.samples}

    first = scrape([("g", ("t", 0), 100), ("h", ("t", 1), 2)])
    ends[("t", 0)] = 130
    second = scrape([("g", ("t", 0), 100)])
    assert second[("g", "t", "0")][0] is first[("g", "t", "0")][0]
    assert (first[("g", "t", "0")][1], second[("g", "t", "0")][1]) == (20, 30)
    assert ("h", "t", "1") not in second
    third = scrape([("h", ("t", 1), 2)])
    assert third[("h", "t", "1")][0] is not first[("h", "t", "1")][0]  # made again: it was dropped
    assert third[("h", "t", "1")][0] == {"group": "h", "topic": "t", "partition": "1"}


def unstarted_broker(tmp_path) -> Broker:
    return Broker(BrokerConfig.from_properties({"broker.id": "1", "log.dirs": str(tmp_path),
                                                "zookeeper.connect": "unused:1"}))


def test_a_scrape_of_a_broker_not_started_answers_stale_with_what_it_has(tmp_path):
    collector = BrokerCollector(unstarted_broker(tmp_path))
    found = samples(collector.collect())
    assert value(found, "sparklog_metrics_stale") == 1
    assert value(found, "sparklog_zookeeper_session_state", state="connected") == 0
    assert value(found, "sparklog_metrics_collect_errors_total") > 0  # the sections of parts not built yet
    again = samples(collector.collect())
    assert value(again, "sparklog_metrics_collect_errors_total") > value(found, "sparklog_metrics_collect_errors_total")


def test_the_endpoint_serves_the_exposition_format_on_its_own_thread_and_stops(tmp_path):
    endpoint = MetricsEndpoint("127.0.0.1", 0, BrokerCollector(unstarted_broker(tmp_path))).start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        names = {f.name for f in text_string_to_metric_families(text)}
        assert {"sparklog_metrics_stale", "sparklog_zookeeper_session_state"} <= names
        with pytest.raises(MetricsListenerUnavailable, match=f"cannot serve metrics on 127.0.0.1:{endpoint.port}"):
            MetricsEndpoint("127.0.0.1", endpoint.port, Families([])).start()
    finally:
        endpoint.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5)
