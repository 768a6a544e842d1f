"""A follower's fetch session at its leader (KIP-227 on the replication path): an incremental Fetch records the
follower's position only for the partitions it reads (fetch_sessions.py Rule 5), and the session's fetches
keep the others caught up (replica_state.py Rule: session-caught-up), so an idle follower's Fetch costs what
moved, not what the session holds, while the ISR rules hold. Real logs, a hand-made snapshot, no ZooKeeper."""

from __future__ import annotations

import time

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import (FetchPartition, FetchRequest, FetchTopic, PartitionProduceData, ProduceRequest,
                               RequestHeader, TopicProduceData)
from sparklog.protocol.registry import Request
from sparklog.records.batch import build_batch
from sparklog.storage import LogManager

ME, OTHER, THIRD = 1, 2, 3
EPOCH = 4
PARTITIONS = 30
LAG = 30_000  # replica.lag.time.max.ms: the default


class Partitions:
    def __init__(self, snapshot):
        self.snapshot = snapshot


@pytest.fixture
def logs(tmp_path):
    manager = LogManager([str(tmp_path / "logs")], {"flush.ms": str(10**12)})
    yield manager
    manager.close()


@pytest.fixture
def state(logs):
    config = BrokerConfig.from_properties({"broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "u:1"})
    replicas = (ME, OTHER, THIRD)
    leading = {("t", p): logs.get_or_create("t", p) for p in range(PARTITIONS)}
    topics = {"t": TopicMeta("t", {p: PartitionMeta(p, ME, EPOCH, replicas, replicas) for p in range(PARTITIONS)})}
    brokers = {b: BrokerInfo(b, "127.0.0.1", 9090 + b) for b in replicas}
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=logs,
                                      partitions=Partitions(MetadataSnapshot(topics, brokers, leading)))


class Follower:
    """OTHER's fetches of every partition of "t" in one session, as its replica fetcher sends them (v11)."""

    def __init__(self, state):
        self.state, self.session_id, self.epoch = state, 0, 0
        self.offsets = {p: 0 for p in range(PARTITIONS)}

    def fetch(self, moved=()):
        parts = [FetchPartition(partition=p, fetch_offset=self.offsets[p], partition_max_bytes=100_000,
                                current_leader_epoch=EPOCH) for p in (self.offsets if self.epoch == 0 else moved)]
        body = FetchRequest(replica_id=OTHER, max_wait_ms=0, min_bytes=1, session_id=self.session_id,
                            session_epoch=self.epoch, topics=[FetchTopic(topic="t", partitions=parts)] if parts else [],
                            forgotten_topics_data=[])
        response = handlers.handle_fetch(Request(RequestHeader(1, 11, 7, "test"), body), self.state)
        assert response.error_code == 0
        self.session_id, self.epoch = response.session_id, self.epoch + 1
        return response


def counting(state):
    recorded = []
    record = state.replicas.record_follower_fetch

    def wrapper(led, replica, fetch_offset, *args):
        recorded.append(led.key)
        return record(led, replica, fetch_offset, *args)

    state.replicas.record_follower_fetch = wrapper
    return recorded


def produce(state, partition):
    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=partition, records=build_batch([(None, b"v", None, None)]))])])
    response = handlers.handle_produce(Request(RequestHeader(0, 8, 7, "test"), body), state)
    assert response.responses[0].partition_responses[0].error_code == 0


def now_ms():
    return int(time.monotonic() * 1000)


def test_an_idle_followers_incremental_fetch_records_no_partition_yet_keeps_them_all_caught_up(state):
    recorded = counting(state)
    follower = Follower(state)
    follower.fetch()  # full: makes the session
    assert follower.session_id != 0 and len(recorded) == PARTITIONS
    follower.fetch()  # a new session's first incremental fetch reads (and records) every partition
    assert len(recorded) == 2 * PARTITIONS
    time.sleep(1.0)
    before = now_ms()
    follower.fetch()
    assert len(recorded) == 2 * PARTITIONS  # nothing moved: nothing recorded (before: every partition, each Fetch)
    for p in range(PARTITIONS):
        led = state.replicas.leaders[("t", p)]
        # caught up as of this fetch (not the one a second before): OTHER stays in the ISR LAG after it
        assert OTHER not in led.state.to_shrink(before + LAG - 500, LAG)
        assert OTHER in led.state.to_shrink(now_ms() + LAG + 1, LAG)  # a follower that stops fetching leaves


def test_a_partition_that_moves_is_recorded_and_a_follower_behind_on_it_leaves_the_isr(state):
    recorded = counting(state)
    follower = Follower(state)
    follower.fetch()
    follower.fetch()
    recorded.clear()
    produce(state, 7)  # the leader's LEO moves: partition 7 is marked in the session
    time.sleep(1.0)
    follower.fetch()  # OTHER has not read it yet: it fetches from 0
    assert recorded == [("t", 7)]
    behind_since = now_ms()
    for _ in range(3):  # it keeps fetching, never reading partition 7's new record
        follower.fetch()
    led = state.replicas.leaders[("t", 7)]
    assert OTHER in led.state.to_shrink(behind_since + LAG, LAG)  # caught up last before the append
    assert OTHER not in state.replicas.leaders[("t", 8)].state.to_shrink(behind_since + LAG - 500, LAG)
    follower.offsets[7] = 1
    follower.fetch(moved=[7])  # it reads the record: caught up again
    assert OTHER not in led.state.to_shrink(now_ms() + LAG - 500, LAG)
