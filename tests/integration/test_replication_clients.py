"""Real clients against three brokers and a real ZooKeeper: an acks=all acknowledgement means the write is
visible (issue 14, under every flush setting); Metadata reports replicas, ISR, offline replicas and leader
epochs; Fetch and ListOffsets are fenced by `current_leader_epoch`; sparklog's producer and consumer ride over
a SIGKILLed leader with no application error (the controller elects from the ISR, the clients refresh
metadata and retry).

One cluster for the module: a test that kills a broker restarts it and waits until the ISR is whole again.
"""

from __future__ import annotations

import threading
import time

import pytest

from support import wire
from support.cluster import wait_until
from support.zookeeper import failover_session_s

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 3000  # a killed broker's partitions move after this (and the controller's moment)
LAG_MS = 1500  # replica.lag.time.max.ms: ISR changes within the test
TIMEOUT_S = 30
NEVER_FLUSH_MS = str(10**9)  # flush.ms: the log's own flusher never makes a write visible during the test


@pytest.fixture
def zk(three_zk):
    return three_zk


def _wait(predicate, what, timeout=TIMEOUT_S):
    return wait_until(predicate, what, timeout)


def _create(zk, name, replication_factor=3, config=None):
    from sparklog.coordination import topics

    topics.create_topic(zk, name, 1, replication_factor, config or {}, live_broker_ids=[1, 2, 3])
    return _wait(lambda: _leader_serves(zk, name), f"a leader of {name}")


def _state(zk, topic):
    from sparklog.coordination import topics

    return topics.partition_state(zk, topic, 0)


def _leader_serves(zk, topic):
    state = _state(zk, topic)
    return state if state.leader > 0 else None


def _leads_by_its_own_metadata(broker, topic) -> bool:
    """Does `broker`'s own Metadata answer name it the leader of partition 0 of `topic`?"""
    from sparklog.protocol import ApiKey
    from sparklog.protocol.metadata import MetadataRequest, MetadataRequestTopic
    from support.wire import request

    body = MetadataRequest(topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)
    answer = request(broker.host, broker.port, ApiKey.METADATA, 12, body).topics[0]
    return any(p.partition_index == 0 and p.leader_id == broker.broker_id for p in answer.partitions)


def _full_isr(zk, topic, timeout=60):
    return _wait(lambda: (lambda s: s if len(s.isr) == 3 and s.leader > 0 else None)(_state(zk, topic)),
                 f"the whole ISR of {topic}", timeout)


@pytest.mark.parametrize("replication_factor", [1, 3])
def test_an_acks_all_delivery_report_is_visible_to_list_offsets_and_consumers_at_once(three, zk,
                                                                                        replication_factor):
    """Issue 14: flush.ms far away, so with RF 1 the flushed-only HW moves only when acks=all forces an
    fsync; with RF 3 when the followers have it. Either way the delivery report comes after the HW."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = f"visible-rf{replication_factor}"
    _create(zk, topic, replication_factor, {"flush.ms": NEVER_FLUSH_MS, "min.insync.replicas": "1"})
    producer = Producer({"bootstrap.servers": three.bootstrap, "acks": "all", "linger.ms": 0})
    lister = Consumer({"bootstrap.servers": three.bootstrap, "group.id": "lister"})
    reader = Consumer({"bootstrap.servers": three.bootstrap, "group.id": "reader", "enable.partition.eof": True})
    try:
        for i in range(10):
            reports = []
            producer.produce(topic, b"m-%d" % i, partition=0, on_delivery=lambda err, msg: reports.append((err, msg)))
            producer.flush(TIMEOUT_S)
            (err, msg), = reports
            assert err is None and msg.offset() == i
            high = lister.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)[1]  # ListOffsets
            assert high == i + 1, f"the HW does not cover acknowledged offset {i}"
            reader.assign([TopicPartition(topic, 0, i)])
            got = reader.poll(TIMEOUT_S)
            assert got is not None and got.error() is None and (got.offset(), got.value()) == (i, b"m-%d" % i)
    finally:
        lister.close()
        reader.close()


def test_metadata_reports_replicas_isr_offline_replicas_and_leader_epochs(three, zk):
    """kafka-python's Metadata (v7+ carries leader_epoch) follows the controller's state of a partition whose
    follower is killed, then back."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaConnectionError

    state = _create(zk, "described")
    victim = next(b for b in (1, 2, 3) if b != state.leader)
    admin = KafkaAdminClient(bootstrap_servers=three.bootstrap.split(","))
    unknown = {"leader_id": -1, "offline_replicas": None, "isr_nodes": []}  # not known (yet): ask again

    def partition():
        try:
            (topic,) = admin.describe_topics(["described"])
        except KafkaConnectionError:  # it asked the killed broker: ask again
            return unknown
        return topic["partitions"][0] if topic["partitions"] else unknown

    try:
        first = _wait(lambda: (lambda p: p if p["leader_id"] == state.leader else None)(partition()),
                      "the brokers' metadata to hold the new topic")
        assert (first["leader_id"], first["leader_epoch"]) == (state.leader, state.leader_epoch)
        assert sorted(first["replica_nodes"]) == [1, 2, 3] and sorted(first["isr_nodes"]) == [1, 2, 3]
        assert first["offline_replicas"] == []
        three.brokers[victim].kill()
        try:
            down = _wait(lambda: (lambda p: p if p["offline_replicas"] == [victim] and victim not in p["isr_nodes"]
                                  else None)(partition()), "metadata to show the follower offline")
            assert down["leader_id"] == state.leader and down["leader_epoch"] == _state(zk, "described").leader_epoch
        finally:
            three.brokers[victim].start()
        _full_isr(zk, "described")
        back = _wait(lambda: (lambda p: p if len(p["isr_nodes"]) == 3 else None)(partition()), "the ISR in metadata")
        assert back["offline_replicas"] == []
    finally:
        admin.close()


def test_fetch_and_list_offsets_are_fenced_by_current_leader_epoch(three, zk):
    """A client behind the leader's epoch is FENCED_LEADER_EPOCH, one ahead of it UNKNOWN_LEADER_EPOCH (it
    knows a newer leader than this broker does), the current epoch or none (-1) is served."""
    from sparklog.protocol import (FetchPartition, FetchRequest, FetchTopic, ListOffsetsPartition,
                                   ListOffsetsRequest, ListOffsetsTopic)
    from sparklog.protocol import errors

    state = _create(zk, "fenced")
    broker = three.brokers[state.leader]

    def codes(epoch):
        fetch = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic="fenced", partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024, current_leader_epoch=epoch)])])
        listed = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsTopic(name="fenced", partitions=[
            ListOffsetsPartition(partition_index=0, timestamp=-1, current_leader_epoch=epoch)])])
        return (wire.request(broker.host, broker.port, 1, 11, fetch).responses[0].partitions[0].error_code,
                wire.request(broker.host, broker.port, 2, 5, listed).topics[0].partitions[0].error_code)

    epoch = state.leader_epoch
    _wait(lambda: codes(-1) == (0, 0), "the leader to serve the new topic")
    assert codes(epoch) == (0, 0)
    fenced, unknown = errors.FencedLeaderEpochError.errno, errors.UnknownLeaderEpochError.errno
    assert codes(epoch + 1) == (unknown, unknown)
    if epoch > 0:
        assert codes(epoch - 1) == (fenced, fenced)
    # a preferred-leader-style bump of the epoch with the same leader: the old epoch is now fenced
    from sparklog.coordination import topics

    bumped = topics.PartitionState(state.leader, state.isr, epoch + 1, state.controller_epoch)
    topics.set_partition_state(zk, "fenced", 0, bumped, expected_version=state.zk_version)
    _wait(lambda: codes(epoch) == (fenced, fenced), "the leader to move to the new epoch")
    assert codes(epoch + 1) == (0, 0)


def _kill_leader_and_restart(three, zookeeper, zk, topic, before_restart):
    """SIGKILL the partition's leader, wait for the controller's new leader (within the leader's negotiated
    session, checked to be SESSION_TIMEOUT_MS, plus TIMEOUT_S), run `before_restart`, restart."""
    state = _full_isr(zk, topic)
    session_s = failover_session_s(zookeeper, zk, state.leader, SESSION_TIMEOUT_MS)
    three.brokers[state.leader].kill()
    try:
        _wait(lambda: (lambda s: s.leader not in (-1, state.leader) and s)(_state(zk, topic)), "a new leader",
              session_s + TIMEOUT_S)
        before_restart()
    finally:
        three.brokers[state.leader].start()
    _full_isr(zk, topic)


def test_sparklog_producer_fails_over_with_no_error(three, zookeeper, zk):
    from sparklog.client import Producer

    _create(zk, "producer-failover", config={"min.insync.replicas": "2"})
    futures, stop = [], threading.Event()
    with Producer(three.bootstrap, acks="all", **{"delivery.timeout.ms": 60_000, "linger.ms": 2}) as producer:
        def send_steadily():
            i = 0
            while not stop.is_set():
                futures.append(producer.send("producer-failover", b"p-%d" % i, partition=0))
                i += 1
                time.sleep(0.005)

        sender = threading.Thread(target=send_steadily)
        sender.start()
        try:
            _wait(lambda: sum(f.done() for f in futures[:50]) == 50 and len(futures) > 50, "first acknowledgements")
            count = len(futures)
            _kill_leader_and_restart(three, zookeeper, zk, "producer-failover",
                                     lambda: _wait(lambda: len(futures) > count + 50 and all(
                                                       f.done() for f in futures[count:count + 50]),
                                                   "writes sent after the kill to be answered"))
        finally:
            stop.set()
            sender.join(TIMEOUT_S)
        producer.flush(60)
    acknowledged = {f.get(0).offset: b"p-%d" % i for i, f in enumerate(futures)}  # raises a failed delivery
    assert len(acknowledged) == len(futures)
    # every acknowledged write is read at its offset (retried batches may be reordered or, without
    # idempotence, appended twice: Kafka's at-least-once with several requests in flight)
    consumed = _consumed(three, "producer-failover", max(acknowledged) + 1)
    assert {offset: consumed.get(offset) for offset in acknowledged} == acknowledged


def _consumed(three, topic, end):
    """offset -> value of the partition from 0 up to `end`."""
    from sparklog.client import Consumer

    with Consumer(three.bootstrap, **{"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0)])
        records, deadline = {}, time.monotonic() + TIMEOUT_S
        while len(records) < end and time.monotonic() < deadline:
            records.update((r.offset, r.value) for r in consumer.poll(1.0))
        return records


def test_sparklog_consumer_fails_over_with_no_error(three, zookeeper, zk):
    from confluent_kafka import Producer

    from sparklog.client import Consumer

    _create(zk, "consumer-failover", config={"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": three.bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 60_000})
    sent = [b"c-%d" % i for i in range(2000)]

    def produce(values):
        for value in values:
            producer.produce("consumer-failover", value, partition=0)
            producer.poll(0)
        assert producer.flush(60) == 0

    produce(sent[:1000])
    got = []
    with Consumer(three.bootstrap, **{"auto.offset.reset": "earliest", "max.poll.records": 100}) as consumer:
        consumer.assign([("consumer-failover", 0)])
        _wait(lambda: got.extend(r.value for r in consumer.poll(0.2)) or len(got) >= 300, "the first records")

        def read_and_write_across():
            produce(sent[1000:])  # acks=all, to the new leader
            _wait(lambda: got.extend(r.value for r in consumer.poll(0.2)) or len(got) >= 1500, "reading on")

        _kill_leader_and_restart(three, zookeeper, zk, "consumer-failover", read_and_write_across)
        _wait(lambda: got.extend(r.value for r in consumer.poll(0.2)) or len(got) >= len(sent), "every record")
    assert got == sent



def test_kafka_python_acks_all_refused_with_both_followers_sigkilled_and_acks_one_works(three, zookeeper, zk):
    """Issue 9's NOT_ENOUGH_REPLICAS with kafka-python: both followers SIGKILLed (not SIGSTOPped, whose open
    connections hang metadata requests), the controller shrinks the ISR to the leader, every acks=all send
    fails with NotEnoughReplicasError and none of them ever reaches a consumer; acks=1 still works; the
    followers return and acks=all works again."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.errors import NotEnoughReplicasError

    topic = "kp-not-enough"
    leader = _create(zk, topic, config={"min.insync.replicas": "2"}).leader
    followers = [b for b in (1, 2, 3) if b != leader]
    bootstrap = three.brokers[leader].address  # a live broker to ask metadata of while the others are dead
    # the sends below do not retry: the leader itself must serve the topic first (ZooKeeper names it before its
    # watch fires, and another broker's metadata may name it sooner: a fresh-clone run's first send got
    # UNKNOWN_TOPIC_OR_PARTITION from a leader that had not yet learned the topic)
    _wait(lambda: _leads_by_its_own_metadata(three.brokers[leader], topic), f"broker {leader} leading {topic}")

    def send(acks, values, retries=0):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, retries=retries, linger_ms=0,
                                 request_timeout_ms=5000, max_block_ms=10_000)
        try:
            futures = [producer.send(topic, v, partition=0) for v in values]
            producer.flush(TIMEOUT_S)
            return [f.exception if f.failed() else f.value.offset for f in futures]
        finally:
            producer.close(TIMEOUT_S)

    assert send("all", [b"before"]) == [0]
    session_s = max(failover_session_s(zookeeper, zk, broker_id, SESSION_TIMEOUT_MS) for broker_id in followers)
    for broker_id in followers:
        three.brokers[broker_id].kill()
    try:
        _wait(lambda: _state(zk, topic).isr == (leader,), "the ISR to shrink to the leader", session_s + TIMEOUT_S)
        refused = send("all", [b"refused-%d" % i for i in range(5)])
        assert all(isinstance(r, NotEnoughReplicasError) for r in refused), refused
        assert send(1, [b"acks-one"]) == [1]
    finally:
        for broker_id in followers:
            three.brokers[broker_id].start()
    _full_isr(zk, topic)
    assert send("all", [b"after"], retries=5) == [2]
    consumer = KafkaConsumer(bootstrap_servers=three.bootstrap, enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        assert [m.value for m in consumer] == [b"before", b"acks-one", b"after"]
    finally:
        consumer.close()
