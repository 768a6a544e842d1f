"""The admin apis around offsets that real clients call, against two real broker processes and a real
ZooKeeper: OffsetDelete (kafka-python's `delete_group_offsets`, `sparklog groups delete-offsets`), ListOffsets
advertised up to v6 (kafka-python's `list_partition_offsets`, confluent-kafka's `list_offsets` with every spec),
DescribeConfigs right after CreateTopics at every broker, DescribeLogDirs, DescribeProducers and
ListPartitionReassignments (kafka-python),
and ElectLeaders (confluent-kafka and kafka-python) after a broker restart moved a leadership away. The
cluster does not move leaderships back by itself (auto.leader.rebalance.enable=false), so that the election is
the client's."""

from __future__ import annotations

import contextlib
import io
import re
import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from kafka import TopicPartition as KTP
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic, OffsetSpec
from kafka.errors import GroupIdNotFoundError
from kafka.structs import OffsetAndMetadata

from support import broker_matrix
from support.cluster import Cluster

TIMEOUT_S = 40


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/admin-offsets-{uuid.uuid4().hex}"
    c = Cluster(zk_connect, tmp_path_factory.mktemp("admin-offsets"), brokers=2, overrides={
        "num.partitions": "2", "log.flush.interval.ms": "20", "group.initial.rebalance.delay.ms": "100",
        "group.min.session.timeout.ms": "1000", "auto.leader.rebalance.enable": "false"})
    request.addfinalizer(c.stop)
    c.start()
    return c


@pytest.fixture
def admin(cluster):
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    yield client
    client.close()


def new_topics(admin, *names, partitions=2, configs=None) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    topics = [f"{name}-{tag}" for name in names]
    admin.create_topics([NewTopic(t, partitions, 1, topic_configs=configs or {}) for t in topics])
    return topics


def wait_until(what: str, predicate, timeout: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def sparklog_here(*args: str) -> tuple[int, str, str]:
    """The `sparklog` command's main in this process: (exit status, stdout, stderr)."""
    from sparklog.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def rows_of(out: str) -> list[list[str]]:
    """The rows under the header line of Kafka-shaped column output (cells two or more spaces apart)."""
    return [re.split(r"\s{2,}", line.strip()) for line in out.splitlines()[1:] if line.strip()]


def committed_over_the_protocol(cluster, group: str) -> dict[tuple[str, int], int]:
    from sparklog.client.kafka_groups import KafkaGroupAdmin

    with KafkaGroupAdmin(cluster.bootstrap) as groups:
        return groups.committed_offsets(group)


def commit(admin, group, offsets: dict[tuple[str, int], int]) -> None:
    """A member-less commit (the group has no members), kafka-python's alter_group_offsets, asked again while
    the answer is retriable (the offsets topic is created and loaded on first use; kafka-python does not retry)."""
    wanted = {KTP(t, p): OffsetAndMetadata(o, "", None) for (t, p), o in offsets.items()}

    def committed():
        result = admin.alter_group_offsets(group, wanted)
        assert all(err.errno == 0 or err.retriable for err in result.values()), result
        return all(err.errno == 0 for err in result.values())

    wait_until(f"a commit of group {group}", committed)


def test_kafka_python_delete_group_offsets_of_an_empty_group(cluster, admin):
    a, b = new_topics(admin, "od-a", "od-b")
    group = f"od-{uuid.uuid4().hex[:6]}"
    commit(admin, group, {(a, 0): 3, (a, 1): 4, (b, 0): 5})
    result = admin.delete_group_offsets(group, [KTP(a, 0), KTP(b, 0), KTP(a, 9), KTP("od-nosuch", 0)])
    assert {(tp.topic, tp.partition): err.__name__ for tp, err in result.items()} == {
        (a, 0): "NoError", (b, 0): "NoError", (a, 9): "UnknownTopicOrPartitionError",
        ("od-nosuch", 0): "UnknownTopicOrPartitionError"}
    assert committed_over_the_protocol(cluster, group) == {(a, 1): 4}
    again = admin.delete_group_offsets(group, [KTP(a, 0)])  # nothing left there: no error, as in Kafka
    assert [err.__name__ for err in again.values()] == ["NoError"]
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_group_offsets(f"never-{uuid.uuid4().hex[:6]}", [KTP(a, 0)])


def test_delete_offsets_of_a_group_with_a_member_spares_the_topics_it_consumes(cluster, admin):
    """GROUP_SUBSCRIBED_TO_TOPIC for the partitions of a topic a live member (librdkafka) subscribes to, per
    partition; another topic's offsets go. The CLI verb says the same, one line per partition, exit 1; once
    the member has left, everything goes."""
    consumed, other = new_topics(admin, "od-consumed", "od-other")
    group = f"odm-{uuid.uuid4().hex[:6]}"
    commit(admin, group, {(consumed, 0): 1, (consumed, 1): 1, (other, 0): 2, (other, 1): 2})
    member = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "session.timeout.ms": 6000,
                       "enable.auto.commit": False})
    try:
        member.subscribe([consumed])
        wait_until("the member's assignment", lambda: member.poll(0.2) is None and member.assignment())
        result = admin.delete_group_offsets(group, [KTP(consumed, 0), KTP(other, 0)])
        assert {tp.topic: err.__name__ for tp, err in result.items()} == {
            consumed: "GroupSubscribedToTopicError", other: "NoError"}
        base = ("groups", "--bootstrap-server", cluster.bootstrap)
        code, out, err = sparklog_here(*base, "delete-offsets", group, "--topic", consumed, "--topic", f"{other}:1")
        assert code == 1, err
        refused = "Error: GROUP_SUBSCRIBED_TO_TOPIC (a member of the group consumes the topic: its offsets cannot " \
                  "be deleted)"
        assert out.splitlines()[0].split() == ["TOPIC", "PARTITION", "STATUS"]
        assert sorted(rows_of(out)) == sorted([[consumed, "0", refused], [consumed, "1", refused],
                                               [other, "1", "Successful"]])
        assert committed_over_the_protocol(cluster, group) == {(consumed, 0): 1, (consumed, 1): 1}
    finally:
        member.close()
    code, out, err = sparklog_here(*base, "delete-offsets", group, "--topic", consumed)
    assert code == 0, err
    assert committed_over_the_protocol(cluster, group) == {}
    code, out, err = sparklog_here(*base, "delete-offsets", f"nobody-{uuid.uuid4().hex[:6]}", "--topic", consumed)
    assert code == 1 and "does not exist" in err and len(err.splitlines()) == 1, err
    code, out, err = sparklog_here(*base, "delete-offsets", group, "--topic", f"{consumed}:x")
    assert code == 2 and "partitions are numbers" in err


def test_list_offsets_every_spec_with_kafka_python_and_confluent_kafka(cluster, admin):
    """Each client negotiates its highest version up to v9, the highest advertised (registry.py: v10 makes
    kafka-python take the broker for Kafka 4.0 and break its users' older api_version pins); both ask the max
    timestamp (-3) and are answered; kafka-python's earliest-local (-4) is the log start and its latest-tiered (-5)
    is -1: there is no tiered storage."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec as ConfluentSpec

    (topic,) = new_topics(admin, "lo", partitions=1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "client.id": "lo-producer"})
    for i, ts in enumerate((1000, 2000, 6000, 9000, 7000)):
        producer.produce(topic, b"v%d" % i, partition=0, timestamp=ts)
    assert producer.flush(TIMEOUT_S) == 0
    del producer
    tp = KTP(topic, 0)
    wait_until("the records visible", lambda: admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 5)
    admin.delete_records({tp: 1})
    asks = {spec: admin.list_partition_offsets({tp: spec})[tp] for spec in (OffsetSpec.LATEST, OffsetSpec.EARLIEST)}
    assert {spec.name: (found.offset, found.timestamp) for spec, found in asks.items()} == {
        "LATEST": (5, -1), "EARLIEST": (1, -1)}
    asks = {spec: admin.list_partition_offsets({tp: spec})[tp]
            for spec in (OffsetSpec.MAX_TIMESTAMP, OffsetSpec.EARLIEST_LOCAL, OffsetSpec.LATEST_TIERED)}
    assert {spec.name: found.offset for spec, found in asks.items()} == {
        "MAX_TIMESTAMP": 3, "EARLIEST_LOCAL": 1, "LATEST_TIERED": -1}
    assert asks[OffsetSpec.MAX_TIMESTAMP].timestamp == 9000
    by_time = admin.list_partition_offsets({tp: 5000})[tp]  # the first record at or after the time
    assert (by_time.offset, by_time.timestamp) == (2, 6000)

    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    ctp = TopicPartition(topic, 0)
    found = {name: confluent.list_offsets({ctp: spec})[ctp].result(TIMEOUT_S) for name, spec in (
        ("earliest", ConfluentSpec.earliest()), ("latest", ConfluentSpec.latest()),
        ("max", ConfluentSpec.max_timestamp()), ("time", ConfluentSpec.for_timestamp(5000)))}
    assert {name: r.offset for name, r in found.items()} == {"earliest": 1, "latest": 5, "max": 3, "time": 2}
    assert found["max"].timestamp == 9000
    served = served_versions(cluster, "ListOffsets")
    assert served["kafka-python"] == {9} and served["confluent-kafka-python"] == {7}, served


def served_versions(cluster, api: str) -> dict[str, set[int]]:
    """{client software: versions of `api` the brokers served it} (client names without their versions)."""
    out: dict[str, set[int]] = {}
    for broker in cluster.brokers.values():
        matrix = broker.api_matrix()
        broker_matrix.record(matrix)
        for client, apis in matrix["served"].items():
            out.setdefault(client.split(" ")[0], set()).update(apis.get(api, ()))
    return out


def test_describe_configs_right_after_create_topics_at_every_broker(cluster, admin):
    """Whichever broker created the topic, each broker answers a DescribeConfigs sent to it at once with the
    topic's configs (it reads the topic from ZooKeeper, not from its own metadata, which may lag)."""
    from sparklog.client.admin import AdminClient as SparklogAdmin
    from sparklog.protocol import ApiKey
    from sparklog.protocol.describe_configs import RESOURCE_TOPIC, DescribeConfigsRequest, DescribeConfigsResource

    with SparklogAdmin(cluster.bootstrap) as wire:
        nodes = sorted(b.node_id for b in wire.metadata([]).brokers)
        assert len(nodes) == 2
        for i in range(3):
            (topic,) = new_topics(admin, f"dc{i}", partitions=1, configs={"retention.ms": str(1000 + i)})
            for node in nodes:
                request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
                    resource_type=RESOURCE_TOPIC, resource_name=topic, configuration_keys=["retention.ms"])])
                (result,) = wire._client.submit(node, ApiKey.DESCRIBE_CONFIGS, 4, request).wait(TIMEOUT_S).results
                assert result.error_code == 0, (node, result)
                assert [(c.name, c.value) for c in result.configs] == [("retention.ms", str(1000 + i))], node
        configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert configs["retention.ms"]["value"] == "1002"


def test_describe_log_dirs_and_producers_with_kafka_python(cluster, admin):
    """kafka-python asks every broker for its log dirs (v4) and each partition's leader for its idempotent
    producers: a confluent-kafka idempotent producer's id, epoch and last sequence, as its delivery reports
    saw them."""
    (topic,) = new_topics(admin, "dld", partitions=2)
    delivered = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    for i in range(6):
        producer.produce(topic, b"x" * 100, partition=i % 2, on_delivery=lambda err, m: delivered.append(err))
        producer.flush(TIMEOUT_S)  # one batch a record: sequences 0, 1, 2 in each partition
    assert delivered == [None] * 6
    del producer
    states = admin.describe_producers([KTP(topic, 0), KTP(topic, 1)])
    rows = [(p.producer_epoch, p.last_sequence, p.coordinator_epoch, p.current_transaction_start_offset)
            for tp in sorted(states) for p in states[tp].active_producers]
    assert rows == [(0, 2, -1, -1), (0, 2, -1, -1)]
    assert len({p.producer_id for s in states.values() for p in s.active_producers}) == 1  # one producer
    by_broker = admin.describe_log_dirs({topic: [0, 1]})
    assert sorted(b["broker"] for b in by_broker) == sorted(cluster.brokers)
    hosted = {}
    for answer in by_broker:
        (log_dir,) = answer["log_dirs"]
        assert log_dir["error_code"] == 0 and log_dir["total_bytes"] > 0, log_dir
        for t in log_dir["topics"]:
            for p in t["partitions"]:
                hosted[(t["name"], p["partition_index"])] = (answer["broker"], p["partition_size"], p["offset_lag"])
    assert sorted(hosted) == [(topic, 0), (topic, 1)]
    assert all(size > 3 * 100 and lag == 0 for _, size, lag in hosted.values()), hosted
    served = served_versions(cluster, "DescribeLogDirs")
    assert served["kafka-python"] == {4}, served
    assert admin.list_partition_reassignments() == {}  # nothing is being moved


def test_confluent_describe_topics_and_cluster(cluster, admin):
    """librdkafka answers both from Metadata (v12, the highest we serve: with the topic's id, KIP-516)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    (topic,) = new_topics(admin, "dt", partitions=2)
    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    described = confluent.describe_topics(TopicCollection([topic]))[topic].result(TIMEOUT_S)
    assert described.name == topic and [p.id for p in described.partitions] == [0, 1]
    assert (described.topic_id.get_most_significant_bits(), described.topic_id.get_least_significant_bits()) != (0, 0)
    assert all(p.leader is not None and p.leader.id in cluster.brokers for p in described.partitions)
    info = confluent.describe_cluster().result(TIMEOUT_S)
    assert sorted(n.id for n in info.nodes) == sorted(cluster.brokers) and info.cluster_id
    del confluent
    assert served_versions(cluster, "Metadata")["confluent-kafka-python"] == {12}


def leader_and_isr(bootstrap: str, topic: str) -> tuple[int, tuple[int, ...]]:
    from confluent_kafka.admin import AdminClient

    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=TIMEOUT_S).topics[topic]
    part = meta.partitions[0] if meta.error is None and 0 in meta.partitions else None
    return (-1, ()) if part is None else (part.leader, tuple(sorted(part.isrs)))


def test_elect_leaders_moves_leadership_back_to_the_preferred_replica(cluster):
    """Runs last in the module (it restarts a broker). confluent-kafka's elect_leaders(PREFERRED) after broker
    2, the preferred leader, was stopped and started again (leadership went to 1 and stays there): the answer
    comes once 2 leads again; asked again, ELECTION_NOT_NEEDED, which kafka-python's elect_leaders accepts."""
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    confluent = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"el-{uuid.uuid4().hex[:6]}"
    confluent.create_topics([NewTopic(topic, 1, replica_assignment=[[2, 1]])])[topic].result(TIMEOUT_S)
    wait_until("leader 2 with both in sync", lambda: leader_and_isr(cluster.bootstrap, topic) == (2, (1, 2)))
    cluster.brokers[2].stop()
    try:
        wait_until("leader 1", lambda: leader_and_isr(cluster.bootstrap, topic)[0] == 1)
    finally:
        cluster.brokers[2].start()
    wait_until("broker 2 back in sync", lambda: leader_and_isr(cluster.bootstrap, topic) == (1, (1, 2)))
    tp = TopicPartition(topic, 0)
    result = confluent.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT_S)
    assert result == {tp: None}, result
    # the answering broker's metadata showed it; another broker's may show it a moment later
    wait_until("leader 2 again", lambda: leader_and_isr(cluster.bootstrap, topic) == (2, (1, 2)))
    again = confluent.elect_leaders(ElectionType.PREFERRED, [tp]).result(TIMEOUT_S)
    assert again[tp].code() == KafkaError.ELECTION_NOT_NEEDED, again
    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        kafka_python.elect_leaders(0, {topic: [0]})  # ELECTION_NOT_NEEDED is not an error to it
    finally:
        kafka_python.close()
    del confluent  # its threads end here, not after the cluster has stopped
    served = served_versions(cluster, "ElectLeaders")
    assert served["kafka-python"] == served["confluent-kafka-python"] == {2}, served
