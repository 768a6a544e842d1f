"""TLS to ZooKeeper (issue 24): a ZooKeeper serving a TLS client port that requires client certificates, a broker
with `zookeeper.ssl.*` (Kafka's names, PEM stores) and `zookeeper.set.acl=true` whose certificate is its
ZooKeeper identity (`x509:<subject>`). A client on the plaintext port, or with another certificate, reads what is
world-readable and cannot write the brokers' znodes nor read the credentials; the broker serves produce and
consume; a store of a type sparklog does not read stops the broker with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from kazoo.exceptions import NoAuthError

from sparklog.coordination.connection import close, connect
from sparklog.coordination.zookeeper_security import NETTY_SOCKET, ZooKeeperSecurity, ZooKeeperTls
from sparklog.coordination.zookeeper_server import EmbeddedZooKeeper, ServerTls
from support.certs import make_pki
from support.cluster import Cluster

BROKER_SUBJECT = "CN=kafka-broker,O=sparklog"


def zookeeper_tls_overrides(pki, bundle) -> dict:
    return {"zookeeper.set.acl": "true", "zookeeper.ssl.client.enable": "true",
            "zookeeper.clientCnxnSocket": NETTY_SOCKET, "zookeeper.ssl.keystore.location": str(bundle.keystore),
            "zookeeper.ssl.keystore.type": "PEM", "zookeeper.ssl.truststore.location": str(pki.ca),
            "zookeeper.ssl.truststore.type": "PEM", "offsets.topic.replication.factor": "1"}


@pytest.fixture(scope="module")
def tls_cluster(request, tmp_path_factory):
    env = pytest.MonkeyPatch()
    request.addfinalizer(env.undo)
    env.delenv("KAFKA_OPTS", raising=False)  # the certificate alone is the login here
    base = tmp_path_factory.mktemp("zktls")
    pki = make_pki(base / "pki")
    server = EmbeddedZooKeeper(tls=ServerTls(str(pki.broker.keystore), str(pki.ca)))
    request.addfinalizer(server.stop)
    server.start()
    chroot = f"/tls-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(server.secure_connect_string + chroot, base / "cluster", brokers=1,
                      overrides=zookeeper_tls_overrides(pki, pki.client(BROKER_SUBJECT)))
    request.addfinalizer(cluster.stop)
    cluster.start()
    return pki, server, chroot, cluster


@pytest.fixture
def plaintext_client(request, tls_cluster):
    _, server, chroot, _ = tls_cluster
    client = connect(server.connect_string + chroot, security=ZooKeeperSecurity())
    request.addfinalizer(lambda: close(client))
    return client


def test_the_broker_serves_produce_and_consume(tls_cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster, topic = tls_cluster[3], f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    producer.produce(topic, b"over tls")
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    message = None
    for _ in range(60):
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            break
    consumer.close()
    assert message is not None and message.value() == b"over tls"


def test_the_brokers_znodes_belong_to_its_certificate(tls_cluster, plaintext_client):
    owners = {(acl.id.scheme, acl.id.id, acl.perms) for acl in plaintext_client.get_acls("/brokers/ids")[0]}
    assert owners == {("x509", BROKER_SUBJECT, 31), ("world", "anyone", 1)}


def test_a_plaintext_client_reads_but_cannot_write(tls_cluster, plaintext_client):
    assert plaintext_client.get_children("/brokers/ids") == ["1"]
    for act in (lambda: plaintext_client.create("/brokers/ids/99", b"{}"),
                lambda: plaintext_client.delete("/brokers/ids/1"),
                lambda: plaintext_client.create("/kafka-acl/Topic", b""),
                lambda: plaintext_client.get_children("/config/users"),
                lambda: plaintext_client.create("/config/users/mallory", b"{}")):
        with pytest.raises(NoAuthError):
            act()


def test_another_certificate_cannot_write_either(tls_cluster):
    pki, server, chroot, _ = tls_cluster
    mallory = pki.client("CN=mallory,O=sparklog")
    tls = ZooKeeperTls(str(pki.ca), str(mallory.keystore))
    client = connect(server.secure_connect_string + chroot, security=ZooKeeperSecurity(set_acl=True, tls=tls))
    try:
        assert client.get_children("/brokers/ids") == ["1"]
        with pytest.raises(NoAuthError):
            client.create("/brokers/ids/98", b"{}")
        with pytest.raises(NoAuthError):
            client.get_children("/config/users")
    finally:
        close(client)


def test_a_store_type_sparklog_does_not_read_stops_the_broker_with_one_line(tls_cluster, tmp_path):
    pki, server, chroot, _ = tls_cluster
    overrides = {**zookeeper_tls_overrides(pki, pki.broker), "zookeeper.ssl.keystore.type": "JKS"}
    done = subprocess.run([sys.executable, "-m", "sparklog.cli", "broker", "start", "--id", "2", "--port", "0",
                           "--log-dir", str(tmp_path / "logs"), "--zookeeper", server.secure_connect_string + chroot,
                           *sum((["--override", f"{k}={v}"] for k, v in overrides.items()), [])],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["error: zookeeper.ssl.keystore.type=JKS: only PEM stores are read"]


def test_a_tool_takes_tls_from_kafka_opts_and_writes_as_the_brokers_certificate(tls_cluster, plaintext_client):
    pki, server, chroot, _ = tls_cluster
    broker = pki.client(BROKER_SUBJECT)
    opts = (f"-Dzookeeper.client.secure=true -Dzookeeper.clientCnxnSocket={NETTY_SOCKET} "
            f"-Dzookeeper.ssl.keyStore.location={broker.keystore} -Dzookeeper.ssl.trustStore.location={pki.ca}")
    done = subprocess.run([sys.executable, "-m", "sparklog.cli", "configs", "--zookeeper",
                           server.secure_connect_string + chroot, "--alter", "--entity-type", "users",
                           "--entity-name", "alice", "--add-config", "SCRAM-SHA-256=[password=alice-pw]"],
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, KAFKA_OPTS=opts))
    assert done.returncode == 0, done.stderr
    with pytest.raises(NoAuthError):
        plaintext_client.get("/config/users/alice")
    as_broker = connect(server.secure_connect_string + chroot,
                        security=ZooKeeperSecurity(tls=ZooKeeperTls(str(pki.ca), str(broker.keystore))))
    try:
        assert b"SCRAM-SHA-256" in as_broker.get("/config/users/alice")[0]
        owners = {(acl.id.scheme, acl.id.id) for acl in as_broker.get_acls("/config/users/alice")[0]}
        assert owners == {("x509", BROKER_SUBJECT)}
    finally:
        close(as_broker)
