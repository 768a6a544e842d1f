"""KIP-227 incremental fetch sessions across real brokers: replica fetchers and sparklog's consumer in sessions
while acks=all writes replicate, a session evicted by a restarted follower's and one given a wrong epoch
(the client gets the error and starts over with a full fetch), the broker's answers on the wire, and
librdkafka (which fetches sessionless: SessionId 0, epoch -1) reading alongside.

Each broker keeps 3 sessions (max.incremental.fetch.session.cache.slots): one per follower of its partitions and
one for the consumer, so a restarted follower's new session must evict the consumer's (fetch_sessions.py Rule 4).
"""

from __future__ import annotations

import time
import uuid

import pytest
from support.broker_metrics import total

from support.cluster import started_cluster, wait_until
from support.wire import request as wire_request

from sparklog.broker.handlers.error_codes import FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.fetch import FetchPartition, FetchRequest, FetchTopic

TIMEOUT_S = 90
SLOTS = 3
PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return started_cluster(request, f"{zookeeper.connect_string}/fetchsess-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("fetchsess"), 3, 6000,
                           **{"max.incremental.fetch.session.cache.slots": str(SLOTS),
                              "auto.create.topics.enable": "false", "replica.lag.time.max.ms": "3000",
                              "metrics.listener": "http://127.0.0.1:0"})


@pytest.fixture(scope="module")
def topic(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"sess-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(TIMEOUT_S)
    wait_until(lambda: _in_sync(cluster, name), f"{name} fully in sync", TIMEOUT_S)
    return name


def _metadata(cluster, name):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap}).list_topics(name, timeout=10).topics[name]


def _in_sync(cluster, name) -> bool:
    parts = _metadata(cluster, name).partitions.values()
    return len(parts) == PARTITIONS and all(p.leader >= 0 and len(p.isrs) == 3 for p in parts)


def _produce(cluster, name, values) -> list:
    """acks=all over every partition; the values acknowledged."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 60000})
    acked = []
    for i, value in enumerate(values):
        producer.produce(name, value=value, partition=i % PARTITIONS,
                         on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
        producer.poll(0)
    producer.flush(TIMEOUT_S)
    return acked


def _read(consumer, expected: set) -> list:
    """Poll until every value of `expected` is read; the values of `expected` read, in order (each once unless a
    record was delivered twice)."""
    seen: list = []

    def more():
        seen.extend(r.value for r in consumer.poll(1.0) if r.value in expected)
        return expected <= set(seen)
    wait_until(more, f"{len(expected)} records read", TIMEOUT_S)
    return seen


@pytest.fixture(scope="module")
def consumer(cluster, topic):
    from sparklog.client import Consumer

    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "earliest", "fetch.max.wait.ms": 200}) as c:
        c.assign([(topic, p) for p in range(PARTITIONS)])
        yield c


def _sessions(consumer):
    return consumer._fetcher.sessions.values()


def _fetch(broker, name, partition, session_id, epoch, offset=None):
    """A consumer's Fetch of one partition from `offset` (None: none named, the session's own)."""
    topics = [] if offset is None else [FetchTopic(topic=name, partitions=[
        FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=1024)])]
    body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, session_id=session_id, session_epoch=epoch,
                        topics=topics, forgotten_topics_data=[])
    return wire_request(broker.host, broker.port, ApiKey.FETCH, 11, body)


def test_the_broker_answers_session_errors_on_the_wire(cluster, topic):
    """Before the consumer's sessions: each broker holds its two followers' sessions and has one slot free."""
    assert _produce(cluster, topic, [b"w"] * PARTITIONS)
    partition, part = next(iter(_metadata(cluster, topic).partitions.items()))
    broker = cluster.brokers[part.leader]
    full = _fetch(broker, topic, partition, 0, 0, offset=0)
    session_id, answer = full.session_id, full.responses[0].partitions[0]
    assert full.error_code == 0 and session_id != 0 and answer.records
    moved = _fetch(broker, topic, partition, session_id, 1, offset=answer.high_watermark)
    assert moved.error_code == 0 and moved.session_id == session_id and moved.responses == []  # nothing new
    again = _fetch(broker, topic, partition, session_id, 2)  # the session's own offset: still nothing new
    assert again.error_code == 0 and again.responses == []
    assert _fetch(broker, topic, partition, session_id, 2).error_code == INVALID_FETCH_SESSION_EPOCH  # a replay
    closed = _fetch(broker, topic, partition, session_id, -1, offset=0)  # closes it; answered in full, sessionless
    assert closed.session_id == 0 and closed.responses[0].partitions[0].records
    assert _fetch(broker, topic, partition, session_id, 3).error_code == FETCH_SESSION_ID_NOT_FOUND


IDLE_S = 5
REPLICA_FETCH_WAIT_S = 0.5  # replica.fetch.wait.max.ms: Kafka's default, and sparklog's


def _fetches_served(broker) -> float:
    """The Fetch requests `broker` has answered, from its Prometheus endpoint."""
    return total(broker, "sparklog_requests_total", api="Fetch")


def test_idle_replica_fetchers_in_sessions_long_poll_instead_of_spinning(cluster, topic):
    """fetch_sessions.py Rule 5: an incremental fetch that reads nothing still waits up to max_wait_ms. Each broker
    of an idle cluster answers each of its two followers about once per replica.fetch.wait.max.ms; a broker that
    answered an idle session's fetch at once served ~400 a second per follower."""
    wait_until(lambda: _in_sync(cluster, topic), "every replica in sync", TIMEOUT_S)
    before = {b.broker_id: _fetches_served(b) for b in cluster.brokers.values()}
    time.sleep(IDLE_S)
    served = {b.broker_id: _fetches_served(b) - before[b.broker_id] for b in cluster.brokers.values()}
    most = 2 * IDLE_S / REPLICA_FETCH_WAIT_S * 3  # two followers, three times slack (a woken poll answers early)
    assert all(0 < n <= most for n in served.values()), (served, most)


def test_replicas_and_a_consumer_fetch_in_sessions_while_acks_all_writes_replicate(cluster, topic, consumer):
    values = [b"a%d" % i for i in range(1500)]
    acked = _produce(cluster, topic, values)
    assert sorted(acked) == sorted(values)
    seen = _read(consumer, set(acked))
    assert len(seen) == len(set(seen)) == len(acked)
    assert sum(s.incremental_requests for s in _sessions(consumer)) > 0
    wait_until(lambda: _in_sync(cluster, topic), "every replica in sync", TIMEOUT_S)
    for broker in cluster.brokers.values():  # each follows the two other leaders, in sessions
        assert broker.tail(10**7).count("incremental fetches from now on") >= 2, broker.broker_id


def test_a_wrong_epoch_is_refused_and_the_consumer_starts_over(cluster, topic, consumer):
    def refused() -> bool:
        if any(INVALID_FETCH_SESSION_EPOCH in s.session_errors for s in _sessions(consumer)):
            return True
        for session in _sessions(consumer):
            if session.session_id:
                session.epoch = 10**9  # the next incremental fetch carries an epoch the broker does not expect
        return False
    wait_until(refused, "INVALID_FETCH_SESSION_EPOCH", TIMEOUT_S)
    values = [b"c%d" % i for i in range(300)]
    acked = _produce(cluster, topic, values)
    seen = _read(consumer, set(acked))
    assert len(seen) == len(set(seen)) == len(acked) == len(values)
    assert sum(s.full_requests for s in _sessions(consumer)) > len(_sessions(consumer))  # started over


def test_an_evicted_session_starts_over_with_a_full_fetch(cluster, topic, consumer):
    assert not any(FETCH_SESSION_ID_NOT_FOUND in s.session_errors for s in _sessions(consumer))
    cluster.brokers[2].stop()
    cluster.brokers[2].start()  # its new follower sessions evict the consumer's on brokers 1 and 3
    wait_until(lambda: _in_sync(cluster, topic), "every replica in sync again", TIMEOUT_S)
    values = [b"b%d" % i for i in range(600)]
    acked = _produce(cluster, topic, values)
    assert sorted(acked) == sorted(values)
    seen = _read(consumer, set(acked))
    assert len(seen) == len(set(seen)) == len(acked)
    assert any(FETCH_SESSION_ID_NOT_FOUND in s.session_errors for s in _sessions(consumer))


def test_librdkafka_fetches_sessionless_and_reads_everything(cluster, topic):
    from confluent_kafka import Consumer, TopicPartition

    values = [b"d%d" % i for i in range(200)]
    acked = set(_produce(cluster, topic, values))
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen = []

        def more():
            seen.extend(m.value() for m in c.consume(1000, 1.0) if m.error() is None)
            return acked <= set(seen)
        wait_until(more, "librdkafka reads every record", TIMEOUT_S)
    finally:
        c.close()
