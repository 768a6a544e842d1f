"""Replication's data path with three real brokers and a real ZooKeeper; leadership is moved by writing the
partition state znodes, exactly as the controller does: followers converge byte-identical, acks=all with
min.insync.replicas=2 is acknowledged only once replicated and refused below it, and a KIP-101 divergent
tail is truncated exactly."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from support.cluster import Cluster, wait_until

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
LAG_MS = 1500  # replica.lag.time.max.ms, short so that ISR changes happen within the test


@pytest.fixture
def three(request, zk_connect, tmp_path):
    c = Cluster(zk_connect, tmp_path, brokers=3, overrides={
        "zookeeper.session.timeout.ms": "6000", "log.flush.interval.ms": "20",
        "replica.lag.time.max.ms": str(LAG_MS), "auto.create.topics.enable": "false"})
    request.addfinalizer(c.stop)
    return c.start()


def _create(zk, name, partitions=1, config=None):
    from sparklog.coordination import topics

    return topics.create_topic(zk, name, partitions, 3, config or {}, live_broker_ids=[1, 2, 3])


def _wait(predicate, what, timeout=TIMEOUT_S):
    return wait_until(predicate, what, timeout)


def _segment_bytes(cluster, broker_id, topic, partition=0) -> bytes:
    """The partition's whole log as the broker's files hold it (every segment, in order)."""
    directory = Path(cluster.brokers[broker_id].log_dir) / f"{topic}-{partition}"
    names = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    return b"".join((directory / n).read_bytes() for n in names)


def _producer(cluster, acks="all", **extra):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks, "linger.ms": 2,
                     "message.timeout.ms": 20000, **extra})


def _produce(producer, topic, values):
    """Produce and flush; return (acknowledged values, errors by name)."""
    acked, failed = [], []

    def report(err, msg):
        (failed if err else acked).append(err.name() if err else msg.value())

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=report)
    producer.flush(TIMEOUT_S)
    return acked, failed


def _produce_kafka_python(cluster, topic, values):
    """kafka-python with acks=all, in order (one in flight); every send must be acknowledged."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=2,
                             max_in_flight_requests_per_connection=1)
    try:
        futures = [producer.send(topic, value=v, partition=0) for v in values]
        producer.flush(TIMEOUT_S)
        assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
    finally:
        producer.close(TIMEOUT_S)
    return values


def _consume_all(cluster, topic, partition=0):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"check-{time.monotonic_ns()}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().name() == "_PARTITION_EOF":
                    return got
                continue
            got.append((msg.offset(), msg.value()))
        raise AssertionError("consumer did not reach the end")
    finally:
        consumer.close()


def _state(zk, topic, partition=0):
    from sparklog.coordination import topics

    return topics.partition_state(zk, topic, partition)


def _move_leader(zk, topic, leader, isr=None, partition=0):
    """What the controller does: a new leader, a bumped leader epoch, a version-checked write."""
    from sparklog.coordination import topics

    state = topics.partition_state(zk, topic, partition)
    new = topics.PartitionState(leader, tuple(isr or state.isr), state.leader_epoch + 1, state.controller_epoch)
    return topics.set_partition_state(zk, topic, partition, new, expected_version=state.zk_version)


def test_followers_converge_byte_identical_and_acks_all_is_replicated(three, zk):
    _create(zk, "rep", config={"min.insync.replicas": "2"})
    leader = _state(zk, "rep").leader
    values = [b"value-%d" % i for i in range(300)]
    acked, failed = _produce(_producer(three), "rep", values)
    assert failed == [] and sorted(acked) == sorted(values)
    values += _produce_kafka_python(three, "rep", [b"kp-%d" % i for i in range(100)])
    logs = _wait(lambda: (lambda b: b if len(set(b)) == 1 and b[0] else None)(
        [_segment_bytes(three, i, "rep") for i in (1, 2, 3)]), "three identical logs")
    assert len(logs[0]) > 300 * 7
    assert [v for _, v in _consume_all(three, "rep")] == values
    # the leader epoch 0 is in every batch header, and in each replica's leader-epoch checkpoint
    for broker_id in (1, 2, 3):
        checkpoint = Path(three.brokers[broker_id].log_dir) / "rep-0" / "leader-epoch-checkpoint"
        assert checkpoint.read_text().split("\n")[:3] == ["0", "1", "0 0"], broker_id
    assert _state(zk, "rep").leader == leader


def test_acks_all_refused_without_followers_while_acks_one_works(three, zk):
    _create(zk, "nisr", config={"min.insync.replicas": "2"})
    leader = _state(zk, "nisr").leader
    followers = [b for b in (1, 2, 3) if b != leader]
    acked, failed = _produce(_producer(three), "nisr", [b"before"])
    assert acked == [b"before"] and failed == []
    for broker_id in followers:
        os.kill(three.brokers[broker_id].pid, signal.SIGSTOP)
    try:
        # the leader drops the silent followers from the ISR after replica.lag.time.max.ms
        _wait(lambda: _state(zk, "nisr").isr == (leader,), "the ISR to shrink to the leader")
        acked, failed = _produce(_producer(three, **{"message.timeout.ms": 3000, "retries": 0}), "nisr",
                                 [b"refused-%d" % i for i in range(5)])
        assert acked == [] and set(failed) == {"NOT_ENOUGH_REPLICAS"}
        acked, failed = _produce(_producer(three, acks="1"), "nisr", [b"acks-one"])
        assert acked == [b"acks-one"] and failed == []
    finally:
        for broker_id in followers:
            os.kill(three.brokers[broker_id].pid, signal.SIGCONT)
    _wait(lambda: len(_state(zk, "nisr").isr) == 3, "the followers to rejoin the ISR")
    acked, failed = _produce(_producer(three), "nisr", [b"after"])
    assert acked == [b"after"] and failed == []
    assert [v for _, v in _consume_all(three, "nisr")] == [b"before", b"acks-one", b"after"]
    assert len({_segment_bytes(three, i, "nisr") for i in (1, 2, 3)}) == 1


def test_divergent_tail_is_truncated_exactly(three, zk):
    """KIP-101: the leader appends (acks=1) what its followers never fetch, and dies; a follower becomes
    leader and takes new writes; the old leader returns as a follower, cuts exactly its unreplicated tail
    and copies the new leader's log."""
    _create(zk, "div")
    old = _state(zk, "div").leader
    acked, failed = _produce(_producer(three), "div", [b"common-%d" % i for i in range(50)])
    assert failed == []
    _wait(lambda: len({_segment_bytes(three, i, "div") for i in (1, 2, 3)}) == 1, "replicated prefix")
    followers = [b for b in (1, 2, 3) if b != old]
    for broker_id in followers:
        three.brokers[broker_id].kill()
    acked, failed = _produce(_producer(three, acks="1"), "div", [b"divergent-%d" % i for i in range(20)])
    assert len(acked) == 20
    three.brokers[old].kill()
    for broker_id in followers:
        three.brokers[broker_id].start()
    _move_leader(zk, "div", followers[0], isr=followers)
    _wait(lambda: _produce(_producer(three, acks="1"), "div", [b"new-leader"])[0], "the new leader to accept")
    three.brokers[old].start()
    expected = [b"common-%d" % i for i in range(50)] + [b"new-leader"]
    _wait(lambda: len({_segment_bytes(three, i, "div") for i in (1, 2, 3)}) == 1, "the old leader to converge")
    assert [v for _, v in _consume_all(three, "div")] == expected
    assert b"divergent" not in _segment_bytes(three, old, "div")
    checkpoint = Path(three.brokers[old].log_dir) / "div-0" / "leader-epoch-checkpoint"
    assert checkpoint.read_text().split("\n")[:4] == ["0", "2", "0 0", "1 50"]


def test_leader_killed_and_replaced_loses_no_acknowledged_write(three, zk):
    """A short hard bounce: a steady acks=all producer (min.insync.replicas=2); the leader is SIGKILLed, a
    live ISR member is made leader by a state write (what the controller does), the victim restarts as a
    follower and rejoins. Every acknowledged message is read back, and the three logs end byte-identical.
    (The long version, with the controller electing, is the controller's fault harness.)"""
    import threading

    _create(zk, "bounce", config={"min.insync.replicas": "2"})
    acked, stop = [], threading.Event()

    def produce_steadily():
        producer = _producer(three, retries=1000, **{"retry.backoff.ms": 100, "message.timeout.ms": 60000})
        i = 0
        while not stop.is_set():
            value = b"m-%d" % i
            producer.produce("bounce", value=value, partition=0,
                             on_delivery=lambda err, msg: err is None and acked.append(msg.value()))
            producer.poll(0.01)
            i += 1
        producer.flush(60)

    writer = threading.Thread(target=produce_steadily)
    writer.start()
    try:
        for _ in range(2):
            _wait(lambda: len(_state(zk, "bounce").isr) == 3, "a full ISR", timeout=60)
            before = len(acked)
            _wait(lambda: len(acked) > before + 20, "acknowledged writes")
            state = _state(zk, "bounce")
            three.brokers[state.leader].kill()
            survivors = [b for b in state.isr if b != state.leader]
            _move_leader(zk, "bounce", survivors[0], isr=survivors)
            three.brokers[state.leader].start()
        _wait(lambda: len(_state(zk, "bounce").isr) == 3, "a full ISR", timeout=60)
        before = len(acked)
        _wait(lambda: len(acked) > before + 20, "acknowledged writes after the last bounce")
    finally:
        stop.set()
        writer.join(90)
    consumed = [v for _, v in _consume_all(three, "bounce")]
    assert set(acked) <= set(consumed), f"{len(set(acked) - set(consumed))} acknowledged writes lost"
    _wait(lambda: len({_segment_bytes(three, i, "bounce") for i in (1, 2, 3)}) == 1, "identical logs")


def test_follower_with_a_corrupt_tail_recovers_and_refetches(three, zk):
    _create(zk, "torn", config={"min.insync.replicas": "2"})
    leader = _state(zk, "torn").leader
    acked, failed = _produce(_producer(three), "torn", [b"first-%d" % i for i in range(100)])
    assert failed == []
    _wait(lambda: len({_segment_bytes(three, i, "torn") for i in (1, 2, 3)}) == 1, "replicated")
    victim = next(b for b in (1, 2, 3) if b != leader)
    three.brokers[victim].kill()
    directory = Path(three.brokers[victim].log_dir) / "torn-0"
    segment = directory / sorted(n for n in os.listdir(directory) if n.endswith(".log"))[-1]
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0xFF  # a flipped byte in the last batch: its CRC fails
    segment.write_bytes(bytes(data))
    acked, failed = _produce(_producer(three), "torn", [b"second-%d" % i for i in range(50)])
    assert failed == []  # the other follower keeps min.insync.replicas
    three.brokers[victim].start()
    _wait(lambda: len({_segment_bytes(three, i, "torn") for i in (1, 2, 3)}) == 1, "the victim to converge")
    assert [v for _, v in _consume_all(three, "torn")] == (
        [b"first-%d" % i for i in range(100)] + [b"second-%d" % i for i in range(50)])
