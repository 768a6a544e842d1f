"""Replication's data path with three real brokers and a real ZooKeeper (issue 9's "What must be shown", short
versions): followers converge byte-identical; acks=all with min.insync.replicas=2 is acknowledged only once
replicated and refused below it (NOT_ENOUGH_REPLICAS, none of it ever read); a KIP-101 divergent tail is
truncated exactly (leadership moved by a state write, as the controller does); a hard bounce of leaders and
the controller under a real acks=all producer loses nothing and leaves identical logs.

One cluster for the module: every test leaves all three brokers running (a killed one is restarted)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from support.cluster import wait_until
from support.fault_run import consume, final_read
from support.history import History
from support.zookeeper import failover_session_s

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
LAG_MS = 1500  # replica.lag.time.max.ms, short so that ISR changes happen within the test
SESSION_TIMEOUT_MS = 4000  # a SIGKILLed broker's partitions are re-elected after this


@pytest.fixture
def zk(three_zk):
    return three_zk


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


def _try_move_leader(zk, topic, leader, isr=None, partition=0):
    """`_move_leader`, or None when the controller wrote the state between the read and the write."""
    from sparklog.coordination import topics

    try:
        return _move_leader(zk, topic, leader, isr, partition)
    except topics.PartitionStateConflict:
        return None


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
    # the controller has taken the partition offline (a bumped epoch) when the last ISR member died
    moved = _wait(lambda: _try_move_leader(zk, "div", followers[0], isr=followers), "the leader move")
    _wait(lambda: _produce(_producer(three, acks="1"), "div", [b"new-leader"])[0], "the new leader to accept")
    three.brokers[old].start()
    expected = [b"common-%d" % i for i in range(50)] + [b"new-leader"]
    _wait(lambda: len({_segment_bytes(three, i, "div") for i in (1, 2, 3)}) == 1, "the old leader to converge")
    assert [v for _, v in _consume_all(three, "div")] == expected
    assert b"divergent" not in _segment_bytes(three, old, "div")
    # the old leader's epoch cache is the new leader's: epoch 0 up to 50, then the epoch "new-leader" was
    # appended in (the controller may have elected followers[0] before our move: epoch 1 or 2)
    entries = [_epoch_entries(three, b, "div") for b in (old, followers[0])]
    assert entries[0] == entries[1][:2] and entries[0][0] == (0, 0)
    assert entries[0][1][1] == 50 and 1 <= entries[0][1][0] <= moved.leader_epoch


def _epoch_entries(cluster, broker_id, topic):
    """(epoch, start offset) pairs of a replica's leader-epoch checkpoint (version, count, then entries)."""
    lines = (Path(cluster.brokers[broker_id].log_dir) / f"{topic}-0" / "leader-epoch-checkpoint").read_text().split()
    return [(int(e), int(o)) for e, o in zip(lines[2::2], lines[3::2])]


BOUNCE_PARTITIONS = 3
BOUNCES = 3  # SIGKILL cycles in the suite; scripts/fault_run.py runs the long version


def test_hard_bounce_of_leaders_and_the_controller_loses_no_acknowledged_write(three, zookeeper, zk):
    """Issue 9's hard bounce, short: RF 3, min.insync.replicas=2, a steady confluent-kafka acks=all producer
    (retries, no idempotence) and a live consumer; a partition leader is SIGKILLed, the controller elects
    from the ISR, the victim restarts and rejoins, BOUNCES times, the controller itself the second victim.
    Then acknowledged - consumed = 0, no offset is read with two values (History), and each partition's three
    logs are byte-identical. A retry's second copy is legal here (no idempotence) and not counted."""
    from confluent_kafka import Producer

    from sparklog.coordination.controller_election import read_controller

    _create(zk, "bounce", BOUNCE_PARTITIONS, config={"min.insync.replicas": "2"})
    history, stop, errors = History(), threading.Event(), []

    def produce_steadily():
        producer = Producer({"bootstrap.servers": three.bootstrap, "acks": "all", "linger.ms": 2,
                             "retries": 1_000_000, "retry.backoff.ms": 100, "message.timeout.ms": 60_000,
                             "enable.idempotence": False})

        def delivered(err, msg):
            if err is None:
                history.record_ack(msg.topic(), msg.partition(), msg.offset(), msg.value())
            else:
                errors.append(err.name())

        while not stop.is_set():
            producer.produce("bounce", history.next_value(), on_delivery=delivered)
            producer.poll(0.005)
        producer.flush(60)

    def acked():
        return history.acknowledged()

    workers = [threading.Thread(target=produce_steadily),
               threading.Thread(target=consume, args=(three, "bounce", BOUNCE_PARTITIONS, history, "live", stop))]
    for worker in workers:
        worker.start()
    try:
        for cycle in range(BOUNCES):
            states = _wait(lambda: _full_isr(zk, "bounce"), "a full ISR", timeout=60)
            before = acked()
            _wait(lambda: acked() > before + 20, "acknowledged writes")
            victim = read_controller(zk) if cycle == 1 else states[cycle % BOUNCE_PARTITIONS].leader
            session_s = failover_session_s(zookeeper, zk, victim, SESSION_TIMEOUT_MS)
            three.brokers[victim].kill()
            _wait(lambda: all(s.leader not in (victim, -1) for s in _states(zk, "bounce").values()),
                  "the controller to move the victim's leaderships", timeout=session_s + TIMEOUT_S)
            before = acked()
            _wait(lambda: acked() > before + 20, "acknowledged writes on the successors")
            three.brokers[victim].start()
        _wait(lambda: _full_isr(zk, "bounce"), "a full ISR", timeout=60)
    finally:
        stop.set()
        for worker in workers:
            worker.join(90)
    final_read(three, "bounce", BOUNCE_PARTITIONS, history)  # to every partition's end, or it raises
    report = history.check()
    assert report.ok, str(report)
    assert errors == [] and report.acknowledged > 100
    for p in range(BOUNCE_PARTITIONS):
        _wait(lambda: len({_segment_bytes(three, i, "bounce", p) for i in (1, 2, 3)}) == 1, f"identical logs of {p}")


def _states(zk, topic):
    from sparklog.coordination import topics

    return topics.get_topic(zk, topic).states


def _full_isr(zk, topic):
    states = _states(zk, topic)
    return states if all(len(s.isr) == 3 and s.leader > 0 for s in states.values()) else None


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
