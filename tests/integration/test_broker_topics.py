"""The broker follows the registry: topics deleted and re-created (while it runs and while it is down) never
reuse the old log, stray logs are deleted once ZooKeeper has been read, partition-state changes move
leadership, and `/config/topics/<t>` changes are noted and applied when the log is next opened."""

from __future__ import annotations

import json
import time

import pytest

from support.wire import request
from sparklog.broker.replication.partition_metadata import FILE_NAME, read
from sparklog.coordination import paths
from sparklog.coordination import topics as registry
from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch
from support.cluster import Cluster

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
MESSAGE_TOO_LARGE = 10
NOT_LEADER_OR_FOLLOWER = 6


@pytest.fixture
def one(request, zk_connect, tmp_path):
    c = Cluster(zk_connect, tmp_path, brokers=1, overrides={"log.flush.interval.ms": "10"})
    request.addfinalizer(c.stop)
    return c.start()


def produce(broker, topic: str, values: list[bytes], partition: int = 0):
    """One Produce v8 (acks=1) of one batch; returns (error code, base offset)."""
    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=partition, records=build_batch([(None, v, None, None) for v in values]))])])
    part = request(broker.host, broker.port, ApiKey.PRODUCE, 8, body).responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def produce_when_served(broker, topic: str, values: list[bytes], partition: int = 0) -> int:
    """Retry until the broker serves the partition (its watch may lag the registry); the base offset."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        code, base = produce(broker, topic, values, partition)
        if code == 0:
            return base
        assert time.monotonic() < deadline, f"{topic}-{partition} not served: error {code}"
        time.sleep(0.1)


def log_dir(broker, topic: str, partition: int = 0):
    return broker.log_dir / f"{topic}-{partition}"


def current_topic_id(zk, topic: str) -> str:
    return registry.topic_id(zk, topic)


def test_topic_recreated_while_the_broker_was_down_gets_a_fresh_log(one, zk):
    broker = one.brokers[1]
    registry.create_topic(zk, "again", 1, 1)
    assert produce_when_served(broker, "again", [b"old-%d" % i for i in range(10)]) == 0
    first_id = current_topic_id(zk, "again")
    assert read(str(log_dir(broker, "again"))) == first_id

    broker.stop()
    registry.delete_topic(zk, "again")
    registry.create_topic(zk, "again", 1, 1, live_broker_ids=[1])  # broker 1 is down: name it
    second_id = current_topic_id(zk, "again")
    assert second_id != first_id
    broker.start()

    # the first message of the new topic gets offset 0: nothing of the old log survived
    assert produce_when_served(broker, "again", [b"new"]) == 0
    assert read(str(log_dir(broker, "again"))) == second_id
    assert "belongs to an earlier topic again" in broker.tail(100_000)


def test_topic_recreated_while_the_broker_runs_gets_a_fresh_log(one, zk):
    broker = one.brokers[1]
    registry.create_topic(zk, "quick", 1, 1)
    assert produce_when_served(broker, "quick", [b"a", b"b", b"c"]) == 0
    registry.delete_topic(zk, "quick")
    registry.create_topic(zk, "quick", 1, 1)  # the watch may see only the end state: the same assignment
    new_id = current_topic_id(zk, "quick")
    deadline = time.monotonic() + TIMEOUT_S
    while read(str(log_dir(broker, "quick"))) != new_id:
        assert time.monotonic() < deadline, "the broker kept the old topic's log"
        time.sleep(0.05)
    assert produce_when_served(broker, "quick", [b"fresh"]) == 0


def test_stray_logs_are_deleted_at_startup_after_zookeeper_is_read(one, zk):
    broker = one.brokers[1]
    registry.create_topic(zk, "gone", 2, 1)
    registry.create_topic(zk, "kept", 1, 1)
    produce_when_served(broker, "gone", [b"x"])
    produce_when_served(broker, "kept", [b"y"])
    broker.stop()
    registry.delete_topic(zk, "gone")
    assert log_dir(broker, "gone").exists()
    broker.start()
    assert not log_dir(broker, "gone", 0).exists() and not log_dir(broker, "gone", 1).exists()
    assert (log_dir(broker, "kept") / FILE_NAME).exists()
    assert produce_when_served(broker, "kept", [b"z"]) == 1  # the kept log kept its message


def test_partition_state_change_moves_leadership(request, zk_connect, tmp_path, zk):
    two = Cluster(zk_connect, tmp_path, brokers=2, overrides={"log.flush.interval.ms": "10"})
    request.addfinalizer(two.stop)
    two.start()
    b1, b2 = two.brokers[1], two.brokers[2]
    registry.create_topic(zk, "moving", 1, 1, live_broker_ids=[1])
    assert produce_when_served(b1, "moving", [b"on-1"]) == 0
    assert produce(b2, "moving", [b"nope"])[0] == NOT_LEADER_OR_FOLLOWER

    state = registry.partition_state(zk, "moving", 0)
    registry.set_partition_state(zk, "moving", 0, registry.PartitionState(
        leader=2, isr=(2,), leader_epoch=state.leader_epoch + 1), expected_version=state.zk_version)
    produce_when_served(b2, "moving", [b"on-2"])
    assert produce(b1, "moving", [b"nope"])[0] == NOT_LEADER_OR_FOLLOWER
    assert (log_dir(b2, "moving") / FILE_NAME).exists()


def test_config_change_reaches_the_open_log_without_a_restart(one, zk):
    broker = one.brokers[1]
    registry.create_topic(zk, "conf", 1, 1)
    big = [b"x" * 5000]
    produce_when_served(broker, "conf", big)
    zk.set(paths.topic_config("conf"), json.dumps({"version": 1, "config": {"max.message.bytes": "1000"}}).encode())
    deadline = time.monotonic() + TIMEOUT_S
    while produce(broker, "conf", big)[0] != MESSAGE_TOO_LARGE:  # until the watch has reconfigured the log
        assert time.monotonic() < deadline, "the config change did not reach the open log"
        time.sleep(0.05)
    assert "config max.message.bytes applied to the open log" in broker.tail(100_000)
    assert produce(broker, "conf", [b"small"])[0] == 0  # the same log, still open and serving
