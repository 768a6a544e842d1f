"""A live broker subprocess under hostile input keeps serving well-behaved clients, in bounded memory and
descriptors, without a handler exception; and a restarted broker never accepts a connection it cannot yet
answer. The hostile clients are in tests/support/hostile.py; scripts/hostile_broker.py is the full run."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from support import hostile
from support.cluster import Cluster

pytestmark = pytest.mark.slow

MAX_REQUEST_BYTES = 1048576
RSS_GROWTH_LIMIT = 100 * 1024 * 1024
# Descriptors the broker may open beyond one per held connection (the attack's own connections in flight,
# the well-behaved clients' connections, log segments).
FD_SLACK = 64
PARKED_GONE_S = 10.0  # far less than the parked floods' 60 s waits: they must go with their connections
# What a broker that can answer may take to answer ApiVersions on a loaded machine: "never silent", not a speed.
ANSWER_TIMEOUT_S = 30.0
SESSION_TIMEOUT_MS = 6000


@pytest.fixture
def one(request, zk_connect, tmp_path):
    c = Cluster(zk_connect, tmp_path, brokers=1, overrides={"socket.request.max.bytes": str(MAX_REQUEST_BYTES)})
    request.addfinalizer(c.stop)
    return c.start()


def test_hostile_input_leaves_memory_descriptors_and_clients_alone(one):
    broker = one.brokers[1]
    report = hostile.run(broker, inputs=1200, idle=1000, slowloris=50, threads=3,
                         max_request_bytes=MAX_REQUEST_BYTES, timeout=120)
    summary = "\n".join(report.lines())
    assert report.inputs == 1200 and set(report.counts) == set(hostile.KINDS), summary
    assert report.failures == [], summary  # every huge CreateTopics answered with an error, in time
    assert report.client_errors == [] and report.produced > 0 and report.consumed_in_order, summary
    assert report.rss_growth < RSS_GROWTH_LIMIT, summary
    assert report.fds_peak <= report.fds_before + report.held_connections + FD_SLACK, summary
    assert report.fds_after <= report.fds_before + FD_SLACK, summary  # topics auto-created by flipped names
    server = report.broker_statistics["server"]
    assert server["handler_errors"] == 0, summary
    assert server["queued_request_bytes"] == 0 and server["connections_open"] == 0, summary
    # the parked floods' tasks went with their connections: soon only the accept loop and the idle reaper
    # run (a barrier request such as an auto-creation may still be finishing its ZooKeeper write)
    deadline = time.monotonic() + PARKED_GONE_S
    while server["tasks_running"] > 2 and time.monotonic() < deadline:
        time.sleep(0.5)
        server = broker.statistics()["server"]
    assert server["tasks_running"] <= 2, summary
    assert broker.running


def probe(host: str, port: int, registered) -> tuple[bool, bool] | None:
    """None if the connection is refused; else whether the broker was `registered()` once it had accepted the
    connection, and whether it answered ApiVersions on it."""
    from support.wire import exchange
    from sparklog.protocol import ApiKey, ApiVersionsRequest

    try:
        sock = socket.create_connection((host, port), timeout=ANSWER_TIMEOUT_S)
    except ConnectionRefusedError:
        return None
    with sock:
        accepted_registered = registered()
        try:
            return accepted_registered, exchange(sock, ApiKey.API_VERSIONS, 3, ApiVersionsRequest()).error_code == 0
        except (socket.timeout, TimeoutError, ConnectionError):
            return accepted_registered, False


def test_a_restarted_broker_does_not_accept_before_it_can_answer(zk_connect, zk, tmp_path):
    """SIGKILLed, the broker's ZooKeeper node outlives it by a session timeout, which the restarted broker
    waits out before it registers: meanwhile a connection is refused, never accepted and left silent. A
    connection it accepts finds it registered (its node, of a new session: it listens only after that) and is
    answered. Judged by ZooKeeper rather than by how soon an answer comes, which a loaded machine delays."""
    cluster = Cluster(zk_connect, tmp_path, brokers=1,
                      overrides={"zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS)})
    try:
        broker = cluster.start().brokers[1]
        host, port = broker.host, broker.port
        node = f"/brokers/ids/{broker.broker_id}"
        old_session = zk.exists(node).ephemeralOwner

        def registered() -> bool:
            stat = zk.exists(node)
            return stat is not None and stat.ephemeralOwner != old_session

        broker.kill()
        restart = threading.Thread(target=broker.start)
        restart.start()
        outcomes = []
        while restart.is_alive():
            outcomes.append(probe(host, port, registered))
            time.sleep(0.2)
        restart.join()
        assert broker.running
        assert all(outcome == (True, True) for outcome in outcomes if outcome is not None), outcomes
        assert outcomes.count(None) >= 5, outcomes  # the probes did cover the wait for the old session
        assert probe(host, port, registered) == (True, True)
    finally:
        cluster.stop()


INVALID_RECORD = 87
CORRUPT_MESSAGE = 2
INVALID_TIMESTAMP = 32


def _produce(broker, topic: str, records: bytes) -> tuple[int, int, str | None]:
    """One raw Produce v8 (acks=1) of `records`: (error code, base offset, error message)."""
    from support.wire import request
    from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData

    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=records)])])
    part = request(broker.host, broker.port, ApiKey.PRODUCE, 8, body).responses[0].partition_responses[0]
    return part.error_code, part.base_offset, part.error_message


def _resigned(batch: bytes, section: bytes, count: int) -> bytes:
    """`batch`'s header around another records section saying `count` records, with a right CRC-32C."""
    import struct

    from sparklog.records.batch import HEADER_SIZE, compute_crc

    whole = bytearray(batch[:HEADER_SIZE]) + section
    struct.pack_into(">i", whole, 8, len(whole) - 12)
    struct.pack_into(">i", whole, 23, count - 1)
    struct.pack_into(">i", whole, HEADER_SIZE - 4, count)
    struct.pack_into(">I", whole, 17, compute_crc(whole))
    return bytes(whole)


def test_a_produce_whose_crc_is_right_but_whose_records_do_not_parse_is_refused_and_nothing_is_stored(one, zk):
    """Stored, such a batch would break every consumer of the partition (found by a raw Produce). Kafka's
    LogValidator iterates a client's records and answers INVALID_RECORD; a wrong CRC stays CORRUPT_MESSAGE."""
    from kafka import KafkaConsumer, TopicPartition

    from sparklog.coordination import topics as registry
    from sparklog.records.batch import HEADER_SIZE, build_batch
    from sparklog.records.compression import compress

    broker, topic = one.brokers[1], "malformed"
    registry.create_topic(zk, topic, 1, 1)
    good = build_batch([(b"k%d" % i, b"v%d" % i, (("h", b"x"),), None) for i in range(3)])
    deadline = time.monotonic() + 30
    while (outcome := _produce(broker, topic, good))[0] != 0:  # until the broker serves it
        assert time.monotonic() < deadline, outcome
        time.sleep(0.1)
    zipped = build_batch([(None, b"z", (), None)], compression="gzip")
    hostile = {
        "garbage varints": _resigned(good, b"\xff" * 40, 3),
        "a record count past its records": _resigned(good, good[HEADER_SIZE:], 4),
        "gzip that does not decompress": _resigned(zipped, b"\x1f\x8b" + bytes(30), 1),
        "gzip of garbage": _resigned(zipped, compress(1, b"\xff" * 40), 1),
    }
    for name, records in hostile.items():
        code, _, message = _produce(broker, topic, records)
        assert code == INVALID_RECORD and "malformed" in message, (name, code, message)
    flipped = bytearray(hostile["garbage varints"])
    flipped[-1] ^= 1
    assert _produce(broker, topic, bytes(flipped))[0] == CORRUPT_MESSAGE
    assert _produce(broker, topic, good)[:2] == (0, 3)  # nothing of the refused batches took an offset
    consumer = KafkaConsumer(bootstrap_servers=f"{broker.host}:{broker.port}", group_id=None,
                             enable_auto_commit=False, check_crcs=True, consumer_timeout_ms=10_000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got = [(r.offset, r.value, r.headers) for _, r in zip(range(6), consumer)]
    finally:
        consumer.close()
    assert got == [(i, b"v%d" % (i % 3), [("h", b"x")]) for i in range(6)]
    assert broker.statistics()["server"]["handler_errors"] == 0


def _produce_partitions(broker, topic: str, records: dict[int, bytes]) -> dict[int, tuple[int, int, str | None]]:
    """One raw Produce v8 (acks=1) of several partitions (the broker's general path): per partition as _produce."""
    from support.wire import request
    from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData

    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=p, records=r) for p, r in records.items()])])
    parts = request(broker.host, broker.port, ApiKey.PRODUCE, 8, body).responses[0].partition_responses
    return {p.index: (p.error_code, p.base_offset, p.error_message) for p in parts}


def test_kafkas_produce_refusals_an_idempotent_batch_without_a_sequence_log_append_time(one, zk):
    """Kafka's LogValidator (a batch with a producer id has a baseSequence >= 0: INVALID_RECORD; a client's
    LogAppendTime batch without a timestamp: INVALID_TIMESTAMP), with Kafka's messages, nothing of the refused
    set stored, on the one-partition path and the general one; the broker keeps serving. A record set of
    several batches (Kafka refuses it from v3 on) is taken whole, batch by batch: sparklog's producer sends one."""
    from sparklog.coordination import topics as registry
    from sparklog.records.batch import build_batch

    broker, topic = one.brokers[1], "refusals"
    registry.create_topic(zk, topic, 2, 1)
    good = build_batch([(b"k", b"v", (), None)])
    deadline = time.monotonic() + 30
    while (outcome := _produce(broker, topic, good))[0] != 0:
        assert time.monotonic() < deadline, outcome
        time.sleep(0.1)
    two = good + build_batch([(b"k", b"w", (), None)])
    no_sequence = build_batch([(b"k", b"v", (), None)], producer_id=5, producer_epoch=0, base_sequence=-1)
    assert _produce(broker, topic, two)[:2] == (0, 1)  # offsets 1 and 2
    code, _, message = _produce(broker, topic, no_sequence)
    assert code == INVALID_RECORD and "Invalid sequence number -1" in message, (code, message)
    untimed = build_batch([(b"k", b"v", (), -1)], timestamp_type=1)  # LogAppendTime, maxTimestamp -1
    code, _, message = _produce(broker, topic, untimed)
    assert code == INVALID_TIMESTAMP and "should not set timestamp type to LogAppendTime" in message, (code, message)
    both = _produce_partitions(broker, topic, {0: two, 1: no_sequence})
    assert both[0][:2] == (0, 3) and both[1][0] == INVALID_RECORD, both
    assert _produce(broker, topic, good)[:2] == (0, 5)  # nothing refused took an offset
    assert _produce_partitions(broker, topic, {1: good})[1][:2] == (0, 0)
    assert broker.statistics()["server"]["handler_errors"] == 0


def test_every_background_service_has_an_owner_and_none_outlives_it(one):
    """services.py: the running broker's background services, in start order, each with the threads it started;
    a clean stop closes them all and leaves no thread of theirs running, and no background thread failed."""
    broker = one.brokers[1]
    services = broker.statistics()["services"]
    assert list(services) == ["log dir locks", "zookeeper", "logs", "cleaner reporter", "executor", "partitions",
                              "registration", "controller"]
    assert {s["state"] for s in services.values()} == {"running"}
    for name in ("zookeeper", "logs", "cleaner reporter", "partitions", "registration", "controller"):
        assert services[name]["threads"], name
    assert broker.stop() == 0
    log = broker.out_path.read_text(errors="replace")
    assert "still running after its service closed" not in log
    assert "background service" not in log and "error closing" not in log
