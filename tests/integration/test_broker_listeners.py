"""Named listeners: every listener bound, registered in `/brokers/ids/<id>` as Kafka registers them, Metadata
answering the brokers' addresses of the listener the client came in on, replication over the inter-broker one."""

from __future__ import annotations

import json
import uuid

import pytest

TIMEOUT_S = 60

LISTENERS = {
    "listeners": "EXTERNAL://127.0.0.1:0,INTERNAL://127.0.0.1:0",
    # EXTERNAL clients are told a name no one resolves: which listener a client used shows in the hosts it is
    # told, and a broker following over EXTERNAL rather than the inter-broker listener could not replicate
    # (EXTERNAL first: the registration's host/port, Kafka's first PLAINTEXT-protocol endpoint, are EXTERNAL's, so
    # a fetcher that read host/port rather than the INTERNAL endpoint could not replicate either)
    "advertised.listeners": "EXTERNAL://external.invalid:0,INTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "default.replication.factor": "2",
}


@pytest.fixture(scope="module")
def named(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    cluster = Cluster(f"{zookeeper.connect_string}/l-{uuid.uuid4().hex}", tmp_path_factory.mktemp("named"),
                      brokers=2, overrides=LISTENERS)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def _listeners(cluster) -> dict[str, dict[int, tuple[str, int]]]:
    """{listener: {broker id: (host, port)}} from the brokers' own listener lines."""
    found: dict[str, dict[int, tuple[str, int]]] = {}
    for broker_id, broker in cluster.brokers.items():
        for name, (host, port, _) in broker.listeners().items():
            found.setdefault(name, {})[broker_id] = (host, port)
    return found


def test_each_listener_is_bound_and_a_client_sees_the_brokers_on_its_own_listener(named):
    from confluent_kafka.admin import AdminClient

    listeners = _listeners(named)
    assert set(listeners) == {"INTERNAL", "EXTERNAL"}
    for name, addresses in listeners.items():
        assert len({port for _, port in addresses.values()}) == 2, listeners  # every broker, its own port
        for host, port in addresses.values():
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
            seen = {b.id: (b.host, b.port) for b in admin.list_topics(timeout=TIMEOUT_S).brokers.values()}
            assert seen == addresses, (name, seen, addresses)
    assert listeners["INTERNAL"] != listeners["EXTERNAL"]


def test_registration_holds_every_endpoint_and_the_protocol_map(named):
    from sparklog.coordination.connection import close, connect

    zk = connect(named.zk_connect)
    try:
        data, _ = zk.get("/brokers/ids/1")
    finally:
        close(zk)
    info = json.loads(data)
    internal, external = (named.brokers[1].listeners()[n] for n in ("INTERNAL", "EXTERNAL"))
    assert info["endpoints"] == [f"EXTERNAL://external.invalid:{external[1]}", f"INTERNAL://127.0.0.1:{internal[1]}"]
    assert info["listener_security_protocol_map"] == {"EXTERNAL": "PLAINTEXT", "INTERNAL": "PLAINTEXT"}
    # Kafka's host/port are the PLAINTEXT-protocol listener's: the first of them here
    assert (info["host"], info["port"]) == ("external.invalid", external[1])


def test_replicas_follow_over_the_inter_broker_listener_and_acks_all_completes(named):
    from confluent_kafka import Consumer, Producer

    bootstrap = ",".join(f"127.0.0.1:{b.listeners()['INTERNAL'][1]}" for b in named.brokers.values())
    topic = f"named-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 60000})
    for i in range(20):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(TIMEOUT_S) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    try:
        while len(got) < 20:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None and message.error() is None, message and message.error()
            got.append(message.value())
    finally:
        consumer.close()
    assert sorted(got) == sorted(f"v{i}".encode() for i in range(20))
    # acks=all answered with both replicas in the ISR: the follower fetched over INTERNAL (EXTERNAL's advertised
    # host does not resolve)
    assert sorted(_isr(named, topic)) == [1, 2]


def _isr(cluster, topic) -> list[int]:
    from sparklog.coordination.connection import close, connect

    zk = connect(cluster.zk_connect)
    try:
        data, _ = zk.get(f"/brokers/topics/{topic}/partitions/0/state")
    finally:
        close(zk)
    return json.loads(data)["isr"]
