"""The classic group APIs at their flexible versions, with real clients against two real broker processes and a
real ZooKeeper: kafka-python's KafkaConsumer and KafkaAdminClient and confluent-kafka's Consumer and AdminClient
join a group, read, commit, list, describe and read back the group's offsets, each at the highest versions it
negotiates (read from the brokers' API x version x client tables); raw requests show the batched forms across
the two coordinators (FindCoordinator v4's keys, OffsetFetch v8's groups, one of them NOT_COORDINATOR)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.protocol import ApiKey
from sparklog.protocol.find_coordinator import KEY_TYPE_GROUP, FindCoordinatorRequest
from sparklog.protocol.offset_commit import (OffsetCommitRequest, OffsetCommitRequestPartition,
                                             OffsetCommitRequestTopic)
from sparklog.protocol.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup
from support import broker_matrix, wire
from support.cluster import started_cluster

pytestmark = pytest.mark.slow

PARTITIONS = 3
RECORDS = 30
TIMEOUT_S = 60
NOT_COORDINATOR = 16
GROUP_APIS = {"FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "OffsetCommit",
              "OffsetFetch", "DescribeGroups", "ListGroups"}
# The highest version of each group API each client sends against the advertised table (kafka-python caps
# JoinGroup at 7 and OffsetCommit/OffsetFetch at 8 in its own code; librdkafka 2.16 stops at JoinGroup 5,
# SyncGroup 3, Heartbeat 3, LeaveGroup 1 and FindCoordinator 2 for the classic protocol).
HIGHEST = {
    "kafka-python": {"FindCoordinator": {5}, "JoinGroup": {7}, "SyncGroup": {5}, "Heartbeat": {4},
                     "LeaveGroup": {5}, "OffsetCommit": {8}, "OffsetFetch": {8}, "DescribeGroups": {5},
                     "ListGroups": {5}},
    "confluent-kafka-python": {"FindCoordinator": {2}, "JoinGroup": {5}, "SyncGroup": {3}, "Heartbeat": {3},
                               "LeaveGroup": {1}, "OffsetCommit": {9}, "OffsetFetch": {9}, "DescribeGroups": {5},
                               "ListGroups": {5}},
}


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    c = started_cluster(request, f"{zookeeper.connect_string}/grpflex-{uuid.uuid4().hex}",
                        tmp_path_factory.mktemp("grpflex"), 2, 6000, **{
                            "group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"})
    return c


def new_topic(cluster) -> str:
    name = f"grpflex-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(RECORDS):
        producer.produce(name, value=b"v%d" % i, partition=i % PARTITIONS)
    assert producer.flush(TIMEOUT_S) == 0
    return name


def served(cluster, software: str) -> dict[str, set[int]]:
    """The group APIs' versions the brokers served to clients whose name starts with `software`."""
    found: dict[str, set[int]] = {}
    for broker in cluster.brokers.values():
        matrix = broker.api_matrix()
        broker_matrix.record(matrix)
        for client, apis in matrix["served"].items():
            if client.startswith(software + " "):
                for api, versions in apis.items():
                    if api in GROUP_APIS:
                        found.setdefault(api, set()).update(versions)
    return found


def test_kafka_python_group_at_its_highest_versions(cluster):
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka.structs import TopicPartition as TheirPartition

    topic, group = new_topic(cluster), f"kp-{uuid.uuid4().hex[:8]}"
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=6000,
                             heartbeat_interval_ms=300)
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        read = 0
        deadline = time.monotonic() + TIMEOUT_S
        while read < RECORDS and time.monotonic() < deadline:
            read += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        assert read == RECORDS
        consumer.commit()
        time.sleep(1)  # a heartbeat or two of the member's, at Heartbeat's highest version
        listed = admin.list_groups()
        assert {g["group_id"]: g["group_type"] for g in listed}[group] == "classic"  # ListGroups v5
        described = admin.describe_groups([group])
        assert described[group]["group_state"] == "Stable" and len(described[group]["members"]) == 1
        offsets = admin.list_group_offsets([group, f"{group}-none"])  # OffsetFetch v8: both groups, batched
        assert offsets[f"{group}-none"] == {}
        assert {tp.partition: meta.offset for tp, meta in offsets[group].items()} == {
            p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        assert offsets[group][TheirPartition(topic, 0)].offset == RECORDS // PARTITIONS
    finally:
        consumer.close()  # LeaveGroup
        admin.close()
    assert served(cluster, "kafka-python") == HIGHEST["kafka-python"]


def test_confluent_kafka_group_at_its_highest_versions(cluster):
    topic, group = new_topic(cluster), f"ck-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    try:
        consumer.subscribe([topic])
        read = 0
        deadline = time.monotonic() + TIMEOUT_S
        while read < RECORDS and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read += 1
        assert read == RECORDS
        committed = consumer.commit(asynchronous=False)
        assert {tp.partition: tp.offset for tp in committed} == {p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        time.sleep(1)
        listed = admin.list_consumer_groups().result(TIMEOUT_S)
        assert group in [g.group_id for g in listed.valid]
        described = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
        assert str(described.state).endswith("STABLE") and len(described.members) == 1
        from confluent_kafka import ConsumerGroupTopicPartitions
        answer = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(TIMEOUT_S)
        assert {tp.partition: tp.offset for tp in answer.topic_partitions} == {
            p: RECORDS // PARTITIONS for p in range(PARTITIONS)}
        assert consumer.committed([TopicPartition(topic, 0)], TIMEOUT_S)[0].offset == RECORDS // PARTITIONS
    finally:
        consumer.close()
    assert served(cluster, "confluent-kafka-python") == HIGHEST["confluent-kafka-python"]


def _at(broker):
    host, port = broker.address.rsplit(":", 1)
    return host, int(port)


def test_batched_find_coordinator_and_offset_fetch_across_two_coordinators(cluster):
    """FindCoordinator v4 answers each key as v3 answers it alone; OffsetFetch v8 to one coordinator answers its
    own group's offsets and the other's NOT_COORDINATOR, each in its own entry."""
    topic = new_topic(cluster)
    first = cluster.brokers[1]
    groups = [f"batch-{i}-{uuid.uuid4().hex[:6]}" for i in range(12)]
    batched = wire.request(*_at(first), ApiKey.FIND_COORDINATOR, 4,
                           FindCoordinatorRequest(key_type=KEY_TYPE_GROUP, coordinator_keys=groups))
    assert [c.key for c in batched.coordinators] == groups and all(c.error_code == 0 for c in batched.coordinators)
    for c in batched.coordinators:
        alone = wire.request(*_at(first), ApiKey.FIND_COORDINATOR, 3, FindCoordinatorRequest(key=c.key))
        assert (alone.error_code, alone.node_id, alone.host, alone.port) == (0, c.node_id, c.host, c.port)
    by_node = {c.node_id: c.key for c in batched.coordinators}
    assert set(by_node) == {1, 2}, "12 groups all placed on one broker"
    mine, other = by_node[1], by_node[2]
    committed = wire.request(*_at(first), ApiKey.OFFSET_COMMIT, 8, OffsetCommitRequest(
        group_id=mine, member_id="", topics=[OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequestPartition(partition_index=1, committed_offset=7, committed_metadata="m")])]))
    assert committed.topics[0].partitions[0].error_code == 0
    fetched = wire.request(*_at(first), ApiKey.OFFSET_FETCH, 8, OffsetFetchRequest(groups=[
        OffsetFetchRequestGroup(group_id=mine, topics=None), OffsetFetchRequestGroup(group_id=other, topics=None)]))
    answers = {g.group_id: g for g in fetched.groups}
    assert answers[other].error_code == NOT_COORDINATOR and answers[other].topics == []
    assert answers[mine].error_code == 0
    assert [(t.name, [(p.partition_index, p.committed_offset, p.metadata, p.error_code) for p in t.partitions])
            for t in answers[mine].topics] == [(topic, [(1, 7, "m", 0)])]
