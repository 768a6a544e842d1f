"""Topic ids (KIP-516) across real brokers: confluent-kafka's describe_topics shows the id ZooKeeper holds and
every replica's `partition.metadata` holds; it survives a restart of every broker; a re-created topic gets a
new one; a topic created before topic ids gets its id once and keeps its data; Metadata v12 by id answers the
topic, or UNKNOWN_TOPIC_ID."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.replication.partition_metadata import read
from sparklog.coordination import topic_ids
from sparklog.coordination import topics as registry
from sparklog.protocol import ApiKey, MetadataRequest, MetadataRequestTopic
from support.cluster import cluster_zookeeper, started_cluster, wait_until
from support.wire import request

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
UNKNOWN_TOPIC_ID = 100


@pytest.fixture(scope="module")
def two(request, zookeeper, tmp_path_factory):
    return started_cluster(request, f"{zookeeper.connect_string}/topic-ids-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("topic-ids"), 2, 6000, **{"log.flush.interval.ms": "20"})


@pytest.fixture(scope="module")
def zk(request, two):
    return cluster_zookeeper(request, two)


def described_id(cluster, topic: str) -> str:
    """The topic id confluent-kafka's AdminClient.describe_topics reports (librdkafka's Metadata v10+)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=30)[topic]
    found = future.result(timeout=TIMEOUT_S).topic_id  # str() of it is standard base64, not Kafka's URL-safe form
    bits = (found.get_most_significant_bits() % (1 << 64)) << 64 | found.get_least_significant_bits() % (1 << 64)
    return topic_ids.to_string(uuid.UUID(int=bits))


def ids_served(cluster, topic: str) -> dict[int, str]:
    """{broker id: the topic id its Metadata v12 answers}, every running broker asked."""
    body = MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    return {b.broker_id: topic_ids.to_string(request(b.host, b.port, ApiKey.METADATA, 12, body).topics[0].topic_id)
            for b in cluster.brokers.values() if b.running}


def wait_described(cluster, topic: str, wanted: str, what: str) -> None:
    seen: list[str] = []

    def described() -> bool:
        seen.append(described_id(cluster, topic))
        return seen[-1] == wanted
    try:
        wait_until(described, what, TIMEOUT_S)
    except AssertionError:
        raise AssertionError(f"{what}: wanted {wanted}, confluent saw {sorted(set(seen))}, "
                             f"the brokers serve {ids_served(cluster, topic)}") from None


def create(cluster, topic: str, partitions: int = 2, replication: int = 2) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(timeout=TIMEOUT_S)


def delete(cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=TIMEOUT_S)


def replica_ids(cluster, topic: str, partitions: int) -> set[str | None]:
    return {read(str(b.log_dir / f"{topic}-{p}")) for b in cluster.brokers.values() for p in range(partitions)}


def produce(cluster, topic: str, n: int) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(TIMEOUT_S) == 0


def test_the_id_is_shown_by_confluent_kept_across_a_restart_of_every_broker_and_new_on_recreation(two, zk):
    create(two, "lives")
    first = registry.topic_id(zk, "lives")
    assert topic_ids.to_uuid(first) != topic_ids.ZERO
    wait_described(two, "lives", first, "describe_topics to show the registry's id")
    wait_until(lambda: replica_ids(two, "lives", 2) == {first}, "every replica's partition.metadata", TIMEOUT_S)

    for broker in two.brokers.values():
        broker.stop()
    for broker in two.brokers.values():
        broker.start()
    assert registry.topic_id(zk, "lives") == first
    wait_described(two, "lives", first, "the same id after every broker restarted")
    assert replica_ids(two, "lives", 2) == {first}

    delete(two, "lives")
    wait_until(lambda: registry.topic_id(zk, "lives") is None, "the deletion", TIMEOUT_S)
    create(two, "lives")
    second = registry.topic_id(zk, "lives")
    assert second not in (None, first)
    try:
        wait_until(lambda: set(ids_served(two, "lives").values()) == {second}, "every broker to serve the new id",
                   TIMEOUT_S)
    except AssertionError:
        raise AssertionError(f"new id {second}, old {first}, served {ids_served(two, 'lives')}") from None
    wait_described(two, "lives", second, "describe_topics to show the new id")
    wait_until(lambda: replica_ids(two, "lives", 2) == {second}, "fresh logs with the new id", TIMEOUT_S)


def test_metadata_v12_by_id_answers_the_topic_or_unknown_topic_id(two, zk):
    create(two, "byid", partitions=3)
    known = topic_ids.to_uuid(registry.topic_id(zk, "byid"))
    unknown = topic_ids.to_uuid(topic_ids.new_topic_id())
    broker = two.brokers[1]
    body = MetadataRequest(topics=[MetadataRequestTopic(name=None, topic_id=known),
                                   MetadataRequestTopic(name=None, topic_id=unknown)],
                           allow_auto_topic_creation=True)

    def answered():
        found, missing = request(broker.host, broker.port, ApiKey.METADATA, 12, body).topics
        return (found.name, found.topic_id, found.error_code, len(found.partitions),
                missing.name, missing.topic_id, missing.error_code)
    wait_until(lambda: answered() == ("byid", known, 0, 3, None, unknown, UNKNOWN_TOPIC_ID),
               "Metadata v12 by id", TIMEOUT_S)


def test_a_topic_created_before_topic_ids_gets_its_id_once_and_keeps_its_log(two, zk):
    old = {"version": 2, "partitions": {"0": [1, 2]}, "adding_replicas": {}, "removing_replicas": {}}
    state = {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1, 2]}
    txn = zk.transaction()  # as an earlier release's create_topic wrote it: one multi
    txn.create("/brokers/topics/legacy", json.dumps(old).encode())
    txn.create("/brokers/topics/legacy/partitions")
    txn.create("/brokers/topics/legacy/partitions/0")
    txn.create("/brokers/topics/legacy/partitions/0/state", json.dumps(state).encode())
    txn.create("/config/topics/legacy", json.dumps({"version": 1, "config": {}}).encode())
    assert all(result is not None and not isinstance(result, Exception) for result in txn.commit())
    derived = topic_ids.from_czxid(zk.exists("/brokers/topics/legacy").czxid)
    wait_until(lambda: replica_ids(two, "legacy", 1) == {derived}, "the legacy topic's logs", TIMEOUT_S)
    produce(two, "legacy", 5)

    for broker in two.brokers.values():  # a new controller migrates it
        broker.stop()
    for broker in two.brokers.values():
        broker.start()
    wait_until(lambda: json.loads(zk.get("/brokers/topics/legacy")[0]).get("topic_id") == derived,
               "the controller to write the id", TIMEOUT_S)
    assert any("assigned topic ids to 1 topics created before topic ids: legacy" in b.tail(1_000_000)
               for b in two.brokers.values())
    assert replica_ids(two, "legacy", 1) == {derived}
    assert not any("belongs to an earlier topic legacy" in b.tail(1_000_000) for b in two.brokers.values())
    wait_described(two, "legacy", derived, "describe_topics to show the id")
