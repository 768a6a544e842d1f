"""SASL_PLAINTEXT brokers against real clients (issue 24): confluent-kafka, kafka-python, aiokafka and sparklog's
own, with PLAIN and SCRAM-SHA-256/512; wrong passwords, unknown users, replayed and truncated SCRAM messages,
oversized tokens and a client that never authenticates are each refused while the broker goes on serving the
others; SCRAM credentials stored in ZooKeeper before the broker runs, added while it runs, and through
AlterUserScramCredentials; three brokers replicating over a SASL inter-broker listener."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid

import pytest

from sparklog.coordination.connection import close, connect
from sparklog.coordination.scram_credentials import store_credential
from sparklog.protocol import ApiKey
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from sparklog.protocol.sasl_client import ScramClient
from support.cluster import Cluster, wait_until

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
              'password="admin-pw" user_admin="admin-pw" user_alice="alice-pw";')
SCRAM_JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
              'password="admin-pw";')
USERS = {"PLAIN": ("alice", "alice-pw"), "SCRAM-SHA-256": ("sam", "sam-256-pw"),
         "SCRAM-SHA-512": ("sue", "sue-512-pw")}
MECHANISMS = list(USERS)
DROP_WAIT_S = 40  # the authentication deadline (10 s) plus the reaper's interval, on a loaded machine


def sasl_overrides(inter_broker: str = "PLAIN") -> dict:
    return {"listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": inter_broker,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            "connection.failed.authentication.delay.ms": "100", "offsets.topic.replication.factor": "1"}


def _bootstrap_credentials(zk_connect: str, extra: dict | None = None) -> None:
    """Store the SCRAM users in ZooKeeper before any broker runs (scram_credentials.store_credential)."""
    zk = connect(zk_connect)
    try:
        for mechanism, (user, password) in {**USERS, **(extra or {})}.items():
            if mechanism.startswith("SCRAM"):
                store_credential(zk, user, mechanism.split(":")[0], password, 4096)
    finally:
        close(zk)


@pytest.fixture(scope="module")
def broker(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/sasl-{uuid.uuid4().hex}"
    _bootstrap_credentials(zk_connect)
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("sasl"), brokers=1, overrides=sasl_overrides())
    request.addfinalizer(cluster.stop)
    return cluster.start()


@pytest.fixture(scope="module")
def broker_zk(request, broker):
    client = connect(broker.zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


def confluent_config(broker, mechanism, user, password, **extra) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password, **extra}


def confluent_round_trip(broker, mechanism, user, password) -> list[bytes]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"t-{uuid.uuid4().hex[:8]}"
    producer = Producer(confluent_config(broker, mechanism, user, password, acks="all"))
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer(confluent_config(broker, mechanism, user, password, **{"group.id": "g",
                                                                               "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 5 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append(message.value())
    consumer.close()
    return got


def confluent_refused(broker, mechanism, user, password) -> str:
    """The error confluent-kafka reports for a login the broker refuses."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient(confluent_config(broker, mechanism, user, password, error_cb=errors.append))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=10)
    wait_until(lambda: admin.poll(0.5) is not None and errors, "an error callback", 30)
    return " ".join(str(e) for e in errors)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_produces_and_consumes_with_the_right_password(broker, mechanism):
    assert confluent_round_trip(broker, mechanism, *USERS[mechanism]) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_or_unknown_user_is_refused_and_the_broker_goes_on(broker, mechanism):
    user, password = USERS[mechanism]
    assert "uthentication" in confluent_refused(broker, mechanism, user, password + "-wrong")
    assert "uthentication" in confluent_refused(broker, mechanism, "nobody", password)
    assert confluent_round_trip(broker, mechanism, user, password) == [f"v{i}".encode() for i in range(5)]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_logs_in(broker, mechanism):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    user, password = USERS[mechanism]
    auth = dict(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_plain_username=user,
                sasl_plain_password=password)
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", **auth)
    producer.send(topic, b"hello").get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=20000, **auth)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek(TopicPartition(topic, 0), 0)
    assert [m.value for m in consumer][:1] == [b"hello"]
    consumer.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_with_a_wrong_password_is_refused(broker, mechanism, caplog):
    """kafka-python gives up bootstrapping; its log says why: the broker's SaslAuthenticate error."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    user, password = USERS[mechanism]
    with caplog.at_level("WARNING", logger="kafka"), pytest.raises(KafkaError):
        KafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism,
                      sasl_plain_username=user, sasl_plain_password="wrong", max_block_ms=10000)
    assert "Authentication failed" in caplog.text


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_aiokafka_logs_in_and_a_wrong_password_is_refused(broker, mechanism):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError

    user, password = USERS[mechanism]

    async def produce(password: str):
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism=mechanism, sasl_plain_username=user,
                                    sasl_plain_password=password, request_timeout_ms=20000)
        try:
            await producer.start()
            return await producer.send_and_wait(f"aio-{mechanism.lower()}", b"x")
        finally:
            await producer.stop()

    assert asyncio.run(produce(password)).offset >= 0
    with pytest.raises(KafkaError):
        asyncio.run(produce("wrong"))


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_sparklogs_own_client_logs_in_and_a_wrong_password_is_refused(broker, mechanism):
    from sparklog.client import Producer
    from sparklog.client.errors import ClientError

    user, password = USERS[mechanism]
    auth = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism, "sasl.username": user}
    producer = Producer(bootstrap_servers=broker.bootstrap, **{**auth, "sasl.password": password})
    try:
        producer.send(f"own-{mechanism.lower()}", b"x").get(60)
    finally:
        producer.close()
    with pytest.raises(ClientError, match=f"SASL {mechanism} authentication of '{user}' failed"):
        bad = Producer(bootstrap_servers=broker.bootstrap, **{**auth, "sasl.password": "wrong", "max.block.ms": 10000})
        try:
            bad.send(f"own-{mechanism.lower()}", b"x").get(30)
        finally:
            bad.close()


def test_a_credential_added_while_the_broker_runs_works_without_restart(broker, broker_zk):
    confluent_refused(broker, "SCRAM-SHA-256", "late", "late-pw")
    store_credential(broker_zk, "late", "SCRAM-SHA-256", "late-pw", 4096)
    assert wait_until(lambda: _scram_login(broker, "SCRAM-SHA-256", "late", "late-pw") == 0, "the new credential", 30)


def test_alter_user_scram_credentials_from_confluent_kafkas_admin_then_login(broker):
    from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                       UserScramCredentialUpsertion)

    user, password = USERS["PLAIN"]
    admin = AdminClient(confluent_config(broker, "PLAIN", user, password))
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                          b"carol-pw", b"salt-of-carol")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    description = admin.describe_user_scram_credentials(["carol"])["carol"].result(30)
    assert [(i.mechanism, i.iterations) for i in description.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_512, 8192)]
    assert wait_until(lambda: _scram_login(broker, "SCRAM-SHA-512", "carol", "carol-pw") == 0, "carol's login", 30)
    assert confluent_round_trip(broker, "SCRAM-SHA-512", "carol", "carol-pw") == [f"v{i}".encode() for i in range(5)]


# -- raw connections: what no well-behaved client sends ------------------------------------------------------------

def _socket(broker) -> socket.socket:
    host, port = broker.bootstrap.split(",")[0].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _call(sock, api_key, version, body, correlation=1):
    sock.sendall(encode_request(api_key, version, correlation, "raw", body))
    size = struct.unpack(">i", _read(sock, 4))[0]
    return decode_response(api_key, version, _read(sock, size))[1]


def _read(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return data


def _closed(sock, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _scram_login(broker, mechanism, user, password, tamper=None) -> int:
    """A SCRAM login by hand; `tamper(client_final) -> bytes` alters the client-final. The last error code."""
    client = ScramClient(mechanism, user, password)
    with _socket(broker) as sock:
        assert _call(sock, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        reply = _call(sock, ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=client.first()), 2)
        if reply.error_code:
            return reply.error_code
        final = client.step(bytes(reply.auth_bytes))
        final = tamper(final) if tamper else final
        return _call(sock, ApiKey.SASL_AUTHENTICATE, 1, SaslAuthenticateRequest(auth_bytes=final), 3).error_code


def test_a_truncated_scram_client_final_is_refused(broker):
    user, password = USERS["SCRAM-SHA-256"]
    assert _scram_login(broker, "SCRAM-SHA-256", user, password, tamper=lambda final: final[:-10]) == 58
    assert _scram_login(broker, "SCRAM-SHA-256", user, password) == 0


def test_a_replayed_scram_client_final_is_refused(broker):
    user, password = USERS["SCRAM-SHA-256"]
    captured: list = []
    assert _scram_login(broker, "SCRAM-SHA-256", user, password, tamper=lambda f: captured.append(f) or f) == 0
    assert _scram_login(broker, "SCRAM-SHA-256", user, password, tamper=lambda final: captured[0]) == 58


def test_an_oversized_token_is_refused_from_its_size_prefix(broker):
    with _socket(broker) as sock:
        assert _call(sock, ApiKey.SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        sock.sendall(struct.pack(">i", 524288 + 1) + b"\x00" * 1024)
        assert _closed(sock, 30)
    assert confluent_round_trip(broker, "PLAIN", *USERS["PLAIN"])


def test_a_request_before_authentication_closes_the_connection(broker):
    from sparklog.protocol import MetadataRequest

    with _socket(broker) as sock:
        sock.sendall(encode_request(ApiKey.METADATA, 8, 1, "raw", MetadataRequest(topics=None)))
        assert _closed(sock, 30)


def test_a_client_that_connects_and_never_authenticates_is_dropped(broker):
    """A slow sender keeps the connection busy (the idle reaper would not close it) and never completes a frame."""
    with _socket(broker) as sock:
        sock.sendall(struct.pack(">i", 100))
        deadline = time.monotonic() + DROP_WAIT_S
        closed = False
        while time.monotonic() < deadline and not closed:
            try:
                sock.sendall(b"x")
            except OSError:
                closed = True
                break
            closed = _closed(sock, 1.0)
        assert closed


# -- three brokers, SASL between them ------------------------------------------------------------------------------

def test_three_brokers_with_a_scram_inter_broker_listener_replicate_with_acks_all(request, zookeeper,
                                                                                  tmp_path_factory):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    zk_connect = f"{zookeeper.connect_string}/sasl3-{uuid.uuid4().hex}"
    _bootstrap_credentials(zk_connect, {"SCRAM-SHA-256:admin": ("admin", "admin-pw")})
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("sasl3"), brokers=3,
                      overrides={**sasl_overrides("SCRAM-SHA-256"), "replica.lag.time.max.ms": "10000"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    user, password = USERS["SCRAM-SHA-256"]
    admin = AdminClient(confluent_config(cluster, "SCRAM-SHA-256", user, password))
    # min.insync.replicas=3: an acks=all write succeeds only once both followers have fetched it, which they can
    # only after logging in to the leader
    for future in admin.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "3"})]).values():
        future.result(60)
    producer = Producer(confluent_config(cluster, "SCRAM-SHA-256", user, password, acks="all"))
    delivered: list = []
    for i in range(20):
        producer.produce("replicated", f"r{i}".encode(), on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(90) == 0 and delivered == [None] * 20

    def in_sync():
        partition = admin.list_topics("replicated", timeout=10).topics["replicated"].partitions[0]
        return len(partition.isrs) == 3 and partition
    assert wait_until(in_sync, "three replicas in sync", 60)
