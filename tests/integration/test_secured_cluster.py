"""Issue 24's first "must be shown", with confluent-kafka: three brokers whose only listeners are SASL_SSL
(SCRAM-SHA-256, PEM key and trust stores, the brokers' own traffic over the same listener as the super user
`admin`), the ACL authorizer and super.users. A user without ACLs is refused, allowed once granted; a wrong
password is refused; a plaintext client on the TLS port gets one error and no hang; then the leader of an RF 3
topic is SIGKILLed under an acks=all producer: the producer goes on with the new leader and no acknowledged write
is lost."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from support.certs import make_pki
from support.cluster import Cluster, wait_until
from support.secured import ADMIN, confluent_config, sasl_ssl_overrides, store_users

pytestmark = pytest.mark.slow

ALICE = ("alice", "alice-pw")
TIMEOUT_S = 60
SESSION_TIMEOUT_MS = 4000  # a SIGKILLed broker's leaderships move after this
TOPIC_AUTHORIZATION_FAILED = 29
PLAINTEXT_FAILS_WITHIN_S = 30  # librdkafka's own timeout (10 s) plus a loaded machine


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def cluster(request, zookeeper, pki, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/secured-{uuid.uuid4().hex}"
    store_users(zk_connect, dict([ADMIN, ALICE]))
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("secured"), brokers=3, overrides={
        **sasl_ssl_overrides(pki, authorizer=True), "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "replica.lag.time.max.ms": "3000", "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "3"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    for broker in cluster.brokers.values():  # each learns of the others by its ZooKeeper watch, after "ready"
        admin = _admin(broker.address, pki, *ADMIN)
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, f"broker {broker.broker_id} to know all",
                   TIMEOUT_S)
    return cluster


def _admin(bootstrap: str, pki, user: str, password: str, **extra):
    from confluent_kafka.admin import AdminClient

    return AdminClient(confluent_config(bootstrap, pki, user, password, **extra))


def create_topic(cluster, pki, partitions: int = 1, **config) -> str:
    from confluent_kafka.admin import NewTopic

    topic = f"sec-{uuid.uuid4().hex[:8]}"
    admin = _admin(cluster.bootstrap, pki, *ADMIN)
    admin.create_topics([NewTopic(topic, partitions, 3, config=config)])[topic].result(TIMEOUT_S)
    wait_until(lambda: all(p.leader > 0 and len(p.isrs) == 3 for p in
                           admin.list_topics(topic, timeout=10).topics[topic].partitions.values()),
               f"{topic}'s replicas in sync", TIMEOUT_S)
    return topic


def grant(cluster, pki, topic: str, group: str, user: str = ALICE[0]) -> None:
    """`user` may write and read `topic` and read `group`, created by the super user; every broker sees it."""
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)

    principal = f"User:{user}"
    bindings = [AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op,
                           AclPermissionType.ALLOW) for op in (AclOperation.WRITE, AclOperation.READ)]
    bindings.append(AclBinding(ResourceType.GROUP, group, ResourcePatternType.LITERAL, principal, "*",
                               AclOperation.READ, AclPermissionType.ALLOW))
    admin = _admin(cluster.bootstrap, pki, *ADMIN)  # held: a dropped handle fails its futures (_DESTROY)
    for future in admin.create_acls(bindings).values():
        future.result(TIMEOUT_S)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    for broker in cluster.brokers.values():  # each broker learns of the change by its notification
        admin = _admin(broker.address, pki, *ADMIN)
        wait_until(lambda: len(admin.describe_acls(every).result(TIMEOUT_S)) >= len(bindings),
                   f"broker {broker.broker_id} seeing the ACLs", TIMEOUT_S)


def produce(cluster, pki, user, password, topic, values) -> tuple[list[bytes], list[int]]:
    """(values acknowledged, error codes of the others)."""
    from confluent_kafka import Producer

    acked, failed = [], []
    producer = Producer(confluent_config(cluster.bootstrap, pki, user, password, acks="all",
                                         **{"message.timeout.ms": 20000}))
    for value in values:
        producer.produce(topic, value, on_delivery=lambda err, msg: failed.append(err.code()) if err
                         else acked.append(msg.value()))
    producer.flush(TIMEOUT_S)
    return acked, failed


def read_all(cluster, pki, topic: str, partitions: int, group: str, user=ALICE) -> list[bytes]:
    """Every value of `topic`, from offset 0 of each partition to its high watermark, as `user`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(confluent_config(cluster.bootstrap, pki, *user, **{
        "group.id": group, "enable.auto.commit": False, "enable.partition.eof": True}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, ended = [], set()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(ended) < partitions and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is None:
                values.append(message.value())
            elif message.error().code() == -191:  # _PARTITION_EOF: at the high watermark
                ended.add(message.partition())
            else:
                raise AssertionError(f"reading {topic}: {message.error()}")
    finally:
        consumer.close()
    assert len(ended) == partitions, f"read {len(values)} values, reached the end of {sorted(ended)}"
    return values


def test_a_user_without_acls_is_refused_and_allowed_once_granted(cluster, pki):
    topic, group = create_topic(cluster, pki), f"g-{uuid.uuid4().hex[:6]}"
    acked, failed = produce(cluster, pki, *ALICE, topic, [b"refused"])
    assert acked == [] and failed == [TOPIC_AUTHORIZATION_FAILED]
    grant(cluster, pki, topic, group)
    acked, failed = produce(cluster, pki, *ALICE, topic, [b"v%d" % i for i in range(20)])
    assert failed == [] and len(acked) == 20
    assert sorted(read_all(cluster, pki, topic, 1, group)) == sorted(b"v%d" % i for i in range(20))


def test_a_wrong_password_is_refused_and_the_cluster_serves_on(cluster, pki):
    from confluent_kafka import KafkaException

    errors: list = []
    wrong = _admin(cluster.bootstrap, pki, ALICE[0], "not-alice-pw", error_cb=errors.append)
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=10)
    wait_until(lambda: wrong.poll(0.5) is not None and errors, "an error callback", TIMEOUT_S)
    assert "uthentication" in " ".join(str(e) for e in errors)
    assert len(_admin(cluster.bootstrap, pki, *ALICE).list_topics(timeout=TIMEOUT_S).brokers) == 3


def test_a_plaintext_client_is_shut_out_with_one_error_and_no_hang(cluster, pki):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    started = time.monotonic()
    plaintext = AdminClient({"bootstrap.servers": cluster.bootstrap, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        plaintext.list_topics(timeout=10)
    assert time.monotonic() - started < PLAINTEXT_FAILS_WITHIN_S
    wait_until(lambda: plaintext.poll(0.5) is not None and errors, "an error callback", TIMEOUT_S)
    assert len(_admin(cluster.bootstrap, pki, *ALICE).list_topics(timeout=TIMEOUT_S).brokers) == 3


def test_sigkill_of_the_leader_under_acks_all_loses_no_acknowledged_write(cluster, pki):
    """RF 3, min.insync.replicas=2, alice's acks=all producer (retries, no idempotence) writing steadily; the
    leader is SIGKILLed; the controller elects a follower from the ISR; the producer goes on with it. Every
    acknowledged value is then read back (a retry's second copy is legal without idempotence, not counted)."""
    from confluent_kafka import Producer

    topic, group = create_topic(cluster, pki, **{"min.insync.replicas": "2"}), f"g-{uuid.uuid4().hex[:6]}"
    grant(cluster, pki, topic, group)
    admin = _admin(cluster.bootstrap, pki, *ADMIN)
    acked, errors, stop = [], [], threading.Event()

    def produce_steadily():
        producer = Producer(confluent_config(cluster.bootstrap, pki, *ALICE, acks="all", **{
            "linger.ms": 2, "retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 60_000,
            "enable.idempotence": False}))
        i = 0
        while not stop.is_set():
            producer.produce(topic, b"v%d" % i, on_delivery=lambda err, msg: errors.append(err.name()) if err
                             else acked.append(msg.value()))
            producer.poll(0.005)
            i += 1
        producer.flush(TIMEOUT_S)

    writer = threading.Thread(target=produce_steadily)
    writer.start()
    try:
        wait_until(lambda: len(acked) > 50, "acknowledged writes", TIMEOUT_S)
        leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
        cluster.brokers[leader].kill()
        survivor = _admin(next(b.address for b in cluster.brokers.values() if b.running), pki, *ADMIN)

        def new_leader():
            found = survivor.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
            return found if found not in (leader, -1) else None
        successor = wait_until(new_leader, "a new leader", SESSION_TIMEOUT_MS / 1000 + TIMEOUT_S)
        before = len(acked)
        wait_until(lambda: len(acked) > before + 50, f"acknowledged writes on the new leader {successor}", TIMEOUT_S)
    finally:
        stop.set()
        writer.join(TIMEOUT_S + 30)
    assert errors == []
    read = set(read_all(cluster, pki, topic, 1, group))
    lost = [value for value in acked if value not in read]
    assert not lost and len(acked) > 100, f"{len(lost)} acknowledged values lost, e.g. {lost[:5]}"
