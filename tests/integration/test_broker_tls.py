"""TLS listeners: Kafka clients produce and consume over SSL; a plaintext client on the TLS port, a TLS client on
the plaintext port, an untrusted or expired certificate and a handshake that never finishes are each refused at
bounded cost while the broker serves everyone else; mutual TLS maps the certificate's subject to the principal;
a store that cannot be loaded stops the start in one line."""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import sys
import time
import uuid

import pytest

from support.certs import make_pki
from support.cluster import REPO, Cluster

TIMEOUT_S = 60
MAPPING = r"RULE:^CN=([^,]+),OU=eng,.*$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_broker(request, zookeeper, pki, tmp_path_factory):
    """One broker: PLAINTEXT and SSL listeners; client certificates requested (mutual TLS when sent)."""
    overrides = {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", **pki.broker_ssl(),
                 "ssl.client.auth": "requested", "ssl.principal.mapping.rules": MAPPING,
                 "ssl.handshake.timeout.ms": "2000"}
    cluster = Cluster(f"{zookeeper.connect_string}/tls-{uuid.uuid4().hex}", tmp_path_factory.mktemp("tls"),
                      overrides=overrides)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster.brokers[1]


def _port(broker, listener: str) -> int:
    return broker.listeners()[listener][1]


def _ssl_config(pki, port: int, **extra) -> dict:
    return {"bootstrap.servers": f"localhost:{port}", "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
            **extra}


def _roundtrip_confluent(config: dict, n: int = 50) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    topic = f"tls-{uuid.uuid4().hex[:8]}"
    producer = Producer({**config, "acks": "all", "message.timeout.ms": TIMEOUT_S * 1000})
    for i in range(n):
        producer.produce(topic, f"m{i}".encode() * 100)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == [f"m{i}".encode() * 100 for i in range(n)]
    return got


def test_confluent_kafka_produces_and_consumes_over_ssl(tls_broker, pki):
    _roundtrip_confluent(_ssl_config(pki, _port(tls_broker, "SSL")))
    stats = tls_broker.statistics()["server"]
    assert stats["bytes_copied"] > 0 and stats["handler_errors"] == 0  # record sets went the TLS copy path


def test_kafka_python_produces_and_consumes_over_ssl(tls_broker, pki):
    from kafka import KafkaConsumer, KafkaProducer

    bootstrap = f"localhost:{_port(tls_broker, 'SSL')}"
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca),
                             acks="all")
    for i in range(20):
        producer.send(topic, f"k{i}".encode())
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca),
                             auto_offset_reset="earliest", consumer_timeout_ms=TIMEOUT_S * 1000)
    got = []
    for message in consumer:
        got.append(message.value)
        if len(got) == 20:
            break
    consumer.close()
    assert got == [f"k{i}".encode() for i in range(20)]


def _api_versions_request() -> bytes:
    client = b"probe"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _closed_without_answer(sock: socket.socket) -> bool:
    sock.settimeout(TIMEOUT_S)
    try:
        data = sock.recv(4096)
    except (ConnectionResetError, ssl.SSLError):
        return True
    return data == b"" or data[:1] == b"\x15"  # closed, or a TLS alert: never a Kafka response


def _kafka_answers(port: int) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(_api_versions_request())
        size = struct.unpack(">i", sock.recv(4))[0]
        return size > 0


def test_a_plaintext_client_on_the_tls_port_is_refused_and_others_are_served(tls_broker, pki):
    with socket.create_connection(("127.0.0.1", _port(tls_broker, "SSL")), timeout=TIMEOUT_S) as sock:
        sock.sendall(_api_versions_request())
        assert _closed_without_answer(sock)
    assert _kafka_answers(_port(tls_broker, "PLAINTEXT"))
    _roundtrip_confluent(_ssl_config(pki, _port(tls_broker, "SSL")), n=5)


def test_a_tls_client_on_the_plaintext_port_is_refused_and_others_are_served(tls_broker, pki):
    context = ssl.create_default_context(cafile=str(pki.ca))
    with socket.create_connection(("127.0.0.1", _port(tls_broker, "PLAINTEXT")), timeout=TIMEOUT_S) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            context.wrap_socket(raw, server_hostname="localhost")
    assert _kafka_answers(_port(tls_broker, "PLAINTEXT"))


def test_a_handshake_that_never_finishes_is_dropped_and_does_not_hold_up_others(tls_broker, pki):
    port = _port(tls_broker, "SSL")
    silent = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) for _ in range(5)]
    try:
        _roundtrip_confluent(_ssl_config(pki, port), n=5)  # served while five handshakes hang
        started = time.monotonic()
        for sock in silent:
            assert _closed_without_answer(sock)  # ssl.handshake.timeout.ms=2000 drops each
        assert time.monotonic() - started < 30
    finally:
        for sock in silent:
            sock.close()
    assert tls_broker.statistics()["server"]["tls_handshakes_running"] == 0


def test_the_client_refuses_a_broker_whose_certificate_it_does_not_trust(tls_broker, pki, tmp_path):
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import KafkaException

    other = make_pki(tmp_path / "other")
    admin = AdminClient(_ssl_config(other, _port(tls_broker, "SSL")))  # trusts another CA only
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


@pytest.mark.parametrize("which", ["untrusted", "expired"])
def test_a_client_certificate_untrusted_or_expired_is_refused(tls_broker, pki, which):
    bundle = getattr(pki, which)
    context = ssl.create_default_context(cafile=str(pki.ca))
    context.load_cert_chain(str(bundle.cert), str(bundle.key))
    with socket.create_connection(("127.0.0.1", _port(tls_broker, "SSL")), timeout=TIMEOUT_S) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            with context.wrap_socket(raw, server_hostname="localhost") as sock:
                sock.sendall(_api_versions_request())  # TLS 1.3: the refusal arrives after the handshake
                if not sock.recv(4096):
                    raise ConnectionError("closed")
    assert _kafka_answers(_port(tls_broker, "PLAINTEXT"))


def test_mutual_tls_maps_the_certificate_subject_to_the_principal(tls_broker, pki):
    alice = pki.client("CN=Alice,OU=eng,O=acme,C=US")
    bob = pki.client("CN=bob,OU=ops,O=acme")
    for bundle in (alice, bob):
        _roundtrip_confluent(_ssl_config(pki, _port(tls_broker, "SSL"), **{
            "ssl.certificate.location": str(bundle.cert), "ssl.key.location": str(bundle.key)}), n=3)
    principals = tls_broker.statistics()["server"]["tls_principals"]
    # RULE: lower-cased CN of OU=eng; DEFAULT: the whole RFC 2253 name
    assert principals.get("User:alice", 0) > 0 and principals.get("User:CN=bob,OU=ops,O=acme", 0) > 0, principals


def test_a_pkcs12_key_store_serves(zookeeper, pki, tmp_path):
    keystore = pki.pkcs12(pki.broker, "s3cret")
    with Cluster(f"{zookeeper.connect_string}/p12-{uuid.uuid4().hex}", tmp_path, overrides={
            "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL",
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(keystore),
            "ssl.keystore.password": "s3cret", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(pki.ca)}) as cluster:
        _roundtrip_confluent(_ssl_config(pki, _port(cluster.brokers[1], "SSL")), n=5)


@pytest.mark.parametrize("overrides, words", [
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "/nonexistent/ks.pem"},
     ["listener 'SSL://127.0.0.1:0'", "ssl.keystore.location '/nonexistent/ks.pem'", "No such file"]),
    ({"ssl.keystore.type": "JKS", "ssl.keystore.location": "/x.jks"}, ["ssl.keystore.type=JKS", "PEM", "PKCS12"]),
    ({"ssl.keystore.type": "BCFKS"}, ["ssl.keystore.type", "BCFKS"]),
    ({"listener.security.protocol.map": "SSL:TLS"}, ["listener.security.protocol.map", "'SSL:TLS'"]),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "KEYSTORE", "ssl.client.auth": "required"},
     ["ssl.client.auth=required", "trust store"]),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "CA"}, ["cannot load the PEM key store"]),
    ({"ssl.keystore.type": "PEM", "ssl.keystore.location": "KEYSTORE", "ssl.enabled.protocols": "TLSv1.4"},
     ["ssl.enabled.protocols", "TLSv1.4"]),
])
def test_a_tls_setting_the_broker_cannot_serve_stops_the_start_in_one_line(zk_connect, tmp_path, pki, overrides,
                                                                          words):
    command = [sys.executable, "-m", "sparklog.cli", "broker", "start", "--id", "7", "--log-dir",
               str(tmp_path / "logs"), "--zookeeper", zk_connect, "--override", "listeners=SSL://127.0.0.1:0",
               "--override", "security.inter.broker.protocol=SSL"]
    paths = {"KEYSTORE": str(pki.broker.keystore), "CA": str(pki.ca)}
    for key, value in overrides.items():
        command += ["--override", f"{key}={paths.get(value, value)}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=str(REPO))
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines
    assert not (tmp_path / "logs").exists()


def test_three_brokers_with_only_ssl_listeners_replicate_over_inter_broker_tls(zookeeper, pki, tmp_path):
    """Inter-broker SSL with mutual TLS required: the followers' fetchers present the broker's certificate and
    verify the leader's; acks=all needs every replica of the ISR, and all three stay in it."""
    import json

    from sparklog.coordination.connection import close, connect

    zk_connect = f"{zookeeper.connect_string}/ssl3-{uuid.uuid4().hex}"
    alice = pki.client("CN=alice,OU=eng,O=acme", stem="alice3")
    with Cluster(zk_connect, tmp_path, brokers=3, overrides={
            "listeners": "SSL://127.0.0.1:0", "security.inter.broker.protocol": "SSL", **pki.broker_ssl(),
            "ssl.client.auth": "required", "default.replication.factor": "3", "min.insync.replicas": "3",
            "replica.lag.time.max.ms": "10000"}) as cluster:
        bootstrap = ",".join(f"localhost:{_port(b, 'SSL')}" for b in cluster.brokers.values())
        config = {**_ssl_config(pki, 0), "bootstrap.servers": bootstrap,
                  "ssl.certificate.location": str(alice.cert), "ssl.key.location": str(alice.key)}
        _roundtrip_confluent(config, n=30)  # acks=all with min.insync.replicas=3: every follower fetched
        zk = connect(zk_connect)
        try:
            topics = [t for t in zk.get_children("/brokers/topics") if t.startswith("tls-")]
            state = json.loads(zk.get(f"/brokers/topics/{topics[0]}/partitions/0/state")[0])
        finally:
            close(zk)
        assert sorted(state["isr"]) == [1, 2, 3]
        stats = [b.statistics()["server"] for b in cluster.brokers.values()]
        assert sum(s["tls_principals"].get("User:CN=localhost,O=sparklog", 0) for s in stats) >= 2, stats
