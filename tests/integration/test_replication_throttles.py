"""Replication throttles on real brokers (issue 25; Kafka's ReplicationQuotaManager and
kafka-reassign-partitions --throttle).

`sparklog topics reassign --plan FILE --throttle R` moves a partition from broker 1 to broker 2 while a
confluent-kafka producer (acks=all) keeps writing: the throttle configs land in ZooKeeper in Kafka's layout,
the new replica's log grows at R (±25%, measured from the files on broker 2's disk over the whole copy),
`--verify` reports the move and removes the throttles once it is done, and every acknowledged record is in
the moved partition. The brokers run with replication.quota.window.num=4 (1 s windows), so the rate's first
burst is 3 windows' worth, not 10.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

RATE = 400_000  # bytes/s
PREFILL_BYTES = 12_000_000
VALUE_BYTES = 1000
WINDOWS = 4
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import started_cluster

    return started_cluster(request, f"{zookeeper.connect_string}/throttle-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("throttle"), 2, 10000,
                           **{"replication.quota.window.num": str(WINDOWS), "auto.create.topics.enable": "false",
                              "log.flush.interval.ms": "20"})


@pytest.fixture(scope="module")
def zk(request, cluster):
    from support.cluster import cluster_zookeeper

    return cluster_zookeeper(request, cluster)


def sparklog(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def log_bytes(cluster, broker: int, topic: str) -> int:
    directory = cluster.brokers[broker].log_dir / f"{topic}-0"
    try:
        return sum(f.stat().st_size for f in directory.iterdir() if f.name.endswith(".log"))
    except FileNotFoundError:
        return 0


class Writer(threading.Thread):
    """acks=all, about 20 records a second, each value its own number; `acked` is what the broker confirmed."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                  "message.timeout.ms": 120000})
        self.topic = topic
        self.acked: set[bytes] = set()
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.add(msg.value()[:16])
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        n = 0
        while not self.stopping.is_set():
            self.producer.produce(self.topic, f"w{n:015d}".encode() + os.urandom(VALUE_BYTES - 16),
                                  on_delivery=self._delivered)
            n += 1
            self.producer.poll(0.05)
        self.producer.flush(120)


def prefill(bootstrap: str, topic: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 20})
    for n in range(PREFILL_BYTES // VALUE_BYTES):
        producer.produce(topic, f"p{n:015d}".encode() + os.urandom(VALUE_BYTES - 16))
        if n % 1000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def read_all(bootstrap: str, topic: str, end: int) -> set[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen, deadline = set(), time.monotonic() + 120
    try:
        position = 0
        while position < end and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                seen.add(msg.value()[:16])
                position = msg.offset() + 1
    finally:
        consumer.close()
    return seen


def test_a_throttled_reassignment_moves_a_partition_at_the_set_rate_and_loses_no_write(cluster, zk, tmp_path):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    from sparklog.coordination import replication_throttles as rt
    from sparklog.coordination.topics import topic_config
    from support.cluster import wait_until

    topic = f"thr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(TIMEOUT_S)
    prefill(cluster.bootstrap, topic)
    copied = log_bytes(cluster, 1, topic)
    writer = Writer(cluster.bootstrap, topic)
    writer.start()
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [2]}]}))
    zk_args = ("topics", "--zookeeper", cluster.zk_connect, "reassign", "--plan", str(plan))
    try:
        done = sparklog(*zk_args, "--throttle", str(RATE))
        started = time.monotonic()
        assert done.returncode == 0, done.stderr
        assert f"throttle limit was set to {RATE} B/s on brokers 1,2" in done.stdout, done.stdout
        config = topic_config(zk, topic)
        assert (config[rt.LEADER_REPLICAS], config[rt.FOLLOWER_REPLICAS]) == ("0:1", "0:2")
        assert rt.broker_config(zk, 1) == rt.broker_config(zk, 2) == {rt.LEADER_RATE: str(RATE),
                                                                      rt.FOLLOWER_RATE: str(RATE)}
        reached = wait_until(lambda: log_bytes(cluster, 2, topic) >= copied and time.monotonic(),
                             "broker 2 to copy the partition", 4 * PREFILL_BYTES / RATE + 60)
        rate = copied / (reached - started)
        assert 0.75 * RATE <= rate <= 1.25 * RATE, f"copied {copied} B in {reached - started:.1f} s: {rate:.0f} B/s"
        verified = []
        try:
            wait_until(lambda: verified.append(sparklog(*zk_args, "--verify")) or verified[-1].returncode == 0,
                       "the reassignment to finish", 120)
        finally:
            if verified:
                print(verified[-1].stdout, verified[-1].stderr)
    finally:
        writer.stopping.set()
        writer.join(180)
    assert topic_config(zk, topic).keys().isdisjoint({rt.LEADER_REPLICAS, rt.FOLLOWER_REPLICAS})
    assert rt.broker_config(zk, 1) == rt.broker_config(zk, 2) == {}
    assert not writer.errors, writer.errors[:3]
    assert len(writer.acked) > 50, len(writer.acked)
    end = admin.list_offsets({TopicPartition(topic, 0): _latest()})[TopicPartition(topic, 0)].result(TIMEOUT_S)
    missing = writer.acked - read_all(cluster.bootstrap, topic, end.offset)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
    print(f"throttled move: {copied} B in {reached - started:.1f} s = {rate:.0f} B/s (set {RATE}); "
          f"{len(writer.acked)} acknowledged writes, none lost")


def _latest():
    from confluent_kafka.admin import OffsetSpec

    return OffsetSpec.latest()


def test_alter_partition_reassignments_from_kafka_python_moves_a_partition_under_load(cluster):
    """confluent-kafka 2.16's AdminClient has no alter_partition_reassignments; kafka-python's sends
    AlterPartitionReassignments v0: the partition moves from broker 1 to broker 2 while an acks=all producer
    writes, ListPartitionReassignments shows it moving, and no acknowledged record is lost. A cancellation of a
    partition no longer moving is NO_REASSIGNMENT_IN_PROGRESS."""
    from confluent_kafka import TopicPartition as Tp
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoReassignmentInProgressError

    from support.cluster import wait_until

    topic = f"apr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1]])])[topic].result(TIMEOUT_S)
    writer = Writer(cluster.bootstrap, topic)
    writer.start()
    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    try:
        wait_until(lambda: len(writer.acked) > 20, "writes before the move", TIMEOUT_S)
        assert kafka_python.alter_partition_reassignments({tp: [2]}) == {tp: None}
        wait_until(lambda: admin.list_topics(topic).topics[topic].partitions[0].replicas == [2],
                   "the partition to move to broker 2", 120)
        wait_until(lambda: kafka_python.list_partition_reassignments() == {}, "nothing moving any more", 60)
        acked_after_move = len(writer.acked)
        wait_until(lambda: len(writer.acked) > acked_after_move + 20, "writes after the move", 60)
        assert kafka_python.alter_partition_reassignments({tp: None}) == {tp: NoReassignmentInProgressError}
    finally:
        writer.stopping.set()
        writer.join(180)
        kafka_python.close()
    assert not writer.errors, writer.errors[:3]
    end = admin.list_offsets({Tp(topic, 0): _latest()})[Tp(topic, 0)].result(TIMEOUT_S)
    missing = writer.acked - read_all(cluster.bootstrap, topic, end.offset)
    assert not missing, f"{len(missing)} acknowledged records lost, e.g. {sorted(missing)[:3]}"
    print(f"AlterPartitionReassignments move: {len(writer.acked)} acknowledged writes, none lost")


def test_groups_describe_shows_each_member_s_client_quota(cluster):
    """A confluent-kafka member of a group with client.id "quoted": after `sparklog configs --alter` sets its
    consumer_byte_rate (and a default request_percentage), `sparklog groups describe --members` shows both in
    its QUOTA column; the other member's client-id gets the default alone."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    from integration.test_kafka_groups import columns
    from support.cluster import wait_until

    topic, group = f"gq-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    quoted = f"quoted-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(TIMEOUT_S)
    configs = ("configs", "--bootstrap-server", cluster.bootstrap, "--entity-type", "clients")
    for args in (("--entity-name", quoted, "--alter", "--add-config", "consumer_byte_rate=2097152"),
                 ("--entity-default", "--alter", "--add-config", "request_percentage=50")):
        done = sparklog(*configs, *args)
        assert done.returncode == 0, done.stderr
    members = [Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "client.id": client,
                         "session.timeout.ms": 10000}) for client in (quoted, "plain")]
    try:
        for member in members:
            member.subscribe([topic])

        def described():
            for member in members:
                member.poll(0.2)
            done = sparklog("groups", "--bootstrap-server", cluster.bootstrap, "describe", group, "--members")
            rows = columns(done.stdout, "GROUP") if done.returncode == 0 and "CLIENT-ID" in done.stdout else []
            return {r["CLIENT-ID"]: r["QUOTA"] for r in rows} if len(rows) == 2 else None

        quotas = wait_until(described, "both members in the group", 60)
    finally:
        for member in members:
            member.close()
        sparklog(*configs, "--entity-default", "--alter", "--delete-config", "request_percentage")
    assert quotas == {quoted: "consumer_byte_rate=2097152,request_percentage=50", "plain": "request_percentage=50"}


def test_in_sync_replicas_of_a_throttled_partition_are_never_held_back(cluster, zk):
    """Both lists "*" and both rates at 10000 B/s on both brokers, on a partition whose two replicas are in
    sync: 600 kB of acks=all writes are acknowledged in well under the minute the throttle would take (an
    in-sync follower is exempt on both sides, so the high watermark keeps up) and the ISR stays whole."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from integration.test_admin_offsets_apis import leader_and_isr
    from sparklog.coordination import replication_throttles as rt
    from sparklog.coordination.topics import set_topic_config
    from support.cluster import wait_until

    topic = f"isr-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]])])[topic].result(TIMEOUT_S)
    wait_until(lambda: leader_and_isr(cluster.bootstrap, topic) == (1, (1, 2)), "both replicas in sync", 60)
    set_topic_config(zk, topic, {rt.LEADER_REPLICAS: "*", rt.FOLLOWER_REPLICAS: "*"})
    for broker in (1, 2):
        rt.alter_broker_config(zk, broker, {rt.LEADER_RATE: "10000", rt.FOLLOWER_RATE: "10000"})
    time.sleep(1)  # the brokers' watches
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    acked, isrs = [], set()
    try:
        started = time.monotonic()
        for n in range(600):
            producer.produce(topic, os.urandom(VALUE_BYTES), on_delivery=lambda err, msg: acked.append(err))
            producer.poll(0.005)
            if n % 100 == 0:
                isrs.add(leader_and_isr(cluster.bootstrap, topic))
        left = producer.flush(90)
        elapsed = time.monotonic() - started
        isrs.add(leader_and_isr(cluster.bootstrap, topic))
    finally:
        rt.clear_throttles(zk, [topic], (1, 2))
    assert left == 0 and acked == [None] * 600, f"{left} unacknowledged, errors {[e for e in acked if e][:3]}"
    assert elapsed < 20, f"600 kB took {elapsed:.1f} s to acknowledge: held to the 10000 B/s throttle"
    assert isrs == {(1, (1, 2))}, isrs
    print(f"in-sync under a 10000 B/s throttle: 600 kB acknowledged (acks=all) in {elapsed:.1f} s, ISR {isrs}")
