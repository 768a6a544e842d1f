"""Issue 25's eight-level precedence (design notes 4.9), each level shown with a SCRAM user and a client-id on a
real broker: every connection below is a SASL_PLAINTEXT login (SCRAM-SHA-256) of sparklog's producer with its
own client-id, and gets the producer_byte_rate of the most specific level among

    /config/users/<user>/clients/<client-id>, /config/users/<user>/clients/<default>, /config/users/<user>,
    /config/users/<default>/clients/<client-id>, /config/users/<default>/clients/<default>,
    /config/users/<default>, /config/clients/<client-id>, /config/clients/<default>

while a less specific level that also matches is configured beside it. Each level has its own bound; the bound a
connection got is read from the throttle_time_ms of its first Produce (one request of a known size against a
fresh sensor: the delay is size / bound - span, broker/quota/rate.py Rule: throttle-time), so the test sees the
quota the broker applied, not a resolution computed beside it. A default level masks every level below it for
every user, so the levels are configured in three phases; the broker is restarted between phases (it reads
every quota at start), so no phase depends on when a change notification arrives.
"""

from __future__ import annotations

import uuid

import pytest

from sparklog.coordination import client_quotas as cq
from sparklog.coordination.client_quotas import DEFAULT, PRODUCER_BYTE_RATE, Entity
from sparklog.coordination.connection import close, connect
from support.cluster import Cluster
from support.secured import ADMIN, MECHANISM, scram_jaas, store_users

pytestmark = pytest.mark.slow

USERS = ("alice", "bob", "carol", "dave", "erin")
PASSWORD = "pw-{}"
WINDOWS = 2  # quota.window.num, 1 s windows: a fresh sensor's span is 1 s and a throttle at most 2 s
SPAN_S = WINDOWS - 1
VALUE = b"v" * 56_000  # one record: the Produce frame is this plus its headers (under FRAME_OVERHEAD)
FRAME_OVERHEAD = 400
# one bound per level, 13% apart, all within (len(VALUE) / 3, len(VALUE)): each throttle falls in (0, 2 s)
BOUND = {level: int(20_000 * 1.13 ** (level - 1)) for level in range(1, 9)}
TOLERANCE = 0.04  # the frame's headers (below 1%) and the throttle's whole milliseconds
TIMEOUT_S = 60


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/quota-levels-{uuid.uuid4().hex}"
    store_users(zk_connect, {ADMIN[0]: ADMIN[1], **{user: PASSWORD.format(user) for user in USERS}})
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("quota-levels"), overrides={
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram_jaas(*ADMIN),
        "quota.window.num": str(WINDOWS), "quota.window.size.seconds": "1"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def configure(cluster, set_: dict[Entity, int], remove: tuple[Entity, ...] = ()) -> None:
    """Write a phase's quotas with the broker stopped, then start it: it reads them all before serving."""
    broker = cluster.brokers[1]
    broker.stop()
    zk = connect(cluster.zk_connect)
    try:
        for entity in remove:
            cq.alter_entity_config(zk, entity, {}, remove=(PRODUCER_BYTE_RATE,))
        for entity, bound in set_.items():
            cq.alter_entity_config(zk, entity, {PRODUCER_BYTE_RATE: str(bound)})
    finally:
        close(zk)
    broker.start()


def bound_applied(cluster, topic: str, user: str, client_id: str) -> float:
    """The producer_byte_rate the broker applied to `user`'s connection with `client_id`: from the throttle of
    one Produce of a known size into that connection's fresh sensor (module docstring)."""
    from sparklog.client import Producer

    with Producer(bootstrap_servers=cluster.bootstrap, linger_ms=0, **{
            "client.id": client_id, "security.protocol": "sasl_plaintext", "sasl.mechanism": MECHANISM,
            "sasl.username": user, "sasl.password": PASSWORD.format(user), "compression.type": "none",
            "enable.idempotence": False, "acks": 1}) as producer:
        producer.send(topic, VALUE, partition=0).get(TIMEOUT_S)
        throttled = producer.metrics()["throttle_time_ms_max"]
    assert 0 < throttled < WINDOWS * 1000, f"{user}/{client_id}: throttle {throttled} ms"
    return (len(VALUE) + FRAME_OVERHEAD / 2) / (throttled / 1000.0 + SPAN_S)


def assert_level(cluster, topic: str, user: str, client_id: str, level: int) -> None:
    got = bound_applied(cluster, topic, user, client_id)
    nearest = min(BOUND, key=lambda lv: abs(BOUND[lv] - got))
    assert abs(got - BOUND[level]) <= TOLERANCE * BOUND[level], (
        f"{user}/{client_id} got {got:.0f} B/s, the bound of level {nearest}, not level {level}'s {BOUND[level]}")


def test_each_of_the_eight_levels_applies_to_a_sasl_user_and_client_id(cluster):
    topic = f"levels-{uuid.uuid4().hex[:8]}"
    zk = connect(cluster.zk_connect)
    try:
        from sparklog.coordination.topics import create_topic
        create_topic(zk, topic, 1, 1)
    finally:
        close(zk)
    # phase 1: levels 1-5; each connection also matches level 5 (users/<default>/clients/<default>)
    configure(cluster, {Entity("alice", "a-1"): BOUND[1], Entity("alice", DEFAULT): BOUND[2],
                        Entity("bob", None): BOUND[3], Entity(DEFAULT, "c-4"): BOUND[4],
                        Entity(DEFAULT, DEFAULT): BOUND[5], Entity(None, "b-3"): BOUND[7],
                        Entity(None, DEFAULT): BOUND[8]})
    assert_level(cluster, topic, "alice", "a-1", 1)  # over users/alice/clients/<default>
    assert_level(cluster, topic, "alice", "a-2", 2)  # over users/<default>/clients/<default>
    assert_level(cluster, topic, "bob", "b-3", 3)  # over users/<default>/clients/<default> and clients/b-3
    assert_level(cluster, topic, "carol", "c-4", 4)  # over users/<default>/clients/<default>
    assert_level(cluster, topic, "carol", "c-5", 5)  # over clients/<default>
    # phase 2: users/<default> instead of users/<default>/clients/<default>; clients/d-6 below it
    configure(cluster, {Entity(DEFAULT, None): BOUND[6], Entity(None, "d-6"): BOUND[7]},
              remove=(Entity(DEFAULT, DEFAULT),))
    assert_level(cluster, topic, "dave", "d-6", 6)  # over clients/d-6 and clients/<default>
    # phase 3: no user-level default left: the client-id levels apply to an authenticated user
    configure(cluster, {Entity(None, "e-7"): BOUND[7]}, remove=(Entity(DEFAULT, None),))
    assert_level(cluster, topic, "erin", "e-7", 7)  # over clients/<default>
    assert_level(cluster, topic, "erin", "e-8", 8)
