"""Replication throttles (broker/quota/replication.py): the throttled replica lists in Kafka's format, the rate
precedence, which partitions each side holds back, and what kafka-reassign-partitions --throttle writes."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker.handlers.fetch import _leader_holds_back
from sparklog.broker.quota.manager import QuotaWindows
from sparklog.broker.quota.replication import (BROKER_SCOPE, DEFAULT_SCOPE, FOLLOWER_RATE, LEADER_RATE,
                                               ReplicationThrottles)
from sparklog.broker.replication.replica_fetcher import FollowTarget, ReplicaFetcher
from sparklog.coordination.replication_throttles import throttled_pairs
from sparklog.settings import LONG_MAX
from sparklog.storage import throttled_replicas
from sparklog.storage.config import InvalidConfigError, LogConfig


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plog_with(leader: str = "", follower: str = ""):
    config = LogConfig.from_dict({"leader.replication.throttled.replicas": leader,
                                  "follower.replication.throttled.replicas": follower})
    return SimpleNamespace(config=config)


@given(st.sets(st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), max_size=30))
def test_throttled_lists_round_trip(pairs):
    parsed = throttled_replicas.parse(throttled_replicas.format_pairs(pairs))
    assert parsed.pairs == frozenset(pairs) and not parsed.everything
    assert all(parsed.covers(p, b) for p, b in pairs)


@pytest.mark.parametrize("value", ["0", "0:", ":1", "a:1", "0:1;1:2", "0:1 2:3", "**", "-1:2", "0:1:2"])
def test_a_malformed_list_is_refused_in_one_line(value):
    with pytest.raises(InvalidConfigError) as info:
        LogConfig.from_dict({"leader.replication.throttled.replicas": value})
    assert "leader.replication.throttled.replicas" in str(info.value) and "\n" not in str(info.value)


def test_wildcard_and_spaces_as_kafka_accepts_them():
    assert throttled_replicas.parse("*").covers(7, 3)
    assert throttled_replicas.parse(" 0:1 , 2:3 ").pairs == {(0, 1), (2, 3)}
    assert not throttled_replicas.parse("")


def test_each_side_reads_its_own_list_for_this_broker_only():
    throttles = ReplicationThrottles(2, leader_rate=1000, follower_rate=1000)
    plog = plog_with(leader="0:2,1:3", follower="1:2")
    assert throttles.leader_throttled(plog, 0) and not throttles.leader_throttled(plog, 1)
    assert throttles.follower_throttled(plog, 1) and not throttles.follower_throttled(plog, 0)
    assert throttles.leader_throttled(plog_with(leader="*"), 5)


def test_unbounded_rates_throttle_nothing():
    throttles = ReplicationThrottles(2)
    plog = plog_with(leader="*", follower="*")
    assert not throttles.leader_throttled(plog, 0) and not throttles.follower_throttled(plog, 0)


def test_rate_precedence_broker_then_default_then_static():
    throttles = ReplicationThrottles(1, leader_rate=500, follower_rate=600)
    throttles.set_dynamic(DEFAULT_SCOPE, {LEADER_RATE: "200", "other": "x"})
    assert (throttles.leader.bound, throttles.follower.bound) == (200, 600)
    throttles.set_dynamic(BROKER_SCOPE, {LEADER_RATE: "100", FOLLOWER_RATE: "300"})
    assert (throttles.leader.bound, throttles.follower.bound) == (100, 300)
    throttles.set_dynamic(BROKER_SCOPE, {})
    throttles.set_dynamic(DEFAULT_SCOPE, {})
    assert (throttles.leader.bound, throttles.follower.bound) == (500, 600)
    throttles.set_dynamic(DEFAULT_SCOPE, {FOLLOWER_RATE: str(LONG_MAX)})
    assert throttles.follower.unbounded


def test_the_rate_is_held_at_the_bound_over_the_windows():
    """Record whenever the quota is not exceeded, as both sides do: over a minute the bytes let through stay
    within a chunk of bound x time (Rule: replication-rate)."""
    clock = Clock()
    throttles = ReplicationThrottles(1, leader_rate=100_000, windows=QuotaWindows(11, 1), clock=clock)
    start, sent = clock.now, 0
    while clock.now - start < 60:
        if not throttles.leader.exceeded():
            throttles.leader.record(50_000)
            sent += 50_000
        clock.now += 0.05
    assert 0.9 * 100_000 * 60 <= sent <= 100_000 * 60 + 12 * 100_000, sent


def led_partition(isr, leader_list="0:1"):
    return SimpleNamespace(plog=plog_with(leader=leader_list), state=SimpleNamespace(isr=frozenset(isr)))


def test_the_leader_holds_back_only_an_out_of_sync_follower_of_a_throttled_partition_over_the_rate():
    clock = Clock()
    throttles = ReplicationThrottles(1, leader_rate=1000, clock=clock)
    state = SimpleNamespace(replicas=SimpleNamespace(throttles=throttles))
    assert not _leader_holds_back(state, led_partition({1}), 0, 3)  # within the rate
    throttles.leader.record(1_000_000)
    assert _leader_holds_back(state, led_partition({1}), 0, 3)
    assert not _leader_holds_back(state, led_partition({1, 3}), 0, 3)  # in sync: never (Rule: in-sync-exempt)
    assert not _leader_holds_back(state, led_partition({1}, leader_list="0:2"), 0, 3)  # not listed for broker 1
    assert not _leader_holds_back(state, led_partition({1}, leader_list=""), 0, 3)


def test_the_follower_leaves_out_throttled_partitions_behind_the_leader_while_over_the_rate():
    async def run():
        clock = Clock()
        throttles = ReplicationThrottles(2, follower_rate=1000, clock=clock)
        fetcher = ReplicaFetcher(2, 1, throttles=throttles)
        listed, other = plog_with(follower="0:2"), plog_with()
        fetcher.set_partitions({("t", 0): FollowTarget(listed, 1, 0), ("u", 0): FollowTarget(other, 1, 0)}, None)
        for part in fetcher.partitions.values():
            part.truncating = False
        assert set(fetcher._fetchable()) == {("t", 0), ("u", 0)}
        throttles.follower.record(1_000_000)
        assert set(fetcher._fetchable()) == {("u", 0)}  # behind (lag unknown): held back
        fetcher.partitions[("t", 0)].lag = 0  # caught up with the leader's HW: in sync
        assert set(fetcher._fetchable()) == {("t", 0), ("u", 0)}
        fetcher.partitions[("t", 0)].lag = 5
        assert set(fetcher._fetchable()) == {("u", 0)}
        clock.now += 3600  # the windows have passed
        assert set(fetcher._fetchable()) == {("t", 0), ("u", 0)}

    asyncio.run(run())


def test_the_reassignment_throttles_name_current_replicas_as_leaders_and_new_ones_as_followers():
    assignments = {"t": {0: (1, 2), 1: (2, 3), 2: (3, 1)}, "u": {0: (1,)}}
    plan = {("t", 0): (3, 2), ("t", 1): (2, 3), ("t", 2): (4, 5), ("u", 0): (1,)}
    leader, follower = throttled_pairs(plan, assignments)
    assert leader == {"t": {(0, 1), (0, 2), (2, 3), (2, 1)}}
    assert follower == {"t": {(0, 3), (2, 4), (2, 5)}}


def test_a_throttled_partition_behind_takes_at_most_a_window_of_the_rate_per_fetch():
    """Rule: replication-rate's fetch_cap on both sides; in-sync and unlisted partitions keep the full size."""
    from sparklog.broker.handlers.fetch import _partition_bytes
    from sparklog.broker.replication.replica_fetcher import REPLICA_FETCH_MAX_BYTES

    throttles = ReplicationThrottles(1, leader_rate=5000, follower_rate=7000, windows=QuotaWindows(4, 2))
    assert (throttles.leader.fetch_cap(), throttles.follower.fetch_cap()) == (10_000, 14_000)
    state = SimpleNamespace(replicas=SimpleNamespace(throttles=throttles))
    part = SimpleNamespace(partition_max_bytes=1 << 20)
    assert _partition_bytes(state, led_partition({1}), 0, 3, part, 1 << 30) == 10_000
    assert _partition_bytes(state, led_partition({1, 3}), 0, 3, part, 1 << 30) == 1 << 20  # in sync
    assert _partition_bytes(state, led_partition({1}, leader_list="0:2"), 0, 3, part, 1 << 30) == 1 << 20
    assert _partition_bytes(state, led_partition({1}), 0, -1, part, 1 << 30) == 1 << 20  # a consumer

    async def follower_side():
        fetcher = ReplicaFetcher(1, 2, throttles=throttles)
        fetcher.set_partitions({("t", 0): FollowTarget(plog_with(follower="0:1"), 2, 0),
                                ("u", 0): FollowTarget(plog_with(), 2, 0)}, None)
        parts = fetcher.partitions
        assert fetcher._max_bytes(("t", 0), parts[("t", 0)]) == 14_000
        assert fetcher._max_bytes(("u", 0), parts[("u", 0)]) == REPLICA_FETCH_MAX_BYTES
        parts[("t", 0)].lag = 0
        assert fetcher._max_bytes(("t", 0), parts[("t", 0)]) == REPLICA_FETCH_MAX_BYTES

    asyncio.run(follower_side())
