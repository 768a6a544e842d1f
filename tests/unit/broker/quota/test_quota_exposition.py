"""The quotas' Prometheus series (broker/quota/exposition.py): the throttle per client quota group and the
replication throttles, as a scrape reads them."""

from __future__ import annotations

from sparklog.broker.quota.exposition import client_quota_families, replication_throttle_families
from sparklog.broker.quota.manager import QuotaManager, QuotaWindows
from sparklog.broker.quota.replication import LEADER_RATE, BROKER_SCOPE, ReplicationThrottles
from sparklog.coordination.client_quotas import CONSUMER_BYTE_RATE, DEFAULT, PRODUCER_BYTE_RATE, Entity

from unit.broker.test_metrics import samples, value


def test_each_client_quota_group_shows_its_bound_rate_and_the_throttle_it_owes():
    clock = [100.0]
    manager = QuotaManager(QuotaWindows(3, 1.0), clock=lambda: clock[0])
    manager.update(Entity(client="noisy"), {PRODUCER_BYTE_RATE: 1000.0})
    manager.update(Entity("alice", DEFAULT), {CONSUMER_BYTE_RATE: 5000.0})
    owed = manager.client_quota("User:ANONYMOUS", "noisy").record_produce(6000, clock[0])
    manager.client_quota("User:alice", "reader").record_fetch(100, clock[0])
    found = samples(client_quota_families(manager.throttles()))
    noisy = {"kind": "produce", "user": "", "client_id": "noisy"}
    assert owed > 0 and value(found, "sparklog_client_quota_throttle_ms", **noisy) == owed
    assert value(found, "sparklog_client_quota_bound", **noisy) == 1000
    assert value(found, "sparklog_client_quota_rate", **noisy) == 3000  # 6000 B over 2 windows (num - 1)
    reader = {"kind": "fetch", "user": "alice", "client_id": "reader"}
    assert value(found, "sparklog_client_quota_throttle_ms", **reader) == 0
    assert value(found, "sparklog_client_quota_bound", **reader) == 5000
    clock[0] += 60  # idle for a whole span: measured 0, owes nothing
    assert value(samples(client_quota_families(manager.throttles())), "sparklog_client_quota_throttle_ms",
                 **noisy) == 0


def test_the_replication_throttles_show_their_bound_only_when_set_and_count_throttled_bytes():
    throttles = ReplicationThrottles(1)
    found = samples(replication_throttle_families(throttles.statistics()))
    assert value(found, "sparklog_replication_throttle_bound_bytes", side="leader") is None
    throttles.set_dynamic(BROKER_SCOPE, {LEADER_RATE: "5000"})
    throttles.leader.record(1234)
    found = samples(replication_throttle_families(throttles.statistics()))
    assert value(found, "sparklog_replication_throttle_bound_bytes", side="leader") == 5000
    assert value(found, "sparklog_replication_throttled_bytes_total", side="leader") == 1234
    assert value(found, "sparklog_replication_throttled_bytes_total", side="follower") == 0
    assert value(found, "sparklog_replication_throttle_rate_bytes", side="leader") > 0


def test_a_broker_scrape_carries_the_quota_sections(tmp_path):
    """metrics.BrokerCollector reads the dispatcher's quota manager and the replica manager's throttles."""
    from types import SimpleNamespace

    from sparklog.broker.metrics import BrokerCollector
    from unit.broker.handlers.test_produce_fast_path import broker

    dispatcher = broker(str(tmp_path))
    try:
        quotas = dispatcher.state.quotas
        quotas.update(Entity(client="noisy"), {PRODUCER_BYTE_RATE: 1000.0})
        quotas.client_quota("User:ANONYMOUS", "noisy").record_produce(50_000, quotas.clock())  # 5x over 10 s
        dispatcher.state.replicas.throttles.set_dynamic(BROKER_SCOPE, {LEADER_RATE: "7000"})
        collector = BrokerCollector(SimpleNamespace(dispatcher=dispatcher, replicas=dispatcher.state.replicas))
        found = samples(collector._quotas())
        assert value(found, "sparklog_client_quota_throttle_ms", kind="produce", user="", client_id="noisy") > 0
        assert value(found, "sparklog_replication_throttle_bound_bytes", side="leader") == 7000
    finally:
        dispatcher.state.logs.close()
