"""Per-listener TLS (`listener.name.<listener>.ssl.*`, broker/tls.py Rule 6), in a real broker process: two TLS
listeners with different key stores and client authentication each serve their own; a prefixed key the broker
cannot serve stops the start in one line."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import uuid

import pytest

from support.certs import make_pki
from support.cluster import REPO, Cluster

TIMEOUT_S = 60
EXTERNAL_SUBJECT = "CN=localhost,O=sparklog"
INTERNAL_SUBJECT = "CN=localhost,OU=internal,O=sparklog"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(request, zookeeper, pki, tmp_path_factory):
    """INTERNAL: its own key store, client certificates required, brokers' own traffic; EXTERNAL: the unprefixed
    key store, no client certificate asked."""
    internal = pki.server(INTERNAL_SUBJECT, stem="internal")
    overrides = {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                 "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL",
                 "inter.broker.listener.name": "INTERNAL", **pki.broker_ssl(),
                 "listener.name.internal.ssl.keystore.location": str(internal.keystore),
                 "listener.name.internal.ssl.client.auth": "required",
                 "listener.name.internal.ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/"}
    cluster = Cluster(f"{zookeeper.connect_string}/listener-tls-{uuid.uuid4().hex}",
                      tmp_path_factory.mktemp("listener-tls"), overrides=overrides)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster.brokers[1]


def _port(broker, listener: str) -> int:
    return broker.listeners()[listener][1]


def _served_subject(pki, port: int, client=None) -> str:
    """The subject of the certificate the listener presents, after a full handshake and one Kafka answer."""
    context = ssl.create_default_context(cafile=str(pki.ca))
    if client is not None:
        context.load_cert_chain(str(client.cert), str(client.key))
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(b"\x00\x00\x00\x0f\x00\x12\x00\x00\x00\x00\x00\x01\x00\x05probe")  # ApiVersions v0
            size = sock.recv(4)
            if len(size) < 4:
                raise ConnectionError("closed without a Kafka answer")
            from sparklog.broker.tls import certificate_name
            return certificate_name(sock.getpeercert(binary_form=True))


def _roundtrip(config: dict, n: int = 10) -> None:
    from confluent_kafka import Consumer, Producer

    topic = f"ltls-{uuid.uuid4().hex[:8]}"
    producer = Producer({**config, "acks": "all", "message.timeout.ms": TIMEOUT_S * 1000})
    for i in range(n):
        producer.produce(topic, b"m%d" % i)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({**config, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.assign([__import__("confluent_kafka").TopicPartition(topic, 0, 0)])
    got = []
    try:
        while len(got) < n:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"read {len(got)} of {n}"
            if message.error() is None:
                got.append(message.value())
    finally:
        consumer.close()
    assert got == [b"m%d" % i for i in range(n)]


def test_each_tls_listener_presents_its_own_key_store(broker, pki):
    alice = pki.client("CN=alice,OU=eng,O=acme", stem="alice-ltls")
    assert _served_subject(pki, _port(broker, "EXTERNAL")) == EXTERNAL_SUBJECT
    assert _served_subject(pki, _port(broker, "INTERNAL"), alice) == INTERNAL_SUBJECT


def test_each_tls_listener_asks_for_client_certificates_as_its_own_client_auth_says(broker, pki):
    alice = pki.client("CN=alice,OU=eng,O=acme", stem="alice-auth")
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        _served_subject(pki, _port(broker, "INTERNAL"))  # required there: no certificate, no answer
    assert _served_subject(pki, _port(broker, "EXTERNAL")) == EXTERNAL_SUBJECT  # none asked here
    ssl_config = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    _roundtrip({**ssl_config, "bootstrap.servers": f"localhost:{_port(broker, 'EXTERNAL')}"})
    _roundtrip({**ssl_config, "bootstrap.servers": f"localhost:{_port(broker, 'INTERNAL')}",
                "ssl.certificate.location": str(alice.cert), "ssl.key.location": str(alice.key)})
    principals = broker.statistics()["server"]["tls_principals"]
    assert principals.get("User:alice", 0) > 0, principals  # INTERNAL's own mapping rule


@pytest.mark.parametrize("key, value, words", [
    ("listener.name.internal.ssl.keystore.locaton", "/x.pem", ["listener.name.internal.ssl.keystore.locaton",
                                                               "ssl.keystore.location"]),
    ("listener.name.internl.ssl.client.auth", "required", ["listener.name.internl.ssl.client.auth", "INTERNL"]),
    ("listener.name.internal.ssl.keystore.location", "/nonexistent/ks.pem",
     ["listener 'INTERNAL://127.0.0.1:0'", "/nonexistent/ks.pem"]),
])
def test_a_listener_ssl_key_the_broker_cannot_serve_stops_the_start_in_one_line(zk_connect, tmp_path, pki, key,
                                                                               value, words):
    command = [sys.executable, "-m", "sparklog.cli", "broker", "start", "--id", "7", "--log-dir",
               str(tmp_path / "logs"), "--zookeeper", zk_connect]
    for k, v in {"listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                 "listener.security.protocol.map": "INTERNAL:SSL,EXTERNAL:SSL",
                 "inter.broker.listener.name": "INTERNAL", **pki.broker_ssl(), key: value}.items():
        command += ["--override", f"{k}={v}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=str(REPO))
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines
    assert not (tmp_path / "logs").exists()
