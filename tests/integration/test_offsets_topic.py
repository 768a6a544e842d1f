"""Kafka-group offsets in `__consumer_offsets`, under real brokers and real clients: the topic is created on
the first FindCoordinator (replication reduced to the live brokers), internal (flagged in Metadata, not
producible, not deletable, not grown, no records deleted), compacted (many commits of one key leave the last), written in Kafka's record
format, and the committed offsets survive a restart of every broker (the cache is rebuilt from the log).
The coordinator failover with consuming members is in test_kafka_groups.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import InvalidRequestError
from kafka.structs import OffsetAndMetadata

from support.cluster import TEST_OFFSETS_TOPIC_PARTITIONS, Cluster, wait_until
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, offsets_partition
from sparklog.protocol.consumer_offsets import CommitKey, decode_key, decode_value

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
# The cleaner thread runs at nice 19 (storage/cleaner_manager.py Rule: cleaner-io-throttled): on cores busy with
# normal-priority work it gets about 1/70 of a core, so a clean that takes milliseconds on idle cores can take tens of seconds.
CLEANER_TIMEOUT_S = 120
REPO = Path(__file__).resolve().parents[2]
COMMITS = 300
TOPIC, TOPIC_PARTITIONS = "events", 3  # the commits' topic (OffsetCommit refuses a partition the cluster lacks)


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    c = Cluster(f"{zookeeper.connect_string}/offsets-{uuid.uuid4().hex}", tmp_path_factory.mktemp("offsets"),
                brokers=2, overrides={
                    "log.flush.interval.ms": "20", "offsets.topic.segment.bytes": "4096",
                    "log.cleaner.backoff.ms": "100", "log.cleaner.min.cleanable.ratio": "0.01"})
    request.addfinalizer(c.stop)
    c.start()
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, TOPIC_PARTITIONS, 1)])
    finally:
        admin.close()
    for broker in c.brokers.values():  # a commit of a partition the coordinator does not know is refused
        wait_until(lambda: knows_topic(broker.address), f"{TOPIC} in broker {broker.address}'s metadata", TIMEOUT_S)
    return c


def knows_topic(address: str) -> bool:
    metadata = KafkaConsumer(bootstrap_servers=address)
    try:
        return metadata.partitions_for_topic(TOPIC) == set(range(TOPIC_PARTITIONS))
    finally:
        metadata.close()


def consumer(cluster, group: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=cluster.bootstrap, group_id=group, enable_auto_commit=False)


def commit(cluster, group: str, offsets: dict[int, int], topic: str = TOPIC) -> None:
    """A member-less commit (kafka-python's assign() + commit())."""
    c = consumer(cluster, group)
    try:
        c.assign([TopicPartition(topic, p) for p in offsets])
        c.commit({TopicPartition(topic, p): OffsetAndMetadata(o, f"m{o}", -1) for p, o in offsets.items()})
    finally:
        c.close()


def committed(cluster, group: str, partitions, topic: str = TOPIC) -> dict[int, int | None]:
    c = consumer(cluster, group)
    try:
        return {p: c.committed(TopicPartition(topic, p)) for p in partitions}
    finally:
        c.close()


def offsets_records(cluster, partition: int) -> list:
    """Every record of one offsets partition, read by a Kafka client from the start (internal topics are
    readable), as (log offset, key, value) decoded with Kafka's schema."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}",
                       "enable.auto.commit": False, "enable.partition.eof": True})
    reader.assign([CTopicPartition(OFFSETS_TOPIC, partition, OFFSET_BEGINNING)])
    found, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == msg.error()._PARTITION_EOF:
                    return found
                raise AssertionError(msg.error())
            value = None if msg.value() is None else decode_value(msg.value())
            found.append((msg.offset(), decode_key(msg.key()), value))
    finally:
        reader.close()
    raise AssertionError("the offsets partition was not read to its end")


def test_the_offsets_topic_is_created_on_demand_internal_and_replicated_over_the_live_brokers(cluster):
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit(cluster, group, {0: 5})  # FindCoordinator creates the topic
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (described,) = admin.describe_topics([OFFSETS_TOPIC])
        assert described["is_internal"] is True and described["error_code"] == 0
        assert len(described["partitions"]) == TEST_OFFSETS_TOPIC_PARTITIONS
        assert all(len(p["replica_nodes"]) == 2 for p in described["partitions"])  # 3 wanted, 2 live: reduced
        with pytest.raises(InvalidRequestError):
            admin.delete_topics([OFFSETS_TOPIC])
    finally:
        admin.close()
    assert committed(cluster, group, [0]) == {0: 5}


def test_a_client_cannot_produce_to_the_offsets_topic(cluster):
    from confluent_kafka import Producer

    commit(cluster, f"g-{uuid.uuid4().hex[:8]}", {0: 1})
    outcome = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "retries": 0})
    producer.produce(OFFSETS_TOPIC, key=b"k", value=b"v", partition=0, on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(TIMEOUT_S)
    assert len(outcome) == 1 and outcome[0] is not None and outcome[0].name() == "TOPIC_EXCEPTION"


def test_an_admin_client_can_neither_add_partitions_to_nor_delete_records_of_the_offsets_topic(cluster):
    """Kafka's answers (offsets_topic.py Rule 2): CreatePartitions INVALID_REQUEST (its TopicCommand's
    refusal), DeleteRecords INVALID_TOPIC_EXCEPTION (its ReplicaManager's); the topic and commits stay."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions

    group = f"g-{uuid.uuid4().hex[:8]}"
    commit(cluster, group, {0: 7})
    partition = offsets_partition(group, TEST_OFFSETS_TOPIC_PARTITIONS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    grow = admin.create_partitions([NewPartitions(OFFSETS_TOPIC, TEST_OFFSETS_TOPIC_PARTITIONS + 2)])
    with pytest.raises(KafkaException) as refused:
        grow[OFFSETS_TOPIC].result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.INVALID_REQUEST
    assert "offsets topic cannot be changed" in refused.value.args[0].str()
    (deleted,) = admin.delete_records([CTopicPartition(OFFSETS_TOPIC, partition, 1)]).values()
    with pytest.raises(KafkaException) as refused:
        deleted.result(TIMEOUT_S)
    assert refused.value.args[0].code() == KafkaError.TOPIC_EXCEPTION
    described = admin.list_topics(OFFSETS_TOPIC, timeout=TIMEOUT_S).topics[OFFSETS_TOPIC]
    assert len(described.partitions) == TEST_OFFSETS_TOPIC_PARTITIONS
    assert offsets_records(cluster, partition)[0][0] == 0  # nothing deleted from its start
    assert committed(cluster, group, [0]) == {0: 7}


@pytest.mark.parametrize("args, message", [
    (["alter", OFFSETS_TOPIC, "--partitions", "9"], "the number of partitions for the offsets topic cannot be changed"),
    (["delete", OFFSETS_TOPIC], "is internal"),
])
def test_the_topics_command_neither_grows_nor_deletes_the_offsets_topic(cluster, args, message):
    """`sparklog topics` writes ZooKeeper itself, past the brokers' checks: it refuses as kafka-topics.sh does."""
    commit(cluster, f"g-{uuid.uuid4().hex[:8]}", {0: 3})
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-m", "sparklog.cli", "topics", "--zookeeper", cluster.zk_connect, *args],
                          capture_output=True, timeout=60, cwd=str(REPO), env=env, text=True)
    assert done.returncode == 1 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (described,) = admin.describe_topics([OFFSETS_TOPIC])
        assert len(described["partitions"]) == TEST_OFFSETS_TOPIC_PARTITIONS
    finally:
        admin.close()


def test_many_commits_of_one_key_are_compacted_to_the_last(cluster):
    group = f"g-{uuid.uuid4().hex[:8]}"
    c = consumer(cluster, group)
    try:
        c.assign([TopicPartition(TOPIC, 0)])
        for offset in range(COMMITS):
            c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(offset, "", -1)})
    finally:
        c.close()
    key = CommitKey(group, TOPIC, 0)
    partition = offsets_partition(group, TEST_OFFSETS_TOPIC_PARTITIONS)

    def compacted():
        mine = [(o, v) for o, k, v in offsets_records(cluster, partition) if k == key]
        return mine if len(mine) < COMMITS // 4 else None

    mine = wait_until(compacted, "the cleaner compacting the offsets partition", CLEANER_TIMEOUT_S)
    assert mine[-1][1].offset == COMMITS - 1  # the last commit is kept, in Kafka's value schema
    assert committed(cluster, group, [0]) == {0: COMMITS - 1}


def knows(address: str, topic: str, partitions: int | None) -> bool:
    """The broker at `address` lists `topic` with `partitions` partitions (None: does not list it). All
    topics are asked for: a Metadata request naming a missing topic would create it again."""
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": address}).list_topics(timeout=TIMEOUT_S).topics
    if partitions is None:
        return topic not in listed
    return topic in listed and not listed[topic].error and set(listed[topic].partitions) == set(range(partitions))


def create_and_fill(cluster, admin, topic: str, partitions: int, per_partition: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic as CNewTopic

    admin.create_topics([CNewTopic(topic, partitions, 1)])[topic].result(TIMEOUT_S)
    for broker in cluster.brokers.values():
        wait_until(lambda: knows(broker.address, topic, partitions), f"{topic} in {broker.address}", TIMEOUT_S)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
    assert producer.flush(TIMEOUT_S) == 0


def group_consumer(cluster, group: str, **config):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", **config})


def committed_c(cluster, group: str, topic: str, partitions: int) -> list[int]:
    """The group's committed offsets as confluent-kafka's committed() reports them (-1001: none). NOT_COORDINATOR
    is retried until TIMEOUT_S, as Kafka's clients retry it (a retriable error): librdkafka's committed() returns
    it at once when the broker FindCoordinator named does not yet see itself as the offsets partition's leader,
    which happens right after every broker restarted (seen once in a fresh-clone run at load 2)."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition as CTopicPartition

    deadline = time.monotonic() + TIMEOUT_S
    while True:
        c = group_consumer(cluster, group)
        try:
            return [tp.offset for tp in c.committed([CTopicPartition(topic, p) for p in range(partitions)],
                                                    timeout=TIMEOUT_S)]
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.NOT_COORDINATOR or time.monotonic() > deadline:
                raise
        finally:
            c.close()
        time.sleep(0.5)


def consume_all(cluster, group: str, topic: str, count: int) -> list[tuple[int, int]]:
    """A subscribe() member of `group` reads `count` records; their (partition, offset)s."""
    c = group_consumer(cluster, group)
    got, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        c.subscribe([topic])
        while len(got) < count and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.offset()))
        return sorted(got)
    finally:
        c.close()


def test_a_deleted_topics_offsets_go_with_it_and_stay_gone_after_a_restart_of_every_broker(cluster):
    """Kafka's GroupMetadataManager tombstones the offsets of a deleted topic's partitions: a group does not
    resume a re-created topic at its old offsets (mid-log here), before or after every broker restarts."""
    from confluent_kafka import TopicPartition as CTopicPartition
    from confluent_kafka.admin import AdminClient

    topic, group, parts = f"gone-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}", 2
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create_and_fill(cluster, admin, topic, parts, 6)
    member = group_consumer(cluster, group)
    try:
        member.subscribe([topic])
        read, deadline = 0, time.monotonic() + TIMEOUT_S
        while read < 12 and time.monotonic() < deadline:
            msg = member.poll(0.5)
            read += msg is not None and msg.error() is None
        assert read == 12
        member.commit(offsets=[CTopicPartition(topic, p, 3) for p in range(parts)], asynchronous=False)
    finally:
        member.close()
    assert committed_c(cluster, group, topic, parts) == [3, 3]
    admin.delete_topics([topic])[topic].result(TIMEOUT_S)
    for broker in cluster.brokers.values():
        wait_until(lambda: knows(broker.address, topic, None), f"{topic} gone from {broker.address}", TIMEOUT_S)
    create_and_fill(cluster, admin, topic, parts, 5)
    assert committed_c(cluster, group, topic, parts) == [-1001, -1001]
    other = f"g-{uuid.uuid4().hex[:8]}"  # a group that never committed: the baseline
    assert consume_all(cluster, group, topic, 10) == consume_all(cluster, other, topic, 10) == [
        (p, o) for p in range(parts) for o in range(5)]
    cluster.stop()
    cluster.start()
    assert committed_c(cluster, group, topic, parts) == [-1001, -1001]  # the tombstones are in the log


def test_a_commit_keeps_its_leader_epoch_which_offset_fetch_answers(cluster):
    """OffsetCommit v6+ carries the committed leader epoch (KIP-320): it is written in the record's value and
    OffsetFetch v5+ answers it, as Kafka's does; librdkafka's 0103_transactions compares it."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as CTopicPartition

    group = f"g-{uuid.uuid4().hex[:8]}"
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[CTopicPartition(TOPIC, 0, 42, leader_epoch=7)], asynchronous=False)
        found = c.committed([CTopicPartition(TOPIC, 0), CTopicPartition(TOPIC, 1)], TIMEOUT_S)
    finally:
        c.close()
    assert [(tp.offset, tp.leader_epoch) for tp in found] == [(42, 7), (-1001, None)]
    key = CommitKey(group, TOPIC, 0)
    logged = [v for _, k, v in offsets_records(cluster, offsets_partition(group, TEST_OFFSETS_TOPIC_PARTITIONS))
              if k == key]
    assert [(v.offset, v.leader_epoch) for v in logged] == [(42, 7)]


def test_committed_offsets_survive_a_restart_of_every_broker(cluster):
    """Runs last in the module: the brokers restart, each coordinator reloads its partitions from the log."""
    groups = [f"g-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    for i, group in enumerate(groups):
        commit(cluster, group, {0: 10 + i, 1: 20 + i})
    cluster.stop()
    cluster.start()
    for i, group in enumerate(groups):
        assert committed(cluster, group, [0, 1, 2]) == {0: 10 + i, 1: 20 + i, 2: None}
